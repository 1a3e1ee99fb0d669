"""What the scheduler writes besides bindings, off the scheduling thread
(kube-scheduler's ``handleSchedulingFailure``).

* **Pod status** (``pods/status`` strategic merge patch): ``PodScheduled=False`` with
  reason ``Unschedulable`` (``SchedulerError`` for internal errors) and kube-scheduler's
  message, and ``nominatedNodeName``. Patches are coalesced per pod (only the latest
  matters) and a condition identical to the last one written is not written again, so
  a pod retried a hundred times costs one write.
* **Events** (``FailedScheduling`` Warning, ``Scheduled`` Normal, ``Preempted`` on a
  victim) through the shared aggregating :class:`~nodeagent.kube.events.EventRecorder`
  (repeats bump ``count``; distinct pods' events are never merged), from
  a bounded queue that drops when full, as client-go's broadcaster does: events never
  slow scheduling down. Their requests have a budget of their own, the client
  connection's ``qps``/``burst`` (kube-scheduler gives its event client a clientset of
  its own with the same settings), so events never spend the bindings' budget.
* **Preemption victims**: a ``DisruptionTarget`` condition (reason
  ``PreemptionByScheduler``), then a delete with a uid precondition. Never dropped.

One worker thread drains the writes first, then the events.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodeagent.base import errors
from nodeagent.base.clock import Clock
from nodeagent.kube import client, ratelimit
from nodeagent.kube.events import NORMAL, WARNING, EventRecorder, InvolvedObject
from nodeagent.scheduler import api

log = logging.getLogger(__name__)

EVENT_QUEUE = 1000
"""Events waiting to be written at most (client-go's ``maxQueuedEvents``)."""
EVENT_QPS, EVENT_BURST = 50.0, 100
"""The events' own request budget by default (kube-scheduler's ``clientConnection``
defaults; the live scheduler passes its configured ``qps``/``burst``)."""
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"
REASON_PREEMPTION = "PreemptionByScheduler"


def pod_object(pod: api.Pod) -> InvolvedObject:
    return InvolvedObject("Pod", pod.name, pod.namespace, pod.uid)


REASON_SCHEDULED = "Scheduled"


def scheduled_message(namespace: str, name: str, node: str) -> str:
    """The ``Scheduled`` event's note, kube-scheduler's words."""
    return f"Successfully assigned {namespace}/{name} to {node}"


@dataclass(frozen=True, slots=True)
class _Victim:
    pod: api.Pod
    preemptor: api.Pod
    node: str


class Reporter:
    def __init__(
        self,
        kube: client.ClusterClient,
        recorder: EventRecorder,
        *,
        wall: Callable[[], float],
        scheduler_name: str,
        on_event_dropped: Callable[[], None] = lambda: None,
        clock: Clock | None = None,
        event_qps: float = EVENT_QPS,
        event_burst: int = EVENT_BURST,
        on_victim_done: Callable[[str, bool], None] = lambda _uid, _ok: None,
    ) -> None:
        """``clock`` paces the events' budget (the real clock by default).
        ``on_victim_done(preemptor uid, ok)``: a victim's deletion was answered."""
        self._on_victim_done = on_victim_done
        self._kube = kube
        self._recorder = recorder
        self._wall = wall
        self._scheduler_name = scheduler_name
        self._on_dropped = on_event_dropped
        self._lock = threading.Condition()
        self._status: OrderedDict[str, tuple[api.Pod, dict[str, Any]]] = OrderedDict()
        self._failed: dict[str, tuple[api.Pod, dict[str, Any]]] = {}
        """Status patches the API did not take, until :meth:`retry_failed`."""
        self._victims: deque[_Victim] = deque()
        self._events: queue.SimpleQueue[tuple[InvolvedObject, str, str, str]] = queue.SimpleQueue()
        self._queued_events = 0
        self._writing = 0
        self._written_condition: dict[str, str] = {}
        self._preempted: set[str] = set()
        self._stop = False
        self._abandoned = False
        self._thread: threading.Thread | None = None
        self._event_budget = ratelimit.TokenBucket(event_qps, event_burst, clock=clock)

    # --- what the scheduler reports -----------------------------------------------------
    def unschedulable(
        self, pod: api.Pod, message: str, *, error: bool = False, nominated: str | None = None
    ) -> None:
        reason = REASON_SCHEDULER_ERROR if error else REASON_UNSCHEDULABLE
        status: dict[str, Any] = {}
        if self._written_condition.get(pod.uid) != f"{reason}\0{message}":
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": client.api_time(self._wall()),
                }
            ]
        if nominated is not None and nominated != pod.nominated_node_name:
            status["nominatedNodeName"] = nominated or None
        if status:
            self._patch_status(pod, status)
            if "conditions" in status:
                self._written_condition[pod.uid] = f"{reason}\0{message}"
        self._event(pod_object(pod), "FailedScheduling", message, WARNING)

    def scheduled(self, pod: api.Pod, node: str, *, event: bool = True) -> None:
        """The pod is bound. ``event=False``: its ``Scheduled`` event is recorded
        elsewhere (the binding process records it right after the binding)."""
        self._written_condition.pop(pod.uid, None)
        if event:
            self._event(
                pod_object(pod),
                REASON_SCHEDULED,
                scheduled_message(pod.namespace, pod.name, node),
                NORMAL,
            )

    def nominate(self, pod: api.Pod, node: str) -> None:
        """Write the preemptor's ``nominatedNodeName``; queued before its victims, and
        written before the first of them is deleted, so the nomination is on the pod
        before the room it was made for appears."""
        self._patch_status(pod, {"nominatedNodeName": node})

    def clear_nomination(self, pod: api.Pod) -> None:
        self._patch_status(pod, {"nominatedNodeName": None})

    def preempt(self, victim: api.Pod, preemptor: api.Pod, node: str) -> None:
        with self._lock:
            already = victim.uid in self._preempted  # its deletion is already on the way
            if not already:
                self._preempted.add(victim.uid)
                self._victims.append(_Victim(victim, preemptor, node))
                self._lock.notify()
        if already:
            self._on_victim_done(preemptor.uid, True)

    def forget(self, uid: str) -> None:
        """The pod is gone: drop what is remembered about it."""
        self._written_condition.pop(uid, None)
        with self._lock:
            self._preempted.discard(uid)
            self._failed.pop(uid, None)

    def _patch_status(self, pod: api.Pod, status: dict[str, Any]) -> None:
        with self._lock:
            _, failed = self._failed.pop(pod.uid, (pod, {}))  # older: under what is new
            _, pending = self._status.pop(pod.uid, (pod, {}))
            merged = {**failed, **pending, **status}
            self._status[pod.uid] = (pod, merged)
            self._lock.notify()

    def _event(self, involved: InvolvedObject, reason: str, message: str, kind: str) -> None:
        with self._lock:
            if self._queued_events >= EVENT_QUEUE:
                self._on_dropped()
                return
            self._queued_events += 1
            self._events.put((involved, reason, message, kind))
            self._lock.notify()

    # --- the worker ---------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="scheduler-reporter", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued (within ``timeout``), then stop."""
        with self._lock:
            self._stop = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:  # what is left after the timeout is dropped, not written late
            self._abandoned = True
            self._status.clear()
            self._victims.clear()
            self._queued_events = 0

    def idle(self) -> bool:
        """Nothing queued and nothing being written."""
        with self._lock:
            return not (self._status or self._victims or self._queued_events or self._writing)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not (self._status or self._victims or self._queued_events or self._stop):
                    self._lock.wait()
                if self._stop and not (self._status or self._victims or self._queued_events):
                    return
                if self._abandoned:
                    return
            self.write_next()

    def write_next(self) -> bool:
        """Write the next queued item (a victim, with its preemptor's nomination first;
        else a status patch; else an event). False if nothing was queued. The worker's
        one step; a driver without the worker (the simulation) calls it directly."""
        with self._lock:
            victim = self._victims.popleft() if self._victims else None
            status: tuple[api.Pod, dict[str, Any]] | None = None
            if victim is not None:  # its preemptor's nomination is written first
                status = self._status.pop(victim.preemptor.uid, None)
            elif self._status:
                status = self._status.popitem(last=False)[1]
            elif not self._queued_events:
                return False
            self._writing += 1
        try:
            if status is not None:
                self._write_status(*status)
            if victim is not None:
                self._delete_victim(victim)
            elif status is None:
                self._write_event()
        except Exception:  # one failed write must not end the reporting
            log.exception("writing scheduler results failed")
        finally:
            with self._lock:
                self._writing -= 1
        return True

    def _write_status(self, pod: api.Pod, status: dict[str, Any]) -> None:
        try:
            self._kube.patch_pod_status(pod.namespace, pod.name, {"status": status})
        except errors.NotFound:
            self.forget(pod.uid)
        except errors.KubeAPIError as exc:
            # kept for the next retry_failed: a pod left unschedulable is not tried again
            # (nor its status written) until an event or the 5-minute flush moves it
            log.warning("could not update the status of pod %s (will retry): %s", pod.key, exc)
            with self._lock:
                _, older = self._failed.pop(pod.uid, (pod, {}))
                self._failed[pod.uid] = (pod, {**older, **status})

    def retry_failed(self) -> None:
        """Queue again the status patches that failed (under any newer one for the same
        pod); the scheduler calls it every flush interval."""
        with self._lock:
            if not self._failed or self._abandoned:
                return
            for uid, (pod, status) in self._failed.items():
                _, newer = self._status.pop(uid, (pod, {}))
                self._status[uid] = (pod, {**status, **newer})
            self._failed.clear()
            self._lock.notify()

    def _write_event(self) -> None:
        self._event_budget.acquire()
        try:
            involved, reason, message, kind = self._events.get_nowait()
        except queue.Empty:
            return  # dropped at shutdown
        with self._lock:
            self._queued_events -= 1
        self._recorder.record(involved, reason, message, kind)

    def _delete_victim(self, victim: _Victim) -> None:
        pod, preemptor = victim.pod, victim.preemptor
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": REASON_PREEMPTION,
            "message": f"{self._scheduler_name}: preempting to accommodate a higher priority pod",
            "lastTransitionTime": client.api_time(self._wall()),
        }
        try:
            self._kube.patch_pod_status(
                pod.namespace, pod.name, {"status": {"conditions": [condition]}}
            )
            self._kube.delete_pod(pod.namespace, pod.name, grace_period_seconds=None, uid=pod.uid)
        except errors.NotFound:
            self._on_victim_done(preemptor.uid, True)
            return  # already gone: what preemption wanted
        except errors.KubeAPIError as exc:
            log.warning("could not preempt pod %s: %s", pod.key, exc)
            self._on_victim_done(preemptor.uid, False)
            return
        except Exception:
            self._on_victim_done(preemptor.uid, False)  # the preemptor must not wait forever
            raise
        self._on_victim_done(preemptor.uid, True)
        self._recorder.record(
            pod_object(pod),
            "Preempted",
            f"Preempted by pod {preemptor.uid} on node {victim.node}",
            NORMAL,
        )
