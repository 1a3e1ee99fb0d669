"""One scheduling cycle, as kube-scheduler's ``schedulePod`` in ``schedule_one.go`` runs it.

For a pod: PreFilter; the nominated node first if the pod has one; then Filter over the
nodes in node-tree order starting where the previous cycle stopped, until
``num_feasible_nodes_to_find`` feasible nodes are found; a single feasible node is taken
as is; otherwise PreScore, Score, NormalizeScore, weights, and :func:`select_host`
picks the best total, breaking ties by reservoir sampling. The chosen node is assumed
into the snapshot, then Reserve, Permit and the binding steps run; a failure after the
assume undoes it (Unreserve in reverse order).

Pods nominated to a node by an earlier preemption (the Handle's ``Nominator``) count
against that node only, as kube-scheduler's ``addGENominatedPods``: the nodes are
filtered without them, then each feasible node holding some (of priority >= the pod's)
is filtered again with its own on it, and must pass both. When no node
fits, the PostFilter plugins (DefaultPreemption) get the cycle's result as the diagnosis
and may offer a nomination, kept in :attr:`CycleResult.preemption` for the caller to act
on.

Filtering is vectorized by chunks: each Filter plugin evaluates a whole chunk of nodes,
the survivors go to the next plugin, and the first ``k`` feasible nodes in iteration
order are kept, which is exactly the sequential result (kube-scheduler's parallel
filtering may keep a slightly different set of ``k``). Why a node was rejected is
computed only when asked (:meth:`CycleResult.node_status`), by the rejecting plugin's
per-node form.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from nodeagent.scheduler import api
from nodeagent.scheduler.extenders.chain import Extenders, ExtenderScores, FilterVerdicts
from nodeagent.scheduler.extenders.client import ExtenderError
from nodeagent.scheduler.framework import (
    BulkStatusFilter,
    CycleState,
    FilterPlugin,
    Framework,
    PluginError,
    PluginFailures,
    PostFilterResult,
    PreemptionAwareFilter,
    ScoreOutcome,
)
from nodeagent.scheduler.preemption import RESOURCE_LOCAL
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
MIN_CHUNK = 64


def num_feasible_nodes_to_find(
    profile_percentage: int | None, global_percentage: int, num_all_nodes: int
) -> int:
    """How many feasible nodes to look for before scoring (``numFeasibleNodesToFind``)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    percentage = profile_percentage if profile_percentage is not None else global_percentage
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def select_host(totals: Int64s, rng: random.Random) -> int:
    """Position of the chosen node: the highest total; among ``k`` tied nodes the
    ``j``-th replaces the current choice with probability ``1/j`` (kube-scheduler's
    reservoir sampling), so each tied node is equally likely.

    Rather than drawing once per tied node, this jumps from one replacement to the next:
    after a replacement at ``j``, no replacement happens up to ``m`` with probability
    ``j/m``, so the next one is at ``floor(j/u) + 1`` for ``u`` uniform in ``(0, 1]``.
    Same distribution, about ``ln k`` draws instead of ``k``.
    """
    if totals.size == 0:
        raise ValueError("empty priority list")
    ties = (totals == totals.max()).nonzero()[0]
    chosen = replacement = 1
    while replacement <= len(ties):
        chosen = replacement
        replacement = math.floor(replacement / (1.0 - rng.random())) + 1
    return int(ties[chosen - 1])


@dataclass(slots=True)
class FilterOutcome:
    feasible: NodeIndices
    rejected: NodeIndices
    rejected_by: npt.NDArray[np.intp]
    """Per rejected node: index of the rejecting plugin in the active filter list."""
    processed: int


def _rotated(candidates: NodeIndices, start: int, begin: int, end: int) -> NodeIndices:
    """``candidates[(start + i) % n]`` for ``i`` in ``[begin, end)``."""
    n = len(candidates)
    lo, hi = (start + begin) % n, (start + begin) % n + (end - begin)
    if hi <= n:
        return candidates[lo:hi]
    return np.concatenate((candidates[lo:], candidates[: hi - n]))


