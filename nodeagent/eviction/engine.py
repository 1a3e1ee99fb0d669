"""The decision core: one pure function from (policy, state, observations, pods, now) to a
:class:`~nodeagent.model.Decision` and the next state.

It follows the kubelet's ``synchronize`` (``pkg/kubelet/eviction/eviction_manager.go``) step
for step, on the observations as the policy counts the active page cache (the kubelet's
way by default; :mod:`nodeagent.eviction.page_cache`):

1. *met now*: thresholds with ``available < threshold`` (strict).
2. *still reclaiming*: thresholds acted on last cycle that are still below
   ``threshold + min_reclaim``; together with (1) they are the *active* thresholds.
3. Each active threshold keeps the time it was first observed; a threshold that drops out
   for one cycle starts over (one good sample resets a soft grace period).
4. Conditions: a pressure is on while any of its thresholds is active and for the
   transition period after the last cycle one was (strictly less than the period).
   Soft thresholds raise the condition at once, whatever their grace period.
5. *Actionable*: active thresholds whose grace period has elapsed (hard ones at once).
   These become next cycle's "acted on last cycle".
6. Thresholds whose observation is not newer than the previous one of the same signal
   are not acted on again (no second eviction on the same stale sample). A PSI average
   lags by its window (10 s for avg10), so after an eviction for a pressure the engine
   waits that long before acting on a PSI signal of that pressure, lest it count the
   stall the eviction already relieved.
7. The first actionable threshold by signal (memory first, then memory PSI, disk, PIDs,
   io PSI; hard before soft) picks the resource to reclaim.
8. Node-level reclaim (dead containers, unused images) is asked for where the layout says
   it helps; when the observation's reclaimable figures show it would leave no threshold
   met (with min reclaim, any signal, ignoring grace: the kubelet's global check), no pod
   is evicted this cycle.
9. Before any of that, with ``localStorageCapacityIsolation``, every pod over an
   emptyDir ``sizeLimit``, its pod-level or a container's ``ephemeral-storage`` limit is
   evicted (:mod:`nodeagent.eviction.local_storage`), whatever the thresholds; a cycle
   that evicts for local storage evicts for no threshold (conditions, taints and the
   thresholds met are reported as usual). The threshold's candidates follow the
   over-limit pods in ``candidates``: a pod the agent's safety policy keeps is replaced
   by the next one, as the kubelet goes on to thresholds when it evicted no pod.
10. Evictable pods are ranked (:mod:`nodeagent.eviction.ranking`); the ``kubelet``
   strategy evicts the first, ``relief`` the shortest prefix whose usage covers the gap
   to ``threshold + min_reclaim``.

Kill grace: 1 s for a hard threshold; for a soft one ``min(evictionMaxPodGracePeriod,
terminationGracePeriodSeconds)`` (a negative maximum defers to the pod).

Taints mirror the conditions with ``NoSchedule``, as the node lifecycle controller does
for the kubelet's; with ``softPressureTaint`` a pressure that so far comes only from soft
thresholds inside their grace period gets ``PreferNoSchedule`` instead.

The function reads no clock, file or network; ``EngineState`` is frozen and the caller
keeps it between cycles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nodeagent.base import durations
from nodeagent.eviction import layout as fs_layout
from nodeagent.eviction import local_storage, messages, page_cache, ranking
from nodeagent.eviction import thresholds as thr
from nodeagent.eviction.observations import observe, sampled_at
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.eviction.settings import EvictionStrategy
from nodeagent.k8s.pressure import Pressure, Taint
from nodeagent.model import (
    SIGNAL_PRESSURE,
    SIGNAL_RESOURCE,
    Decision,
    Eviction,
    NodeCondition,
    NodeObservations,
    PodInfo,
    Signal,
    SignalValue,
    ThresholdMet,
)

__all__ = [
    "HARD_EVICTION_GRACE_PERIOD_SECONDS",
    "NO_SCHEDULE",
    "PREFER_NO_SCHEDULE",
    "EngineState",
    "evaluate",
    "kill_grace_period",
    "relief_count",
    "thresholds_clear",
]

HARD_EVICTION_GRACE_PERIOD_SECONDS = 1
"""The kubelet's grace override for hard evictions (0 would mean "the pod's own")."""
NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"

