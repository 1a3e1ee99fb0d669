"""Extended resources backed by DRA (``DRAExtendedResource``, beta and on in v1.36): a pod
asks ``example.com/gpu`` (or ``deviceclass.resource.kubernetes.io/<class>``) in its
containers' requests, and a node without it in its allocatable gets devices of the class
that maps it, through a claim the scheduler creates.

The cases are kube-scheduler's: ``Test_createRequestsAndMappings_requests`` and
``_mappings`` (``extendeddynamicresources_test.go``), the ``extended-resource-*`` cases of
``TestPlugin`` (``dynamicresources_test.go``), NodeResourcesFit's delegation
(``shouldDelegateResourceToDRA``) and its DeviceClass hint; the class a name maps to
follows the API's rule for ``extendedResourceName`` (the class created last wins).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent import cli
from nodeagent.scheduler import api, framework, objects, resource_claims
from nodeagent.scheduler.framework import CycleState, QueueingHint
from nodeagent.scheduler.plugins import dynamic_resources, node_resources_fit
from nodeagent.scheduler.plugins.dynamic_resources import DynamicResources
from nodeagent.scheduler.resource_claims import ResourceCatalog
from tests.scheduler import builders
from tests.scheduler import dra_builders as b
from tests.scheduler.dra.plugin_harness import RecordingWriter

GPU = "example.com/gpu"
GPU2 = "example.com/gpu2"
IMPLICIT = resource_claims.DEVICE_CLASS_PREFIX + b.CLASS
WORKER = "worker"
UU = api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
U = api.Code.UNSCHEDULABLE


def container(name: str, requests: Mapping[str, str], *, sidecar: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "x", "resources": {"requests": dict(requests)}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def pod(
    *containers: Mapping[str, str],
    init: Sequence[dict[str, Any]] = (),
) -> api.Pod:
    """kube-scheduler's test pod: one container ``con<i>`` per request map."""
    return objects.parse_pod(
        {
            "kind": "Pod",
            "metadata": {"name": "my-pod", "namespace": "default", "uid": b.POD_UID},
            "spec": {
                "initContainers": list(init),
                "containers": [container(f"con{i}", r) for i, r in enumerate(containers)],
            },
        }
    )


def device_class(
    name: str = b.CLASS, extended: str | None = GPU, created: str = "2026-01-01T00:00:00Z"
) -> resource_claims.DeviceClass:
    body = b.device_class(name)
    body["metadata"]["creationTimestamp"] = created
    if extended is not None:
        body["spec"]["extendedResourceName"] = extended
    return resource_claims.parse_device_class(body)


# --- the claim's requests and the pod status's mappings --------------------------------------

INIT = GPU + "init"
CLASSES = {GPU: "class", GPU + "1": "class1", INIT: "classInit"}


def one_request(name: str, device_class: str, count: int) -> dict[str, Any]:
    return {
        "name": name,
        "exactly": {
            "deviceClassName": device_class,
            "allocationMode": "ExactCount",
            "count": count,
        },
    }


POD1 = pod({GPU: "1", GPU + "1": "2"})
POD2 = pod({GPU: "1"}, {GPU + "1": "2"})
POD_INIT = pod({GPU: "1"}, init=[container("init-con0", {INIT: "2"})])
POD_INIT2 = pod(
    {GPU: "1"}, init=[container("init-con0", {INIT: "1"}), container("init-con1", {INIT: "2"})]
)
POD_INIT3 = pod(
    {GPU: "1"},
    init=[
        container("init-con0", {INIT: "1"}),
        container("sidecar-con1", {INIT: "1"}, sidecar=True),
        container("init-con2", {INIT: "2"}),
    ],
)


