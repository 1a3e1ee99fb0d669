"""A pod waiting for room is scheduled when a bound pod makes room, on the real
apiserver, by ``nodeagent scheduler`` and by the real kube-scheduler v1.36 alike: the
bound pod deleted (``AssignedPodDelete``) or resized down through the real ``resize``
subresource with its status then written as the kubelet writes it
(``AssignedPodUpdatePodScaleDown``, ``isPodResourcesResizedDown``). With QueueingHints
the waiting pod moves on that event alone; both schedulers must give the same verdict:
unschedulable first (``Insufficient cpu``), then bound to the node."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane import objects as o
from tests.controlplane import processes
from tests.controlplane.cluster import ControlPlane, Nodes
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

SCHEDULER_NAME = {"nodeagent": "nodeagent-scheduler", "kube-scheduler": "default-scheduler"}


def start(plane: ControlPlane, which: str, name: str, tmp_path: Path) -> processes.Process:
    if which == "kube-scheduler":
        return processes.kube_scheduler(
            plane,
            name,
            {
                "leaderElection": {"leaderElect": False},
                "clientConnection": {"kubeconfig": str(plane.scheduler_kubeconfig)},
            },
        )
    document = yaml.safe_load((o.MANIFESTS / "scheduler" / "config.yaml").read_text())
    document["leaderElection"] = {"leaderElect": False}
    config = tmp_path / "scheduler.yaml"
    config.write_text(yaml.safe_dump(document))
    return processes.nodeagent_scheduler(
        plane, name, kubeconfig=plane.scheduler_kubeconfig, config=config
    )


def resize_down(plane: ControlPlane, namespace: str, name: str, cpu: str) -> None:
    """The ``resize`` subresource, then the status the kubelet writes once it has
    actuated the resize (allocated and actual resources, the resize conditions gone)."""
    admin = plane.admin
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    requests = {"cpu": cpu, "memory": "64Mi"}
    admin.call(
        "PATCH",
        f"{path}/resize",
        {"spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]}},
        content_type="application/strategic-merge-patch+json",
    )
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "imageID": "",
        "ready": True,
        "restartCount": 0,
        "started": True,
        "state": {"running": {"startedAt": now}},
        "allocatedResources": requests,
        "resources": {"requests": requests},
    }
    admin.merge_patch(f"{path}/status", {"status": {"containerStatuses": [status]}})


def bound_node(plane: ControlPlane, namespace: str, name: str) -> str:
    return str(o.get_pod(plane.admin, namespace, name)["spec"].get("nodeName") or "")


@pytest.mark.parametrize("which", ["nodeagent", "kube-scheduler"])
@pytest.mark.parametrize("room", ["deleted", "resized-down"])
def test_a_waiting_pod_is_scheduled_when_a_bound_pod_makes_room(
    *,
    control_plane: ControlPlane,
    namespace: str,
    nodes: Nodes,
    tmp_path: Path,
    which: str,
    room: str,
) -> None:
    admin = control_plane.admin
    node = f"room-{which}-{room}"
    nodes.create(o.node(node, cpu="1"))
    pods = f"/api/v1/namespaces/{namespace}/pods"
    admin.create(pods, o.pod("big", namespace, cpu="800m", node_name=node))
    o.running(admin, namespace, "big")
    scheduler = start(control_plane, which, node, tmp_path)
    with processes.stopped_after(scheduler):
        admin.create(pods, o.pod("waiting", namespace, cpu="500m", scheduler=SCHEDULER_NAME[which]))

        def refused() -> dict[str, Any] | None:
            condition = o.pod_condition(o.get_pod(admin, namespace, "waiting"), "PodScheduled")
            return condition if condition and condition["status"] == "False" else None

        condition = eventually(refused, timeout=60, what=f"{which} finds no room for the pod")
        assert "Insufficient cpu" in condition["message"], condition
        assert bound_node(control_plane, namespace, "waiting") == ""
        if room == "deleted":
            admin.delete(f"{pods}/big", {"gracePeriodSeconds": 0})
        else:
            resize_down(control_plane, namespace, "big", "200m")
        # well inside the 5-minute flush and the 10 s longest backoff: the event moved it
        eventually(
            functools.partial(bound_node, control_plane, namespace, "waiting"),
            timeout=30,
            what=f"{which} schedules the waiting pod once the bound pod is {room}",
        )
        assert bound_node(control_plane, namespace, "waiting") == node
    if which == "nodeagent":
        assert scheduler.popen.returncode == 0, scheduler.tail()
