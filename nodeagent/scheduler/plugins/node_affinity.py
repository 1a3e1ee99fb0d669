"""NodeAffinity (PreFilter, Filter, PreScore, Score): ``nodeSelector``, required and
preferred node affinity, and the scheduler-enforced ``addedAffinity`` (``plugins/nodeaffinity``).

Filter: the node must match the scheduler-enforced affinity (if configured), then the
pod's ``nodeSelector`` AND one of its required terms (terms are ORed; inside a term all
expressions and fields are ANDed; an empty term matches nothing; a term that does not
parse - bad operator, wrong value count - fails while other terms may still match).
Score: the sum of the weights of the preferred terms the node matches (terms with weight
0 or without any expression or field are dropped, as kube-scheduler drops them),
normalized so the best node gets 100.

Selectors are evaluated column-wise over the snapshot's label columns; the result for a
given selector is cached per snapshot (labels do not change during a plan).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import model_validator

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api, config, objects
from nodeagent.scheduler.framework import (
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.plugins import helpers
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices

NAME = "NodeAffinity"
REASON_POD = "node(s) didn't match Pod's node affinity/selector"
REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
REASON_CONFLICT = "pod affinity terms conflict"

LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
NAME_FIELD = "metadata.name"
INT64_MIN, INT64_MAX = api.INT64_MIN, api.INT64_MAX

parse_go_int = api.parse_go_int


def requirement_error(requirement: api.Requirement, *, field: bool) -> str | None:
    """Why kube-scheduler would fail to parse this requirement, or ``None``."""
    key, op, values = requirement.key, requirement.operator, requirement.values
    if field:
        if key != NAME_FIELD:
            return f"{key!r} is not a supported field selector (only {NAME_FIELD})"
        if op not in ("In", "NotIn"):
            return f"{op!r} is not a valid field selector operator (In, NotIn)"
        if len(values) != 1:
            return "must have exactly one value"
        return None
    if not api.is_label_key(key):
        return f"{key!r} is not a valid label key"
    if op not in LABEL_OPERATORS:
        return f"{op!r} is not a valid operator ({', '.join(LABEL_OPERATORS)})"
    if op in ("In", "NotIn") and not values:
        return f"for {op} the values must be non-empty"
    if op in ("Exists", "DoesNotExist") and values:
        return f"for {op} the values must be empty"
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            return f"for {op} exactly one value is required"
        if parse_go_int(values[0]) is None:
            return f"for {op} the value must be an integer, got {values[0]!r}"
    for value in values:
        if not api.is_label_value(value):
            return f"{value!r} is not a valid label value"
    return None


def term_error(term: api.SelectorTerm) -> str | None:
    """The first requirement of the term kube-scheduler could not parse, and why."""
    for j, requirement in enumerate(term.match_expressions):
        if (problem := requirement_error(requirement, field=False)) is not None:
            return f"matchExpressions[{j}]: {problem}"
    for j, requirement in enumerate(term.match_fields):
        if (problem := requirement_error(requirement, field=True)) is not None:
            return f"matchFields[{j}]: {problem}"
    return None


# --- scalar matching (the specification) ------------------------------------------------


def requirement_matches(requirement: api.Requirement, labels: Mapping[str, str]) -> bool:
    op, values = requirement.operator, requirement.values
    present = requirement.key in labels
    value = labels.get(requirement.key, "")
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present:
        return False
    have, want = parse_go_int(value), parse_go_int(values[0])
    if have is None or want is None:
        return False
    return have > want if op == "Gt" else have < want


def term_matches(term: api.SelectorTerm, node: api.Node) -> bool:
    """A parsed, non-empty term against one node (errors and emptiness checked before)."""
    if not all(requirement_matches(r, node.labels) for r in term.match_expressions):
        return False
    for requirement in term.match_fields:
        equal = node.name == requirement.values[0]
        if equal != (requirement.operator == "In"):
            return False
    return True


def required_matches(terms: tuple[api.SelectorTerm, ...], node: api.Node) -> bool:
    return any(term_matches(t, node) for t in terms if not t.is_empty and term_error(t) is None)


def selector_matches(selector: Mapping[str, str], node: api.Node) -> bool:
    return all(node.labels.get(k) == v and k in node.labels for k, v in selector.items())


def scored_terms(terms: tuple[api.PreferredTerm, ...]) -> tuple[api.PreferredTerm, ...]:
    """The preferred terms that count: kube-scheduler drops those with weight 0 or an
    empty preference (which would otherwise match every node), and those that do not
    parse."""
    return tuple(
        t
        for t in terms
        if t.weight != 0 and not t.preference.is_empty and term_error(t.preference) is None
    )


def preferred_score(terms: tuple[api.PreferredTerm, ...], node: api.Node) -> int:
    return sum(t.weight for t in scored_terms(terms) if term_matches(t.preference, node))


# --- vectorized matching ----------------------------------------------------------------


def _requirement_mask(
    requirement: api.Requirement, snapshot: ClusterSnapshot, nodes: NodeIndices
) -> Mask:
    column = snapshot.labels.column(requirement.key)
    codes = column.codes[nodes]
    op = requirement.operator
    if op in ("In", "NotIn"):
        wanted = [column.code_of[v] for v in requirement.values if v in column.code_of]
        inside: Mask = np.isin(codes, wanted)
        return inside if op == "In" else ~inside
    if op == "Exists":
        return codes >= 0
    if op == "DoesNotExist":
        return codes < 0
    want = parse_go_int(requirement.values[0])
    assert want is not None  # checked by term_error
    parsed = [parse_go_int(v) for v in column.values]
    valid = np.array([p is not None for p in parsed] + [False], dtype=bool)
    numbers = np.array([p or 0 for p in parsed] + [0], dtype=object)
    # code -1 (label absent) indexes the trailing "invalid" slot
    node_valid = valid[codes]
    node_numbers = numbers[codes]
    compared = node_numbers > want if op == "Gt" else node_numbers < want
    result: Mask = node_valid & compared.astype(bool)
    return result


def term_mask(term: api.SelectorTerm, snapshot: ClusterSnapshot, nodes: NodeIndices) -> Mask:
    mask = np.ones(len(nodes), dtype=bool)
    for requirement in term.match_expressions:
        mask &= _requirement_mask(requirement, snapshot, nodes)
    for requirement in term.match_fields:
        same = nodes == snapshot.index.get(requirement.values[0], -1)
        mask &= same if requirement.operator == "In" else ~same
    return mask


def required_mask(
    terms: tuple[api.SelectorTerm, ...], snapshot: ClusterSnapshot, nodes: NodeIndices
) -> Mask:
    mask = np.zeros(len(nodes), dtype=bool)
    for term in terms:
        if not term.is_empty and term_error(term) is None:
            mask |= term_mask(term, snapshot, nodes)
    return mask


def selector_mask(
    selector: Mapping[str, str], snapshot: ClusterSnapshot, nodes: NodeIndices
) -> Mask:
    mask = np.ones(len(nodes), dtype=bool)
    for key, value in selector.items():
        column = snapshot.labels.column(key)
        mask &= column.codes[nodes] == column.code_of.get(value, -2)
    return mask


def preferred_vector(
    terms: tuple[api.PreferredTerm, ...], snapshot: ClusterSnapshot, nodes: NodeIndices
) -> Int64s:
    scores = np.zeros(len(nodes), dtype=np.int64)
    for term in scored_terms(terms):
        scores += term.weight * term_mask(term.preference, snapshot, nodes)
    return scores


# --- the plugin -------------------------------------------------------------------------


class Args(config.ConfigModel):
    """``NodeAffinityArgs``."""

    added_affinity: dict[str, Any] | None = None
    """A NodeAffinity every pod of the profile must also satisfy (required terms) and
    is scored by (preferred terms)."""

    @model_validator(mode="after")
    def _check(self) -> Args:
        affinity = self.parsed()
        if affinity is None:
            return self
        for i, term in enumerate(affinity.required or ()):
            if (problem := term_error(term)) is not None:
                raise ValueError(
                    "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                    f".nodeSelectorTerms[{i}].{problem}"
                )
        for i, preferred in enumerate(affinity.preferred):
            if preferred.weight == 0:  # never parsed by kube-scheduler, so never an error
                continue
            if (problem := term_error(preferred.preference)) is not None:
                raise ValueError(
                    "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                    f"[{i}].preference.{problem}"
                )
        return self

    def parsed(self) -> api.NodeAffinity | None:
        if self.added_affinity is None:
            return None
        try:
            where = objects.FieldPath("", "addedAffinity")  # the path is relative to the args
            return objects.parse_node_affinity(self.added_affinity, where)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class _Required:
    selector: tuple[tuple[str, str], ...]
    terms: tuple[api.SelectorTerm, ...] | None


def _required_of(pod: api.Pod) -> _Required:
    affinity = pod.affinity
    terms = affinity.required if affinity is not None else None
    return _Required(tuple(sorted(pod.node_selector.items())), terms)


_POD_MASKS = helpers.StaticNodeCache[Mask]()


def pod_affinity_mask(pod: api.Pod, snapshot: ClusterSnapshot) -> Mask:
    """Over all nodes: the pod's ``nodeSelector`` AND its required node affinity (what
    PodTopologySpread's ``nodeAffinityPolicy: Honor`` checks), cached per snapshot."""
    required = _required_of(pod)

    def compute() -> Mask:
        result = selector_mask(dict(required.selector), snapshot, snapshot.all_nodes)
        if required.terms is not None:
            result &= required_mask(required.terms, snapshot, snapshot.all_nodes)
        return result

    return _POD_MASKS.get(snapshot, required, compute)


