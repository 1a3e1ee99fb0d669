"""Resource scoring formulas, each in two forms that must agree exactly.

The scalar functions transcribe kube-scheduler's per-node formulas (``noderesources``'
scorers) and are the specification; the ``*_vector`` functions evaluate the same formula
over many nodes at once with numpy and are what the plugins run. Inputs are per configured
resource ``r`` (rows) and node (columns): ``requested`` (node's requests plus the
pod's), ``allocatable``, and ``included``, false where kube-scheduler skips the
resource for that node (no allocatable, or a scalar resource the pod does not request).

Integer formulas stay in int64 (Go's int64 with truncating division; all operands here
are non-negative, so ``//`` is Go's ``/``, BalancedAllocation's difference of balances
included). BalancedAllocation is float64 in Go and here,
with the sums taken in the same order so the results are bit-identical.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from nodeagent.k8s.resources import CPU, MEMORY
from nodeagent.scheduler import api
from nodeagent.scheduler.plugins import helpers
from nodeagent.scheduler.snapshot import (
    CPU_ROW,
    MEMORY_ROW,
    ClusterSnapshot,
    Int64s,
    NodeIndices,
)

Matrix = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Inputs = tuple[Matrix, Matrix, Bools | None]
""":func:`scoring_inputs`: requested, allocatable, included (``None``: everywhere)."""
Shape = Sequence[tuple[int, int]]
"""(utilization 0..100, score 0..100) points, scores already scaled by 10."""

MAX_UTILIZATION = 100


# --- scalar specification ---------------------------------------------------------------


def least_requested(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * api.MAX_NODE_SCORE // capacity


def most_requested(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * api.MAX_NODE_SCORE // capacity


def broken_linear(shape: Shape, utilization: int) -> int:
    for i, (point, score) in enumerate(shape):
        if utilization <= point:
            if i == 0:
                return score
            prev_point, prev_score = shape[i - 1]
            return prev_score + helpers.go_trunc_div(
                (score - prev_score) * (utilization - prev_point), point - prev_point
            )
    return shape[-1][1]


def _weighted_average(
    per_resource: Sequence[int | None], weights: Sequence[int]
) -> tuple[int, int]:
    total = weight_sum = 0
    for score, weight in zip(per_resource, weights, strict=True):
        if score is not None:
            total += score * weight
            weight_sum += weight
    return total, weight_sum


def _weighted_score(
    per_resource: Callable[[int, int], int],
    requested: Sequence[int],
    allocatable: Sequence[int],
    weights: Sequence[int],
    included: Sequence[bool],
) -> int:
    """``sum(score_r * w_r) / sum(w_r)`` (integer) over the resources that count."""
    per = [
        per_resource(r, a) if inc and a != 0 else None
        for r, a, inc in zip(requested, allocatable, included, strict=True)
    ]
    total, weight_sum = _weighted_average(per, weights)
    return total // weight_sum if weight_sum else 0


def least_allocated_score(
    requested: Sequence[int],
    allocatable: Sequence[int],
    weights: Sequence[int],
    included: Sequence[bool],
) -> int:
    return _weighted_score(least_requested, requested, allocatable, weights, included)


def most_allocated_score(
    requested: Sequence[int],
    allocatable: Sequence[int],
    weights: Sequence[int],
    included: Sequence[bool],
) -> int:
    return _weighted_score(most_requested, requested, allocatable, weights, included)


def requested_to_capacity_ratio_score(
    shape: Shape,
    requested: Sequence[int],
    allocatable: Sequence[int],
    weights: Sequence[int],
    included: Sequence[bool],
) -> int:
    per: list[int | None] = []
    for r, a, inc in zip(requested, allocatable, included, strict=True):
        if not inc or a == 0:
            per.append(None)
            continue
        utilization = MAX_UTILIZATION if r > a else r * MAX_UTILIZATION // a
        score = broken_linear(shape, utilization)
        per.append(score if score > 0 else None)  # only positive scores count
    total, weight_sum = _weighted_average(per, weights)
    if weight_sum == 0:
        return 0
    return helpers.go_round(float(total) / float(weight_sum))


def balance(requested: Sequence[int], allocatable: Sequence[int], included: Sequence[bool]) -> int:
    """``balancedResourceScore``: ``trunc((1 - std) * 100)`` over the fractions
    ``min(1, requested/allocatable)`` of the resources that count; 50..100."""
    fractions: list[float] = []
    total = 0.0
    for r, a, inc in zip(requested, allocatable, included, strict=True):
        if not inc or a == 0:
            continue
        fraction = min(float(r) / float(a), 1.0)
        total += fraction
        fractions.append(fraction)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / len(fractions)
        square_sum = 0.0
        for fraction in fractions:
            square_sum += (fraction - mean) * (fraction - mean)
        std = math.sqrt(square_sum / len(fractions))
    return int((1 - std) * api.MAX_NODE_SCORE)


def balance_change(with_pod: int, without_pod: int) -> int:
    """``balancedResourceScorer`` (v1.36): the change in balance the pod makes, mapped
    back onto 50..100 (75: unchanged, toward 100: better balanced, toward 50: worse)."""
    half = api.MAX_NODE_SCORE // 2
    return half + helpers.go_trunc_div(half + with_pod - without_pod, 2)


def balanced_allocation_score(
    requested: Sequence[int],
    allocated: Sequence[int],
    allocatable: Sequence[int],
    included: Sequence[bool],
) -> int:
    """``requested``: the node's requests plus the pod's; ``allocated``: the node's."""
    return balance_change(
        balance(requested, allocatable, included), balance(allocated, allocatable, included)
    )