_ACTION_ORDER: Mapping[Signal, int] = {
    signal: index
    for index, signal in enumerate(
        (
            Signal.MEMORY_AVAILABLE,
            Signal.ALLOCATABLE_MEMORY_AVAILABLE,
            *(s for s in Signal if s.startswith("memory.pressure.")),
            Signal.NODEFS_AVAILABLE,
            Signal.NODEFS_INODES_FREE,
            Signal.IMAGEFS_AVAILABLE,
            Signal.IMAGEFS_INODES_FREE,
            Signal.CONTAINERFS_AVAILABLE,
            Signal.CONTAINERFS_INODES_FREE,
            Signal.PID_AVAILABLE,
            *(s for s in Signal if s.startswith("io.pressure.")),
        )
    )
}
"""Which actionable signal is reclaimed first: memory, as in the kubelet; the kubelet
leaves the rest to map order, the agent fixes one."""

_PSI_WINDOW: Mapping[Signal, float] = {
    signal: float(signal.rpartition(".avg")[2]) for signal in thr.PSI_SIGNALS
}
"""Seconds each PSI average spans."""


@dataclass(frozen=True, slots=True)
class EngineState:
    """What the engine remembers between cycles (the kubelet manager's fields)."""

    first_observed: Mapping[thr.Threshold, float] = field(default_factory=dict)
    """When each active threshold was first seen met, for grace periods."""
    thresholds_met: frozenset[thr.Threshold] = frozenset()
    """Thresholds acted on (grace satisfied) last cycle; min reclaim keeps them active."""
    pressure_observed: Mapping[Pressure, float] = field(default_factory=dict)
    """Last time any threshold of each pressure was active, for the transition period."""
    acted_observed: Mapping[Pressure, float] = field(default_factory=dict)
    """Last time a threshold of each pressure was actionable (for softPressureTaint)."""
    observed_at: Mapping[Signal, float] = field(default_factory=dict)
    """Time of the last observation of each signal, to spot stale samples."""
    evicted_at: Mapping[Pressure, float] = field(default_factory=dict)
    """Last cycle that evicted for each pressure, which PSI averages need a window to
    reflect."""


@dataclass(frozen=True, slots=True)
class _Active:
    threshold: thr.Threshold
    observed: SignalValue
    quantity: int
    reclaim: int


