"""Preemption (kube-scheduler's ``pkg/scheduler/framework/preemption`` Evaluator) as a pure
function of the snapshot, the pod, the cycle's diagnosis, the PodDisruptionBudgets and
the nominated pods.

:func:`preempt` answers with a :class:`~framework.PostFilterResult`: the node to nominate,
the victims to delete there, every candidate of the dry run with its victims and PDB
violations, and the lower-priority pods nominated to that node that lose their
nomination. It changes nothing durable: the dry run edits the snapshot and restores it
before returning. The planner applies the result to its snapshot; the live scheduler acts
on it through the API.

The dry run, per candidate node: remove every pod of lower priority; if the pod still
does not fit, the node is no candidate; otherwise put the removed pods back one by one,
PDB-violating ones first, each group most important first (higher priority, then the
earlier start), keeping each pod that still leaves room and making the others victims.

Speed: when every active Filter of the pod's cycle depends only on the node itself and
the resources its pods request (:attr:`RESOURCE_LOCAL`, true of the default filters when
the pod has no host ports, spread constraints or pod affinity), the dry run handles a
whole chunk of candidate nodes at once: resource usage is shifted in the snapshot's
columns and each reprieve step is one vectorized Filter over the chunk. Otherwise nodes
are tried one at a time with the full PreFilter and Filter, as kube-scheduler does.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nodeagent.scheduler import api
from nodeagent.scheduler.extenders import preempting
from nodeagent.scheduler.extenders.client import ExtenderError
from nodeagent.scheduler.framework import (
    CycleState,
    Diagnosis,
    FilterPlugin,
    Framework,
    Nominator,
    PluginError,
    PostFilterResult,
    Victims,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, NodeIndices, NodePods

NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."

RESOURCE_LOCAL = "resource_local"


def _raising(status: api.Status) -> api.Status:
    """``status``, unless a plugin failed: then the dry run stops with that failure
    (kube-scheduler's preemption returns the error) instead of reading it as a node
    that does not fit."""
    if status.code is api.Code.ERROR:
        raise PluginError(status.message)
    return status


"""Class attribute of Filter plugins whose verdict on a node depends only on the node's
own (static) data and the snapshot's resource columns of that node."""

_PRIORITY_SHIFT = 2**31


@dataclass(frozen=True, slots=True)
class Settings:
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100


def num_candidates(potential: int, settings: Settings) -> int:
    """How many candidates the dry run looks for (``calculateNumCandidates``)."""
    wanted = potential * settings.min_candidate_nodes_percentage // 100
    wanted = max(wanted, settings.min_candidate_nodes_absolute)
    return min(wanted, potential)


def importance(pod: api.Pod, now: float) -> tuple[int, float]:
    """Sort key, most important first: higher priority, then the earlier start (a pod
    without ``status.startTime`` counts as started now)."""
    return (-pod.priority, pod.start_time if pod.start_time is not None else now)


def split_by_budgets(
    pods: Sequence[api.Pod], budgets: Sequence[api.DisruptionBudget]
) -> tuple[list[api.Pod], list[api.Pod]]:
    """kube-scheduler's ``filterPodsWithPDBViolation``: walking ``pods`` in order, each
    budget covering a pod (and not already counting it as disrupted) gives up one of its
    allowed disruptions; a pod that takes any budget below zero is violating. Returns
    (violating, non-violating), each in the input order."""
    allowed = [budget.disruptions_allowed for budget in budgets]
    violating: list[api.Pod] = []
    other: list[api.Pod] = []
    for pod in pods:
        violated = False
        if pod.labels:
            for i, budget in enumerate(budgets):
                if budget.covers(pod) and pod.name not in budget.disrupted_pods:
                    allowed[i] -= 1
                    violated = violated or allowed[i] < 0
        (violating if violated else other).append(pod)
    return violating, other


def pick_one_node(candidates: dict[str, Victims], now: float) -> str | None:
    """kube-scheduler's ``pickOneNodeForPreemption``: fewest PDB violations, then the
    lowest highest victim priority, the smallest sum of victim priorities (each shifted
    by 2^31), the fewest victims, the latest start among the top-priority victims; each
    criterion only among the ties of the previous ones (a lexicographic minimum), the
    first candidate (in dry-run order) breaking the last tie. A candidate with no
    victims wins outright."""
    best: tuple[int, int, int, int, float] | None = None
    chosen: str | None = None
    for name, victims in candidates.items():
        pods = victims.pods
        if not pods:
            return name
        top = pods[0].priority
        if len(pods) == 1:  # the common case, without the generators
            started = pods[0].start_time
            earliest = now if started is None else started
            total = top
        else:
            earliest = min(
                p.start_time if p.start_time is not None else now for p in pods if p.priority == top
            )
            total = sum(p.priority for p in pods)
        key = (
            victims.num_pdb_violations,
            top,
            total + _PRIORITY_SHIFT * len(pods),
            len(pods),
            -earliest,
        )
        if best is None or key < best:
            best, chosen = key, name
    return chosen


@dataclass(slots=True)
class _NodeRun:
    """One node's dry run in progress."""

    node: int
    order: list[api.Pod]
    """Reprieve order: violating pods first, then the others."""
    violating: int
    removed: list[api.Pod]
    victims: list[api.Pod]
    violations: int = 0


@dataclass(frozen=True, slots=True)
class _LowerPods:
    """A chunk's lower-priority pods as columns, grouped by node: pod ``i`` is on node
    ``at[i]``, uses ``usage[:, i]`` and is ``held[owner[i]].pods[local[i]]`` (the pod
    objects are looked up only for the victims)."""

    at: NodeIndices
    usage: Int64s
    held: list[NodePods]
    owner: NodeIndices
    local: NodeIndices

    def pods(self, which: NodeIndices | None = None) -> list[api.Pod]:
        """Pods ``which`` (default: all), in that order."""
        owner = self.owner if which is None else self.owner[which]
        local = self.local if which is None else self.local[which]
        held = self.held
        return [held[o].pods[j] for o, j in zip(owner.tolist(), local.tolist(), strict=True)]

    def reordered(self, order: NodeIndices) -> _LowerPods:
        return _LowerPods(
            self.at[order], self.usage[:, order], self.held, self.owner[order], self.local[order]
        )


class _DryRun:
    def __init__(
        self,
        fw: Framework,
        *,
        snapshot: ClusterSnapshot,
        pod: api.Pod,
        budgets: Sequence[api.DisruptionBudget],
        nominator: Nominator,
        now: float,
        cycle: CycleState | None = None,
    ) -> None:
        self.fw = fw
        self.cycle = cycle
        self.snapshot = snapshot
        self.pod = pod
        self.budgets = budgets
        self.now = now
        self.nominator = nominator
        self._nominated_nodes: NodeIndices | None = None
        self.failures: dict[int, api.Status] = {}

    def nominated_nodes(self) -> NodeIndices:
        """The nodes holding nominated pods (of any priority)."""
        if self._nominated_nodes is None:
            index = self.snapshot.index
            held = [index[n] for n in self.nominator.node_names() if n in index]
            self._nominated_nodes = np.array(held, dtype=np.intp)
        return self._nominated_nodes

    def promised(self, node: int) -> list[api.Pod]:
        """The nominated pods counted on ``node`` against the preemptor."""
        return self.nominator.counted_on(self.snapshot.names[node], self.pod)

    def potential_victims(self, node: int) -> list[api.Pod]:
        lower = [p for p in self.snapshot.pods_on_node[node] if p.priority < self.pod.priority]
        lower.sort(key=lambda p: importance(p, self.now))
        return lower

    def start(self, node: int) -> _NodeRun | None:
        lower = self.potential_victims(node)
        if not lower:
            self.failures[node] = api.unschedulable(NO_VICTIMS, unresolvable=True)
            return None
        violating, other = split_by_budgets(lower, self.budgets)
        return _NodeRun(node, violating + other, len(violating), list(lower), [])

    def finish(self, run: _NodeRun) -> Victims:
        victims = sorted(run.victims, key=lambda p: importance(p, self.now))
        return Victims(tuple(victims), run.violations)

    # --- the vectorized path ---------------------------------------------------------

    def batch(self, nodes: Sequence[int], filters: list[FilterPlugin]) -> dict[int, Victims]:
        """The dry run of many nodes at once, in arrays: every lower-priority pod of the
        chunk is one column (node, reprieve rank, requests), read from the snapshot's
        per-node arrays (:meth:`~ClusterSnapshot.node_pods`); removing them, and each
        reprieve step, is one scatter into the snapshot's columns and one vectorized
        Filter over the nodes concerned. The snapshot is restored on return."""
        snapshot, state = self.snapshot, CycleState(self.cycle)
        _, status, _ = self.fw.run_pre_filter(state, self.pod, snapshot)
        _raising(status)
        lower = self._lower_priority(nodes)
        if lower is None:
            return {}
        at, usage = lower.at, lower.usage
        violating = np.zeros(len(at), dtype=bool)
        if self.budgets:
            violating, reorder = self._violating(at, lower.pods())
            lower = lower.reordered(reorder)
            usage = lower.usage
        count = len(at)
        first = np.r_[0, np.flatnonzero(np.diff(at)) + 1]
        per_node = np.diff(np.r_[first, count])
        rank = np.arange(count) - np.repeat(first, per_node)

        touched = at[first]
        saved_rows = snapshot.requested.shape[0]
        saved = (
            snapshot.requested[:, touched].copy(),
            snapshot.nonzero_requested[:, touched].copy(),
            snapshot.pod_count[touched].copy(),
        )
        victim = np.zeros(count, dtype=bool)
        try:
            holders = touched[np.isin(touched, self.nominated_nodes())].tolist()
            promised = [(o, n) for n in holders for o in self.promised(n)]
            snapshot.shift_requests([o for o, _ in promised], [n for _, n in promised], 1)
            snapshot.shift_columns(usage, at, -1)
            fit_without_all = self._passing(filters, state, touched, status)
            alive = touched[fit_without_all]
            for node in touched[~fit_without_all].tolist():
                self.failures[node] = self._why(filters, state, node, status)
            live = np.repeat(fit_without_all, per_node)
            for step in range(int(rank.max()) + 1):
                stepping = np.flatnonzero(live & (rank == step))  # one pod per node
                if stepping.size == 0:
                    continue
                snapshot.shift_columns(usage[:, stepping], at[stepping], 1, distinct=True)
                failed = stepping[~self._passing(filters, state, at[stepping], status)]
                snapshot.shift_columns(usage[:, failed], at[failed], -1, distinct=True)
                victim[failed] = True
        finally:
            snapshot.requested[:saved_rows, touched] = saved[0]
            snapshot.requested[saved_rows:, touched] = 0  # rows a nominated pod added
            snapshot.nonzero_requested[:, touched] = saved[1]
            snapshot.pod_count[touched] = saved[2]
        found: dict[int, list[api.Pod]] = {}
        chosen = np.flatnonzero(victim)
        for node, pod in zip(at[chosen].tolist(), lower.pods(chosen), strict=True):
            found.setdefault(node, []).append(pod)
        counted, counts = np.unique(at[victim & violating], return_counts=True)
        violations = dict(zip(counted.tolist(), counts.tolist(), strict=True))
        nobody = Victims(())
        result: dict[int, Victims] = {}
        for node in alive.tolist():
            pods = found.get(node)
            if pods is None:
                result[node] = nobody
                continue
            if self.budgets:  # violating pods were reprieved first: back to importance order
                pods.sort(key=lambda p: importance(p, self.now))
            result[node] = Victims(tuple(pods), violations.get(node, 0))
        return result

    def _lower_priority(self, nodes: Sequence[int]) -> _LowerPods | None:
        """The pods of ``nodes`` of lower priority than the preemptor, grouped by node
        (ascending index), most important first within a node. Records the nodes
        without any as failures; ``None`` if no node has one."""
        held = self.snapshot.node_pods(nodes)
        sizes = np.fromiter((len(h.pods) for h in held), dtype=np.intp, count=len(held))
        owner = np.repeat(np.arange(len(held)), sizes)  # position in ``nodes``
        if len(owner):
            priority = np.concatenate([h.priority for h in held])
        else:
            priority = np.zeros(0, dtype=np.int64)
        lower = priority < self.pod.priority
        with_victims = np.zeros(len(held), dtype=bool)
        with_victims[owner[lower]] = True
        for j in np.flatnonzero(~with_victims).tolist():
            self.failures[nodes[j]] = api.unschedulable(NO_VICTIMS, unresolvable=True)
        if not with_victims.any():
            return None
        started = np.concatenate([h.started for h in held])
        started = np.where(np.isnan(started), self.now, started)
        at = np.asarray(nodes, dtype=np.intp)[owner]
        keep = np.flatnonzero(lower)
        # lexsort is stable: equally important pods keep their order on the node.
        order = keep[np.lexsort((started[keep], -priority[keep], at[keep]))]
        local = np.arange(len(owner)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        usage = np.concatenate([h.usage for h in held], axis=1)
        return _LowerPods(at[order], usage[:, order], held, owner[order], local[order])

    def _violating(
        self, at: NodeIndices, pods: list[api.Pod]
    ) -> tuple[npt.NDArray[np.bool_], NodeIndices]:
        """Per pod (grouped by node, importance order): whether it violates a budget, and
        the order that puts each node's violating pods first (kube-scheduler reprieves
        those first), both in the new order."""
        flags = np.zeros(len(pods), dtype=bool)
        reorder = np.arange(len(pods))
        bounds = [*np.flatnonzero(np.diff(at)) + 1, len(pods)]
        start = 0
        for end in bounds:
            group = pods[start:end]
            bad, good = split_by_budgets(group, self.budgets)
            position = {id(p): start + k for k, p in enumerate(group)}
            reorder[start:end] = [position[id(p)] for p in bad + good]
            flags[start : start + len(bad)] = True
            start = end
        return flags, reorder

    def _passing(
        self,
        filters: list[FilterPlugin],
        state: CycleState,
        nodes: NodeIndices,
        prefilter: api.Status,
    ) -> npt.NDArray[np.bool_]:
        """Which of ``nodes`` pass every filter, as the snapshot is now."""
        if not prefilter.is_success:
            return np.zeros(len(nodes), dtype=bool)
        mask = np.ones(len(nodes), dtype=bool)
        for plugin in filters:
            alive = np.flatnonzero(mask)
            if alive.size == 0:
                break
            with self.fw.handle.guard(plugin.name, "Filter", self.pod):
                mask[alive] = plugin.filter(state, self.pod, self.snapshot, nodes[alive])
        return mask

    def _why(
        self, filters: list[FilterPlugin], state: CycleState, node: int, prefilter: api.Status
    ) -> api.Status:
        if not prefilter.is_success:
            return prefilter
        for plugin in filters:
            with self.fw.handle.guard(plugin.name, "Filter", self.pod):
                status = plugin.filter_node(state, self.pod, self.snapshot, node)
            if not status.is_success:
                return status
        return api.unschedulable(NOT_HELPFUL, unresolvable=True)

    # --- the general path ------------------------------------------------------------

    @contextmanager
    def _nominated_on(self, node: int) -> Iterator[None]:
        others = self.promised(node)
        for other in others:
            self.snapshot.add_pod(other, node)
        try:
            yield
        finally:
            for other in others:
                self.snapshot.remove_pod(other, node)

    def _fits(self, node: int) -> api.Status:
        """The whole PreFilter and Filter for one node, as the snapshot is now."""
        state = CycleState(self.cycle)
        with self._nominated_on(node):
            _, status, _ = self.fw.run_pre_filter(state, self.pod, self.snapshot)
            if not _raising(status).is_success:
                return status
            return _raising(self.fw.run_filter_node(state, self.pod, self.snapshot, node))

    def one(self, node: int) -> Victims | None:
        run = self.start(node)
        if run is None:
            return None
        snapshot = self.snapshot
        for victim in run.removed:
            snapshot.remove_pod(victim, node)
        removed = list(run.removed)
        try:
            status = self._fits(node)
            if not status.is_success:
                self.failures[node] = status
                return None
            for i, pod in enumerate(run.order):
                snapshot.add_pod(pod, node)
                removed.remove(pod)
                if not self._fits(node).is_success:
                    snapshot.remove_pod(pod, node)
                    removed.append(pod)
                    run.victims.append(pod)
                    run.violations += i < run.violating
        finally:
            for pod in removed:
                snapshot.add_pod(pod, node)
        return self.finish(run)


def eligible(pod: api.Pod, snapshot: ClusterSnapshot, diagnosis: Diagnosis) -> str | None:
    """Why the pod may not preempt (``None``: it may)."""
    if pod.preemption_policy == api.PREEMPT_NEVER:
        return NEVER
    nominated = snapshot.index.get(pod.nominated_node_name)
    if nominated is not None:
        status = diagnosis.node_status(nominated)
        if status is not None and status.code is api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return None
        for other in snapshot.pods_on_node[nominated]:
            if other.priority < pod.priority and other.deleting and other.preempted:
                return TERMINATING
    return None


def preempt(
    fw: Framework,
    snapshot: ClusterSnapshot,
    pod: api.Pod,
    diagnosis: Diagnosis,
    *,
    budgets: Sequence[api.DisruptionBudget],
    nominator: Nominator,
    settings: Settings,
    rng: random.Random,
    now: float,
    cycle: CycleState | None = None,
) -> tuple[PostFilterResult | None, api.Status]:
    """kube-scheduler's ``Evaluator.Preempt``; see the module docstring. ``cycle``: the
    state of the scheduling cycle that failed (see :class:`~framework.CycleState`)."""
    reason = eligible(pod, snapshot, diagnosis)
    if reason is not None:
        return None, api.unschedulable(reason)
    helps = diagnosis.preemption_may_help()
    potential: list[int] = np.flatnonzero(helps).tolist()
    dry_run = _DryRun(
        fw, snapshot=snapshot, pod=pod, budgets=budgets, nominator=nominator, now=now, cycle=cycle
    )
    if not potential:
        return PostFilterResult(), _no_candidates(snapshot, dry_run.failures)
    wanted = num_candidates(len(potential), settings)
    offset = rng.randrange(len(potential))
    walk = potential[offset:] + potential[:offset]

    state = CycleState(cycle)
    _, status, _ = fw.run_pre_filter(state, pod, snapshot)
    _raising(status)
    filters = fw.active_filters(state) if status.is_success else []
    batchable = status.is_success and all(getattr(p, RESOURCE_LOCAL, False) for p in filters)

    non_violating: dict[str, Victims] = {}
    violating: dict[str, Victims] = {}
    position = 0
    done = False
    while position < len(walk) and not done:
        chunk = walk[position : position + (max(wanted, 16) if batchable else 1)]
        position += len(chunk)
        if batchable:
            found = dry_run.batch(chunk, filters)
        else:
            single = dry_run.one(chunk[0])
            found = {} if single is None else {chunk[0]: single}
        for node in chunk:  # the stop rule, applied in walk order
            victims = found.get(node)
            if victims is None:
                continue
            name = snapshot.names[node]
            (violating if victims.num_pdb_violations else non_violating)[name] = victims
            if non_violating and len(non_violating) + len(violating) >= wanted:
                done = True
                break
    candidates = {**non_violating, **violating}
    if fw.handle.extenders is not None and candidates:
        try:  # extenders with a preemptVerb may trim the candidates and their victims
            candidates = preempting.process_preemption(
                fw.handle.extenders, pod, snapshot, candidates
            )
        except ExtenderError as exc:
            return None, api.error(str(exc))
    chosen = pick_one_node(candidates, now)
    if chosen is None:
        return PostFilterResult(), _no_candidates(snapshot, dry_run.failures)
    cleared = tuple(p for p in nominator.pods_on(chosen) if p.priority < pod.priority)
    result = PostFilterResult(chosen, candidates[chosen].pods, candidates, cleared)
    return result, api.SUCCESS


def _no_candidates(snapshot: ClusterSnapshot, failures: dict[int, api.Status]) -> api.Status:
    """kube-scheduler's FitError over the dry run: each node's dry-run failure, the
    nodes preemption could not help counted as such."""
    reasons: Counter[str] = Counter()
    for status in failures.values():
        reasons.update(status.reasons)
    reasons[NOT_HELPFUL] += snapshot.size - len(failures)
    if reasons[NOT_HELPFUL] == 0:
        del reasons[NOT_HELPFUL]
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return api.unschedulable(f"0/{snapshot.size} nodes are available: {', '.join(histogram)}.")
