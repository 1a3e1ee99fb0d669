"""``nodeagent extender``: the agent's pressure verdicts for a stock kube-scheduler.

kube-scheduler calls ``POST /filter`` and ``POST /prioritize`` (reference §14) with the
pod and the feasible nodes, as whole Node objects or, with ``nodeCacheCapable: true``,
as names. The answers come from the NodePressure plugin itself
(:mod:`nodeagent.scheduler.plugins.node_pressure`), not from a copy of its rules:

* **filter**: a node whose pressure taint (``NoSchedule``/``NoExecute``) the pod does
  not tolerate fails, in ``FailedAndUnresolvableNodes`` (the plugin's verdict is
  unresolvable: preempting pods does not relieve the node), with the plugin's reason
  (``node(s) had memory pressure``). Everything else passes, including nodes the server
  does not know: the extender never blocks what it cannot judge.
* **prioritize**: the plugin's 0..100 score (published headroom; 0 under a pressure
  condition; neutral when the data is missing or stale) on the extender's 0..10 scale,
  rounded down; a node the server does not know gets the neutral score.

Nodes sent whole are judged as sent; a node whose name and resourceVersion match the
watched view is taken from the view, already parsed. Scores are cached per node and
version and recomputed every :data:`SCORE_TTL` seconds, which is how staleness (15
minutes by default) is noticed without parsing every annotation on every call.

Robustness: a request without ``Content-Length`` gets 411, one above the body limit 413
(unread), a non-POST 405, anything undecodable or mistyped 400 with a message saying
where; an unexpected failure is logged and answered 500. The server never exits on
input. ``/healthz``, ``/readyz`` (the node view has listed once) and ``/metrics`` share
the port (:mod:`nodeagent.observability.server`).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import prometheus_client

from nodeagent import model
from nodeagent.errors import ConfigError
from nodeagent.observability.health import ProbeResult
from nodeagent.observability.server import ObservabilityServer, StartResponse, WSGIApp
from nodeagent.observability.settings import ListenAddress
from nodeagent.scheduler import api, objects
from nodeagent.scheduler.extenders import wire
from nodeagent.scheduler.extenders.nodeview import NodeView
from nodeagent.scheduler.framework import Handle
from nodeagent.scheduler.plugins import node_pressure

log = logging.getLogger(__name__)

SCORE_TTL = 10.0
"""Seconds a node's cached score is reused before the plugin recomputes it."""

DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
"""Bigger bodies are refused unread: 500 whole nodes are 5-8 MB."""

FILTER = "filter"
PRIORITIZE = "prioritize"
VERBS = (FILTER, PRIORITIZE)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class ExtenderMetrics:
    """The server's Prometheus metrics, on a registry of its own."""

    def __init__(self, view: NodeView) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        self.requests = prometheus_client.Counter(
            "nodeagent_extender_requests",
            "Extender calls answered, by verb and HTTP status code.",
            ["verb", "code"],
            registry=self.registry,
        )
        self.duration = prometheus_client.Histogram(
            "nodeagent_extender_request_duration_seconds",
            "Time to answer an extender call (body read, decode, verdicts, encode), by verb.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.nodes_rejected = prometheus_client.Counter(
            "nodeagent_extender_filtered_nodes",
            "Nodes failed by /filter, by pressure.",
            ["pressure"],
            registry=self.registry,
        )
        known = prometheus_client.Gauge(
            "nodeagent_extender_nodes",
            "Nodes in the extender's watched view.",
            registry=self.registry,
        )
        known.set_function(lambda: float(len(view)))
        synced = prometheus_client.Gauge(
            "nodeagent_extender_node_view_synced",
            "1 once the node view has listed the cluster's nodes.",
            registry=self.registry,
        )
        synced.set_function(lambda: float(view.synced))
        for verb in VERBS:  # every series exists from the start, at 0
            self.duration.labels(verb)
            self.requests.labels(verb, "200")