class NodeAffinity:
    name = NAME
    resource_local = True
    """Filter reads only the node and its resource columns (batched preemption)."""

    def __init__(self, args: Args) -> None:
        added = args.parsed()
        self._added_required = added.required if added is not None else None
        self._added_preferred = added.preferred if added is not None else ()
        self._masks = helpers.StaticNodeCache[Mask]()
        self._scores = helpers.StaticNodeCache[Int64s]()

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        affinity = pod.affinity
        no_required = affinity is None or affinity.required is None
        if no_required and self._added_required is None and not pod.node_selector:
            return None, api.SKIP
        if affinity is None or not affinity.required:
            return None, api.SUCCESS
        names: set[str] | None = None
        for term in affinity.required:
            term_names: set[str] | None = None
            for requirement in term.match_fields:
                if requirement.key == NAME_FIELD and requirement.operator == "In":
                    values = set(requirement.values)
                    term_names = values if term_names is None else term_names & values
            if term_names is None:
                return None, api.SUCCESS  # this term allows any node
            names = term_names if names is None else names | term_names
        if not names:
            return None, api.unschedulable(REASON_CONFLICT, unresolvable=True)
        return PreFilterResult(frozenset(names)), api.SUCCESS

    def _cached_mask(
        self, snapshot: ClusterSnapshot, key: Hashable, compute: Any, nodes: NodeIndices
    ) -> Mask:
        full: Mask = self._masks.get(snapshot, key, lambda: compute(snapshot.all_nodes))
        result: Mask = full[nodes]
        return result

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        mask = np.ones(len(nodes), dtype=bool)
        if self._added_required is not None:
            added = self._added_required
            mask &= self._cached_mask(
                snapshot, ("added",), lambda n: required_mask(added, snapshot, n), nodes
            )
        required = _required_of(pod)

        def pod_mask(n: NodeIndices) -> Mask:
            result = selector_mask(dict(required.selector), snapshot, n)
            if required.terms is not None:
                result &= required_mask(required.terms, snapshot, n)
            return result

        return mask & self._cached_mask(snapshot, required, pod_mask, nodes)

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        target = snapshot.nodes[node]
        if self._added_required is not None and not required_matches(self._added_required, target):
            return api.unschedulable(REASON_ENFORCED, unresolvable=True)
        required = _required_of(pod)
        if not selector_matches(pod.node_selector, target) or (
            required.terms is not None and not required_matches(required.terms, target)
        ):
            return api.unschedulable(REASON_POD, unresolvable=True)
        return api.SUCCESS

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Every rejection of this plugin is UnschedulableAndUnresolvable."""
        return np.zeros(len(nodes), dtype=bool)

    def _preferred(self, pod: api.Pod) -> tuple[api.PreferredTerm, ...]:
        own = pod.affinity.preferred if pod.affinity is not None else ()
        return (*self._added_preferred, *own)

    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        return api.SUCCESS if self._preferred(pod) else api.SKIP

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        terms = self._preferred(pod)
        full = self._scores.get(
            snapshot, terms, lambda: preferred_vector(terms, snapshot, snapshot.all_nodes)
        )
        result: Int64s = full[nodes]
        return result

    def score_node(self, pod: api.Pod, snapshot: ClusterSnapshot, node: int) -> int:
        return preferred_score(self._preferred(pod), snapshot.nodes[node])

    def normalize_score(self, state: CycleState, pod: api.Pod, scores: Int64s) -> Int64s:
        return helpers.default_normalize_score(scores, reverse=False)

    def events_to_register(self) -> Sequence[EventHint]:
        return (
            EventHint(
                frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_LABEL_CHANGE}),
                self.is_schedulable_after_node_change,
            ),
        )

    def _matches(self, pod: api.Pod, node: api.Node) -> bool:
        """The pod's ``nodeSelector`` and required node affinity (``GetRequiredNodeAffinity``)."""
        if not selector_matches(pod.node_selector, node):
            return False
        affinity = pod.affinity
        return (
            affinity is None
            or affinity.required is None
            or required_matches(affinity.required, node)
        )

    def is_schedulable_after_node_change(self, pod: api.Pod, old: Any, new: Any) -> QueueingHint:
        """Queue when the node now matches the profile's added affinity and the pod's
        required affinity, and did not before (or is new)."""
        if self._added_required is not None and not required_matches(self._added_required, new):
            return QueueingHint.QUEUE_SKIP
        if not self._matches(pod, new):
            return QueueingHint.QUEUE_SKIP
        if old is None or not self._matches(pod, old):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP


def new(args: Args | None, handle: Handle) -> NodeAffinity:
    return NodeAffinity(args or Args())
