"""The live scheduler against the fake API server over real HTTP: what a cluster sees."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.scheduler import objects
from nodeagent.scheduler.live.scheduler import LiveScheduler
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler.live import harness as h
from tests.scheduler.live.harness import condition, node_of
from tests.waiting import eventually

PRESSURE_TAINT = {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}


@pytest.fixture
def running(fake_api: FakeAPIServer) -> Iterator[LiveScheduler]:
    scheduler = h.start(fake_api)
    try:
        yield scheduler
    finally:
        scheduler.stop(bind_timeout=2)


def test_binds_every_pod_that_fits_and_reports_the_one_that_does_not(
    fake_api: FakeAPIServer,
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1", cpu="1"))
    cluster.create("nodes", h.node("n2", cpu="1"))
    for i in range(4):
        cluster.create("pods", h.pod(f"p{i}", cpu="500m", priority=10))
    cluster.create("pods", h.pod("big", cpu="800m"))  # priority 0: PrioritySort pops it last
    scheduler = h.start(fake_api)
    try:
        eventually(lambda: all(node_of(fake_api, f"p{i}") for i in range(4)), what="4 bound")
        placed = sorted(node_of(fake_api, f"p{i}") for i in range(4))
        assert placed == ["n1", "n1", "n2", "n2"], "NodeResourcesFit: two 500m pods per node"
        found = eventually(lambda: condition(fake_api, "big"), what="condition")
        assert found["status"] == "False" and found["reason"] == "Unschedulable"
        assert found["message"] == (
            "0/2 nodes are available: 2 Insufficient cpu."
            " no new claims to deallocate, preemption: 0/2 nodes are"
            " available: 2 No preemption victims found for incoming pod."
        )
        eventually(lambda: h.events_for(fake_api, "big", "FailedScheduling"))
        scheduled = eventually(lambda: h.events_for(fake_api, "p0", "Scheduled"))
        assert scheduled[0]["message"].startswith("Successfully assigned default/p0 to n")
        assert scheduled[0]["type"] == "Normal"
        # a fitting node arrives: the NodeAdd event moves the pod, not a 5-minute timer
        cluster.create("nodes", h.node("n3", cpu="1"))
        eventually(lambda: node_of(fake_api, "big") == "n3", timeout=30)
        incoming = scheduler.metrics.incoming
        assert sum(incoming.labels(q, "NodeAdd")._value.get() for q in ("active", "backoff")) == 1
        assert len(h.events_for(fake_api, "big", "FailedScheduling")) == 1
        assert len(cluster.bindings) == 5, "one binding per pod, none doubled"
    finally:
        scheduler.stop(bind_timeout=2)
    # informers only: no per-pod GET in the hot path
    assert not fake_api.requests_to("GET", r"/namespaces/default/pods/")


def test_other_schedulers_pods_and_assigned_pods_are_left_alone(
    fake_api: FakeAPIServer, running: LiveScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    parse_pod = objects.parse_pod

    def counting(obj: Any, *args: Any) -> Any:
        parsed.append(obj["metadata"]["name"])
        return parse_pod(obj, *args)

    monkeypatch.setattr(objects, "parse_pod", counting)
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1"))
    cluster.create("pods", h.pod("theirs", scheduler="default-scheduler"))
    cluster.create("pods", h.pod("ours"))
    eventually(lambda: node_of(fake_api, "ours") == "n1")
    cluster.patch("pods", "default", "theirs", {"metadata": {"labels": {"x": "y"}}})
    cluster.delete("pods", "default", "theirs")
    eventually(lambda: running.pending_pods.get(("default", "theirs")) is None)
    # kube-scheduler's informer filter (responsibleForPod): not even parsed
    assert "theirs" not in parsed and "ours" in parsed
    cluster.create("pods", h.pod("theirs", scheduler="default-scheduler"))
    eventually(lambda: running.pending_pods.get(("default", "theirs")) is not None)
    theirs = str(cluster.get("pods", "default", "theirs")["metadata"]["uid"])
    # seen before ours (resourceVersion order) and never queued: nothing can bind it
    assert running.pending_pods.get(("default", "theirs")) is not None
    assert running.queue.where(theirs) is None
    assert node_of(fake_api, "theirs") == ""
    assert condition(fake_api, "theirs") is None
    assert [b[1] for b in cluster.bindings] == ["ours"]


def test_removing_the_pressure_taint_requeues_the_pods_it_rejected(
    fake_api: FakeAPIServer, running: LiveScheduler
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1", taints=[PRESSURE_TAINT]))
    eventually(lambda: running.cache.has_node("n1"))
    cluster.create("pods", h.pod("waiting"))
    found = eventually(lambda: condition(fake_api, "waiting"))
    assert "memory-pressure" in found["message"] or "pressure" in found["message"]
    assert running.queue.pending()["unschedulable"] == 1
    cluster.patch("nodes", "", "n1", {"spec": {"taints": []}})
    eventually(lambda: node_of(fake_api, "waiting") == "n1", timeout=30)
    # moved by the taint change (the metric says so), not by a 5-minute timer
    incoming = running.metrics.incoming
    moved = sum(incoming.labels(q, "NodeTaintChange")._value.get() for q in ("active", "backoff"))
    assert moved == 1


def test_gated_pods_wait_for_their_gates(fake_api: FakeAPIServer, running: LiveScheduler) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1"))
    cluster.create("pods", h.pod("gated", gates=["example.com/quota"]))
    eventually(lambda: running.queue.pending()["gated"] == 1)
    assert node_of(fake_api, "gated") == ""  # gated: never popped
    cluster.patch("pods", "default", "gated", {"spec": {"schedulingGates": None}})
    eventually(lambda: node_of(fake_api, "gated") == "n1")


@pytest.mark.parametrize("gate", [True, False], ids=["gate-on", "gate-off"])
def test_a_gt_toleration_schedules_only_with_its_feature_gate(
    fake_api: FakeAPIServer, gate: bool
) -> None:
    """``--feature-gates TaintTolerationComparisonOperators=true`` reaches the live
    scheduler's framework: a ``Gt`` toleration tolerates a greater taint value only then."""
    cluster = fake_api.cluster
    taint = {"key": "example.com/generation", "value": "9", "effect": "NoSchedule"}
    cluster.create("nodes", h.node("n1", taints=[taint]))
    toleration = {
        "key": "example.com/generation",
        "operator": "Gt",
        "value": "5",
        "effect": "NoSchedule",
    }
    cluster.create("pods", h.pod("newer", tolerations=[toleration]))
    live = h.settings(feature_gates=f"TaintTolerationComparisonOperators={str(gate).lower()}")
    scheduler = h.start(fake_api, live=live)
    try:
        if gate:
            eventually(lambda: node_of(fake_api, "newer") == "n1", what="bound with the gate")
        else:
            found = eventually(lambda: condition(fake_api, "newer"), what="condition")
            assert found["reason"] == "Unschedulable"
            assert "untolerated taint {example.com/generation: 9}" in found["message"]
            assert node_of(fake_api, "newer") == ""
    finally:
        scheduler.stop(bind_timeout=2)