@pytest.mark.parametrize(
    ("case", "the_pod", "resources", "classes", "want"),
    [
        ("nil", POD1, {}, {}, []),
        ("one resource match", POD1, {GPU: 1}, {GPU}, [("container-0-request-0", "class", 1)]),
        (
            "one resource match, one resource not match",
            POD1,
            {GPU: 1, GPU + "1": 2},
            {GPU},
            [("container-0-request-0", "class", 1)],
        ),
        (
            "two resources match",
            POD1,
            {GPU: 1, GPU + "1": 2},
            {GPU, GPU + "1"},
            [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)],
        ),
        (
            "two containers match",
            POD2,
            {GPU: 1, GPU + "1": 2},
            {GPU, GPU + "1"},
            [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)],
        ),
        (
            "one init container, one regular container",
            POD_INIT,
            {GPU: 1, INIT: 2},
            {GPU, INIT},
            [("container-0-request-0", "classInit", 2), ("container-1-request-0", "class", 1)],
        ),
        (
            "two init containers, one regular container",
            POD_INIT2,
            {GPU: 1, INIT: 2},
            {GPU, INIT},
            [("container-1-request-0", "classInit", 2), ("container-2-request-0", "class", 1)],
        ),
        (
            "three init containers, one sidecar, one regular container",
            POD_INIT3,
            {GPU: 1, INIT: 2},
            {GPU, INIT},
            [
                ("container-1-request-0", "classInit", 1),
                ("container-2-request-0", "classInit", 2),
                ("container-3-request-0", "class", 1),
            ],
        ),
    ],
)
def test_requests(
    case: str,
    the_pod: api.Pod,
    resources: dict[str, int],
    classes: set[str],
    want: list[tuple[str, str, int]],
) -> None:
    requests, _ = dynamic_resources.extended_requests(
        the_pod, resources, lambda name: CLASSES[name] if name in classes else None
    )
    assert requests == [one_request(*w) for w in want]


IMPLICIT_INIT = resource_claims.DEVICE_CLASS_PREFIX + "classInit"
POD1_INIT_IMPLICIT = objects.parse_pod(
    {
        "kind": "Pod",
        "metadata": {"name": "my-pod", "namespace": "default", "uid": b.POD_UID},
        "spec": {
            "initContainers": [container("init-con0", {INIT: "1", IMPLICIT_INIT: "2"})],
            "containers": [],
        },
    }
)
POD_INIT_IMPLICIT = pod(
    {GPU: "1"},
    init=[container("init-con0", {INIT: "1"}), container("init-con1", {IMPLICIT_INIT: "2"})],
)


@pytest.mark.parametrize(
    ("case", "the_pod", "resources", "want"),
    [
        (
            "one container, two requests",
            POD1,
            {GPU: 1, GPU + "1": 2},
            [("con0", GPU, "container-0-request-0"), ("con0", GPU + "1", "container-0-request-1")],
        ),
        (
            "one container, one explicit and one implicit request",
            POD1_INIT_IMPLICIT,
            {GPU: 1, INIT: 2, IMPLICIT_INIT: 2},
            [
                ("init-con0", IMPLICIT_INIT, "container-0-request-0"),
                ("init-con0", INIT, "container-0-request-1"),
            ],
        ),
        (
            "two containers, two requests",
            POD2,
            {GPU: 1, GPU + "1": 2},
            [("con0", GPU, "container-0-request-0"), ("con1", GPU + "1", "container-1-request-0")],
        ),
        (
            "one init container, one regular container, one request",
            POD_INIT,
            {GPU: 1, INIT: 2},
            [("init-con0", INIT, "container-0-request-0"), ("con0", GPU, "container-1-request-0")],
        ),
        (
            "three containers (two are init container), two requests",
            POD_INIT2,
            {GPU: 1, INIT: 2},
            [
                ("init-con0", INIT, "container-1-request-0"),
                ("init-con1", INIT, "container-1-request-0"),
                ("con0", GPU, "container-2-request-0"),
            ],
        ),
        (
            "three containers (two are init container), both explicit and implicit resources",
            POD_INIT_IMPLICIT,
            {GPU: 1, INIT: 2, IMPLICIT_INIT: 2},
            [
                ("init-con0", INIT, "container-0-request-0"),
                ("init-con1", IMPLICIT_INIT, "container-1-request-0"),
                ("con0", GPU, "container-2-request-0"),
            ],
        ),
        (
            "four containers (two are init container, one sidecar), three requests",
            POD_INIT3,
            {GPU: 1, INIT: 2},
            [
                ("init-con0", INIT, "container-1-request-0"),
                ("sidecar-con1", INIT, "container-1-request-0"),
                ("init-con2", INIT, "container-2-request-0"),
                ("con0", GPU, "container-3-request-0"),
            ],
        ),
    ],
)
def test_mappings(
    case: str, the_pod: api.Pod, resources: dict[str, int], want: list[tuple[str, str, str]]
) -> None:
    classes = {**CLASSES, IMPLICIT_INIT: "classInit"}
    _, mappings = dynamic_resources.extended_requests(the_pod, resources, classes.get)
    found = sorted(((m["requestName"], m["containerName"]), m["resourceName"]) for m in mappings)
    assert [(c, r, n) for (n, c), r in found] == want


# --- which class an extended resource names --------------------------------------------------