def evaluate(
    policy: EvictionPolicy,
    state: EngineState,
    observations: NodeObservations,
    pods: Sequence[PodInfo],
    now: float,
) -> tuple[Decision, EngineState]:
    """One evaluation cycle. ``pods`` are the pods on the node (their usage is in
    ``observations.pods``); ``now`` is the caller's clock, used for grace and transition
    periods, while ``observations.time`` dates the sample. The observations are taken as
    the policy counts the active page cache (:func:`page_cache.view`)."""
    observations = page_cache.view(observations, policy.active_page_cache)
    layout = observations.fs_layout
    observed = observe(observations, policy.signals_for(layout))
    active = _active(policy.thresholds_for(layout), observed, state.thresholds_met)
    first_observed = {a.threshold: state.first_observed.get(a.threshold, now) for a in active}
    actionable = [
        a for a in active if now - first_observed[a.threshold] >= a.threshold.grace_period
    ]
    fresh = [
        a
        for a in actionable
        if _fresh(a.threshold.signal, sampled_at(observations, a.threshold.signal), now, state)
    ]
    over_limit = (
        local_storage.limit_evictions(pods, observations.pods, layout)
        if policy.local_storage_capacity_isolation
        else ()
    )
    choice = _choose(policy, fresh, observed, observations, pods)
    if over_limit:
        # The local-storage evictions replace the threshold's; its candidates follow
        # them, for the evictor to move on to if it may not evict an over-limit pod
        # (the kubelet ends the cycle here only when it did evict one).
        going = {eviction.pod.uid for eviction in over_limit}
        spare = tuple(c for c in choice.candidates if c.pod.uid not in going)
        choice = _Choice(evictions=over_limit, candidates=over_limit + spare)

    pressure_observed = _stamped(state.pressure_observed, active, now)
    acted_observed = _stamped(state.acted_observed, actionable, now)
    period = policy.pressure_transition_period
    pressure = {p: now - pressure_observed.get(p, _NEVER) < period for p in Pressure}
    acted_recently = {p: now - acted_observed.get(p, _NEVER) < period for p in Pressure}
    satisfied = {a.threshold for a in actionable}
    decision = Decision(
        time=now,
        thresholds_met=tuple(
            ThresholdMet(
                signal=a.threshold.signal,
                hard=a.threshold.hard,
                grace_satisfied=a.threshold in satisfied,
                threshold_quantity=a.quantity,
                available=a.observed.available,
            )
            for a in active
        ),
        pressure=pressure,
        conditions=tuple(_condition(policy, p, pressure[p], active) for p in Pressure),
        taints=tuple(
            Taint(
                key=policy.taint_keys[p],
                effect=(
                    NO_SCHEDULE
                    if acted_recently[p] or not policy.soft_pressure_taint
                    else PREFER_NO_SCHEDULE
                ),
            )
            for p in Pressure
            if pressure[p]
        ),
        evictions=choice.evictions,
        candidates=choice.candidates,
        ranked=tuple(candidate.pod.key for candidate in choice.candidates),
        node_reclaim=choice.node_reclaim,
    )
    evicted_at = state.evicted_at
    if choice.evictions:
        evicted_at = {**evicted_at, SIGNAL_PRESSURE[choice.evictions[0].signal]: now}
    next_state = EngineState(
        first_observed=first_observed,
        thresholds_met=frozenset(satisfied),
        pressure_observed=pressure_observed,
        acted_observed=acted_observed,
        observed_at={**state.observed_at, **{s: sampled_at(observations, s) for s in observed}},
        evicted_at=evicted_at,
    )
    return decision, next_state


_NEVER = float("-inf")


def _active(
    thresholds: Sequence[thr.Threshold],
    observed: Mapping[Signal, SignalValue],
    acted_last_cycle: frozenset[thr.Threshold],
) -> list[_Active]:
    """Steps 1-2: met now, or acted on last cycle and still short of min reclaim."""
    active = []
    for threshold in thresholds:
        value = observed.get(threshold.signal)
        if value is None:
            continue
        quantity = thr.threshold_quantity(threshold, value.capacity)
        reclaim = thr.reclaim_quantity(threshold, value.capacity)
        if value.available < quantity or (
            threshold in acted_last_cycle and value.available < quantity + reclaim
        ):
            active.append(_Active(threshold, value, quantity, reclaim))
    return active


def _fresh(signal: Signal, sampled: float, now: float, state: EngineState) -> bool:
    """Step 6: a newer sample than last cycle's, and for PSI, past the settle window."""
    if sampled <= state.observed_at.get(signal, _NEVER):
        return False
    settle = _PSI_WINDOW.get(signal)
    return settle is None or now - state.evicted_at.get(SIGNAL_PRESSURE[signal], _NEVER) >= settle


def _stamped(
    last: Mapping[Pressure, float], thresholds: Sequence[_Active], now: float
) -> dict[Pressure, float]:
    """``last`` with ``now`` for the pressure of each of ``thresholds``."""
    stamped = dict(last)
    stamped.update((SIGNAL_PRESSURE[a.threshold.signal], now) for a in thresholds)
    return stamped


def kill_grace_period(threshold: thr.Threshold, pod: PodInfo, max_pod_grace_period: int) -> int:
    """Seconds of termination grace an evicted pod gets (``synchronize``'s grace override)."""
    if threshold.hard:
        return HARD_EVICTION_GRACE_PERIOD_SECONDS
    if max_pod_grace_period < 0:
        return pod.termination_grace_period_seconds
    return min(max_pod_grace_period, pod.termination_grace_period_seconds)


@dataclass(frozen=True, slots=True)
class _Choice:
    evictions: tuple[Eviction, ...] = ()
    candidates: tuple[Eviction, ...] = ()
    node_reclaim: tuple[str, ...] = ()


