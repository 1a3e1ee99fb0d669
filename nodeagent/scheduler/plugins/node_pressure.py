"""NodePressure (Filter, Score): keep pods off nodes under pressure, and away from nodes
heading there, using only what is on the Node object.

What it reads (written by the nodeagent agent; a stock cluster has the kubelet's part):

* taints: ``nodeagent.io/{memory,disk,pid}-pressure`` (``NoSchedule`` while hard or
  grace-satisfied pressure holds) and the node lifecycle controller's
  ``node.kubernetes.io/{memory,disk,pid}-pressure``;
* conditions: ``NodeAgentMemoryPressure``/``NodeAgentDiskPressure``/``NodeAgentPIDPressure``
  and the kubelet's ``MemoryPressure``/``DiskPressure``/``PIDPressure``;
* the annotation ``nodeagent.io/pressure`` (:data:`nodeagent.PRESSURE_ANNOTATION`):
  ``{"time": RFC 3339, "signals": {signal: {"available", "capacity", "threshold"}}}``.

Filter: a node carrying one of those taints with effect ``NoSchedule``/``NoExecute`` that
the pod does not tolerate is rejected, unresolvable, as "node(s) had memory pressure"
(the wording of kube-scheduler's former pressure predicates).

Score, per node, in this order:

1. a pressure condition is ``True``: 0;
2. a fresh, readable annotation: for each signal with capacity > 0,
   ``headroom = (available - threshold) / capacity`` and
   ``score = clamp(100 * headroom / fullScoreHeadroom, 0, 100)`` (integer arithmetic,
   rounded down); the node's score is the lowest over its signals, so a node with plenty
   of headroom everywhere scores 100 and one nearing any threshold falls towards 0;
3. otherwise (no agent, stale or unreadable annotation): ``neutralScore`` (50), below a
   node known to be healthy and above one known to be close to pressure.

No normalization: the score is absolute, so it means the same on every cluster.
"""

from __future__ import annotations

import json
import logging
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from nodeagent.k8s.pressure import (
    DEFAULT_CONDITION_TYPES,
    DEFAULT_TAINT_KEYS,
    KUBELET_CONDITION_TYPES,
    KUBELET_TAINT_KEYS,
    PRESSURE_ANNOTATION,
    Pressure,
    Taint,
)
from nodeagent.scheduler import api, config, objects
from nodeagent.scheduler.framework import (
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    QueueingHint,
)
from nodeagent.scheduler.plugins import helpers
from nodeagent.scheduler.snapshot import ClusterSnapshot, Float64s, Int64s, Mask, NodeIndices

NAME = "NodePressure"
log = logging.getLogger(__name__)

FILTERED_EFFECTS = (api.TaintEffect.NO_SCHEDULE, api.TaintEffect.NO_EXECUTE)


def reason(pressure: Pressure) -> str:
    return f"node(s) had {pressure.value} pressure"


def _defaults(
    agent: Mapping[Pressure, str], kubelet: Mapping[Pressure, str]
) -> dict[Pressure, tuple[str, ...]]:
    return {p: (agent[p], kubelet[p]) for p in Pressure}


class Args(config.ConfigModel):
    """``NodePressureArgs``."""

    taint_keys: dict[Pressure, tuple[str, ...]] = Field(
        default_factory=lambda: _defaults(DEFAULT_TAINT_KEYS, KUBELET_TAINT_KEYS)
    )
    """Taint keys meaning "under pressure", per pressure (memory, disk, pid)."""
    condition_types: dict[Pressure, tuple[str, ...]] = Field(
        default_factory=lambda: _defaults(DEFAULT_CONDITION_TYPES, KUBELET_CONDITION_TYPES)
    )
    """Node condition types meaning "under pressure" when ``True``."""
    full_score_headroom_percent: int = Field(default=20, ge=1, le=100)
    """Headroom (percent of capacity above the threshold) at which a signal scores 100."""
    stale_after_seconds: int = Field(default=900, ge=0)
    """An annotation older than this is ignored (0: never stale). The agent rewrites it at
    least every ``pressureAnnotationRefreshPeriod`` (5 min), so 15 min (three missed
    refreshes) means the agent stopped reporting."""
    neutral_score: int = Field(default=50, ge=0, le=100)
    """Score of a node without usable headroom data and without a pressure condition."""


def signal_score(available: int, capacity: int, threshold: int, full_score_percent: int) -> int:
    """``clamp(100 * (available - threshold) / capacity / (full_score_percent / 100))``."""
    if available <= threshold:
        return 0
    score = 100 * 100 * (available - threshold) // (capacity * full_score_percent)
    return min(score, api.MAX_NODE_SCORE)


