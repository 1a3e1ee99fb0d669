"""DefaultPreemption (PostFilter): when no node fits, find the node where evicting
lower-priority pods makes room, and nominate it (``plugins/defaultpreemption``).

The work is :func:`nodeagent.scheduler.preemption.preempt`, a pure function of the
snapshot, the pod, the cycle's diagnosis, the PodDisruptionBudgets and the nominated
pods; this plugin hands it those and prefixes its message with ``preemption:`` as
kube-scheduler does.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from nodeagent.scheduler import api, config, preemption
from nodeagent.scheduler.framework import (
    CycleState,
    Diagnosis,
    Framework,
    Handle,
    PostFilterResult,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot

NAME = "DefaultPreemption"


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
        )
        if status.message:
            status = api.Status(status.code, (f"preemption: {status.message}",), status.plugin)
        return result, status


def new(args: Args | None, handle: Handle) -> DefaultPreemption:
    return DefaultPreemption(args or Args(), handle)
