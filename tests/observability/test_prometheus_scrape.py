"""A real Prometheus scrapes a running agent; PromQL sees its memory signal and its
eviction counter.

``agent_target`` yields the ``HOST:PORT`` to scrape. Until ``nodeagent run`` exists it
is the agent's own ObservabilityServer fed by a recorder with what the loop would hand
it; the loop's engineer replaces the fixture's body with a ``nodeagent run
--standalone --metrics-address=127.0.0.1:PORT`` subprocess, and the test stays as is.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.clock import RealClock
from nodeagent.observability.health import Health
from nodeagent.observability.server import ObservabilityServer
from nodeagent.observability.settings import ListenAddress
from tests.observability import samples, tools
from tests.observability.prometheus import Prometheus


@pytest.fixture
def agent_target() -> Iterator[str]:
    """``HOST:PORT`` of a running agent's metrics endpoint."""
    clock = RealClock()
    recorder = samples.fed_metrics()
    health = Health(clock=clock, liveness_timeout=30.0, requires_api=False)
    health.beat(clock.now())
    with ObservabilityServer(
        ListenAddress("127.0.0.1", 0), registry=recorder.registry, health=health
    ) as server:
        yield f"127.0.0.1:{server.port}"


@pytest.mark.slow
def test_prometheus_scrapes_the_memory_signal_and_the_eviction_counter(
    agent_target: str, tmp_path: Path
) -> None:
    binary = tools.require("prometheus")
    with Prometheus(binary, tmp_path, targets=[agent_target]) as prometheus:
        memory = prometheus.wait_for('nodeagent_signal_available_bytes{signal="memory.available"}')
        evictions = prometheus.wait_for('sum(nodeagent_evictions_total{outcome="evicted"})')
        up = prometheus.query('up{job="nodeagent"}')

    [series] = memory
    assert series["metric"]["instance"] == agent_target
    assert float(series["value"][1]) > 0
    assert float(evictions[0]["value"][1]) >= 1
    assert [float(s["value"][1]) for s in up] == [1.0]