def test_the_class_created_last_wins_a_shared_name() -> None:
    older = device_class("a-old", created="2026-01-01T00:00:00Z")
    newer = device_class("z-new", created="2026-01-02T00:00:00Z")
    twin = device_class("b-twin", created="2026-01-02T00:00:00Z")
    found = resource_claims.extended_resource_classes([newer, older])
    assert found[GPU].name == "z-new"
    assert found[resource_claims.DEVICE_CLASS_PREFIX + "a-old"].name == "a-old"
    # the same instant: the first name sorted
    assert resource_claims.extended_resource_classes([newer, twin])[GPU].name == "b-twin"
    assert resource_claims.extended_resource_classes([twin, newer])[GPU].name == "b-twin"
    assert not resource_claims.is_dra_extended_resource_name("cpu")
    assert resource_claims.is_dra_extended_resource_name(IMPLICIT)


# --- the plugin (TestPlugin's extended-resource cases) ----------------------------------------


def setup(
    classes: Sequence[resource_claims.DeviceClass] = (),
    *,
    devices: int = 0,
    node_gpus: str | None = None,
    claims: Sequence[dict[str, Any]] = (),
) -> tuple[DynamicResources, ResourceCatalog, RecordingWriter, Any]:
    catalog = ResourceCatalog()
    for device_class_ in classes:
        catalog.set_class(device_class_)
    if devices:
        catalog.set_slice(resource_claims.parse_resource_slice(b.node_slice(WORKER, devices)))
    for body in claims:
        catalog.set_claim(resource_claims.parse_resource_claim(body))
    catalog.writer = writer = RecordingWriter(catalog)
    plugin = DynamicResources(dynamic_resources.Args(), framework.Handle(resources=catalog))
    extra = {GPU: node_gpus} if node_gpus is not None else None
    snapshot = builders.snapshot([builders.node(WORKER, extra=extra)])
    return plugin, catalog, writer, snapshot


def extended_claim_dict(name: str, requests: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
    """An extended-resource claim a former attempt created: ``requests`` are
    (name, class, count)."""
    body = resource_claims.extended_claim_body(pod({GPU: "1"}))
    body["metadata"].update(name=name, uid="former", resourceVersion="3")
    body["spec"] = {"devices": {"requests": [one_request(*r) for r in requests]}}
    body["status"] = {}
    return body


def run_to_reserve(
    plugin: DynamicResources, the_pod: api.Pod, snapshot: Any
) -> tuple[CycleState, api.Status, api.Status]:
    state = CycleState()
    _, status = plugin.pre_filter(state, the_pod, snapshot)
    if not status.is_success:
        return state, status, status
    filtered = plugin.filter_node(state, the_pod, snapshot, 0)
    mask = plugin.filter(state, the_pod, snapshot, np.arange(1))
    assert bool(mask[0]) == filtered.is_success
    return state, status, filtered


def devices_of(claim: resource_claims.ResourceClaim) -> list[tuple[str, str]]:
    assert claim.allocation is not None
    return [(r.request, r.device) for r in claim.allocation.results]


def test_a_node_with_the_resource_leaves_nothing_to_dra() -> None:
    """extended-resource-name-with-node-resource: the device plugin has it."""
    plugin, catalog, writer, snapshot = setup([device_class()], node_gpus="1")
    the_pod = pod({GPU: "1"})
    state, pre, filtered = run_to_reserve(plugin, the_pod, snapshot)
    assert pre.is_success and filtered.is_success
    assert plugin.reserve(state, the_pod, WORKER).is_success
    assert catalog.pending(f"{resource_claims.SPECIAL_CLAIM_NAME}{b.POD_UID}") is None
    assert plugin.pre_bind(state, the_pod, WORKER).is_success
    assert writer.calls == []  # no claim created


def test_one_resource_from_the_device_plugin_one_from_dra() -> None:
    """extended-resource-one-device-plugin-one-dra: gpu2 is left to DRA, gpu is not."""
    classes = [device_class(), device_class(b.CLASS + "2", GPU2)]
    plugin, catalog, writer, snapshot = setup(classes, devices=1, node_gpus="1")
    the_pod = pod({GPU: "1", GPU2: "1"})
    state, _, filtered = run_to_reserve(plugin, the_pod, snapshot)
    assert filtered.is_success
    assert plugin.reserve(state, the_pod, WORKER).is_success
    pending = catalog.pending(f"{resource_claims.SPECIAL_CLAIM_NAME}{b.POD_UID}")
    assert pending is not None
    assert [
        (r.name, r.exactly and r.exactly.device_class_name) for r in pending.parsed.spec.requests
    ] == [("container-0-request-1", b.CLASS + "2")]
    assert plugin.pre_bind(state, the_pod, WORKER).is_success
    assert writer.calls == ["create", "update", "update-status", "patch-pod-status"]
    created = catalog.claim("default", "my-pod-extended-resources-x7k2q")
    assert created is not None and created.reserved_for_pod(the_pod)
    assert devices_of(created) == [("container-0-request-1", "instance-0")]
    assert created.allocation is not None and created.allocation.allocation_timestamp
    assert writer.pod_status == {
        "status": {
            "extendedResourceClaimStatus": {
                "requestMappings": [
                    {
                        "containerName": "con0",
                        "resourceName": GPU2,
                        "requestName": "container-0-request-1",
                    }
                ],
                "resourceClaimName": "my-pod-extended-resources-x7k2q",
            }
        }
    }
    assert catalog.pending(f"{resource_claims.SPECIAL_CLAIM_NAME}{b.POD_UID}") is None


@pytest.mark.parametrize("node_gpus", [None, "0"])
def test_the_claim_is_created_allocated_and_reserved(node_gpus: str | None) -> None:
    """extended-resource-name-with-resources and -with-zero-allocatable."""
    plugin, catalog, _, snapshot = setup([device_class()], devices=1, node_gpus=node_gpus)
    the_pod = pod({GPU: "1"})
    state, _, filtered = run_to_reserve(plugin, the_pod, snapshot)
    assert filtered.is_success
    assert plugin.reserve(state, the_pod, WORKER).is_success
    assert plugin.pre_bind(state, the_pod, WORKER).is_success
    created = catalog.claim("default", "my-pod-extended-resources-x7k2q")
    assert created is not None
    meta = created.raw["metadata"]
    assert meta["generateName"] == "my-pod-extended-resources-"
    assert meta["annotations"] == {resource_claims.EXTENDED_CLAIM_ANNOTATION: "true"}
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "my-pod", "uid": b.POD_UID, "controller": True}
    ]
    assert created.finalizers == (resource_claims.FINALIZER,)
    assert devices_of(created) == [("container-0-request-0", "instance-0")]
    assert catalog.devices_in_use() == {created.allocation.results[0].device_id}  # type: ignore[union-attr]
    # --explain asks Filter about the other nodes after PreBind: the same judgment
    assert plugin.filter_node(state, the_pod, snapshot, 0).is_success


