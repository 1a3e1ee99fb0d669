"""Arithmetic shared by plugins, with kube-scheduler's integer semantics."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from nodeagent.scheduler import api
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s

V = TypeVar("V")


def wait_until(
    done: Callable[[], bool],
    *,
    timeout: float,
    wait_changed: Callable[[float], None],
    monotonic: Callable[[], float],
) -> bool:
    """PreBind's wait for another controller's answer (VolumeBinding: the PV controller;
    DynamicResources: a driver's binding conditions): ``done`` is asked again after each
    change the catalog's informers deliver (``wait_changed`` blocks until one, or a
    second passes: a clock that only the caller advances still moves), until it holds
    (True) or ``timeout`` seconds passed (False). ``done`` raises to give up early. It
    runs on a binding thread, never the scheduling loop's."""
    deadline = monotonic() + timeout
    while not done():
        left = deadline - monotonic()
        if left <= 0:
            return False
        wait_changed(min(left, 1.0))
    return True


def default_normalize_score(scores: Int64s, *, reverse: bool) -> Int64s:
    """kube-scheduler's ``DefaultNormalizeScore(100, reverse, scores)``."""
    if scores.size == 0:
        return scores
    highest = int(scores.max())
    if highest == 0:
        if reverse:
            scores[:] = api.MAX_NODE_SCORE
        return scores
    scaled = scores * api.MAX_NODE_SCORE // highest
    return api.MAX_NODE_SCORE - scaled if reverse else scaled


def trunc_div(numerator: Int64s, denominator: Int64s | int | np.int64) -> Int64s:
    """Go's integer division (truncates toward zero) for arrays of either sign."""
    quotient: Int64s = np.abs(numerator) // np.abs(denominator)
    return np.where((numerator < 0) ^ (np.asarray(denominator) < 0), -quotient, quotient)


def go_trunc_div(numerator: int, denominator: int) -> int:
    quotient = abs(numerator) // abs(denominator)
    return -quotient if (numerator < 0) != (denominator < 0) else quotient


def go_round_vector(values: npt.NDArray[np.float64]) -> Int64s:
    """:func:`go_round` elementwise. ``floor(x + 0.5)`` is not it: the addition itself
    rounds (0.49999999999999994 + 0.5 is 1.0)."""
    whole = np.trunc(values)
    fraction = np.abs(values - whole)
    rounded: Int64s = (whole + np.where(fraction >= 0.5, np.sign(values), 0.0)).astype(np.int64)
    return rounded


def go_round(value: float) -> int:
    """Go's ``math.Round``: half away from zero (Python's ``round`` is half-to-even)."""
    whole = math.trunc(value)
    if abs(value - whole) >= 0.5:
        whole += 1 if value > 0 else -1
    return whole


class StaticNodeCache(Generic[V]):
    """Results that depend only on a snapshot's static node data (labels, taints,
    images), keyed by what the pod asks; dropped when a different snapshot arrives or
    the snapshot's static node data changed (its ``static_generation``)."""

    def __init__(self, limit: int = 4096) -> None:
        self._snapshot: weakref.ref[ClusterSnapshot] | None = None
        self._values: dict[Hashable, V] = {}
        self._generation = 0
        self._limit = limit

    def get(self, snapshot: ClusterSnapshot, key: Hashable, compute: Callable[[], V]) -> V:
        if (
            self._snapshot is None
            or self._snapshot() is not snapshot
            or self._generation != snapshot.static_generation
        ):
            self._snapshot = weakref.ref(snapshot)
            self._generation = snapshot.static_generation
            self._values.clear()
        found = self._values.get(key)
        if found is None:
            if len(self._values) >= self._limit:
                self._values.clear()
            found = self._values[key] = compute()
        return found
