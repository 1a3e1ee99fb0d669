"""Issue 3's end-to-end scenario: a real tmpfs as nodefs fills past a hard threshold, and
the agent, talking to the fake API server through the real ``kubernetes`` client, taints
the node, raises its condition, evicts the right pod once with the hard grace period,
and clears both only after the transition period, across a restart, an API outage, and
in dry-run."""

from __future__ import annotations

import time

import pytest

from nodeagent.k8s.pressure import Pressure
from tests.doubles import kube as fake
from tests.e2e import harness
from tests.fakeapi import server

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]

DISK = "NodeAgentDiskPressure"
DISK_TAINT = ("nodeagent.io/disk-pressure", "NoSchedule")
TRANSITION = 2.0
FILL = 26 * harness.MIB


def status_history(api: server.FakeAPIServer, kind: str) -> list[str]:
    """Every status the agent wrote for condition ``kind``, in order."""
    statuses = []
    for request in api.requests_to("PATCH", r"/nodes/[^/]+/status$"):
        for condition in request.body["status"]["conditions"]:
            if condition["type"] == kind:
                statuses.append(condition["status"])
    return statuses


def taint_history(api: server.FakeAPIServer) -> list[bool]:
    """For every taint patch, whether it left the disk taint on the node."""
    history = []
    for request in api.requests_to("PATCH", r"/nodes/[^/]+$"):
        taints = (request.body.get("spec") or {}).get("taints")
        if taints is not None:
            history.append(any(t["key"] == DISK_TAINT[0] for t in taints))
    return history


def wait_published(cluster: fake.FakeCluster) -> None:
    harness.wait_for("the first condition", lambda: harness.condition_status(cluster, DISK))


def test_disk_fills_the_right_pod_goes_once_and_pressure_clears_after_the_transition(
    api: server.FakeAPIServer,
    cluster: fake.FakeCluster,
    nodefs: harness.Node,
    kubeconfig: object,
    kubelet: harness.FakeKubelet,
) -> None:
    pods = harness.seed_pods(cluster, nodefs)
    kubelet.cleanup_after = 0.8  # the hog's disk is freed a while after its eviction
    config = harness.e2e_config(nodefs, kubeconfig)  # type: ignore[arg-type]
    hog = pods["hog"]["metadata"]["uid"]

    with harness.RunningAgent(config):
        wait_published(cluster)
        assert harness.condition_status(cluster, DISK) == "False"
        nodefs.write(nodefs.empty_dir(hog), "fill", FILL)
        filled = time.monotonic()
        harness.wait_for("the hog's eviction", lambda: harness.accepted_evictions(cluster))
        evicted = time.monotonic()
        # the eviction goes first; the condition and the taint follow within a cycle
        harness.wait_for(
            "the condition", lambda: harness.condition_status(cluster, DISK) == "True", 2
        )
        harness.wait_for("the taint", lambda: DISK_TAINT in harness.own_taints(cluster), 2)
    # restart while the hog is still terminating and the disk still full
    assert "hog" not in kubelet.cleaned
    with harness.RunningAgent(config) as second:
        harness.wait_for("the hog's cleanup", lambda: kubelet.cleaned.get("hog"))
        relieved = kubelet.cleaned["hog"]
        harness.wait_for(
            "the condition to clear",
            lambda: harness.condition_status(cluster, DISK) == "False",
            timeout=TRANSITION + 5,
        )
        cleared = time.monotonic()
        harness.wait_for("the taint to go", lambda: not harness.own_taints(cluster), timeout=2)
        assert second.actuation.stats.applied > 0

    assert evicted - filled < 2.0
    assert harness.accepted_evictions(cluster) == [("hog", 1)]  # hard threshold: 1 s grace
    assert [e.name for e in cluster.evictions] == ["hog"]  # nobody else, nothing twice
    # held for the transition period after the last sample under pressure, which was
    # taken at most one filesystem poll (0.1 s) before the disk was freed
    assert cleared - relieved >= TRANSITION - 0.1 - 0.05
    assert cleared - relieved < TRANSITION + 2.0
    # the restart neither reset the condition nor flapped the taint
    history = status_history(api, DISK)
    assert history[0] == "False" and history[-1] == "False"
    assert history[1:-1] and set(history[1:-1]) == {"True"}
    assert taint_history(api) == [True, False]
    evicted_events = [e for e in cluster.list("events").items if e["reason"] == "Evicted"]
    assert [e["involvedObject"]["name"] for e in evicted_events] == ["hog"]
    assert "The node was low on resource: ephemeral-storage." in evicted_events[0]["message"]


