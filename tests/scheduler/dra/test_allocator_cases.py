"""Upstream's allocator table (``structured/internal/allocatortesting/allocator_testing.go``,
``TestAllocator``) for the features kube-scheduler v1.36 runs with its default gates.

Each case keeps upstream's name, objects and expectation: the exact devices chosen per
claim (as a multiset, as upstream's ``ConsistOf``), the node selector, the configs, or
the failure. Objects are API-shaped JSON and go through the real parsers. Claims here are
namespaced (``default/claim-0``), which is how a real claim reads in upstream's messages
(``klog.KObj``); upstream's fixtures have no namespace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from nodeagent.scheduler import api
from nodeagent.scheduler.dra import model
from nodeagent.scheduler.dra.allocator import Allocator, InUse, Verdict
from tests.scheduler.dra.builders import (
    ALL_NODES,
    CLAIM0,
    CLAIM1,
    CLASS_A,
    CLASS_B,
    COUNTER_SET1,
    DEVICE0,
    DEVICE1,
    DEVICE2,
    DEVICE3,
    DRIVER_A,
    DRIVER_B,
    NODE1,
    NODE2,
    PER_DEVICE,
    POOL1,
    POOL2,
    POOL3,
    POOL4,
    REGION1,
    REGION2,
    REQ0,
    REQ1,
    REQ2,
    SLICE1,
    SLICE2,
    SUB0,
    SUB1,
    all_request,
    claim,
    claim_with_request,
    class_,
    counter_set,
    counters,
    device,
    device_configuration,
    distinct_attribute,
    local_node_selector,
    match_attribute,
    node,
    node_label_selector,
    parse_all,
    pool,
    prioritized,
    request,
    slice_,
    slice_with_devices,
    slice_with_one_device,
    sub,
)

SHARE_ID = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
DEVICE4 = "device-4"
REQ3 = "req-3"
INT_ATTR = f"{DRIVER_A}/numa"
CLAIM0_ERROR = "claim default/claim-0, request req-0"
CANNOT_ADD_DEVICE2 = (
    f"{CLAIM0_ERROR}: cannot add device driver-a/pool-1/device-2 because a claim constraint "
    "would not be satisfied"
)
VERSION_ATTR = f"{DRIVER_A}/driverVersion"
STRING_ATTR = f"{DRIVER_A}/stringAttribute"
BOOL_ATTR = f"{DRIVER_A}/boolAttribute"
TAINT_NONE = {"key": "taint-key", "value": "taint-value", "effect": "None"}
TAINT_NO_SCHEDULE = {"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}
TAINT_NO_EXECUTE = {"key": "taint-key", "value": "taint-value-2", "effect": "NoExecute"}
TOLERATE_NO_SCHEDULE = {"operator": "Exists", "key": "taint-key", "effect": "NoSchedule"}
TOLERATE_NO_EXECUTE = {
    "operator": "Equal",
    "key": "taint-key",
    "value": "taint-value-2",
    "effect": "NoExecute",
}


def memory_at_least(amount: str) -> str:
    return f'device.capacity["{DRIVER_A}"].memory.compareTo(quantity("{amount}")) >= 0'


def res(
    request_name: str, driver: str, pool_name: str, device_name: str, **extra: Any
) -> dict[str, Any]:
    return {
        "request": request_name,
        "driver": driver,
        "pool": pool_name,
        "device": device_name,
        **extra,
    }


def admin(request_name: str, driver: str, pool_name: str, device_name: str) -> dict[str, Any]:
    return res(request_name, driver, pool_name, device_name, adminAccess=True)


def shared(
    request_name: str, device_name: str, consumed: dict[str, str] | None = None
) -> dict[str, Any]:
    out = res(request_name, DRIVER_A, POOL1, device_name, shareID=SHARE_ID)
    if consumed:
        out["consumedCapacity"] = consumed
    return out


@dataclass(frozen=True)
class Expected:
    results: list[dict[str, Any]]
    node_selector: dict[str, Any] | None = None
    config: list[dict[str, Any]] | None = None


def local(
    *results: dict[str, Any], node_name: str = NODE1, config: list[dict[str, Any]] | None = None
) -> Expected:
    return Expected(list(results), local_node_selector(node_name), config)


@dataclass(frozen=True)
class Case:
    claims: list[dict[str, Any]]
    classes: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)
    node: api.Node = field(default_factory=lambda: node(NODE1, REGION1))
    allocated: tuple[tuple[str, str, str], ...] = ()
    allocated_capacity: dict[tuple[str, str, str], dict[str, str]] = field(default_factory=dict)
    expect: list[Expected] | None = None
    """``None``: no allocation on this node (upstream's nil result)."""
    error: str | None = None
    """A substring of the error (a fatal error, or the unschedulable reason)."""
    verdict: Verdict | None = None
    invocations: int | None = None
    """Upstream's ``expectNumAllocateOneInvocations``: how many search steps it took."""
    shared_ids: tuple[tuple[str, str, str, str], ...] = ()


def with_counters(
    name: str, attributes: dict[str, Any] | None = None, **values: str
) -> dict[str, Any]:
    """``device(name, fromCounters, ...).withDeviceCounterConsumption(counterSet1, ...)``."""
    return device(
        name,
        {k: v for k, v in values.items()},
        attributes,
        consumesCounters=[counters(COUNTER_SET1, **values)],
    )


def range_policy(value: str) -> dict[str, Any]:
    """``withCapacityRequestPolicyRange``: default 2, range 2..4 in steps of 2."""
    return {
        "value": value,
        "requestPolicy": {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}},
    }


def multi(
    name: str, capacity: dict[str, Any] | None = None, attributes: dict[str, Any] | None = None
) -> dict[str, Any]:
    return device(name, capacity, attributes, allowMultipleAllocations=True)


def class_multi(name: str, driver: str, value: bool) -> dict[str, Any]:
    return class_(
        name, driver, extra=f" && device.allowMultipleAllocations == {str(value).lower()}"
    )


def attrs(**values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, bool):
            out[name] = {"bool": value}
        elif isinstance(value, int):
            out[name] = {"int": value}
        elif value.count(".") == 2 and value[0].isdigit():
            out[name] = {"version": value}
        else:
            out[name] = {"string": value}
    return out


