"""NodePorts (PreFilter, Filter): a host port (protocol, port) can be bound once per
node; ``0.0.0.0`` conflicts with every address, a specific address with itself and
``0.0.0.0``. Pods without host ports skip the Filter."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from nodeagent.scheduler import api
from nodeagent.scheduler.framework import (
    POD_DELETE_EVENTS,
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot, Mask, NodeIndices

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"
BIND_ALL = "0.0.0.0"


def conflicts(used: Iterable[api.HostPort], wanted: api.HostPort) -> bool:
    if wanted.port <= 0:
        return False
    for port in used:
        if port.port != wanted.port or port.protocol != wanted.protocol:
            continue
        if wanted.ip == BIND_ALL or port.ip in (BIND_ALL, wanted.ip):
            return True
    return False


def fits(used: Iterable[api.HostPort], wanted: Iterable[api.HostPort]) -> bool:
    used = list(used)
    return not any(conflicts(used, port) for port in wanted)


class NodePorts:
    name = NAME

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        return None, api.SUCCESS if pod.host_ports else api.SKIP

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        busy = [n for n, used in snapshot.used_ports.items() if not fits(used, pod.host_ports)]
        if not busy:
            return np.ones(len(nodes), dtype=bool)
        result: Mask = ~np.isin(nodes, busy)
        return result

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        if fits(snapshot.used_ports.get(node, ()), pod.host_ports):
            return api.SUCCESS
        return api.unschedulable(REASON)

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """A port conflict is resolved by preempting the pod holding the port."""
        return np.ones(len(nodes), dtype=bool)

    def events_to_register(self) -> Sequence[EventHint]:
        # ports are immutable: only a deletion or a new node frees one
        return (
            EventHint(POD_DELETE_EVENTS, is_schedulable_after_pod_deleted),
            EventHint(frozenset({ClusterEvent.NODE_ADD})),
        )


def is_schedulable_after_pod_deleted(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPodDeleted``: Queue when the deleted pod (bound or
    nominated) held a host port the rejected pod conflicts with."""
    if not old.node_name and not old.nominated_node_name:
        return QueueingHint.QUEUE_SKIP
    if not old.host_ports or fits(old.host_ports, pod.host_ports):
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE


def new(args: Any, handle: Handle) -> NodePorts:
    return NodePorts()