def test_an_api_outage_delays_actions_but_loses_and_repeats_nothing(
    api: server.FakeAPIServer,
    cluster: fake.FakeCluster,
    nodefs: harness.Node,
    kubeconfig: object,
    kubelet: harness.FakeKubelet,
) -> None:
    pods = harness.seed_pods(cluster, nodefs)
    config = harness.e2e_config(nodefs, kubeconfig)  # type: ignore[arg-type]
    with harness.RunningAgent(config) as agent:
        wait_published(cluster)
        with api.outage(refuse=True):
            nodefs.write(nodefs.empty_dir(pods["hog"]["metadata"]["uid"]), "fill", FILL)
            harness.wait_for(
                "a decision to evict during the outage",
                lambda: agent.loop.last is not None and agent.loop.last.decision.evictions,
            )
            assert agent.loop.last is not None
            assert agent.loop.last.decision.pressure[Pressure.DISK]
            harness.wait_for("readiness to fail", lambda: not agent.health.readiness().ok)
            time.sleep(1.0)  # the loop keeps deciding; nothing can be sent
            assert cluster.evictions == []
            cycles = agent.loop.cycles
            time.sleep(0.5)
            assert agent.loop.cycles > cycles
        harness.wait_for("the eviction after the outage", lambda: cluster.evictions)
        harness.wait_for("the condition", lambda: harness.condition_status(cluster, DISK) == "True")
        harness.wait_for("readiness", lambda: agent.health.readiness().ok)
        harness.wait_for("the hog's cleanup", lambda: kubelet.cleaned.get("hog"))
        harness.wait_for(
            "the condition to clear",
            lambda: harness.condition_status(cluster, DISK) == "False",
            timeout=TRANSITION + 5,
        )
    assert harness.accepted_evictions(cluster) == [("hog", 1)]
    assert [e.name for e in cluster.evictions] == ["hog"]


def test_dry_run_decides_logs_and_marks_events_but_changes_nothing(
    api: server.FakeAPIServer,
    cluster: fake.FakeCluster,
    nodefs: harness.Node,
    kubeconfig: object,
) -> None:
    pods = harness.seed_pods(cluster, nodefs)
    config = harness.e2e_config(nodefs, kubeconfig, dry_run=True)  # type: ignore[arg-type]
    with harness.RunningAgent(config) as agent:
        harness.wait_for("the first evaluation", lambda: agent.loop.cycles > 2)
        nodefs.write(nodefs.empty_dir(pods["hog"]["metadata"]["uid"]), "fill", FILL)
        events = harness.wait_for(
            "the dry-run eviction event",
            lambda: [e for e in cluster.list("events").items if e["reason"] == "EvictedDryRun"],
        )
        time.sleep(1.0)
        exposition = agent.metrics.exposition().decode()
    assert [e["involvedObject"]["name"] for e in events] == ["hog"]
    assert events[0]["message"].startswith("[dry-run] ")
    assert events[0]["metadata"]["annotations"] == {"nodeagent.io/dry-run": "true"}
    changes = [
        r for r in api.writes() if not r.path.startswith("/api/v1/namespaces/default/events")
    ]
    assert changes == []
    assert cluster.evictions == []
    assert harness.condition_status(cluster, DISK) is None
    assert (
        'nodeagent_evictions_total{outcome="dry_run",qos="BestEffort",'
        'signal="nodefs.available"} 1.0' in exposition
    )