def test_a_resource_no_class_maps_is_not_dra_s() -> None:
    """non-DRA-extended-resource-name-with-zero-allocatable: PreFilter skips."""
    plugin, _, _, snapshot = setup([device_class(extended=None)], devices=1, node_gpus="0")
    state = CycleState()
    assert plugin.pre_filter(state, pod({GPU: "1"}), snapshot)[1].is_skip
    assert plugin.pre_bind_pre_flight(state, pod({GPU: "1"}), WORKER).is_skip


def test_no_devices() -> None:
    """extended-resource-name-no-resource."""
    plugin, _, _, snapshot = setup([device_class()])
    the_pod = pod({GPU: "1"})
    state, _, filtered = run_to_reserve(plugin, the_pod, snapshot)
    assert (filtered.code, filtered.message) == (UU, "cannot allocate all claims")
    post = plugin.post_filter(state, the_pod, snapshot, None, None)  # type: ignore[arg-type]
    assert (post[1].code, post[1].message) == (U, "still not schedulable")


def test_implicit_and_explicit_names_of_one_class() -> None:
    """implicit-extended-resource-name-with-resources (one container) and
    -two-containers-with-resources."""
    for the_pod, want in [
        (
            pod({IMPLICIT: "1", GPU: "2"}),
            [("container-0-request-0", 1), ("container-0-request-1", 2)],
        ),
        (
            pod({IMPLICIT: "1"}, {GPU: "2"}),
            [("container-0-request-0", 1), ("container-1-request-0", 2)],
        ),
    ]:
        plugin, catalog, _, snapshot = setup([device_class()], devices=4)
        state, _, filtered = run_to_reserve(plugin, the_pod, snapshot)
        assert filtered.is_success
        assert plugin.reserve(state, the_pod, WORKER).is_success
        assert plugin.pre_bind(state, the_pod, WORKER).is_success
        created = catalog.claim("default", "my-pod-extended-resources-x7k2q")
        assert created is not None
        found = [(r.name, r.exactly.count) for r in created.parsed.spec.requests if r.exactly]
        assert found == want
        assert len(devices_of(created)) == 3


