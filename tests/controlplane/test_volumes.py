"""Pods with storage on the real control plane, nodeagent's scheduler and kube-scheduler
side by side.

The real kube-apiserver validates every object, and the real PV controller
(kube-controller-manager's persistentvolume-binder-controller) completes the bindings
the schedulers' VolumeBinding starts: a PV given a claimRef is bound to its claim, a
claim annotated with a selected node waits for its provisioner. Dynamic provisioning is
served by a small provisioner in the test (a thread that watches claims with the
selected-node annotation and creates a PV on that node, as an external provisioner
would).

Every scenario runs twice, once per scheduler, on nodes of its own (a label keeps each
run's pods on its nodes), and the two verdicts must be the same: which pods are bound,
where, which PV each claim got, and why the others wait.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.controlplane import objects as o
from tests.controlplane import processes, side_by_side
from tests.controlplane.cluster import ApiError, ControlPlane, Nodes, Rest
from tests.controlplane.test_scheduler import (
    refused_requests,
)
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

PROVISIONER = "test.nodeagent.example/provisioner"
NO_VOLUME = "didn't find available persistent volumes to bind"
RWOP = "ReadWriteOncePod access mode already in-use by another pod"
MAX_COUNT = "exceed max volume count"
DRIVER = "csi.nodeagent.example"


@dataclass(frozen=True)
class Run:
    """One scheduler's run of a scenario: its scheduler name, its nodes' prefix and
    label, its namespace."""

    scheduler: str
    prefix: str
    namespace: str

    def node(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    @property
    def selector(self) -> dict[str, str]:
        return {"volumes-run": self.prefix}


@pytest.fixture(scope="module")
def schedulers(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[processes.Process]:
    """nodeagent's scheduler as deployed and the real kube-scheduler, for the module."""
    with side_by_side.both_running(
        control_plane, "volumes", tmp_path_factory.mktemp("volumes")
    ) as ours:
        yield ours


@pytest.fixture(params=side_by_side.SCHEDULERS)
def run(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    schedulers: processes.Process,
    metrics_token: str,
) -> Iterator[Run]:
    scheduler = str(request.param)
    prefix = f"v{uuid.uuid4().hex[:6]}"
    namespace = control_plane.namespace(f"t-{prefix}")
    yield Run(scheduler, prefix, namespace)
    side_by_side.delete_namespace(control_plane, schedulers, metrics_token, namespace)
    admin = control_plane.admin
    for pv in admin.get("/api/v1/persistentvolumes")["items"]:
        if pv["metadata"]["name"].startswith(prefix):
            admin.request("DELETE", f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
    for sc in admin.get("/apis/storage.k8s.io/v1/storageclasses")["items"]:
        if sc["metadata"]["name"].startswith(prefix):
            admin.request(
                "DELETE", f"/apis/storage.k8s.io/v1/storageclasses/{sc['metadata']['name']}"
            )


# --- objects --------------------------------------------------------------------------------


def storage_class(
    name: str, *, provisioner: str = "kubernetes.io/no-provisioner"
) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def local_pv(name: str, node: str, sc: str, size: str = "1Gi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "storageClassName": sc,
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": f"/mnt/{name}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }


def csi_pv(name: str, handle: str, *, mode: str = "ReadWriteOnce") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "storageClassName": "",
            "capacity": {"storage": "1Gi"},
            "accessModes": [mode],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": DRIVER, "volumeHandle": handle},
        },
    }


