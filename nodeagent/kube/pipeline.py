"""Pipelined writes: many requests in flight on a few kept-alive HTTP/1.1 connections.

The scheduler writes two objects per pod it places (the binding and its ``Scheduled``
event), and at a thousand pods a second how they are written is most of what the
writing costs. One request at a time per connection, from a thread per request
(:class:`~nodeagent.kube.http.KeepAlive`), paid per request: a thread woken and its
turn at the interpreter lock, a ``send`` and a ``recv`` or two, ``http.client``'s
header parsing (the ``email`` package). Here one thread runs an asyncio loop; the
requests that arrive together are written back to back with one ``send`` (HTTP/1.1
pipelining: the server answers them in order), one ``recv`` reads whatever answers
have arrived, and llhttp (``httptools``, the C parser uvicorn uses) splits them.

Each call goes the way :meth:`~nodeagent.kube.http.HTTPKubeClient._call` takes one: a
token from the client-side bucket, the request, the answer translated by
:func:`nodeagent.kube.errors.from_status`, faults (5xx, throttling, no answer) retried
with :class:`~nodeagent.kube.retry.RetryPolicy`'s backoff and jitter, every exchange
and retry reported to the :class:`~nodeagent.kube.client.ApiCallObserver`. What is
particular to pipelining:

* a server that answers ``Connection: close`` processes nothing after that answer
  (RFC 9112 section 9.6), so what was written after it is sent again on another
  connection, not counted as an attempt;
* a connection lost or timed out before its answers is a fault for every request on it
  (the server may have processed them: a binding sent again is answered 409, an event
  409 AlreadyExists, both answers the callers already handle);
* a connection with an answer owed for longer than the read timeout is closed.

A call never blocks its caller: :meth:`Poster.post` (and :meth:`Poster.send`, for
another method or a caller that wants the stored object back) returns at once and the
outcome arrives through the callback, on the loop's thread. A PUT is retried on faults
like a POST: it carries the resourceVersion it was read at, so one that did reach the
server before its connection broke is answered 409 when sent again, which the caller
sees as the Conflict it is (DynamicResources' PreBind re-reads the claim on one).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httptools

from nodeagent.base import errors
from nodeagent.kube import client, ratelimit, retry
from nodeagent.kube import errors as kube_errors
from nodeagent.kube.address import Address

log = logging.getLogger(__name__)

Done = Callable[[errors.KubeAPIError | None], None]
"""Called once per call: None when it was answered 2xx, else the error it ended with."""

Answered = Callable[[errors.KubeAPIError | None, int, bytes], None]
"""Called once per :meth:`Poster.send`: the error it ended with (None when answered
2xx), the last answer's status and body (0 and empty when there was no answer)."""


@dataclass(frozen=True, slots=True)
class Limits:
    connections: int = 4
    """Connections opened at most; a new one only when every open one has answers
    owed."""
    depth: int = 16
    """Requests written to one connection and not yet answered, at most."""
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    """Seconds an answer may be owed with nothing read from the connection."""


class _Call:
    __slots__ = ("answered", "attempts", "body", "method", "path", "resource", "verb", "what")

    def __init__(
        self,
        verb: str,
        resource: str,
        *,
        what: str,
        path: str,
        body: bytes,
        answered: Answered,
        method: str = "POST",
    ) -> None:
        self.verb = verb
        self.resource = resource
        self.what = what
        self.path = path
        self.body = body
        self.method = method
        self.answered = answered
        self.attempts = 0


