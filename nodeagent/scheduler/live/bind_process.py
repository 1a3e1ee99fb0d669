"""Binding POSTs from a process of their own.

Why a process: CPython runs one thread at a time. A binding's HTTP exchange (urllib3,
http.client's header parsing, JSON) costs about half a millisecond of interpreter time,
and at several hundred pods a second the binding threads held the interpreter more than
half of the time. Worse, the scheduling thread (a cycle is about 0.3 ms of work on 5000
nodes) spent five times its own work waiting for the interpreter, so the scheduling
loop, which must stay serial, set the pace (docs/scheduler.md, "Throughput"). A child
process has an interpreter of its own: it does the POSTs; the scheduler's binding
threads hand each request over a pipe and wait for the answer, which costs them a few
tens of microseconds.

What stays in the scheduler: the whole binding cycle (PreBind, Bind, PostBind,
Unreserve) and the leader check right before a request is handed over. The child runs
as many requests at once as the scheduler has binding threads (:data:`THREADS`, or
fewer), so nothing waits in the child that the scheduler has not just allowed; and a
replica that lost its lease kills the child (:meth:`ProcessBinder.abandon`) and hands
over nothing new.

With :class:`Reporting` the child also records each bound pod's ``Scheduled`` event,
right after the binding and off its binding threads: a bounded queue (dropped when
full, as client-go's broadcaster drops) drained by :data:`EVENT_WRITERS` threads over a
client of their own (a budget of their own, as kube-scheduler's event clientset). One
event writer in the scheduler kept up with about 350 pods a second; here the events'
requests cost the scheduler's interpreter nothing.

The child connects with the scheduler's own client layer (:class:`~nodeagent.kube.http.
ConnectionSpec`, the same retry policy and rate limit), reports each request and retry
back for the scheduler's metrics, and exits when its pipe closes (the scheduler is gone)
or when asked. A child that dies fails the bindings in flight (they back off and are
retried; a binding that did reach the API server is then answered 409 and not retried)
and is started again for the next binding.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from nodeagent import errors, heap
from nodeagent.actuators.events import NORMAL, InvolvedObject, UniqueEvents
from nodeagent.kube import client
from nodeagent.scheduler import api
from nodeagent.scheduler.api import FinalBindError
from nodeagent.scheduler.live import reporter

log = logging.getLogger(__name__)

Connect = Callable[[client.ApiCallObserver], client.ClusterClient]
"""Builds the child's client; must pickle (e.g. ``ConnectionSpec.connect``)."""

THREADS = 8
"""Requests the child has in flight at once. More is slower here, not faster: with 16,
its threads and the API server's contend for the interpreter and the CPU (5000 nodes,
10 000 pods on 2 cores: 651 pods/s with 16, 782-875 with 8, 811 with 4). At an API
latency of 10 ms, 8 is 800 bindings a second, sixteen times the default qps of 50."""

RESTART_BACKOFF = (1.0, 30.0)
"""Seconds between starts of a child while children keep dying before answering
anything (a kubeconfig the child cannot read, say): initial, doubling to the cap."""

ANSWER_TIMEOUT = 120.0
"""Seconds a binding thread waits for the child's answer (the client's own timeouts
and retries end well before)."""


EVENT_WRITERS = THREADS
"""Threads writing the child's ``Scheduled`` events, one request at a time each: as
many as bindings in flight, so that the events keep pace with the bindings (with 4, a
loaded machine filled the queue and dropped 4 % of them)."""


@dataclass(frozen=True, slots=True)
class Reporting:
    """Who the child's ``Scheduled`` events name as their source: the profile's
    scheduler name and the replica's identity (the scheduler's own recorder's)."""

    component: str
    instance: str


class Outcome(StrEnum):
    BOUND = "bound"
    FINAL = "final"
    """409 or 404: never retried."""
    FAILED = "failed"


_Request = tuple[int, str, str, str, str]
"""(id, namespace, name, uid, node): plain tuples pickle several times faster than
dataclasses, and a few go over the pipe per pod."""

Observed = tuple[tuple[str, str, str], ...]
_Answer = tuple[int, Outcome, str, Observed, Observed, int]
"""(id, outcome, message, requests, retries, events dropped): the requests and retries
are the (verb, resource, code or reason) of each HTTP exchange, and the events the count
of ``Scheduled`` events dropped since the last answer, for the scheduler's metrics."""


