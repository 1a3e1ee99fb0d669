"""NodeUnschedulable (Filter): cordoned nodes (``spec.unschedulable``) are out unless the
pod tolerates the ``node.kubernetes.io/unschedulable:NoSchedule`` taint."""

from __future__ import annotations

from typing import Any

import numpy as np

from nodeagent.k8s.pressure import Taint
from nodeagent.scheduler import api
from nodeagent.scheduler.framework import CycleState, Handle
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


def new(args: Any, handle: Handle) -> NodeUnschedulable:
    return NodeUnschedulable()