def test_a_failed_pod_status_patch_fails_pre_bind() -> None:
    """extended-resource-name-with-resources-fail-patch: the claim stays written (and
    Unreserve deletes it)."""
    plugin, catalog, writer, snapshot = setup([device_class()], devices=1)

    def refuse(the_pod: api.Pod, patch: Mapping[str, Any]) -> None:
        from nodeagent.base import errors

        raise errors.KubeAPIError("patch error", status=500)

    writer.patch_pod_status = refuse  # type: ignore[method-assign,assignment]
    the_pod = pod({GPU: "1"})
    state, _, _ = run_to_reserve(plugin, the_pod, snapshot)
    assert plugin.reserve(state, the_pod, WORKER).is_success
    status = plugin.pre_bind(state, the_pod, WORKER)
    assert status.code is api.Code.ERROR
    assert status.message == "update pod default/my-pod ExtendedResourceClaimStatus: patch error"
    plugin.unreserve(state, the_pod, WORKER)
    assert writer.calls[-2:] == ["update", "delete my-pod-extended-resources-x7k2q"]
    assert catalog.claim("default", "my-pod-extended-resources-x7k2q") is None


@pytest.mark.parametrize("node", [WORKER, "worker-2"])
def test_a_former_attempt_s_claim_is_deleted(node: str) -> None:
    """extended-resource-name-with-resources-has-claim and -delete-claim: the claim a
    failed binding left (allocated here or on another node) makes every node refuse,
    and PostFilter deletes it."""
    former = extended_claim_dict(
        "my-pod-extended-resources-0", [("container-0-request-0", b.CLASS, 1)]
    )
    former["status"] = b.claim_dict(allocated=[(node, "instance-0")], node=node)["status"]
    former["metadata"]["finalizers"] = [resource_claims.FINALIZER]
    plugin, catalog, writer, snapshot = setup([device_class()], devices=1, claims=[former])
    the_pod = pod({GPU: "1"})
    state, pre, filtered = run_to_reserve(plugin, the_pod, snapshot)
    assert pre.is_success
    assert (filtered.code, filtered.message) == (UU, "cannot schedule extended resource claim")
    post = plugin.post_filter(state, the_pod, snapshot, None, None)  # type: ignore[arg-type]
    assert (post[1].code, post[1].message) == (U, "deletion of ResourceClaim completed")
    assert writer.calls == ["update", "delete my-pod-extended-resources-0"]
    assert catalog.claim("default", "my-pod-extended-resources-0") is None


def test_binding_failure_deletes_the_created_claim() -> None:
    """extended-resource-name-bind-failure: PreBind created and reserved it, the Binding
    failed: Unreserve deletes it."""
    plugin, catalog, writer, snapshot = setup([device_class()], devices=1)
    the_pod = pod({GPU: "1"})
    state, _, _ = run_to_reserve(plugin, the_pod, snapshot)
    assert plugin.reserve(state, the_pod, WORKER).is_success
    assert plugin.pre_bind(state, the_pod, WORKER).is_success
    plugin.unreserve(state, the_pod, WORKER)
    assert writer.calls[-1] == "delete my-pod-extended-resources-x7k2q"
    assert catalog.claim("default", "my-pod-extended-resources-x7k2q") is None
    assert catalog.devices_in_use() == frozenset()


def test_unreserve_before_pre_bind_writes_nothing() -> None:
    """extended-resource-name-skip-bind: only the allocation in flight is taken back."""
    plugin, catalog, writer, snapshot = setup([device_class()], devices=1)
    the_pod = pod({GPU: "1"})
    state, _, _ = run_to_reserve(plugin, the_pod, snapshot)
    assert plugin.reserve(state, the_pod, WORKER).is_success
    assert catalog.devices_in_use()
    plugin.unreserve(state, the_pod, WORKER)
    assert writer.calls == []
    assert catalog.devices_in_use() == frozenset()


def test_claim_creation_failure() -> None:
    """extended-resource-name-claim-creation-failure."""
    plugin, catalog, writer, snapshot = setup([device_class()], devices=1)

    def refuse(body: Mapping[str, Any]) -> resource_claims.ResourceClaim:
        from nodeagent.base import errors

        raise errors.KubeAPIError("claim creation errors", status=400)

    writer.create_claim = refuse  # type: ignore[method-assign]
    the_pod = pod({GPU: "1"})
    state, _, _ = run_to_reserve(plugin, the_pod, snapshot)
    assert plugin.reserve(state, the_pod, WORKER).is_success
    status = plugin.pre_bind(state, the_pod, WORKER)
    assert status.code is api.Code.ERROR
    assert status.message == (
        "create claim for extended resources default/<extended-resources>: claim creation errors"
    )
    plugin.unreserve(state, the_pod, WORKER)
    assert catalog.devices_in_use() == frozenset()
    assert writer.calls == []


