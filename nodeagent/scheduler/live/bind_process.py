"""Bindings and ``Scheduled`` events from a process of their own: the scheduler's side.

Why a process: CPython runs one thread at a time, and at a thousand pods a second the
two writes per pod (the binding, the event: HTTP, JSON, system calls) are as much
interpreter time as the scheduling cycles. A child process has an interpreter of its
own (:mod:`~nodeagent.scheduler.live.bind_child`, which writes them pipelined from one
thread); the scheduling loop pays a message over a socket pair per binding.

What stays here: the binding cycle (PreBind, Bind, PostBind, Unreserve) and the leader
check right before a binding is handed over. A binding whose cycle is DefaultBinder's
alone is handed over by the scheduling thread itself (:meth:`ProcessBinder.bind_async`,
:func:`~nodeagent.scheduler.live.binder.direct_binder`) and its cycle ends on the
thread that reads the answers, so no thread waits per binding; any other waits in
:meth:`ProcessBinder.bind`. A replica that lost its lease kills the child
(:meth:`ProcessBinder.abandon`) and hands over nothing new.

The child connects with the scheduler's own connection settings (a
:class:`~nodeagent.kube.http.ConnectionSpec`: the kubeconfig, the same retry policy and
rate limit), reports each request and retry back for the scheduler's metrics, and exits
when its socket closes (the scheduler is gone) or when asked. A child that dies fails
the bindings in flight (they back off and are retried; a binding that did reach the API
server is then answered 409 and not retried) and is started again for the next binding.

DynamicResources' PreBind writes its claims the same way (:meth:`ProcessBinder.write`):
the binding thread waits for the stored object, or for the error the scheduler's own
client would have raised, so PreBind's retry on a Conflict is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol

from nodeagent.base import errors
from nodeagent.kube import client, retry
from nodeagent.kube import errors as kube_errors
from nodeagent.kube.address import Address
from nodeagent.scheduler import api
from nodeagent.scheduler.api import BindResult, FinalBindError
from nodeagent.scheduler.live import bind_child
from nodeagent.scheduler.live.bind_child import Reporting

__all__ = ["ANSWER_TIMEOUT", "RESTART_BACKOFF", "ProcessBinder", "Reporting", "Target"]

log = logging.getLogger(__name__)

RESTART_BACKOFF = (1.0, 30.0)
"""Seconds between starts of a child while children keep dying before answering
anything (a kubeconfig the child cannot read, say): initial, doubling to the cap."""

ANSWER_TIMEOUT = 120.0
"""Seconds a binding waits for the child's answer (the client's own timeouts and
retries end well before)."""

HANDOFF_BATCH_AGE = 0.002
"""Seconds a binding handed over may wait for others to go in the same write
(:meth:`ProcessBinder.flush`): only while the scheduling loop keeps scheduling; at
0.3 ms a cycle, about six bindings a write instead of one."""

CREDENTIALS_CHECK = 10.0
"""Seconds between readings of the credentials (the client library re-reads a rotated
in-cluster token, or runs an exec plugin again); the child is sent what changed."""

Done = Callable[[BindResult, str], None]


class Target(Protocol):
    """How the child reaches the API server (:class:`~nodeagent.kube.http.ConnectionSpec`
    is one)."""

    @property
    def qps(self) -> float: ...
    @property
    def burst(self) -> int: ...
    @property
    def retry_policy(self) -> retry.RetryPolicy: ...
    @property
    def timeout(self) -> tuple[float, float]: ...
    def resolve(self) -> tuple[Address, Callable[[], dict[str, str]]]:
        """The server as plain values, and what reads the credentials' headers now.
        Raises ConfigError when it cannot be reached so."""
        ...


def _child_environment() -> dict[str, str]:
    """The child's environment: ours, with our module path (an uninstalled checkout
    run from its directory, a test run's tree) where it looks for ``nodeagent``."""
    paths = [entry or os.getcwd() for entry in sys.path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class _Child:
    """One child process, its socket, and the bindings it has not answered yet."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        sock: socket.socket,
        credentials: Callable[[], dict[str, str]],
        sent: dict[str, str],
    ) -> None:
        self.process = process
        self.sock = sock
        self.credentials = credentials
        self.sent_credentials = sent
        self.outbox: list[tuple[int, bytes]] = []
        """Bindings handed over and not written yet: (id, frame)."""
        self.outbox_since = 0.0
        self.waiting: dict[int, tuple[Done, float]] = {}
        """Per binding handed over: who is told the answer, and when it was handed."""
        self.alive = True
        self.answered = False
        self.exited = threading.Event()
        """Set once the process has been waited for, by its reader thread alone (two
        threads waiting for one process race: one of them sees it running still)."""


class _Restarting(Exception):
    """No child now: ``why``, or another starts in ``wait`` seconds."""

    def __init__(self, wait: float, why: str = "") -> None:
        super().__init__(why or f"binding process restarting in {wait:.1f} s")


class _Answer:
    """One blocking :meth:`ProcessBinder.bind`'s answer: a lock taken at once and
    released by the answer."""

    __slots__ = ("done", "result", "why")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.result = BindResult.FAILED
        self.why = ""

    def give(self, result: BindResult, why: str) -> None:
        self.result, self.why = result, why
        self.done.release()


class _Written:
    """One blocking :meth:`ProcessBinder.write`'s answer. It stands where a binding's
    ``done`` does (so a child's death or a timeout fails it the same way) and takes the
    write's own answer through :meth:`written`."""

    __slots__ = ("body", "done", "status")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.status = 0
        self.body = b""

    def __call__(self, result: BindResult, why: str) -> None:
        self.written(0, why.encode())

    def written(self, status: int, body: bytes) -> None:
        self.status, self.body = status, body
        self.done.release()


class ProcessBinder:
    """The framework's :class:`~nodeagent.scheduler.framework.Binder` (and
    :class:`~nodeagent.scheduler.live.binder.AsyncBinder`), binding through a child
    process. Thread-safe."""

    def __init__(
        self,
        target: Target,
        may_bind: Callable[[], bool],
        *,
        observer: client.ApiCallObserver | None = None,
        answer_timeout: float = ANSWER_TIMEOUT,
        on_start: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        reporting: Reporting | None = None,
        on_events_dropped: Callable[[int], None] = lambda count: None,
    ) -> None:
        """``target``: how the child reaches the API server (it must pickle).
        ``on_start``: called each time a child is started (a metric). ``reporting``:
        the child records each bound pod's ``Scheduled`` event as this source, and
        ``on_events_dropped`` counts those it had no room for."""
        self._target = target
        self._on_events_dropped = on_events_dropped
        self.reporting = reporting
        self.may_bind = may_bind
        self._on_start = on_start
        self._observer = observer or client.NullObserver()
        self._answer_timeout = answer_timeout
        self._lock = threading.Lock()
        self._next_id = 0
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
        imports, a few tenths of a second) rather than on the first binding."""
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
        target = self._target
        try:
            address, credentials = target.resolve()
        except errors.ConfigError as exc:
            raise _Restarting(0.0, f"binding process not started: {exc}") from exc
        settings = bind_child.Settings(
            address=address,
            credentials=credentials(),
            qps=target.qps,
            burst=target.burst,
            retry_policy=target.retry_policy,
            timeout=target.timeout,
        )
        ours, theirs = socket.socketpair()
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-m", bind_child.__name__, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=_child_environment(),
            )
        ours.sendall(bind_child.frame(bind_child.Start(settings, self.reporting)))
        child = _Child(process, ours, credentials, settings.credentials)
        self._child = child
        self.starts += 1
        self._on_start()
        threading.Thread(
            target=self._read, args=(child,), name="binder-answers", daemon=True
        ).start()
        log.info("binding process %s started", process.pid)
        return child

    def bind_async(self, pod: api.Pod, node_name: str, done: Done) -> None:
        """Hand the binding over; ``done(result, why)`` is called with the child's
        answer on the thread that reads the answers, or at once (on this thread) when
        it cannot be handed over.

        It is written by the next :meth:`flush`: the scheduling loop flushes after
        each cycle what has waited :data:`HANDOFF_BATCH_AGE`, and everything before it
        waits for the next pod (so a lone binding never waits), which puts the
        bindings of consecutive cycles in one write."""
        if not self.may_bind():
            done(BindResult.FAILED, "not the leader: binding withheld")
            return
        refused: list[tuple[Done, str]] = []
        with self._lock:
            if self._closed:
                refused = [(done, "the scheduler is stopping: binding withheld")]
            else:
                try:
                    child = self._running()
                except _Restarting as exc:
                    refused = [(done, str(exc))]
                else:
                    key = self._next_id
                    self._next_id += 1
                    now = self._clock()
                    child.waiting[key] = (done, now)
                    if not child.outbox:
                        child.outbox_since = now
                    child.outbox.append(
                        (key, bind_child.frame((key, pod.namespace, pod.name, pod.uid, node_name)))
                    )
        self._refuse(refused)

    def flush(self, *, due_only: bool = False) -> None:
        """Send the bindings handed over and not sent yet; ``due_only``: only if the
        first has waited :data:`HANDOFF_BATCH_AGE`."""
        with self._lock:
            child = self._child
            if child is None or not child.outbox:
                return
            if due_only and self._clock() - child.outbox_since < HANDOFF_BATCH_AGE:
                return
            failed = self._send_outbox(child)
        self._refuse(failed)

    def _send_outbox(self, child: _Child) -> list[tuple[Done, str]]:
        """Write what waits in ``child``'s outbox (lock held); what could not be
        written, to be refused outside the lock."""
        outbox, child.outbox = child.outbox, []
        try:
            child.sock.sendall(b"".join(frame for _, frame in outbox))
        except OSError as exc:  # the child died under us
            why = f"binding process unreachable: {exc}"
            lost = [child.waiting.pop(key, None) for key, _ in outbox]
            return [(entry[0], why) for entry in lost if entry is not None]
        return []

    @staticmethod
    def _refuse(refused: list[tuple[Done, str]]) -> None:
        for done, why in refused:
            done(BindResult.FAILED, why)

    def bind(self, pod: api.Pod, node_name: str) -> api.Status:
        """The blocking form (for a binding cycle with more than DefaultBinder in it)."""
        answer = _Answer()
        self.bind_async(pod, node_name, answer.give)
        self.flush()
        if not answer.done.acquire(timeout=self._answer_timeout + 1.0):
            return api.error(f"binding process did not answer within {self._answer_timeout:g} s")
        if answer.result is BindResult.FINAL:
            raise FinalBindError(answer.why)
        if answer.result is BindResult.FAILED:
            return api.error(answer.why)
        return api.SUCCESS

    def write(
        self, method: str, path: str, body: bytes, *, verb: str, resource: str, what: str
    ) -> bytes:
        """Send a write (``method`` POST or PUT, ``body`` JSON) through the child and
        wait for it: the stored object's JSON, or the error the scheduler's own client
        would raise (:func:`nodeagent.kube.errors.from_status`; a fault after the
        retries, the child unreachable or the scheduler stopping: Unavailable).
        ``verb`` and ``resource`` name it in the request metrics, ``what`` in errors."""
        if method not in bind_child.WRITE_METHODS:
            raise ValueError(f"method {method!r} is not written by the binding process")
        answer = _Written()
        with self._lock:
            if self._closed:
                raise kube_errors.Unavailable(f"{what}: the scheduler is stopping")
            try:
                child = self._running()
            except _Restarting as exc:
                raise kube_errors.Unavailable(f"{what}: {exc}") from exc
            key = self._next_id
            self._next_id += 1
            child.waiting[key] = (answer, self._clock())
            try:
                child.sock.sendall(
                    bind_child.frame((key, method, path, body, verb, resource, what))
                )
            except OSError as exc:  # the child died under us
                child.waiting.pop(key, None)
                raise kube_errors.Unavailable(
                    f"{what}: binding process unreachable: {exc}"
                ) from exc
        if not answer.done.acquire(timeout=self._answer_timeout + 1.0):
            with self._lock:
                child.waiting.pop(key, None)
            raise kube_errors.Unavailable(
                f"{what}: binding process did not answer within {self._answer_timeout:g} s"
            )
        status = answer.status
        if 200 <= status <= 299:
            return answer.body
        if status == 0:
            raise kube_errors.Unavailable(answer.body.decode("utf-8", "replace"))
        raise kube_errors.from_status(status, answer.body, what=what)

    def _read(self, child: _Child) -> None:
        """Hand each answer to whoever waits for it; fail what waited too long; when the
        child is gone, fail what it left unanswered."""
        observer = self._observer
        frames = bind_child.Frames()
        sock = child.sock  # blocking: bind_async's sendall shares it
        checked = self._clock()
        while True:
            try:
                if self._clock() - checked >= CREDENTIALS_CHECK:
                    checked = self._clock()
                    self._send_credentials(child)
                if not select.select([sock], [], [], 1.0)[0]:
                    self._expire(child)
                    continue
                data = sock.recv(1 << 16)
            except (OSError, ValueError):  # ValueError: closed under us
                break
            if not data:
                break
            for answers, requests, retries, dropped, logs, written in frames.feed(data):
                for level, name, message in logs:
                    logging.getLogger(name).log(level, "binding process: %s", message)
                for request in requests:
                    observer.api_request(*request)
                for retried in retries:
                    observer.api_retry(*retried)
                if dropped:
                    self._on_events_dropped(dropped)
                with self._lock:
                    waiting = [child.waiting.pop(key, None) for key, _, _ in answers]
                child.answered = True
                for (_, result, why), entry in zip(answers, waiting, strict=True):
                    if entry is not None:
                        entry[0](BindResult(result), why)
                if written:
                    with self._lock:
                        writers = [child.waiting.pop(key, None) for key, _, _ in written]
                    for (_, status, body), entry in zip(written, writers, strict=True):
                        if entry is not None and isinstance(entry[0], _Written):
                            entry[0].written(status, body)
        with self._lock:
            child.alive = False  # the next binding starts another
            left, child.waiting = child.waiting, {}
            closing = self._closed
        for done, _ in left.values():
            done(BindResult.FAILED, "binding process exited before answering")
        child.process.wait()  # it closed its socket: it is exiting (or being killed)
        child.sock.close()
        if not closing or left:
            log.warning(
                "binding process exited (code %s) with %d binding(s) unanswered",
                child.process.returncode,
                len(left),
            )
        child.exited.set()

    def _send_credentials(self, child: _Child) -> None:
        try:
            now = child.credentials()
        except Exception as exc:  # an exec plugin failing: the child keeps what it has
            log.warning("reading the API credentials failed: %s", exc)
            return
        if now != child.sent_credentials:
            with self._lock:
                child.sock.sendall(bind_child.frame(now))
            child.sent_credentials = now

    def _expire(self, child: _Child) -> None:
        deadline = self._clock() - self._answer_timeout
        with self._lock:
            late = [key for key, (_, handed) in child.waiting.items() if handed < deadline]
            expired = [child.waiting.pop(key) for key in late]
        for done, _ in expired:
            done(
                BindResult.FAILED,
                f"binding process did not answer within {self._answer_timeout:g} s",
            )

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
            refused = self._send_outbox(child) if child is not None and child.outbox else []
        self._refuse(refused)
        if child is None:
            return
        with self._lock, contextlib.suppress(OSError):
            child.sock.sendall(bind_child.frame(None))
        if not child.exited.wait(timeout):
            log.warning("binding process still running after %.0f s: killed", timeout)
            child.process.kill()
            child.exited.wait(timeout)