def claim(
    name: str, namespace: str, sc: str, *, volume: str = "", mode: str = "ReadWriteOnce"
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "storageClassName": sc,
        "accessModes": [mode],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pod_with_claims(name: str, run: Run, *claims: str) -> dict[str, Any]:
    body = o.pod(name, run.namespace, scheduler=run.scheduler)
    body["spec"]["nodeSelector"] = run.selector
    body["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    return body


# --- reading the verdict -----------------------------------------------------------------------


def bound_node(admin: Rest, run: Run, pod: str) -> str:
    return str(o.get_pod(admin, run.namespace, pod)["spec"].get("nodeName") or "")


def pending_reason(admin: Rest, run: Run, pod: str) -> str:
    """The PodScheduled=False message, once the scheduler has tried the pod."""
    condition = o.pod_condition(o.get_pod(admin, run.namespace, pod), "PodScheduled")
    if condition is None or condition.get("status") != "False":
        return ""
    return str(condition.get("message") or "")


def claim_volume(admin: Rest, run: Run, name: str) -> str:
    found = admin.get(f"/api/v1/namespaces/{run.namespace}/persistentvolumeclaims/{name}")
    return (
        str(found["spec"].get("volumeName") or "")
        if found["status"].get("phase") == "Bound"
        else ""
    )


def stripped(run: Run, name: str) -> str:
    return name.removeprefix(f"{run.prefix}-")


def make_nodes(nodes: Nodes, run: Run, *suffixes: str) -> None:
    for suffix in suffixes:
        nodes.create(o.node(run.node(suffix), labels=run.selector))


def create(admin: Rest, path: str, body: dict[str, Any]) -> None:
    admin.create(path, body)


# --- scenarios ---------------------------------------------------------------------------------


def test_local_volumes_wait_for_first_consumer(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    """Two local PVs (no provisioner), three nodes: each pod goes where a PV is, each PV
    is bound to one claim by the PV controller."""
    admin = control_plane.admin
    sc = f"{run.prefix}-local"
    create(admin, "/apis/storage.k8s.io/v1/storageclasses", storage_class(sc))
    make_nodes(nodes, run, "a", "b", "c")
    for suffix in ("a", "b"):
        create(
            admin,
            "/api/v1/persistentvolumes",
            local_pv(run.node(f"pv-{suffix}"), run.node(suffix), sc),
        )
    for i in range(2):
        create(
            admin,
            f"/api/v1/namespaces/{run.namespace}/persistentvolumeclaims",
            claim(f"data-{i}", run.namespace, sc),
        )
        create(
            admin,
            f"/api/v1/namespaces/{run.namespace}/pods",
            pod_with_claims(f"db-{i}", run, f"data-{i}"),
        )
    placed = {
        pod: stripped(
            run,
            eventually(
                functools.partial(bound_node, admin, run, pod), timeout=90, what=f"{pod} bound"
            ),
        )
        for pod in ("db-0", "db-1")
    }
    assert sorted(placed.values()) == ["a", "b"]
    for i in range(2):
        volume = eventually(
            functools.partial(claim_volume, admin, run, f"data-{i}"), timeout=60, what="claim bound"
        )
        # the claim's PV is on the node its pod went to
        assert stripped(run, volume) == f"pv-{placed[f'db-{i}']}"


def test_a_burst_of_pods_competing_for_fewer_volumes(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    """Six pods, three local PVs: three pods bound, each PV to one claim only, three
    pods Pending with kube-scheduler's reason."""
    admin = control_plane.admin
    sc = f"{run.prefix}-local"
    create(admin, "/apis/storage.k8s.io/v1/storageclasses", storage_class(sc))
    make_nodes(nodes, run, "a", "b", "c")
    for suffix in ("a", "b", "c"):
        create(
            admin,
            "/api/v1/persistentvolumes",
            local_pv(run.node(f"pv-{suffix}"), run.node(suffix), sc),
        )
    pods = [f"burst-{i}" for i in range(6)]
    for i in range(len(pods)):
        create(
            admin,
            f"/api/v1/namespaces/{run.namespace}/persistentvolumeclaims",
            claim(f"c-{i}", run.namespace, sc),
        )
    for i, pod in enumerate(pods):
        create(
            admin, f"/api/v1/namespaces/{run.namespace}/pods", pod_with_claims(pod, run, f"c-{i}")
        )

    def settled() -> dict[str, str] | None:
        bound = {p: bound_node(admin, run, p) for p in pods}
        waiting = [p for p, n in bound.items() if not n]
        if len(waiting) == 3 and all(NO_VOLUME in pending_reason(admin, run, p) for p in waiting):
            return bound
        return None

    bound = eventually(settled, timeout=120, what="three pods bound, three waiting for a volume")
    assert sorted(stripped(run, n) for n in bound.values() if n) == ["a", "b", "c"]
    volumes = [
        eventually(
            functools.partial(claim_volume, admin, run, f"c-{i}"), timeout=60, what="claim bound"
        )
        for i, p in enumerate(pods)
        if bound[p]
    ]
    assert sorted(stripped(run, v) for v in volumes) == ["pv-a", "pv-b", "pv-c"]
    claimed = [
        pv["spec"]["claimRef"]["name"]
        for pv in admin.get("/api/v1/persistentvolumes")["items"]
        if pv["metadata"]["name"].startswith(run.prefix) and pv["spec"].get("claimRef")
    ]
    assert len(claimed) == len(set(claimed)) == 3  # each PV bound once, to one claim


def test_a_volume_created_later_makes_the_pod_schedulable(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    admin = control_plane.admin
    sc = f"{run.prefix}-local"
    create(admin, "/apis/storage.k8s.io/v1/storageclasses", storage_class(sc))
    make_nodes(nodes, run, "a", "b")
    create(
        admin,
        f"/api/v1/namespaces/{run.namespace}/persistentvolumeclaims",
        claim("late", run.namespace, sc),
    )
    create(
        admin, f"/api/v1/namespaces/{run.namespace}/pods", pod_with_claims("waiter", run, "late")
    )
    reason = eventually(
        lambda: pending_reason(admin, run, "waiter"), timeout=60, what="waiter tried"
    )
    assert NO_VOLUME in reason
    create(admin, "/api/v1/persistentvolumes", local_pv(run.node("pv-b"), run.node("b"), sc))
    node = eventually(lambda: bound_node(admin, run, "waiter"), timeout=90, what="waiter bound")
    assert stripped(run, node) == "b"


@contextlib.contextmanager
def provisioner(admin: Rest, run: Run, sc: str) -> Iterator[list[str]]:
    """An external provisioner for ``sc``: each claim annotated with a selected node gets a
    PV on that node, pre-bound to it; the PV controller binds the claim."""
    made: list[str] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.2):
            claims = admin.get(f"/api/v1/namespaces/{run.namespace}/persistentvolumeclaims")
            for item in claims["items"]:
                meta = item["metadata"]
                node = (meta.get("annotations") or {}).get("volume.kubernetes.io/selected-node")
                name = f"{run.prefix}-prov-{meta['name']}"
                if not node or item["spec"].get("storageClassName") != sc or name in made:
                    continue
                pv = local_pv(name, node, sc)
                pv["metadata"]["annotations"] = {"pv.kubernetes.io/provisioned-by": PROVISIONER}
                pv["spec"]["claimRef"] = {
                    "namespace": run.namespace,
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
                pv["spec"]["persistentVolumeReclaimPolicy"] = "Delete"
                with contextlib.suppress(ApiError):
                    create(admin, "/api/v1/persistentvolumes", pv)
                made.append(name)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        stop.set()
        thread.join(5)


def test_dynamic_provisioning_honours_the_selected_node(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    admin = control_plane.admin
    sc = f"{run.prefix}-dynamic"
    create(
        admin, "/apis/storage.k8s.io/v1/storageclasses", storage_class(sc, provisioner=PROVISIONER)
    )
    make_nodes(nodes, run, "a", "b")
    with provisioner(admin, run, sc) as made:
        create(
            admin,
            f"/api/v1/namespaces/{run.namespace}/persistentvolumeclaims",
            claim("dyn", run.namespace, sc),
        )
        create(
            admin, f"/api/v1/namespaces/{run.namespace}/pods", pod_with_claims("app", run, "dyn")
        )
        node = eventually(lambda: bound_node(admin, run, "app"), timeout=120, what="app bound")
    selected = admin.get(f"/api/v1/namespaces/{run.namespace}/persistentvolumeclaims/dyn")
    assert selected["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == node
    assert made == [f"{run.prefix}-prov-dyn"]
    assert eventually(lambda: claim_volume(admin, run, "dyn"), timeout=60) == made[0]


def bound_csi_claims(admin: Rest, run: Run, count: int, *, mode: str = "ReadWriteOnce") -> None:
    for i in range(count):
        pv = csi_pv(run.node(f"csi-{i}"), f"{run.prefix}-handle-{i}", mode=mode)
        create(admin, "/api/v1/persistentvolumes", pv)
        body = claim(f"csi-{i}", run.namespace, "", volume=pv["metadata"]["name"], mode=mode)
        create(admin, f"/api/v1/namespaces/{run.namespace}/persistentvolumeclaims", body)
        eventually(
            functools.partial(claim_volume, admin, run, f"csi-{i}"),
            timeout=60,
            what="csi claim bound",
        )


def test_csinode_attach_limits(control_plane: ControlPlane, nodes: Nodes, run: Run) -> None:
    """One node whose CSINode allows two volumes of the driver: the third pod waits."""
    admin = control_plane.admin
    make_nodes(nodes, run, "a")
    node = run.node("a")
    csi_node = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": node},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": node, "allocatable": {"count": 2}}]},
    }
    create(admin, "/apis/storage.k8s.io/v1/csinodes", csi_node)
    try:
        bound_csi_claims(admin, run, 3)
        for i in range(3):
            create(
                admin,
                f"/api/v1/namespaces/{run.namespace}/pods",
                pod_with_claims(f"att-{i}", run, f"csi-{i}"),
            )
            if i < 2:  # one at a time: which two fit is then not up to chance
                eventually(
                    functools.partial(bound_node, admin, run, f"att-{i}"),
                    timeout=60,
                    what=f"att-{i}",
                )
        reason = eventually(
            lambda: pending_reason(admin, run, "att-2"), timeout=60, what="att-2 tried"
        )
        assert MAX_COUNT in reason
        assert not bound_node(admin, run, "att-2")
    finally:
        admin.request("DELETE", f"/apis/storage.k8s.io/v1/csinodes/{node}")


def test_read_write_once_pod(control_plane: ControlPlane, nodes: Nodes, run: Run) -> None:
    admin = control_plane.admin
    make_nodes(nodes, run, "a", "b")
    bound_csi_claims(admin, run, 1, mode="ReadWriteOncePod")
    create(
        admin, f"/api/v1/namespaces/{run.namespace}/pods", pod_with_claims("first", run, "csi-0")
    )
    eventually(lambda: bound_node(admin, run, "first"), timeout=60, what="first bound")
    create(
        admin, f"/api/v1/namespaces/{run.namespace}/pods", pod_with_claims("second", run, "csi-0")
    )
    reason = eventually(
        lambda: pending_reason(admin, run, "second"), timeout=60, what="second tried"
    )
    assert RWOP in reason
    assert not bound_node(admin, run, "second")


def test_unbound_immediate_claim(control_plane: ControlPlane, nodes: Nodes, run: Run) -> None:
    """A claim of an Immediate class nothing can bind: kube-scheduler's message."""
    admin = control_plane.admin
    sc = f"{run.prefix}-immediate"
    body = storage_class(sc)
    body["volumeBindingMode"] = "Immediate"
    create(admin, "/apis/storage.k8s.io/v1/storageclasses", body)
    make_nodes(nodes, run, "a")
    create(
        admin,
        f"/api/v1/namespaces/{run.namespace}/persistentvolumeclaims",
        claim("imm", run.namespace, sc),
    )
    create(admin, f"/api/v1/namespaces/{run.namespace}/pods", pod_with_claims("app", run, "imm"))
    reason = eventually(lambda: pending_reason(admin, run, "app"), timeout=60, what="app tried")
    assert "pod has unbound immediate PersistentVolumeClaims" in reason


def test_the_shipped_role_allowed_every_request(
    schedulers: processes.Process, metrics_token: str
) -> None:
    """After the scenarios: no request of nodeagent's scheduler was refused (a verb the
    ClusterRole lacks, an object the API rejects), and it is still running."""
    assert refused_requests(schedulers, metrics_token) == []
    assert schedulers.alive(), schedulers.tail()