class ExtenderHealth:
    """Liveness: the node watch is running (``watching``); readiness: it has listed."""

    def __init__(self, view: NodeView, watching: Callable[[], bool] | None = None) -> None:
        self._view = view
        self._watching = watching

    def liveness(self) -> ProbeResult:
        if self._watching is not None and not self._watching():
            return ProbeResult(False, "the node watch stopped")
        return ProbeResult(True, "serving")

    def readiness(self) -> ProbeResult:
        if not self._view.synced:
            return ProbeResult(False, "node view not synced yet (first list pending)")
        return ProbeResult(True, f"serving; {len(self._view)} nodes known")


@dataclass(slots=True)
class _Scored:
    version: str
    score: int
    at: float


class PressureJudge:
    """The NodePressure plugin's verdicts, one node at a time."""

    def __init__(self, args: node_pressure.Args, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._handle = Handle(now=clock())
        self.plugin = node_pressure.new(args, self._handle)
        self.neutral = args.neutral_score
        self._scores: dict[str, _Scored] = {}
        self._lock = threading.Lock()

    def rejection(
        self, node: api.Node, tolerations: tuple[api.Toleration, ...]
    ) -> model.Pressure | None:
        """The pressure whose taint the pod does not tolerate, if any (the plugin's
        Filter: unresolvable)."""
        return self.plugin.first_pressure(node.taints, tolerations)

    def score(self, node: api.Node, version: str, now: float) -> int:
        """The plugin's 0..100 score for ``node`` (cached per version for SCORE_TTL)."""
        cached = self._scores.get(node.name)
        fresh = cached is not None and now - cached.at < SCORE_TTL
        if fresh and cached is not None and version and cached.version == version:
            return cached.score
        with self._lock:  # the plugin reads the handle's clock
            self._handle.now = now
            score, _ = self.plugin.node_score(node)
        if version:
            self._scores[node.name] = _Scored(version, score, now)
        return score

    def forget(self, name: str) -> None:
        self._scores.pop(name, None)


def extender_score(score: int) -> int:
    """0..100 onto the extender's 0..10, rounded down."""
    return score * wire.MAX_EXTENDER_PRIORITY // api.MAX_NODE_SCORE


class BadRequest(Exception):
    """The request cannot be answered as sent (400); the message says why."""


class ExtenderService:
    """Answers filter and prioritize calls from a :class:`NodeView`."""

    def __init__(
        self,
        view: NodeView,
        judge: PressureJudge,
        metrics: ExtenderMetrics,
        *,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.view = view
        self.judge = judge
        self.metrics = metrics
        self.max_request_bytes = max_request_bytes
        self._clock = clock

    # --- the verdicts ---------------------------------------------------------------------

    def _nodes(self, args: wire.ExtenderArgs) -> Iterable[tuple[str, api.Node | None, str]]:
        """``(name, node or None if unknown, resourceVersion)`` for each node sent."""
        if args.node_names is not None:
            view = self.view
            for name in args.node_names:
                known = view.get(name)
                if known is None:
                    yield name, None, ""
                else:
                    yield name, known.node, known.resource_version
            return
        assert args.nodes is not None
        for i, fields in enumerate(args.nodes.fields):
            name, version = fields.metadata.name, fields.metadata.resourceVersion
            known = self.view.get(name)
            if known is not None and version and known.resource_version == version:
                yield name, known.node, version
                continue
            try:
                yield name, objects.parse_node(fields.as_object()), version
            except ConfigError as exc:
                raise BadRequest(f"Nodes.items[{i}]: {exc}") from exc

    def filter(self, args: wire.ExtenderArgs) -> bytes:
        tolerations = _tolerations(args.pod)
        by_taints: dict[tuple[api.Taint, ...], model.Pressure | None] = {}
        passed: list[int] = []
        unresolvable: dict[str, str] = {}
        for position, (name, node, _) in enumerate(self._nodes(args)):
            if node is None:
                passed.append(position)
                continue
            taints = node.taints
            if taints not in by_taints:
                by_taints[taints] = self.judge.rejection(node, tolerations)
            pressure = by_taints[taints]
            if pressure is None:
                passed.append(position)
            else:
                unresolvable[name] = node_pressure.reason(pressure)
                self.metrics.nodes_rejected.labels(pressure.value).inc()
        if args.node_names is not None:
            names = [args.node_names[i] for i in passed]
            return wire.filter_result(
                node_names=names, node_items=None, failed={}, failed_unresolvable=unresolvable
            )
        assert args.nodes is not None
        raw = args.nodes.raw
        return wire.filter_result(
            node_names=None,
            node_items=[bytes(raw[i]) for i in passed],
            failed={},
            failed_unresolvable=unresolvable,
        )

    def prioritize(self, args: wire.ExtenderArgs) -> bytes:
        now = self._clock()
        judge = self.judge
        neutral = extender_score(judge.neutral)
        scores = [
            (name, neutral if node is None else extender_score(judge.score(node, version, now)))
            for name, node, version in self._nodes(args)
        ]
        return wire.host_priority_list(scores)

    # --- HTTP -----------------------------------------------------------------------------

    def routes(self) -> Mapping[str, WSGIApp]:
        return {f"/{verb}": self._endpoint(verb) for verb in VERBS}

    def _endpoint(self, verb: str) -> WSGIApp:
        answer = self.filter if verb == FILTER else self.prioritize

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            started = time.perf_counter()
            code, body, content_type = self._handle(environ, answer)
            self.metrics.requests.labels(verb, str(code)).inc()
            self.metrics.duration.labels(verb).observe(time.perf_counter() - started)
            headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
            start_response(f"{code} {_REASONS[code]}", headers)
            return [body]

        return app

    def _handle(
        self, environ: dict[str, Any], answer: Callable[[wire.ExtenderArgs], bytes]
    ) -> tuple[int, bytes, str]:
        if environ.get("REQUEST_METHOD") != "POST":
            return _text(405, "extender verbs take POST with an ExtenderArgs JSON body")
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return _text(411, "a Content-Length header is required")
        if length < 0:
            return _text(400, "Content-Length must not be negative")
        if length > self.max_request_bytes:
            return _text(
                413, f"request body of {length} bytes exceeds the limit of {self.max_request_bytes}"
            )
        try:
            body = environ["wsgi.input"].read(length)
            args = wire.read_extender_args(body)
            return 200, answer(args), "application/json"
        except (wire.ProtocolError, BadRequest) as exc:
            return _text(400, str(exc))
        except OSError as exc:  # the client sent less than it announced, or went away
            return _text(400, f"could not read the request body: {exc}")
        except Exception:
            log.exception("extender request failed")
            return _text(500, "internal error (logged)")


_REASONS = {
    200: "OK",
    400: "Bad Request",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    500: "Internal Server Error",
}


def _text(code: int, message: str) -> tuple[int, bytes, str]:
    return code, (message + "\n").encode(), "text/plain; charset=utf-8"


def _tolerations(pod: Mapping[str, Any]) -> tuple[api.Toleration, ...]:
    spec = pod.get("spec")
    if spec is None:
        return ()
    if not isinstance(spec, Mapping):
        raise BadRequest("Pod.spec: expected an object")
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    what = f"Pod {meta.get('namespace', '')}/{meta.get('name', '')}"
    try:
        return objects.parse_tolerations(
            spec.get("tolerations"), objects.FieldPath(what, "Pod.spec.tolerations")
        )
    except ConfigError as exc:
        raise BadRequest(str(exc)) from exc


def make_server(
    view: NodeView,
    judge: PressureJudge,
    address: ListenAddress,
    *,
    ssl_context: ssl.SSLContext | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    watching: Callable[[], bool] | None = None,
) -> tuple[ObservabilityServer, ExtenderService]:
    """The extender's HTTP(S) server (not started) and the service behind its verbs."""
    metrics = ExtenderMetrics(view)
    service = ExtenderService(view, judge, metrics, max_request_bytes=max_request_bytes)
    endpoint = ObservabilityServer(
        address,
        registry=metrics.registry,
        health=ExtenderHealth(view, watching),
        routes=service.routes(),
        ssl_context=ssl_context,
        address_field="--listen",
    )
    return endpoint, service
