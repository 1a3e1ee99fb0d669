"""PodTopologySpread (PreFilter, Filter, PreScore, Score): spread a workload's pods over
topology domains (kube-scheduler's ``plugins/podtopologyspread``).

Filter (``whenUnsatisfiable: DoNotSchedule``): for every hard constraint, a node
without the topology key is rejected (unresolvable); otherwise its domain's count of
matching pods, plus one if the pod matches its own selector, minus the smallest count
over the eligible domains (0 when fewer than ``minDomains`` domains exist) must not
exceed ``maxSkew``. Score (``ScheduleAnyway``): the fewer matching pods in the node's
domains, weighted by ``ln(domains + 2)``, the higher, normalized so the emptiest node
gets 100. A pod without constraints of its own gets the cluster default constraints
(``defaultingType: System``: hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway) when a
Service, ReplicationController, ReplicaSet or StatefulSet in the input selects it.

Both halves are computed once per cycle over all nodes with numpy: the matching pods per
node come from the snapshot's pod-group index (no pod is looked at), domain counts are a
``bincount`` over the node's label codes, and Filter/Score index into them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api, config, objects
from nodeagent.scheduler.framework import (
    POD_ADD_EVENTS,
    POD_DELETE_EVENTS,
    POD_LABEL_EVENTS,
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.plugins import helpers, node_affinity, taint_toleration
from nodeagent.scheduler.snapshot import (
    ZONE_LABEL,
    ClusterSnapshot,
    Int64s,
    LabelColumn,
    Mask,
    NodeIndices,
)

NAME = "PodTopologySpread"
HOSTNAME_LABEL = "kubernetes.io/hostname"
REASON_CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = f"{REASON_CONSTRAINTS} (missing required label)"
_PRE_FILTER_KEY = f"PreFilter{NAME}"
_PRE_SCORE_KEY = f"PreScore{NAME}"

SYSTEM_DEFAULT_CONSTRAINTS = (
    (3, HOSTNAME_LABEL),
    (5, ZONE_LABEL),
)
"""kube-scheduler's system defaults: (maxSkew, topologyKey), both ScheduleAnyway."""


class DefaultingType(StrEnum):
    SYSTEM = "System"
    LIST = "List"


class Args(config.ConfigModel):
    """``PodTopologySpreadArgs``."""

    default_constraints: tuple[dict[str, Any], ...] = ()
    defaulting_type: DefaultingType = Field(default=DefaultingType.SYSTEM)

    @model_validator(mode="after")
    def _check(self) -> Args:
        if self.defaulting_type is DefaultingType.SYSTEM and self.default_constraints:
            raise ValueError("defaultConstraints: must be empty when defaultingType is System")
        for i, raw in enumerate(self.default_constraints):
            if raw.get("labelSelector") is not None:
                raise ValueError(
                    f"defaultConstraints[{i}].labelSelector: not allowed (the selector comes"
                    " from the pod's Services and controllers)"
                )
        self.parsed()
        return self

    def parsed(self) -> tuple[api.SpreadConstraint, ...]:
        """The configured default constraints (selectors filled in per pod)."""
        if self.defaulting_type is DefaultingType.SYSTEM:
            return tuple(
                api.SpreadConstraint(skew, key, api.Unsatisfiable.SCHEDULE_ANYWAY, None)
                for skew, key in SYSTEM_DEFAULT_CONSTRAINTS
            )
        try:
            where = objects.FieldPath("", "defaultConstraints")
            return objects.parse_spread_constraints(list(self.default_constraints), where, {})
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc


def default_selector(pod: api.Pod, snapshot: ClusterSnapshot) -> api.LabelSelector | None:
    """kube-scheduler's ``DefaultSelector``: the union of the selectors of the Services
    in the pod's namespace that select it and of its controller (ReplicationController,
    ReplicaSet or StatefulSet, found by name); ``None`` when nothing selects it."""
    labels: dict[str, str] = {}
    expressions: list[api.Requirement] = []
    controller = pod.controller
    for workload in snapshot.workloads:
        if workload.namespace != pod.namespace or workload.selector is None:
            continue
        if workload.kind is api.WorkloadKind.SERVICE:
            if workload.selector.matches(pod.labels):
                labels.update(workload.selector.match_labels)
        elif controller == (workload.kind.value, workload.name):
            labels.update(workload.selector.match_labels)
            expressions.extend(workload.selector.match_expressions)
    if not labels and not expressions:
        return None
    return api.LabelSelector(tuple(sorted(labels.items())), tuple(expressions))


