"""Scheduling onto the real node: pods placed by ``nodeagent scheduler`` (as
manifests/scheduler ships it) and by the real kube-scheduler calling ``nodeagent
extender`` (as manifests/extender ships it) start and run under the real kubelet; while
the agent taints the node for pressure, neither places a new pod there, and both do
once the agent lifts the taint."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.controlplane import objects as o
from tests.controlplane import processes
from tests.controlplane.cluster import ControlPlane, free_port
from tests.controlplane.test_extender import SERVER_NAME, shipped_scheduler_config
from tests.controlplane.test_scheduler import shipped_config
from tests.node import agent as agents
from tests.node import pods
from tests.node.node import Node
from tests.node.test_node import DISK_TAINT, ballast, taint_keys
from tests.waiting import eventually

pytestmark = [pytest.mark.node, pytest.mark.slow]


def schedulers(
    plane: ControlPlane, tmp_path: Path
) -> tuple[processes.Process, processes.Process, processes.Process]:
    """``nodeagent scheduler``, ``nodeagent extender`` and kube-scheduler calling it."""
    plane.apply(o.kustomize(o.MANIFESTS / "scheduler"))
    plane.apply(
        [d for d in o.kustomize(o.MANIFESTS) if d["kind"] == "Namespace"]
        + o.kustomize(o.MANIFESTS / "extender")
    )
    scheduler = processes.nodeagent_scheduler(
        plane,
        "nodeagent-scheduler",
        kubeconfig=plane.service_account_kubeconfig("nodeagent-scheduler", "nodeagent-scheduler"),
        config=shipped_config(tmp_path, lease_seconds=4),
    )
    tls = plane.ca.issue("extender", SERVER_NAME, hosts=(SERVER_NAME, "127.0.0.1"))
    port = free_port()
    extender_kubeconfig = plane.service_account_kubeconfig("nodeagent-system", "nodeagent-extender")
    extender = processes.nodeagent(
        plane,
        "extender",
        [
            "extender",
            f"--kubeconfig={extender_kubeconfig}",
            f"--listen=127.0.0.1:{port}",
            f"--tls-cert-file={tls.certificate}",
            f"--tls-private-key-file={tls.key}",
            "--log-format=json",
        ],
        port=port,
    )
    kube_scheduler = processes.kube_scheduler(
        plane, "kube-scheduler", shipped_scheduler_config(plane, port)
    )
    return scheduler, extender, kube_scheduler


def submit(node: Node, namespace: str, name: str, scheduler: str) -> None:
    pod = pods.workload(
        name, namespace, ["pause"], scheduler=scheduler, requests={"cpu": "10m", "memory": "16Mi"}
    )
    pods.create(node.plane, pod)


def unschedulable(node: Node, namespace: str, name: str) -> bool:
    pod = pods.get(node.plane, namespace, name) or {}
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return bool(
                condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
            )
    return False


class TestSchedulingOntoTheNode:
    def test_both_schedulers_place_pods_that_run_and_avoid_the_tainted_node(
        self, node: Node, namespace: str, tmp_path: Path
    ) -> None:
        plane = node.plane
        started = schedulers(plane, tmp_path)
        with processes.stopped_after(*started):
            by = {
                "nodeagent-scheduler": "placed-by-nodeagent",
                "default-scheduler": "placed-by-kube",
            }
            for scheduler, name in by.items():
                submit(node, namespace, name, scheduler)
            for name in by.values():
                running = pods.wait_running(plane, namespace, name, timeout=90)
                assert running["spec"]["nodeName"] == node.name
            path = ballast(node, 0.5)
            try:
                with agents.running(
                    node,
                    [
                        "--eviction-hard=nodefs.available<60%",
                        "--eviction-pressure-transition-period=2s",
                    ],
                ):
                    eventually(lambda: DISK_TAINT in taint_keys(node), timeout=60, what="the taint")
                    waiting = {
                        "nodeagent-scheduler": "waits-nodeagent",
                        "default-scheduler": "waits-kube",
                    }
                    for scheduler, name in waiting.items():
                        submit(node, namespace, name, scheduler)
                    for name in waiting.values():
                        eventually(
                            lambda name=name: unschedulable(node, namespace, name),  # type: ignore[misc]
                            timeout=60,
                            what=f"{name} refused by its scheduler",
                        )
                        assert not (pods.get(plane, namespace, name) or {})["spec"].get("nodeName")
                    path.unlink()
                    eventually(
                        lambda: DISK_TAINT not in taint_keys(node),
                        timeout=60,
                        what="the taint lifted",
                    )
                    for name in waiting.values():
                        pods.wait_running(plane, namespace, name, timeout=90)
            finally:
                path.unlink(missing_ok=True)
            for process in started:
                assert process.alive(), process.tail()
