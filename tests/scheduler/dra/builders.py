"""API-shaped objects for the DRA tests, built as the apiserver returns them (JSON dicts),
named after the helpers of upstream's ``allocatortesting/allocator_testing.go`` so a case
reads like the one it was taken from. Every object goes through the real parsers."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler import api
from nodeagent.scheduler.dra import model

NAMESPACE = "default"
REGION1, REGION2 = "region-1", "region-2"
NODE1, NODE2 = "node-1", "node-2"
CLASS_A, CLASS_B = "class-a", "class-b"
DRIVER_A, DRIVER_B = "driver-a", "driver-b"
POOL1, POOL2, POOL3, POOL4 = "pool-1", "pool-2", "pool-3", "pool-4"
REQ0, REQ1, REQ2 = "req-0", "req-1", "req-2"
SUB0, SUB1 = "subReq-0", "subReq-1"
CLAIM0, CLAIM1 = "claim-0", "claim-1"
SLICE1, SLICE2, SLICE3 = "slice-1", "slice-2", "slice-3"
DEVICE0, DEVICE1, DEVICE2, DEVICE3 = "device-0", "device-1", "device-2", "device-3"
COUNTER_SET1, COUNTER_SET2 = "counter-set-1", "counter-set-2"
ALL_NODES = "nodeSelectionAll"
PER_DEVICE = "nodeSelectionPerDevice"


def node(name: str, region: str) -> api.Node:
    return api.Node(name=name, labels={"region": region, "planet": "earth"})


def class_(
    name: str, driver: str, *, config_attribute: str | None = None, extra: str = ""
) -> dict[str, Any]:
    expression = f'device.driver == "{driver}"' + extra
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if config_attribute is not None:
        spec["config"] = [device_configuration(driver, config_attribute)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def device_configuration(driver: str, attribute: str) -> dict[str, Any]:
    return {"opaque": {"driver": driver, "parameters": {attribute: attribute + "Value"}}}


def cel(expression: str) -> dict[str, Any]:
    return {"cel": {"expression": expression}}


def request(
    name: str,
    cls: str,
    count: int = 1,
    *selectors: str,
    admin_access: bool | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    capacity: dict[str, str] | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": cls,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if selectors:
        exactly["selectors"] = [cel(s) for s in selectors]
    if admin_access is not None:
        exactly["adminAccess"] = admin_access
    if tolerations:
        exactly["tolerations"] = tolerations
    if capacity is not None:
        exactly["capacity"] = {"requests": capacity}
    return {"name": name, "exactly": exactly}


def all_request(name: str, cls: str, *selectors: str, **kwargs: Any) -> dict[str, Any]:
    out = request(name, cls, 1, *selectors, **kwargs)
    out["exactly"]["allocationMode"] = "All"
    del out["exactly"]["count"]
    return out


def sub(
    name: str,
    cls: str,
    count: int = 1,
    *selectors: str,
    mode: str = "ExactCount",
    tolerations: list[dict[str, Any]] | None = None,
    capacity: dict[str, str] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "deviceClassName": cls, "allocationMode": mode}
    if mode == "ExactCount":
        out["count"] = count
    if selectors:
        out["selectors"] = [cel(s) for s in selectors]
    if tolerations:
        out["tolerations"] = tolerations
    if capacity is not None:
        out["capacity"] = {"requests": capacity}
    return out


def prioritized(name: str, *subs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": list(subs)}


def claim(
    name: str,
    *requests: dict[str, Any],
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
    allocation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    out: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }
    if allocation is not None:
        out["status"] = {"allocation": allocation}
    return out


def claim_with_request(name: str, req: str, cls: str, **kwargs: Any) -> dict[str, Any]:
    return claim(name, request(req, cls), **kwargs)


def match_attribute(attribute: str, *requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {"matchAttribute": attribute}
    if requests:
        out["requests"] = list(requests)
    return out


def distinct_attribute(attribute: str, *requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {"distinctAttribute": attribute}
    if requests:
        out["requests"] = list(requests)
    return out


def device(
    name: str,
    capacity: dict[str, Any] | None = None,
    attributes: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """``capacity`` values: a quantity string, or a full ``DeviceCapacity`` dict."""
    out: dict[str, Any] = {"name": name}
    if capacity:
        out["capacity"] = {
            k: v if isinstance(v, dict) else {"value": v} for k, v in capacity.items()
        }
    if attributes:
        out["attributes"] = attributes
    out.update(fields)
    return out


def counters(counter_set: str, **values: str) -> dict[str, Any]:
    return {"counterSet": counter_set, "counters": {k: {"value": v} for k, v in values.items()}}


def counter_set(name: str, **values: str) -> dict[str, Any]:
    return {"name": name, "counters": {k: {"value": v} for k, v in values.items()}}


def pool(name: str, count: int = 1, generation: int = 1) -> dict[str, Any]:
    return {"name": name, "resourceSliceCount": count, "generation": generation}


def slice_(
    name: str,
    node_selection: str | dict[str, Any],
    pool_: str | dict[str, Any],
    driver: str,
    *devices: dict[str, Any],
    shared_counters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": pool(pool_) if isinstance(pool_, str) else pool_,
    }
    if isinstance(node_selection, dict):
        spec["nodeSelector"] = node_selection
    elif node_selection == ALL_NODES:
        spec["allNodes"] = True
    elif node_selection == PER_DEVICE:
        spec["perDeviceNodeSelection"] = True
    else:
        spec["nodeName"] = node_selection
    if devices:
        spec["devices"] = list(devices)
    if shared_counters:
        spec["sharedCounters"] = shared_counters
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def slice_with_one_device(
    name: str, node_selection: str | dict[str, Any], pool_: str | dict[str, Any], driver: str
) -> dict[str, Any]:
    return slice_(name, node_selection, pool_, driver, device(DEVICE1))


def slice_with_devices(
    name: str,
    node_selection: str | dict[str, Any],
    pool_: str | dict[str, Any],
    driver: str,
    count: int,
) -> dict[str, Any]:
    return slice_(
        name, node_selection, pool_, driver, *(device(f"device-{i}") for i in range(count))
    )


def node_label_selector(key: str, *values: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
        ]
    }


def local_node_selector(name: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
        ]
    }


def parse_all(
    classes: list[dict[str, Any]], slices: list[dict[str, Any]], claims: list[dict[str, Any]]
) -> tuple[dict[str, model.DeviceClass], list[model.ResourceSlice], list[model.ResourceClaim]]:
    parsed_classes = {c.name: c for c in map(model.parse_device_class, classes)}
    return (
        parsed_classes,
        [model.parse_resource_slice(s) for s in slices],
        [model.parse_resource_claim(c) for c in claims],
    )
