"""The in-memory FakeKubeClient: same semantics as the HTTP fake (it shares the store),
a call log, and injected errors; enough for the actuators and the pod cache."""

from __future__ import annotations

import time

import pytest

from nodeagent.actuators import events, evictor, node_status, safety
from nodeagent.agent import podcache
from nodeagent.base import errors
from nodeagent.base.clock import FakeClock
from nodeagent.kube import errors as kube_errors
from tests.actuators.builders import MEMORY_CONDITION, MEMORY_TAINT, decision, pod_info
from tests.doubles import kube as fake
from tests.fakeapi import objects


@pytest.fixture
def fake_kube() -> fake.FakeKubeClient:
    cluster = fake.FakeCluster()
    cluster.create("nodes", objects.node("node-a"))
    for name in ("p1", "p2"):
        cluster.create("pods", objects.pod(name, uid=f"uid-{name}", labels={"app": name}))
    return fake.FakeKubeClient(cluster)


def test_actuators_run_against_the_fake_client(fake_kube: fake.FakeKubeClient) -> None:
    clock = FakeClock(wall_offset=1_800_000_000.0)
    status = node_status.NodeStatusActuator(
        fake_kube,
        "node-a",
        clock=clock,
        condition_types=(MEMORY_CONDITION,),
        taint_keys=(MEMORY_TAINT,),
    )
    assert status.apply(decision(memory=True)).errors == ()
    node = fake_kube.cluster.get("nodes", "", "node-a")
    assert {c["type"] for c in node["status"]["conditions"]} >= {"Ready", MEMORY_CONDITION}
    assert node["spec"]["taints"] == [{"key": MEMORY_TAINT, "effect": "NoSchedule"}]
    assert [c.method for c in fake_kube.calls] == ["get_node", "patch_node_status", "patch_node"]

    fake_kube.cluster.add_pdb("default", "pdb", selector="app=p1")
    recorder = events.AgentEventRecorder(fake_kube, node_name="node-a", clock=clock)
    ev = evictor.Evictor(fake_kube, clock=clock, recorder=recorder, policy=safety.SafetyPolicy())
    results = ev.apply(decision(evict=(pod_info("p1"),), candidates=(pod_info("p2"),)))
    assert [r.outcome for r in results] == [
        evictor.Outcome.BLOCKED_BY_PDB,
        evictor.Outcome.EVICTED,
    ]


def test_injected_errors_come_first_and_are_logged(fake_kube: fake.FakeKubeClient) -> None:
    fake_kube.fail_next("get_node", kube_errors.Unavailable("down", status=503), times=2)
    for _ in range(2):
        with pytest.raises(errors.ServerError):
            fake_kube.get_node("node-a")
    assert fake_kube.get_node("node-a")["metadata"]["name"] == "node-a"
    assert len(fake_kube.calls_to("get_node")) == 3


def test_pod_cache_over_the_fake_client(fake_kube: fake.FakeKubeClient) -> None:
    cache = podcache.PodCache(fake_kube, "node-a", watch_timeout=30)
    cache.start()
    try:
        assert cache.wait_synced(5)
        assert {p.name for p in cache.snapshot().pods.values()} == {"p1", "p2"}
        fake_kube.cluster.delete("pods", "default", "p1")
        deadline = time.monotonic() + 5
        while len(cache.snapshot().pods) != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert {p.name for p in cache.snapshot().pods.values()} == {"p2"}
    finally:
        cache.stop()