class _Connection(asyncio.Protocol):
    """One connection: calls written in order, answers read in order."""

    def __init__(self, poster: Poster) -> None:
        self._poster = poster
        self.transport: asyncio.Transport | None = None
        self.written: collections.deque[_Call] = collections.deque()
        """Calls written (or to be written once connected), answers owed in this order."""
        self._out: list[bytes] = []
        self.open = True
        """False once closing: nothing more is written to it."""
        self.server_closed = False
        """The server answered ``Connection: close``: what it owes after that answer it
        never read."""
        self.progress = time.monotonic()
        """When it last read anything or was handed a call with nothing owed."""
        self.opening: asyncio.Task[None] | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._retry_after: str | None = None
        self._aborted = ""
        """Why this side gave the connection up, if it did."""

    # --- writing ------------------------------------------------------------------------
    def write(self, call: _Call, request: bytes) -> None:
        if not self.written:
            self.progress = time.monotonic()
        self.written.append(call)
        if not self._out and self.transport is not None:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(request)

    def _flush(self) -> None:
        if self._out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self._out))
        self._out.clear()

    # --- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.open:  # given up while connecting
            transport.abort()
            return
        self.progress = time.monotonic()
        self._flush()  # what was handed over while connecting

    def data_received(self, data: bytes) -> None:
        self.progress = time.monotonic()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.abort(f"unreadable answer: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        why = self._aborted or (f"connection lost: {exc}" if exc else "connection closed")
        self._poster._lost(self, why)

    # --- httptools callbacks ------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._body.clear()
        self._retry_after = None

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"retry-after":
            self._retry_after = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if not self.written:
            self.abort("an answer nobody asked for")
            return
        call = self.written.popleft()
        closing = not self._parser.should_keep_alive()
        if closing:  # nothing written after this answer was processed
            self.open = False
            self.server_closed = True
        self._poster._answered(
            call, self._parser.get_status_code(), b"".join(self._body), self._retry_after
        )
        if closing and self.transport is not None:
            self.transport.close()

    def abort(self, why: str) -> None:
        self.open = False
        self._aborted = why
        if self.transport is not None:
            self.transport.abort()  # connection_lost follows, with the calls owed
        else:
            self._poster._lost(self, why)


class Poster:
    """Writes (POSTs, and PUTs or PATCHes through :meth:`send`) of serialised JSON to
    one API server, pipelined over kept-alive
    connections, on the running asyncio loop. Not thread-safe: the loop's thread
    alone calls it."""

    def __init__(
        self,
        address: Address,
        credentials: Callable[[], Mapping[str, str]],
        *,
        limits: Limits = Limits(),
        retry_policy: retry.RetryPolicy = retry.DEFAULT,
        limiter: ratelimit.TokenBucket | None = None,
        observer: client.ApiCallObserver | None = None,
    ) -> None:
        self._address = address
        self._tls = address.tls()
        self._credentials = credentials
        self._limits = limits
        self._retry = retry_policy
        self._limiter = limiter
        self._observer = observer or client.NullObserver()
        self._ready: collections.deque[_Call] = collections.deque()
        """Calls waiting for room on a connection."""
        self._connections: list[_Connection] = []
        self._delayed = 0
        """Calls waiting for a token or a retry's backoff."""
        self._head = "".join(
            f"{name}: {value}\r\n"
            for name, value in {
                "Host": address.authority,
                "Accept": "application/json",
                "Content-Type": "application/json",
                **dict(address.headers),
            }.items()
        )
        self._auth_checked = -1.0
        self._auth = ""
        self._watchdog: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Calls not finished: waiting for a token, a backoff, room or their answer."""
        return self._delayed + len(self._ready) + sum(len(c.written) for c in self._connections)

    def post(
        self, verb: str, resource: str, *, what: str, path: str, body: bytes, done: Done
    ) -> None:
        """POST ``body`` to ``path``; ``done`` gets the outcome. ``verb`` and
        ``resource`` name it for the observer, ``what`` for error messages."""
        self.send("POST", verb, resource, what=what, path=path, body=body, answered=_only(done))

    def send(
        self,
        method: str,
        verb: str,
        resource: str,
        *,
        what: str,
        path: str,
        body: bytes,
        answered: Answered,
    ) -> None:
        """Send ``body`` to ``path`` with ``method``; ``answered`` gets the outcome with
        the answer's status and body (the object as stored, on a 2xx)."""
        call = _Call(
            verb, resource, what=what, path=path, body=body, method=method, answered=answered
        )
        self._take_token(call)

    def drop_waiting(self) -> list[_Call]:
        """Take back the calls not written yet (their callbacks are not called)."""
        dropped = list(self._ready)
        self._ready.clear()
        return dropped

    def close(self) -> None:
        """Close every connection now: calls owed an answer end as faults, without
        retries; calls not written yet are dropped (their callbacks are not called)."""
        self._closed = True
        self._ready.clear()
        for connection in list(self._connections):
            connection.abort("closed")
        if self._watchdog is not None:
            self._watchdog.cancel()

    # --- sending ------------------------------------------------------------------------
    def _take_token(self, call: _Call) -> None:
        delay = self._limiter.reserve() if self._limiter is not None else 0.0
        if delay > 0:
            self._later(delay, call)
            return
        self._ready.append(call)
        self._dispatch()

    def _later(self, delay: float, call: _Call) -> None:
        self._delayed += 1

        def resume() -> None:
            self._delayed -= 1
            if not self._closed:
                self._ready.append(call)
                self._dispatch()

        asyncio.get_running_loop().call_later(delay, resume)

    def _dispatch(self) -> None:
        """Hand the ready calls to the connection with the fewest answers owed, opening
        another while all are busy and the limit allows."""
        depth = self._limits.depth
        while self._ready and not self._closed:
            best: _Connection | None = None
            for connection in self._connections:
                owed = len(connection.written)
                if connection.open and (best is None or owed < len(best.written)):
                    best = connection
            opened = len(self._connections)
            if (best is None or best.written) and opened < self._limits.connections:
                best = self._open()
            if best is None or len(best.written) >= depth:
                return  # an answer makes room
            call = self._ready.popleft()
            call.attempts += 1
            best.write(call, self._request(call))

    def _request(self, call: _Call) -> bytes:
        now = time.monotonic()
        if now - self._auth_checked >= 1.0:  # a token that rotates
            self._auth = "".join(f"{k}: {v}\r\n" for k, v in self._credentials().items())
            self._auth_checked = now
        return (
            f"{call.method} {self._address.prefix}{call.path} HTTP/1.1\r\n{self._head}{self._auth}"
            f"Content-Length: {len(call.body)}\r\n\r\n"
        ).encode("latin-1") + call.body

    def _open(self) -> _Connection:
        connection = _Connection(self)
        self._connections.append(connection)
        loop = asyncio.get_running_loop()
        connection.opening = loop.create_task(self._connect(connection))
        if self._watchdog is None:
            self._watchdog = loop.call_later(1.0, self._watch)
        return connection

    async def _connect(self, connection: _Connection) -> None:
        address = self._address
        try:
            await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(
                    lambda: connection,
                    address.host,
                    address.port,
                    ssl=self._tls,
                    server_hostname=(address.server_hostname or address.host)
                    if self._tls is not None
                    else None,
                ),
                self._limits.connect_timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            connection.open = False
            self._lost(connection, f"cannot connect: {exc or type(exc).__name__}")

    def _watch(self) -> None:
        """Close connections whose answers are overdue (every second while any is open)."""
        now = time.monotonic()
        for connection in list(self._connections):
            if connection.written and now - connection.progress > self._limits.read_timeout:
                connection.abort(f"no answer within {self._limits.read_timeout:g} s")
        self._watchdog = (
            asyncio.get_running_loop().call_later(1.0, self._watch) if self._connections else None
        )

    # --- answers ------------------------------------------------------------------------
    def _answered(self, call: _Call, status: int, body: bytes, retry_after: str | None) -> None:
        self._observer.api_request(call.verb, call.resource, str(status))
        if 200 <= status <= 299:
            _finish(call, None, status, body)
        else:
            error = kube_errors.from_status(
                status, body, what=call.what, retry_after_header=retry_after
            )
            self._failed(call, error, status, body)
        self._dispatch()

    def _lost(self, connection: _Connection, why: str) -> None:
        """A connection is gone: what it was answering failed, what it had not started
        (after a ``Connection: close`` answer) goes to another connection."""
        if connection in self._connections:
            self._connections.remove(connection)
        owed, connection.written = list(connection.written), collections.deque()
        for call in owed:
            if connection.server_closed:
                call.attempts -= 1
                self._ready.append(call)
                continue
            self._observer.api_request(call.verb, call.resource, "error")
            self._failed(call, kube_errors.Unavailable(f"{call.what}: no answer: {why}"))
        self._dispatch()

    def _failed(
        self, call: _Call, error: errors.KubeAPIError, status: int = 0, body: bytes = b""
    ) -> None:
        if (
            self._closed
            or not kube_errors.is_retryable(error)
            or call.attempts >= self._retry.attempts
        ):
            _finish(call, error, status, body)
            return
        delay = self._retry.wait_seconds(call.attempts, error, retry.JITTER.random())
        self._observer.api_retry(call.verb, call.resource, type(error).__name__)
        self._later(delay, call)


def _only(done: Done) -> Answered:
    """A :data:`Done` as an :data:`Answered` (a POST's caller reads no answer)."""
    return lambda error, _status, _body: done(error)


def _finish(call: _Call, error: errors.KubeAPIError | None, status: int, body: bytes) -> None:
    try:
        call.answered(error, status, body)
    except Exception:  # the caller's bug must not break the connection it came from
        log.exception("handling the outcome of %s failed", call.what)
