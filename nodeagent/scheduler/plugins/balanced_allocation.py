"""NodeResourcesBalancedAllocation (PreScore, Score): prefer nodes whose resource
fractions the pod brings closer together (``noderesources/balanced_allocation.go``).

Uses plain requests (no non-zero defaults). A pod that requests none of the configured
resources is skipped (a best-effort pod would otherwise pile onto one node).
A node's balance is ``trunc((1 - std) * 100)`` over the fractions
``min(1, requested/allocatable)``, with the pod (``with``) and without it (``without``);
since v1.36 the score is the change, ``50 + (50 + with - without) / 2`` (Go's integer
division): 75 where the pod leaves the balance as it was, toward 100 where it evens the
node out, toward 50 where it skews it. Before v1.36 the score was ``with`` alone.
An extended resource backed by DRA counts in devices where no device plugin has it
(:class:`~.node_resources_fit.DeviceCounts`).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from nodeagent.k8s.resources import CPU, MEMORY
from nodeagent.scheduler import api, config, resource_claims
from nodeagent.scheduler.framework import CycleState, Handle
from nodeagent.scheduler.plugins import resource_allocation as ra
from nodeagent.scheduler.plugins.node_resources_fit import DeviceCounts
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, NodeIndices

NAME = "NodeResourcesBalancedAllocation"
_PRE_SCORE_KEY = f"PreScore{NAME}"


class ResourceSpec(config.ConfigModel):
    name: str = Field(min_length=1)
    weight: int = 0
    """Accepted for compatibility; must be 1 (or 0, defaulted to 1): the formula is
    unweighted."""


class Args(config.ConfigModel):
    """``NodeResourcesBalancedAllocationArgs``."""

    resources: tuple[ResourceSpec, ...] = (
        ResourceSpec(name=CPU, weight=1),
        ResourceSpec(name=MEMORY, weight=1),
    )

    @model_validator(mode="after")
    def _check(self) -> Args:
        seen: set[str] = set()
        for i, resource in enumerate(self.resources):
            if resource.name in seen:
                raise ValueError(f"resources[{i}].name {resource.name!r}: duplicate")
            seen.add(resource.name)
            if resource.weight not in (0, 1):
                raise ValueError(f"resources[{i}].weight {resource.weight}: must be 1")
        return self


class BalancedAllocation:
    name = NAME

    def __init__(
        self, args: Args, resources: resource_claims.ResourceCatalog | None = None
    ) -> None:
        specs = args.resources or Args().resources
        self._resources = [spec.name for spec in specs]
        self._device_counts = DeviceCounts(resources) if resources is not None else None

    def _pod_requests(self, pod: api.Pod) -> list[int]:
        return [pod.requests.get(name, 0) for name in self._resources]

    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        requests = self._pod_requests(pod)
        if not any(requests):
            return api.SKIP
        state.write(_PRE_SCORE_KEY, requests)
        return api.SUCCESS

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        requests = state.read(_PRE_SCORE_KEY, list) or self._pod_requests(pod)
        requested, allocatable, included = self._inputs(requests, snapshot, nodes)
        allocated = requested - np.array(requests, dtype=np.int64)[:, None]
        return ra.balanced_allocation_vector(requested, allocated, allocatable, included)

    def score_node(self, pod: api.Pod, snapshot: ClusterSnapshot, node: int) -> int:
        single = np.array([node], dtype=np.intp)
        requests = self._pod_requests(pod)
        requested, allocatable, included = ra.first_column(self._inputs(requests, snapshot, single))
        # The node's own requests: kube-scheduler adds the pod's to them for ``requested``.
        allocated = [r - amount for r, amount in zip(requested, requests, strict=True)]
        return ra.balanced_allocation_score(requested, allocated, allocatable, included)

    def _inputs(
        self, pod_requests: list[int], snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> ra.Inputs:
        """Requested (the node's plus the pod's), allocatable, included."""
        inputs = ra.scoring_inputs(self._resources, pod_requests, snapshot, nodes, nonzero=False)
        if self._device_counts is None:
            return inputs
        return self._device_counts.scoring_inputs(
            inputs, self._resources, pod_requests, snapshot, nodes
        )


def new(args: Args | None, handle: Handle) -> BalancedAllocation:
    return BalancedAllocation(args or Args(), handle.resources)
