"""The one HTTP(S) server below the agent, the scheduler and the extender.

A WSGI app on the standard library's threading server, in a daemon thread: requests
never wait for the component's own loop, and the loop never waits for them. With a
:class:`Protection` it serves HTTPS (:mod:`nodeagent.serving.tls`) and puts
:class:`~nodeagent.serving.auth.Gate` in front of the app
(:mod:`nodeagent.serving.auth`); without one it is plain, open HTTP.

The TLS handshake runs in the connection's own thread, under the handler's read
timeout, so a silent client cannot stall the others; the verified client certificate
reaches the gate in the WSGI environ (:data:`~nodeagent.serving.auth.PEER_CERTIFICATE`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any
from wsgiref import simple_server

import kubernetes.client
import prometheus_client

from nodeagent.agent.logs import FIELDS
from nodeagent.errors import ConfigError
from nodeagent.kube import client, http
from nodeagent.observability.settings import ListenAddress
from nodeagent.serving.auth import (
    PEER_CERTIFICATE,
    REVIEW_TTL,
    DelegatedAuth,
    Gate,
    review_client,
)
from nodeagent.serving.settings import MetricsAuth, ServingSecurity
from nodeagent.serving.tls import ServingCertificate
from nodeagent.serving.wsgi import WSGIApp

log = logging.getLogger("nodeagent.serving")

IDLE_WAKE_S = 5.0
"""How often the serving thread wakes with nothing to serve, only to see whether it
should stop: :meth:`Server.stop` hastens that with a connection of its own, so an idle
agent is not woken ten times a second (the standard library's loop polls its stop
flag; each wake-up is a system call and a GIL hand-over, dear on slow kernels)."""


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


class _QuietHandler(simple_server.WSGIRequestHandler):
    timeout = 10.0
    """Seconds a client may take to send its request: a stuck scraper cannot pin a thread."""

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
            super().handle()
        except (ssl.SSLError, OSError) as exc:
            # A failed handshake (an unknown client CA, plain HTTP on the TLS port) or a
            # client gone: that connection's business alone.
            log.debug("connection from %s ended: %s", self.client_address, exc)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes arrive every few seconds: not worth a log line each."""


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    certificate: ServingCertificate | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        # The handler writes the status line and headers, then the body: without this,
        # Nagle's algorithm holds the second write for the client's delayed ACK (40 ms
        # a response; measured with benchmarks/bench_serving.py).
        with contextlib.suppress(OSError):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.certificate is not None:
            # No handshake here, in the accepting thread: it happens on the first read,
            # in the connection's thread, under the handler's timeout.
            connection = self.certificate.context().wrap_socket(
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
    ) -> None:
        self._address = address
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
        interface) raises :class:`~nodeagent.errors.ConfigError` naming the address."""
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
        if self._protection is not None:
            server.certificate = self._protection.certificate
            log.info(
                "serving",
                extra={FIELDS: {"url": self._url(server), **self._protection.describe()}},
            )
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