def test_a_resource_neither_on_the_node_nor_mapped_does_not_fit() -> None:
    """filterExtendedResources: a resource the node does not list and no class maps."""
    plugin, _, _, snapshot = setup([device_class()], devices=1)
    _, _, filtered = run_to_reserve(plugin, pod({GPU: "1", "example.com/fpga": "1"}), snapshot)
    assert (filtered.code, filtered.message) == (UU, "cannot fit resource")


def test_offline_the_plan_names_the_claim() -> None:
    """The planner (no API): the claim is committed under a name drawn from the pod."""
    plugin, catalog, _, snapshot = setup([device_class()], devices=1)
    catalog.writer = None
    the_pod = pod({GPU: "1"})
    state, _, _ = run_to_reserve(plugin, the_pod, snapshot)
    assert plugin.reserve(state, the_pod, WORKER).is_success
    assert plugin.pre_bind(state, the_pod, WORKER).is_success
    [claim] = catalog.claims()
    assert claim.name.startswith("my-pod-extended-resources-") and len(claim.name) == 31
    assert claim.reserved_for_pod(the_pod)
    assert catalog.pending(f"{resource_claims.SPECIAL_CLAIM_NAME}{b.POD_UID}") is None


# --- NodeResourcesFit hands the mapped resources over ----------------------------------------


def fit_statuses(gpus: str | None, classes: Sequence[resource_claims.DeviceClass]) -> list[Any]:
    catalog = ResourceCatalog()
    for device_class_ in classes:
        catalog.set_class(device_class_)
    plugin = node_resources_fit.NodeResourcesFit(node_resources_fit.Args(), catalog)
    extra = {GPU: gpus} if gpus is not None else None
    nodes = [builders.node(WORKER, extra=extra), builders.node("plain")]
    snapshot = builders.snapshot(nodes)
    the_pod = pod({GPU: "2", "cpu": "1"})
    state = CycleState()
    plugin.pre_filter(state, the_pod, snapshot)
    indices = np.arange(len(nodes))
    mask = plugin.filter(state, the_pod, snapshot, indices)
    statuses, which = plugin.filter_statuses(state, the_pod, snapshot, indices)
    found = []
    for i in range(len(nodes)):
        status = plugin.filter_node(state, the_pod, snapshot, i)
        assert bool(mask[i]) == status.is_success
        assert statuses[which[i]] == status
        found.append((status.code, status.message))
    return found


OK = (api.Code.SUCCESS, "")
NONE = (UU, f"Insufficient {GPU}")


@pytest.mark.parametrize(
    ("case", "gpus", "classes", "want"),
    [
        ("no class: judged on allocatable", "1", [], [NONE, NONE]),
        ("mapped, node without it: DynamicResources'", None, [device_class()], [OK, OK]),
        ("mapped, node with zero: DynamicResources'", "0", [device_class()], [OK, OK]),
        ("mapped, node has some: the device plugin's", "1", [device_class()], [NONE, OK]),
        ("mapped, node has enough", "4", [device_class()], [OK, OK]),
        ("implicit name only", None, [device_class(extended=None)], [NONE, NONE]),
    ],
)
def test_fit_delegates_mapped_resources(
    case: str, gpus: str | None, classes: list[resource_claims.DeviceClass], want: list[Any]
) -> None:
    assert fit_statuses(gpus, classes) == want


def test_fit_hint_after_a_device_class_event() -> None:
    """``isSchedulableAfterDeviceClassEvent``."""
    hint = node_resources_fit.is_schedulable_after_device_class_event
    wants_gpu, wants_implicit = pod({GPU: "1"}), pod({IMPLICIT: "1"})
    gpu_class, plain = device_class(), device_class(extended=None)
    assert hint(wants_gpu, None, gpu_class) is QueueingHint.QUEUE
    assert hint(wants_implicit, None, plain) is QueueingHint.QUEUE
    assert hint(wants_gpu, None, plain) is QueueingHint.QUEUE_SKIP
    assert hint(wants_gpu, gpu_class, gpu_class) is QueueingHint.QUEUE_SKIP
    assert hint(wants_gpu, plain, gpu_class) is QueueingHint.QUEUE
    assert hint(wants_implicit, gpu_class, plain) is QueueingHint.QUEUE_SKIP


# --- invariants of the requests and mappings ---------------------------------------------------

