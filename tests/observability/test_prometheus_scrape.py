"""A real Prometheus scrapes a running agent; PromQL sees its memory signal and its
eviction counter.

``agent_target`` yields the ``HOST:PORT`` of a ``nodeagent run --standalone`` process
reading a fixture host under memory pressure with one pod, so the agent decides to evict
it (standalone evictions are dry runs: counted with ``outcome="dry_run"``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.k8s.pods import QOSClass
from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion
from tests.doubles.host import GIB, HostTree, Memory
from tests.e2e import harness
from tests.observability import tools
from tests.observability.prometheus import Prometheus


@pytest.fixture
def agent_target(tmp_path: Path) -> Iterator[str]:
    """``HOST:PORT`` of a running agent's metrics endpoint."""
    host = HostTree(tmp_path / "host", version=CgroupVersion.V1, driver=CgroupDriver.CGROUPFS)
    host.proc(mem_total=16 * GIB)
    host.root_memory(Memory(15 * GIB + 512 * 2**20))
    host.kubepods(Memory(4 * GIB), limit=15 * GIB)
    host.pod("0b5e7c1a-hog", Memory(4 * GIB), qos=QOSClass.BEST_EFFORT)
    args = [
        "--standalone",
        "--host-root",
        str(host.root),
        "--eviction-hard",
        "memory.available<1Gi",
        "--metrics-address",
        "127.0.0.1:0",
    ]
    with harness.agent_process(args) as agent:
        url = agent.wait_line("nodeagent running")["metrics"]
        agent.wait_line("eviction dry-run: /0b5e7c1a-hog")
        yield url.removeprefix("http://")
        agent.terminate()


@pytest.mark.slow
def test_prometheus_scrapes_the_memory_signal_and_the_eviction_counter(
    agent_target: str, tmp_path: Path
) -> None:
    binary = tools.require("prometheus")
    with Prometheus(binary, tmp_path, targets=[agent_target]) as prometheus:
        memory = prometheus.wait_for('nodeagent_signal_available_bytes{signal="memory.available"}')
        evictions = prometheus.wait_for('sum(nodeagent_evictions_total{outcome="dry_run"})')
        up = prometheus.query('up{job="nodeagent"}')

    [series] = memory
    assert series["metric"]["instance"] == agent_target
    assert float(series["value"][1]) > 0
    assert float(evictions[0]["value"][1]) >= 1
    assert [float(s["value"][1]) for s in up] == [1.0]
