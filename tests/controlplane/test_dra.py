"""Pods with ResourceClaims on the real control plane, nodeagent's scheduler and
kube-scheduler side by side.

The real kube-apiserver validates every DRA object (and authorizes the schedulers'
status writes with resourceclaims/binding), the real resourceclaim controller
(kube-controller-manager) makes claims from templates and writes their names to the
pods' ``status.resourceClaimStatuses``. Devices are published as a DRA driver's kubelet
plugin does: one ResourceSlice per node, the pool named after the node.

Every scenario runs twice, once per scheduler, on nodes of its own (a label keeps each
run's pods on its nodes, a driver name of its own keeps its devices apart), and the two
verdicts must be the same: which pods are bound, where, which devices each claim got,
and why the others wait.
"""

from __future__ import annotations

import functools
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.controlplane import objects as o
from tests.controlplane import processes, scrape, side_by_side
from tests.controlplane.cluster import ControlPlane, Nodes, Rest
from tests.controlplane.test_scheduler import (
    refused_requests,
)
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

API = "/apis/resource.k8s.io/v1"
CANNOT_ALLOCATE = "cannot allocate all claims"
VERDICTS: dict[str, dict[str, Any]] = {}
"""Scenario -> scheduler -> what the run ended with (compared once both ran)."""


@dataclass(frozen=True)
class Run:
    scheduler: str
    prefix: str
    namespace: str

    def node(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    @property
    def driver(self) -> str:
        return f"{self.prefix}.gpu.nodeagent.example"

    @property
    def device_class(self) -> str:
        return f"{self.prefix}-gpu"

    @property
    def selector(self) -> dict[str, str]:
        return {"dra-run": self.prefix}

    @property
    def extended_resource(self) -> str:
        """The extended resource the run's class backs (``extendedResourceName``)."""
        return f"{self.prefix}.nodeagent.example/gpu"


@pytest.fixture(scope="module")
def schedulers(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[processes.Process]:
    """nodeagent's scheduler as deployed and the real kube-scheduler, for the module."""
    with side_by_side.both_running(control_plane, "dra", tmp_path_factory.mktemp("dra")) as ours:
        yield ours


@pytest.fixture(params=side_by_side.SCHEDULERS)
def run(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    schedulers: processes.Process,
    metrics_token: str,
) -> Iterator[Run]:
    scheduler = str(request.param)
    prefix = f"d{uuid.uuid4().hex[:6]}"
    namespace = control_plane.namespace(f"t-{prefix}")
    this = Run(scheduler, prefix, namespace)
    admin = control_plane.admin
    admin.create(f"{API}/deviceclasses", device_class(this))
    yield this
    side_by_side.delete_namespace(control_plane, schedulers, metrics_token, namespace)
    admin.request("DELETE", f"{API}/deviceclasses/{this.device_class}")
    for item in admin.get(f"{API}/resourceslices")["items"]:
        if item["spec"]["driver"] == this.driver:
            admin.request("DELETE", f"{API}/resourceslices/{item['metadata']['name']}")


# --- objects ------------------------------------------------------------------------------


def device_class(run: Run) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": run.device_class},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{run.driver}"'}}],
            "extendedResourceName": run.extended_resource,
        },
    }


def publish(
    admin: Rest, run: Run, suffix: str, models: list[str], *, binding: bool = False
) -> None:
    """What a driver's kubelet plugin publishes for its node: one slice, one pool named
    after the node, a device per GPU with its attributes and capacity (``binding``: each
    device bound only once the driver reports it ``attached``, or fails on ``failed``)."""
    node = run.node(suffix)
    conditions: dict[str, Any] = (
        {"bindingConditions": ["attached"], "bindingFailureConditions": ["failed"]}
        if binding
        else {}
    )
    admin.create(
        f"{API}/resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{run.prefix}-gpu"},
            "spec": {
                "driver": run.driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {
                            "model": {"string": model},
                            "index": {"int": i},
                        },
                        "capacity": {"memory": {"value": "40Gi"}},
                        **conditions,
                    }
                    for i, model in enumerate(models)
                ],
            },
        },
    )