def _time(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return objects.unix_time(text)
    except ValueError:
        return None


def headroom_score(
    annotation: str, *, now: float, stale_after: int, full_score_percent: int
) -> tuple[int | None, str]:
    """The annotation's score and a note on it; ``None`` when it cannot be used."""
    score, note, _ = _headroom(
        annotation, now=now, stale_after=stale_after, full_score_percent=full_score_percent
    )
    return score, note


def _headroom(
    annotation: str, *, now: float, stale_after: int, full_score_percent: int
) -> tuple[int | None, str, float]:
    """:func:`headroom_score`, and until when it holds (the annotation goes stale)."""
    until = math.inf
    try:
        document = json.loads(annotation)
    except ValueError as exc:
        return None, f"annotation is not JSON: {exc}", until
    if not isinstance(document, dict) or not isinstance(document.get("signals"), dict):
        return None, "annotation has no signals mapping", until
    if stale_after:
        published = _time(document.get("time"))
        if published is None:
            return None, "annotation has no valid time", until
        if now - published > stale_after:
            return None, f"annotation is stale ({now - published:.0f}s old)", until
        until = published + stale_after
    scores = []
    for signal, figures in document["signals"].items():
        if not isinstance(figures, dict):
            return None, f"annotation signal {signal!r} is not a mapping", until
        try:
            available, capacity = int(figures["available"]), int(figures["capacity"])
            threshold = int(figures.get("threshold", 0))
        except (KeyError, TypeError, ValueError):
            return None, f"annotation signal {signal!r} lacks integer available/capacity", until
        if capacity > 0:
            scores.append(signal_score(available, capacity, threshold, full_score_percent))
    if not scores:
        return None, "annotation has no signal with a capacity", until
    return min(scores), "headroom", until


@dataclass(slots=True)
class _NodeScores:
    """NodePressure's score of every node of one snapshot, as of ``generation``."""

    snapshot: weakref.ref[ClusterSnapshot]
    generation: int
    stamps: Int64s
    """The scored nodes' :attr:`~ClusterSnapshot.node_stamp`."""
    scores: Int64s
    expires: Float64s
    """When each score stops holding (its annotation goes stale); -inf: not scored."""
    next_expiry: float

    @classmethod
    def empty(cls, snapshot: ClusterSnapshot) -> _NodeScores:
        none = np.zeros(0, dtype=np.int64)
        return cls(weakref.ref(snapshot), -1, none, none, np.zeros(0), -math.inf)


class NodePressure:
    name = NAME
    resource_local = True
    """Filter reads only the node and its resource columns (batched preemption)."""

    def __init__(self, args: Args, handle: Handle) -> None:
        self.args = args
        self._handle = handle
        self._pressure_of_key = {
            key: pressure for pressure, keys in args.taint_keys.items() for key in keys
        }
        self._condition_types = {t for types in args.condition_types.values() for t in types}
        self._tolerated = helpers.StaticNodeCache[Mask]()
        self._scores: _NodeScores | None = None

    def filtered_taints(self, taints: tuple[Taint, ...]) -> tuple[Taint, ...]:
        """The taints among ``taints`` that Filter reads (a pressure key with a filtered
        effect), in order: :meth:`first_pressure` of them and of all ``taints`` is the
        same for every pod. Nodes whose taint lists differ elsewhere (a node-specific
        value of some other taint, as the cluster autoscaler's) share these."""
        return tuple(
            taint
            for taint in taints
            if taint.key in self._pressure_of_key and taint.effect in FILTERED_EFFECTS
        )

    def first_pressure(
        self, taints: tuple[Taint, ...], tolerations: tuple[api.Toleration, ...]
    ) -> Pressure | None:
        for taint in taints:
            pressure = self._pressure_of_key.get(taint.key)
            if (
                pressure is not None
                and taint.effect in FILTERED_EFFECTS
                and not api.tolerates(tolerations, taint)
            ):
                return pressure
        return None

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        def per_taint_set() -> Mask:
            return np.array(
                [self.first_pressure(t, pod.tolerations) is None for t in snapshot.taint_sets],
                dtype=bool,
            )

        by_set = self._tolerated.get(snapshot, pod.tolerations, per_taint_set)
        result: Mask = by_set.take(snapshot.taint_set.take(nodes))
        return result

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        pressure = self.first_pressure(snapshot.nodes[node].taints, pod.tolerations)
        if pressure is None:
            return api.SUCCESS
        return api.unschedulable(reason(pressure), unresolvable=True)

    def node_score(self, node: api.Node) -> tuple[int, str]:
        """The node's score and where it came from."""
        score, note, _ = self._evaluate(node)
        return score, note

    def _evaluate(self, node: api.Node) -> tuple[int, str, float]:
        """:meth:`node_score`, and until when it holds (``inf``: until the node changes)."""
        pressured = sorted(t for t in self._condition_types if node.conditions.get(t) == "True")
        if pressured:
            return 0, f"condition {pressured[0]} is True", math.inf
        annotation = node.annotations.get(PRESSURE_ANNOTATION)
        if annotation is None:
            return self.args.neutral_score, "no pressure annotation", math.inf
        score, note, until = _headroom(
            annotation,
            now=self._handle.now,
            stale_after=self.args.stale_after_seconds,
            full_score_percent=self.args.full_score_headroom_percent,
        )
        if score is None:
            return self.args.neutral_score, note, until
        return score, note, until

    def _current_scores(self, snapshot: ClusterSnapshot) -> Int64s:
        """Every node's score, recomputed only for the nodes whose data was rewritten
        since (by their :attr:`~ClusterSnapshot.node_stamp`) and those whose annotation
        went stale: a churn of nodes costs per node changed, not per node in the cluster."""
        kept = self._scores
        now = self._handle.now
        if kept is None or kept.snapshot() is not snapshot:
            self._scores = kept = _NodeScores.empty(snapshot)
        elif kept.generation == snapshot.static_generation and now <= kept.next_expiry:
            return kept.scores
        stamps = snapshot.node_stamp
        scores = np.zeros(snapshot.size, dtype=np.int64)
        expires = np.full(snapshot.size, -math.inf)
        if len(kept.stamps):  # carry over the nodes whose data is as it was scored
            order = np.argsort(kept.stamps)
            ordered = kept.stamps[order]
            at = order[np.minimum(np.searchsorted(ordered, stamps), len(ordered) - 1)]
            same = kept.stamps[at] == stamps
            scores[same] = kept.scores[at[same]]
            expires[same] = kept.expires[at[same]]
        stale = np.flatnonzero(expires < now).tolist()
        self._score_nodes(snapshot, stale, scores, expires)
        kept.generation, kept.stamps = snapshot.static_generation, stamps.copy()
        kept.scores, kept.expires = scores, expires
        kept.next_expiry = float(expires.min()) if len(expires) else math.inf
        return scores

    def _score_nodes(
        self, snapshot: ClusterSnapshot, at: list[int], scores: Int64s, expires: Float64s
    ) -> None:
        unusable: list[str] = []
        nodes = snapshot.nodes
        for i in at:
            scores[i], note, expires[i] = self._evaluate(nodes[i])
            if note.startswith("annotation"):
                unusable.append(f"{nodes[i].name}: {note}")
        if unusable:
            log.warning(
                "%d node(s) have an unusable %s annotation and score %d (neutral): %s%s",
                len(unusable),
                PRESSURE_ANNOTATION,
                self.args.neutral_score,
                "; ".join(unusable[:3]),
                "; ..." if len(unusable) > 3 else "",
            )

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        result: Int64s = self._current_scores(snapshot).take(nodes)
        return result

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Every rejection of this plugin is UnschedulableAndUnresolvable."""
        return np.zeros(len(nodes), dtype=bool)

    # --- QueueingHints ------------------------------------------------------------------

    def events_to_register(self) -> Sequence[EventHint]:
        """Filter reads only taints: a node added or retainted, or the pod's own new
        toleration (the score's conditions and annotation reject nothing)."""
        return (
            EventHint(
                frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_TAINT_CHANGE}),
                self.is_schedulable_after_node_change,
            ),
            EventHint(
                frozenset({ClusterEvent.UNSCHEDULED_POD_TOLERATION_CHANGE}),
                _own_update,
            ),
        )

    def is_schedulable_after_node_change(self, pod: api.Pod, old: Any, new: Any) -> QueueingHint:
        """Queue when the node (new, or under pressure for this pod before) is not under
        pressure for it now."""
        if self.first_pressure(new.taints, pod.tolerations) is not None:
            return QueueingHint.QUEUE_SKIP
        if old is None or self.first_pressure(old.taints, pod.tolerations) is not None:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP


def _own_update(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    return QueueingHint.QUEUE if new.uid == pod.uid else QueueingHint.QUEUE_SKIP


def new(args: Args | None, handle: Handle) -> NodePressure:
    return NodePressure(args or Args(), handle)
