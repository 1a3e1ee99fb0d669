"""Differential test: nodeagent's allocator against kube-scheduler v1.36's own.

``upstream/main.go`` is a small driver around ``k8s.io/dynamic-resource-allocation``'s
``structured.NewAllocator`` at the pinned release, with the features kube-scheduler's
default gates give it; it is built from the Go module proxy (like the control plane in
tests/controlplane) into a cache outside the repository. Generated clusters, made of
what the v1.36 defaults allow (node-local, node-selector and all-nodes slices, pools of
several slices, partitionable devices with shared counters, taints and tolerations,
devices shared with consumable capacity, binding conditions, exact-count, ``All`` and
prioritized-list requests, admin access, ``matchAttribute``/``distinctAttribute``
constraints, CEL selectors on attributes, versions and quantities, devices already in
use), are given to both; the verdicts, and every device each claim gets (with its
request name, admin access, tolerations, consumed capacity and binding conditions), its
configs and its node selector, must be the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.k8s import quantities
from nodeagent.scheduler import api
from nodeagent.scheduler.dra import model
from nodeagent.scheduler.dra.allocator import Allocator, InUse

pytestmark = pytest.mark.timeout(1800)
"""The first test to ask builds the upstream allocator: minutes on a cold Go build cache."""

HERE = Path(__file__).resolve().parent / "upstream"
Upstream = Callable[[dict[str, Any]], dict[str, Any]]


def _build() -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain on PATH: the upstream allocator cannot be built")
    stamp = hashlib.sha256(
        b"".join((HERE / n).read_bytes() for n in ("go.mod", "go.sum", "main.go"))
    ).hexdigest()
    cache = (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "nodeagent"
        / "dra-upstream-allocator"
    )
    binary = cache / stamp[:16] / "upstream-allocator"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(f".{os.getpid()}")
        subprocess.run(
            [go, "build", "-trimpath", "-buildvcs=false", "-o", str(partial), "."],
            cwd=HERE,
            check=True,
            timeout=1800,
        )
        partial.rename(binary)
    return binary


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    process = subprocess.Popen(
        [str(_build())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def ask(case: dict[str, Any]) -> dict[str, Any]:
        stdin.write(json.dumps(case) + "\n")
        stdin.flush()
        line = stdout.readline()
        assert line, "the upstream allocator exited"
        answer: dict[str, Any] = json.loads(line)
        return answer

    yield ask
    stdin.close()
    process.wait(timeout=30)


# --- generated clusters -----------------------------------------------------------------

NODE: dict[str, Any] = {"name": "node-1", "labels": {"zone": "a", "rack": "r1"}}
DRIVERS = ("gpu.example.com", "nic.example.com")
TAINT = {"key": "maintenance", "value": "planned", "effect": "NoSchedule"}
TOLERATION = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
EVICT = {"key": "broken", "effect": "NoExecute"}


@st.composite
def devices(draw: st.DrawFn, prefix: str, counter_set: str | None) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(0, 5))):
        device: dict[str, Any] = {
            "name": f"{prefix}-{i}",
            "attributes": {
                "numa": {"int": draw(st.integers(0, 1))},
                "model": {"string": draw(st.sampled_from(("a100", "h100")))},
                "driverVersion": {
                    "version": draw(st.sampled_from(("1.0.0", "1.2.0", "2.0.0-rc.1")))
                },
                "example.com/fast": {"bool": draw(st.booleans())},
            },
        }
        if draw(st.booleans()):
            device["capacity"] = {
                "memory": {"value": draw(st.sampled_from(("8Gi", "16Gi", "40Gi")))}
            }
        if draw(st.integers(0, 5)) == 0:
            device["taints"] = [draw(st.sampled_from((TAINT, EVICT)))]
        if draw(st.integers(0, 4)) == 0:
            device["allowMultipleAllocations"] = True
            policy = draw(st.sampled_from((None, "range", "values")))
            slots: dict[str, Any] = {"value": str(draw(st.integers(2, 6)))}
            if policy == "range":
                slots["requestPolicy"] = {
                    "default": "1",
                    "validRange": {"min": "1", "step": "1", "max": "4"},
                }
            elif policy == "values":
                slots["requestPolicy"] = {"default": "1", "validValues": ["1", "2", "4"]}
            device.setdefault("capacity", {})["slots"] = slots
        if draw(st.integers(0, 6)) == 0:
            device["bindingConditions"] = ["Attached"]
            device["bindingFailureConditions"] = ["AttachFailed"]
        if counter_set is not None and draw(st.booleans()):
            device["consumesCounters"] = [
                {
                    "counterSet": counter_set,
                    "counters": {"sm": {"value": str(draw(st.integers(1, 4)))}},
                }
            ]
        out.append(device)
    return out


@st.composite
def slices(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in range(draw(st.integers(1, 4))):
        driver = draw(st.sampled_from(DRIVERS))
        pool = f"pool-{p}"
        where = draw(
            st.sampled_from(
                (
                    "local",
                    "local",
                    "local",
                    "all",
                    "zone-a",
                    "other",
                    "zone-b",
                    "per-device",
                    "rack",
                )
            )
        )
        placement: dict[str, Any] = {
            "local": {"nodeName": NODE["name"]},
            "other": {"nodeName": "node-2"},
            "all": {"allNodes": True},
            "zone-a": {"nodeSelector": _zone("a")},
            "zone-b": {"nodeSelector": _zone("b")},
            "rack": {"nodeSelector": _zone("a", rack=True)},
            "per-device": {"perDeviceNodeSelection": True},
        }[where]
        partitioned = where == "local" and draw(st.integers(0, 3)) == 0
        count = draw(st.integers(1, 2))
        generation = 1
        written = count if draw(st.integers(0, 5)) else count - 1  # now and then incomplete
        for s in range(max(written, 1) if not partitioned else 1):
            spec = {
                "driver": driver,
                "pool": {
                    "name": pool,
                    "generation": generation,
                    "resourceSliceCount": count + (1 if partitioned else 0),
                },
                **placement,
                "devices": draw(devices(f"{pool}-{s}", "sms" if partitioned else None)),
            }
            if where == "per-device":
                for device in spec["devices"]:
                    device.update(draw(st.sampled_from(PER_DEVICE_PLACEMENTS)))
            out.append({"metadata": {"name": f"{driver}-{pool}-{s}"}, "spec": spec})
        if partitioned:
            for s in range(1, count):
                out.append(
                    {
                        "metadata": {"name": f"{driver}-{pool}-{s}"},
                        "spec": {
                            "driver": driver,
                            "pool": {
                                "name": pool,
                                "generation": 1,
                                "resourceSliceCount": count + 1,
                            },
                            **placement,
                            "devices": draw(devices(f"{pool}-{s}", "sms")),
                        },
                    }
                )
            out.append(
                {
                    "metadata": {"name": f"{driver}-{pool}-counters"},
                    "spec": {
                        "driver": driver,
                        "pool": {"name": pool, "generation": 1, "resourceSliceCount": count + 1},
                        **placement,
                        "sharedCounters": [
                            {
                                "name": "sms",
                                "counters": {"sm": {"value": str(draw(st.integers(2, 6)))}},
                            }
                        ],
                    },
                }
            )
    if out and draw(st.integers(0, 5)) == 0:
        # A newer generation of some pool published elsewhere: obsolete here, unless
        # the node sees the pool complete (GatherPools never looks further then).
        newer = json.loads(json.dumps(draw(st.sampled_from(out))))
        newer["metadata"]["name"] += "-newer"
        newer["spec"]["pool"]["generation"] += 1
        newer["spec"].pop("allNodes", None)
        newer["spec"].pop("nodeSelector", None)
        newer["spec"].pop("perDeviceNodeSelection", None)
        newer["spec"]["nodeName"] = "node-2"
        out.append(newer)
    with_devices = [s for s in out if s["spec"].get("devices")]
    if with_devices and draw(st.integers(0, 5)) == 0:
        # The same device name twice in one pool: the pool is invalid.
        twin = json.loads(json.dumps(draw(st.sampled_from(with_devices))))
        twin["metadata"]["name"] += "-twin"
        twin["spec"]["devices"] = twin["spec"]["devices"][:1]
        out.append(twin)
    return out


PER_DEVICE_PLACEMENTS: tuple[dict[str, Any], ...] = (
    {"nodeName": "node-1"},
    {"nodeName": "node-2"},
    {"allNodes": True},
    {
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
            ]
        }
    },
)


def _zone(zone: str, *, rack: bool = False) -> dict[str, Any]:
    expressions = [{"key": "zone", "operator": "In", "values": [zone]}]
    if rack:
        expressions.append({"key": "rack", "operator": "Exists"})
    return {"nodeSelectorTerms": [{"matchExpressions": expressions}]}


CLASSES = [
    {
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    },
    {
        "metadata": {"name": "nic"},
        "spec": {
            "selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}],
            "config": [{"opaque": {"driver": "nic.example.com", "parameters": {"mtu": 9000}}}],
        },
    },
    {"metadata": {"name": "any"}, "spec": {}},
]

SELECTORS = (
    'device.attributes["gpu.example.com"].model == "h100"',
    'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "a100"',
    '!("driverVersion" in device.attributes[device.driver]) || '
    'device.attributes[device.driver].driverVersion.isLessThan(semver("2.0.0"))',
    'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.1.0"))',
    '"memory" in device.capacity["gpu.example.com"] && '
    'device.capacity["gpu.example.com"].memory.compareTo(quantity("16Gi")) >= 0',
    'device.attributes["example.com"].fast',
    "device.allowMultipleAllocations",
    '"numa" in device.attributes[device.driver] && device.attributes[device.driver].numa == 0',
)


@st.composite
def request_body(draw: st.DrawFn, *, sub: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": draw(st.sampled_from(("gpu", "nic", "any")))}
    if draw(st.integers(0, 7)) == 0:
        body["allocationMode"] = "All"
    else:
        body["allocationMode"] = "ExactCount"
        body["count"] = draw(st.integers(1, 2))
    chosen = (
        draw(st.lists(st.sampled_from(SELECTORS), max_size=2, unique=True))
        if draw(st.booleans())
        else []
    )
    if chosen:
        body["selectors"] = [{"cel": {"expression": e}} for e in chosen]
    if draw(st.booleans()):
        body["tolerations"] = [draw(st.sampled_from((TOLERATION, {"operator": "Exists"})))]
    if draw(st.integers(0, 4)) == 0:
        body["capacity"] = {"requests": {"slots": str(draw(st.integers(1, 3)))}}
    if not sub and draw(st.integers(0, 6)) == 0:
        body["adminAccess"] = True
    return body


@st.composite
def claims(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for c in range(draw(st.integers(1, 2))):
        requests: list[dict[str, Any]] = []
        names = []
        for r in range(draw(st.integers(1, 2))):
            name = f"req-{r}"
            names.append(name)
            if draw(st.integers(0, 3)) == 0:
                subs = [
                    {"name": f"sub-{s}", **draw(request_body(sub=True))}
                    for s in range(draw(st.integers(1, 3)))
                ]
                requests.append({"name": name, "firstAvailable": subs})
            else:
                requests.append({"name": name, "exactly": draw(request_body(sub=False))})
        devices_: dict[str, Any] = {"requests": requests}
        constraints = []
        if draw(st.integers(0, 2)) == 0:
            kind = draw(st.sampled_from(("matchAttribute", "distinctAttribute")))
            attribute = draw(
                st.sampled_from(
                    ("gpu.example.com/numa", "gpu.example.com/model", "example.com/fast")
                )
            )
            constraint: dict[str, Any] = {kind: attribute}
            if draw(st.booleans()):
                constraint["requests"] = draw(
                    st.lists(st.sampled_from(names), min_size=1, unique=True)
                )
            constraints.append(constraint)
        if constraints:
            devices_["constraints"] = constraints
        if draw(st.booleans()):
            devices_["config"] = [
                {
                    "requests": draw(st.lists(st.sampled_from(names), unique=True)),
                    "opaque": {"driver": "gpu.example.com", "parameters": {"c": c}},
                }
            ]
        out.append(
            {
                "metadata": {"name": f"claim-{c}", "namespace": "ns", "uid": f"uid-{c}"},
                "spec": {"devices": devices_},
            }
        )
    return out


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    slice_objs = draw(slices())
    ids = [
        (
            s["spec"]["driver"],
            s["spec"]["pool"]["name"],
            d["name"],
            bool(d.get("allowMultipleAllocations")),
        )
        for s in slice_objs
        for d in s["spec"].get("devices", [])
    ]
    taken = draw(st.lists(st.sampled_from(ids), unique=True, max_size=3)) if ids else []
    return {
        "node": NODE,
        "classes": CLASSES,
        "slices": slice_objs,
        "claims": draw(claims()),
        "allocated": [list(t[:3]) for t in taken if not t[3]],
        "shared": [[*t[:3], "s-1"] for t in taken if t[3]],
        "capacity": [{"device": list(t[:3]), "consumed": {"slots": "1"}} for t in taken if t[3]],
    }


# --- running ours -----------------------------------------------------------------------


def ours(case: dict[str, Any]) -> dict[str, Any]:
    classes = {c.name: c for c in map(model.parse_device_class, case["classes"])}
    slices_ = [model.parse_resource_slice(s) for s in case["slices"]]
    claims_ = [model.parse_resource_claim(c) for c in case["claims"]]
    in_use = InUse(
        devices=frozenset(model.DeviceID(*d) for d in case["allocated"]),
        shared=frozenset((model.DeviceID(*d[:3]), d[3]) for d in case["shared"]),
        consumed_capacity={
            model.DeviceID(*e["device"]): {
                k: quantities.quantity_value(v) for k, v in e["consumed"].items()
            }
            for e in case["capacity"]
        },
    )
    node = api.Node(case["node"]["name"], case["node"]["labels"])
    outcome = Allocator(classes, slices_, in_use, new_share_id=lambda: "share").allocate(
        node, claims_
    )
    return {
        "verdict": str(outcome.verdict),
        "reason": outcome.reason,
        "allocations": [model.allocation_to_api(a) for a in outcome.allocations],
    }


def _normalized(answer: dict[str, Any]) -> dict[str, Any]:
    """Quantities by value (both print canonical text, but needn't agree on its spelling)."""
    allocations = []
    for written in answer.get("allocations") or []:
        allocation = json.loads(json.dumps(written))
        for result in allocation.get("devices", {}).get("results", []):
            if "consumedCapacity" in result:
                result["consumedCapacity"] = {
                    k: str(quantities.quantity_value(v).normalize())
                    for k, v in result["consumedCapacity"].items()
                }
        allocations.append(allocation)
    verdict = answer["verdict"]
    reason = answer.get("reason", "") if verdict != "Allocated" else ""
    return {"verdict": verdict, "reason": reason, "allocations": allocations}


@settings(
    max_examples=400, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(case=cases())
def test_same_devices_as_kube_scheduler(upstream: Upstream, case: dict[str, Any]) -> None:
    theirs = _normalized(upstream(case))
    mine = _normalized(ours(case))
    assert mine == theirs


def test_the_generator_reaches_every_verdict(upstream: Upstream) -> None:
    """Non-vacuity: a fixed-seed draw of the cases above allocates, fails and errs."""
    seen: set[str] = set()

    @settings(
        max_examples=300, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(case=cases())
    def collect(case: dict[str, Any]) -> None:
        seen.add(upstream(case)["verdict"])

    collect()
    assert {"Allocated", "Unschedulable", "Error"} <= seen