def _choose(
    policy: EvictionPolicy,
    fresh: list[_Active],
    observed: Mapping[Signal, SignalValue],
    observations: NodeObservations,
    pods: Sequence[PodInfo],
) -> _Choice:
    if not fresh:
        return _Choice()
    layout = observations.fs_layout
    acted = min(fresh, key=lambda a: (_ACTION_ORDER[a.threshold.signal], not a.threshold.hard))
    signal = acted.threshold.signal
    node_reclaim = fs_layout.reclaim_kinds(signal, layout)
    freed = fs_layout.reclaimable_amount(signal, layout, observations.reclaimable)
    if node_reclaim and freed is not None and _reclaim_suffices(policy, observed, observations):
        return _Choice(node_reclaim=node_reclaim)

    resource = SIGNAL_RESOURCE[signal]
    lead = messages.threshold_sentence(acted.threshold, acted.observed, acted.quantity)
    threshold, max_grace = acted.threshold, policy.max_pod_grace_period_seconds
    candidates = tuple(
        [
            Eviction(
                pod,
                signal,
                kill_grace_period(threshold, pod, max_grace),
                messages.eviction_message(lead, resource, pod, used),
                used or 0,
            )
            for pod, used in ranking.rank(signal, layout, pods, observations.pods)
        ]
    )
    count = min(1, len(candidates))
    if policy.strategy is EvictionStrategy.RELIEF and signal not in thr.PSI_SIGNALS:
        target = max(a.quantity + a.reclaim for a in fresh if a.threshold.signal is signal)
        count = relief_count(candidates, target - acted.observed.available - (freed or 0))
    return _Choice(evictions=candidates[:count], candidates=candidates, node_reclaim=node_reclaim)


def _reclaim_suffices(
    policy: EvictionPolicy,
    observed: Mapping[Signal, SignalValue],
    observations: NodeObservations,
) -> bool:
    """Whether, with what node-level reclaim frees, no threshold of any signal would be
    met even counting min reclaim (the kubelet's re-check after garbage collection)."""
    layout = observations.fs_layout
    for threshold in policy.thresholds_for(layout):
        value = observed.get(threshold.signal)
        if value is None:
            continue
        freed = fs_layout.reclaimable_amount(threshold.signal, layout, observations.reclaimable)
        after = min(value.capacity, value.available + (freed or 0))
        if after < thr.threshold_quantity(threshold, value.capacity) + thr.reclaim_quantity(
            threshold, value.capacity
        ):
            return False
    return True


def thresholds_clear(policy: EvictionPolicy, observations: NodeObservations) -> bool:
    """Whether no configured threshold, of any signal and ignoring grace periods, is met
    counting its minimum reclaim: the kubelet's check after node-level reclaim, on
    observations re-read after it."""
    observations = page_cache.view(observations, policy.active_page_cache)
    observed = observe(observations, policy.signals_for(observations.fs_layout))
    return _reclaim_suffices(policy, observed, observations)


def relief_count(candidates: Sequence[Eviction], need: int) -> int:
    """The shortest prefix whose estimated reclaim covers ``need``; when no prefix does,
    the prefix up to the last pod that frees anything (evicting pods that free nothing
    cannot help). At least one pod, as the kubelet would evict."""
    if not candidates:
        return 0
    freed = 0
    useful = 1
    for index, candidate in enumerate(candidates, start=1):
        if candidate.reclaim_estimate > 0:
            freed += candidate.reclaim_estimate
            useful = index
        if freed >= need:
            return index
    return useful


def _condition(
    policy: EvictionPolicy, pressure: Pressure, on: bool, active: Sequence[_Active]
) -> NodeCondition:
    mine = [a for a in active if SIGNAL_PRESSURE[a.threshold.signal] is pressure]
    if mine:
        message = "; ".join(
            messages.threshold_met_text(a.threshold, a.observed, a.quantity) for a in mine
        )
    elif on:
        message = (
            f"no {pressure} eviction threshold is met; the condition holds for the pressure "
            f"transition period ({durations.format_go_duration(policy.pressure_transition_period)})"
        )
    else:
        message = f"no {pressure} eviction threshold is met"
    return NodeCondition(
        type=policy.condition_types[pressure],
        status=on,
        reason=messages.condition_reason(pressure, met=bool(mine), held=on),
        message=message,
    )
