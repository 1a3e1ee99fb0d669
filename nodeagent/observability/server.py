"""One small HTTP server for ``/metrics``, ``/healthz`` and ``/readyz`` (and, for a
component that serves an API of its own, such as the scheduler extender, its routes).

A WSGI app on the standard library's threading server, in a daemon thread: scrapes and
probes never wait for the evaluation loop, and the loop never waits for them. The
``/metrics`` handler is prometheus_client's own WSGI app, so content negotiation
(the classic text format by default, OpenMetrics when Prometheus asks for it) and gzip
come from the library.

Endpoints:

=============  ==============================================================
``/metrics``   every metric of the registry (the agent's, or the scheduler's)
``/healthz``   200 while the loop turns, 503 when it stalled (liveness probe)
``/readyz``    200 once the process does its job (readiness probe)
=============  ==============================================================

Options for components beyond the agent: ``routes`` (path -> WSGI app, checked before
the endpoints above), ``ssl_context`` (HTTPS; the handshake runs in the connection's
own thread, under the same read timeout, so a silent client cannot stall the others)
and ``address_field`` (what a bind failure names).
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any
from wsgiref import simple_server

import prometheus_client

from nodeagent.errors import ConfigError
from nodeagent.observability.health import ProbeResult, Probes
from nodeagent.observability.settings import ListenAddress

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_TEXT = [("Content-Type", "text/plain; charset=utf-8")]

IDLE_WAKE_S = 5.0
"""How often the serving thread wakes with nothing to serve, only to see whether it
should stop: :meth:`ObservabilityServer.stop` hastens that with a connection of its own,
so an idle agent is not woken ten times a second (the standard library's loop polls its
stop flag; each wake-up is a system call and a GIL hand-over, dear on slow kernels)."""


def _respond(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = (body + "\n").encode()
    start_response(status, [*_TEXT, ("Content-Length", str(len(data)))])
    return [data]


def _probe(start_response: StartResponse, result: ProbeResult) -> list[bytes]:
    status = "200 OK" if result.ok else "503 Service Unavailable"
    return _respond(start_response, status, ("ok: " if result.ok else "failed: ") + result.detail)


def make_app(
    registry: prometheus_client.CollectorRegistry,
    health: Probes,
    routes: Mapping[str, WSGIApp] | None = None,
) -> WSGIApp:
    """The WSGI application behind the server (usable without sockets in tests)."""
    metrics_app = prometheus_client.make_wsgi_app(registry)
    extra = dict(routes or {})
    listing = " ".join(["/metrics /healthz /readyz", *extra])

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        route = extra.get(path)
        if route is not None:
            return route(environ, start_response)
        if path == "/metrics":
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        if path == "/healthz":
            return _probe(start_response, health.liveness())
        if path == "/readyz":
            return _probe(start_response, health.readiness())
        if path == "/":
            return _respond(start_response, "200 OK", f"nodeagent: {listing}")
        return _respond(start_response, "404 Not Found", f"no such endpoint: {path}")

    return app


class _QuietHandler(simple_server.WSGIRequestHandler):
    timeout = 10.0
    """Seconds a client may take to send its request: a stuck scraper cannot pin a thread."""

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes arrive every few seconds: not worth a log line each."""


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        if self.ssl_context is not None:
            # No handshake here, in the accepting thread: it happens on the first read,
            # in the connection's thread, under the handler's timeout.
            connection = self.ssl_context.wrap_socket(
                connection, server_side=True, do_handshake_on_connect=False
            )
        return connection, address

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


class ObservabilityServer:
    """Serves the agent's metrics and probes until stopped.

    ::

        with ObservabilityServer(address, registry=metrics.registry, health=health) as server:
            print(server.url)   # http://127.0.0.1:9813
            ...                 # the loop runs
    """

    def __init__(
        self,
        address: ListenAddress,
        *,
        registry: prometheus_client.CollectorRegistry,
        health: Probes,
        routes: Mapping[str, WSGIApp] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        address_field: str = "metricsAddress",
    ) -> None:
        self._address = address
        self._app = make_app(registry, health, routes)
        self._ssl_context = ssl_context
        self._address_field = address_field
        self._server: _ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve in a daemon thread. A bind failure (address in use, no such
        interface) raises :class:`~nodeagent.errors.ConfigError` naming
        ``metricsAddress``."""
        server_class = _ThreadingWSGIServer6 if self._address.is_ipv6 else _ThreadingWSGIServer
        try:
            server = server_class(
                (self._address.host, self._address.port), _QuietHandler, bind_and_activate=True
            )
        except OSError as exc:
            raise ConfigError(
                f"config field {self._address_field!r} (value {str(self._address)!r}): cannot"
                f" listen: {exc.strerror or exc}",
                field=self._address_field,
            ) from exc
        server.ssl_context = self._ssl_context
        server.set_app(self._app)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": IDLE_WAKE_S},
            name="nodeagent-http",
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
    def url(self) -> str:
        """``http(s)://HOST:PORT`` of the server, with a loopback host for a wildcard."""
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://{ListenAddress(self._reachable_host(), self.port)}"

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
            address = (self._reachable_host(), self.port)
            stopping = threading.Thread(target=server.shutdown, name="nodeagent-http-stop")
            stopping.start()
            while stopping.is_alive():  # until the serving loop has seen the stop flag
                with contextlib.suppress(OSError):
                    socket.create_connection(address, timeout=1.0).close()
                stopping.join(0.05)
            server.server_close()
        self._server, self._thread = None, None
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> ObservabilityServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
