"""``/metrics``, ``/healthz``, ``/readyz`` and ``/livez`` (and, for a component that serves
an API of its own, such as the scheduler extender, its routes), on the shared server of
:mod:`nodeagent.serving.server`.

The ``/metrics`` handler is prometheus_client's own WSGI app, so content negotiation
(the classic text format by default, OpenMetrics when Prometheus asks for it) and gzip
come from the library.

Endpoints:

=============  ==============================================================
``/metrics``   every metric of the registry (the agent's, or the scheduler's)
``/healthz``   200 while the loop turns, 503 when it stalled (liveness probe)
``/livez``     the same as ``/healthz`` (kube's name for it)
``/readyz``    200 once the process does its job (readiness probe)
=============  ==============================================================

With a :class:`~nodeagent.serving.server.Protection` (``metricsAuth kubernetes``) the
probes stay open and everything else needs an authorized caller; the extra routes are
the certificate paths (see :mod:`nodeagent.serving.auth`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import prometheus_client

from nodeagent.serving.health import ProbeResult, Probes
from nodeagent.serving.server import IDLE_WAKE_S, Protection, Server
from nodeagent.serving.settings import ListenAddress
from nodeagent.serving.wsgi import StartResponse, WSGIApp, respond

__all__ = ["IDLE_WAKE_S", "ObservabilityServer", "StartResponse", "WSGIApp", "make_app"]


def _probe(start_response: StartResponse, result: ProbeResult) -> list[bytes]:
    status = "200 OK" if result.ok else "503 Service Unavailable"
    return respond(start_response, status, ("ok: " if result.ok else "failed: ") + result.detail)


def make_app(
    registry: prometheus_client.CollectorRegistry,
    health: Probes,
    routes: Mapping[str, WSGIApp] | None = None,
) -> WSGIApp:
    """The WSGI application behind the server (usable without sockets in tests)."""
    metrics_app = prometheus_client.make_wsgi_app(registry)
    extra = dict(routes or {})
    listing = " ".join(["/metrics /healthz /livez /readyz", *extra])

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        route = extra.get(path)
        if route is not None:
            return route(environ, start_response)
        if path == "/metrics":
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        if path in ("/healthz", "/livez"):
            return _probe(start_response, health.liveness())
        if path == "/readyz":
            return _probe(start_response, health.readiness())
        if path == "/":
            return respond(start_response, "200 OK", f"nodeagent: {listing}")
        return respond(start_response, "404 Not Found", f"no such endpoint: {path}")

    return app


class ObservabilityServer(Server):
    """Serves a component's metrics and probes (and ``routes``) until stopped.

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
        protection: Protection | None = None,
        address_field: str = "metricsAddress",
    ) -> None:
        super().__init__(
            address,
            make_app(registry, health, routes),
            protection=protection,
            certificate_paths=tuple(routes or ()),
            registry=registry,
            address_field=address_field,
        )

    def __enter__(self) -> ObservabilityServer:
        self.start()
        return self
