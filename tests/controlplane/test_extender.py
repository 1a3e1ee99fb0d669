"""``nodeagent extender`` behind the real kube-scheduler, wired as manifests/extender
ships it: its kube-scheduler configuration (HTTPS, the certificate checked against a CA
and the Service's serverName, node names only), its ServiceAccount's token under the
shipped ClusterRole. Real pods scheduled by the real scheduler avoid the nodes the
agent reports under pressure."""

from __future__ import annotations

import functools
import json
import re
import time
from typing import Any

import pytest
import yaml

from nodeagent.k8s.pressure import DEFAULT_CONDITION_TYPES, PRESSURE_ANNOTATION, Pressure
from tests.controlplane import objects as o
from tests.controlplane import processes, scrape
from tests.controlplane.cluster import ControlPlane, Nodes, free_port
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

SERVER_NAME = "nodeagent-extender.nodeagent-system.svc"


def pressure_annotation(available: int, capacity: int, threshold: int) -> str:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    signal = {"available": available, "capacity": capacity, "threshold": threshold}
    return json.dumps({"time": now, "signals": {"memory.available": signal}})


def annotated(node: dict[str, Any], annotation: str) -> dict[str, Any]:
    node["metadata"]["annotations"] = {PRESSURE_ANNOTATION: annotation}
    return node


def shipped_scheduler_config(plane: ControlPlane, extender_port: int) -> dict[str, Any]:
    """manifests/extender/kube-scheduler-config.yaml, pointed at the extender on loopback
    (urlPrefix; a control-plane host would use the Service) with this plane's CA."""
    document = yaml.safe_load((o.MANIFESTS / "extender" / "kube-scheduler-config.yaml").read_text())
    [extender] = document["extenders"]
    assert extender["tlsConfig"]["serverName"] == SERVER_NAME
    extender["urlPrefix"] = f"https://127.0.0.1:{extender_port}"
    extender["tlsConfig"]["caFile"] = str(plane.ca.certificate)
    return {"extenders": [extender], "leaderElection": {"leaderElect": False}}


class TestExtenderBehindKubeScheduler:
    def test_pods_avoid_the_nodes_the_agent_reports_under_pressure(
        self,
        *,
        control_plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        metrics_token: str,
    ) -> None:
        plane = control_plane
        plane.apply(
            [d for d in o.kustomize(o.MANIFESTS) if d["kind"] == "Namespace"]
            + o.kustomize(o.MANIFESTS / "extender")
        )
        kubeconfig = plane.service_account_kubeconfig("nodeagent-system", "nodeagent-extender")
        tls = plane.ca.issue("extender", SERVER_NAME, hosts=(SERVER_NAME, "127.0.0.1"))
        port = free_port()
        extender = processes.nodeagent(
            plane,
            "extender",
            [
                "extender",
                f"--kubeconfig={kubeconfig}",
                f"--listen=127.0.0.1:{port}",
                f"--tls-cert-file={tls.certificate}",
                f"--tls-private-key-file={tls.key}",
                "--log-format=json",
            ],
            port=port,
        )
        gib = 1 << 30
        nodes.create(
            annotated(o.node("ext-calm", cpu="4"), pressure_annotation(6 * gib, 8 * gib, gib // 2))
        )
        nodes.create(
            annotated(o.node("ext-nearing", cpu="4"), pressure_annotation(gib, 8 * gib, gib // 2))
        )
        pressed = o.node("ext-pressed", cpu="4")
        pressed["status"]["conditions"].append(
            {
                "type": DEFAULT_CONDITION_TYPES[Pressure.MEMORY],
                "status": "True",
                "reason": "MemoryPressure",
            }
        )
        nodes.create(pressed)
        scheduler = processes.kube_scheduler(
            plane, "kube-scheduler-extender", shipped_scheduler_config(plane, port)
        )
        with processes.stopped_after(scheduler, extender):
            # kube-scheduler reaches a deployed extender through its Service, so only once
            # it is ready (its view listed); here it is called directly: wait until the
            # view holds the cluster's nodes, or the calls would see unknown nodes (pass)
            cluster_nodes = len(plane.admin.get("/api/v1/nodes")["items"])
            eventually(
                lambda: (
                    not extender.alive()
                    or view_size(_safe(scrape.metrics, extender, metrics_token)) == cluster_nodes
                ),
                timeout=60,
                what=f"the extender's view of the {cluster_nodes} nodes",
            )
            assert extender.alive(), extender.tail()
            names = [f"ext-{i}" for i in range(6)]
            for name in names:
                plane.admin.create(
                    f"/api/v1/namespaces/{namespace}/pods",
                    o.pod(name, namespace, scheduler="default-scheduler"),
                )
            placed = {
                name: eventually(
                    functools.partial(bound_node, plane, namespace, name),
                    timeout=60,
                    what=f"{name} bound by kube-scheduler",
                )
                for name in names
            }
            assert set(placed.values()) == {"ext-calm"}, placed
            served = answered(scrape.metrics(extender, metrics_token))
            # kube-scheduler asked for every pod, and every answer was a 200
            assert served.get(("filter", "200"), 0) >= len(names), served
            assert served.get(("prioritize", "200"), 0) >= len(names), served
            assert {code for _, code in served} == {"200"}, served
            assert scheduler.alive(), scheduler.tail()


def bound_node(plane: ControlPlane, namespace: str, name: str) -> str | None:
    node: str | None = o.get_pod(plane.admin, namespace, name)["spec"].get("nodeName")
    return node


def view_size(metrics: str) -> int | None:
    """The nodes in the extender's view once it has listed (None before, or unreadable)."""
    found = dict(
        re.findall(
            r"^(nodeagent_extender_node_view_synced|nodeagent_extender_nodes) (\S+)$", metrics, re.M
        )
    )
    if float(found.get("nodeagent_extender_node_view_synced", 0)) != 1:
        return None
    return int(float(found.get("nodeagent_extender_nodes", -1)))


def answered(metrics: str) -> dict[tuple[str, str], float]:
    """nodeagent_extender_requests_total by (verb, code)."""
    pattern = re.compile(r'^nodeagent_extender_requests_total\{code="(\d+)",verb="(\w+)"\} (\S+)$')
    return {
        (m.group(2), m.group(1)): float(m.group(3))
        for line in metrics.splitlines()
        if (m := pattern.match(line))
    }


def _safe(read: Any, *args: Any) -> str:
    try:
        text: str = read(*args)
        return text
    except OSError:
        return ""
