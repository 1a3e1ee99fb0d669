"""Local-storage limits end to end: on a real tmpfs laid out as the kubelet's root and
log directories, a pod whose emptyDir outgrows its ``sizeLimit`` and a pod whose logs
outgrow its ephemeral-storage limit are both evicted in one cycle through the Eviction
API (1 s grace, the kubelet's messages), with no disk threshold anywhere near, and the
pods within their limits, and a critical pod over its limit, stay."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.doubles import kube as fake
from tests.e2e import harness
from tests.fakeapi import objects, server

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(60)]


def _with_scratch(pod: dict[str, Any], size_limit: str) -> dict[str, Any]:
    pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {"sizeLimit": size_limit}}]
    return pod


def test_pods_over_their_local_storage_limits_are_evicted_with_the_kubelets_messages(
    api: server.FakeAPIServer,
    cluster: fake.FakeCluster,
    nodefs: harness.Node,
    kubeconfig: object,
    kubelet: harness.FakeKubelet,
) -> None:
    node = harness.NODE
    specs = {
        "scratchy": _with_scratch(objects.pod("scratchy", node_name=node), "2Mi"),
        "roomy": _with_scratch(objects.pod("roomy", node_name=node), "8Mi"),
        "chatty": objects.pod("chatty", node_name=node, limits={"ephemeral-storage": "1Mi"}),
        "critical": objects.pod(
            "critical",
            namespace="kube-system",
            node_name=node,
            priority=2_000_001_000,
            limits={"ephemeral-storage": "1Mi"},
        ),
    }
    uid = {name: cluster.create("pods", spec)["metadata"]["uid"] for name, spec in specs.items()}
    config = harness.e2e_config(nodefs, kubeconfig)  # type: ignore[arg-type]
    with harness.RunningAgent(config) as agent:
        harness.wait_for("the first evaluation", lambda: agent.loop.cycles > 2)
        assert cluster.evictions == []
        nodefs.write(nodefs.empty_dir(uid["roomy"]), "fill", 3 * harness.MIB)
        nodefs.write(nodefs.empty_dir(uid["scratchy"]), "fill", 3 * harness.MIB)
        nodefs.write(
            nodefs.logs("default", "chatty", uid["chatty"]) / "main", "0.log", 2 * harness.MIB
        )
        nodefs.write(
            nodefs.logs("kube-system", "critical", uid["critical"]) / "main",
            "0.log",
            2 * harness.MIB,
        )
        written = time.monotonic()
        harness.wait_for("both evictions", lambda: len(harness.accepted_evictions(cluster)) == 2)
        evicted = time.monotonic()
        decision = agent.loop.last.decision if agent.loop.last is not None else None
        time.sleep(1.0)  # nothing more follows
        exposition = agent.metrics.exposition().decode()

    assert evicted - written < 2.0  # one storage scan (0.2 s) and a cycle
    assert sorted(harness.accepted_evictions(cluster)) == [("chatty", 1), ("scratchy", 1)]
    assert sorted(e.name for e in cluster.evictions) == ["chatty", "scratchy"]
    messages = {
        e["involvedObject"]["name"]: e["message"]
        for e in cluster.list("events").items
        if e["reason"] == "Evicted"
    }
    assert messages == {
        "scratchy": 'Usage of EmptyDir volume "data" exceeds the limit "2Mi". ',
        "chatty": "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ",
    }
    assert decision is not None and not any(decision.pressure.values())
    for signal in ("emptydirfs.limit", "ephemeralpodfs.limit"):
        assert (
            f'nodeagent_evictions_total{{outcome="evicted",qos="BestEffort",signal="{signal}"}} 1.0'
            in exposition
        )