def find_feasible(
    filters: list[FilterPlugin],
    state: CycleState,
    pod: api.Pod,
    snapshot: ClusterSnapshot,
    candidates: NodeIndices,
    *,
    start: int,
    wanted: int,
    failures: PluginFailures | None = None,
) -> FilterOutcome:
    """The first ``wanted`` nodes passing every filter, walking ``candidates`` from
    ``start``; also the nodes rejected on the way, and how many nodes were processed."""
    guards = failures or PluginFailures()
    total = len(candidates)
    feasible: list[NodeIndices] = []
    rejected: list[NodeIndices] = []
    rejected_by: list[npt.NDArray[np.intp]] = []
    found = processed = 0
    chunk = min(total, max(wanted, MIN_CHUNK))
    while processed < total and found < wanted:
        end = min(total, processed + chunk)
        block = _rotated(candidates, start, processed, end)
        # Until a plugin rejects a node of the block, the survivors are the whole block
        # (``alive`` None): a filter that passes every node then costs one count.
        nodes = block
        alive: NodeIndices | None = None
        verdict: npt.NDArray[np.intp] | None = None
        for position, plugin in enumerate(filters):
            try:  # free when nothing is raised, unlike a context manager per call
                passed = plugin.filter(state, pod, snapshot, nodes)
            except PluginError:
                raise
            except Exception as exc:
                raise guards.record(plugin.name, "Filter", pod, exc) from exc
            if np.count_nonzero(passed) == len(passed):  # cheaper than all()
                continue
            if alive is None or verdict is None:
                alive = np.arange(len(block), dtype=np.intp)
                verdict = np.full(len(block), -1, dtype=np.intp)
            verdict[alive[~passed]] = position
            alive = alive[passed]
            if alive.size == 0:
                break
            nodes = block[alive]
        need = wanted - found
        if alive is None or verdict is None:  # every node of the block passed
            taken = block[:need]
            feasible.append(taken)
            found += len(taken)
            processed += len(taken)
        else:
            cut = len(block)
            if alive.size >= need:
                alive = alive[:need]
                cut = int(alive[-1]) + 1
            failed = np.flatnonzero(verdict[:cut] >= 0)
            feasible.append(block[alive])
            rejected.append(block[failed])
            rejected_by.append(verdict[failed])
            found += alive.size
            processed += cut
        if found < wanted and processed < total:
            ratio = max(found / processed, 0.05)
            chunk = min(total, max(MIN_CHUNK, math.ceil((wanted - found) / ratio * 1.2)))
    empty = np.zeros(0, dtype=np.intp)
    return FilterOutcome(
        _joined(feasible, empty), _joined(rejected, empty), _joined(rejected_by, empty), processed
    )


