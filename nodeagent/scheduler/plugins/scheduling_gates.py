"""SchedulingGates (PreEnqueue): a pod with ``spec.schedulingGates`` waits, gated."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nodeagent.scheduler import api
from nodeagent.scheduler.framework import ClusterEvent, EventHint, Handle, QueueingHint

NAME = "SchedulingGates"


def reason(gates: tuple[str, ...]) -> str:
    return f"waiting for scheduling gates: [{' '.join(gates)}]"


class SchedulingGates:
    name = NAME

    def pre_enqueue(self, pod: api.Pod) -> api.Status:
        if not pod.scheduling_gates:
            return api.SUCCESS
        return api.unschedulable(reason(pod.scheduling_gates), unresolvable=True)

    def events_to_register(self) -> Sequence[EventHint]:
        return (
            EventHint(
                frozenset({ClusterEvent.UNSCHEDULED_POD_GATES_ELIMINATED}),
                is_schedulable_after_gates_eliminated,
            ),
        )


def is_schedulable_after_gates_eliminated(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterUpdatePodSchedulingGatesEliminated``: the pod's own gates."""
    return QueueingHint.QUEUE if new.uid == pod.uid else QueueingHint.QUEUE_SKIP


def new(args: Any, handle: Handle) -> SchedulingGates:
    return SchedulingGates()
