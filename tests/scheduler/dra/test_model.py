"""Reading ``resource.k8s.io/v1`` objects as the apiserver returns them, and writing an
allocation back: shapes taken from a real cluster running the example DRA driver
(``gpu.example.com``) and kube-scheduler v1.36."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api
from nodeagent.scheduler.dra import model

SLICE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {
        "name": "worker-1-gpu.example.com-8xk2p",
        "generateName": "worker-1-gpu.example.com-",
        "uid": "0b6d1b8e-4a37-4f0e-9d0f-7d0c3a1e5f11",
        "resourceVersion": "81234",
        "creationTimestamp": "2026-11-28T20:01:02Z",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": "worker-1", "uid": "u-node"}
        ],
    },
    "spec": {
        "driver": "gpu.example.com",
        "nodeName": "worker-1",
        "pool": {"name": "worker-1", "generation": 3, "resourceSliceCount": 1},
        "devices": [
            {
                "name": "gpu-0",
                "attributes": {
                    "driverVersion": {"version": "1.0.0"},
                    "index": {"int": 0},
                    "model": {"string": "LATEST-GPU-MODEL"},
                    "uuid": {"string": "gpu-18db0e85-99e9-c746-8531-ffeb86328b39"},
                    "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
                    "mig": {"bool": False},
                },
                "capacity": {"memory": {"value": "80Gi"}},
                "taints": [
                    {
                        "key": "example.com/unhealthy",
                        "value": "ecc",
                        "effect": "NoSchedule",
                        "timeAdded": "2026-11-28T20:05:00Z",
                    }
                ],
            },
            {
                "name": "gpu-1",
                "attributes": {"driverVersion": {"version": "1.1.0-rc.1+build.5"}},
                "capacity": {
                    "memory": {
                        "value": "80Gi",
                        "requestPolicy": {
                            "default": "10Gi",
                            "validRange": {"min": "10Gi", "max": "80Gi", "step": "10Gi"},
                        },
                    }
                },
                "allowMultipleAllocations": True,
            },
        ],
    },
}

PARTITIONED: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "counters"},
    "spec": {
        "driver": "gpu.example.com",
        "pool": {"name": "worker-1", "generation": 1, "resourceSliceCount": 2},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {
                    "matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["worker-1"]}
                    ]
                }
            ]
        },
        "sharedCounters": [
            {
                "name": "gpu-0-counters",
                "counters": {"memory": {"value": "80Gi"}, "sm": {"value": "132"}},
            }
        ],
    },
}

MODEL_SELECTOR = 'device.attributes["gpu.example.com"].model == "LATEST-GPU-MODEL"'

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {
        "name": "pod-gpu-2x5dk",
        "namespace": "team-a",
        "uid": "4f0d6c59-0a4f-4c35-9d0e-5d0b1f0d2c11",
        "resourceVersion": "81300",
        "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "pod", "uid": "pod-uid", "controller": True}
        ],
        "finalizers": ["resource.kubernetes.io/delete-protection"],
    },
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.example.com",
                        "allocationMode": "ExactCount",
                        "count": 1,
                        "selectors": [{"cel": {"expression": MODEL_SELECTOR}}],
                        "tolerations": [
                            {
                                "key": "example.com/unhealthy",
                                "operator": "Exists",
                                "effect": "NoSchedule",
                            }
                        ],
                    },
                },
                {
                    "name": "nic",
                    "firstAvailable": [
                        {
                            "name": "fast",
                            "deviceClassName": "nic.example.com",
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                        {
                            "name": "any",
                            "deviceClassName": "nic.example.com",
                            "allocationMode": "All",
                        },
                    ],
                },
            ],
            "constraints": [
                {"requests": ["gpu", "nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
            ],
            "config": [
                {
                    "requests": ["gpu"],
                    "opaque": {
                        "driver": "gpu.example.com",
                        "parameters": {"sharing": {"strategy": "TimeSlicing"}},
                    },
                }
            ],
        }
    },
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.example.com",
                        "pool": "worker-1",
                        "device": "gpu-0",
                        "tolerations": [
                            {
                                "key": "example.com/unhealthy",
                                "operator": "Exists",
                                "effect": "NoSchedule",
                            }
                        ],
                    },
                    {
                        "request": "nic/fast",
                        "driver": "nic.example.com",
                        "pool": "worker-1",
                        "device": "eth1",
                    },
                ],
                "config": [
                    {
                        "source": "FromClaim",
                        "requests": ["gpu"],
                        "opaque": {
                            "driver": "gpu.example.com",
                            "parameters": {"sharing": {"strategy": "TimeSlicing"}},
                        },
                    }
                ],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["worker-1"]}
                        ]
                    }
                ]
            },
            "allocationTimestamp": "2026-11-28T20:10:00Z",
        },
        "reservedFor": [{"resource": "pods", "name": "pod", "uid": "pod-uid"}],
    },
}


def test_slice_reads_typed_attributes_capacity_taints_and_policies() -> None:
    s = model.parse_resource_slice(SLICE)
    assert (s.driver, s.pool, s.generation, s.resource_slice_count, s.node_name) == (
        "gpu.example.com",
        "worker-1",
        3,
        1,
        "worker-1",
    )
    gpu0, gpu1 = s.devices
    assert gpu0.attributes["index"] == 0 and type(gpu0.attributes["index"]) is int
    assert gpu0.attributes["mig"] is False
    assert gpu0.attributes["driverVersion"] == model.SemVer(1, 0, 0)
    assert gpu0.attributes["resource.kubernetes.io/pcieRoot"] == "pci0000:00"
    assert gpu0.capacity["memory"].value.value == Decimal(80 * 2**30)
    assert gpu0.taints == (
        model.DeviceTaint(
            "example.com/unhealthy", model.TaintEffect.NO_SCHEDULE, "ecc", "2026-11-28T20:05:00Z"
        ),
    )
    version = gpu1.attributes["driverVersion"]
    assert isinstance(version, model.SemVer) and str(version) == "1.1.0-rc.1+build.5"
    policy = gpu1.capacity["memory"].request_policy
    assert (
        policy is not None
        and policy.valid_range is not None
        and policy.valid_range.step is not None
    )
    assert policy.valid_range.step.value == Decimal(10 * 2**30)
    assert gpu1.allow_multiple_allocations


def test_slice_with_shared_counters_and_a_node_selector() -> None:
    s = model.parse_resource_slice(PARTITIONED)
    assert s.devices == ()
    assert s.shared_counters[0].counters["sm"].value == 132
    assert s.node_selector is not None
    assert s.node_selector.to_api() == PARTITIONED["spec"]["nodeSelector"]


def test_claim_reads_requests_subrequests_constraints_config_and_status() -> None:
    c = model.parse_resource_claim(CLAIM)
    assert c.key == "team-a/pod-gpu-2x5dk" and c.owner_uids == ("pod-uid",)
    gpu, nic = c.spec.requests
    assert (
        gpu.exactly is not None
        and gpu.exactly.tolerations[0].operator is model.TolerationOperator.EXISTS
    )
    assert [s.name for s in nic.first_available] == ["fast", "any"]
    assert nic.first_available[1].allocation_mode is model.AllocationMode.ALL
    assert c.spec.constraints == (
        model.DeviceConstraint(("gpu", "nic"), "resource.kubernetes.io/pcieRoot"),
    )
    assert c.allocation is not None and c.allocation.results[1].request == "nic/fast"
    assert c.reserved_for == (model.ConsumerRef("pods", "pod", "pod-uid"),)


def test_allocation_written_back_is_what_was_read() -> None:
    c = model.parse_resource_claim(CLAIM)
    assert c.allocation is not None
    assert model.allocation_to_api(c.allocation) == CLAIM["status"]["allocation"]


def test_allocation_with_shares_and_admin_access_round_trips() -> None:
    written = {
        "devices": {
            "results": [
                {"request": "r", "driver": "d", "pool": "p", "device": "x", "adminAccess": True},
                {
                    "request": "r",
                    "driver": "d",
                    "pool": "p",
                    "device": "y",
                    "shareID": "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa",
                    "consumedCapacity": {"memory": "10Gi"},
                    "bindingConditions": ["Attached"],
                    "bindingFailureConditions": ["AttachFailed"],
                },
            ]
        }
    }
    from nodeagent.scheduler.fieldpath import FieldPath

    parsed = model.parse_allocation(copy.deepcopy(written), FieldPath("test"))
    assert parsed is not None
    assert model.allocation_to_api(parsed) == written


def test_template_reads_the_inner_claim_spec_and_metadata() -> None:
    template = model.parse_claim_template(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu", "namespace": "team-a", "uid": "t-uid"},
            "spec": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
                        ]
                    }
                },
            },
        }
    )
    assert template.labels == {"app": "trainer"}
    request = template.spec.requests[0].exactly
    assert request is not None and request.count == 1  # the apiserver's default for ExactCount
    assert request.allocation_mode is model.AllocationMode.EXACT_COUNT


def test_device_class_reads_selectors_config_and_extended_resource() -> None:
    c = model.parse_device_class(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.example.com"},
            "spec": {
                "selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}],
                "config": [{"opaque": {"driver": "gpu.example.com", "parameters": {"a": 1}}}],
                "extendedResourceName": "example.com/gpu",
            },
        }
    )
    assert c.selectors == ("device.driver == 'gpu.example.com'",)
    assert c.extended_resource_name == "example.com/gpu"
    assert c.config == ({"opaque": {"driver": "gpu.example.com", "parameters": {"a": 1}}},)


def _mutated(obj: dict[str, Any], path: list[str | int], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    target: Any = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("obj", "path", "value", "message"),
    [
        (
            SLICE,
            ["spec", "pool", "generation"],
            "3",
            "spec.pool.generation = '3': expected an integer",
        ),
        (SLICE, ["spec", "driver"], None, "spec.driver = None: required"),
        (
            SLICE,
            ["spec", "devices", 0, "attributes", "index"],
            {"int": 1, "string": "x"},
            "spec.devices[0].attributes.index",
        ),
        (
            SLICE,
            ["spec", "devices", 0, "attributes", "driverVersion"],
            {"version": "1.0"},
            "not a semantic version",
        ),
        (
            SLICE,
            ["spec", "devices", 0, "attributes", "model"],
            {"strings": ["a"]},
            "DRAListTypeAttributes",
        ),
        (
            SLICE,
            ["spec", "devices", 0, "capacity", "memory"],
            {"value": "lots"},
            "spec.devices[0].capacity.memory.value = 'lots'",
        ),
        (
            SLICE,
            ["spec", "devices", 0, "taints", 0, "effect"],
            "Sometimes",
            "expected one of NoSchedule, NoExecute, None",
        ),
        (
            CLAIM,
            ["spec", "devices", "requests", 0, "exactly", "allocationMode"],
            "Some",
            "allocationMode = 'Some'",
        ),
        (
            CLAIM,
            ["spec", "devices", "requests", 1, "exactly"],
            {"deviceClassName": "x"},
            "exactly one of exactly, firstAvailable",
        ),
        (CLAIM, ["metadata", "namespace"], None, "metadata.namespace = None: required"),
        (CLAIM, ["status", "reservedFor", 0, "uid"], None, "status.reservedFor[0].uid"),
        (
            CLAIM,
            ["status", "allocation", "devices", "config", 0, "source"],
            "FromNowhere",
            "expected one of FromClass, FromClaim",
        ),
    ],
)
def test_bad_input_names_the_object_field_and_value(
    obj: dict[str, Any], path: list[str | int], value: Any, message: str
) -> None:
    parse = (
        model.parse_resource_slice if obj["kind"] == "ResourceSlice" else model.parse_resource_claim
    )
    with pytest.raises(ConfigError) as caught:
        parse(_mutated(obj, path, value))
    assert message in str(caught.value)
    assert str(caught.value).startswith(obj["kind"])


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("1.0.0-alpha", "1.0.0-alpha.1"),
        ("1.0.0-alpha.1", "1.0.0-alpha.beta"),
        ("1.0.0-beta.2", "1.0.0-beta.11"),
        ("1.0.0-rc.1", "1.0.0"),
        ("1.9.0", "1.10.0"),
    ],
)
def test_semver_orders_as_semver_org_says(older: str, newer: str) -> None:
    assert model.SemVer.parse(older) < model.SemVer.parse(newer)
    assert model.SemVer.parse("1.0.0+a") == model.SemVer.parse("1.0.0+b")


def test_node_selector_terms_keep_their_requirements() -> None:
    from nodeagent.scheduler.fieldpath import FieldPath

    selector = model.parse_node_selector(
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]},
        FieldPath("t"),
    )
    assert selector is not None
    assert selector.terms[0].match_expressions == (api.Requirement("zone", "Exists"),)
