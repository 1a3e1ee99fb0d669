"""``nodeagent extender``: the agent's pressure verdicts for a stock kube-scheduler.

kube-scheduler's ``HTTPExtender`` calls ``POST /filter`` and ``POST /prioritize`` with the
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

Nodes sent by name are judged from the watched view, where each node was assessed once
when the watch delivered it (:class:`~nodeagent.extender.nodeview.Standing`:
its score before and after its annotation goes stale, 15 minutes by default, and which
of its taints the filter reads): a prioritize looks its names up into columns of scores
once and picks the fresh or stale score by a time comparison; a filter judges each
distinct list of filter taints once and looks up only the names of nodes that carry a
failing one. Answers are written without an object per node; no work waits for the
first call after an idle hour. Nodes sent whole are judged as sent: a filter reads only
their names and taints; a prioritize call takes a node whose name and resourceVersion
match the view from the view, and parses the others.

One node whose judging raises does not fail the call: it passes the filter, or gets the
neutral score, and the failure is logged. Metrics are counted once per call.

Robustness: a request without ``Content-Length`` gets 411, one above the body limit 413
(unread), a non-POST 405, anything undecodable or mistyped 400 with a message saying
where; an unexpected failure is logged and answered 500. The server never exits on
input. ``/healthz``, ``/readyz`` (the node view has listed once) and ``/metrics`` share
the port (:mod:`nodeagent.serving.endpoints`), behind the shared secure serving
(:mod:`nodeagent.serving`): the verbs are its certificate paths, open unless a client CA
is configured, and ``/metrics`` needs an authorized caller with ``--metrics-auth
kubernetes``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from itertools import filterfalse
from typing import Any

import prometheus_client

from nodeagent.base.errors import ConfigError
from nodeagent.extender.nodeview import KnownNode, NodeView, Standing
from nodeagent.k8s.pressure import PRESSURE_ANNOTATION, Pressure, Taint
from nodeagent.scheduler import api, objects
from nodeagent.scheduler.extenders import wire
from nodeagent.scheduler.framework import Handle
from nodeagent.scheduler.plugins import node_pressure
from nodeagent.serving.endpoints import ObservabilityServer, StartResponse, WSGIApp
from nodeagent.serving.health import ProbeResult
from nodeagent.serving.server import Protection
from nodeagent.serving.settings import ListenAddress

log = logging.getLogger(__name__)

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
        self.rejected = {  # every series exists from the start, at 0
            pressure: self.nodes_rejected.labels(pressure.value) for pressure in Pressure
        }

    def count_rejections(self, pressures: Iterable[Pressure]) -> None:
        """One increment per pressure for a call's rejected nodes (not one per node)."""
        for pressure, count in Counter(pressures).items():
            self.rejected[pressure].inc(count)


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


class PressureJudge:
    """The NodePressure plugin's verdicts, one node at a time."""

    def __init__(self, args: node_pressure.Args, clock: Callable[[], float] = time.time) -> None:
        self._handle = Handle(now=clock())
        self._clock = clock
        self.plugin = node_pressure.new(args, self._handle)
        self.neutral = args.neutral_score
        self._stale_after = float(args.stale_after_seconds)
        self._lock = threading.Lock()

    def rejection(
        self, taints: tuple[Taint, ...], tolerations: tuple[api.Toleration, ...]
    ) -> Pressure | None:
        """The pressure whose taint (among a node's ``taints``) the pod does not
        tolerate, if any (the plugin's Filter: unresolvable)."""
        return self.plugin.first_pressure(taints, tolerations)

    def filtered_taints(self, taints: tuple[Taint, ...]) -> tuple[Taint, ...]:
        """The taints among a node's ``taints`` that :meth:`rejection` reads."""
        return self.plugin.filtered_taints(taints)

    def score(self, node: api.Node, now: float) -> int:
        """The plugin's 0..100 score for ``node`` at ``now``."""
        with self._lock:  # the plugin reads the handle's clock
            self._handle.now = now
            score, _ = self.plugin.node_score(node)
        return score

    def standing(self, node: api.Node) -> Standing:
        """``node``'s extender score either side of its annotation going stale.

        Time enters the plugin's score only through staleness (``now - published >
        staleAfterSeconds``), so the score is a step: the plugin's verdict at the
        publication time, then its verdict past the limit. Both are worked out here,
        once per node version; a failure is logged and the node scores neutral."""
        try:
            published = _published_at(node)
            if published is None or not self._stale_after:  # a score that does not age
                constant = extender_score(self.score(node, self._clock()))
                return Standing(constant, constant)
            fresh_until = published + self._stale_after
            return Standing(
                fresh=extender_score(self.score(node, published)),
                stale=extender_score(self.score(node, fresh_until + 1.0)),
                fresh_until=fresh_until,
            )
        except Exception:  # one node's judging must not fail the others'
            log.exception("scoring node %s failed; it gets the neutral score", node.name)
            neutral = extender_score(self.neutral)
            return Standing(neutral, neutral)


