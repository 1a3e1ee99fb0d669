"""The binding process's side: bindings and ``Scheduled`` events, pipelined, on one thread.

The scheduler (:mod:`~nodeagent.scheduler.live.bind_process`) hands each binding over a
socket pair; this process POSTs it (:class:`~nodeagent.kube.pipeline.Poster`: a few
kept-alive connections, the requests that arrive together written back to back),
answers with the outcome, and records the bound pod's ``Scheduled`` event. One thread
runs it all on an asyncio loop: there is no interpreter lock to hand between threads,
and a burst of bindings costs a handful of system calls, not several per binding.

Events have connections and a budget of their own (kube-scheduler's event clientset
has its own), so a slow events API never holds a binding back: at most
``reporter.EVENT_QUEUE`` events wait, and the rest are dropped and counted, as
client-go's broadcaster drops.

The scheduler's other writes of a binding cycle, DynamicResources' PreBind's claim
updates (the finalizer, then the allocation and reservation: two PUTs per pod in
scheduler_perf's claim-template shapes), come here as well and go out on the bindings'
connections: over TLS from the scheduler's own interpreter they were a quarter of its
CPU in that shape. A write's answer carries the stored object back, unparsed; the
scheduler turns a failure into the same error its own client raises.

The wire: each message is a 4-byte length and a msgpack document. The scheduler sends
``[id, namespace, name, uid, node]`` per binding, ``[id, method, path, body, verb,
resource, what]`` per other write (``body`` the JSON bytes), a map of headers when the
credentials changed (a rotated token: the scheduler's client library reads them, this
process imports no ``kubernetes``), or nil for "finish what was sent, then exit". This
side answers ``[answers, requests, retries, dropped, logs, written]``: the outcome of
each binding as ``[id, outcome, message]`` (outcome a :class:`~nodeagent.scheduler.
api.BindResult` value), the (verb, resource, code) of each HTTP exchange and the (verb,
resource, reason) of each retry since the last message (for the scheduler's metrics),
the events dropped meanwhile, and its log records as ``[level, logger, message]`` (the
scheduler logs them with its own handlers, so the child's lines come out in the
scheduler's format and at its level), and the outcome of each other write as ``[id,
status, body]``: the last answer's status and body, or 0 and the fault's message when
none came. Answers go out once per turn of the loop, so what was
answered together is one message.

The socket closing (the scheduler is gone) drops what was not sent and ends the process
once what was sent is answered. This module imports only what the child needs: the
process starts fresh (spawn) and its start-up is paid again on every restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import signal
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Any

import msgspec

from nodeagent.base import errors, heap
from nodeagent.kube import client, pipeline, ratelimit, retry, writes
from nodeagent.kube.address import Address
from nodeagent.kube.events import NORMAL, InvolvedObject, UniqueEvents
from nodeagent.scheduler.api import BindResult
from nodeagent.scheduler.live import reporter

log = logging.getLogger("nodeagent.scheduler.live.bind_child")  # __main__ when it runs

BINDING_LIMITS = pipeline.Limits(connections=8, depth=8)
"""kube-apiserver works on one request of a connection at a time: more connections are
more bindings in its hands at once. Against the real apiserver (5000 nodes, 10,000
pods, benchmarks/bench_vs_kube_scheduler.py, basic shape, two runs each): 8 connections
of 8 bound 449-451 pods/s with 2.6 ms of apiserver and 0.58 of etcd CPU per pod, 2 of 32
bound 414-415 with 2.8 and 0.8. The fake server, a thread per connection under one
interpreter lock, prefers 2 (about 3 % less CPU per pod in the scheduler's benchmark)."""
EVENT_LIMITS = BINDING_LIMITS

_LENGTH = struct.Struct("!I")
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode

Request = tuple[int, str, str, str, str]
"""(id, namespace, name, uid, node)."""

Write = tuple[int, str, str, bytes, str, str, str]
"""(id, method, path, body, verb, resource, what): a write other than a binding."""

Written = tuple[int, int, bytes]
"""A write's outcome: (id, status, body), status 0 and the fault's message for no
answer."""

WRITE_METHODS = frozenset({"POST", "PUT"})
"""What a write may be (its body is sent as ``application/json``)."""


def frame(message: Any) -> bytes:
    """``message`` as the wire carries it."""
    payload = _encode(message)
    return _LENGTH.pack(len(payload)) + payload


class Frames:
    """Splits the bytes read from the socket into messages."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._unread: list[Any] = []

    def feed(self, data: bytes, *, first_as: type[Any] | None = None) -> list[Any]:
        """The messages ``data`` completes; ``first_as``: decode the first as that type."""
        messages, self._unread = self._unread, []
        buffer = self._buffer
        buffer += data
        start = 0
        size = len(buffer)
        while size - start >= 4:
            (length,) = _LENGTH.unpack_from(buffer, start)
            end = start + 4 + length
            if end > size:
                break
            payload = memoryview(buffer)[start + 4 : end]
            if first_as is not None and not messages:
                messages.append(msgspec.msgpack.decode(payload, type=first_as))
            else:
                messages.append(_decode(payload))
            del payload
            start = end
        if start:
            del buffer[:start]
        return messages

    def unread(self, messages: list[Any]) -> None:
        """Give ``messages`` back: the next :meth:`feed` returns them first."""
        self._unread = messages + self._unread


@dataclass(frozen=True, slots=True)
class Settings:
    """What the child is started with (it pickles)."""

    address: Address
    credentials: dict[str, str]
    """The credentials' headers at the start; the scheduler sends new ones when they
    change (:data:`CREDENTIALS_CHECK`)."""
    qps: float
    burst: int
    retry_policy: retry.RetryPolicy
    timeout: tuple[float, float]


@dataclass(frozen=True, slots=True)
class Reporting:
    """Who the child's ``Scheduled`` events name as their source: the profile's
    scheduler name and the replica's identity (the scheduler's own recorder's)."""

    component: str
    instance: str


@dataclass(frozen=True, slots=True)
class Start:
    """The first message on the wire: what the child is started with."""

    settings: Settings
    reporting: Reporting | None = None


def main(argv: list[str] | None = None) -> None:
    """The binding process: ``python -m nodeagent.scheduler.live.bind_child FD``, FD
    its end of the socket pair. A process of its own rather than multiprocessing's
    spawn, which imports the parent's main module again (the scheduler's command, or a
    benchmark, a second or more of start-up here)."""
    # Signals are the scheduler's to handle: Ctrl-C reaches the whole process group,
    # and the child must not die under bindings the scheduler is draining.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(args[0]))
    frames = Frames()
    start: Start | None = None
    while start is None:
        data = sock.recv(1 << 16)
        if not data:
            return  # the scheduler went away before saying anything
        first, *rest = frames.feed(data, first_as=Start) or [None]
        start = first
        frames.unread(rest)
    asyncio.run(_Child(sock, start.settings, start.reporting, frames).run())


def _limits(limits: pipeline.Limits, timeout: tuple[float, float]) -> pipeline.Limits:
    connect, read = timeout
    return dataclasses.replace(limits, connect_timeout=connect, read_timeout=read)


class _ToScheduler(logging.Handler):
    """The child's log records go to the scheduler, which logs them with its own
    handlers (one stream, one format, the scheduler's level)."""

    def __init__(self, child: _Child) -> None:
        super().__init__()
        self._child = child

    def emit(self, record: logging.LogRecord) -> None:
        self._child.forward(record)


class _Child:
    def __init__(
        self, sock: socket.socket, settings: Settings, reporting: Reporting | None, frames: Frames
    ) -> None:
        self._sock = sock
        self._settings = settings
        self._credentials = settings.credentials
        self._reporting = reporting
        self._frames = frames
        self._observed = client.RecordingObserver()
        self._answers: list[tuple[int, str, str]] = []
        self._written: list[Written] = []
        self._logs: list[tuple[int, str, str]] = []
        self._dropped = 0
        self._flush_due = False
        self._finishing = False
        self._orphaned = False
        self._done: asyncio.Future[None] | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        settings = self._settings
        credentials = self._current_credentials
        self._bindings = pipeline.Poster(
            settings.address,  # a CA file it cannot read ends the child here
            credentials,
            limits=_limits(BINDING_LIMITS, settings.timeout),
            retry_policy=settings.retry_policy,
            limiter=ratelimit.TokenBucket(settings.qps, settings.burst),
            observer=self._observed,
        )
        self._events: pipeline.Poster | None = None
        self._bodies: UniqueEvents | None = None
        if self._reporting is not None:
            self._events = pipeline.Poster(
                settings.address,
                credentials,
                limits=_limits(EVENT_LIMITS, settings.timeout),
                retry_policy=settings.retry_policy,
                limiter=ratelimit.TokenBucket(settings.qps, settings.burst),
                observer=self._observed,
            )
            self._bodies = UniqueEvents(
                reason=reporter.REASON_SCHEDULED,
                event_type=NORMAL,
                component=self._reporting.component,
                host=self._reporting.instance,
            )
        logging.basicConfig(level=logging.INFO, handlers=[_ToScheduler(self)], force=True)
        loop.add_reader(self._sock.fileno(), self._read)
        heap.freeze()  # the imports and the clients live as long as the child
        self._handle(self._frames.feed(b""))  # what came with the start
        try:
            await self._done
        finally:
            loop.remove_reader(self._sock.fileno())
            self._bindings.close()
            if self._events is not None:
                self._events.close()
            self._flush()

    def _current_credentials(self) -> dict[str, str]:
        return self._credentials

    # --- from the scheduler -------------------------------------------------------------
    def _read(self) -> None:
        try:
            data = self._sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:  # the scheduler is gone: drop what was not sent
            self._orphaned = True
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._bindings.drop_waiting()
            if self._events is not None:
                self._events.drop_waiting()
            self._check_done()
            return
        self._handle(self._frames.feed(data))

    def _handle(self, messages: list[Any]) -> None:
        for message in messages:
            if message is None:
                self._finishing = True
            elif isinstance(message, dict):
                self._credentials = message
            elif len(message) == 7:
                self._write(message)
            else:
                self._bind(message)
        self._check_done()

    def _bind(self, request: list[Any]) -> None:
        _, namespace, name, uid, node = request
        self._bindings.post(
            "create",
            "pods/binding",
            what=f"bind pod {namespace}/{name} to {node}",
            path=writes.binding_path(namespace, name),
            body=writes.binding_body(namespace, name, uid=uid, node_name=node),
            done=functools.partial(self._bound, request),
        )

    def _write(self, request: list[Any]) -> None:
        key, method, path, body, verb, resource, what = request
        if method not in WRITE_METHODS:
            message = f"{what}: method {method!r} not written here (allowed: POST, PUT)"
            self._wrote(key, errors.KubeAPIError(message), 0, b"")
            return
        self._bindings.send(
            method,
            verb,
            resource,
            what=what,
            path=path,
            body=body,
            answered=functools.partial(self._wrote, key),
        )

    # --- answers ------------------------------------------------------------------------
    def _wrote(self, key: int, error: errors.KubeAPIError | None, status: int, body: bytes) -> None:
        if status == 0:  # no answer: the fault is all there is to say
            body = str(error).encode()
        self._written.append((key, status, body))
        self._flush_soon()
        self._check_done()

    def _bound(self, request: list[Any], error: errors.KubeAPIError | None) -> None:
        key, namespace, name, uid, node = request
        if error is None:
            self._answer(key, BindResult.BOUND, "")
            self._record_scheduled(namespace, name, uid, node)
        elif isinstance(error, errors.Conflict | errors.NotFound):
            self._answer(key, BindResult.FINAL, str(error))
        else:
            self._answer(key, BindResult.FAILED, f"binding rejected: {error}")
        self._check_done()

    def _record_scheduled(self, namespace: str, name: str, uid: str, node: str) -> None:
        if self._events is None or self._bodies is None:
            return
        if self._events.pending >= reporter.EVENT_QUEUE:
            self._dropped += 1
            return
        body = self._bodies.body(
            InvolvedObject("Pod", name, namespace, uid),
            reporter.scheduled_message(namespace, name, node),
        )
        self._events.post(
            "create",
            "events",
            what=f"record event Scheduled on {namespace}/{name}",
            path=writes.events_path(namespace),
            body=body,
            done=self._event_recorded,
        )

    def _event_recorded(self, error: errors.KubeAPIError | None) -> None:
        if error is not None:  # best effort, as the recorder's
            log.warning("%s", error)
        self._check_done()

    def _answer(self, key: int, outcome: BindResult, message: str) -> None:
        self._answers.append((key, outcome.value, message))
        self._flush_soon()

    def forward(self, record: logging.LogRecord) -> None:
        """A log record, for the scheduler to log."""
        self._logs.append((record.levelno, record.name, record.getMessage()))
        self._flush_soon()

    def _flush_soon(self) -> None:
        if self._flush_due:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # the loop has ended (a record from its shutdown)
            self._flush()
            return
        self._flush_due = True
        loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Everything answered, observed and logged since the last message, as one
        message."""
        self._flush_due = False
        observed = self._observed
        logs = self._logs
        written = self._written
        if (
            not (self._answers or observed.requests or observed.retries or self._dropped or logs)
            and not written
        ):
            return
        message = (self._answers, observed.requests, observed.retries, self._dropped, logs, written)
        self._answers, observed.requests, observed.retries = [], [], []
        self._written = []
        self._dropped = 0
        self._logs = []
        if self._orphaned:
            return  # nobody to tell
        try:
            self._sock.sendall(frame(message))
        except OSError:
            self._orphaned = True

    def _check_done(self) -> None:
        if not (self._finishing or self._orphaned) or self._bindings.pending:
            return
        if self._finishing and self._events is not None and self._events.pending:
            return  # what was sent is finished, events included
        if self._done is not None and not self._done.done():
            self._done.set_result(None)


if __name__ == "__main__":
    main()