def test_a_failed_bind_backs_off_and_is_never_doubled(
    fake_api: FakeAPIServer, bind_process_kubeconfig: Path | None
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1"))
    # more failures than the client's own retries: the scheduler's backoff takes over
    fake_api.fail_next(4, status=500, method="POST", path="/binding$")
    cluster.create("pods", h.pod("p"))
    scheduler = h.start(fake_api, bind_process_kubeconfig=bind_process_kubeconfig)
    try:
        eventually(lambda: node_of(fake_api, "p") == "n1")
        posts = fake_api.requests_to("POST", "/pods/p/binding$")
        assert len(posts) == 5 and len(cluster.bindings) == 1
        assert scheduler.metrics.attempts.labels("scheduled", h.PROFILE)._value.get() >= 2
    finally:
        scheduler.stop(bind_timeout=2)


def test_a_409_backs_off_and_the_pod_is_bound_once(
    fake_api: FakeAPIServer, bind_process_kubeconfig: Path | None
) -> None:
    """kube-scheduler's handleSchedulingFailure: a refused binding backs off; a pod the
    watch shows bound meanwhile leaves the queue, any other is placed again."""
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1"))
    fake_api.fail_next(1, status=409, method="POST", path="/binding$")
    cluster.create("pods", h.pod("p"))
    scheduler = h.start(fake_api, bind_process_kubeconfig=bind_process_kubeconfig)
    try:
        eventually(lambda: node_of(fake_api, "p") == "n1", what="bound after the backoff")
        assert len(fake_api.requests_to("POST", "/pods/p/binding$")) == 2
        assert [b[1] for b in cluster.bindings] == ["p"]
        assert not fake_api.requests_to("PATCH", "/pods/p/status$"), "no SchedulerError"
    finally:
        scheduler.stop(bind_timeout=2)


def test_an_api_outage_mid_run_loses_nothing(
    fake_api: FakeAPIServer, bind_process_kubeconfig: Path | None
) -> None:
    cluster = fake_api.cluster
    for i in range(3):
        cluster.create("nodes", h.node(f"n{i}", cpu="4"))
    for i in range(10):
        cluster.create("pods", h.pod(f"a{i}"))
    scheduler = h.start(fake_api, bind_process_kubeconfig=bind_process_kubeconfig)
    try:
        eventually(lambda: all(node_of(fake_api, f"a{i}") for i in range(10)))
        with fake_api.outage(refuse=True):
            for i in range(10):
                cluster.create("pods", h.pod(f"b{i}"))
            eventually(lambda: scheduler.pending_pods.stats.failures >= 1, what="the watch cut")
        failures = scheduler.pending_pods.stats.failures
        with fake_api.outage(status=503):
            eventually(lambda: scheduler.pending_pods.stats.failures > failures, what="503s seen")
        eventually(lambda: all(node_of(fake_api, f"b{i}") for i in range(10)), timeout=20)
        assert len(cluster.bindings) == 20
    finally:
        scheduler.stop(bind_timeout=2)


def test_a_preemptor_gets_its_nomination_its_victims_go_and_it_is_bound(
    fake_api: FakeAPIServer, running: LiveScheduler
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1", cpu="1"))
    cluster.create("pods", h.pod("low", cpu="800m", priority=1, node_name="n1"))
    cluster.create("pods", h.pod("other", cpu="100m", priority=1, node_name="n1"))
    eventually(lambda: running.cache.stats().bound == 2 and running.cache.has_node("n1"))
    deletions_before = len(cluster.deletions)
    cluster.create("pods", h.pod("high", cpu="500m", priority=100))
    eventually(lambda: node_of(fake_api, "high") == "n1", timeout=10)
    deleted = [d.name for d in cluster.deletions[deletions_before:]]
    assert deleted == ["low"], "the minimal victim set: the 800m pod, not the 100m one"
    writes = fake_api.writes()
    nominations = [
        i
        for i, r in enumerate(writes)
        if r.method == "PATCH"
        and r.path.endswith("/pods/high/status")
        and "nominatedNodeName" in r.body["status"]
    ]
    assert nominations and writes[nominations[0]].body["status"]["nominatedNodeName"] == "n1"
    (victim_deleted,) = [
        i for i, r in enumerate(writes) if r.method == "DELETE" and r.path.endswith("/pods/low")
    ]
    assert nominations[0] < victim_deleted, "nominated before the room it was made for appears"
    victim_patches = [r.body for r in fake_api.requests_to("PATCH", "/pods/low/status$")]
    (victim_patch,) = victim_patches
    (condition,) = victim_patch["status"]["conditions"]
    assert condition["type"] == "DisruptionTarget"
    assert condition["reason"] == "PreemptionByScheduler"
    assert running.metrics.preemption_attempts._value.get() >= 1
    victims = running.metrics.preemption_victims
    assert victims._sum.get() == 1, "one preemption, one victim: never chosen twice"
    # events are written by the recorder's own thread, after the victim's deletion
    eventually(lambda: bool(h.events_for(fake_api, "low", "Preempted")))


def test_throttling_and_expired_watches_lose_nothing(fake_api: FakeAPIServer) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1", cpu="8"))
    scheduler = h.start(fake_api)
    try:
        fake_api.fail_next(6, status=429, method="POST", path="/binding$", retry_after=0.05)
        for i in range(5):
            cluster.create("pods", h.pod(f"t{i}"))
        cluster.expire_watches()  # every watch ends with 410: informers re-list
        for i in range(5, 10):
            cluster.create("pods", h.pod(f"t{i}"))
        eventually(lambda: all(node_of(fake_api, f"t{i}") for i in range(10)), timeout=20)
        assert scheduler.pending_pods.stats.relists_after_gone >= 1
        assert len(cluster.bindings) == 10
    finally:
        scheduler.stop(bind_timeout=2)
