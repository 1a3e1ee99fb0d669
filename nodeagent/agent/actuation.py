"""Applying decisions without ever holding up observation.

The API may be slow, down, or retrying with backoff for seconds; the loop must keep
reading and deciding meanwhile. So the loop only *submits* each decision here
(:meth:`Actuation.submit`, which never blocks), and two worker threads apply them:

* **Evictions have a thread of their own.** Under a hard memory threshold the
  milliseconds before the kernel's OOM killer are what the agent is for, so nothing
  waits in front of an Eviction: not the node's conditions, taints or annotation (the
  ``node-status`` thread writes those, however long a failing patch retries), not an
  event (the evictor queues its events, :class:`~nodeagent.actuators.events.EventQueue`,
  and the node-status thread writes them), not a metric or a log line (after the
  requests), and no lock the other thread holds while it does I/O. A failure of any of
  those writes therefore neither delays nor drops an eviction.

* **Latest wins.** A submission replaces any not yet applied. Conditions, taints and the
  pressure annotation are desired *state*, so applying the latest is applying them all:
  nothing is lost while the worker was stuck, and ``NodeStatusActuator`` keeps the time a
  condition change was first decided, so ``lastTransitionTime`` is not moved by an outage.
* **Evictions are for the current decision only.** A decision older than
  ``max_decision_age`` when the worker gets to it has its evictions dropped: the loop
  re-decides every cycle, and a stale choice (made on a sample the pods have moved on
  from) must not be replayed after an outage. Its node state is not published either: a
  condition the transition period alone held True would come back after the period ran
  out (the deterministic simulation found it, seed 555485).
* **One at a time, as the kubelet.** After an eviction the kubelet waits for the pod's
  cleanup before it evicts again, so a pod whose memory is being freed is not followed
  by a second victim. Here an eviction waits while an earlier one is still in flight (the
  evictor tracks it until the pod leaves the pod cache or its deadline passes) or while a
  pod on the node has been terminating for less than ``cleanup_wait`` (after a restart
  the agent cannot tell whose eviction that was). A waiting decision still records
  ``EvictionThresholdMet``.
* **Adopt before converging.** Until the Node has been read, the node-status thread only tries to
  read it; what it read is handed to the loop (:meth:`Actuation.take_adopted`) so the
  engine's pressure memory is seeded before the first condition is written.

The same workers serve standalone runs and ``--dry-run``: the actuators they drive then
decide and log but send nothing that changes the cluster.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from nodeagent.actuators.events import AgentEventRecorder, EventQueue
from nodeagent.actuators.evictor import EvictionResult, Evictor, Outcome
from nodeagent.actuators.node_status import NodeState, NodeStatusActuator, SignalHeadroom
from nodeagent.agent.metrics import AgentMetrics, EvictionOutcome
from nodeagent.agent.pods import PodView
from nodeagent.base import errors
from nodeagent.base.clock import Clock
from nodeagent.base.logs import FIELDS
from nodeagent.model import Decision, PodUID, Signal
from nodeagent.serving.health import Health

log = logging.getLogger("nodeagent.actuation")

METRIC_OUTCOMES: Mapping[Outcome, EvictionOutcome] = {
    Outcome.EVICTED: EvictionOutcome.EVICTED,
    Outcome.DELETED: EvictionOutcome.EVICTED,
    Outcome.BLOCKED_BY_PDB: EvictionOutcome.BLOCKED_BY_PDB,
    Outcome.FAILED: EvictionOutcome.FAILED,
    Outcome.DRY_RUN: EvictionOutcome.DRY_RUN,
}
"""Evictor outcomes that count as evictions in the metrics; the others (skipped, capped,
refused, gone) are not evictions."""

_QUIET_OUTCOMES = frozenset({Outcome.SKIPPED_IN_FLIGHT})
"""Outcomes logged at DEBUG: they repeat every cycle while an eviction is under way."""

EVICTIONS_FIRST_WAIT = 1.0
"""Seconds the node-status thread waits, at most, for the eviction thread to send a
decision's Evictions before it writes that decision's conditions and taints."""

API_ERROR_LOG_INTERVAL = 30.0
"""Seconds between two warnings while the API keeps failing (the first is at once)."""


@dataclass(frozen=True, slots=True)
class ActuationJob:
    """One decision to apply, with what the loop knew when it made it."""

    decision: Decision
    headroom: Mapping[Signal, SignalHeadroom]
    pods: PodView
    made_at: float
    """The clock's ``now()`` when the decision was made."""


