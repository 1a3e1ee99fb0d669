"""NodeUnschedulable (Filter): cordoned nodes (``spec.unschedulable``) are out unless the
pod tolerates the ``node.kubernetes.io/unschedulable:NoSchedule`` taint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nodeagent.k8s.pressure import Taint
from nodeagent.scheduler import api
from nodeagent.scheduler.framework import (
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    QueueingHint,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot, Mask, NodeIndices

NAME = "NodeUnschedulable"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"

UNSCHEDULABLE_TAINT = Taint(api.TAINT_NODE_UNSCHEDULABLE, api.TaintEffect.NO_SCHEDULE)


class NodeUnschedulable:
    name = NAME
    resource_local = True
    """Filter reads only the node and its resource columns (batched preemption)."""

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        if api.tolerates(pod.tolerations, UNSCHEDULABLE_TAINT):
            return np.ones(len(nodes), dtype=bool)
        return ~snapshot.unschedulable.take(nodes)

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        if not snapshot.nodes[node].unschedulable:
            return api.SUCCESS
        if api.tolerates(pod.tolerations, UNSCHEDULABLE_TAINT):
            return api.SUCCESS
        return api.unschedulable(REASON_UNSCHEDULABLE, unresolvable=True)

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Every rejection of this plugin is UnschedulableAndUnresolvable."""
        return np.zeros(len(nodes), dtype=bool)

    def events_to_register(self) -> Sequence[EventHint]:
        # kube-scheduler registers Node Add|UpdateNodeTaint, counting on the taint the
        # node lifecycle controller sets with spec.unschedulable; the spec change itself
        # is registered too, so a cluster without that controller is not stranded
        node_events = frozenset(
            {
                ClusterEvent.NODE_ADD,
                ClusterEvent.NODE_TAINT_CHANGE,
                ClusterEvent.NODE_SPEC_UNSCHEDULABLE_CHANGE,
            }
        )
        return (
            EventHint(node_events, is_schedulable_after_node_change),
            EventHint(
                frozenset({ClusterEvent.UNSCHEDULED_POD_TOLERATION_CHANGE}),
                self.is_schedulable_after_pod_toleration_change,
            ),
        )

    def is_schedulable_after_pod_toleration_change(
        self, pod: api.Pod, old: Any, new: Any
    ) -> QueueingHint:
        """The rejected pod itself now tolerates the unschedulable taint."""
        if new.uid == pod.uid and api.tolerates(new.tolerations, UNSCHEDULABLE_TAINT):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP


def is_schedulable_after_node_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """A node added schedulable, or uncordoned (``isSchedulableAfterNodeChange``)."""
    if new.unschedulable:
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE if old is None or old.unschedulable else QueueingHint.QUEUE_SKIP


def new(args: Any, handle: Handle) -> NodeUnschedulable:
    return NodeUnschedulable()
