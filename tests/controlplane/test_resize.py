"""In-place pod resize (KEP-1287, GA in 1.35) on the real apiserver, with nodeagent's
scheduler and the real kube-scheduler side by side, each on nodes of its own: the same
verdicts are required of both.

A resize goes through the real ``resize`` subresource; the kubelet's part (there is none
here) is written into the status as the kubelet writes it (``allocatedResources``, the
actual ``resources``, the ``PodResizePending``/``PodResizeInProgress`` conditions). While
spec and actual differ, a bound pod counts for the larger; an Infeasible resize counts
for what runs.

The requeue on a bound pod's update (the waiting pod scheduled once room appears) is
today the NodeResourcesFit registration of assigned-pod updates; issue 31a's queueing
hints (``isSchedulableAfterPodEvent``, a scale-down by ``extractPodScaleDown``) must keep
these scenarios passing: they count status resources through
:func:`nodeagent.k8s.resources.requests_scaled_down` over ``api.Pod.requests``."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane import objects as o
from tests.controlplane import side_by_side
from tests.controlplane.cluster import ControlPlane, Nodes, Rest
from tests.controlplane.test_scheduler import scheduler_kubeconfig
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]
__all__ = ["scheduler_kubeconfig"]  # the fixture, shared with test_scheduler

NODEAGENT = "nodeagent-scheduler"
KUBE_SCHEDULER = "default-scheduler"
IMAGE = "registry.k8s.io/pause:3.10"


def resize(admin: Rest, namespace: str, name: str, cpu: str) -> None:
    """``PATCH pods/NAME/resize``: what ``kubectl patch --subresource resize`` sends."""
    admin.call(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}/resize",
        {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}]}},
        content_type="application/strategic-merge-patch+json",
    )


def kubelet_status(
    admin: Rest,
    namespace: str,
    name: str,
    *,
    allocated: str,
    actual: str,
    condition: tuple[str, str] | None = None,
) -> None:
    """The status the kubelet writes for a running pod's one container: the allocated
    and actual cpu, and at most one resize condition (type, reason)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions: list[dict[str, Any]] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": now}
    ]
    if condition is not None:
        kind, reason = condition
        conditions.append(
            {"type": kind, "status": "True", "lastTransitionTime": now}
            | ({"reason": reason, "message": f"resize {reason.lower()}"} if reason else {})
        )
    admin.call(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}/status",
        {
            "status": {
                "phase": "Running",
                "conditions": conditions,
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "image": IMAGE,
                        "imageID": "",
                        "state": {"running": {"startedAt": now}},
                        "allocatedResources": {"cpu": allocated, "memory": "64Mi"},
                        "resources": {"requests": {"cpu": actual, "memory": "64Mi"}},
                    }
                ],
            }
        },
        content_type="application/merge-patch+json",
    )


def pinned(name: str, namespace: str, node: str, cpu: str, scheduler: str) -> dict[str, Any]:
    pod = o.pod(name, namespace, cpu=cpu, scheduler=scheduler)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def verdict(admin: Rest, namespace: str, name: str) -> str:
    """``bound to NODE``, ``Unschedulable: Insufficient cpu`` (the reason the pod's
    condition gives for its node), or "" while undecided."""
    pod = o.get_pod(admin, namespace, name)
    if pod["spec"].get("nodeName"):
        return f"bound to {pod['spec']['nodeName']}"
    condition = o.pod_condition(pod, "PodScheduled")
    if condition is None or condition.get("status") != "False":
        return ""
    insufficient = "Insufficient cpu" in str(condition.get("message"))
    return f"{condition.get('reason')}: {'Insufficient cpu' if insufficient else 'other'}"


@pytest.fixture
def both_schedulers(control_plane: ControlPlane, tmp_path: Path) -> Iterator[None]:
    with side_by_side.both_running(control_plane, "resize", tmp_path):
        yield


def _both(check: Callable[[str], str], what: str) -> dict[str, str]:
    """Each scheduler's first non-empty ``check(scheduler)``."""
    found = {}
    for scheduler in (NODEAGENT, KUBE_SCHEDULER):
        found[scheduler] = eventually(
            functools.partial(check, scheduler), timeout=60, what=f"{what} ({scheduler})"
        )
    return found


def _first(admin: Rest, namespace: str, scheduler: str) -> str:
    return verdict(admin, namespace, f"waiting-{scheduler}")


def _bound(admin: Rest, namespace: str, scheduler: str) -> str:
    found = verdict(admin, namespace, f"waiting-{scheduler}")
    return found if found.startswith("bound") else ""