def with_tolerations(claim_obj: dict[str, Any], *tolerations: dict[str, Any]) -> dict[str, Any]:
    for req in claim_obj["spec"]["devices"]["requests"]:
        if "exactly" in req:
            req["exactly"]["tolerations"] = list(tolerations)
        for s in req.get("firstAvailable", []):
            s["tolerations"] = list(tolerations)
    return claim_obj


CASES: dict[str, Case] = {
    "empty": Case(claims=[], expect=[]),
    "simple": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1))],
    ),
    "other-node": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B),
            slice_with_one_device(SLICE2, NODE2, POOL2, DRIVER_A),
        ],
        node=node(NODE2, REGION2),
        expect=[local(res(REQ0, DRIVER_A, POOL2, DEVICE1), node_name=NODE2)],
    ),
    "small-and-large": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 1, memory_at_least("1Gi")),
                request(REQ1, CLASS_A, 1, memory_at_least("2Gi")),
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, {"memory": "1Gi"}),
                device(DEVICE2, {"memory": "2Gi"}),
            )
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1), res(REQ1, DRIVER_A, POOL1, DEVICE2))],
    ),
    "small-and-large-backtrack-requests": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 1, memory_at_least("1Gi")),
                request(REQ1, CLASS_A, 1, memory_at_least("2Gi")),
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE2, {"memory": "2Gi"}),
                device(DEVICE1, {"memory": "1Gi"}),
            )
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1), res(REQ1, DRIVER_A, POOL1, DEVICE2))],
    ),
    "small-and-large-backtrack-claims": Case(
        claims=[
            claim(CLAIM0, request(REQ0, CLASS_A, 1, memory_at_least("1Gi"))),
            claim(CLAIM1, request(REQ1, CLASS_A, 1, memory_at_least("2Gi"))),
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE2, {"memory": "2Gi"}),
                device(DEVICE1, {"memory": "1Gi"}),
            )
        ],
        expect=[
            local(res(REQ0, DRIVER_A, POOL1, DEVICE1)),
            local(res(REQ1, DRIVER_A, POOL1, DEVICE2)),
        ],
    ),
    "devices-split-across-different-slices": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 2))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A),
            slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_A),
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1), res(REQ0, DRIVER_A, POOL2, DEVICE1))],
    ),
    "obsolete-slice": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_("slice-1-obsolete", NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
            slice_(
                "slice-1-obsolete", NODE1, pool(POOL1, 2, generation=2), DRIVER_A, device(DEVICE2)
            ),
        ],
        expect=None,
    ),
    "duplicate-slice": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(SLICE1, NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
            slice_(SLICE1 + "-2", NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
        ],
        error="invalid resource pools were encountered",
        verdict=Verdict.UNSCHEDULABLE,
    ),
    "no-slices": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[class_(CLASS_A, DRIVER_A)]
    ),
    "not-enough-suitable-devices": Case(
        claims=[
            claim_with_request(CLAIM0, REQ0, CLASS_A),
            claim_with_request(CLAIM0, REQ1, CLASS_A),
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
    ),
    "no-classes": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        error="could not retrieve device class class-a",
    ),
    "unknown-class": Case(
        claims=[claim_with_request(CLAIM0, REQ0, "unknown-class")],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        error="could not retrieve device class unknown-class",
    ),
    "empty-class": Case(
        claims=[claim_with_request(CLAIM0, REQ0, "")],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        error=f"{CLAIM0_ERROR}: missing device class name (unsupported request type?)",
    ),
    "no-claims-to-allocate": Case(
        claims=[],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        expect=[],
    ),
    "all-devices-single": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1))],
    ),
    "all-devices-with-consumed-counters": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                device(DEVICE1, consumesCounters=[counters(COUNTER_SET1, memory="4Gi")]),
            ),
            slice_(
                SLICE2,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, memory="8Gi")],
            ),
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1))],
    ),
    "all-devices-many": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A),
            slice_with_one_device(SLICE1, NODE1, POOL2, DRIVER_A),
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1), res(REQ0, DRIVER_A, POOL2, DEVICE1))],
    ),
    "all-devices-of-the-incomplete-pool": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1))],
        error=f"{CLAIM0_ERROR}: asks for all devices, but resource pool driver-a/pool-1 is "
        "currently being updated",
    ),
    "all-devices-plus-another": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ0, CLASS_B))],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A),
            slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B),
        ],
        expect=[
            local(res(REQ0, DRIVER_A, POOL1, DEVICE1)),
            local(res(REQ0, DRIVER_B, POOL1, DEVICE1)),
        ],
    ),
    "all-devices-many-plus-another-reversed": Case(
        claims=[claim(CLAIM1, request(REQ0, CLASS_B)), claim(CLAIM0, all_request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2)),
            slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B),
        ],
        expect=[
            local(res(REQ0, DRIVER_B, POOL1, DEVICE1)),
            local(res(REQ0, DRIVER_A, POOL1, DEVICE1), res(REQ0, DRIVER_A, POOL1, DEVICE2)),
        ],
    ),
    "all-devices-no-solution": Case(
        claims=[claim(CLAIM1, request(REQ0, CLASS_A)), claim(CLAIM0, all_request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
    ),
    "all-devices-no-solution-reversed": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
    ),
    "all-devices-slice-without-devices": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A)],
    ),
    "all-devices-some-allocated": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A))],
        allocated=((DRIVER_A, POOL1, DEVICE1),),
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))],
    ),
    "all-devices-some-allocated-admin-access": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A, admin_access=True))],
        allocated=((DRIVER_A, POOL1, DEVICE1),),
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))],
        expect=[
            local(admin(REQ0, DRIVER_A, POOL1, DEVICE1), admin(REQ0, DRIVER_A, POOL1, DEVICE2))
        ],
    ),
    "all-devices-some-allocating-admin-access": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, admin_access=True),
                all_request(REQ1, CLASS_A, admin_access=True),
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))],
    ),
    "count-devices-some-allocated-admin-access": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 2, admin_access=True))],
        allocated=((DRIVER_A, POOL1, DEVICE1),),
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))],
        expect=[
            local(admin(REQ0, DRIVER_A, POOL1, DEVICE1), admin(REQ0, DRIVER_A, POOL1, DEVICE2))
        ],
    ),
    "separate-claims-share-device-admin-access": Case(
        claims=[
            claim(CLAIM0, request(REQ0, CLASS_A, admin_access=True)),
            claim(CLAIM1, request(REQ0, CLASS_A, admin_access=True)),
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))],
        expect=[
            local(admin(REQ0, DRIVER_A, POOL1, DEVICE1)),
            local(admin(REQ0, DRIVER_A, POOL1, DEVICE1)),
        ],
    ),
    "admin-access-claims-device-allocating-for-non-admin-access": Case(
        claims=[
            claim_with_request(CLAIM0, REQ0, CLASS_A),
            claim(CLAIM1, request(REQ0, CLASS_A, admin_access=True)),
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))],
        expect=[
            local(res(REQ0, DRIVER_A, POOL1, DEVICE1)),
            local(admin(REQ0, DRIVER_A, POOL1, DEVICE1)),
        ],
    ),
    "all-devices-slice-without-devices-prioritized-list": Case(
        claims=[
            claim(CLAIM0, prioritized(REQ0, sub(SUB0, CLASS_A, mode="All"), sub(SUB1, CLASS_B)))
        ],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_(SLICE1, NODE1, POOL1, DRIVER_A),
            slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_B),
        ],
        expect=[local(res(f"{REQ0}/{SUB1}", DRIVER_B, POOL2, DEVICE1))],
    ),
    "all-devices-some-allocated-prioritized-list": Case(
        claims=[
            claim(CLAIM0, prioritized(REQ0, sub(SUB0, CLASS_A, mode="All"), sub(SUB1, CLASS_B)))
        ],
        allocated=((DRIVER_A, POOL1, DEVICE1),),
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2)),
            slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_B),
        ],
        expect=[local(res(f"{REQ0}/{SUB1}", DRIVER_B, POOL2, DEVICE1))],
    ),
    "network-attached-device": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_with_one_device(SLICE1, node_label_selector("region", REGION1), POOL1, DRIVER_A)
        ],
        expect=[
            Expected([res(REQ0, DRIVER_A, POOL1, DEVICE1)], node_label_selector("region", REGION1))
        ],
    ),
    "unsuccessful-allocation-network-attached-device": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_with_one_device(SLICE1, node_label_selector("region", REGION1), POOL1, DRIVER_A)
        ],
        node=node(NODE2, REGION2),
    ),
    "many-network-attached-devices": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 4))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_with_one_device(SLICE1, node_label_selector("region", REGION1), POOL1, DRIVER_A),
            slice_with_one_device(SLICE1, ALL_NODES, POOL2, DRIVER_A),
            slice_with_one_device(SLICE1, node_label_selector("planet", "earth"), POOL3, DRIVER_A),
            slice_with_one_device(SLICE1, local_node_selector(NODE1), POOL4, DRIVER_A),
        ],
        expect=[
            Expected(
                [res(REQ0, DRIVER_A, p, DEVICE1) for p in (POOL1, POOL2, POOL3, POOL4)],
                {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "region", "operator": "In", "values": [REGION1]},
                                {"key": "planet", "operator": "In", "values": ["earth"]},
                            ],
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [NODE1]}
                            ],
                        }
                    ]
                },
            )
        ],
    ),
    "local-and-network-attached-devices": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 2))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_with_one_device(SLICE1, node_label_selector("region", REGION1), POOL1, DRIVER_A),
            slice_with_one_device(SLICE1, NODE1, POOL2, DRIVER_A),
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1), res(REQ0, DRIVER_A, POOL2, DEVICE1))],
    ),
    "several-different-drivers": Case(
        claims=[
            claim_with_request(CLAIM0, REQ0, CLASS_A),
            claim_with_request(CLAIM0, REQ0, CLASS_B),
        ],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2)),
            slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B),
        ],
        expect=[
            local(res(REQ0, DRIVER_A, POOL1, DEVICE1)),
            local(res(REQ0, DRIVER_B, POOL1, DEVICE1)),
        ],
    ),
    "already-allocated-devices": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        allocated=((DRIVER_A, POOL1, DEVICE1), (DRIVER_A, POOL1, DEVICE2)),
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
    ),
    "admin-access-enabled": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, admin_access=True))],
        allocated=((DRIVER_A, POOL1, DEVICE1), (DRIVER_A, POOL1, DEVICE2)),
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        expect=[local(admin(REQ0, DRIVER_A, POOL1, DEVICE1))],
    ),
    "with-constraint": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A),
                request(REQ1, CLASS_A),
                constraints=[
                    match_attribute(a) for a in (INT_ATTR, VERSION_ATTR, STRING_ATTR, BOOL_ATTR)
                ],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                *(
                    device(
                        d,
                        None,
                        attrs(
                            driverVersion="1.0.0",
                            numa=1,
                            stringAttribute="stringAttributeValue",
                            boolAttribute=True,
                        ),
                    )
                    for d in (DEVICE1, DEVICE2)
                ),
            )
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1), res(REQ1, DRIVER_A, POOL1, DEVICE2))],
    ),
    "with-constraint-non-existent-attribute": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A),
                constraints=[match_attribute(f"{DRIVER_A}/NonExistentAttribute")],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
    ),
    **{
        f"with-constraint-not-matching-{kind}-attribute": Case(
            claims=[
                claim(
                    CLAIM0,
                    request(REQ0, CLASS_A, 2),
                    constraints=[match_attribute(f"{DRIVER_A}/{name}")],
                )
            ],
            classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
            slices=[
                slice_(
                    SLICE1,
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    device(DEVICE1, None, attrs(**{name: one})),
                    device(DEVICE2, None, attrs(**{name: two})),
                )
            ],
        )
        for kind, name, one, two in (
            ("int", "numa", 1, 2),
            ("string", "stringAttribute", "stringAttributeValue", "stringAttributeValue2"),
            ("bool", "boolAttribute", True, False),
            ("version", "driverVersion", "1.0.0", "2.0.0"),
        )
    },
    "with-constraint-not-matching-int-attribute-all-devices": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A), constraints=[match_attribute(INT_ATTR)])],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, None, attrs(numa=1)),
                device(DEVICE2, None, attrs(numa=2)),
            )
        ],
        error=CANNOT_ADD_DEVICE2,
    ),
    "partitionable-all-mode-constraint-must-error-with-reserved-counter": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A), constraints=[match_attribute(INT_ATTR)])],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                device(DEVICE1, None, attrs(numa=1)),
                device(
                    DEVICE2, None, attrs(numa=2), consumesCounters=[counters(COUNTER_SET1, c="1")]
                ),
            ),
            slice_(
                SLICE2,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, c="1")],
            ),
        ],
        error=CANNOT_ADD_DEVICE2,
    ),
    "with-constraint-for-request": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A),
                request(REQ1, CLASS_A),
                constraints=[match_attribute(VERSION_ATTR, REQ0)],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, None, attrs(driverVersion="1.0.0")),
                device(DEVICE2, None, attrs(driverVersion="2.0.0")),
            )
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1), res(REQ1, DRIVER_A, POOL1, DEVICE2))],
    ),
    "with-constraint-for-request-retry": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A),
                request(REQ1, CLASS_A),
                constraints=[match_attribute(VERSION_ATTR, REQ0), match_attribute(STRING_ATTR)],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, None, attrs(driverVersion="1.0.0", stringAttribute="a")),
                device(DEVICE2, None, attrs(driverVersion="2.0.0", stringAttribute="b")),
                device(DEVICE3, None, attrs(driverVersion="3.0.0", stringAttribute="b")),
            )
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE2), res(REQ1, DRIVER_A, POOL1, DEVICE3))],
    ),
    "with-class-device-config": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A, config_attribute="classAttribute")],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        expect=[
            local(
                res(REQ0, DRIVER_A, POOL1, DEVICE1),
                config=[
                    {
                        "source": "FromClass",
                        "requests": [REQ0],
                        **device_configuration(DRIVER_A, "classAttribute"),
                    }
                ],
            )
        ],
    ),
    "with-class-device-config-with-multiple-request-and-configs": Case(
        claims=[
            claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A), request(REQ2, CLASS_B))
        ],
        classes=[
            class_(CLASS_A, DRIVER_A, config_attribute="classAttribute-A"),
            class_(CLASS_B, DRIVER_B, config_attribute="classAttribute-B"),
        ],
        slices=[
            slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 2),
            slice_with_one_device(SLICE2, NODE1, POOL1, DRIVER_B),
        ],
        expect=[
            local(
                res(REQ0, DRIVER_A, POOL1, DEVICE0),
                res(REQ1, DRIVER_A, POOL1, DEVICE1),
                res(REQ2, DRIVER_B, POOL1, DEVICE1),
                config=[
                    {
                        "source": "FromClass",
                        "requests": [REQ0, REQ1],
                        **device_configuration(DRIVER_A, "classAttribute-A"),
                    },
                    {
                        "source": "FromClass",
                        "requests": [REQ2],
                        **device_configuration(DRIVER_B, "classAttribute-B"),
                    },
                ],
            )
        ],
    ),
    "claim-with-device-config": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A),
                config=[{"requests": [REQ0], **device_configuration(DRIVER_A, "deviceAttribute")}],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        expect=[
            local(
                res(REQ0, DRIVER_A, POOL1, DEVICE1),
                config=[
                    {
                        "source": "FromClaim",
                        "requests": [REQ0],
                        **device_configuration(DRIVER_A, "deviceAttribute"),
                    }
                ],
            )
        ],
    ),
    "unknown-selector": Case(
        claims=[
            claim(
                CLAIM0, {"name": REQ0, "exactly": {"deviceClassName": CLASS_A, "selectors": [{}]}}
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        error="CEL expression empty (unsupported selector type?)",
    ),
    "unknown-constraint": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A), constraints=[{}])],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        error="empty constraint (unsupported constraint type?)",
    ),
    "invalid-CEL-one-device": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 1, "noSuchVar"))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        error="undeclared reference",
    ),
    "invalid-CEL-one-device-class": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[
            {
                "metadata": {"name": CLASS_A},
                "spec": {"selectors": [{"cel": {"expression": "noSuchVar"}}]},
            }
        ],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        error="undeclared reference",
    ),
    "invalid-CEL-all-devices": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A, "noSuchVar"))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        error="undeclared reference",
    ),
    "too-many-devices-single-request": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 500))],
        classes=[class_(CLASS_A, DRIVER_A)],
        error="exceeds the claim limit",
    ),
    "many-devices-okay": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 32))], classes=[class_(CLASS_A, DRIVER_A)]
    ),
    "too-many-devices-total": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 32), request(REQ1, CLASS_A, 1))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 33)],
        error="exceeds the claim limit",
    ),
    "prioritized-list-first-unavailable": Case(
        claims=[claim(CLAIM0, prioritized(REQ0, sub(SUB0, CLASS_B), sub(SUB1, CLASS_A)))],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        expect=[local(res(f"{REQ0}/{SUB1}", DRIVER_A, POOL1, DEVICE1))],
    ),
    "prioritized-list-non-available": Case(
        claims=[claim(CLAIM0, prioritized(REQ0, sub(SUB0, CLASS_B, 2), sub(SUB1, CLASS_A, 2)))],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A),
            slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_B),
        ],
    ),
    "prioritized-list-device-config": Case(
        claims=[
            claim(
                CLAIM0,
                prioritized(REQ0, sub(SUB0, CLASS_A), sub(SUB1, CLASS_B, 2)),
                config=[
                    {"requests": [f"{REQ0}/{SUB0}"], **device_configuration(DRIVER_A, "foo")},
                    {"requests": [f"{REQ0}/{SUB1}"], **device_configuration(DRIVER_B, "bar")},
                ],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_B, device(DEVICE1), device(DEVICE2))],
        expect=[
            local(
                res(f"{REQ0}/{SUB1}", DRIVER_B, POOL1, DEVICE1),
                res(f"{REQ0}/{SUB1}", DRIVER_B, POOL1, DEVICE2),
                config=[
                    {
                        "source": "FromClaim",
                        "requests": [f"{REQ0}/{SUB1}"],
                        **device_configuration(DRIVER_B, "bar"),
                    }
                ],
            )
        ],
    ),
    "prioritized-list-class-config": Case(
        claims=[claim(CLAIM0, prioritized(REQ0, sub(SUB0, CLASS_A, 2), sub(SUB1, CLASS_B, 2)))],
        classes=[
            class_(CLASS_A, DRIVER_A, config_attribute="foo"),
            class_(CLASS_B, DRIVER_B, config_attribute="bar"),
        ],
        slices=[
            slice_(SLICE1, NODE1, POOL1, DRIVER_B, device(DEVICE1), device(DEVICE2)),
            slice_(SLICE2, NODE1, POOL2, DRIVER_A, device(DEVICE3)),
        ],
        expect=[
            local(
                res(f"{REQ0}/{SUB1}", DRIVER_B, POOL1, DEVICE1),
                res(f"{REQ0}/{SUB1}", DRIVER_B, POOL1, DEVICE2),
                config=[
                    {
                        "source": "FromClass",
                        "requests": [f"{REQ0}/{SUB1}"],
                        **device_configuration(DRIVER_B, "bar"),
                    }
                ],
            )
        ],
    ),
    "prioritized-list-subrequests-with-expressions": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 1, memory_at_least("1Gi")),
                prioritized(
                    REQ1,
                    sub(SUB0, CLASS_A, 1, memory_at_least("4Gi")),
                    sub(SUB1, CLASS_A, 2, memory_at_least("2Gi")),
                ),
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, {"memory": "2Gi"}),
                device(DEVICE2, {"memory": "2Gi"}),
                device(DEVICE3, {"memory": "1Gi"}),
            )
        ],
        expect=[
            local(
                res(REQ0, DRIVER_A, POOL1, DEVICE3),
                res(f"{REQ1}/{SUB1}", DRIVER_A, POOL1, DEVICE1),
                res(f"{REQ1}/{SUB1}", DRIVER_A, POOL1, DEVICE2),
            )
        ],
    ),
    "prioritized-list-subrequests-with-constraints-ref-parent-request": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 1, memory_at_least("8Gi")),
                prioritized(
                    REQ1,
                    sub(SUB0, CLASS_A, 1, memory_at_least("2Gi")),
                    sub(SUB1, CLASS_A, 1, memory_at_least("1Gi")),
                ),
                constraints=[match_attribute(VERSION_ATTR, REQ0, REQ1)],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, {"memory": "8Gi"}, attrs(driverVersion="1.0.0")),
            ),
            slice_(
                SLICE2,
                NODE1,
                POOL2,
                DRIVER_A,
                device(DEVICE2, {"memory": "2Gi"}, attrs(driverVersion="2.0.0")),
                device(DEVICE3, {"memory": "1Gi"}, attrs(driverVersion="1.0.0")),
            ),
        ],
        expect=[
            local(
                res(REQ0, DRIVER_A, POOL1, DEVICE1), res(f"{REQ1}/{SUB1}", DRIVER_A, POOL2, DEVICE3)
            )
        ],
    ),
    "prioritized-list-subrequests-with-constraints-ref-sub-request": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 1, memory_at_least("8Gi")),
                prioritized(
                    REQ1,
                    sub(SUB0, CLASS_A, 1, memory_at_least("2Gi")),
                    sub(SUB1, CLASS_A, 1, memory_at_least("1Gi")),
                ),
                constraints=[match_attribute(VERSION_ATTR, REQ0, f"{REQ1}/{SUB0}")],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, {"memory": "8Gi"}, attrs(driverVersion="1.0.0")),
            ),
            slice_(
                SLICE2,
                NODE1,
                POOL2,
                DRIVER_A,
                device(DEVICE2, {"memory": "2Gi"}, attrs(driverVersion="2.0.0")),
            ),
        ],
        expect=[
            local(
                res(REQ0, DRIVER_A, POOL1, DEVICE1), res(f"{REQ1}/{SUB1}", DRIVER_A, POOL2, DEVICE2)
            )
        ],
    ),
    "prioritized-list-subrequests-with-allocation-mode-all": Case(
        claims=[
            claim(CLAIM0, prioritized(REQ0, sub(SUB0, CLASS_A, mode="All"), sub(SUB1, CLASS_A)))
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))],
        allocated=((DRIVER_A, POOL1, DEVICE1),),
        expect=[local(res(f"{REQ0}/{SUB1}", DRIVER_A, POOL1, DEVICE2))],
    ),
    "prioritized-list-with-backtracking": Case(
        claims=[
            claim(
                CLAIM0,
                prioritized(
                    REQ0,
                    sub(SUB0, CLASS_A, 1, memory_at_least("8Gi")),
                    sub(SUB1, CLASS_A, 1, memory_at_least("4Gi")),
                ),
                request(REQ1, CLASS_A, 1, memory_at_least("8Gi")),
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, {"memory": "8Gi"})),
            slice_(SLICE2, NODE1, POOL2, DRIVER_A, device(DEVICE2, {"memory": "4Gi"})),
        ],
        expect=[
            local(
                res(f"{REQ0}/{SUB1}", DRIVER_A, POOL2, DEVICE2), res(REQ1, DRIVER_A, POOL1, DEVICE1)
            )
        ],
    ),
    "prioritized-list-too-many-in-first-subrequest": Case(
        claims=[claim(CLAIM0, prioritized(REQ0, sub(SUB0, CLASS_B, 500), sub(SUB1, CLASS_A)))],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)],
        expect=[local(res(f"{REQ0}/{SUB1}", DRIVER_A, POOL1, DEVICE1))],
    ),
    "partitionable-devices-single-device": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                device(DEVICE1, consumesCounters=[counters(COUNTER_SET1, memory="4Gi")]),
            ),
            slice_(
                SLICE2,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, memory="8Gi")],
            ),
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1))],
    ),
    "partitionable-devices-multiple-devices": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                with_counters(DEVICE1, memory="4Gi"),
                with_counters(DEVICE2, memory="6Gi"),
                with_counters(DEVICE3, memory="4Gi"),
            ),
            slice_(
                SLICE2,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, memory="8Gi")],
            ),
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1), res(REQ1, DRIVER_A, POOL1, DEVICE3))],
    ),
    "partitionable-devices-no-capacity-available": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                with_counters(DEVICE1, memory="4Gi"),
                with_counters(DEVICE2, memory="16Gi"),
            ),
            slice_(
                SLICE2,
                NODE1,
                POOL1,
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, memory="18Gi")],
            ),
        ],
        allocated=((DRIVER_A, POOL1, DEVICE2),),
    ),
    "partitionable-devices-per-device-node-selection-nodename": Case(
        claims=[
            claim(
                CLAIM0,
                prioritized(
                    REQ0,
                    sub(SUB0, CLASS_A, 1, memory_at_least("6Gi")),
                    sub(SUB1, CLASS_A, 1, memory_at_least("4Gi")),
                ),
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                PER_DEVICE,
                pool(POOL1, 2),
                DRIVER_A,
                {**with_counters(DEVICE1, memory="4Gi"), "nodeName": NODE1},
                {**with_counters(DEVICE2, memory="6Gi"), "nodeName": NODE2},
            ),
            slice_(
                SLICE2,
                PER_DEVICE,
                pool(POOL1, 2),
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, memory="18Gi")],
            ),
        ],
        expect=[local(res(f"{REQ0}/{SUB1}", DRIVER_A, POOL1, DEVICE1))],
    ),
    "tainted-two-devices": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, taints=[TAINT_NO_SCHEDULE]),
                device(DEVICE2, taints=[TAINT_NO_EXECUTE]),
            )
        ],
    ),
    "tainted-two-devices-tolerated": Case(
        claims=[with_tolerations(claim_with_request(CLAIM0, REQ0, CLASS_A), TOLERATE_NO_EXECUTE)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, taints=[TAINT_NO_SCHEDULE]),
                device(DEVICE2, taints=[TAINT_NO_EXECUTE]),
            )
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE2, tolerations=[TOLERATE_NO_EXECUTE]))],
    ),
    "tainted-one-device-two-taints-both-tolerated": Case(
        claims=[
            with_tolerations(
                claim_with_request(CLAIM0, REQ0, CLASS_A), TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, taints=[TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE]),
            )
        ],
        expect=[
            local(
                res(
                    REQ0,
                    DRIVER_A,
                    POOL1,
                    DEVICE1,
                    tolerations=[TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE],
                )
            )
        ],
    ),
    "tainted-no-effect": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, taints=[TAINT_NONE]))],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1))],
    ),
    "tainted-prioritized-list": Case(
        claims=[claim(CLAIM0, prioritized(REQ0, sub(SUB0, CLASS_B), sub(SUB1, CLASS_A)))],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, taints=[TAINT_NO_SCHEDULE]))
        ],
    ),
    "tainted-admin-access": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, admin_access=True))],
        allocated=((DRIVER_A, POOL1, DEVICE1), (DRIVER_A, POOL1, DEVICE2)),
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, taints=[TAINT_NO_SCHEDULE]))
        ],
    ),
    "tainted-all-devices-single": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, taints=[TAINT_NO_SCHEDULE]))
        ],
    ),
    "device-binding-conditions": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(
                    DEVICE1,
                    bindingConditions=["IsPrepare"],
                    bindingFailureConditions=["BindingFailed"],
                ),
            )
        ],
        expect=[
            local(
                res(
                    REQ0,
                    DRIVER_A,
                    POOL1,
                    DEVICE1,
                    bindingConditions=["IsPrepare"],
                    bindingFailureConditions=["BindingFailed"],
                )
            )
        ],
    ),
    "binding-conditions-with-and-without": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1),
                device(
                    DEVICE2,
                    bindingConditions=["IsPrepare"],
                    bindingFailureConditions=["BindingFailed"],
                ),
            )
        ],
        expect=[
            local(
                res(REQ0, DRIVER_A, POOL1, DEVICE1),
                res(
                    REQ1,
                    DRIVER_A,
                    POOL1,
                    DEVICE2,
                    bindingConditions=["IsPrepare"],
                    bindingFailureConditions=["BindingFailed"],
                ),
            )
        ],
    ),
    "node-restriction": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                node_label_selector("planet", "earth"),
                POOL1,
                DRIVER_A,
                device(DEVICE1, bindsToNode=True),
            )
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1))],
    ),
    "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request": Case(
        claims=[
            claim(CLAIM0, request(REQ0, CLASS_A, capacity={"capacity-0": "1"})),
            claim(CLAIM1, request(REQ0, CLASS_A, capacity={"capacity-0": "1"})),
        ],
        classes=[class_multi(CLASS_A, DRIVER_A, True)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(DEVICE1, {"capacity-0": "2"}))],
        expect=[
            local(shared(REQ0, DEVICE1, {"capacity-0": "1"})),
            local(shared(REQ0, DEVICE1, {"capacity-0": "1"})),
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-range-policy-step": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, capacity={"capacity-0": "3"}))],
        classes=[class_multi(CLASS_A, DRIVER_A, True)],
        slices=[
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(DEVICE1, {"capacity-0": range_policy("4")})
            )
        ],
        expect=[local(shared(REQ0, DEVICE1, {"capacity-0": "4"}))],
    ),
    "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, capacity={"capacity-0": "2"}))],
        classes=[class_multi(CLASS_A, DRIVER_A, True)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(
                    DEVICE1,
                    {
                        "capacity-0": {
                            "value": "3",
                            "requestPolicy": {"default": "1", "validValues": ["1", "3"]},
                        }
                    },
                ),
            )
        ],
        expect=[local(shared(REQ0, DEVICE1, {"capacity-0": "3"}))],
    ),
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, capacity={"capacity-0": "2"}))],
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {"capacity-0": "2"}},
        classes=[class_multi(CLASS_A, DRIVER_A, True)],
        slices=[
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(DEVICE1, {"capacity-0": range_policy("4")})
            )
        ],
        expect=[local(shared(REQ0, DEVICE1, {"capacity-0": "2"}))],
    ),
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, capacity={"capacity-0": "2"}))],
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {"capacity-0": "2"}},
        classes=[class_multi(CLASS_A, DRIVER_A, True)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(DEVICE1, {"capacity-0": range_policy("2")}),
                multi(DEVICE2, {"capacity-0": range_policy("2")}),
            )
        ],
        expect=[local(shared(REQ0, DEVICE2, {"capacity-0": "2"}))],
    ),
    "consumable-capacity-with-multi-allocatable-device-backtrack": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, capacity={"capacity-0": "2"}),
                request(REQ1, CLASS_A, capacity={"capacity-0": "2"}),
                constraints=[match_attribute(STRING_ATTR)],
            ),
            claim(CLAIM1, request(REQ0, CLASS_A, capacity={"capacity-0": "2"})),
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(
                    DEVICE2,
                    {"capacity-0": range_policy("2")},
                    attrs(stringAttribute="stringAttributeValue1"),
                ),
                multi(
                    DEVICE1,
                    {"capacity-0": range_policy("4")},
                    attrs(stringAttribute="stringAttributeValue2"),
                ),
            )
        ],
        expect=[
            local(
                shared(REQ0, DEVICE1, {"capacity-0": "2"}),
                shared(REQ1, DEVICE1, {"capacity-0": "2"}),
            ),
            local(shared(REQ0, DEVICE2, {"capacity-0": "2"})),
        ],
    ),
    "consumable-capacity-dedicated-device-with-consumable-capacity-request": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, capacity={"capacity-0": "1"}))],
        classes=[class_multi(CLASS_A, DRIVER_A, False)],
        slices=[slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, {"capacity-0": "1"}))],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1))],
    ),
    "with-distinct-constraints": Case(
        claims=[
            claim(
                CLAIM0,
                request(REQ0, CLASS_A),
                request(REQ1, CLASS_A),
                request(REQ2, CLASS_A),
                request(REQ3, CLASS_A),
                constraints=[
                    distinct_attribute(BOOL_ATTR, REQ0, REQ1),
                    distinct_attribute(VERSION_ATTR, REQ0, REQ1, REQ2),
                    distinct_attribute(INT_ATTR, REQ0, REQ1, REQ2, REQ3),
                ],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(DEVICE1, None, attrs(driverVersion="1.0.0", numa=0, boolAttribute=True)),
                multi(DEVICE2, None, attrs(driverVersion="1.0.1", numa=1, boolAttribute=False)),
                multi(DEVICE3, None, attrs(driverVersion="1.0.2", numa=2, boolAttribute=True)),
                multi(DEVICE4, None, attrs(driverVersion="1.0.0", numa=3, boolAttribute=True)),
            )
        ],
        expect=[
            local(
                shared(REQ0, DEVICE1),
                shared(REQ1, DEVICE2),
                shared(REQ2, DEVICE3),
                shared(REQ3, DEVICE4),
            )
        ],
    ),
    "with-distinct-constraints-with-subrequests": Case(
        claims=[
            claim(
                CLAIM0,
                *(
                    prioritized(
                        r,
                        sub(SUB0, CLASS_A, 1, f'device.attributes["{DRIVER_A}"].boolAttribute'),
                        sub(SUB1, CLASS_A),
                    )
                    for r in (REQ0, REQ1, REQ2)
                ),
                constraints=[distinct_attribute(BOOL_ATTR, REQ0, REQ1)],
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(DEVICE1, None, attrs(boolAttribute=True)),
                multi(DEVICE2, None, attrs(boolAttribute=False)),
            )
        ],
        expect=[
            local(
                shared(f"{REQ0}/{SUB0}", DEVICE1),
                shared(f"{REQ1}/{SUB1}", DEVICE2),
                shared(f"{REQ2}/{SUB0}", DEVICE1),
            )
        ],
    ),
}

