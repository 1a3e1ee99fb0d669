"""Applying decisions without ever holding up observation.

The API may be slow, down, or retrying with backoff for seconds; the loop must keep
reading and deciding meanwhile. So the loop only *submits* each decision here
(:meth:`Actuation.submit`, which never blocks), and one worker thread applies them:

* **Latest wins.** A submission replaces any not yet applied. Conditions, taints and the
  pressure annotation are desired *state*, so applying the latest is applying them all:
  nothing is lost while the worker was stuck, and ``NodeStatusActuator`` keeps the time a
  condition change was first decided, so ``lastTransitionTime`` is not moved by an outage.
* **Evictions are for the current decision only.** A decision older than
  ``max_decision_age`` when the worker gets to it has its evictions dropped: the loop
  re-decides every cycle, and a stale choice (made on a sample the pods have moved on
  from) must not be replayed after an outage.
* **One at a time, as the kubelet.** After an eviction the kubelet waits for the pod's
  cleanup before it evicts again, so a pod whose memory is being freed is not followed
  by a second victim. Here an eviction waits while an earlier one is still in flight (the
  evictor tracks it until the pod leaves the pod cache or its deadline passes) or while a
  pod on the node has been terminating for less than ``cleanup_wait`` (after a restart
  the agent cannot tell whose eviction that was). A waiting decision still records
  ``EvictionThresholdMet``.
* **Adopt before converging.** Until the Node has been read, the worker only tries to
  read it; what it read is handed to the loop (:meth:`Actuation.take_adopted`) so the
  engine's pressure memory is seeded before the first condition is written.

The same worker serves standalone runs and ``--dry-run``: the actuators it drives then
decide and log but send nothing that changes the cluster.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from nodeagent import errors
from nodeagent.actuators.events import EventRecorder
from nodeagent.actuators.evictor import EvictionResult, Evictor, Outcome
from nodeagent.actuators.node_status import NodeState, NodeStatusActuator, SignalHeadroom
from nodeagent.agent.logs import FIELDS
from nodeagent.agent.pods import PodView
from nodeagent.clock import Clock
from nodeagent.model import Decision, PodUID, Signal
from nodeagent.observability.health import Health
from nodeagent.observability.metrics import AgentMetrics, EvictionOutcome

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
    waits_for_cleanup: int = 0
    results: list[EvictionResult] = field(default_factory=list)
    """Every eviction result, in order (bounded by what the evictor caps)."""


class Actuation:
    """Applies the loop's decisions in a worker thread (see the module docstring).

    Tests drive it without the thread: :meth:`submit` then :meth:`apply_pending`.
    """

    def __init__(
        self,
        *,
        node_status: NodeStatusActuator,
        evictor: Evictor,
        recorder: EventRecorder,
        clock: Clock,
        metrics: AgentMetrics,
        health: Health,
        max_decision_age: float,
        cleanup_wait: float,
        max_results_kept: int = 1000,
    ) -> None:
        self.node_status = node_status
        self.evictor = evictor
        self.recorder = recorder
        self._clock = clock
        self._metrics = metrics
        self._health = health
        self._max_age = max_decision_age
        self._cleanup_wait = cleanup_wait
        self._max_results = max_results_kept
        self._condition = threading.Condition()
        self._pending: ActuationJob | None = None
        self._adopted: NodeState | None = None
        self._terminating_since: dict[PodUID, float] = {}
        self._api = _ApiHealth()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.stats = ActuationStats()

    # --- the loop's side -----------------------------------------------------------------
    def submit(self, job: ActuationJob) -> None:
        """Hand over the latest decision; replaces one not yet applied. Never blocks."""
        with self._condition:
            if self._pending is not None:
                self.stats.replaced += 1
            self._pending = job
            self._condition.notify()

    def take_adopted(self) -> NodeState | None:
        """The Node as read at adoption, once (then ``None``)."""
        with self._condition:
            adopted, self._adopted = self._adopted, None
            return adopted

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="actuation", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Stop after the application under way and a last flush of event counts, both
        abandoned after ``timeout``: the thread is a daemon, and a request stuck on a dead
        API must not delay the exit."""
        with self._condition:
            self._stopping = True
            self._condition.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self.recorder.flush()

    def _run(self) -> None:
        while True:
            with self._condition:
                while self._pending is None and not self._stopping:
                    self._condition.wait()
                if self._stopping:
                    break
            try:
                self.apply_pending()
            except Exception:  # the worker must survive anything one decision does
                log.exception("applying a decision failed")
        self.recorder.flush()

    # --- one application -------------------------------------------------------------------
    def apply_pending(self) -> bool:
        """Apply the latest submitted job, if any; True when one was applied."""
        with self._condition:
            job, self._pending = self._pending, None
        if job is None:
            return False
        self._apply(job)
        self.stats.applied += 1
        return True

    def _apply(self, job: ActuationJob) -> None:
        # Evictions first: under a hard threshold the seconds before the kernel's OOM
        # killer matter more than the taint, which only keeps new pods away.
        now = self._clock.now()
        self._evict(job, now)
        if self.node_status.state is None:
            self._adopt(now)
        else:
            self._publish(job, now)
        self.recorder.flush()

    def _adopt(self, now: float) -> None:
        try:
            state = self.node_status.adopt()
        except errors.KubeAPIError as exc:
            self._api_failed(f"read node {self.node_status.node_name}: {exc}", now)
            return
        self._api_ok()
        self.recorder.node_uid = state.uid
        with self._condition:
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