@dataclass(frozen=True, slots=True)
class _Counted:
    """One constraint, counted over the cluster for one cycle."""

    constraint: api.SpreadConstraint
    codes: npt.NDArray[np.int32]
    """Per node: its domain (label value code), -1 without the key."""
    domain_counts: Int64s
    """Matching pods per domain code."""
    self_match: int
    global_min: int
    passes: Mask
    """Per domain code: the skew of placing the pod there is within ``maxSkew``; one
    more entry, False, which code -1 (a node without the key) reads."""


@dataclass(frozen=True, slots=True)
class _FilterState:
    constraints: tuple[_Counted, ...]


@dataclass(frozen=True, slots=True)
class _ScoreState:
    ignored: Mask
    """Over all nodes: nodes whose score is forced to 0 (missing a topology key)."""
    scores: Int64s
    """Over all nodes: the raw score."""


def _present_domains(column: LabelColumn, eligible: Mask) -> tuple[Mask, int]:
    """Per domain code: some eligible node is in it; and how many domains are."""
    present = np.zeros(len(column.values), dtype=bool)
    present[column.codes[eligible]] = True
    return present, int(present.sum())


class PodTopologySpread:
    name = NAME

    def __init__(self, args: Args, handle: Handle) -> None:
        self._defaults = args.parsed()
        self._system = args.defaulting_type is DefaultingType.SYSTEM
        self._handle = handle
        self._untainted = helpers.StaticNodeCache[Mask]()
        self._keyed = helpers.StaticNodeCache[Mask]()
        self._domains = helpers.StaticNodeCache[tuple[Mask, int]]()

    # --- shared ----------------------------------------------------------------------

    def constraints(
        self, pod: api.Pod, snapshot: ClusterSnapshot, kind: api.Unsatisfiable
    ) -> tuple[tuple[api.SpreadConstraint, ...], bool]:
        """The pod's constraints of ``kind`` and whether they are system defaults."""
        if pod.spread_constraints:
            own = tuple(c for c in pod.spread_constraints if c.when_unsatisfiable is kind)
            return own, False
        wanted = tuple(c for c in self._defaults if c.when_unsatisfiable is kind)
        if not wanted:
            return (), False
        selector = default_selector(pod, snapshot)
        if selector is None:
            return (), False
        filled = tuple(
            api.SpreadConstraint(
                c.max_skew,
                c.topology_key,
                c.when_unsatisfiable,
                selector,
                c.min_domains,
                c.honor_node_affinity,
                c.honor_node_taints,
            )
            for c in wanted
        )
        return filled, self._system

    def _tolerated(self, pod: api.Pod, snapshot: ClusterSnapshot) -> Mask:
        """Over all nodes: every NoSchedule/NoExecute taint tolerated (taints Honor)."""
        gates = self._handle.features

        def compute() -> Mask:
            by_set = np.array(
                [
                    taint_toleration.first_untolerated(
                        taints,
                        pod.tolerations,
                        comparison_operators=gates.taint_toleration_comparison_operators,
                    )
                    is None
                    for taints in snapshot.taint_sets
                ],
                dtype=bool,
            )
            result: Mask = by_set[snapshot.taint_set]
            return result

        return self._untainted.get(snapshot, pod.tolerations, compute)

    def _included(
        self, pod: api.Pod, snapshot: ClusterSnapshot, constraint: api.SpreadConstraint
    ) -> Mask | None:
        """Over all nodes: the constraint's node inclusion policies (``None``: all)."""
        mask: Mask | None = None
        affinity = pod.affinity
        if constraint.honor_node_affinity and (
            pod.node_selector or (affinity is not None and affinity.required is not None)
        ):
            mask = node_affinity.pod_affinity_mask(pod, snapshot)
        if constraint.honor_node_taints:
            tolerated = self._tolerated(pod, snapshot)
            mask = tolerated if mask is None else mask & tolerated
        return mask

    @staticmethod
    def _placements(
        pod: api.Pod, snapshot: ClusterSnapshot, constraint: api.SpreadConstraint
    ) -> tuple[NodeIndices, Int64s]:
        """Non-terminating pods of the pod's namespace the selector matches: the nodes
        holding them and how many (a node may repeat)."""
        if constraint.selector is None:
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.int64)
        groups = snapshot.pod_groups.matching(
            constraint.selector, pod.namespace.__eq__, include_terminating=False
        )
        return snapshot.pod_groups.placements(groups)

    def _matching(
        self, pod: api.Pod, snapshot: ClusterSnapshot, constraint: api.SpreadConstraint
    ) -> Int64s:
        """Over all nodes: how many of those pods each holds."""
        nodes, counts = self._placements(pod, snapshot, constraint)
        return np.bincount(nodes, weights=counts, minlength=snapshot.size).astype(np.int64)

    def _has_keys(
        self, snapshot: ClusterSnapshot, constraints: tuple[api.SpreadConstraint, ...]
    ) -> Mask:
        keys = tuple(sorted({c.topology_key for c in constraints}))

        def compute() -> Mask:
            mask = np.ones(snapshot.size, dtype=bool)
            for key in keys:
                mask &= snapshot.labels.column(key).codes >= 0
            return mask

        return self._keyed.get(snapshot, keys, compute)

    # --- Filter ----------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        constraints, _ = self.constraints(pod, snapshot, api.Unsatisfiable.DO_NOT_SCHEDULE)
        if not constraints:
            return None, api.SKIP
        has_keys = self._has_keys(snapshot, constraints)
        counted = []
        for c in constraints:
            column = snapshot.labels.column(c.topology_key)
            included = self._included(pod, snapshot, c)
            eligible = has_keys if included is None else has_keys & included
            if included is None:  # static: the same for every pod with these keys
                key = (c.topology_key, *(k.topology_key for k in constraints))
                compute = functools.partial(_present_domains, column, eligible)
                present, found = self._domains.get(snapshot, key, compute)
            else:
                present, found = _present_domains(column, eligible)
            nodes, counts = self._placements(pod, snapshot, c)
            keep = eligible[nodes]
            per_domain = np.zeros(len(column.values), dtype=np.int64)
            np.add.at(per_domain, column.codes[nodes[keep]], counts[keep])
            global_min = int(per_domain[present].min()) if found else 0
            if found < c.min_domains:
                global_min = 0
            self_match = int(c.selects(pod.labels))
            skew = per_domain + self_match - global_min
            passes = np.append(skew <= c.max_skew, False)
            counted.append(_Counted(c, column.codes, per_domain, self_match, global_min, passes))
        state.write(_PRE_FILTER_KEY, _FilterState(tuple(counted)))
        return None, api.SUCCESS

    def _filter_state(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> _FilterState:
        found = state.read(_PRE_FILTER_KEY, _FilterState)
        if found is None:
            self.pre_filter(state, pod, snapshot)
            found = state.read(_PRE_FILTER_KEY, _FilterState) or _FilterState(())
        return found

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        mask = np.ones(len(nodes), dtype=bool)
        for counted in self._filter_state(state, pod, snapshot).constraints:
            mask &= counted.passes.take(counted.codes.take(nodes))  # code -1: the last
        return mask

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        for counted in self._filter_state(state, pod, snapshot).constraints:
            code = int(counted.codes[node])
            if code < 0:
                return api.unschedulable(REASON_MISSING_LABEL, unresolvable=True)
            skew = int(counted.domain_counts[code]) + counted.self_match - counted.global_min
            if skew > counted.constraint.max_skew:
                return api.unschedulable(REASON_CONSTRAINTS)
        return api.SUCCESS

    # --- Score -----------------------------------------------------------------------

    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        constraints, system = self.constraints(pod, snapshot, api.Unsatisfiable.SCHEDULE_ANYWAY)
        if not constraints or len(nodes) == 0:
            return api.SKIP
        require_all = not system
        has_keys = self._has_keys(snapshot, constraints)
        ignored = np.zeros(snapshot.size, dtype=bool)
        if require_all:
            ignored[nodes] = ~has_keys[nodes]
        considered = nodes[~ignored[nodes]]
        scores = np.zeros(snapshot.size, dtype=np.float64)
        for c in constraints:
            column = snapshot.labels.column(c.topology_key)
            matching = self._matching(pod, snapshot, c)
            if c.topology_key == HOSTNAME_LABEL:
                size = len(considered)
                per_node = matching
            else:
                # A missing label reads as the value "" (its own domain), as in Go.
                empty = column.code_of.get("", len(column.values))
                domain = np.where(column.codes >= 0, column.codes, empty)
                domains = len(column.values) + 1
                candidate = np.zeros(domains, dtype=bool)
                candidate[domain[considered]] = True
                size = int(candidate.sum())
                included = self._included(pod, snapshot, c)
                counted = candidate[domain] if included is None else included & candidate[domain]
                if require_all:
                    counted &= has_keys
                per_domain = np.bincount(
                    domain[counted], weights=matching[counted], minlength=domains
                )
                per_node = per_domain[domain]
            weight = np.log(size + 2)
            contributes = column.codes >= 0
            scores += np.where(contributes, per_node * weight + (c.max_skew - 1), 0.0)
        rounded = helpers.go_round_vector(scores)  # Go's math.Round
        state.write(_PRE_SCORE_KEY, _ScoreState(ignored, rounded))
        return api.SUCCESS

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        found = state.read(_PRE_SCORE_KEY, _ScoreState)
        if found is None:
            return np.zeros(len(nodes), dtype=np.int64)
        state.write(f"{_PRE_SCORE_KEY}/ignored", found.ignored[nodes])
        result: Int64s = np.where(found.ignored[nodes], 0, found.scores[nodes])
        return result

    def normalize_score(self, state: CycleState, pod: api.Pod, scores: Int64s) -> Int64s:
        ignored = state.read(f"{_PRE_SCORE_KEY}/ignored", np.ndarray)
        if ignored is None or len(ignored) != len(scores):
            ignored = np.zeros(len(scores), dtype=bool)
        kept = scores[~ignored]
        if kept.size == 0:
            return np.zeros_like(scores)
        lowest, highest = int(kept.min()), int(kept.max())
        if highest == 0:
            normalized = np.full_like(scores, api.MAX_NODE_SCORE)
        else:
            normalized = api.MAX_NODE_SCORE * (highest + lowest - scores) // highest
        result: Int64s = np.where(ignored, 0, normalized)
        return result

    # --- QueueingHints ------------------------------------------------------------------

    def events_to_register(self) -> Sequence[EventHint]:
        pod_events = POD_ADD_EVENTS | POD_LABEL_EVENTS | POD_DELETE_EVENTS
        node_events = frozenset(
            {
                ClusterEvent.NODE_ADD,
                ClusterEvent.NODE_DELETE,
                ClusterEvent.NODE_LABEL_CHANGE,
                ClusterEvent.NODE_TAINT_CHANGE,
            }
        )
        return (
            EventHint(
                pod_events | {ClusterEvent.UNSCHEDULED_POD_TOLERATION_CHANGE},
                self.is_schedulable_after_pod_change,
            ),
            EventHint(node_events, self.is_schedulable_after_node_change),
        )

    def _hard_constraints(self, pod: api.Pod) -> tuple[api.SpreadConstraint, ...] | None:
        """The pod's DoNotSchedule constraints; ``None`` when they are defaults whose
        selector comes from the pod's Services and controllers, which a hint cannot
        read (the hint then answers Queue, as it does on an error upstream)."""
        kind = api.Unsatisfiable.DO_NOT_SCHEDULE
        if pod.spread_constraints:
            return tuple(c for c in pod.spread_constraints if c.when_unsatisfiable is kind)
        if any(c.when_unsatisfiable is kind for c in self._defaults):
            return None
        return ()

    def is_schedulable_after_pod_change(self, pod: api.Pod, old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterPodChange``: a pod of the same namespace, bound or
        nominated, whose labels (now or before) match a constraint."""
        queue, skip = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
        if (new is not None and not _involved(new, pod)) or (
            old is not None and not _involved(old, pod)
        ):
            return skip
        constraints = self._hard_constraints(pod)
        if constraints is None:
            return queue
        if new is not None and old is not None:
            if (
                new.uid == pod.uid
                and new.tolerations != old.tolerations
                and any(c.honor_node_taints for c in constraints)
            ):
                return queue
            if new.labels == old.labels:
                return skip
            changed = any(c.selects(old.labels) != c.selects(new.labels) for c in constraints)
            return queue if changed else skip
        labels = (new if new is not None else old).labels
        return queue if any(c.selects(labels) for c in constraints) else skip

    def is_schedulable_after_node_change(self, pod: api.Pod, old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterNodeChange``: a node that has (or had) every topology key
        added, deleted, or changed in a topology value or taints."""
        queue, skip = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
        constraints = self._hard_constraints(pod)
        if constraints is None:
            return queue
        was = old is not None and _has_topology_keys(old, constraints)
        now = new is not None and _has_topology_keys(new, constraints)
        if old is not None and new is not None:
            if was != now:
                return queue
            if now and (
                any(
                    old.labels.get(c.topology_key) != new.labels.get(c.topology_key)
                    for c in constraints
                )
                or old.taints != new.taints
            ):
                return queue
            return skip
        return queue if (now if new is not None else was) else skip


def _involved(other: api.Pod, pod: api.Pod) -> bool:
    """``involvedInTopologySpreading``: the pod itself, or a bound or nominated pod of
    its namespace."""
    if other.uid == pod.uid:
        return True
    if not other.node_name and not other.nominated_node_name:
        return False
    return other.namespace == pod.namespace


def _has_topology_keys(node: api.Node, constraints: Sequence[api.SpreadConstraint]) -> bool:
    return all(c.topology_key in node.labels for c in constraints)


def new(args: Args | None, handle: Handle) -> PodTopologySpread:
    return PodTopologySpread(args or Args(), handle)