MORE_CASES: dict[str, Case] = {
    "allocation-mode-all-with-multi-host-resource-pool": Case(
        claims=[claim(CLAIM0, all_request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(SLICE1, NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
            slice_(SLICE2, NODE2, pool(POOL1, 2), DRIVER_A, device(DEVICE2)),
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE1))],
    ),
    "multi-host-resource-pool-with-stale-slice-for-current-node": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(SLICE1, NODE1, pool(POOL1, 2, generation=1), DRIVER_A, device(DEVICE1)),
            slice_(SLICE2, NODE2, pool(POOL1, 2, generation=2), DRIVER_A, device(DEVICE2)),
        ],
    ),
    "partitionable-devices-multiple-counters": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                *(
                    device(
                        name,
                        consumesCounters=[
                            counters(COUNTER_SET1, memory=m1, cpus=c1),
                            counters("counter-set-2", cpus=c2, memory=m2),
                        ],
                    )
                    for name, m1, c1, c2, m2 in (
                        (DEVICE1, "4Gi", "6", "4", "2Gi"),
                        (DEVICE2, "6Gi", "4", "6", "6Gi"),
                        (DEVICE3, "4Gi", "4", "4", "4Gi"),
                    )
                ),
            ),
            slice_(
                SLICE2,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                shared_counters=[
                    counter_set(COUNTER_SET1, cpus="8", memory="18Gi"),
                    counter_set("counter-set-2", cpus="12", memory="18Gi"),
                ],
            ),
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL1, DEVICE2), res(REQ1, DRIVER_A, POOL1, DEVICE3))],
    ),
    "partitionable-devices-overallocated-capacity-pool": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                with_counters(DEVICE1, memory="4Gi"),
                with_counters(DEVICE2, memory="20Gi"),
            ),
            slice_(
                SLICE2,
                NODE1,
                POOL1,
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, memory="18Gi")],
            ),
        ],
        allocated=((DRIVER_A, POOL1, DEVICE2),),
    ),
    "partitionable-devices-per-device-node-selection-node-selector": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                PER_DEVICE,
                pool(POOL1, 2),
                DRIVER_A,
                {
                    **with_counters(DEVICE1, memory="4Gi"),
                    "nodeSelector": node_label_selector("region", REGION1),
                },
            ),
            slice_(
                SLICE2,
                PER_DEVICE,
                pool(POOL1, 2),
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, memory="18Gi")],
            ),
        ],
        expect=[
            Expected([res(REQ0, DRIVER_A, POOL1, DEVICE1)], node_label_selector("region", REGION1))
        ],
    ),
    "prioritized-list-max-allocation-limit-request": Case(
        claims=[
            claim(
                CLAIM0,
                prioritized(REQ0, sub(SUB0, CLASS_A, 32), sub(SUB1, CLASS_A, 16)),
                prioritized(REQ1, sub(SUB0, CLASS_A, 32), sub(SUB1, CLASS_A, 16)),
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 64)],
        expect=[
            local(
                *(res(f"{REQ0}/{SUB1}", DRIVER_A, POOL1, f"device-{i}") for i in range(16)),
                *(res(f"{REQ1}/{SUB1}", DRIVER_A, POOL1, f"device-{i}") for i in range(16, 32)),
            )
        ],
        invocations=75,
    ),
    "prioritized-list-max-allocation-allocation-mode-all": Case(
        claims=[
            claim(
                CLAIM0,
                prioritized(REQ0, sub(SUB0, CLASS_A, mode="All"), sub(SUB1, CLASS_A, 2)),
                request(REQ1, CLASS_B, 2),
            )
        ],
        classes=[class_(CLASS_A, DRIVER_A), class_(CLASS_B, DRIVER_B)],
        slices=[
            slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 31),
            slice_with_devices(SLICE2, NODE1, POOL2, DRIVER_B, 2),
        ],
        expect=[
            local(
                res(f"{REQ0}/{SUB1}", DRIVER_A, POOL1, "device-0"),
                res(f"{REQ0}/{SUB1}", DRIVER_A, POOL1, "device-1"),
                res(REQ1, DRIVER_B, POOL2, "device-0"),
                res(REQ1, DRIVER_B, POOL2, "device-1"),
            )
        ],
        invocations=42,
    ),
    "invalid-pool-is-ok-if-devices-can-be-allocated-from-other": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(SLICE1, NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
            slice_(SLICE2, NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
            slice_("slice-3", NODE1, pool(POOL2, 1), DRIVER_A, device(DEVICE2)),
        ],
        expect=[local(res(REQ0, DRIVER_A, POOL2, DEVICE2))],
    ),
    "invalid-pool-is-error-if-no-other-device-can-be-allocated": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(SLICE1, NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
            slice_(SLICE2, NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
            slice_("slice-3", NODE1, pool(POOL2, 1), DRIVER_A, device(DEVICE2)),
        ],
        allocated=((DRIVER_A, POOL2, DEVICE2),),
        error="invalid resource pools were encountered",
        verdict=Verdict.UNSCHEDULABLE,
    ),
    "no-allocation-from-incomplete-pools": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[slice_(SLICE1, NODE1, pool(POOL1, 2), DRIVER_A, device(DEVICE1))],
    ),
    "check-combinations-within-single-request-single-pool-single-slice": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 5))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                *(device(d) for d in (DEVICE1, DEVICE2, DEVICE3, DEVICE4)),
            )
        ],
        invocations=16,
    ),
    "allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated": Case(  # noqa: E501 (upstream's name)
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, capacity={"capacity-0": "1"}))],
        allocated=((DRIVER_A, POOL1, DEVICE1),),
        classes=[class_multi(CLASS_A, DRIVER_A, True)],
        slices=[
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(DEVICE1, {"capacity-0": range_policy("2")})
            )
        ],
    ),
    "allow-multiple-allocations-with-shared-device-counter-cross-cycle": Case(
        claims=[
            claim(
                CLAIM0,
                request(
                    REQ0,
                    CLASS_A,
                    1,
                    f'device.attributes["{DRIVER_A}"].mode == "b"',
                    capacity={"capacity-0": "1"},
                ),
            )
        ],
        shared_ids=((DRIVER_A, POOL1, DEVICE1, SHARE_ID),),
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {"capacity-0": "1"}},
        classes=[class_multi(CLASS_A, DRIVER_A, True)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                {
                    **with_counters(DEVICE1, attrs(mode="a"), **{"capacity-0": "1"}),
                    "allowMultipleAllocations": True,
                },
                {
                    **with_counters(DEVICE2, attrs(mode="b"), **{"capacity-0": "1"}),
                    "allowMultipleAllocations": True,
                },
            ),
            slice_(
                SLICE2,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, **{"capacity-0": "1"})],
            ),
        ],
    ),
    "partitionable-devices-with-binding-conditions-some-devices-no-conditions": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, 3))],
        classes=[class_(CLASS_A, DRIVER_A)],
        slices=[
            slice_(
                SLICE1,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                {
                    **with_counters(DEVICE1, memory="2Gi"),
                    "bindingConditions": ["IsPrepare"],
                    "bindingFailureConditions": ["BindingFailed"],
                },
                with_counters(DEVICE2, memory="2Gi"),
                {
                    **with_counters(DEVICE3, memory="4Gi"),
                    "bindingConditions": ["IsReady"],
                    "bindingFailureConditions": ["BindingTimeout"],
                },
            ),
            slice_(
                SLICE2,
                NODE1,
                pool(POOL1, 2),
                DRIVER_A,
                shared_counters=[counter_set(COUNTER_SET1, memory="8Gi")],
            ),
        ],
        expect=[
            local(
                res(
                    REQ0,
                    DRIVER_A,
                    POOL1,
                    DEVICE1,
                    bindingConditions=["IsPrepare"],
                    bindingFailureConditions=["BindingFailed"],
                ),
                res(REQ0, DRIVER_A, POOL1, DEVICE2),
                res(
                    REQ0,
                    DRIVER_A,
                    POOL1,
                    DEVICE3,
                    bindingConditions=["IsReady"],
                    bindingFailureConditions=["BindingTimeout"],
                ),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy": Case(
        claims=[claim(CLAIM0, request(REQ0, CLASS_A, capacity={"capacity-0": "6"}))],
        classes=[class_multi(CLASS_A, DRIVER_A, True)],
        slices=[
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(DEVICE1, {"capacity-0": range_policy("10")})
            )
        ],
    ),
}
CASES.update(MORE_CASES)


