"""Evicting the pods the engine chose, safely, once each.

Each engine :class:`~nodeagent.model.Decision` lists ``evictions`` (pods to evict now)
and ``candidates`` (every evictable pod in eviction order; ``evictions`` is a prefix).
:meth:`Evictor.apply` works through ``evictions``:

1. **safety** (:func:`nodeagent.actuators.safety.evictable`): a refused pod is replaced
   by the next unused candidate;
2. **once only**: a pod with an eviction in flight (or already terminating) is skipped
   until it is gone from the pod cache or its deadline (grace + margin) passes;
3. **cap**: at most ``maxEvictionsPerInterval`` evictions start within any
   ``evictionCapInterval``; the rest are reported ``capped`` and wait for a later cycle;
4. **dry-run**: decided, logged, counted and recorded as a marked event; nothing sent;
5. **Eviction** (policy/v1, ``deleteOptions.gracePeriodSeconds`` = the engine's grace,
   ``preconditions.uid`` so a recreated namesake is never hit). A PodDisruptionBudget's
   429 is an answer, not a fault: the pod is reported ``blocked-by-pdb`` and replaced by
   the next unused candidate; for a *hard* threshold (or a local-storage limit, which
   the kubelet enforces as immediately) with ``hardEvictionBypassesPDB`` the pod is
   deleted with the 1 s grace instead (``deleted``).

Nothing waits before an Eviction is sent: the node's ``EvictionThresholdMet`` event and
each pod's ``Evicted`` event are handed to the recorder only once every Eviction of the
decision has gone out. In the agent that recorder is an :class:`~nodeagent.actuators.
events.EventQueue`, written by another thread, so an events API that is slow, retried or
down costs the eviction nothing (it once cost an OOM kill: the event, retried through
three 503s, went first and the Eviction never left).

Outcomes are values (:class:`EvictionResult`) for the loop's log line and metrics.
Nothing here raises on API failures: a failed eviction is ``failed`` and, not being in
flight, is tried again by the next cycle if the engine still wants it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from enum import StrEnum

from nodeagent.actuators import events, safety
from nodeagent.base import errors
from nodeagent.base.clock import Clock
from nodeagent.kube import client
from nodeagent.kube import errors as kube_errors
from nodeagent.model import (
    SIGNAL_RESOURCE,
    Decision,
    Eviction,
    EvictionSignal,
    LocalStorageLimit,
    PodUID,
)

BYPASS_GRACE_PERIOD_SECONDS = 1
"""Grace of a deletion that bypasses a PodDisruptionBudget: the kubelet's hard-eviction
kill grace (``immediateEvictionGracePeriodSeconds``)."""

MIN_API_GRACE_PERIOD_SECONDS = 1
"""The smallest grace the agent sends. Over the API, ``gracePeriodSeconds: 0`` is a force
deletion: kube-apiserver removes the Pod object at once while its containers still run,
so a replacement can start beside them. The kubelet's zero (soft evictions with the
default ``evictionMaxPodGracePeriod: 0``) means "kill now", which 1 s gives safely."""


class Outcome(StrEnum):
    EVICTED = "evicted"
    DELETED = "deleted"
    """Deleted with the 1 s grace after a PDB refusal (hardEvictionBypassesPDB)."""
    BLOCKED_BY_PDB = "blocked-by-pdb"
    FAILED = "failed"
    DRY_RUN = "dry-run"
    SKIPPED_IN_FLIGHT = "skipped-in-flight"
    CAPPED = "capped"
    REFUSED = "refused"
    """The safety rules forbid this pod (protected namespace, label, priority...)."""
    GONE = "gone"
    """The pod no longer exists: nothing to evict."""


@dataclass(frozen=True, slots=True)
class EvictionResult:
    pod: str
    """``namespace/name``."""
    uid: PodUID
    signal: EvictionSignal
    outcome: Outcome
    grace_period_seconds: int
    hard: bool
    detail: str = ""


class Evictor:
    def __init__(
        self,
        kube: client.KubeClient,
        *,
        clock: Clock,
        recorder: events.EventSink,
        policy: safety.SafetyPolicy,
        max_evictions: int = 5,
        cap_interval: float = 10.0,
        deadline_margin: float = 30.0,
        hard_bypasses_pdb: bool = False,
        dry_run: bool = False,
    ) -> None:
        self._kube = kube
        self._clock = clock
        self._recorder = recorder
        self._policy = policy
        self._max = max_evictions
        self._cap_interval = cap_interval
        self._margin = deadline_margin
        self._bypass = hard_bypasses_pdb
        self.dry_run = dry_run
        self._in_flight: dict[PodUID, float] = {}
        self._started: deque[tuple[float, PodUID]] = deque()
        self._lock = threading.Lock()

    @property
    def in_flight(self) -> dict[PodUID, float]:
        """Pods with an eviction under way, and the monotonic time it is forgotten."""
        with self._lock:
            return dict(self._in_flight)

    def forget_gone(self, present: Collection[PodUID]) -> None:
        """Drop in-flight entries of pods the cache no longer lists, and expired ones."""
        with self._lock:
            self._expire(present)

    def apply(
        self,
        decision: Decision,
        *,
        present: Collection[PodUID] | None = None,
        terminating: Collection[PodUID] = (),
    ) -> tuple[EvictionResult, ...]:
        """Carry out ``decision.evictions``; see the module docstring.

        ``present`` (the pod cache's UIDs) lets finished evictions leave the in-flight
        set; ``terminating`` pods are treated as in flight.
        """
        with self._lock:
            self._expire(present)
        chosen = {e.pod.uid for e in decision.evictions}
        spare = (c for c in decision.candidates if c.pod.uid not in chosen)
        queue = deque(decision.evictions)
        results: list[EvictionResult] = []
        evicted: list[Eviction] = []
        while queue:
            eviction = queue.popleft()
            result = self._evict_one(decision, eviction, terminating)
            results.append(result)
            if result.outcome in _DISRUPTED:
                evicted.append(eviction)
            if result.outcome in (Outcome.REFUSED, Outcome.BLOCKED_BY_PDB):
                replacement = self._next_candidate(spare, terminating)
                if replacement is not None:
                    chosen.add(replacement.pod.uid)
                    queue.append(replacement)
            if result.outcome is Outcome.CAPPED:
                results.extend(self._capped(decision, e) for e in queue)
                break
        # Only now, with every Eviction sent: the events say what happened, and a slow
        # or failing events API must not hold up (or, retried, outlast) the pressure.
        self._record_events(decision, results, evicted)
        return tuple(results)

    # --- one pod ------------------------------------------------------------------------
    def _evict_one(
        self, decision: Decision, eviction: Eviction, terminating: Collection[PodUID]
    ) -> EvictionResult:
        pod = eviction.pod
        hard = _is_hard(decision, eviction.signal)

        def result(outcome: Outcome, detail: str = "", grace: int | None = None) -> EvictionResult:
            grace_seconds = eviction.grace_period_seconds if grace is None else grace
            return EvictionResult(
                pod.key, pod.uid, eviction.signal, outcome, grace_seconds, hard, detail
            )

        refusal = safety.evictable(pod, self._policy)
        if refusal is not None:
            return result(Outcome.REFUSED, refusal)  # logged with the results, after
        with self._lock:
            if pod.uid in self._in_flight or pod.uid in terminating:
                return result(Outcome.SKIPPED_IN_FLIGHT, "eviction already under way")
            now = self._clock.now()
            if len(self._started) >= self._max:
                return self._capped(decision, eviction)
            self._started.append((now, pod.uid))
            self._in_flight[pod.uid] = now + eviction.grace_period_seconds + self._margin
        grace = max(eviction.grace_period_seconds, MIN_API_GRACE_PERIOD_SECONDS)
        if self.dry_run:
            return result(Outcome.DRY_RUN, grace=grace)
        try:
            self._kube.evict_pod(
                pod.namespace,
                pod.name,
                grace_period_seconds=grace,
                uid=str(pod.uid) or None,
            )
        except kube_errors.EvictionBlocked as exc:
            if hard and self._bypass:
                return self._delete_bypassing_pdb(eviction, hard)
            self._not_in_flight(pod.uid)
            return result(Outcome.BLOCKED_BY_PDB, str(exc))
        except errors.NotFound:
            return result(Outcome.GONE, "pod not found")
        except errors.Conflict:
            return result(Outcome.GONE, "pod replaced by a namesake (uid precondition)")
        except errors.KubeAPIError as exc:
            self._not_in_flight(pod.uid)
            return result(Outcome.FAILED, str(exc))
        return result(Outcome.EVICTED, grace=grace)

    def _delete_bypassing_pdb(self, eviction: Eviction, hard: bool) -> EvictionResult:
        pod = eviction.pod
        grace = BYPASS_GRACE_PERIOD_SECONDS

        def result(outcome: Outcome, detail: str) -> EvictionResult:
            return EvictionResult(pod.key, pod.uid, eviction.signal, outcome, grace, hard, detail)

        try:
            self._kube.delete_pod(
                pod.namespace, pod.name, grace_period_seconds=grace, uid=str(pod.uid) or None
            )
        except errors.NotFound:
            return result(Outcome.GONE, "pod not found")
        except errors.Conflict:
            return result(Outcome.GONE, "pod replaced by a namesake (uid precondition)")
        except errors.KubeAPIError as exc:
            self._not_in_flight(pod.uid)
            return result(Outcome.FAILED, f"delete bypassing PDB: {exc}")
        with self._lock:
            self._in_flight[pod.uid] = self._clock.now() + grace + self._margin
        return result(Outcome.DELETED, "PodDisruptionBudget bypassed for a hard threshold")

    # --- helpers ------------------------------------------------------------------------
    def _capped(self, decision: Decision, eviction: Eviction) -> EvictionResult:
        return EvictionResult(
            eviction.pod.key,
            eviction.pod.uid,
            eviction.signal,
            Outcome.CAPPED,
            eviction.grace_period_seconds,
            _is_hard(decision, eviction.signal),
            f"at most {self._max} evictions per {self._cap_interval:g}s",
        )

    def _next_candidate(
        self, spare: Iterator[Eviction], terminating: Collection[PodUID]
    ) -> Eviction | None:
        for candidate in spare:
            with self._lock:
                busy = candidate.pod.uid in self._in_flight
            if busy or candidate.pod.uid in terminating:
                continue
            if safety.evictable(candidate.pod, self._policy) is None:
                return candidate
        return None

    def _not_in_flight(self, uid: PodUID) -> None:
        with self._lock:
            self._in_flight.pop(uid, None)
            # a refused or failed call disrupted nothing: it does not count against the cap
            self._started = deque(entry for entry in self._started if entry[1] != uid)

    def _expire(self, present: Collection[PodUID] | None) -> None:
        """Lock held: forget finished evictions and starts older than the cap window."""
        now = self._clock.now()
        while self._started and now - self._started[0][0] >= self._cap_interval:
            self._started.popleft()
        for uid in [
            u
            for u, deadline in self._in_flight.items()
            if now >= deadline or (present is not None and u not in present)
        ]:
            del self._in_flight[uid]

    def _record_events(
        self,
        decision: Decision,
        results: Collection[EvictionResult],
        evicted: Collection[Eviction],
    ) -> None:
        """The node's ``EvictionThresholdMet`` for the threshold acted on, then an
        ``Evicted`` event per pod disrupted (or that would have been, in dry-run)."""
        signal = _threshold_acted_on(decision, results)
        resource = SIGNAL_RESOURCE.get(signal) if signal is not None else None
        if resource is not None:
            self._recorder.threshold_met(str(resource))
        for eviction in evicted:
            self._recorder.evicted(eviction.pod, eviction.message)


_DISRUPTED = frozenset({Outcome.EVICTED, Outcome.DELETED, Outcome.DRY_RUN})
"""Outcomes that get the pod's ``Evicted`` event."""


def _threshold_acted_on(
    decision: Decision, results: Collection[EvictionResult]
) -> EvictionSignal | None:
    """The signal of the node's ``EvictionThresholdMet`` event: the first threshold an
    eviction was tried for (a pod over its own local-storage limit is not the node
    reclaiming anything); without evictions, a threshold past its grace (the kubelet
    records the event before it looks for a pod)."""
    if decision.evictions:
        tried = (r.signal for r in results if not isinstance(r.signal, LocalStorageLimit))
        return next(tried, None)
    return next((t.signal for t in decision.thresholds_met if t.grace_satisfied), None)


def _is_hard(decision: Decision, signal: EvictionSignal) -> bool:
    """Whether the eviction is immediate: for a hard threshold, or for a local-storage
    limit, which the kubelet enforces at once whatever the thresholds."""
    if isinstance(signal, LocalStorageLimit):
        return True
    return any(t.hard and t.signal == signal for t in decision.thresholds_met)
