"""NodeName (Filter): a pod that names its node (``spec.nodeName``) fits only there."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nodeagent.scheduler import api
from nodeagent.scheduler.framework import ClusterEvent, CycleState, EventHint, Handle
from nodeagent.scheduler.snapshot import ClusterSnapshot, Mask, NodeIndices

NAME = "NodeName"
REASON = "node(s) didn't match the requested node name"


class NodeName:
    name = NAME
    resource_local = True
    """Filter reads only the node and its resource columns (batched preemption)."""

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        if not pod.node_name:
            return np.ones(len(nodes), dtype=bool)
        result: Mask = nodes == snapshot.index.get(pod.node_name, -1)
        return result

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        if not pod.node_name or pod.node_name == snapshot.names[node]:
            return api.SUCCESS
        return api.unschedulable(REASON, unresolvable=True)

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Every rejection of this plugin is UnschedulableAndUnresolvable."""
        return np.zeros(len(nodes), dtype=bool)

    def events_to_register(self) -> Sequence[EventHint]:
        """Only a new node can be the one the pod names (no hint: always Queue)."""
        return (EventHint(frozenset({ClusterEvent.NODE_ADD})),)


def new(args: Any, handle: Handle) -> NodeName:
    return NodeName()
