"""DefaultPreemption (PostFilter, PreEnqueue): when no node fits, find the node where evicting
lower-priority pods makes room, and nominate it (``plugins/defaultpreemption``).

The work is :func:`nodeagent.scheduler.preemption.preempt`, a pure function of the
snapshot, the pod, the cycle's diagnosis, the PodDisruptionBudgets and the nominated
pods; this plugin hands it those and prefixes its message with ``preemption:`` as
kube-scheduler does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from nodeagent.scheduler import api, config, preemption
from nodeagent.scheduler.framework import (
    POD_DELETE_EVENTS,
    CycleState,
    Diagnosis,
    EventHint,
    Framework,
    Handle,
    PostFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot

NAME = "DefaultPreemption"
REASON_PREEMPTION_RUNNING = "waiting for the preemption for this pod to be finished"


class Args(config.ConfigModel):
    """``DefaultPreemptionArgs``."""

    min_candidate_nodes_percentage: int = Field(default=10, ge=0, le=100)
    min_candidate_nodes_absolute: int = Field(default=100, ge=0)

    @model_validator(mode="after")
    def _check(self) -> Args:
        if self.min_candidate_nodes_percentage == 0 and self.min_candidate_nodes_absolute == 0:
            raise ValueError(
                "minCandidateNodesAbsolute: cannot be zero at the same time as"
                " minCandidateNodesPercentage"
            )
        return self


class DefaultPreemption:
    name = NAME

    def __init__(self, args: Args, handle: Handle) -> None:
        self._handle = handle
        self._settings = preemption.Settings(
            args.min_candidate_nodes_percentage, args.min_candidate_nodes_absolute
        )

    def post_filter(
        self,
        state: CycleState,
        pod: api.Pod,
        snapshot: ClusterSnapshot,
        diagnosis: Diagnosis,
        framework: Framework,
    ) -> tuple[PostFilterResult | None, api.Status]:
        result, status = preemption.preempt(
            framework,
            snapshot,
            pod,
            diagnosis,
            budgets=snapshot.disruption_budgets,
            nominator=self._handle.nominator,
            settings=self._settings,
            rng=self._handle.rng,
            now=self._handle.now,
            cycle=state,
        )
        if status.message:
            status = api.Status(status.code, (f"preemption: {status.message}",), status.plugin)
        return result, status

    # --- asynchronous preemption ---------------------------------------------------------

    def pre_enqueue(self, pod: api.Pod) -> api.Status:
        """Hold the pod back while its victims' deletions are on the way."""
        if self._handle.preemptions.running(pod.uid):
            return api.unschedulable(REASON_PREEMPTION_RUNNING, unresolvable=True)
        return api.SUCCESS

    def events_to_register(self) -> Sequence[EventHint]:
        return (EventHint(POD_DELETE_EVENTS, is_schedulable_after_pod_deletion),)


def is_schedulable_after_pod_deletion(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """Always Skip (``isPodSchedulableAfterPodDeletion``): the plugins whose
    rejection the preemption resolves decide when the pod is retried, not this one."""
    return QueueingHint.QUEUE_SKIP


def new(args: Args | None, handle: Handle) -> DefaultPreemption:
    return DefaultPreemption(args or Args(), handle)