def _joined(parts: list[npt.NDArray[np.intp]], empty: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else empty


@dataclass(slots=True)
class CycleResult:
    """What one cycle decided for a pod, and everything needed to explain it."""

    pod: api.Pod
    framework: Framework
    snapshot: ClusterSnapshot
    state: CycleState
    node: str | None = None
    status: api.Status = api.SUCCESS
    gated: bool = False
    nominated_node: str | None = None
    """Set by a PostFilter plugin (preemption) when the pod should wait for a node."""
    preemption: PostFilterResult | None = None
    """The PostFilter's full offer (victims, candidates), when it made one."""
    prefilter_status: api.Status = api.SUCCESS
    absent_status: api.Status | None = None
    """Status of nodes a PreFilter result left out (``None``: none left out)."""
    candidates: NodeIndices | None = None
    filters: list[FilterPlugin] = field(default_factory=list)
    outcome: FilterOutcome | None = None
    scored: NodeIndices | None = None
    scores: ScoreOutcome | None = None
    """The plugins' scores; ``totals`` include the extenders' weighted scores."""
    extender_verdicts: FilterVerdicts | None = None
    """What the filter extenders did to the plugins' feasible nodes."""
    extender_scores: tuple[ExtenderScores, ...] = ()
    _rejected: dict[int, int] | None = None
    _candidate_set: frozenset[int] | None = None
    _frozen: list[tuple[NodeIndices, list[api.Status], NodeIndices]] | None = None
    """The rejections as :meth:`_rejections` gives them, taken while the snapshot held
    nominated pods, or once a second pass (with the pods nominated to a node) rejected
    nodes the first found feasible: the explanations must name what the filters saw,
    which the snapshot no longer shows."""

    def freeze(self) -> None:
        """Take the rejections' statuses now (the snapshot holds nominated pods)."""
        self._frozen = list(self._rejections())

    def reject_again(self, statuses: Mapping[int, api.Status]) -> None:
        """Nodes the second pass (with the pods nominated there) rejected, with why:
        they are no longer feasible."""
        if self._frozen is None:
            self.freeze()
        assert self._frozen is not None
        if statuses:
            slot: dict[api.Status, int] = {}
            which = [slot.setdefault(status, len(slot)) for status in statuses.values()]
            nodes = np.fromiter(statuses, dtype=np.intp, count=len(statuses))
            self._frozen.append((nodes, list(slot), np.array(which, dtype=np.intp)))
        if self.outcome is not None and statuses:
            gone = np.fromiter(statuses, dtype=np.intp, count=len(statuses))
            self.outcome.feasible = self.outcome.feasible[~np.isin(self.outcome.feasible, gone)]

    def rejected_by_node(self) -> dict[int, int]:
        """Rejected node -> position of the rejecting plugin in ``filters``."""
        if self._rejected is None:
            self._rejected = {}
            if self.outcome is not None:
                pairs = zip(self.outcome.rejected, self.outcome.rejected_by, strict=True)
                self._rejected = {int(node): int(position) for node, position in pairs}
        return self._rejected

    def node_status(self, node: int) -> api.Status | None:
        """Why node ``node`` was rejected (``None`` if it was not, or not evaluated)."""
        if not self.prefilter_status.is_success:
            return self.prefilter_status
        if self.extender_verdicts is not None and node in self.extender_verdicts.statuses:
            return self.extender_verdicts.statuses[node]
        if self._frozen is not None:
            found = self._plugin_statuses().get(node)
            if found is not None:
                return found
        position = None if self._frozen is not None else self.rejected_by_node().get(node)
        if position is not None:
            plugin = self.filters[position]
            return plugin.filter_node(self.state, self.pod, self.snapshot, node).with_plugin(
                plugin.name
            )
        if self.absent_status is not None and self.candidates is not None:
            if self._candidate_set is None:
                self._candidate_set = frozenset(int(n) for n in self.candidates)
            if node not in self._candidate_set:
                return self.absent_status
        return None

    def preemption_may_help(self) -> Mask:
        """Over all nodes: rejected, but not UnschedulableAndUnresolvable (PreFilter
        rejections and nodes a PreFilter result left out never are)."""
        helps = np.zeros(self.snapshot.size, dtype=bool)
        if not self.prefilter_status.is_success or self.outcome is None:
            return helps
        if self._frozen is not None:
            for nodes, distinct, which in self._frozen:
                may = np.array([s.code is api.Code.UNSCHEDULABLE for s in distinct], dtype=bool)
                helps[nodes] = may[which]
            rejected, by = self.outcome.rejected[:0], self.outcome.rejected_by[:0]
        else:
            rejected, by = self.outcome.rejected, self.outcome.rejected_by
        for position in np.unique(by):
            plugin = self.filters[int(position)]
            nodes = rejected[by == position]
            with self.framework.handle.guard(plugin.name, "Filter", self.pod):
                if isinstance(plugin, PreemptionAwareFilter):
                    helps[nodes] = plugin.preemption_may_help(
                        self.state, self.pod, self.snapshot, nodes
                    )
                    continue
                for node in nodes:
                    status = plugin.filter_node(self.state, self.pod, self.snapshot, int(node))
                    helps[node] = status.code is api.Code.UNSCHEDULABLE
        if self.extender_verdicts is not None:  # FailedNodes, not the unresolvable ones
            for node, status in self.extender_verdicts.statuses.items():
                helps[node] = status.code is api.Code.UNSCHEDULABLE
        return helps

    def _rejections(self) -> Iterator[tuple[NodeIndices, list[api.Status], NodeIndices]]:
        """Rejected nodes grouped by rejecting plugin: the nodes, the distinct statuses
        (named after the plugin), and per node the index of its status."""
        if self._frozen is not None:
            yield from self._frozen
            return
        if self.outcome is None:
            return
        rejected, by = self.outcome.rejected, self.outcome.rejected_by
        for position in np.unique(by):
            plugin = self.filters[int(position)]
            nodes = rejected[by == position]
            with self.framework.handle.guard(plugin.name, "Filter", self.pod):
                if isinstance(plugin, BulkStatusFilter):
                    distinct, which = plugin.filter_statuses(
                        self.state, self.pod, self.snapshot, nodes
                    )
                else:
                    found = [
                        plugin.filter_node(self.state, self.pod, self.snapshot, int(node))
                        for node in nodes
                    ]
                    slot: dict[api.Status, int] = {}
                    which = np.array(
                        [slot.setdefault(status, len(slot)) for status in found], dtype=np.intp
                    )
                    distinct = list(slot)
            yield nodes, [status.with_plugin(plugin.name) for status in distinct], which

    def _plugin_statuses(self) -> dict[int, api.Status]:
        statuses: dict[int, api.Status] = {}
        for nodes, distinct, which in self._rejections():
            statuses.update(zip(nodes.tolist(), (distinct[i] for i in which.tolist()), strict=True))
        return statuses

    def rejection_statuses(self) -> dict[int, api.Status]:
        statuses = self._plugin_statuses()
        if self.extender_verdicts is not None:
            statuses.update(self.extender_verdicts.statuses)
        return statuses

    def fit_error_message(self) -> str:
        """kube-scheduler's FitError: ``0/N nodes are available: <counted reasons>.``"""
        message = f"0/{self.snapshot.size} nodes are available:"
        if not self.prefilter_status.is_success:
            return f"{message} {self.prefilter_status.message}."
        reasons: Counter[str] = Counter()
        rejected = 0
        for nodes, distinct, which in self._rejections():
            rejected += len(nodes)
            counts = np.bincount(which, minlength=len(distinct)).tolist()
            for status, count in zip(distinct, counts, strict=True):
                for reason in status.reasons:
                    reasons[reason] += int(count)
        if self.extender_verdicts is not None:  # nodes the filter extenders failed
            for status in self.extender_verdicts.statuses.values():
                rejected += 1
                reasons.update(status.reasons)
        if self.absent_status is not None and rejected < self.snapshot.size:
            for reason in self.absent_status.reasons:
                reasons[reason] += self.snapshot.size - rejected
        histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
        return f"{message} {', '.join(histogram)}."


def unsupported_status(pod: api.Pod) -> api.Status:
    """A pod needing what this scheduler does not implement is never bound (binding it
    would ignore the requirement): rejected everywhere, naming the feature."""
    features = ", ".join(pod.unsupported)
    return api.unschedulable(
        f"pod uses {features}, which the nodeagent scheduler does not implement",
        unresolvable=True,
    )


class Scheduler:
    """Schedules pods one at a time against a snapshot it updates (assume/forget)."""

    def __init__(
        self,
        frameworks: Mapping[str, Framework],
        snapshot: ClusterSnapshot,
        *,
        percentage_of_nodes_to_score: int = 0,
        rng: random.Random | None = None,
    ) -> None:
        self.frameworks = frameworks
        # The configuration's extenders, shared by every profile through the handle
        # (``build_frameworks`` makes them); binding consults them in ``run_bind``.
        handles = [fw.handle for fw in frameworks.values()]
        self.extenders: Extenders | None = handles[0].extenders if handles else None
        self.snapshot = snapshot
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.rng = rng or random.Random()
        self.next_start_node_index = 0

    def schedule_one(self, pod: api.Pod) -> CycleResult:
        """The whole cycle for ``pod``; on success the pod is bound in the snapshot."""
        fw = self.frameworks[pod.scheduler_name]
        gate = fw.run_pre_enqueue(pod)
        if not gate.is_success:
            gated = gate.code is not api.Code.ERROR  # a failing PreEnqueue is an error
            return CycleResult(pod, fw, self.snapshot, CycleState(), status=gate, gated=gated)
        try:
            result = self.schedule_pod(fw, pod)
        except PluginError as exc:
            return CycleResult(pod, fw, self.snapshot, CycleState(), status=api.error(str(exc)))
        if result.node is None:
            if result.status.is_rejection and fw.post_filter:
                offer, post = fw.run_post_filter(result.state, pod, self.snapshot, result)
                result.preemption = offer
                result.nominated_node = None if offer is None else offer.nominated_node
                if post.code is not api.Code.ERROR and post.message:
                    # kube-scheduler appends the PostFilter message to the FitError's.
                    fit = f"{result.status.message} {post.message}"
                    result.status = api.Status(result.status.code, (fit,), result.status.plugin)
            return result
        node_index = self.snapshot.index[result.node]
        self.snapshot.add_pod(pod, node_index)  # assume
        status = fw.run_reserve(result.state, pod, result.node)
        if status.is_success:
            status = fw.run_permit(result.state, pod, result.node)
        try:
            if status.is_success:
                status = fw.run_pre_bind(result.state, pod, result.node)
            if status.is_success:
                status = fw.run_bind(result.state, pod, result.node)
        except Exception as exc:  # the binding failed: unreserved and forgotten below
            status = api.error(f"binding the pod to {result.node}: {type(exc).__name__}: {exc}")
        if not status.is_success:
            fw.run_unreserve(result.state, pod, result.node)
            self.snapshot.remove_pod(pod, node_index)  # forget
            result.status = status
            result.node = None
            return result
        fw.run_post_bind(result.state, pod, result.node)
        return result

    def schedule_pod(self, fw: Framework, pod: api.Pod) -> CycleResult:
        """Filter, score and select a host; does not assume or bind."""
        snapshot = self.snapshot
        result = CycleResult(pod, fw, snapshot, CycleState())
        if snapshot.size == 0:
            result.status = api.unschedulable("no nodes available to schedule pods")
            return result
        if pod.unsupported:
            result.prefilter_status = unsupported_status(pod)
            result.status = api.unschedulable(result.fit_error_message(), unresolvable=True)
            return result
        nominated: dict[int, list[api.Pod]] = {}
        for other, name in fw.handle.nominator.counted_for(pod):
            if name in snapshot.index:
                nominated.setdefault(snapshot.index[name], []).append(other)
        if nominated:
            # The common case in one pass: when every active filter judges a node by its
            # own pods alone, more pods only make a node fit less, so filtering with all
            # the nominated pods on their nodes is both of kube-scheduler's passes.
            others = [other for pods in nominated.values() for other in pods]
            at = [node for node, pods in nominated.items() for _ in pods]
            start = self.next_start_node_index
            snapshot.add_pods(others, at)
            try:
                feasible = self._filter(fw, pod, result, {}, freeze=True)
            finally:
                snapshot.remove_pods(others, at)
            if all(getattr(p, RESOURCE_LOCAL, False) for p in result.filters):
                if feasible is None or result.node is not None:
                    return result
                return self._after_filter(fw, pod, result, feasible)
            self.next_start_node_index = start  # a plugin reads other nodes: exactly
            result = CycleResult(pod, fw, snapshot, CycleState())
        feasible = self._filter(fw, pod, result, nominated)
        if feasible is None or result.node is not None:
            return result
        if nominated and feasible.size:
            feasible = self._with_nominated(fw, pod, result, feasible, nominated)
            if feasible.size == 0:
                result.status = api.unschedulable(result.fit_error_message())
                return result
        return self._after_filter(fw, pod, result, feasible)

    def _after_filter(
        self, fw: Framework, pod: api.Pod, result: CycleResult, feasible: NodeIndices
    ) -> CycleResult:
        """The filter extenders, then scoring and the choice of a node."""
        if feasible.size and self.extenders is not None:
            try:
                feasible = self._extenders_keep(result, feasible)
            except ExtenderError as exc:
                result.status = api.error(str(exc))
                return result
            if feasible.size == 0:
                result.status = api.unschedulable(result.fit_error_message())
                return result
        return self._score(fw, pod, result, feasible)

    def _extenders_keep(self, result: CycleResult, feasible: NodeIndices) -> NodeIndices:
        """The filter extenders' verdicts on the plugins' ``feasible`` nodes (recorded
        in ``result``); raises :class:`ExtenderError` for a failing, non-ignorable one."""
        if self.extenders is None:
            return feasible
        verdicts = self.extenders.filter(result.pod, self.snapshot, feasible)
        result.extender_verdicts = verdicts
        return verdicts.feasible

    def _with_nominated(
        self,
        fw: Framework,
        pod: api.Pod,
        result: CycleResult,
        feasible: NodeIndices,
        nominated: Mapping[int, list[api.Pod]],
    ) -> NodeIndices:
        """kube-scheduler's ``addGENominatedPods``: a feasible node holding pods
        nominated there (of priority >= the pod's) must also pass with them on it; other
        nodes' nominated pods play no part. The nodes this pass rejects go into
        ``result`` with their status."""
        holders = [node for node in feasible.tolist() if node in nominated]
        if not holders:
            return feasible
        if all(getattr(p, RESOURCE_LOCAL, False) for p in result.filters):
            rejected = self._rejected_with_all(fw, pod, holders, nominated)
        else:  # a plugin reading other nodes: each node with its own nominated pods only
            rejected = {}
            for node in holders:
                status = self._passes_with(fw, pod, node, nominated[node])
                if not status.is_success:
                    rejected[node] = status
        if not rejected:
            return feasible
        result.reject_again(rejected)
        gone = np.fromiter(rejected, dtype=np.intp, count=len(rejected))
        kept: NodeIndices = feasible[~np.isin(feasible, gone)]
        return kept

    def _rejected_with_all(
        self,
        fw: Framework,
        pod: api.Pod,
        holders: list[int],
        nominated: Mapping[int, list[api.Pod]],
    ) -> dict[int, api.Status]:
        """The second pass when every filter judges a node by its own pods alone: all
        the holders at once, each with its nominated pods (one PreFilter, one vectorized
        Filter, instead of one of each per holder)."""
        snapshot = self.snapshot
        pods = [other for node in holders for other in nominated[node]]
        at = [node for node in holders for _ in nominated[node]]
        snapshot.add_pods(pods, at)
        try:
            state = CycleState()
            _, status, _ = fw.run_pre_filter(state, pod, snapshot)
            if not status.is_success:
                return dict.fromkeys(holders, status)
            filters = fw.active_filters(state)
            nodes = np.array(holders, dtype=np.intp)
            outcome = find_feasible(
                filters,
                state,
                pod,
                snapshot,
                nodes,
                start=0,
                wanted=len(nodes),
                failures=fw.handle.failures,
            )
            rejected: dict[int, api.Status] = {}
            for position in np.unique(outcome.rejected_by).tolist():
                plugin = filters[position]
                failed = outcome.rejected[outcome.rejected_by == position]
                with fw.handle.guard(plugin.name, "Filter", pod):
                    if isinstance(plugin, BulkStatusFilter):
                        distinct, which = plugin.filter_statuses(state, pod, snapshot, failed)
                        found = [distinct[i] for i in which.tolist()]
                    else:
                        found = [plugin.filter_node(state, pod, snapshot, n) for n in failed]
                for node, status in zip(failed.tolist(), found, strict=True):
                    rejected[node] = status.with_plugin(plugin.name)
            return rejected
        finally:
            snapshot.remove_pods(pods, at)

    def _passes_with(
        self, fw: Framework, pod: api.Pod, node: int, others: list[api.Pod]
    ) -> api.Status:
        """PreFilter and Filter of ``node`` with ``others`` (nominated there) on it."""
        snapshot = self.snapshot
        snapshot.add_pods(others, [node] * len(others))
        try:
            state = CycleState()
            restriction, status, restricting = fw.run_pre_filter(state, pod, snapshot)
            if not status.is_success:
                return status
            if restriction is not None and snapshot.names[node] not in restriction.node_names:
                return api.unschedulable(
                    f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(restricting))}]",
                    unresolvable=True,
                )
            return fw.run_filter_node(state, pod, snapshot, node)
        finally:
            snapshot.remove_pods(others, [node] * len(others))

    def _filter(
        self,
        fw: Framework,
        pod: api.Pod,
        result: CycleResult,
        nominated: Mapping[int, list[api.Pod]],
        *,
        freeze: bool = False,
    ) -> NodeIndices | None:
        """PreFilter and Filter; the feasible nodes, or ``None`` when the cycle ended
        (a rejection, or the pod's nominated node taken as is: it must also pass with
        the pods nominated there). With ``freeze`` (the snapshot holds nominated pods
        for now) the rejections are explained at once, as the filters saw them."""
        candidates = self._pre_filter(fw, pod, result)
        if candidates is None:
            return None
        own = self.snapshot.index.get(pod.nominated_node_name, -1)
        if own >= 0 and self._nominated_node_fits(fw, pod, result, nominated, own):
            return None
        outcome = self._nodes_that_pass_filters(fw, pod, result, candidates)
        # Advanced in every case, as kube-scheduler does, so the next pod starts elsewhere.
        advanced = self.next_start_node_index + outcome.processed
        self.next_start_node_index = advanced % self.snapshot.size
        result.outcome = outcome
        if freeze:
            result.freeze()
        if outcome.feasible.size == 0:
            result.status = api.unschedulable(result.fit_error_message())
            return None
        return outcome.feasible

    def _pre_filter(self, fw: Framework, pod: api.Pod, result: CycleResult) -> NodeIndices | None:
        """PreFilter: the candidate nodes (all, or those a plugin restricted the pod
        to), with the active filters recorded in ``result``; ``None`` (the status in
        ``result``) when a plugin rejected the pod."""
        snapshot = self.snapshot
        restriction, status, restricting = fw.run_pre_filter(result.state, pod, snapshot)
        if not status.is_success:
            result.prefilter_status = status
            if status.is_rejection:
                status = api.Status(status.code, (result.fit_error_message(),), status.plugin)
            result.status = status
            return None
        result.filters = fw.active_filters(result.state)
        candidates = snapshot.all_nodes
        if restriction is not None:
            chosen = np.array(
                sorted(snapshot.index[n] for n in restriction.node_names if n in snapshot.index),
                dtype=np.intp,
            )
            candidates = chosen
            result.absent_status = api.unschedulable(
                f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(restricting))}]",
                unresolvable=True,
            )
        result.candidates = candidates
        return candidates

    def _nominated_node_fits(
        self,
        fw: Framework,
        pod: api.Pod,
        result: CycleResult,
        nominated: Mapping[int, list[api.Pod]],
        own: int,
    ) -> bool:
        """kube-scheduler's ``evaluateNominatedNode``: whether the pod's nominated node
        ``own`` passes the filters (also with the pods nominated there) and the filter
        extenders; if so it is the pod's node (in ``result``) and no other is looked at."""
        snapshot = self.snapshot
        single = np.array([own], dtype=np.intp)
        passed = find_feasible(
            result.filters,
            result.state,
            pod,
            snapshot,
            single,
            start=0,
            wanted=1,
            failures=fw.handle.failures,
        )
        kept = passed.feasible
        if (
            kept.size
            and own in nominated
            and not self._passes_with(fw, pod, own, nominated[own]).is_success
        ):
            kept = kept[:0]
        if kept.size:
            try:
                kept = self._extenders_keep(result, kept)
            except ExtenderError:  # kube-scheduler logs it and filters every node
                kept = kept[:0]
        if kept.size:
            result.node = snapshot.names[own]
            result.outcome = passed
            return True
        result.extender_verdicts = None
        return False

    def _feasible_nodes_to_find(self, fw: Framework, candidates: NodeIndices) -> int:
        """How many feasible nodes to find among ``candidates``: one when nothing would
        score them (no Score plugin, no filtering or prioritizing extender)."""
        extenders = self.extenders
        if not fw.has_score_plugins() and not (
            extenders and (extenders.has_filters or extenders.has_prioritizers)
        ):
            return 1
        return num_feasible_nodes_to_find(
            fw.percentage_of_nodes_to_score, self.percentage_of_nodes_to_score, len(candidates)
        )

    def _nodes_that_pass_filters(
        self, fw: Framework, pod: api.Pod, result: CycleResult, candidates: NodeIndices
    ) -> FilterOutcome:
        """kube-scheduler's ``findNodesThatPassFilters``: the filters over
        ``candidates`` from the next start node on, until enough of them passed."""
        wanted = self._feasible_nodes_to_find(fw, candidates)
        if len(candidates) == 0:
            return FilterOutcome(candidates, candidates, candidates, 0)
        start = self.next_start_node_index % len(candidates)
        if not result.filters:  # every node passes: the first `wanted` from the start
            take = _rotated(candidates, start, 0, min(wanted, len(candidates)))
            return FilterOutcome(take, take[:0], take[:0], len(take))
        return find_feasible(
            result.filters,
            result.state,
            pod,
            self.snapshot,
            candidates,
            start=start,
            wanted=wanted,
            failures=fw.handle.failures,
        )

    def _score(
        self, fw: Framework, pod: api.Pod, result: CycleResult, feasible: NodeIndices
    ) -> CycleResult:
        snapshot, state = self.snapshot, result.state
        if feasible.size == 1:
            result.node = snapshot.names[int(feasible[0])]
            return result
        extenders = self.extenders
        prioritizers = extenders is not None and extenders.has_prioritizers
        if not fw.has_score_plugins() and not prioritizers:
            ones = np.ones(len(feasible), dtype=np.int64)
            result.node = snapshot.names[int(feasible[select_host(ones, self.rng)])]
            return result
        status = fw.run_pre_score(state, pod, snapshot, feasible)
        if not status.is_success:
            result.status = status
            return result
        scores = fw.run_score(state, pod, snapshot, feasible)
        result.scored = feasible
        result.scores = scores
        if not scores.status.is_success:
            result.status = scores.status
            return result
        if prioritizers and extenders is not None:
            result.extender_scores = extenders.prioritize(pod, snapshot, feasible)
            totals = scores.totals + sum(e.weighted for e in result.extender_scores)
            scores = result.scores = dataclasses.replace(scores, totals=totals)
        result.node = snapshot.names[int(feasible[select_host(scores.totals, self.rng)])]
        return result