def _canonical(items: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(i, sort_keys=True) for i in items)


@pytest.mark.parametrize("name", sorted(CASES))
def test_upstream_case(name: str) -> None:
    case = CASES[name]
    classes, slices, claims = parse_all(case.classes, case.slices, case.claims)
    in_use = InUse(
        devices=frozenset(model.DeviceID(*d) for d in case.allocated),
        shared=frozenset((model.DeviceID(*s[:3]), s[3]) for s in case.shared_ids),
        consumed_capacity={
            model.DeviceID(*d): {k: Decimal(v) for k, v in c.items()}
            for d, c in case.allocated_capacity.items()
        },
    )
    allocator = Allocator(classes, slices, in_use, new_share_id=lambda: SHARE_ID)
    outcome = allocator.allocate(case.node, claims)
    if case.invocations is not None:
        assert allocator.invocations == case.invocations

    if case.error is not None:
        assert outcome.verdict is (case.verdict or Verdict.ERROR), outcome
        assert case.error in outcome.reason
        return
    if case.expect is None:
        assert outcome.verdict is Verdict.UNSCHEDULABLE, outcome
        assert outcome.reason == "cannot allocate all claims"
        return
    assert outcome.verdict is Verdict.ALLOCATED, outcome
    assert len(outcome.allocations) == len(case.expect)
    for allocation, expected in zip(outcome.allocations, case.expect, strict=True):
        written = model.allocation_to_api(allocation)
        assert _canonical(written["devices"].get("results", [])) == _canonical(expected.results)
        assert written.get("nodeSelector") == expected.node_selector
        assert written["devices"].get("config") == expected.config
