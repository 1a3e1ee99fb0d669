"""The one HTTP(S) server below the agent, the scheduler and the extender.

A WSGI app on the standard library's threading server, in a daemon thread: requests
never wait for the component's own loop, and the loop never waits for them. With a
:class:`Protection` it serves HTTPS (:mod:`nodeagent.serving.tls`) and puts
:class:`~nodeagent.serving.auth.Gate` in front of the app
(:mod:`nodeagent.serving.auth`); without one it is plain, open HTTP.

The TLS handshake runs in the connection's own thread, under the handler's read
timeout, so a silent client cannot stall the others; the verified client certificate
reaches the gate in the WSGI environ (:data:`~nodeagent.serving.auth.PEER_CERTIFICATE`).

HTTP/1.1 with keep-alive: kube-scheduler's extender client (Go's ``http.Transport``) and
Prometheus reuse their connections, and over TLS a new connection per call costs a
handshake each time. A connection serves requests one after another until the client
says ``Connection: close`` or speaks HTTP/1.0, a request's body was not read to its end
(a 413 refused unread, a chunked body), the answer is an error (status 400 and up, or the
app failed), or it idles for :data:`IDLE_TIMEOUT_S`. A client is cut off when it stays
silent for :data:`REQUEST_TIMEOUT_S` in the middle of a request, or takes longer than
:data:`REQUEST_HEAD_DEADLINE_S` over a request's line and headers. Every answer carries a
Content-Length; the gate runs for every request, not once per connection. At most
:data:`MAX_CONNECTIONS` connections are open at once: at the limit, a new one takes the
place of the longest-idle kept-alive connection, else waits for one to end.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any
from wsgiref import simple_server

import kubernetes.client
import prometheus_client

from nodeagent.base.errors import ConfigError
from nodeagent.base.logs import FIELDS
from nodeagent.kube import client, http
from nodeagent.serving.auth import (
    PEER_CERTIFICATE,
    REVIEW_TTL,
    DelegatedAuth,
    Gate,
    review_client,
)
from nodeagent.serving.settings import ListenAddress, MetricsAuth, ServingSecurity
from nodeagent.serving.tls import ServingCertificate
from nodeagent.serving.wsgi import WSGIApp

log = logging.getLogger("nodeagent.serving")

IDLE_WAKE_S = 5.0
"""How often the serving thread wakes with nothing to serve, only to see whether it
should stop: :meth:`Server.stop` hastens that with a connection of its own, so an idle
agent is not woken ten times a second (the standard library's loop polls its stop
flag; each wake-up is a system call and a GIL hand-over, dear on slow kernels)."""


REQUEST_TIMEOUT_S = 10.0
"""Seconds a client may stay silent while it sends a request (each read of its request
line, headers and body, and the TLS handshake): a stuck client cannot pin a thread."""

IDLE_TIMEOUT_S = 120.0
"""Seconds a kept-alive connection may wait for its next request. Longer than the 90 s
for which Go's ``http.Transport`` (kube-scheduler's extender client) keeps an idle
connection, so the client always retires the connection first: a server that closes an
idle connection races a request the client may be writing on it at that moment, and Go
does not resend a POST it has begun to write."""

REQUEST_HEAD_DEADLINE_S = 30.0
"""Seconds a client has to send a request's line and headers in all: one that trickles a
byte now and then (never silent long enough for :data:`REQUEST_TIMEOUT_S`) is cut off
too. Checked when the serving loop wakes, so within :data:`IDLE_WAKE_S` of it."""

MAX_CONNECTIONS = 64
"""Connections served at once (a thread each). kube-scheduler keeps two idle connections
per extender, Prometheus one, probes none: this bounds a flood, not normal use."""


class Protection:
    """What guards one server: its certificate (None: plain HTTP) and its gate.

    ``reviews`` is the API connection for TokenReviews and SubjectAccessReviews,
    required with ``metricsAuth kubernetes``; ``hosts`` go into a self-signed
    certificate's names. Raises ConfigError for files that do not load."""

    def __init__(
        self,
        security: ServingSecurity,
        *,
        reviews: client.AccessReviewClient | None = None,
        hosts: Iterable[str] = (),
        certificate: ServingCertificate | None = None,
        clock: Callable[[], float] = time.monotonic,
        review_ttl: float = REVIEW_TTL,
    ) -> None:
        self.security = security
        if certificate is None and security.tls:
            certificate = ServingCertificate(security, hosts=hosts)
        self.certificate = certificate
        self.delegated: DelegatedAuth | None = None
        if security.auth is MetricsAuth.KUBERNETES:
            if reviews is None:
                raise _needs_the_api(security, "none is configured")
            self.delegated = DelegatedAuth(reviews, clock=clock, ttl=review_ttl)
        self._owned: http.HTTPKubeClient | None = None

    @classmethod
    def connect(
        cls,
        security: ServingSecurity,
        *,
        configuration: Callable[[], kubernetes.client.Configuration],
        hosts: Iterable[str] = (),
        observer: client.ApiCallObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> Protection:
        """A protection with a review connection of its own (:func:`review_client`) to the
        API server ``configuration`` loads, when ``security`` needs one; :meth:`close`
        closes it."""
        # the files first: a certificate that does not load is the error to report
        certificate = ServingCertificate(security, hosts=hosts) if security.tls else None
        if security.auth is not MetricsAuth.KUBERNETES:
            return cls(security, certificate=certificate)
        try:
            api = configuration()
        except ConfigError as exc:
            raise _needs_the_api(security, str(exc)) from exc
        reviews = review_client(api, observer=observer)
        try:
            protection = cls(security, reviews=reviews, certificate=certificate, clock=clock)
        except BaseException:
            reviews.close()
            raise
        protection._owned = reviews
        return protection

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def gate(
        self,
        app: WSGIApp,
        *,
        certificate_paths: Iterable[str] = (),
        registry: prometheus_client.CollectorRegistry | None = None,
    ) -> Gate:
        return Gate(
            app,
            delegated=self.delegated,
            certificate_paths=certificate_paths,
            require_client_certificate=self.security.client_ca is not None,
            registry=registry,
        )

    def describe(self) -> dict[str, Any]:
        """For the start log."""
        fields: dict[str, Any] = {"metricsAuth": self.security.auth.value}
        if self.certificate is not None:
            fields["sha256Fingerprint"] = self.certificate.fingerprint
            fields["selfSigned"] = self.certificate.self_signed
            fields["clientCA"] = str(self.security.client_ca or "")
        return fields


def _needs_the_api(security: ServingSecurity, problem: str) -> ConfigError:
    return ConfigError(
        f"{security.label('auth')} (value 'kubernetes'): needs the Kubernetes API to review"
        f" callers ({problem}); configure cluster access or use {security.name('auth')} none",
        field=security.name("auth"),
    )


class _Body:
    """A request's body as ``wsgi.input``: at most its Content-Length can be read (an app
    that reads to the end cannot swallow the next request on the connection), and
    :attr:`complete` says whether it was read to its end. ``length`` None: a body whose
    end is not known (chunked, or an unreadable Content-Length), never complete."""

    def __init__(self, stream: Any, length: int | None) -> None:
        self._stream = stream
        self._remaining = length or 0
        self._known = length is not None

    @property
    def complete(self) -> bool:
        return self._known and self._remaining == 0

    def read(self, size: int | None = -1) -> bytes:
        wanted = self._remaining if size is None or size < 0 else min(size, self._remaining)
        data: bytes = self._stream.read(wanted) if wanted else b""
        self._remaining -= len(data)
        return data

    def readline(self, size: int | None = -1) -> bytes:
        limit = self._remaining if size is None or size < 0 else min(size, self._remaining)
        data: bytes = self._stream.readline(limit) if limit else b""
        self._remaining -= len(data)
        return data

    def readlines(self, hint: int = -1) -> list[bytes]:
        return list(self)

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line


class _Exchange(simple_server.ServerHandler):
    """One request and its answer, as HTTP/1.1, always with a Content-Length, and
    ``Connection: close`` when the connection ends after it (:attr:`keeps_alive`).

    The answer goes out in one write: wsgiref writes the status line, two headers, the
    rest of the headers and the body apart, and over TLS each write is a record and a
    system call of its own on both sides (and a partial answer the client may wake up
    for)."""

    http_version = "1.1"

    def __init__(
        self,
        handler: _Handler,
        body: _Body,
        *,
        may_keep_alive: bool,
    ) -> None:
        super().__init__(
            body, handler.wfile, handler.get_stderr(), handler.get_environ(), multithread=True
        )
        self.request_handler = handler  # for wsgiref's request log
        self._body = body
        self._may_keep_alive = may_keep_alive
        self.keeps_alive = False
        """Decided with the headers; stays False when the answer did not go out whole."""
        self._unsent: list[bytes] = []

    # wsgiref's handler sets these attributes outside __init__ (typeshed leaves them out)
    result: Any
    status: str | None
    headers: Any
    request_handler: simple_server.WSGIRequestHandler

    def finish_response(self) -> None:
        result = self.result
        if not (isinstance(result, (list, tuple)) and len(result) == 1):
            # Several chunks or a generator: joined, so that the length is known.
            try:
                joined = [b"".join(result)]
            finally:
                if hasattr(result, "close"):
                    result.close()
            self.result = joined
        super().finish_response()
        self._flush()  # headers alone (no body) are not flushed by wsgiref

    def _write(self, data: bytes) -> None:
        self._unsent.append(data)

    def _flush(self) -> None:
        if self._unsent:
            unsent = b"".join(self._unsent)
            self._unsent.clear()
            super()._write(unsent)
        self.stdout.flush()  # not wsgiref's _flush: it replaces itself with this

    def cleanup_headers(self) -> None:
        super().cleanup_headers()  # the Content-Length of the one chunk
        status = int(str(self.status).split(" ", 1)[0])
        self.keeps_alive = self._may_keep_alive and self._body.complete and status < 400
        if not self.keeps_alive:
            self.headers["Connection"] = "close"

    def handle_error(self) -> None:
        self._may_keep_alive = False  # whatever was sent, the connection ends with it
        self.keeps_alive = False
        super().handle_error()


class _Handler(simple_server.WSGIRequestHandler):
    """Serves the requests of one connection, one after another (HTTP/1.1 keep-alive)."""

    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_S
    server: _ThreadingWSGIServer
    rfile: Any  # a BufferedReader (peek)
    wfile: Any

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        if isinstance(self.connection, ssl.SSLSocket):
            # A dict only when a certificate was sent and verified against the client CA.
            certificate = self.connection.getpeercert()
            if certificate:
                environ[PEER_CERTIFICATE] = certificate
        return environ

    def handle(self) -> None:
        try:
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()  # under REQUEST_TIMEOUT_S
            if self._serve_one():
                while self._next_request_arrives() and self._serve_one():
                    pass
        except (ssl.SSLError, OSError) as exc:
            # A failed handshake (an unknown client CA, plain HTTP on the TLS port), a
            # silent client or a client gone: that connection's business alone.
            log.debug("connection from %s ended: %s", self.client_address, exc)

    def _next_request_arrives(self) -> bool:
        """Waits (idle) for the next request to begin; False when the connection ends
        instead: the client closed it, it idled too long, or the server shed it."""
        connections = self.server.connections
        if not connections.idle(self.connection):
            return False
        self.connection.settimeout(IDLE_TIMEOUT_S)
        try:
            waiting = self.rfile.peek(1)
        except TimeoutError:
            return False
        finally:
            self.connection.settimeout(self.timeout)
        return connections.busy(self.connection) and bool(waiting)

    def _serve_one(self) -> bool:
        """Serves one request; whether the connection stays open for another."""
        if not self._read_head():
            return False
        exchange = _Exchange(
            self,
            _Body(self.rfile, self._body_length()),
            may_keep_alive=not self.close_connection and self.request_version == "HTTP/1.1",
        )
        app = self.server.get_app()
        assert app is not None  # set before serving starts
        exchange.run(app)
        return exchange.keeps_alive and not self.server.connections.closing

    def _read_head(self) -> bool:
        """Reads and parses the request line and headers, within
        :data:`REQUEST_HEAD_DEADLINE_S`; False when there is no request to answer (the
        client left, or an error answer was sent)."""
        connections = self.server.connections
        connections.reading_head(self.connection, time.monotonic() + REQUEST_HEAD_DEADLINE_S)
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                return False
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                return False
            return self.parse_request()
        finally:
            connections.head_read(self.connection)

    def _body_length(self) -> int | None:
        """The body's length, 0 without one, None when its end is not known here."""
        if "Transfer-Encoding" in self.headers:
            return None
        text = self.headers.get("Content-Length")
        if text is None:
            return 0
        try:
            length = int(text)
        except ValueError:
            return None
        return length if length >= 0 else None

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes arrive every few seconds: not worth a log line each."""


class _Connections:
    """The open connections, at most ``limit``, and which of them idle between requests.

    :meth:`admit` runs in the accepting thread before a connection is served: at the
    limit it closes the longest-idle connection to make room, or waits for one to end.
    A connection's thread marks it :meth:`idle` while it waits for a next request and
    :meth:`busy` when one begins; a connection closed while idle learns it from
    :meth:`busy`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._open = 0
        self._idle: dict[socket.socket, None] = {}  # oldest first
        self._shed: set[socket.socket] = set()
        self._head_deadlines: dict[socket.socket, float] = {}
        self._changed = threading.Condition()
        self.closing = False

    def admit(self) -> bool:
        """Room for one more connection; False when the server is stopping."""
        with self._changed:
            while self._open >= self._limit and not self.closing:
                if self._idle:
                    self._shed_one(next(iter(self._idle)))
                self._changed.wait(1.0)
            if self.closing:
                return False
            self._open += 1
            return True

    def release(self, connection: socket.socket) -> None:
        with self._changed:
            self._open -= 1
            self._idle.pop(connection, None)
            self._shed.discard(connection)
            self._head_deadlines.pop(connection, None)
            self._changed.notify_all()

    def idle(self, connection: socket.socket) -> bool:
        with self._changed:
            if self.closing:
                return False
            self._idle[connection] = None
            return True

    def idle_count(self) -> int:
        """How many open connections wait for a next request."""
        with self._changed:
            return len(self._idle)

    def busy(self, connection: socket.socket) -> bool:
        """Whether the connection is still served (it was not closed while idle)."""
        with self._changed:
            self._idle.pop(connection, None)
            return connection not in self._shed

    def reading_head(self, connection: socket.socket, deadline: float) -> None:
        with self._changed:
            self._head_deadlines[connection] = deadline

    def head_read(self, connection: socket.socket) -> None:
        with self._changed:
            self._head_deadlines.pop(connection, None)

    def shed_overdue(self, now: float) -> None:
        """Closes the connections whose request head is overdue."""
        with self._changed:
            for connection, deadline in list(self._head_deadlines.items()):
                if now > deadline:
                    del self._head_deadlines[connection]
                    with contextlib.suppress(OSError):
                        connection.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Closes the idle connections and refuses new ones (the busy ones end after
        their answer)."""
        with self._changed:
            self.closing = True
            for connection in list(self._idle):
                self._shed_one(connection)
            self._changed.notify_all()

    def _shed_one(self, connection: socket.socket) -> None:
        del self._idle[connection]
        self._shed.add(connection)
        with contextlib.suppress(OSError):  # its thread then sees the end of the stream
            connection.shutdown(socket.SHUT_RDWR)


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    certificate: ServingCertificate | None = None
    connections: _Connections

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        # The handler writes the status line and headers, then the body: without this,
        # Nagle's algorithm holds the second write for the client's delayed ACK (40 ms
        # a response; measured with benchmarks/bench_serving.py).
        with contextlib.suppress(OSError):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.certificate is not None:
            # No handshake here, in the accepting thread: it happens in the connection's
            # thread, under the handler's timeout.
            connection = self.certificate.context().wrap_socket(
                connection, server_side=True, do_handshake_on_connect=False
            )
        return connection, address

    def service_actions(self) -> None:
        """Runs in the serving loop at each wake (a connection, or :data:`IDLE_WAKE_S`)."""
        self.connections.shed_overdue(time.monotonic())

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.admit():
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release(request)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves its own name with socket.getfqdn(), a reverse
        # DNS lookup that can take seconds on a node with a broken resolver. WSGI only
        # needs the literal address.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()


class _ThreadingWSGIServer6(_ThreadingWSGIServer):
    address_family = socket.AF_INET6


class Server:
    """Serves ``app`` on ``address`` until stopped, behind ``protection`` when given.

    ``certificate_paths``: the app's paths for machine callers that authenticate with a
    client certificate only (the extender's verbs; see :class:`Gate`); refusals are
    counted in ``registry`` when given. ``address_field`` is what a bind failure
    names."""

    def __init__(
        self,
        address: ListenAddress,
        app: WSGIApp,
        *,
        protection: Protection | None = None,
        certificate_paths: Iterable[str] = (),
        registry: prometheus_client.CollectorRegistry | None = None,
        address_field: str = "metricsAddress",
        name: str = "nodeagent-http",
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._address = address
        self._max_connections = max_connections
        self._protection = protection
        self._app = (
            protection.gate(app, certificate_paths=certificate_paths, registry=registry)
            if protection is not None
            else app
        )
        self._address_field = address_field
        self._name = name
        self._server: _ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve in a daemon thread. A bind failure (address in use, no such
        interface) raises :class:`~nodeagent.base.errors.ConfigError` naming the address."""
        server_class = _ThreadingWSGIServer6 if self._address.is_ipv6 else _ThreadingWSGIServer
        try:
            server = server_class(
                (self._address.host, self._address.port), _Handler, bind_and_activate=True
            )
        except OSError as exc:
            raise ConfigError(
                f"config field {self._address_field!r} (value {str(self._address)!r}): cannot"
                f" listen: {exc.strerror or exc}",
                field=self._address_field,
            ) from exc
        if self._protection is not None:
            server.certificate = self._protection.certificate
            log.info(
                "serving",
                extra={FIELDS: {"url": self._url(server), **self._protection.describe()}},
            )
        server.connections = _Connections(self._max_connections)
        server.set_app(self._app)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": IDLE_WAKE_S},
            name=self._name,
            daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The bound port (the kernel's choice when the address asked for port 0)."""
        if self._server is None:
            raise RuntimeError("server not started")
        return int(self._server.server_address[1])

    @property
    def idle_connections(self) -> int:
        """How many open connections wait for a next request: the ones a new
        connection at the limit may take the place of, longest idle first."""
        if self._server is None:
            raise RuntimeError("server not started")
        return self._server.connections.idle_count()

    @property
    def url(self) -> str:
        """``http(s)://HOST:PORT`` of the server, with a loopback host for a wildcard."""
        if self._server is None:
            raise RuntimeError("server not started")
        return self._url(self._server)

    def _url(self, server: _ThreadingWSGIServer) -> str:
        scheme = "https" if server.certificate is not None else "http"
        port = int(server.server_address[1])
        return f"{scheme}://{ListenAddress(self._reachable_host(), port)}"

    def _reachable_host(self) -> str:
        """The bound host, or the loopback one for a wildcard."""
        host = self._address.host
        if host in ("0.0.0.0", ""):
            return "127.0.0.1"
        if host == "::":
            return "::1"
        return host

    def stop(self) -> None:
        """Stop serving and release the port; idempotent. Returns at once, not after the
        serving thread's next idle wake (:data:`IDLE_WAKE_S`): a connection wakes it."""
        server, thread = self._server, self._thread
        if server is not None:
            server.connections.close()  # kept-alive connections do not outlive the server
            address = (self._reachable_host(), self.port)
            stopping = threading.Thread(target=server.shutdown, name=f"{self._name}-stop")
            stopping.start()
            while stopping.is_alive():  # until the serving loop has seen the stop flag
                with contextlib.suppress(OSError):
                    socket.create_connection(address, timeout=1.0).close()
                stopping.join(0.05)
            server.server_close()
        if self._protection is not None:
            self._protection.close()
        self._server, self._thread = None, None
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