def requests(run: Run, *, count: int = 1, selector: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": run.device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def template(admin: Rest, run: Run, name: str, **kwargs: Any) -> None:
    admin.create(
        f"{API}/namespaces/{run.namespace}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": run.namespace},
            "spec": {"spec": requests(run, **kwargs)},
        },
    )


def shared_claim(admin: Rest, run: Run, name: str, **kwargs: Any) -> None:
    admin.create(
        f"{API}/namespaces/{run.namespace}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": run.namespace},
            "spec": requests(run, **kwargs),
        },
    )


def pod(
    admin: Rest, run: Run, name: str, *, template: str = "", claim: str = "", gpus: int = 0
) -> None:
    """A pod with a claim (``template`` or ``claim``), or asking ``gpus`` of the run's
    extended resource in its container's resources."""
    body = o.pod(name, run.namespace, scheduler=run.scheduler)
    body["spec"]["nodeSelector"] = run.selector
    if gpus:
        resources = body["spec"]["containers"][0]["resources"]
        resources["requests"][run.extended_resource] = str(gpus)
        resources["limits"] = {run.extended_resource: str(gpus)}
        admin.create(f"/api/v1/namespaces/{run.namespace}/pods", body)
        return
    entry: dict[str, Any] = {"name": "gpu"}
    if template:
        entry["resourceClaimTemplateName"] = template
    else:
        entry["resourceClaimName"] = claim
    body["spec"]["resourceClaims"] = [entry]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    admin.create(f"/api/v1/namespaces/{run.namespace}/pods", body)


def make_nodes(nodes: Nodes, run: Run, *suffixes: str) -> None:
    for suffix in suffixes:
        nodes.create(o.node(run.node(suffix), labels=run.selector))


# --- reading the verdict --------------------------------------------------------------------


def bound_node(admin: Rest, run: Run, name: str) -> str:
    node = str(o.get_pod(admin, run.namespace, name)["spec"].get("nodeName") or "")
    return node.removeprefix(f"{run.prefix}-")


def pending_reason(admin: Rest, run: Run, name: str) -> str:
    condition = o.pod_condition(o.get_pod(admin, run.namespace, name), "PodScheduled")
    if condition is None or condition.get("status") != "False":
        return ""
    return str(condition.get("message") or "")


def claim_of(admin: Rest, run: Run, pod_name: str) -> str:
    """The claim the pod uses: its generated claim's name from the pod's status."""
    status = o.get_pod(admin, run.namespace, pod_name).get("status") or {}
    for entry in status.get("resourceClaimStatuses") or ():
        if entry.get("name") == "gpu":
            return str(entry.get("resourceClaimName") or "")
    return ""


def claim(admin: Rest, run: Run, name: str) -> dict[str, Any]:
    found: dict[str, Any] = admin.get(f"{API}/namespaces/{run.namespace}/resourceclaims/{name}")
    return found


def devices(found: dict[str, Any], run: Run) -> list[str]:
    """The claim's allocated devices as ``node/device`` (pool names are node names)."""
    allocation = (found.get("status") or {}).get("allocation") or {}
    return sorted(
        f"{r['pool'].removeprefix(run.prefix + '-')}/{r['device']}"
        for r in (allocation.get("devices") or {}).get("results") or ()
    )


def reserved_for(found: dict[str, Any]) -> list[str]:
    return sorted(r["name"] for r in (found.get("status") or {}).get("reservedFor") or ())


def verdict(scenario: str, run: Run, outcome: dict[str, Any]) -> None:
    """Record this scheduler's outcome; once both ran, they must be the same."""
    VERDICTS.setdefault(scenario, {})[run.scheduler] = outcome
    both = VERDICTS[scenario]
    if len(both) == 2:
        assert both["nodeagent-scheduler"] == both["default-scheduler"], both


def wait_bound(admin: Rest, run: Run, name: str) -> str:
    return str(
        eventually(
            functools.partial(bound_node, admin, run, name), timeout=90, what=f"{name} bound"
        )
    )


# --- scenarios -------------------------------------------------------------------------------