@dataclass(slots=True)
class _ApiHealth:
    failing_since: float | None = None
    last_warning: float = float("-inf")
    detail: str = ""


@dataclass(slots=True)
class ActuationStats:
    applied: int = 0
    replaced: int = 0
    """Submissions replaced by a newer one before the worker got to them."""
    stale_evictions: int = 0
    stale_node_states: int = 0
    """Decisions whose conditions, taints and annotation were too old to publish."""
    waits_for_cleanup: int = 0
    results: list[EvictionResult] = field(default_factory=list)
    """Every eviction result, in order (bounded by what the evictor caps)."""


class _LatestJob:
    """A one-place mailbox: :meth:`put` replaces what waits, :meth:`take` waits for it.

    Its lock is held only to swap the reference, never across I/O."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._job: ActuationJob | None = None
        self._poked = False
        self._stopping = False

    def put(self, job: ActuationJob) -> bool:
        """Whether a job not yet taken was replaced."""
        with self._condition:
            replaced = self._job is not None
            self._job = job
            self._condition.notify()
        return replaced

    def poke(self) -> None:
        """Wake the taker without a job (it has something else to do)."""
        with self._condition:
            self._poked = True
            self._condition.notify()

    def stop(self) -> None:
        with self._condition:
            self._stopping = True
            self._condition.notify()

    def take(self, *, wait: bool) -> tuple[ActuationJob | None, bool]:
        """The waiting job (or None) and whether to go on; with ``wait``, blocks until
        there is a job, a poke or a stop."""
        with self._condition:
            while wait and self._job is None and not self._poked and not self._stopping:
                self._condition.wait()
            job, self._job, self._poked = self._job, None, False
            return job, not self._stopping


class Actuation:
    """Applies the loop's decisions in two worker threads (see the module docstring).

    Tests drive it without the threads: :meth:`submit` then :meth:`apply_pending`.
    """

    def __init__(
        self,
        *,
        node_status: NodeStatusActuator,
        evictor: Evictor,
        recorder: AgentEventRecorder,
        clock: Clock,
        metrics: AgentMetrics,
        health: Health,
        max_decision_age: float,
        cleanup_wait: float,
        events: EventQueue | None = None,
        max_results_kept: int = 1000,
    ) -> None:
        """``events``: where the evictor records (written by the node-status thread)."""
        self.node_status = node_status
        self.evictor = evictor
        self.recorder = recorder
        self.events = events
        self._clock = clock
        self._metrics = metrics
        self._health = health
        self._max_age = max_decision_age
        self._cleanup_wait = cleanup_wait
        self._max_results = max_results_kept
        self._for_evictions = _LatestJob()
        self._for_node_status = _LatestJob()
        self._evictions_done = threading.Condition()
        self._evicted_through = float("-inf")
        """``made_at`` of the latest job whose evictions the eviction thread has sent."""
        self._adopted: NodeState | None = None
        self._adopted_lock = threading.Lock()
        self._terminating_since: dict[PodUID, float] = {}
        self._api = _ApiHealth()
        self._api_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.stats = ActuationStats()

    # --- the loop's side -----------------------------------------------------------------
    def submit(self, job: ActuationJob) -> None:
        """Hand over the latest decision; replaces one not yet applied. Never blocks."""
        self._for_evictions.put(job)
        if self._for_node_status.put(job):
            self.stats.replaced += 1

    def take_adopted(self) -> NodeState | None:
        """The Node as read at adoption, once (then ``None``)."""
        with self._adopted_lock:
            adopted, self._adopted = self._adopted, None
            return adopted

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._run_evictions, name="evictions", daemon=True),
            threading.Thread(target=self._run_node_status, name="node-status", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float) -> None:
        """Stop after the applications under way and a last write of the events and
        their counts, all abandoned after ``timeout``: the threads are daemons, and a
        request stuck on a dead API must not delay the exit."""
        self._for_evictions.stop()
        self._for_node_status.stop()
        if not self._threads:
            self._write_events()
            return
        deadline = time.monotonic() + timeout  # real time: threads are joined in it
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _run_evictions(self) -> None:
        while True:
            job, going_on = self._for_evictions.take(wait=True)
            if not going_on:
                break
            if job is None:
                continue
            try:
                self._evict(job, self._clock.now())
            except Exception:  # the worker must survive anything one decision does
                log.exception("applying a decision's evictions failed")
            finally:
                self._evictions_sent(job)
            if self.events is not None:
                self._for_node_status.poke()  # the evictor queued events: write them

    def _run_node_status(self) -> None:
        while True:
            job, going_on = self._for_node_status.take(wait=True)
            if not going_on:
                break
            try:
                if job is not None:
                    self._after_its_evictions(job)
                    self._apply_node_status(job)
                    self.stats.applied += 1
                self._write_events()
            except Exception:  # the worker must survive anything one decision does
                log.exception("applying a decision failed")
        self._write_events()

    def _evictions_sent(self, job: ActuationJob) -> None:
        with self._evictions_done:
            self._evicted_through = max(self._evicted_through, job.made_at)
            self._evictions_done.notify_all()

    def _after_its_evictions(self, job: ActuationJob) -> None:
        """Let the eviction thread send a job's Evictions before this thread writes the
        job's conditions and taints: both would otherwise start at the same instant, and
        the writes (JSON, HTTP, in one interpreter) would take turns with the Evictions
        for the CPU. The wait is bounded by ``EVICTIONS_FIRST_WAIT``: this thread waits
        on the evictions, never the other way round."""
        if not job.decision.evictions:
            return
        with self._evictions_done:
            self._evictions_done.wait_for(
                lambda: self._evicted_through >= job.made_at, timeout=EVICTIONS_FIRST_WAIT
            )

    # --- one application -------------------------------------------------------------------
    def apply_pending(self) -> bool:
        """Apply the latest submitted job, if any, on the calling thread (tests): its
        evictions, then the node's state and the events; True when one was applied."""
        job, _ = self._for_evictions.take(wait=False)
        if job is not None:
            self._evict(job, self._clock.now())
        job, _ = self._for_node_status.take(wait=False)
        if job is not None:
            self._apply_node_status(job)
            self.stats.applied += 1
        self._write_events()
        return job is not None

    def _apply_node_status(self, job: ActuationJob) -> None:
        now = self._clock.now()
        if self.node_status.state is None:
            self._adopt(now)
        elif now - job.made_at > self._max_age:
            # A condition held True by the transition period alone must not be published
            # after that period ran out: the loop decides again every cycle, and its
            # next decision is the one applied.
            self.stats.stale_node_states += 1
            log.debug(
                "not publishing the node state of a stale decision; the loop decides again",
                extra={FIELDS: {"ageSeconds": round(now - job.made_at, 3)}},
            )
        else:
            self._publish(job, now)

    def _write_events(self) -> None:
        if self.events is not None:
            self.events.drain()
        self.recorder.flush()

    def _adopt(self, now: float) -> None:
        try:
            state = self.node_status.adopt()
        except errors.KubeAPIError as exc:
            self._api_failed(f"read node {self.node_status.node_name}: {exc}", now)
            return
        self._api_ok()
        self.recorder.node_uid = state.uid
        with self._adopted_lock:
            self._adopted = state
        log.info(
            "adopted the node's published state",
            extra={
                FIELDS: {
                    "node": state.name,
                    "conditions": {
                        kind: c.status
                        for kind, c in state.conditions.items()
                        if kind in self.node_status.condition_types
                    },
                    "taints": [
                        f"{t.get('key')}:{t.get('effect')}"
                        for t in state.taints
                        if t.get("key") in self.node_status.taint_keys
                    ],
                }
            },
        )

    def _publish(self, job: ActuationJob, now: float) -> None:
        before = self.node_status.state
        result = self.node_status.apply(job.decision, job.headroom)
        if result.errors:
            self._api_failed("; ".join(result.errors), now)
            return
        self._api_ok()
        if not result.wrote:
            return
        previous = before.conditions if before is not None else {}
        flipped = {
            c.type: c.status
            for c in result.conditions
            if (old := previous.get(c.type)) is None or old.status != c.status
        }
        level = logging.INFO if flipped or result.taints is not None else logging.DEBUG
        fields: dict[str, object] = {"dryRun": self.node_status.dry_run}
        if result.conditions:
            fields["conditions"] = {c.type: c.status for c in result.conditions}
        if result.taints is not None:
            fields["taints"] = [
                f"{t.get('key')}:{t.get('effect')}"
                for t in result.taints
                if t.get("key") in self.node_status.taint_keys
            ]
        if result.annotation is not None:
            fields["annotation"] = True
        what = "conditions changed" if flipped else "node state published"
        log.log(level, what, extra={FIELDS: fields})

    # --- evictions -------------------------------------------------------------------------
    def _evict(self, job: ActuationJob, now: float) -> None:
        decision = job.decision
        acting = any(t.grace_satisfied for t in decision.thresholds_met)
        if not decision.evictions and not acting:
            self._track_terminating(job.pods, now)
            return
        if job.pods.synced:
            self.evictor.forget_gone(job.pods.present)
        waiting_for = self._track_terminating(job.pods, now)
        if decision.evictions and now - job.made_at > self._max_age:
            self.stats.stale_evictions += 1
            log.info(
                "dropping the evictions of a stale decision; the loop decides again",
                extra={FIELDS: {"ageSeconds": round(now - job.made_at, 3)}},
            )
            decision = _without_evictions(decision)
        elif decision.evictions:
            in_flight = self.evictor.in_flight
            if in_flight or waiting_for:
                self.stats.waits_for_cleanup += 1
                log.debug(
                    "eviction waits for an earlier one to finish",
                    extra={
                        FIELDS: {
                            "inFlight": sorted(str(uid) for uid in in_flight),
                            "terminating": sorted(str(uid) for uid in waiting_for),
                        }
                    },
                )
                decision = _without_evictions(decision)
        results = self.evictor.apply(
            decision,
            present=job.pods.present if job.pods.synced else None,
            terminating=job.pods.terminating,
        )
        for result in results:
            self._report(decision, result, now)

    def _track_terminating(self, pods: PodView, now: float) -> list[PodUID]:
        """Remember when each terminating pod was first seen; those seen within
        ``cleanup_wait`` are what a new eviction waits for."""
        seen = self._terminating_since
        for uid in list(seen):
            if uid not in pods.terminating:
                del seen[uid]
        for uid in pods.terminating:
            seen.setdefault(uid, now)
        return [uid for uid, since in seen.items() if now - since < self._cleanup_wait]

    def _report(self, decision: Decision, result: EvictionResult, now: float) -> None:
        stats = self.stats
        stats.results.append(result)
        if len(stats.results) > self._max_results:
            del stats.results[: len(stats.results) - self._max_results]
        chosen = next((e for e in decision.candidates if e.pod.uid == result.uid), None)
        metric = METRIC_OUTCOMES.get(result.outcome)
        if metric is not None and chosen is not None:
            self._metrics.record_eviction(
                result.signal, metric, chosen.pod.qos, reclaimed=chosen.reclaim_estimate
            )
        if result.outcome is Outcome.FAILED:
            self._api_failed(f"evict {result.pod}: {result.detail}", now)
        elif result.outcome in (Outcome.EVICTED, Outcome.DELETED):
            self._api_ok()
        if result.outcome in _QUIET_OUTCOMES:
            level = logging.DEBUG
        elif result.outcome in (Outcome.FAILED, Outcome.BLOCKED_BY_PDB, Outcome.REFUSED):
            level = logging.WARNING
        else:
            level = logging.INFO
        log.log(
            level,
            f"eviction {result.outcome}: {result.pod}",
            extra={
                FIELDS: {
                    "pod": result.pod,
                    "uid": str(result.uid),
                    "signal": str(result.signal),
                    "outcome": str(result.outcome),
                    "gracePeriodSeconds": result.grace_period_seconds,
                    "hard": result.hard,
                    **({"detail": result.detail} if result.detail else {}),
                }
            },
        )

    # --- API health ------------------------------------------------------------------------
    def _api_failed(self, detail: str, now: float) -> None:
        with self._api_lock:
            self._api_failed_locked(detail, now)

    def _api_failed_locked(self, detail: str, now: float) -> None:
        api = self._api
        if api.failing_since is None:
            api.failing_since = now
        api.detail = detail
        self._health.set_api_reachable(False, detail)
        if now - api.last_warning >= API_ERROR_LOG_INTERVAL:
            api.last_warning = now
            log.warning(
                "Kubernetes API failing; observing and deciding go on, the latest state is "
                "applied when it answers",
                extra={FIELDS: {"error": detail, "failingSeconds": round(now - api.failing_since)}},
            )

    def _api_ok(self) -> None:
        with self._api_lock:
            self._api_ok_locked()

    def _api_ok_locked(self) -> None:
        api = self._api
        if api.failing_since is not None:
            log.info(
                "Kubernetes API answers again",
                extra={FIELDS: {"failedSeconds": round(self._clock.now() - api.failing_since, 1)}},
            )
            api.failing_since = None
            api.last_warning = float("-inf")
        self._health.set_api_reachable(True)


def _without_evictions(decision: Decision) -> Decision:
    return replace(decision, evictions=())
