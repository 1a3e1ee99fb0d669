"""SchedulingGates (PreEnqueue): a pod with ``spec.schedulingGates`` waits, gated."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler import api
from nodeagent.scheduler.framework import Handle

NAME = "SchedulingGates"


def reason(gates: tuple[str, ...]) -> str:
    return f"waiting for scheduling gates: [{' '.join(gates)}]"


class SchedulingGates:
    name = NAME

    def pre_enqueue(self, pod: api.Pod) -> api.Status:
        if not pod.scheduling_gates:
            return api.SUCCESS
        return api.unschedulable(reason(pod.scheduling_gates), unresolvable=True)


def new(args: Any, handle: Handle) -> SchedulingGates:
    return SchedulingGates()