CONTAINER = st.tuples(
    st.sampled_from(["init", "sidecar", "main"]),
    st.dictionaries(st.sampled_from([GPU, GPU2, "cpu"]), st.integers(0, 4), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(CONTAINER, min_size=1, max_size=6))
def test_every_container_is_served(found: list[tuple[str, dict[str, int]]]) -> None:
    """Every container asking a mapped resource is mapped to requests of that resource's
    class whose counts cover what it asks; a long-lived container's own request is its
    whole ask (they run together, nothing is shared); every mapping names a request."""
    inits = [
        container(f"i{i}", {k: str(v) for k, v in r.items()}, sidecar=kind == "sidecar")
        for i, (kind, r) in enumerate(found)
        if kind != "main"
    ]
    mains = [{k: str(v) for k, v in r.items()} for kind, r in found if kind == "main"]
    the_pod = pod(*mains, init=inits)
    classes = {GPU: "class", GPU2: "class2"}
    totals = {GPU: 1, GPU2: 1}
    requests, mappings = dynamic_resources.extended_requests(the_pod, totals, classes.get)
    by_name = {r["name"]: r["exactly"] for r in requests}
    assert len(by_name) == len(requests)
    served: dict[tuple[str, str], list[str]] = {}
    for m in mappings:
        assert m["requestName"] in by_name
        assert by_name[m["requestName"]]["deviceClassName"] == classes[m["resourceName"]]
        served.setdefault((m["containerName"], m["resourceName"]), []).append(m["requestName"])
    spec = the_pod.raw["spec"] if the_pod.raw else {}
    for c in [*spec["initContainers"], *spec["containers"]]:
        for resource in (GPU, GPU2):
            asked = int(c["resources"]["requests"].get(resource, "0"))
            names = served.get((c["name"], resource), [])
            assert bool(names) == bool(asked)
            covered = sum(by_name[n]["count"] for n in names)
            long_lived = c in spec["containers"] or c.get("restartPolicy") == "Always"
            assert covered == asked if long_lived else covered >= asked


# --- scoring (calculateDRAExtendedResourceAllocatableRequest) ---------------------------------


def scoring_catalog(devices: dict[str, int], allocated: Sequence[str] = ()) -> ResourceCatalog:
    """kube-scheduler's ``deviceClassWithExtendResourceName`` and a ``test-driver`` slice
    per node with ``devices[node]`` devices; ``allocated``: ``node/device-i`` in use."""
    catalog = ResourceCatalog()
    catalog.set_class(device_class())
    for node, count in devices.items():
        body = b.node_slice(node, count, driver="test-driver")
        catalog.set_slice(resource_claims.parse_resource_slice(body))
    for i, where in enumerate(allocated):
        node, device = where.split("/")
        claim = b.claim_dict(f"held-{i}", uid=f"held-{i}", owner=None, allocated=[(node, device)])
        claim["status"]["allocation"]["devices"]["results"][0]["driver"] = "test-driver"
        catalog.set_claim(resource_claims.parse_resource_claim(claim))
    return catalog


def scores(plugin: Any, the_pod: api.Pod, snapshot: Any) -> list[int]:
    nodes = np.arange(len(snapshot.nodes))
    state = CycleState()
    plugin.pre_score(state, the_pod, snapshot, nodes)
    vector = [int(v) for v in plugin.score(state, the_pod, snapshot, nodes)]
    assert vector == [plugin.score_node(the_pod, snapshot, i) for i in range(len(nodes))]
    return vector


@pytest.mark.parametrize("allocated", [(), ("node1/instance-0",)])
def test_fit_scores_dra_devices(allocated: tuple[str, ...]) -> None:
    """``test case for ScoringStrategy LeastAllocated with Extended resources``: three
    devices on node1, two on node2, the pod asks one: 66 and 50 (one of node1's
    allocated: 33)."""
    args = node_resources_fit.Args.model_validate(
        {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": GPU, "weight": 1}]}}
    )
    catalog = scoring_catalog({"node1": 3, "node2": 2}, allocated)
    plugin = node_resources_fit.NodeResourcesFit(args, catalog)
    snapshot = builders.snapshot([builders.node("node1"), builders.node("node2")])
    node1 = 33 if allocated else 66
    assert scores(plugin, pod({GPU: "1"}), snapshot) == [node1, 50]
    # a device plugin's node with the same numbers scores the same
    plain = node_resources_fit.NodeResourcesFit(args)
    extra = {"node1": {GPU: "3"}, "node2": {GPU: "2"}}
    used = [builders.pod("held", node_name="node1", requests={GPU: "1"})] if allocated else []
    advertised = builders.snapshot(
        [builders.node(n, extra=extra[n]) for n in ("node1", "node2")], used
    )
    assert scores(plain, pod({GPU: "1"}), advertised) == [node1, 50]


def test_balanced_allocation_counts_dra_devices() -> None:
    """``include DRA resource on a node for balanced resource allocation``: node1's eight
    devices join its cpu and memory fractions (86%, 0%, 1/8: balance 62 with the pod; 0/8:
    59 without), node2 has none (cpu and memory: 63 with and without). v1.36 scores the
    change in balance the pod makes, 50 + (50 + with - without) / 2: 76 and 75."""
    from nodeagent.scheduler.plugins import balanced_allocation

    args = balanced_allocation.Args.model_validate(
        {
            "resources": [
                {"name": "cpu", "weight": 1},
                {"name": "memory", "weight": 1},
                {"name": GPU, "weight": 1},
            ]
        }
    )
    plugin = balanced_allocation.BalancedAllocation(args, scoring_catalog({"node1": 8}))
    nodes = [builders.node(n, cpu="3500m", memory="40000") for n in ("node1", "node2")]
    bound = [
        builders.pod(
            "p1",
            node_name="node1",
            containers=[
                builders.container("a", requests={"cpu": "1000m"}),
                builders.container("b", requests={"cpu": "2000m"}),
            ],
        ),
        builders.pod(
            "p2",
            node_name="node2",
            containers=[
                builders.container("a", requests={"cpu": "1000m", "memory": "2000"}),
                builders.container("b", requests={"cpu": "2000m", "memory": "3000"}),
            ],
        ),
    ]
    snapshot = builders.snapshot(nodes, bound)
    assert scores(plugin, pod({GPU: "1"}), snapshot) == [76, 75]
    # "if PreScore not called": the same
    assert plugin.score(CycleState(), pod({GPU: "1"}), snapshot, snapshot.all_nodes).tolist() == [
        76,
        75,
    ]


# --- the planner ------------------------------------------------------------------------


def test_the_extended_resource_example(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/clusters/dra-extended.yaml (its header says why): a DRA node and a device
    plugin's node serve the same extended resource; each node's reason is its own."""
    example = Path(__file__).resolve().parents[3] / "examples" / "clusters" / "dra-extended.yaml"
    assert cli.main(["schedule", "--cluster", str(example), "--seed", "1", "--explain"]) == 0
    result = json.loads(capsys.readouterr().out)
    by_pod = {p["pod"]: p for p in result["placements"]}
    placed = {by_pod[f"default/legacy-{i}"]["node"] for i in (0, 1)}
    assert placed == {"n1", "n2"}
    assert by_pod["default/legacy-2"]["status"] == "Unschedulable"
    reasons = {n: v["reasons"] for n, v in by_pod["default/legacy-2"]["nodes"].items()}
    assert reasons == {
        "n1": ["cannot allocate all claims"],
        "n2": [f"Insufficient {GPU}"],
        "n3": ["cannot allocate all claims"],
    }
    assert by_pod["default/implicit"]["message"].startswith(
        "0/3 nodes are available: 3 cannot allocate all claims. still not schedulable"
    )


@pytest.mark.parametrize("refused", [False, True])
def test_claim_creates_are_counted(refused: bool) -> None:
    """``scheduler_resourceclaim_creates_total{status}``: each create request PreBind
    sends, by whether the API server took it."""
    from nodeagent.base import errors
    from nodeagent.scheduler.live.metrics import SchedulerMetrics

    plugin, catalog, writer, snapshot = setup([device_class()], devices=1)
    metrics = SchedulerMetrics(("default-scheduler",), process_metrics=False)
    catalog.observer = metrics
    if refused:

        def refuse(body: Mapping[str, Any]) -> resource_claims.ResourceClaim:
            raise errors.KubeAPIError("quota exceeded", status=403)

        writer.create_claim = refuse  # type: ignore[method-assign]
    the_pod = pod({GPU: "1"})
    state, _, _ = run_to_reserve(plugin, the_pod, snapshot)
    assert plugin.reserve(state, the_pod, WORKER).is_success
    assert plugin.pre_bind(state, the_pod, WORKER).is_success is not refused
    name = "scheduler_resourceclaim_creates_total"
    counted = {
        status: metrics.registry.get_sample_value(name, {"status": status})
        for status in ("success", "failure")
    }
    assert counted == (
        {"success": None, "failure": 1.0} if refused else {"success": 1.0, "failure": None}
    )