# --- inputs from the snapshot -----------------------------------------------------------


def scoring_inputs(
    resources: Sequence[str],
    pod_requests: Sequence[int],
    snapshot: ClusterSnapshot,
    nodes: NodeIndices,
    *,
    nonzero: bool,
) -> Inputs:
    """Per resource (row) and node (column): the node's requests plus the pod's, the
    allocatable amount, and whether the resource counts (``None``: every one does). A
    scalar resource the pod does not request does not count (kube-scheduler returns
    (0, 0) for it); a resource no node has gets allocatable 0 and is skipped by the
    formulas. ``nonzero``: cpu and memory use the "non-zero" requests (the scoring
    strategies), otherwise plain requests (BalancedAllocation).

    The usual resources, cpu and memory, are gathered with one ``take`` per matrix
    (several times faster than fancy indexing): at a few hundred nodes, a scoring
    cycle's cost is its number of numpy calls more than its number of nodes."""
    rows = [snapshot.resource_row(name) for name in resources]
    if rows == [CPU_ROW, MEMORY_ROW]:  # both always count (not scalar resources)
        source = snapshot.nonzero_requested if nonzero else snapshot.requested[:2]
        amounts = np.array(pod_requests, dtype=np.int64)[:, None]
        allocatable = snapshot.allocatable[:2].take(nodes, axis=1)
        return source.take(nodes, axis=1) + amounts, allocatable, None
    requested = np.zeros((len(resources), len(nodes)), dtype=np.int64)
    allocatable = np.zeros((len(resources), len(nodes)), dtype=np.int64)
    included = np.ones((len(resources), len(nodes)), dtype=bool)
    for i, (name, amount, row) in enumerate(zip(resources, pod_requests, rows, strict=True)):
        if api.is_scalar_resource(name) and amount == 0:
            included[i] = False
            continue
        if row is None:
            continue
        allocatable[i] = snapshot.allocatable[row, nodes]
        if nonzero and name == CPU:
            requested[i] = snapshot.nonzero_requested[CPU_ROW, nodes] + amount
        elif nonzero and name == MEMORY:
            requested[i] = snapshot.nonzero_requested[MEMORY_ROW, nodes] + amount
        else:
            requested[i] = snapshot.requested[row, nodes] + amount
    return requested, allocatable, included


def first_column(inputs: Inputs) -> tuple[list[int], list[int], list[bool]]:
    """The one node of single-node :func:`scoring_inputs`, as plain lists for the scalar
    formulas."""
    requested, allocatable, included = inputs
    return (
        [int(v) for v in requested[:, 0]],
        [int(v) for v in allocatable[:, 0]],
        [True] * len(requested) if included is None else [bool(v) for v in included[:, 0]],
    )


# --- vectorized forms -------------------------------------------------------------------


def _counted(allocatable: Matrix, included: Bools | None) -> Bools | None:
    """Which resources count per node; ``None`` when all of them do (the usual case,
    which the formulas below then compute without masks)."""
    if included is None and np.count_nonzero(allocatable) == allocatable.size:
        return None
    nonzero: Bools = allocatable != 0
    return nonzero if included is None else included & nonzero


def _average_vector(per: Matrix, counted: Bools, weights: Int64s) -> tuple[Int64s, Int64s]:
    w = weights[:, None]
    total: Int64s = (np.where(counted, per, 0) * w).sum(axis=0)
    weight_sum: Int64s = (counted * w).sum(axis=0)
    return total, weight_sum


