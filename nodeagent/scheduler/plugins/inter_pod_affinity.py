"""InterPodAffinity (PreFilter, Filter, PreScore, Score): keep pods together or apart by
the pods already running in a topology domain (``plugins/interpodaffinity``).

Filter, in kube-scheduler's order:

1. the pod's required affinity: the node carries every term's topology key and, for
   each term, its domain holds a pod matching *all* the terms; unless no pod anywhere
   matches them and the pod matches its own terms (the first pod of a self-affine
   group) - unresolvable;
2. the pod's required anti-affinity: no pod matching a term in the node's domain;
3. symmetry: no bound pod whose required anti-affinity term matches the incoming pod
   sits in the node's domain for that term's key.

Score: per topology domain, + weight for each of the pod's preferred affinity terms a
bound pod there matches, - weight for anti-affinity; and from the bound pods' side,
``hardPodAffinityWeight`` for each of their required affinity terms the incoming pod
matches, +/- weight for their preferred terms (skipped when
``ignorePreferredTermsOfExistingPods`` and the pod has no preferred terms of its own).
Normalized min-max over the scored nodes.

Everything is counted once per cycle over domains (label value codes) with numpy: pods
matching a selector come from the snapshot's pod groups, bound pods' terms from its
deduplicated term index; Filter and Score then index per node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import Field

from nodeagent.scheduler import api, config
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
from nodeagent.scheduler.snapshot import (
    ClusterSnapshot,
    Int64s,
    Mask,
    NodeIndices,
    TermKind,
)

NAME = "InterPodAffinity"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
_PRE_FILTER_KEY = f"PreFilter{NAME}"
_PRE_SCORE_KEY = f"PreScore{NAME}"


class Args(config.ConfigModel):
    """``InterPodAffinityArgs``."""

    hard_pod_affinity_weight: int = Field(default=1, ge=0, le=100)
    ignore_preferred_terms_of_existing_pods: bool = False


def _group_namespaces(
    term: api.PodAffinityTerm, owner_namespace: str, snapshot: ClusterSnapshot
) -> Callable[[str], bool]:
    def accepts(namespace: str) -> bool:
        return term.namespace_matches(owner_namespace, namespace, snapshot.namespace_labels)

    return accepts


def matching_per_node(
    terms: tuple[api.PodAffinityTerm, ...], owner_namespace: str, snapshot: ClusterSnapshot
) -> Int64s:
    """Over all nodes: bound pods matching *every* one of ``terms``."""
    if not terms or any(t.selector is None for t in terms):
        return np.zeros(snapshot.size, dtype=np.int64)
    first, rest = terms[0], terms[1:]
    assert first.selector is not None
    groups = snapshot.pod_groups.matching(
        first.selector, _group_namespaces(first, owner_namespace, snapshot)
    )
    for term in rest:
        assert term.selector is not None
        groups = [
            g
            for g in groups
            if term.namespace_matches(
                owner_namespace, snapshot.pod_groups.keys[g][0], snapshot.namespace_labels
            )
            and term.selector.matches(snapshot.pod_groups.labels[g])
        ]
    return snapshot.pod_groups.counts(groups, snapshot.size)


def per_domain(snapshot: ClusterSnapshot, key: str, per_node: Int64s) -> Int64s:
    """Sum of ``per_node`` over each domain of ``key`` (nodes without it left out)."""
    column = snapshot.labels.column(key)
    labelled = column.codes >= 0
    summed: Int64s = np.bincount(
        column.codes[labelled], weights=per_node[labelled], minlength=len(column.values)
    ).astype(np.int64)
    return summed


def _domain_value(codes: npt.NDArray[np.int32], sums: Int64s, nodes: NodeIndices) -> Int64s:
    """Per node of ``nodes``: its domain's entry of ``sums``, 0 for a node without the
    key. A key no node carries has no domain at all (``sums`` is empty): such a term
    counts nothing anywhere, as upstream."""
    padded = np.append(sums, 0)  # code -1 (no label) reads the trailing 0
    picked: Int64s = padded[codes[nodes]]
    return picked


@dataclass(slots=True)
class _FilterState:
    affinity: list[tuple[npt.NDArray[np.int32], Int64s]] = field(default_factory=list)
    """Per required affinity term: node label codes, matching pods per domain."""
    affinity_anywhere: bool = False
    self_affine: bool = False
    anti: list[tuple[npt.NDArray[np.int32], Int64s]] = field(default_factory=list)
    existing_blocked: Mask | None = None
    """Over all nodes: in the domain of a bound pod whose anti-affinity rejects the pod."""


class InterPodAffinity:
    name = NAME

    def __init__(self, args: Args) -> None:
        self._hard_weight = args.hard_pod_affinity_weight
        self._ignore_existing_preferred = args.ignore_preferred_terms_of_existing_pods

    # --- Filter ----------------------------------------------------------------------

    @staticmethod
    def existing_anti_affinity_blocked(pod: api.Pod, snapshot: ClusterSnapshot) -> Mask | None:
        """Over all nodes: rejected by bound pods' required anti-affinity (``None``: no
        bound pod's term matches the pod)."""
        blocked: Mask | None = None
        for (_, owner_ns, term, _), nodes in snapshot.affinity_terms.could_match(
            pod, TermKind.REQUIRED_ANTI_AFFINITY
        ):
            if not term.matches(owner_ns, pod, snapshot.namespace_labels):
                continue
            column = snapshot.labels.column(term.topology_key)
            holders = np.fromiter(nodes.keys(), dtype=np.intp, count=len(nodes))
            domains = column.codes[holders]
            domains = domains[domains >= 0]
            if domains.size == 0:
                continue
            hit = np.isin(column.codes, domains)
            blocked = hit if blocked is None else blocked | hit
        return blocked

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        affinity = pod.pod_affinity
        required = affinity.required if affinity is not None else ()
        required_anti = affinity.required_anti if affinity is not None else ()
        blocked = self.existing_anti_affinity_blocked(pod, snapshot)
        if not required and not required_anti and blocked is None:
            return None, api.SKIP
        found = _FilterState(existing_blocked=blocked)
        if required:
            together = matching_per_node(required, pod.namespace, snapshot)
            for term in required:
                sums = per_domain(snapshot, term.topology_key, together)
                found.affinity.append((snapshot.labels.column(term.topology_key).codes, sums))
                found.affinity_anywhere |= bool(sums.any())
            found.self_affine = all(
                t.matches(pod.namespace, pod, snapshot.namespace_labels) for t in required
            )
        for term in required_anti:
            apart = matching_per_node((term,), pod.namespace, snapshot)
            sums = per_domain(snapshot, term.topology_key, apart)
            found.anti.append((snapshot.labels.column(term.topology_key).codes, sums))
        state.write(_PRE_FILTER_KEY, found)
        return None, api.SUCCESS

    def _filter_state(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> _FilterState:
        found = state.read(_PRE_FILTER_KEY, _FilterState)
        if found is None:
            self.pre_filter(state, pod, snapshot)
            found = state.read(_PRE_FILTER_KEY, _FilterState) or _FilterState()
        return found

    @staticmethod
    def _verdicts(found: _FilterState, nodes: NodeIndices) -> tuple[Mask, Mask, Mask]:
        """Per node: passes affinity, anti-affinity, existing pods' anti-affinity."""
        affine = np.ones(len(nodes), dtype=bool)
        if found.affinity:
            labelled = np.ones(len(nodes), dtype=bool)
            exist = np.ones(len(nodes), dtype=bool)
            for codes, sums in found.affinity:
                labelled &= codes[nodes] >= 0
                exist &= _domain_value(codes, sums, nodes) > 0
            first_of_group = not found.affinity_anywhere and found.self_affine
            affine = labelled & (exist | first_of_group)
        apart = np.ones(len(nodes), dtype=bool)
        for codes, sums in found.anti:
            apart &= _domain_value(codes, sums, nodes) == 0
        symmetric = np.ones(len(nodes), dtype=bool)
        if found.existing_blocked is not None:
            symmetric = ~found.existing_blocked[nodes]
        return affine, apart, symmetric

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        affine, apart, symmetric = self._verdicts(self._filter_state(state, pod, snapshot), nodes)
        result: Mask = affine & apart & symmetric
        return result

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        found = self._filter_state(state, pod, snapshot)
        affine, apart, symmetric = self._verdicts(found, np.array([node], dtype=np.intp))
        if not affine[0]:
            return api.unschedulable(REASON_AFFINITY, unresolvable=True)
        if not apart[0]:
            return api.unschedulable(REASON_ANTI_AFFINITY)
        if not symmetric[0]:
            return api.unschedulable(REASON_EXISTING_ANTI_AFFINITY)
        return api.SUCCESS

    # --- Score -----------------------------------------------------------------------

    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        if len(nodes) == 0:
            return api.SKIP
        affinity = pod.pod_affinity
        preferred = affinity.preferred if affinity is not None else ()
        preferred_anti = affinity.preferred_anti if affinity is not None else ()
        has_own = bool(preferred or preferred_anti)
        if self._ignore_existing_preferred and not has_own:
            return api.SKIP
        topology: dict[str, Int64s] = {}

        def add(key: str, amount: int, counts: Int64s) -> None:
            """``amount`` per matching pod into its node's domain of ``key``; pods on
            nodes without the key (or a key no node carries) add no entry, as upstream."""
            if not (counts[snapshot.labels.column(key).codes >= 0] > 0).any():
                return
            amounts = amount * per_domain(snapshot, key, counts)
            topology[key] = topology[key] + amounts if key in topology else amounts

        for weighted, sign in ((preferred, 1), (preferred_anti, -1)):
            for item in weighted:
                counts = matching_per_node((item.term,), pod.namespace, snapshot)
                add(item.term.topology_key, sign * item.weight, counts)

        kinds = [TermKind.REQUIRED_AFFINITY] if self._hard_weight > 0 else []
        kinds += [TermKind.PREFERRED_AFFINITY, TermKind.PREFERRED_ANTI_AFFINITY]
        for (kind, owner_ns, term, weight), holders in snapshot.affinity_terms.could_match(
            pod, *kinds
        ):
            if not term.matches(owner_ns, pod, snapshot.namespace_labels):
                continue
            if kind is TermKind.REQUIRED_AFFINITY:
                amount = self._hard_weight
            else:
                amount = weight if kind is TermKind.PREFERRED_AFFINITY else -weight
            counts = np.zeros(snapshot.size, dtype=np.int64)
            node_ids = np.fromiter(holders.keys(), dtype=np.intp, count=len(holders))
            counts[node_ids] = np.fromiter(holders.values(), dtype=np.int64, count=len(holders))
            add(term.topology_key, amount, counts)

        if not topology:
            return api.SKIP
        scores = np.zeros(snapshot.size, dtype=np.int64)
        for key, sums in topology.items():
            codes = snapshot.labels.column(key).codes
            scores += _domain_value(codes, sums, snapshot.all_nodes)
        state.write(_PRE_SCORE_KEY, scores)
        return api.SUCCESS

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        scores = state.read(_PRE_SCORE_KEY, np.ndarray)
        if scores is None:
            return np.zeros(len(nodes), dtype=np.int64)
        result: Int64s = scores.take(nodes)
        return result

    def normalize_score(self, state: CycleState, pod: api.Pod, scores: Int64s) -> Int64s:
        if scores.size == 0 or state.read(_PRE_SCORE_KEY, np.ndarray) is None:
            return scores
        lowest, highest = int(scores.min()), int(scores.max())
        spread = highest - lowest
        if spread <= 0:
            return np.zeros_like(scores)
        scaled = api.MAX_NODE_SCORE * ((scores - lowest).astype(np.float64) / float(spread))
        return scaled.astype(np.int64)  # Go's int64(float): truncation, values >= 0

    # --- QueueingHints ------------------------------------------------------------------

    def events_to_register(self) -> Sequence[EventHint]:
        return (
            EventHint(
                POD_ADD_EVENTS | POD_LABEL_EVENTS | POD_DELETE_EVENTS,
                is_schedulable_after_pod_change,
            ),
            EventHint(
                frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_LABEL_CHANGE}),
                is_schedulable_after_node_change,
            ),
        )


