"""``nodeagent run`` in cluster mode against the real apiserver, with the shipped RBAC
(manifests/: its ServiceAccount's token, its ClusterRole) and real signals from a real
tmpfs as nodefs (as tests/e2e): the node's condition and taint patched for real and
adopted on restart; evictions through the real Eviction API, where a
PodDisruptionBudget whose status the real disruption controller keeps answers 429;
events the real apiserver accepts."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.controlplane import objects as o
from tests.controlplane import scrape
from tests.controlplane.cluster import ApiError, ControlPlane, Nodes
from tests.e2e import harness
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.kernel, pytest.mark.slow]

NODE = harness.NODE
DISK = "NodeAgentDiskPressure"
DISK_TAINT = "nodeagent.io/disk-pressure"
FILL = 26 * harness.MIB
TRANSITION = 2.0


@pytest.fixture
def nodefs(tmp_path: Path) -> Iterator[harness.Node]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    with harness.mounted_tmpfs(tmp_path / "nodefs", 32) as root:
        yield harness.Node(root)


class Kubelet:
    """Stands in for the node's kubelet: a pod being deleted has its disk freed and its
    object removed (a deletion with grace 0, as the kubelet confirms a termination)."""

    def __init__(self, plane: ControlPlane, namespace: str, node: harness.Node) -> None:
        self._plane, self._namespace, self._node = plane, namespace, node
        self._stop = threading.Event()
        self.finished: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self._namespace}/pods"
        while not self._stop.wait(0.1):
            for pod in self._plane.admin.get(path)["items"]:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp") and meta["name"] not in self.finished:
                    self._node.remove_pod(self._namespace, meta["name"], meta["uid"])
                    self._plane.admin.request(
                        "DELETE", f"{path}/{meta['name']}", {"gracePeriodSeconds": 0}
                    )
                    self.finished.append(meta["name"])


def node_condition(plane: ControlPlane, kind: str) -> dict[str, Any] | None:
    node = plane.admin.get(f"/api/v1/nodes/{NODE}")
    for condition in node["status"].get("conditions") or ():
        if condition["type"] == kind:
            return dict(condition)
    return None


def own_taints(plane: ControlPlane) -> list[str]:
    taints = plane.admin.get(f"/api/v1/nodes/{NODE}")["spec"].get("taints") or ()
    return [t["key"] for t in taints if t["key"].startswith("nodeagent.io/")]


def refused(registry: CollectorRegistry) -> list[dict[str, str]]:
    """The agent's API requests answered 401/403/422 (a verb the shipped ClusterRole
    lacks, a field the real API rejects)."""
    return [
        sample.labels
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == "nodeagent_api_requests_total"
        and sample.labels["code"] in {"401", "403", "422"}
        and sample.value
    ]


def evictions(registry: CollectorRegistry, outcome: str) -> float:
    return sum(
        sample.value
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == "nodeagent_evictions_total" and sample.labels["outcome"] == outcome
    )


class TestAgentOnTheRealApiserver:
    def test_pressure_a_blocking_budget_and_a_restart(
        self,
        *,
        control_plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        nodefs: harness.Node,
        metrics_token: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        caplog.set_level(logging.INFO, logger="nodeagent.serving")
        plane = control_plane
        admin = plane.admin
        shipped = o.kustomize(o.MANIFESTS)
        plane.apply(shipped)
        nodes.create(o.node(NODE))
        token = o.agent_pod_token(plane, shipped, "nodeagent-on-node", NODE)
        kubeconfig = plane.write_kubeconfig("agent-on-node", token=token)
        uids = {}
        for name in ("hog", "spare"):
            pod = o.pod(name, namespace, labels={"app": name}, node_name=NODE)
            pod["spec"]["containers"][0]["resources"] = {}  # BestEffort
            pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
            uids[name] = admin.create(f"/api/v1/namespaces/{namespace}/pods", pod)["metadata"][
                "uid"
            ]
            o.running(admin, namespace, name)
        nodefs.write(nodefs.empty_dir(uids["hog"]), "seed", harness.MIB)
        nodefs.write(nodefs.logs(namespace, "spare", uids["spare"]), "0.log", 256 * 1024)
        budgets = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
        admin.create(
            budgets,
            {
                "metadata": {"name": "hog"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "hog"}}},
            },
        )

        def allowed() -> int | None:
            status = admin.get(f"{budgets}/hog").get("status") or {}
            return status.get("disruptionsAllowed") if "currentHealthy" in status else None

        assert eventually(lambda: allowed() is not None) and allowed() == 0
        config = harness.e2e_config(nodefs, kubeconfig)

        with Kubelet(plane, namespace, nodefs) as kubelet:
            with harness.RunningAgent(config) as first:
                first_registry = first.metrics.registry
                eventually(lambda: node_condition(plane, DISK), what="the first condition")
                assert node_condition(plane, DISK)["status"] == "False"  # type: ignore[index]
                nodefs.write(nodefs.empty_dir(uids["hog"]), "fill", FILL)
                # the hog's budget refuses (429): the next candidate goes instead
                eventually(lambda: "spare" in kubelet.finished, what="spare evicted")
                eventually(lambda: evictions(first_registry, "blocked_by_pdb") >= 1, what="a 429")
                eventually(
                    lambda: (node_condition(plane, DISK) or {}).get("status") == "True",
                    what="the condition",
                )
                eventually(lambda: DISK_TAINT in own_taints(plane), what="the taint")
                raised = node_condition(plane, DISK)
                assert refused(first_registry) == []
                # its /metrics as Prometheus reads it: reviewed by the real apiserver
                assert first.server is not None
                served = scrape.Endpoint(
                    "agent", first.server.port, scrape.logged_fingerprint(caplog.records)
                )
                assert "nodeagent_evictions_total" in scrape.metrics(served, metrics_token)
                assert scrape.get(served, "/metrics").status == 401
            hog = o.get_pod(admin, namespace, "hog")
            assert "deletionTimestamp" not in hog["metadata"]

            # a restart under pressure adopts the condition and the taint as they are
            with harness.RunningAgent(config) as second:
                eventually(lambda: second.loop.cycles >= 3, what="three cycles")
                again = node_condition(plane, DISK)
                assert again is not None and raised is not None
                assert again["status"] == "True"
                assert again["lastTransitionTime"] == raised["lastTransitionTime"]
                assert DISK_TAINT in own_taints(plane)
                # the budget allows one disruption again: the real Eviction API accepts
                # the hog only once the real disruption controller says so. (Waiting for
                # disruptionsAllowed 1 itself would race the agent: it evicts within a
                # cycle, and the status falls back to 0 as the hog goes.)
                admin.merge_patch(f"{budgets}/hog", {"spec": {"minAvailable": 0}})
                eventually(lambda: "hog" in kubelet.finished, what="hog evicted")
                eventually(
                    lambda: (node_condition(plane, DISK) or {}).get("status") == "False",
                    timeout=TRANSITION + 15,
                    what="the condition to clear",
                )
                eventually(lambda: not own_taints(plane), what="the taint to go")
                assert refused(second.metrics.registry) == []

        def evicted() -> list[dict[str, Any]]:
            return o.events(admin, namespace, reason="Evicted")

        eventually(
            lambda: sorted(e["involvedObject"]["name"] for e in evicted()) == ["hog", "spare"],
            what="Evicted events for hog and spare",
        )
        assert all("ephemeral-storage" in e["message"] for e in evicted())
        eventually(
            lambda: [
                e
                for e in o.events(admin, "default", reason="EvictionThresholdMet")
                if e["involvedObject"]["name"] == NODE
            ],
            what="EvictionThresholdMet on the node",
        )
        # the real Eviction API marked each pod it evicted
        with pytest.raises(ApiError) as gone:
            o.get_pod(admin, namespace, "hog")
        assert gone.value.status == 404
