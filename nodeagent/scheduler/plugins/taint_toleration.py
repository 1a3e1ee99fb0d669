"""TaintToleration (Filter, PreScore, Score).

Filter: the first ``NoSchedule``/``NoExecute`` taint the pod does not tolerate rejects
the node (unresolvable: preemption cannot remove a taint). Score: the number of
``PreferNoSchedule`` taints not tolerated by the pod's tolerations whose effect is empty
or ``PreferNoSchedule``, normalized in reverse (fewest wins).

Nodes share few distinct taint lists, so each answer is computed once per taint list
and looked up per node.
"""

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
from nodeagent.scheduler.plugins import helpers
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices

NAME = "TaintToleration"
_PRE_SCORE_KEY = f"PreScore{NAME}"

FILTERED_EFFECTS = (api.TaintEffect.NO_SCHEDULE, api.TaintEffect.NO_EXECUTE)


def reason(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def first_untolerated(
    taints: tuple[Taint, ...],
    tolerations: tuple[api.Toleration, ...],
    *,
    comparison_operators: bool = False,
) -> Taint | None:
    for taint in taints:
        if taint.effect in FILTERED_EFFECTS and not api.tolerates(
            tolerations, taint, comparison_operators=comparison_operators
        ):
            return taint
    return None


def intolerable_prefer_no_schedule(
    taints: tuple[Taint, ...],
    tolerations: tuple[api.Toleration, ...],
    comparison_operators: bool = False,
) -> int:
    return sum(
        1
        for taint in taints
        if taint.effect == api.TaintEffect.PREFER_NO_SCHEDULE
        and not api.tolerates(tolerations, taint, comparison_operators=comparison_operators)
    )


def prefer_no_schedule_tolerations(
    tolerations: tuple[api.Toleration, ...],
) -> tuple[api.Toleration, ...]:
    return tuple(t for t in tolerations if t.effect in ("", api.TaintEffect.PREFER_NO_SCHEDULE))


class TaintToleration:
    name = NAME
    resource_local = True
    """Filter reads only the node and its resource columns (batched preemption)."""

    def __init__(self, handle: Handle | None = None) -> None:
        self._compare = (handle or Handle()).features.taint_toleration_comparison_operators
        self._tolerated = helpers.StaticNodeCache[Mask]()
        self._counts = helpers.StaticNodeCache[Int64s]()

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        def per_taint_set() -> Mask:
            return np.array(
                [
                    first_untolerated(t, pod.tolerations, comparison_operators=self._compare)
                    is None
                    for t in snapshot.taint_sets
                ],
                dtype=bool,
            )

        by_set = self._tolerated.get(snapshot, pod.tolerations, per_taint_set)
        result: Mask = by_set.take(snapshot.taint_set.take(nodes))
        return result

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        taint = first_untolerated(
            snapshot.nodes[node].taints, pod.tolerations, comparison_operators=self._compare
        )
        if taint is None:
            return api.SUCCESS
        return api.unschedulable(reason(taint), unresolvable=True)

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Every rejection of this plugin is UnschedulableAndUnresolvable."""
        return np.zeros(len(nodes), dtype=bool)

    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        state.write(_PRE_SCORE_KEY, prefer_no_schedule_tolerations(pod.tolerations))
        return api.SUCCESS

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        tolerations = state.read(_PRE_SCORE_KEY, tuple)
        if tolerations is None:
            tolerations = prefer_no_schedule_tolerations(pod.tolerations)

        def per_taint_set() -> Int64s:
            return np.array(
                [
                    intolerable_prefer_no_schedule(t, tolerations, self._compare)
                    for t in snapshot.taint_sets
                ],
                dtype=np.int64,
            )

        by_set = self._counts.get(snapshot, tolerations, per_taint_set)
        result: Int64s = by_set.take(snapshot.taint_set.take(nodes))
        return result

    def normalize_score(self, state: CycleState, pod: api.Pod, scores: Int64s) -> Int64s:
        return helpers.default_normalize_score(scores, reverse=True)

    def events_to_register(self) -> Sequence[EventHint]:
        return (
            EventHint(
                frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_TAINT_CHANGE}),
                self.is_schedulable_after_node_change,
            ),
            EventHint(
                frozenset({ClusterEvent.UNSCHEDULED_POD_TOLERATION_CHANGE}),
                is_schedulable_after_pod_toleration_change,
            ),
        )

    def is_schedulable_after_node_change(self, pod: api.Pod, old: Any, new: Any) -> QueueingHint:
        """Queue when the node had an untolerated NoSchedule/NoExecute taint (or is
        new) and has none now."""
        was = old is None or self._untolerated(old, pod)
        return (
            QueueingHint.QUEUE
            if was and not self._untolerated(new, pod)
            else QueueingHint.QUEUE_SKIP
        )

    def _untolerated(self, node: api.Node, pod: api.Pod) -> bool:
        found = first_untolerated(node.taints, pod.tolerations, comparison_operators=self._compare)
        return found is not None


def is_schedulable_after_pod_toleration_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """The rejected pod itself got a toleration."""
    return QueueingHint.QUEUE if new.uid == pod.uid else QueueingHint.QUEUE_SKIP


def new(args: Any, handle: Handle) -> TaintToleration:
    return TaintToleration(handle)