def _term_matches(term: api.PodAffinityTerm, owner: api.Pod, other: api.Pod) -> bool:
    """``AffinityTerm.Matches`` without namespace labels: a term with a non-empty
    ``namespaceSelector`` is taken to select every namespace (a hint can only say Queue
    too often, never too rarely)."""
    if term.selector is None or not term.selector.matches(other.labels):
        return False
    selector = term.namespace_selector
    if selector is not None and not selector.is_empty:
        return True
    return term.namespace_matches(owner.namespace, other.namespace, {})


def _matches_all(terms: Sequence[api.PodAffinityTerm], owner: api.Pod, other: api.Pod) -> bool:
    """``podMatchesAllAffinityTerms``: no terms never match."""
    return bool(terms) and all(_term_matches(t, owner, other) for t in terms)


def _required(
    pod: api.Pod,
) -> tuple[tuple[api.PodAffinityTerm, ...], tuple[api.PodAffinityTerm, ...]]:
    affinity = pod.pod_affinity
    if affinity is None:
        return (), ()
    return affinity.required, affinity.required_anti


def is_schedulable_after_pod_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPodChange``: the rejected pod's own label change; else a
    bound or nominated pod now matching all its affinity terms, no longer matching all
    its anti-affinity terms, or (deleted) one whose anti-affinity matched it."""
    queue, skip = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
    if new is not None and old is not None and new.uid == pod.uid:
        return queue
    for other in (new, old):
        if other is not None and not other.node_name and not other.nominated_node_name:
            return skip
    terms, anti = _required(pod)
    if new is not None and old is not None:
        if not _matches_all(terms, pod, old) and _matches_all(terms, pod, new):
            return queue
        if _matches_all(anti, pod, old) and not _matches_all(anti, pod, new):
            return queue
        return skip
    if new is not None:
        return queue if _matches_all(terms, pod, new) else skip
    if _matches_all(anti, pod, old):
        return queue
    _, old_anti = _required(old)
    return queue if _matches_all(old_anti, old, pod) else skip


def is_schedulable_after_node_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterNodeChange``: a node gaining or changing an affinity term's
    topology key, or losing or changing an anti-affinity term's (any anti-affinity
    term on a new node)."""
    queue, skip = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
    terms, anti = _required(pod)
    for term in terms:
        key = term.topology_key
        if old is None:
            if key in new.labels:
                return queue
            continue
        if key in new.labels and (key not in old.labels or old.labels[key] != new.labels[key]):
            return queue
    for term in anti:
        if old is None:
            return queue
        key = term.topology_key
        if key in old.labels and (key not in new.labels or old.labels[key] != new.labels[key]):
            return queue
    return skip


def new(args: Args | None, handle: Handle) -> InterPodAffinity:
    return InterPodAffinity(args or Args())
