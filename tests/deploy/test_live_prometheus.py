"""The dashboard's queries and the alerts' expressions, run by a real Prometheus against
a live agent's metrics: names *and labels* must match what is served, not only parse.

promtool (test_dashboard.py, test_alerts.py) proves the PromQL is valid and its unit
tests pin the alerts' logic on synthetic series; neither notices a selector on a label
the agent does not export, which renders an empty panel or an alert that never fires.
Here an :class:`AgentMetrics` in the state of a node under memory pressure (PSI
threshold included) keeps counting evictions, API calls and latencies while Prometheus
scrapes it with the ``node`` label the ServiceMonitor adds. Every panel query must
return a finite value, and each alert must select series exactly when that state
should fire it.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent import model
from nodeagent.agent import metrics
from nodeagent.base.clock import RealClock
from nodeagent.k8s.pods import QOSClass
from nodeagent.serving.endpoints import ObservabilityServer
from nodeagent.serving.health import Health
from nodeagent.serving.settings import ListenAddress
from tests.deploy import test_alerts, test_dashboard
from tests.observability import samples, tools
from tests.observability.prometheus import Prometheus

NODE = "worker-1"
RATE_WINDOW = "10s"
"""What ``$__rate_interval`` becomes: a few 1 s scrapes, so rate() has samples."""

FIRING = {
    "NodeAgentPressureHeld",
    "NodeAgentEvictionsBlockedByPDB",
    "NodeAgentSignalUnavailable",
    "NodeAgentDegraded",
    "NodeAgentAPIErrors",
}
"""The alerts whose condition the fed state meets (their ``for`` aside): memory
pressure, a refused eviction, an unreadable signal, a degraded trigger, failing API
calls. The agent evaluates and answers scrapes, so the others must select nothing."""


def _feed(agent: metrics.AgentMetrics, stop: threading.Event) -> None:
    """What a busy loop reports, every 50 ms."""
    while not stop.wait(0.05):
        agent.observe_detection_latency(0.003, trigger="psi")
        agent.observe_decision_latency(0.0006)
        agent.observe_decision(samples.decision(), cycle_seconds=0.01)
        agent.record_eviction(
            model.Signal.MEMORY_AVAILABLE,
            metrics.EvictionOutcome.EVICTED,
            QOSClass.BURSTABLE,
            reclaimed=512 * samples.MIB,
        )
        agent.record_eviction(
            model.Signal.MEMORY_AVAILABLE,
            metrics.EvictionOutcome.BLOCKED_BY_PDB,
            QOSClass.GUARANTEED,
        )
        agent.api_request("create", "pods/eviction", 201)
        agent.api_request("patch", "nodes/status", "error")
        agent.api_request("patch", "nodes/status", 503)
        agent.api_retry("patch", "nodes/status", "Unavailable")


def _collection() -> model.NodeObservations:
    """The sample node with every panel's signal readable but containerfs (a
    filesystem the collector could not stat), which the unreadable-signal alert needs."""
    observed = samples.observations()
    signals = {
        **observed.signals,
        model.Signal.PID_AVAILABLE: model.SignalValue(32_000, 32_768),
        model.Signal.CONTAINERFS_AVAILABLE: model.Unavailable("statvfs: Permission denied"),
    }
    return dataclasses.replace(observed, signals=signals)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = tools.require("prometheus")
    agent = samples.fed_metrics()
    agent.observe_collection(
        _collection(), {**samples.THRESHOLDS, model.Signal.PID_AVAILABLE: 1_000}
    )
    clock = RealClock()
    health = Health(clock=clock, liveness_timeout=30.0, requires_api=False)
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(agent, stop), daemon=True)
    feeder.start()
    try:
        with (
            ObservabilityServer(
                ListenAddress("127.0.0.1", 0), registry=agent.registry, health=health
            ) as server,
            Prometheus(
                binary,
                tmp_path_factory.mktemp("prometheus"),
                targets=[f"127.0.0.1:{server.port}"],
                labels={"node": NODE},
            ) as running,
        ):
            # Three scrapes of a counter: rate() over the window has what it needs.
            running.wait_for(f"count_over_time(nodeagent_build_info[{RATE_WINDOW}]) >= 3")
            yield running
    finally:
        stop.set()
        feeder.join()


def _finite(result: list[dict[str, Any]]) -> list[float]:
    return [v for v in (float(s["value"][1]) for s in result) if math.isfinite(v)]


def _expand(expr: str) -> str:
    expanded = expr.replace("$__rate_interval", RATE_WINDOW).replace("$__interval", RATE_WINDOW)
    return expanded.replace("$node", NODE)


@pytest.mark.slow
def test_every_dashboard_query_shows_data(prometheus: Prometheus) -> None:
    empty = []
    for panel in test_dashboard.panels():
        for target in panel["targets"]:
            result = prometheus.query(_expand(target["expr"]))
            if not _finite(result):
                empty.append(f"{panel['title']}: {target['expr']} -> {result}")
    assert empty == []


@pytest.mark.slow
def test_alerts_select_series_exactly_when_the_state_calls_for_them(
    prometheus: Prometheus,
) -> None:
    assert test_alerts.alert_names() >= FIRING
    selected = {}
    for group in test_alerts.rule_groups():
        for rule in group["rules"]:
            selected[rule["alert"]] = prometheus.query(rule["expr"])
    firing = {name for name, result in selected.items() if result}
    assert firing == FIRING, selected
    for name in FIRING:
        assert {s["metric"].get("node") for s in selected[name]} == {NODE}, name
