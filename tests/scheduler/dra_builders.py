"""resource.k8s.io/v1 objects for the DynamicResources tests, as the API server serves
them (the names follow kube-scheduler's plugin test: ``my-pod``, ``my-resource``,
``my-pod-my-resource``, ``worker``, class ``my-resource-class``)."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler import api, objects, resource_claims
from nodeagent.scheduler.resource_claims import ResourceClaim

DRIVER = "some-driver"
CLASS = "my-resource-class"
POD_UID = "1234"


def device_class(name: str = CLASS, selector: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if selector:
        spec["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": spec,
    }


def node_slice(
    node: str, devices: int = 1, *, driver: str = DRIVER, attributes: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}", "resourceVersion": "1"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"instance-{i}", "attributes": dict(attributes or {})}
                for i in range(devices)
            ],
        },
    }


def claim_dict(
    name: str = "my-pod-my-resource",
    *,
    uid: str = "claim-uid",
    count: int = 1,
    device_class: str = CLASS,
    owner: str | None = POD_UID,
    allocated: list[tuple[str, str]] | None = None,
    node: str | None = None,
    reserved: list[tuple[str, str]] | None = None,
    first_available: list[str] | None = None,
) -> dict[str, Any]:
    """``allocated``: (pool, device) pairs of the driver; ``node``: the allocation's node
    selector (by hostname); ``reserved``: (pod name, pod uid)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": uid,
        "resourceVersion": "1",
    }
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "my-pod", "uid": owner, "controller": True}
        ]
    if first_available:
        request: dict[str, Any] = {
            "name": "req-1",
            "firstAvailable": [
                {"name": f"sub-{i}", "deviceClassName": c} for i, c in enumerate(first_available)
            ],
        }
    else:
        request = {"name": "req-1", "exactly": {"deviceClassName": device_class, "count": count}}
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [request]}},
        "status": {},
    }
    if allocated is not None:
        allocation: dict[str, Any] = {
            "devices": {
                "results": [
                    {"request": "req-1", "driver": DRIVER, "pool": pool, "device": device}
                    for pool, device in allocated
                ]
            }
        }
        if node is not None:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        body["status"]["allocation"] = allocation
        meta["finalizers"] = [resource_claims.FINALIZER]
    if reserved:
        body["status"]["reservedFor"] = [
            {"resource": "pods", "name": n, "uid": u} for n, u in reserved
        ]
    return body


def claim(name: str = "my-pod-my-resource", **kwargs: Any) -> ResourceClaim:
    return resource_claims.parse_resource_claim(claim_dict(name, **kwargs))


def pod_with_template(
    *, generated: str | None = "my-pod-my-resource", status: bool = True
) -> api.Pod:
    body: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": "my-pod", "namespace": "default", "uid": POD_UID},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "my-resource", "resourceClaimTemplateName": "tmpl"}],
        },
    }
    if status:
        body["status"] = {
            "resourceClaimStatuses": [{"name": "my-resource", "resourceClaimName": generated}]
        }
    return objects.parse_pod(body)


def pod_with_claim(name: str = "my-pod-my-resource", uid: str = POD_UID) -> api.Pod:
    return objects.parse_pod(
        {
            "kind": "Pod",
            "metadata": {"name": "my-pod", "namespace": "default", "uid": uid},
            "spec": {
                "containers": [{"name": "c", "image": "x"}],
                "resourceClaims": [{"name": "my-resource", "resourceClaimName": name}],
            },
        }
    )