def _quotient(total: Int64s, weight_sum: Int64s) -> Int64s:
    return np.where(weight_sum > 0, total // np.maximum(weight_sum, 1), 0)


def _plain_average(per: Matrix, weights: Int64s) -> Int64s:
    """:func:`_quotient` of :func:`_average_vector` when every resource counts. With
    equal weights ``w`` (the default: 1 each), ``sum(w * s) // (w * k)`` is
    ``sum(s) // k``: no multiplication."""
    listed = weights.tolist()
    weight_sum = sum(listed)
    if weight_sum == 0:
        return np.zeros(per.shape[1], dtype=np.int64)
    if listed.count(listed[0]) == len(listed):
        plain: Int64s = np.add.reduce(per, axis=0) // len(listed)
        return plain
    total: Int64s = weights @ per
    average: Int64s = total // weight_sum
    return average


def least_allocated_vector(
    requested: Matrix, allocatable: Matrix, weights: Int64s, included: Bools | None
) -> Int64s:
    counted = _counted(allocatable, included)
    if counted is None:  # allocatable > 0 everywhere; free < 0 scores 0 as below
        free = np.maximum(allocatable - requested, 0)
        return _plain_average(free * api.MAX_NODE_SCORE // allocatable, weights)
    safe = np.maximum(allocatable, 1)
    per = np.where(
        requested > allocatable, 0, (allocatable - requested) * api.MAX_NODE_SCORE // safe
    )
    return _quotient(*_average_vector(per, counted, weights))


def most_allocated_vector(
    requested: Matrix, allocatable: Matrix, weights: Int64s, included: Bools | None
) -> Int64s:
    counted = _counted(allocatable, included)
    if counted is None:
        used = np.minimum(requested, allocatable)
        return _plain_average(used * api.MAX_NODE_SCORE // allocatable, weights)
    safe = np.maximum(allocatable, 1)
    per = np.minimum(requested, allocatable) * api.MAX_NODE_SCORE // safe
    return _quotient(*_average_vector(per, counted, weights))


def broken_linear_vector(shape: Shape, utilization: Matrix) -> Matrix:
    result = np.full(utilization.shape, shape[-1][1], dtype=np.int64)
    # Later segments first, so the first segment containing the point writes last.
    for i in range(len(shape) - 1, -1, -1):
        point, score = shape[i]
        within = utilization <= point
        if i == 0:
            result[within] = score
            continue
        prev_point, prev_score = shape[i - 1]
        value = prev_score + helpers.trunc_div(
            (score - prev_score) * (utilization - prev_point), np.int64(point - prev_point)
        )
        result = np.where(within, value, result)
    return result


def requested_to_capacity_ratio_vector(
    shape: Shape, requested: Matrix, allocatable: Matrix, weights: Int64s, included: Bools | None
) -> Int64s:
    safe = np.maximum(allocatable, 1)
    utilization = np.where(
        requested > allocatable, MAX_UTILIZATION, requested * MAX_UTILIZATION // safe
    )
    per = broken_linear_vector(shape, utilization)
    counted = (allocatable != 0) & (per > 0)
    if included is not None:
        counted &= included
    total, weight_sum = _average_vector(per, counted, weights)
    # Go rounds total/weight_sum (a float) half away from zero; for non-negative
    # integers that is exactly floor((2*total + weight_sum) / (2*weight_sum)).
    rounded = (2 * total + weight_sum) // np.maximum(2 * weight_sum, 1)
    return np.where(weight_sum > 0, rounded, 0)


def balanced_allocation_vector(
    requested: Matrix, allocated: Matrix, allocatable: Matrix, included: Bools | None
) -> Int64s:
    counted = _counted(allocatable, included)
    with_pod = balance_vector(requested, allocatable, counted)
    without_pod = balance_vector(allocated, allocatable, counted)
    half = api.MAX_NODE_SCORE // 2
    # Both balances are 50..100, so the numerator is 0..100 and ``//`` is Go's ``/``
    # here (:func:`balance_change` keeps the truncating form as the specification).
    change: Int64s = half + (half + with_pod - without_pod) // 2
    return change


def balance_vector(requested: Matrix, allocatable: Matrix, counted: Bools | None) -> Int64s:
    """:func:`balance` per node; ``counted`` from :func:`_counted`."""
    if requested.shape[0] == 2:  # the usual cpu and memory: std is half the difference
        if counted is None:
            fractions = np.minimum(requested / allocatable, 1.0)
            std = np.abs((fractions[0] - fractions[1]) / 2)
        else:
            fractions = np.minimum(requested / np.maximum(allocatable, 1), 1.0)
            std = np.where(counted.all(axis=0), np.abs((fractions[0] - fractions[1]) / 2), 0.0)
        two: Int64s = ((1 - std) * api.MAX_NODE_SCORE).astype(np.int64)
        return two
    if counted is None:
        counted = np.ones(requested.shape, dtype=bool)
    fractions = np.minimum(
        requested.astype(np.float64) / np.maximum(allocatable, 1).astype(np.float64), 1.0
    )
    count = counted.sum(axis=0)
    total = np.zeros(requested.shape[1], dtype=np.float64)
    first = np.zeros_like(total)
    second = np.zeros_like(total)
    seen = np.zeros(requested.shape[1], dtype=np.int64)
    for row in range(requested.shape[0]):  # row by row: the same summation order as Go
        take = counted[row]
        total = total + np.where(take, fractions[row], 0.0)
        first = np.where(take & (seen == 0), fractions[row], first)
        second = np.where(take & (seen == 1), fractions[row], second)
        seen = seen + take
    std = np.zeros_like(total)
    pair = count == 2
    std = np.where(pair, np.abs((first - second) / 2), std)
    many = count > 2
    if many.any():
        mean = total / np.maximum(count, 1)
        square_sum = np.zeros_like(total)
        for row in range(requested.shape[0]):
            deviation = fractions[row] - mean
            square_sum = square_sum + np.where(counted[row], deviation * deviation, 0.0)
        std = np.where(many, np.sqrt(square_sum / np.maximum(count, 1)), std)
    result: Int64s = ((1 - std) * api.MAX_NODE_SCORE).astype(np.int64)
    return result