@pytest.mark.usefixtures("both_schedulers")
def test_a_resize_down_counts_the_old_amount_until_actuated_then_frees_room(
    control_plane: ControlPlane, namespace: str, nodes: Nodes
) -> None:
    admin = control_plane.admin
    node = {NODEAGENT: "rz-down-ours", KUBE_SCHEDULER: "rz-down-theirs"}
    for scheduler, name in node.items():
        nodes.create(o.node(name, cpu="2"))
        big = o.pod(f"big-{scheduler}", namespace, cpu="1500m", node_name=name)
        admin.create(f"/api/v1/namespaces/{namespace}/pods", big)
        kubelet_status(admin, namespace, f"big-{scheduler}", allocated="1500m", actual="1500m")
        resize(admin, namespace, f"big-{scheduler}", "500m")
        # granted at once, not yet applied by the runtime: 1500m still counts
        kubelet_status(
            admin,
            namespace,
            f"big-{scheduler}",
            allocated="500m",
            actual="1500m",
            condition=("PodResizeInProgress", ""),
        )
        admin.create(
            f"/api/v1/namespaces/{namespace}/pods",
            pinned(f"waiting-{scheduler}", namespace, name, "1000m", scheduler),
        )
    refused = _both(functools.partial(_first, admin, namespace), "the first verdict")
    assert refused == dict.fromkeys(node, "Unschedulable: Insufficient cpu")
    for scheduler in node:
        kubelet_status(admin, namespace, f"big-{scheduler}", allocated="500m", actual="500m")
    placed = _both(
        functools.partial(_bound, admin, namespace),
        "the waiting pod bound once the resize is actuated",
    )
    assert placed == {s: f"bound to {n}" for s, n in node.items()}


@pytest.mark.usefixtures("both_schedulers")
def test_a_deferred_resize_up_counts_the_spec_an_infeasible_one_what_runs(
    control_plane: ControlPlane, namespace: str, nodes: Nodes
) -> None:
    admin = control_plane.admin
    node = {NODEAGENT: "rz-up-ours", KUBE_SCHEDULER: "rz-up-theirs"}
    for scheduler, name in node.items():
        nodes.create(o.node(name, cpu="2"))
        grow = o.pod(f"grow-{scheduler}", namespace, cpu="500m", node_name=name)
        admin.create(f"/api/v1/namespaces/{namespace}/pods", grow)
        kubelet_status(admin, namespace, f"grow-{scheduler}", allocated="500m", actual="500m")
        resize(admin, namespace, f"grow-{scheduler}", "1800m")
        kubelet_status(
            admin,
            namespace,
            f"grow-{scheduler}",
            allocated="500m",
            actual="500m",
            condition=("PodResizePending", "Deferred"),
        )
        admin.create(
            f"/api/v1/namespaces/{namespace}/pods",
            pinned(f"waiting-{scheduler}", namespace, name, "1000m", scheduler),
        )
    refused = _both(functools.partial(_first, admin, namespace), "the first verdict")
    assert refused == dict.fromkeys(node, "Unschedulable: Insufficient cpu")
    # the kubelet finds it can never grant it (the apiserver itself refuses a resize
    # beyond the node's allocatable; the kubelet may still, e.g. its static CPU policy)
    for scheduler in node:
        kubelet_status(
            admin,
            namespace,
            f"grow-{scheduler}",
            allocated="500m",
            actual="500m",
            condition=("PodResizePending", "Infeasible"),
        )
    placed = _both(
        functools.partial(_bound, admin, namespace),
        "the waiting pod bound once the resize is infeasible",
    )
    assert placed == {s: f"bound to {n}" for s, n in node.items()}


@pytest.mark.usefixtures("both_schedulers")
def test_balanced_allocation_prefers_the_node_the_pod_evens_out(
    control_plane: ControlPlane, namespace: str, nodes: Nodes
) -> None:
    """Not a resize: the scoring parity these side-by-side nodes allow. Two 4-cpu 4Gi
    nodes, one at 2 cpu 2Gi (balanced), one at 3 cpu 64Mi (cpu-heavy); a 100m 512Mi pod.
    BalancedAllocation before v1.36 (the balance with the pod) made the balanced node win
    (LeastAllocated 42 + 95 against 53 + 68); v1.36 scores the change the pod makes
    (42 + 72 against 53 + 77), so both schedulers must pick the cpu-heavy node."""
    admin = control_plane.admin
    for scheduler in (NODEAGENT, KUBE_SCHEDULER):
        for node, (cpu, memory) in {"even": ("2", "2Gi"), "skewed": ("3", "64Mi")}.items():
            name = f"ba-{node}-{scheduler}"
            nodes.create(o.node(name, cpu="4", memory="4Gi", labels={"ba-group": scheduler}))
            held = o.pod(f"held-{node}-{scheduler}", namespace, node_name=name)
            held["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu, "memory": memory}
            admin.create(f"/api/v1/namespaces/{namespace}/pods", held)
        pod = o.pod(f"balanced-{scheduler}", namespace, scheduler=scheduler)
        pod["spec"]["nodeSelector"] = {"ba-group": scheduler}
        pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "100m", "memory": "512Mi"}
        admin.create(f"/api/v1/namespaces/{namespace}/pods", pod)

    def placed(scheduler: str) -> str:
        found = verdict(admin, namespace, f"balanced-{scheduler}")
        return found if found.startswith("bound") else ""

    chosen = _both(placed, "the pod bound")
    assert chosen == {s: f"bound to ba-skewed-{s}" for s in (NODEAGENT, KUBE_SCHEDULER)}