def _published_at(node: api.Node) -> float | None:
    """When the node's pressure annotation was published, if it says so readably (the
    plugin ignores an annotation without a valid time, whatever the clock says)."""
    text = node.annotations.get(PRESSURE_ANNOTATION)
    if text is None:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        return None
    published = document.get("time") if isinstance(document, dict) else None
    if not isinstance(published, str):
        return None
    try:
        return objects.unix_time(published)
    except ValueError:
        return None


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
        # each node once, as the watch delivers it
        view.assess_with(judge.standing, judge.filtered_taints)

    # --- the verdicts ---------------------------------------------------------------------

    def _sent_nodes(
        self, args: wire.ExtenderArgs[list[wire.NodeFields]]
    ) -> list[tuple[str, KnownNode | None]]:
        """Each node sent whole, from the view when it is the version watched (``None``
        for one the API server would have refused: it is skipped, not judged)."""
        known = self.view.nodes
        assert args.nodes is not None
        out: list[tuple[str, KnownNode | None]] = []
        for fields in args.nodes:
            name, version = fields.metadata.name, fields.metadata.resourceVersion
            watched = known.get(name)
            if watched is None or not version or watched.resource_version != version:
                try:
                    watched = KnownNode(fields.to_node(), version)  # judged as sent
                except wire.ProtocolError as exc:
                    watched = None  # neutral, as a node the server does not know
                    _skip_invalid(exc)
            out.append((name, watched))
        return out

    def _rejections(
        self, nodes: Iterable[tuple[str, tuple[Taint, ...]]], pod: Mapping[str, Any]
    ) -> dict[str, str]:
        """Node -> the plugin's reason, for the nodes whose pressure taint the pod does
        not tolerate (judged once per distinct taint list)."""
        tolerations = _tolerations(pod)
        by_taints: dict[tuple[Taint, ...], Pressure | None] = {}
        rejected: dict[str, Pressure] = {}
        for name, taints in nodes:
            if not taints:
                continue
            if taints not in by_taints:
                by_taints[taints] = self._rejection(f"node {name}", taints, tolerations)
            pressure = by_taints[taints]
            if pressure is not None:
                rejected[name] = pressure
        self.metrics.count_rejections(rejected.values())
        return {name: _REASONS_BY_PRESSURE[pressure] for name, pressure in rejected.items()}

    def _rejection(
        self,
        what: object,
        taints: tuple[Taint, ...],
        tolerations: tuple[api.Toleration, ...],
    ) -> Pressure | None:
        """The judge's verdict, or None (passing) when judging raised; ``what`` names
        the node or taint list in the log."""
        try:
            return self.judge.rejection(taints, tolerations)
        except Exception:  # one node's judging must not fail the others'
            log.exception("filtering %s failed; it passes", what)
            return None

    def filter(self, args: wire.ExtenderArgs[wire.EchoedNodes]) -> bytes:
        if args.node_names is not None:
            return self._filter_names(args.node_names, args.pod)
        assert args.nodes is not None
        # Nodes sent whole are judged as sent: their taints are all a filter reads.
        sent = args.nodes
        rejected = self._rejections(
            ((node.metadata.name, _valid_taints(node)) for node in sent.taints), args.pod
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

    def _filter_names(self, names: list[str], pod: Mapping[str, Any]) -> bytes:
        """Each distinct list of the taints the filter reads judged once; only the names
        of nodes carrying a failing one looked up further. A name the view does not know
        has no taints, and passes."""
        tolerations = _tolerations(pod)
        rejected = self.view.failing(
            names,
            lambda taints: self._rejection(f"the nodes tainted {taints}", taints, tolerations),
        )
        failed: dict[str, str] = {}
        for pressure, failing in rejected.items():
            self.metrics.rejected[pressure].inc(len(failing))
            failed.update(dict.fromkeys(failing, _REASONS_BY_PRESSURE[pressure]))
        return wire.filter_result(
            node_names=[*filterfalse(failed.__contains__, names)] if failed else names,
            node_items=None,
            failed={},
            failed_unresolvable=failed,
        )

    def prioritize(self, args: wire.ExtenderArgs[list[wire.NodeFields]]) -> bytes:
        now = self._clock()
        neutral = extender_score(self.judge.neutral)
        if args.node_names is not None:
            scores = self.view.scores(args.node_names, now, neutral)
            return wire.host_priorities(args.node_names, scores)
        return wire.host_priority_list(
            [
                wire.HostPriority(name, neutral if known is None else self._score(known, now))
                for name, known in self._sent_nodes(args)
            ]
        )

    def _score(self, known: KnownNode, now: float) -> int:
        standing = known.standing
        if standing is not None:
            return standing.fresh if now <= standing.fresh_until else standing.stale
        try:  # a node judged as sent
            return extender_score(self.judge.score(known.node, now))
        except Exception:  # one node's judging must not fail the others'
            log.exception("scoring node %s failed; it gets the neutral score", known.node.name)
            return extender_score(self.judge.neutral)

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


_REASONS_BY_PRESSURE = {pressure: node_pressure.reason(pressure) for pressure in Pressure}

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


def _skip_invalid(exc: wire.ProtocolError) -> None:
    """A Node the API server would refuse (an unknown taint effect) cannot be judged; it
    passes the filter and scores neutral, as a node the extender does not know, and the
    rest of the call is answered."""
    log.warning("skipping an invalid node: %s", exc)


def _valid_taints(node: wire.NodeTaints) -> tuple[Taint, ...]:
    try:
        return node.taints()
    except wire.ProtocolError as exc:
        _skip_invalid(exc)
        return ()


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


FREEZE_EVERY_S = 5.0
"""How often the extender moves what its heap holds out of the collector's reach
(:func:`nodeagent.base.heap.freeze_until`). The node informer keeps every Node as decoded
(about a hundred containers each) and the watch replaces some every second; left in the
collected generations they pile up, and each full collection walks them all: with 5000
nodes republished every 5 minutes, full collections of 75-340 ms
(benchmarks/bench_extender.py), in whichever thread allocates at that moment, a
request's included."""


def make_server(
    view: NodeView,
    judge: PressureJudge,
    address: ListenAddress,
    *,
    protection: Protection | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    watching: Callable[[], bool] | None = None,
) -> tuple[ObservabilityServer, ExtenderService]:
    """The extender's HTTP(S) server (not started) and the service behind its verbs;
    ``protection`` None serves plain, open HTTP."""
    metrics = ExtenderMetrics(view)
    service = ExtenderService(view, judge, metrics, max_request_bytes=max_request_bytes)
    endpoint = ObservabilityServer(
        address,
        registry=metrics.registry,
        health=ExtenderHealth(view, watching),
        routes=service.routes(),
        protection=protection,
        address_field="--listen",
    )
    return endpoint, service