# --- the child ------------------------------------------------------------------------


class _Recorder(threading.local, client.RecordingObserver):
    """The child's observer: what each thread's request did, sent with its answer."""

    def take(self) -> tuple[Observed, Observed]:
        taken = tuple(self.requests), tuple(self.retries)
        self.requests.clear()
        self.retries.clear()
        return taken


class _SharedRecorder(client.RecordingObserver):
    """The event writers' observer: what they did, sent with the next answer."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def api_request(self, verb: str, resource: str, code: str) -> None:
        with self._lock:
            self.requests.append((verb, resource, code))

    def api_retry(self, verb: str, resource: str, reason: str) -> None:
        with self._lock:
            self.retries.append((verb, resource, reason))

    def take(self) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
        with self._lock:
            taken = self.requests, self.retries
            self.requests, self.retries = [], []
        return taken


class _ScheduledEvents:
    """The child's ``Scheduled`` events: serialised by the binding thread that bound the
    pod (:class:`~nodeagent.actuators.events.UniqueEvents`: a pod's event never
    aggregates with another's), queued, and written by :data:`EVENT_WRITERS` threads,
    each taking whatever is queued when it is free, so a writer is woken only when it
    had nothing to do. At most ``reporter.EVENT_QUEUE`` wait; the rest are dropped
    (counted, for :meth:`take_dropped`): a slow events API never delays a binding."""

    def __init__(self, connect: Connect, reporting: Reporting) -> None:
        self.observer = _SharedRecorder()
        self._kube = connect(self.observer)
        self._bodies = UniqueEvents(
            reason=reporter.REASON_SCHEDULED,
            event_type=NORMAL,
            component=reporting.component,
            host=reporting.instance,
        )
        self._queue: queue.SimpleQueue[tuple[str, str, bytes] | None] = queue.SimpleQueue()
        self._waiting = 0
        self._lock = threading.Lock()
        self._dropped = 0
        self._threads = [
            threading.Thread(target=self._write, name=f"events_{i}", daemon=True)
            for i in range(EVENT_WRITERS)
        ]
        for thread in self._threads:
            thread.start()

    def scheduled(self, request: _Request) -> None:
        with self._lock:
            if self._waiting >= reporter.EVENT_QUEUE:
                self._dropped += 1
                return
            self._waiting += 1
        _, namespace, name, uid, node = request
        body = self._bodies.body(
            InvolvedObject("Pod", name, namespace, uid),
            reporter.scheduled_message(namespace, name, node),
        )
        self._queue.put((namespace, name, body))

    def take_dropped(self) -> int:
        """Events dropped since the last call."""
        with self._lock:
            dropped, self._dropped = self._dropped, 0
        return dropped

    def _write(self) -> None:
        while (event := self._queue.get()) is not None:
            with self._lock:
                self._waiting -= 1
            namespace, name, body = event
            try:
                self._kube.post_event(namespace, body)
            except errors.KubeAPIError as exc:  # best effort, as the recorder's
                log.warning("could not record event Scheduled on %s/%s: %s", namespace, name, exc)
            except Exception:  # the writer lives on
                log.exception("recording the Scheduled event of %s/%s failed", namespace, name)

    def close(self, *, drop: bool) -> None:
        """Write what is queued (or drop it), then stop the writers."""
        if drop:
            with self._lock:
                self._waiting = 0
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        close = getattr(self._kube, "close", None)
        if close is not None:
            close()


def _bind(kube: client.ClusterClient, request: _Request) -> tuple[Outcome, str]:
    _, namespace, name, uid, node = request
    try:
        kube.bind_pod(namespace, name, uid=uid, node_name=node)
    except (errors.Conflict, errors.NotFound) as exc:
        return Outcome.FINAL, str(exc)
    except errors.KubeAPIError as exc:
        return Outcome.FAILED, f"binding rejected: {exc}"
    except Exception as exc:  # the child answers whatever happens
        return Outcome.FAILED, f"binding raised {exc!r}"
    return Outcome.BOUND, ""


def serve(
    pipe: multiprocessing.connection.Connection,
    connect: Connect,
    threads: int,
    reporting: Reporting | None = None,
) -> None:
    """The child's main: bind what arrives on ``pipe`` with ``threads`` threads, answer
    on it, and with ``reporting`` record each bound pod's ``Scheduled`` event. ``None``
    on the pipe: finish what was sent, then return. The pipe closing (the scheduler is
    gone): drop what has not started, then return."""
    # Signals are the scheduler's to handle: Ctrl-C reaches the whole process group,
    # and the child must not die under bindings the scheduler is draining.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    recorder = _Recorder()
    kube = connect(recorder)
    sending = threading.Lock()
    events = _ScheduledEvents(connect, reporting) if reporting is not None else None
    heap.freeze()  # the imports and clients live as long as the child

    def one(request: _Request) -> None:
        outcome, message = _bind(kube, request)
        requests, retries = recorder.take()
        dropped = 0
        if events is not None:
            if outcome is Outcome.BOUND:
                events.scheduled(request)
            more_requests, more_retries = events.observer.take()
            requests += tuple(more_requests)
            retries += tuple(more_retries)
            dropped = events.take_dropped()
        with sending, contextlib.suppress(OSError, ValueError):  # orphaned: nobody to tell
            pipe.send((request[0], outcome, message, requests, retries, dropped))

    # plain threads on a queue: an executor's Future and bookkeeping per request cost
    # more than the pipe itself
    work: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()

    def worker() -> None:
        while (request := work.get()) is not None:
            one(request)

    workers = [
        threading.Thread(target=worker, name=f"bind_{i}", daemon=True) for i in range(threads)
    ]
    for thread in workers:
        thread.start()
    orphaned = False
    while True:
        try:
            request = pipe.recv()
        except (EOFError, OSError):
            orphaned = True
            break
        if request is None:
            break
        work.put(request)
    if orphaned:  # drop what has not started
        with contextlib.suppress(queue.Empty):
            while True:
                work.get_nowait()
    for _ in workers:
        work.put(None)
    for thread in workers:
        thread.join()
    if events is not None:
        events.close(drop=orphaned)
    close = getattr(kube, "close", None)
    if close is not None:
        close()


# --- the scheduler's side -------------------------------------------------------------


class _Waiting:
    """One binding thread waiting for its answer: a lock taken at once and released by
    the answer (cheaper than an Event, made once per pod)."""

    __slots__ = ("answer", "done")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.answer: _Answer | None = None

    def give(self, answer: _Answer) -> None:
        self.answer = answer
        self.done.release()


class _Child:
    """One child process, its pipe, and the requests it has not answered yet."""

    def __init__(
        self,
        process: multiprocessing.process.BaseProcess,
        pipe: multiprocessing.connection.Connection,
    ) -> None:
        self.process = process
        self.pipe = pipe
        self.waiting: dict[int, _Waiting] = {}
        self.alive = True
        self.answered = False
        self.exited = threading.Event()
        """Set once the process has been waited for, by its reader thread alone (two
        threads waiting for one process race: one of them sees it running still)."""


class _Restarting(Exception):
    def __init__(self, wait: float) -> None:
        super().__init__(f"binding process restarting in {wait:.1f} s")


class ProcessBinder:
    """The framework's :class:`~nodeagent.scheduler.framework.Binder`, binding through a
    child process. Thread-safe; :meth:`bind` blocks its (binding) thread until the child
    answers."""

    def __init__(
        self,
        connect: Connect,
        may_bind: Callable[[], bool],
        *,
        threads: int = THREADS,
        observer: client.ApiCallObserver | None = None,
        answer_timeout: float = ANSWER_TIMEOUT,
        on_start: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        reporting: Reporting | None = None,
        on_events_dropped: Callable[[int], None] = lambda count: None,
    ) -> None:
        """``on_start``: called each time a child is started (a metric). ``reporting``:
        the child records each bound pod's ``Scheduled`` event as this source, and
        ``on_events_dropped`` counts those it had no room for."""
        self._on_events_dropped = on_events_dropped
        self._connect = connect
        self.reporting = reporting
        self.may_bind = may_bind
        self._threads = max(1, threads)
        self._on_start = on_start
        self._observer = observer or client.NullObserver()
        self._answer_timeout = answer_timeout
        self._context = multiprocessing.get_context("spawn")  # never fork a threaded process
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._child: _Child | None = None
        self._closed = False
        self._clock = clock
        self._next_start = 0.0
        self._restart_delay = RESTART_BACKOFF[0]
        self.starts = 0
        """Children started so far (1 unless one died)."""

    @property
    def pid(self) -> int | None:
        """The running child's process id, if one runs."""
        child = self._child
        return child.process.pid if child is not None and child.alive else None

    def start(self) -> None:
        """Start the child now (it takes the interpreter's start-up and the client's
        imports, about a second) rather than on the first binding."""
        with self._lock:
            self._running()

    def _running(self) -> _Child:
        """The live child, started if need be (lock held)."""
        if self._closed:
            raise RuntimeError("the binding process was shut down")
        child = self._child
        if child is not None and child.alive:
            return child
        now = self._clock()
        if child is not None:  # it died: restart now, or later if none answered lately
            if child.answered:
                self._restart_delay = RESTART_BACKOFF[0]
            elif now < self._next_start:
                raise _Restarting(self._next_start - now)
            else:
                self._restart_delay = min(RESTART_BACKOFF[1], 2 * self._restart_delay)
        self._next_start = now + self._restart_delay
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=serve,
            args=(theirs, self._connect, self._threads, self.reporting),
            name="nodeagent-binder",
            daemon=True,
        )
        process.start()
        theirs.close()
        child = _Child(process, ours)
        self._child = child
        self.starts += 1
        self._on_start()
        threading.Thread(
            target=self._read, args=(child,), name="binder-answers", daemon=True
        ).start()
        log.info("binding process %s started", process.pid)
        return child

    def bind(self, pod: api.Pod, node_name: str) -> api.Status:
        if not self.may_bind():
            return api.error("not the leader: binding withheld")
        waiting = _Waiting()
        with self._lock:
            if self._closed:
                return api.error("the scheduler is stopping: binding withheld")
            try:
                child = self._running()
            except _Restarting as exc:
                return api.error(str(exc))
            key = next(self._ids)
            child.waiting[key] = waiting
            try:
                child.pipe.send((key, pod.namespace, pod.name, pod.uid, node_name))
            except (OSError, ValueError) as exc:  # the child died under us
                del child.waiting[key]
                return api.error(f"binding process unreachable: {exc}")
        if not waiting.done.acquire(timeout=self._answer_timeout):
            with self._lock:
                child.waiting.pop(key, None)
            return api.error(f"binding process did not answer within {self._answer_timeout:g} s")
        assert waiting.answer is not None
        _, outcome, message, _, _, _ = waiting.answer
        if outcome is Outcome.FINAL:
            raise FinalBindError(message)
        if outcome is Outcome.FAILED:
            return api.error(message)
        return api.SUCCESS

    def _read(self, child: _Child) -> None:
        """Hand each answer to its waiting thread; when the child is gone, fail what it
        left unanswered."""
        observer = self._observer
        try:
            while True:
                answer: _Answer = child.pipe.recv()
                key, _, _, requests, retries, dropped = answer
                for request in requests:
                    observer.api_request(*request)
                for retry in retries:
                    observer.api_retry(*retry)
                if dropped:
                    self._on_events_dropped(dropped)
                with self._lock:
                    waiting = child.waiting.pop(key, None)
                child.answered = True
                if waiting is not None:
                    waiting.give(answer)
        except (EOFError, OSError):
            pass
        with self._lock:
            child.alive = False  # the next binding starts another
            left, child.waiting = child.waiting, {}
            closing = self._closed
        for waiting in left.values():
            waiting.give((-1, Outcome.FAILED, "binding process exited before answering", (), (), 0))
        child.process.join()  # it closed its pipe: it is exiting (or being killed)
        child.pipe.close()
        if not closing or left:
            log.warning(
                "binding process exited (code %s) with %d binding(s) unanswered",
                child.process.exitcode,
                len(left),
            )
        child.exited.set()

    def abandon(self) -> None:
        """Kill the child now (the lease is lost): what it queued is never sent, and no
        child is started again. Bindings in flight fail."""
        with self._lock:
            self._closed = True
            child = self._child
        if child is not None and not child.exited.is_set():
            child.process.kill()
            log.warning("binding process killed: this replica lost its lease")

    def close(self, timeout: float = 5.0) -> None:
        """Ask the child to finish what it was given and exit; kill it after
        ``timeout`` seconds."""
        with self._lock:
            self._closed = True
            child = self._child
        if child is None:
            return
        with contextlib.suppress(OSError, ValueError):
            child.pipe.send(None)
        if not child.exited.wait(timeout):
            log.warning("binding process still running after %.0f s: killed", timeout)
            child.process.kill()
            child.exited.wait(timeout)
