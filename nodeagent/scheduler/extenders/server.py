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

Nodes sent whole are judged as sent: a filter reads only their names and taints; a
prioritize call takes a node whose name and resourceVersion match the watched view from
the view, already parsed. Scores are cached per node and
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
from nodeagent.scheduler.extenders.nodeview import KnownNode, NodeView
from nodeagent.scheduler.framework import Handle
from nodeagent.scheduler.plugins import node_pressure

log = logging.getLogger(__name__)

SCORE_TTL = 10.0
"""Seconds a node's cached score is reused before the plugin recomputes it."""

MAX_CACHED_SCORES = 100_000
"""The score cache is dropped when it reaches this many nodes (a bound, not a tuning)."""

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
        self._handle = Handle(now=clock())
        self.plugin = node_pressure.new(args, self._handle)
        self.neutral = args.neutral_score
        self._scores: dict[str, _Scored] = {}
        self._lock = threading.Lock()

    def rejection(
        self, taints: tuple[api.Taint, ...], tolerations: tuple[api.Toleration, ...]
    ) -> model.Pressure | None:
        """The pressure whose taint (among a node's ``taints``) the pod does not
        tolerate, if any (the plugin's Filter: unresolvable)."""
        return self.plugin.first_pressure(taints, tolerations)

    def score(self, node: api.Node, version: str, now: float) -> int:
        """The plugin's 0..100 score for ``node`` at ``now``, reused for SCORE_TTL
        seconds while the node's resourceVersion stays the same."""
        cached = self._scores.get(node.name)
        if (
            cached is not None
            and version
            and cached.version == version
            and now - cached.at < SCORE_TTL
        ):
            return cached.score
        with self._lock:  # the plugin reads the handle's clock
            self._handle.now = now
            score, _ = self.plugin.node_score(node)
        if version:
            if len(self._scores) >= MAX_CACHED_SCORES:  # names sent by clients are unbounded
                self._scores.clear()
            self._scores[node.name] = _Scored(version, score, now)
        return score


def extender_score(score: int) -> int:
    """0..100 onto the extender's 0..10, rounded down."""
    return score * wire.MAX_EXTENDER_PRIORITY // api.MAX_NODE_SCORE


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

    def _nodes(
        self, args: wire.ExtenderArgs[list[wire.NodeFields]]
    ) -> list[tuple[str, KnownNode | None]]:
        """Each node sent, with what the verdicts read (``None``: unknown, it passes)."""
        known = self.view.nodes
        if args.node_names is not None:
            return [(name, known.get(name)) for name in args.node_names]
        assert args.nodes is not None
        out: list[tuple[str, KnownNode | None]] = []
        for fields in args.nodes:
            name, version = fields.metadata.name, fields.metadata.resourceVersion
            watched = known.get(name)
            if watched is None or not version or watched.resource_version != version:
                watched = KnownNode(fields.to_node(), version)  # judged as sent
            out.append((name, watched))
        return out

    def _rejections(
        self, nodes: Iterable[tuple[str, tuple[api.Taint, ...]]], pod: Mapping[str, Any]
    ) -> dict[str, str]:
        """Node -> the plugin's reason, for the nodes whose pressure taint the pod does
        not tolerate (judged once per distinct taint list)."""
        tolerations = _tolerations(pod)
        by_taints: dict[tuple[api.Taint, ...], model.Pressure | None] = {}
        rejected: dict[str, str] = {}
        for name, taints in nodes:
            if not taints:
                continue
            if taints not in by_taints:
                try:
                    by_taints[taints] = self.judge.rejection(taints, tolerations)
                except Exception:  # one node's judging must not fail the others' answer
                    log.exception("judging node %s failed; it passes unjudged", name)
                    continue
            pressure = by_taints[taints]
            if pressure is not None:
                rejected[name] = node_pressure.reason(pressure)
                self.metrics.nodes_rejected.labels(pressure.value).inc()
        return rejected

    def filter(self, args: wire.ExtenderArgs[wire.EchoedNodes]) -> bytes:
        if args.node_names is not None:
            names = args.node_names
            known, tainted = self.view.nodes, self.view.tainted
            # Only tainted nodes can fail: the rest pass without being looked at.
            suspects = [(n, known[n].node.taints) for n in names if n in tainted and n in known]
            rejected = self._rejections(suspects, args.pod)
            kept = [n for n in names if n not in rejected] if rejected else names
            return wire.filter_result(
                node_names=kept, node_items=None, failed={}, failed_unresolvable=rejected
            )
        assert args.nodes is not None
        # Nodes sent whole are judged as sent: their taints are all a filter reads.
        sent = args.nodes
        rejected = self._rejections(
            ((node.metadata.name, node.taints()) for node in sent.taints), args.pod
        )
        items = (
            [
                raw
                for raw, node in zip(sent.raw, sent.taints, strict=True)
                if node.metadata.name not in rejected
            ]
            if rejected
            else sent.raw
        )
        return wire.filter_result(
            node_names=None, node_items=items, failed={}, failed_unresolvable=rejected
        )

    def prioritize(self, args: wire.ExtenderArgs[list[wire.NodeFields]]) -> bytes:
        now = self._clock()
        neutral = extender_score(self.judge.neutral)
        entry = wire.HostPriority
        return wire.host_priority_list(
            [
                entry(name, neutral if known is None else self._score(known, now, neutral))
                for name, known in self._nodes(args)
            ]
        )

    def _score(self, known: KnownNode, now: float, neutral: int) -> int:
        try:
            return extender_score(self.judge.score(known.node, known.resource_version, now))
        except Exception:  # one node's judging must not fail the others' answer
            log.exception("scoring node %s failed; it gets the neutral score", known.node.name)
            return neutral

    # --- HTTP -----------------------------------------------------------------------------

    def routes(self) -> Mapping[str, WSGIApp]:
        return {f"/{verb}": self._endpoint(verb) for verb in VERBS}

    def _endpoint(self, verb: str) -> WSGIApp:
        answer: Callable[[bytes], bytes] = (
            (lambda body: self.filter(wire.read_filter_args(body)))
            if verb == FILTER
            else (lambda body: self.prioritize(wire.read_prioritize_args(body)))
        )
        duration = self.metrics.duration.labels(verb)

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            started = time.perf_counter()
            code, body, content_type = self._handle(environ, answer)
            self.metrics.requests.labels(verb, str(code)).inc()
            duration.observe(time.perf_counter() - started)
            headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
            start_response(f"{code} {_REASONS[code]}", headers)
            return [body]

        return app

    def _handle(
        self, environ: dict[str, Any], answer: Callable[[bytes], bytes]
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
            return 200, answer(body), "application/json"
        except wire.ProtocolError as exc:
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
        raise wire.ProtocolError("Pod.spec: expected an object")
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    what = f"Pod {meta.get('namespace', '')}/{meta.get('name', '')}"
    try:
        return objects.parse_tolerations(
            spec.get("tolerations"), objects.FieldPath(what, "Pod.spec.tolerations")
        )
    except ConfigError as exc:
        raise wire.ProtocolError(str(exc)) from exc


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
