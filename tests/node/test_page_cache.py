"""Page cache on the real node: a pod keeps a 1.6 GiB file in the active page cache of
its memory cgroup (it re-reads it every second), on the node's disk.

The kubelet counts active file pages in the working set (``usage - inactive_file``), so
with ``memory.available<500Mi`` (what operators set to lose fewer OOM races,
kubernetes#31362) its allocatable memory is under the threshold and it evicts the pod,
though the pod was never short of memory: every one of those pages is reclaimable, and
the node's memory pressure stall (PSI) stays near zero.

The opt-in agent configuration (docs/node.md, "Page cache"): the kubelet's own default
``memory.available<100Mi`` as the agent's hard threshold, the agent acting within
milliseconds of the crossing instead of 10 s, plus a PSI threshold for the stall that
real thrashing causes (``memory.pressure.some.avg10>20`` for 10 s). Beside the kubelet at
its default, the same pod runs on; and a pod ramping at 1 GiB/s toward the limit beside
it is still evicted before the OOM killer gets it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import oom_race_kubelet as race
from tests.node import agent as agents
from tests.node import pods
from tests.node.node import Node
from tests.node.test_disk_pressure import was_evicted

pytestmark = [pytest.mark.node, pytest.mark.slow]

CACHE_MIB = 1600
OPT_IN = [
    "--eviction-hard=memory.available<100Mi",
    "--eviction-soft=memory.pressure.some.avg10>20",
    "--eviction-soft-grace-period=memory.pressure.some.avg10=10s",
]


def memory_stall() -> float:
    """The node's memory PSI ``some avg10`` (percent)."""
    for line in Path("/proc/pressure/memory").read_text().splitlines():
        if line.startswith("some"):
            return float(line.split()[1].split("=")[1])
    raise AssertionError("no 'some' line in /proc/pressure/memory")


def active_file(node: Node) -> int:
    for line in (node.kubepods / "memory.stat").read_text().splitlines():
        key, value = line.split()
        if key == "total_active_file":
            return int(value)
    raise AssertionError("no total_active_file in the kubepods memory.stat")


def cache_pod(node: Node, namespace: str, name: str) -> None:
    data = node.base / f"cache-{name}"
    data.mkdir()
    pods.create(
        node.plane,
        pods.workload(
            name,
            namespace,
            ["cache", "/data/file", str(CACHE_MIB)],
            node=node.name,
            volumes=[{"name": "data", "hostPath": {"path": str(data)}}],
            mounts=[{"name": "data", "mountPath": "/data"}],
        ),
    )
    pods.wait_running(node.plane, namespace, name)


def evicted(node: Node, namespace: str, name: str) -> bool:
    """Gone, being deleted, or evicted by the kubelet (its eviction manager's log says
    so: the pod's status may not, see test_disk_pressure.was_evicted)."""
    pod = pods.get(node.plane, namespace, name)
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return True
    return was_evicted(node, namespace, name)


@pytest.fixture
def kernel_log() -> Iterator[race.KernelLog]:
    log = race.KernelLog()
    yield log
    log.close()


def test_active_page_cache_evicted_by_the_kubelet_and_spared_by_the_opt_in_agent(
    node: Node, namespace: str, kernel_log: race.KernelLog
) -> None:
    # the kubelet at 500Mi: the pod's cache is working set, and the pod goes
    with node.reconfigured(
        evictionHard={**node.eviction_hard, "memory.available": "500Mi"},
        evictionPressureTransitionPeriod="5s",
    ):
        cache_pod(node, namespace, "cache-a")
        stalls, cached = [], 0
        deadline = time.monotonic() + 90
        while not evicted(node, namespace, "cache-a") and time.monotonic() < deadline:
            stalls.append(memory_stall())
            cached = max(cached, active_file(node))
            time.sleep(0.5)
        assert evicted(node, namespace, "cache-a"), "the kubelet at 500Mi kept the pod"
        print(
            f"\nkubelet at 500Mi: evicted the page-cache pod; active file in kubepods up to"
            f" {cached >> 20} MiB, node memory stall (some avg10) at most {max(stalls):.2f} %"
        )
        assert max(stalls) < 5.0  # never short of memory
    node.plane.admin.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/cache-a", {"gracePeriodSeconds": 0}
    )
    pods.wait_gone(node.plane, namespace, "cache-a")
    # the evicted pod's page cache stays charged to kubepods (the kernel reparents it):
    # the kubelet's signal stays under its threshold with no pod left to evict, until the
    # file goes
    (node.base / "cache-cache-a" / "file").unlink()

    # the kubelet at its default and the agent opted in: the pod stays, a ramp does not
    with (
        node.reconfigured(evictionPressureTransitionPeriod="5s"),
        agents.running(node, OPT_IN, name="cache-agent") as agent,
    ):
        agents.wait_ready(agent)
        cache_pod(node, namespace, "cache-b")
        settled = time.monotonic() + 30
        while time.monotonic() < settled:
            assert not evicted(node, namespace, "cache-b"), "the page-cache pod was evicted"
            time.sleep(0.5)
        the_race = race.Race(node, kernel_log)
        the_race.agent_log = agent.process.log
        floor = the_race.baseline()
        try:
            runs = [the_race.one("kubelet+agent", "100Mi", "1Gi", floor) for _ in range(3)]
        finally:
            the_race.close()
        print(race.table(runs))
        print(f"page-cache pod {'evicted' if evicted(node, namespace, 'cache-b') else 'kept'}")
        node.plane.admin.request(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods/cache-b", {"gracePeriodSeconds": 0}
        )
        pods.wait_gone(node.plane, namespace, "cache-b")
        (node.base / "cache-cache-b" / "file").unlink()  # its page cache goes with it
        assert all(run.outcome != "oom" for run in runs), runs
        assert agent.refused() == []
