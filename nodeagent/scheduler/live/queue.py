"""kube-scheduler's scheduling queue (``PriorityQueue`` in
``pkg/scheduler/backend/queue/scheduling_queue.go``), thread-safe, with time injected.

Where a pending pod can be:

* **activeQ**: a heap ordered by the profile's QueueSort (PrioritySort: priority, then
  the time it entered the queue); :meth:`SchedulingQueue.pop` takes its head, and when
  it is empty the head of backoffQ (kube-scheduler's ``SchedulerPopFromBackoffQ``);
* **backoffQ**: pods waiting out ``min(initial * 2**(attempts-1), max)`` seconds since
  their last failure, by expiry; pods whose cycle *errored* (or whose bind failed) wait
  in a separate error backoff heap with the same timing, never popped early;
* **unschedulablePods**: pods rejected by plugins; they leave only on a cluster event
  for which one of their rejecting plugins' QueueingHints answers Queue
  (:mod:`.events`), or after 5 minutes (``podMaxInUnschedulablePodsDuration``), to
  backoffQ if their backoff has not expired yet, else to activeQ;
* **gated**: pods a PreEnqueue plugin holds: ``schedulingGates`` until an update
  removes them, DefaultPreemption while the pod's victims are being deleted (each
  move to activeQ or backoffQ runs PreEnqueue first, as ``moveToActiveQ`` does);
* **in flight** (popped, being scheduled) and **assumed** (binding in progress): not
  queued, but known, so an event during the cycle is not lost and a pod deleted
  meanwhile is not requeued.

Every method takes the current time from the injected ``clock`` (monotonic seconds);
:meth:`flush` is what kube-scheduler's background loops do (every second: expired
backoffs; the 5-minute unschedulable timeout).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from nodeagent.scheduler import api
from nodeagent.scheduler.framework import ClusterEvent, QueuedPod, pod_update_events

MAX_IN_UNSCHEDULABLE = 300.0
"""Seconds after which a pod leaves unschedulablePods anyway
(``podMaxInUnschedulablePodsDuration``)."""


ANY_REJECTOR = "*"
"""Where a parked pod with no known rejector is indexed: every event concerns it."""

POD_ADD = "PodAdd"
BACKOFF_COMPLETE = "BackoffComplete"
SCHEDULE_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
"""Why a pod entered a queue, besides cluster events (kube-scheduler's labels)."""


class Where(StrEnum):
    ACTIVE = "active"
    BACKOFF = "backoff"
    ERROR_BACKOFF = "errorBackoff"
    UNSCHEDULABLE = "unschedulable"
    GATED = "gated"
    IN_FLIGHT = "inFlight"
    ASSUMED = "assumed"


@dataclass(slots=True, eq=False)
class PodInfo:
    """A pending pod and its queue history."""

    pod: api.Pod
    timestamp: float
    """When it last entered the queue or failed (QueueSort and backoff start here)."""
    first_seen: float
    """When the queue first saw it (the scheduling SLI starts here)."""
    sequence: int
    attempts: int = 0
    rejectors: frozenset[str] = frozenset()
    """Plugins that rejected it in its last cycle."""
    gate: str = ""
    """Why PreEnqueue holds it (gated pods only)."""
    where: Where = Where.ACTIVE
    token: int = 0
    """Bumped on every move, so stale heap entries are recognised and skipped."""
    popped_at_event: int = 0
    moved_by: str = POD_ADD
    """What last moved it to activeQ or backoffQ (a wasted retry is charged to it)."""

    @property
    def uid(self) -> str:
        return self.pod.uid


class Hints(Protocol):
    """Which events may help which rejected pod (:class:`.events.QueueingHints`)."""

    def interested(self, event: ClusterEvent) -> bool: ...

    def plugins_for(self, event: ClusterEvent) -> frozenset[str] | None: ...

    def worth_requeuing(
        self,
        pod: api.Pod,
        rejectors: Iterable[str],
        event: ClusterEvent,
        old: object = None,
        new: object = None,
    ) -> bool: ...


class _EveryEvent:
    """No hints known: every event may help every pod (kube-scheduler without
    QueueingHints and without registrations)."""

    def interested(self, event: ClusterEvent) -> bool:
        return True

    def plugins_for(self, event: ClusterEvent) -> frozenset[str] | None:
        return None

    def worth_requeuing(
        self,
        pod: api.Pod,
        rejectors: Iterable[str],
        event: ClusterEvent,
        old: object = None,
        new: object = None,
    ) -> bool:
        return True


class SchedulingQueue:
    def __init__(
        self,
        *,
        less: Callable[[QueuedPod, QueuedPod], bool],
        pre_enqueue: Callable[[api.Pod], api.Status],
        clock: Callable[[], float],
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_in_unschedulable: float = MAX_IN_UNSCHEDULABLE,
        on_move: Callable[[Where, str], None] | None = None,
        hints: Hints | None = None,
        on_wasted: Callable[[str], None] | None = None,
    ) -> None:
        """``hints``: which events may help which rejected pod (None: every event every
        pod). ``on_wasted(event)``: a pod moved by ``event`` was rejected again by the
        same plugins (a retry for nothing)."""
        self._hints: Hints = hints or _EveryEvent()
        self._on_wasted = on_wasted
        self._less = less
        self._pre_enqueue = pre_enqueue
        self._clock = clock
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_in_unschedulable = max_in_unschedulable
        self._on_move = on_move
        self._lock = threading.Condition()
        self._infos: dict[str, PodInfo] = {}
        self._active: list[_ActiveItem] = []
        self._backoff: list[tuple[float, int, int, PodInfo]] = []
        self._error_backoff: list[tuple[float, int, int, PodInfo]] = []
        self._counts: dict[Where, int] = dict.fromkeys(Where, 0)
        self._unschedulable: dict[str, PodInfo] = {}
        """The unschedulablePods map."""
        self._by_rejector: dict[str, dict[str, PodInfo]] = {}
        """unschedulablePods by rejecting plugin: an event looks only at the pods one of
        its registered plugins rejected (thousands of bindings, each an
        ``AssignedPodAdd``, must not scan every parked pod)."""
        self._sequence = itertools.count()
        self._event_sequence = 0
        self._recent_events: list[tuple[int, ClusterEvent, object, object]] = []
        self._closed = False

    # --- backoff ------------------------------------------------------------------------
    def backoff_duration(self, attempts: int) -> float:
        if attempts <= 0:
            return 0.0
        return float(min(self.initial_backoff * 2 ** min(attempts - 1, 62), self.max_backoff))

    def backoff_expiry(self, info: PodInfo) -> float:
        return info.timestamp + self.backoff_duration(info.attempts)

    # --- moves (lock held) --------------------------------------------------------------
    def _place(self, info: PodInfo, where: Where, event: str = POD_ADD) -> None:
        """Move ``info`` to ``where``; ``event`` names why, as kube-scheduler's
        ``scheduler_queue_incoming_pods_total`` does."""
        if self._infos.get(info.uid) is info:
            self._counts[info.where] -= 1
            if info.where is Where.UNSCHEDULABLE:
                self._forget_unschedulable(info)
        if where is Where.UNSCHEDULABLE:
            self._unschedulable[info.uid] = info
            for plugin in info.rejectors or (ANY_REJECTOR,):
                self._by_rejector.setdefault(plugin, {})[info.uid] = info
        info.where = where
        info.token += 1
        self._infos[info.uid] = info
        self._counts[where] += 1
        if where is Where.ACTIVE:
            heapq.heappush(self._active, _ActiveItem(info, info.token, self._less))
            self._lock.notify()
        elif where in (Where.BACKOFF, Where.ERROR_BACKOFF):
            heap = self._backoff if where is Where.BACKOFF else self._error_backoff
            heapq.heappush(heap, (self.backoff_expiry(info), info.sequence, info.token, info))
            self._lock.notify()  # pop may take a backoffQ head when activeQ is empty
        if where in (Where.ACTIVE, Where.BACKOFF):
            if event != BACKOFF_COMPLETE:  # the move out of unschedulablePods is what counts
                info.moved_by = event
            if self._on_move is not None:
                self._on_move(where, event)

    def _forget_unschedulable(self, info: PodInfo) -> None:
        del self._unschedulable[info.uid]
        for plugin in info.rejectors or (ANY_REJECTOR,):
            parked = self._by_rejector[plugin]
            del parked[info.uid]
            if not parked:
                del self._by_rejector[plugin]

    def _remove(self, info: PodInfo) -> None:
        self._counts[info.where] -= 1
        if info.where is Where.UNSCHEDULABLE:
            self._forget_unschedulable(info)
        info.token += 1
        del self._infos[info.uid]

    def _activate_or_backoff(self, info: PodInfo, now: float, event: str) -> None:
        """To backoffQ while its backoff runs, else activeQ; PreEnqueue first (a pod
        it holds is gated instead)."""
        gate = self._pre_enqueue(info.pod)
        if not gate.is_success:
            info.gate = gate.message
            if info.where is not Where.GATED:
                self._place(info, Where.GATED, event)
            return
        info.gate = ""
        where = Where.BACKOFF if self.backoff_expiry(info) > now else Where.ACTIVE
        self._place(info, where, event)

    def _gate_or_activate(self, info: PodInfo, event: str = POD_ADD) -> None:
        if info.attempts:  # tried before: its backoff still applies
            self._activate_or_backoff(info, self._clock(), event)
            return
        gate = self._pre_enqueue(info.pod)
        if gate.is_success:
            info.gate = ""
            self._place(info, Where.ACTIVE, event)
        else:
            info.gate = gate.message
            self._place(info, Where.GATED, event)

    # --- informer side ------------------------------------------------------------------
    def add(self, pod: api.Pod) -> None:
        """A new pending pod (or one seen again after a re-list)."""
        with self._lock:
            if pod.uid in self._infos:
                self._update_locked(pod, relevant=False)
                return
            now = self._clock()
            info = PodInfo(pod, now, now, next(self._sequence))
            self._gate_or_activate(info)

    def update(self, pod: api.Pod, *, relevant: bool = True) -> None:
        """A pending pod changed. ``relevant``: its spec or labels changed (an update of
        our own status patch is not, and must not requeue it)."""
        with self._lock:
            self._update_locked(pod, relevant=relevant)

    def _update_locked(self, pod: api.Pod, *, relevant: bool) -> None:
        info = self._infos.get(pod.uid)
        if info is None:
            now = self._clock()
            self._gate_or_activate(PodInfo(pod, now, now, next(self._sequence)))
            return
        old, info.pod = info.pod, pod
        if info.where is Where.GATED:
            self._gate_or_activate(info, ClusterEvent.UNSCHEDULED_POD_UPDATE)
        elif info.where is Where.UNSCHEDULABLE and relevant:
            # each kind of change the update is, asked of the pod's rejecting plugins
            for event in pod_update_events(old, pod):
                if self._hints.worth_requeuing(pod, info.rejectors, event, old, pod):
                    self._activate_or_backoff(info, self._clock(), event)
                    break
        elif info.where is Where.ACTIVE and relevant:
            # re-sorted; the old heap entry goes stale
            self._place(info, Where.ACTIVE, ClusterEvent.UNSCHEDULED_POD_UPDATE)

    def delete(self, uid: str) -> None:
        """The pod is gone or was bound (by us or anyone): forget it wherever it is."""
        with self._lock:
            info = self._infos.get(uid)
            if info is not None:
                self._remove(info)

    def on_event(self, event: ClusterEvent, old: object = None, new: object = None) -> int:
        """A cluster event (``old``/``new``: its objects, an :class:`api.Pod` or
        :class:`api.Node`): move the unschedulable pods whose rejecting plugins' hints
        say it may help them (``movePodsToActiveOrBackoffQueue``). Returns how many."""
        hints = self._hints
        if not hints.interested(event):
            return 0
        with self._lock:
            if not self._unschedulable and not self._counts[Where.IN_FLIGHT]:
                return 0  # nothing to move, no cycle to tell (an informer's first list)
            now = self._clock()
            if self._counts[Where.IN_FLIGHT]:
                self._event_sequence += 1
                self._recent_events.append((self._event_sequence, event, old, new))
            plugins = hints.plugins_for(event)
            if plugins is None:
                candidates: Iterable[PodInfo] = self._unschedulable.values()
            else:
                found: dict[str, PodInfo] = {}
                for plugin in (*plugins, ANY_REJECTOR):
                    found.update(self._by_rejector.get(plugin, {}))
                candidates = found.values()
            moved = [
                info
                for info in candidates
                if hints.worth_requeuing(info.pod, info.rejectors, event, old, new)
            ]
            for info in moved:
                self._activate_or_backoff(info, now, event)
            return len(moved)

    def activate(self, uid: str) -> bool:
        """Move a waiting pod (unschedulable, gated or backing off) to activeQ now,
        PreEnqueue permitting (``Activate``: a failed asynchronous preemption). False
        if it is not waiting."""
        with self._lock:
            info = self._infos.get(uid)
            if info is None or info.where not in (
                Where.UNSCHEDULABLE,
                Where.GATED,
                Where.BACKOFF,
                Where.ERROR_BACKOFF,
            ):
                return False
            gate = self._pre_enqueue(info.pod)
            if not gate.is_success:
                info.gate = gate.message
                if info.where is not Where.GATED:
                    self._place(info, Where.GATED, ClusterEvent.FORCE_ACTIVATE)
                return False
            info.gate = ""
            self._place(info, Where.ACTIVE, ClusterEvent.FORCE_ACTIVATE)
            return True

    def recheck_gate(self, uid: str, event: str) -> bool:
        """Run PreEnqueue again for a gated pod (what held it may be over); it goes to
        backoffQ or activeQ if it passes. False if it was not gated or still is."""
        with self._lock:
            info = self._infos.get(uid)
            if info is None or info.where is not Where.GATED:
                return False
            self._gate_or_activate(info, event)
            return info.where is not Where.GATED

    def recheck_gated(self, event: str, only: Callable[[api.Pod], bool] | None = None) -> int:
        """Run PreEnqueue again for every gated pod (an object a PreEnqueue plugin waits
        for appeared: a ResourceClaim), or those ``only`` picks (the pods that may wait
        for it); returns how many left the gate."""
        with self._lock:
            gated = [
                info
                for info in self._infos.values()
                if info.where is Where.GATED and (only is None or only(info.pod))
            ]
            for info in gated:
                self._gate_or_activate(info, event)
            return sum(info.where is not Where.GATED for info in gated)

    # --- scheduling side ----------------------------------------------------------------
    def pop(self, timeout: float | None = None) -> PodInfo | None:
        """The next pod to schedule, waiting up to ``timeout`` seconds (None: until one
        comes or :meth:`close`). The pod is then in flight."""
        with self._lock:
            while not self._closed:
                info = self._take(self._active) or self._take_backoff(self._backoff)
                if info is not None:
                    info.attempts += 1
                    info.popped_at_event = self._event_sequence
                    self._place(info, Where.IN_FLIGHT)
                    return info
                if not self._lock.wait(timeout) and timeout is not None:
                    return None
            return None

    def _take(self, heap: list[_ActiveItem]) -> PodInfo | None:
        while heap:
            item = heapq.heappop(heap)
            if item.token == item.info.token and item.info.where is Where.ACTIVE:
                return item.info
        return None

    def _take_backoff(self, heap: list[tuple[float, int, int, PodInfo]]) -> PodInfo | None:
        while heap:
            _, _, token, info = heapq.heappop(heap)
            if token == info.token and info.where is Where.BACKOFF:
                return info
        return None

    def _in_flight(self, info: PodInfo) -> bool:
        """Still in flight (False if the pod was deleted or seen bound meanwhile)."""
        return self._infos.get(info.uid) is info and info.where is Where.IN_FLIGHT

    def _prune_events(self) -> None:
        if not self._counts[Where.IN_FLIGHT]:
            self._recent_events.clear()

    def assumed(self, info: PodInfo) -> None:
        """The cycle picked a node: the pod is bound-in-progress, no longer queued."""
        with self._lock:
            if self._in_flight(info):
                self._place(info, Where.ASSUMED)
            self._prune_events()

    def unschedulable(self, info: PodInfo, rejectors: Iterable[str]) -> Where | None:
        """The cycle found no node (kube-scheduler's ``AddUnschedulableIfNotPresent``).
        Returns where the pod went (None: it was deleted meanwhile)."""
        with self._lock:
            if not self._in_flight(info):
                self._prune_events()
                return None
            now = self._clock()
            info.timestamp = now
            previous, info.rejectors = info.rejectors, frozenset(rejectors)
            if info.rejectors and info.rejectors == previous and self._on_wasted is not None:
                self._on_wasted(info.moved_by)
            hints = self._hints
            if not info.rejectors:
                self._place(info, Where.ERROR_BACKOFF)
            elif any(
                seq > info.popped_at_event
                and hints.worth_requeuing(info.pod, info.rejectors, event, old, new)
                for seq, event, old, new in self._recent_events
            ):
                # an event during its cycle may have helped (determineSchedulingHintForInFlightPod)
                self._activate_or_backoff(info, now, SCHEDULE_ATTEMPT_FAILURE)
            else:
                self._place(info, Where.UNSCHEDULABLE)
            self._prune_events()
            return info.where

    def failed(self, info: PodInfo) -> bool:
        """The cycle errored or the binding failed: back off, then retry. False if the
        pod is gone (deleted, or seen bound) and was not requeued."""
        with self._lock:
            current = self._infos.get(info.uid)
            if current is not info or info.where not in (Where.IN_FLIGHT, Where.ASSUMED):
                self._prune_events()
                return False
            info.timestamp = self._clock()
            info.rejectors = frozenset()
            self._place(info, Where.ERROR_BACKOFF, SCHEDULE_ATTEMPT_FAILURE)
            self._prune_events()
            return True

    def bound(self, info: PodInfo) -> None:
        """The binding succeeded: the pod leaves the queue for good."""
        with self._lock:
            if self._infos.get(info.uid) is info:
                self._remove(info)

    # --- background ---------------------------------------------------------------------
    def flush(self) -> None:
        """Move expired backoffs to activeQ, and pods unschedulable for longer than
        ``max_in_unschedulable`` out (to backoffQ or activeQ)."""
        with self._lock:
            now = self._clock()
            for heap, where in (
                (self._backoff, Where.BACKOFF),
                (self._error_backoff, Where.ERROR_BACKOFF),
            ):
                while heap:
                    expiry, _, token, info = heap[0]
                    if token != info.token or info.where is not where:
                        heapq.heappop(heap)
                        continue
                    if expiry > now:
                        break
                    heapq.heappop(heap)
                    self._place(info, Where.ACTIVE, BACKOFF_COMPLETE)
            stale = [
                info
                for info in self._unschedulable.values()
                if now - info.timestamp >= self.max_in_unschedulable
            ]
            for info in stale:
                self._activate_or_backoff(info, now, ClusterEvent.UNSCHEDULABLE_TIMEOUT)

    def close(self) -> None:
        """Wake every waiting :meth:`pop`, which returns None from now on."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    # --- reading ------------------------------------------------------------------------
    def pending(self) -> dict[str, int]:
        """``scheduler_pending_pods`` by queue (both backoff heaps count as backoff)."""
        with self._lock:
            c = self._counts
            return {
                "active": c[Where.ACTIVE],
                "backoff": c[Where.BACKOFF] + c[Where.ERROR_BACKOFF],
                "unschedulable": c[Where.UNSCHEDULABLE],
                "gated": c[Where.GATED],
            }

    def where(self, uid: str) -> Where | None:
        with self._lock:
            info = self._infos.get(uid)
            return None if info is None else info.where

    def info(self, uid: str) -> PodInfo | None:
        with self._lock:
            return self._infos.get(uid)

    def __len__(self) -> int:
        with self._lock:
            return len(self._infos)


class _ActiveItem:
    """An activeQ heap entry, ordered by the profile's QueueSort."""

    __slots__ = ("info", "less", "token")

    def __init__(
        self, info: PodInfo, token: int, less: Callable[[QueuedPod, QueuedPod], bool]
    ) -> None:
        self.info = info
        self.token = token
        self.less = less

    def __lt__(self, other: _ActiveItem) -> bool:
        a, b = self.info, other.info
        return self.less(
            QueuedPod(a.pod, a.timestamp, a.sequence), QueuedPod(b.pod, b.timestamp, b.sequence)
        )