def test_a_claim_from_a_template_is_allocated_and_reserved(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    """Slices on one node of two: the pod goes there, its generated claim is allocated
    one of that node's devices (with the finalizer) and reserved for the pod."""
    admin = control_plane.admin
    make_nodes(nodes, run, "a", "b")
    publish(admin, run, "b", ["a100", "a100"])
    template(admin, run, "one-gpu")
    pod(admin, run, "trainer", template="one-gpu")
    node = wait_bound(admin, run, "trainer")
    name = claim_of(admin, run, "trainer")
    found = claim(admin, run, name)
    assert node == "b"
    assert found["metadata"]["ownerReferences"][0]["name"] == "trainer"
    assert "resource.kubernetes.io/delete-protection" in found["metadata"]["finalizers"]
    assert reserved_for(found) == ["trainer"]
    chosen = devices(found, run)
    assert len(chosen) == 1 and chosen[0].startswith("b/gpu-")
    verdict("template", run, {"node": node, "reserved": reserved_for(found)})


def test_two_pods_compete_for_one_device(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    """One device in the cluster, two pods: one gets it, the other waits with
    kube-scheduler's reason, and the device is allocated once."""
    admin = control_plane.admin
    make_nodes(nodes, run, "a")
    publish(admin, run, "a", ["a100"])
    template(admin, run, "one-gpu")
    for name in ("first", "second"):
        pod(admin, run, name, template="one-gpu")

    def settled() -> tuple[str, str] | None:
        placed = {n: bound_node(admin, run, n) for n in ("first", "second")}
        waiting = [n for n, node in placed.items() if not node]
        winners = [n for n, node in placed.items() if node]
        if len(winners) == 1 and CANNOT_ALLOCATE in pending_reason(admin, run, waiting[0]):
            return winners[0], waiting[0]
        return None

    winner, _ = eventually(settled, timeout=90, what="one pod bound, one waiting")
    allocated = [
        devices(item, run)
        for item in admin.get(f"{API}/namespaces/{run.namespace}/resourceclaims")["items"]
        if devices(item, run)
    ]
    assert allocated == [["a/gpu-0"]]
    assert reserved_for(claim(admin, run, claim_of(admin, run, winner))) == [winner]
    verdict("compete", run, {"bound": 1, "reason": CANNOT_ALLOCATE})


def test_a_shared_claim_puts_its_pods_together(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    """A claim made by the user, used by two pods: allocated once, both pods on the node
    of its device, both in reservedFor."""
    admin = control_plane.admin
    make_nodes(nodes, run, "a", "b")
    publish(admin, run, "b", ["a100"])
    shared_claim(admin, run, "shared")
    pod(admin, run, "reader", claim="shared")
    first = wait_bound(admin, run, "reader")
    pod(admin, run, "writer", claim="shared")
    second = wait_bound(admin, run, "writer")

    def both_reserved() -> dict[str, Any] | None:
        found = claim(admin, run, "shared")
        return found if len(reserved_for(found)) == 2 else None

    found = eventually(both_reserved, timeout=60, what="both reserved")
    assert first == second == "b"
    assert devices(found, run) == ["b/gpu-0"]
    assert reserved_for(found) == ["reader", "writer"]
    verdict("shared", run, {"nodes": [first, second], "devices": devices(found, run)})


def test_a_cel_selector_on_an_attribute_picks_the_device(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    """Devices on both nodes, only node b has the model asked for by the request's CEL
    selector."""
    admin = control_plane.admin
    make_nodes(nodes, run, "a", "b")
    publish(admin, run, "a", ["t4", "t4"])
    publish(admin, run, "b", ["t4", "h100"])
    selector = f'device.attributes["{run.driver}"].model == "h100"'
    template(admin, run, "h100", selector=selector)
    pod(admin, run, "picky", template="h100")
    node = wait_bound(admin, run, "picky")
    found = claim(admin, run, claim_of(admin, run, "picky"))
    assert node == "b"
    assert devices(found, run) == ["b/gpu-1"]
    verdict("cel", run, {"node": node, "devices": devices(found, run)})


def test_a_claim_no_node_can_satisfy_stays_pending(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    """Three devices asked for, two on each node: Pending with kube-scheduler's message,
    and the claim is not allocated."""
    admin = control_plane.admin
    make_nodes(nodes, run, "a", "b")
    publish(admin, run, "a", ["a100", "a100"])
    publish(admin, run, "b", ["a100", "a100"])
    template(admin, run, "three", count=3)
    pod(admin, run, "greedy", template="three")
    reason = eventually(
        lambda: pending_reason(admin, run, "greedy"), timeout=90, what="greedy tried"
    )
    assert "2 " + CANNOT_ALLOCATE in reason
    assert "still not schedulable, preemption: " in reason  # DynamicResources' PostFilter
    assert bound_node(admin, run, "greedy") == ""
    assert devices(claim(admin, run, claim_of(admin, run, "greedy")), run) == []
    # the whole message, but the node counts (other tests' nodes may come and go)
    verdict("unsatisfiable", run, {"reason": re.sub(r"\d+", "N", reason)})


def test_an_extended_resource_is_allocated_through_a_claim(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    """A pod asks two of the class's extended resource, which no node advertises: it
    goes to the node with the devices, in a claim the scheduler created for it
    (annotated, owned by the pod, allocated, reserved) and named in the pod's
    ``status.extendedResourceClaimStatus``."""
    admin = control_plane.admin
    make_nodes(nodes, run, "a", "b")
    publish(admin, run, "a", ["a100"])
    publish(admin, run, "b", ["a100", "a100"])
    pod(admin, run, "legacy", gpus=2)
    node = wait_bound(admin, run, "legacy")

    def named() -> dict[str, Any] | None:
        status = o.get_pod(admin, run.namespace, "legacy").get("status") or {}
        found: dict[str, Any] | None = status.get("extendedResourceClaimStatus")
        return found

    named_in_pod = eventually(named, timeout=30, what="extendedResourceClaimStatus")
    found = claim(admin, run, named_in_pod["resourceClaimName"])
    meta = found["metadata"]
    assert node == "b"
    assert meta["name"].startswith("legacy-extended-resources-")
    assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert [(r["name"], r.get("controller")) for r in meta["ownerReferences"]] == [("legacy", True)]
    assert devices(found, run) == ["b/gpu-0", "b/gpu-1"]
    assert reserved_for(found) == ["legacy"]
    mappings = [
        {**m, "resourceName": m["resourceName"].replace(run.prefix, "RUN")}
        for m in named_in_pod["requestMappings"]
    ]
    assert mappings == [
        {
            "containerName": "main",
            "resourceName": "RUN.nodeagent.example/gpu",
            "requestName": "container-0-request-1",
        }
    ]
    requests = found["spec"]["devices"]["requests"]
    verdict(
        "extended",
        run,
        {
            "node": node,
            "devices": devices(found, run),
            "mappings": mappings,
            "requests": [
                {**r, "exactly": {**r["exactly"], "deviceClassName": ""}} for r in requests
            ],
        },
    )


def test_a_class_naming_the_resource_later_requeues_the_pod(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    """A pod asks an extended resource that nothing provides: Pending as NodeResourcesFit
    says. A DeviceClass naming it, added later, requeues the pod (NodeResourcesFit's
    DeviceClass hint), and it is bound through a claim."""
    admin = control_plane.admin
    make_nodes(nodes, run, "a")
    publish(admin, run, "a", ["a100"])
    late = f"{run.prefix}.nodeagent.example/late"
    body = o.pod("late", run.namespace, scheduler=run.scheduler)
    body["spec"]["nodeSelector"] = run.selector
    body["spec"]["containers"][0]["resources"]["requests"][late] = "1"
    body["spec"]["containers"][0]["resources"]["limits"] = {late: "1"}
    admin.create(f"/api/v1/namespaces/{run.namespace}/pods", body)
    reason = eventually(lambda: pending_reason(admin, run, "late"), timeout=60, what="tried")
    assert f"Insufficient {late}" in reason
    name = f"{run.prefix}-late"
    admin.create(
        f"{API}/deviceclasses",
        {
            **device_class(run),
            "metadata": {"name": name},
            "spec": {**device_class(run)["spec"], "extendedResourceName": late},
        },
    )
    try:
        node = wait_bound(admin, run, "late")
    finally:
        admin.request("DELETE", f"{API}/deviceclasses/{name}")
    assert node == "a"
    verdict(
        "late-class",
        run,
        {"reason": re.sub(r"\d+", "N", reason.replace(run.prefix, "RUN")), "node": node},
    )


def report_conditions(admin: Rest, run: Run, name: str, conditions: dict[str, str]) -> None:
    """What the driver does: the allocated device's conditions in ``status.devices``."""
    found = claim(admin, run, name)
    [result] = found["status"]["allocation"]["devices"]["results"]
    found["status"]["devices"] = [
        {
            "driver": result["driver"],
            "pool": result["pool"],
            "device": result["device"],
            "conditions": [
                {
                    "type": kind,
                    "status": status,
                    "reason": "Test",
                    "message": f"{kind} is {status}",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
                for kind, status in conditions.items()
            ],
        }
    ]
    admin.call("PUT", f"{API}/namespaces/{run.namespace}/resourceclaims/{name}/status", found)


def test_binding_waits_for_the_driver_s_conditions(
    control_plane: ControlPlane,
    nodes: Nodes,
    run: Run,
    schedulers: processes.Process,
    metrics_token: str,
) -> None:
    """A device with binding conditions: the claim is allocated and reserved, the pod
    not bound until the driver reports ``attached``. A ``failed`` report first makes
    the scheduler give the device up (the claim deallocated, then allocated anew)."""
    admin = control_plane.admin
    make_nodes(nodes, run, "a", "b")
    publish(admin, run, "b", ["a100"], binding=True)
    template(admin, run, "one-gpu")
    pod(admin, run, "attached", template="one-gpu")

    def waiting_for_the_driver() -> dict[str, Any] | None:
        name = claim_of(admin, run, "attached")
        found = claim(admin, run, name) if name else {}
        status = found.get("status") or {}
        if reserved_for(found) != ["attached"] or status.get("devices"):
            return None
        return found

    found = eventually(waiting_for_the_driver, timeout=60, what="claim allocated, waiting")
    allocation = found["status"]["allocation"]
    [result] = allocation["devices"]["results"]
    assert result["bindingConditions"] == ["attached"]
    assert result["bindingFailureConditions"] == ["failed"]
    assert "allocationTimestamp" in allocation
    assert bound_node(admin, run, "attached") == ""
    name = found["metadata"]["name"]
    report_conditions(admin, run, name, {"attached": "False", "failed": "True"})
    # given up: deallocated (its device status dropped), then allocated and waiting again
    eventually(waiting_for_the_driver, timeout=60, what="claim allocated again")
    assert bound_node(admin, run, "attached") == ""
    started = time.monotonic()
    report_conditions(admin, run, name, {"attached": "True", "failed": "False"})
    node = wait_bound(admin, run, "attached")
    # how long the scheduler took to notice (kube-scheduler polls every 5 s)
    print(f"{run.scheduler}: bound {time.monotonic() - started:.2f} s after `attached`")
    assert node == "b"
    verdict("binding-conditions", run, {"node": node, "devices": devices(found, run)})
    if run.scheduler == "nodeagent-scheduler":
        # kube-scheduler's metrics of the two waits: one failed, one succeeded
        exposition = scrape.metrics(schedulers, metrics_token)
        for outcome in ("failure", "success"):
            sample = (
                "scheduler_dra_bindingconditions_allocations_total{"
                f'driver="{run.driver}",profile="nodeagent-scheduler",status="{outcome}"}} 1.0'
            )
            assert sample in exposition, outcome


def test_the_shipped_role_allowed_every_request(
    schedulers: processes.Process, metrics_token: str
) -> None:
    """After the scenarios: no request of nodeagent's scheduler was refused (a verb the
    ClusterRole lacks, an object the API rejects), and it is still running."""
    assert refused_requests(schedulers, metrics_token) == []
    assert schedulers.alive(), schedulers.tail()
