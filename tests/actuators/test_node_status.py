"""Conditions, taints and the pressure annotation written through the real HTTP client to
the fake API server: strategic merge keeps foreign conditions, lastTransitionTime and
heartbeat semantics, taints keep foreign taints and survive a concurrent writer, restart
adoption writes nothing, outages lose no change, dry-run writes nothing, and the
request budget at rest."""

from __future__ import annotations

import dataclasses
import json

import pytest

from nodeagent.actuators import node_status
from nodeagent.base.clock import FakeClock
from nodeagent.k8s.pressure import PRESSURE_ANNOTATION, Taint
from nodeagent.kube import client, http
from nodeagent.model import Signal
from tests.actuators.builders import (
    DISK_CONDITION,
    DISK_TAINT,
    MEMORY_CONDITION,
    MEMORY_TAINT,
    decision,
)
from tests.fakeapi import objects
from tests.fakeapi.server import FakeAPIServer

FOREIGN_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
HEADROOM = {
    Signal.MEMORY_AVAILABLE: node_status.SignalHeadroom(600 << 20, 1 << 30, 100 << 20),
    Signal.NODEFS_AVAILABLE: node_status.SignalHeadroom(50 << 30, 100 << 30, 10 << 30),
}


@pytest.fixture
def node(fake_api: FakeAPIServer) -> FakeAPIServer:
    fake_api.cluster.create("nodes", objects.node("node-a", taints=[FOREIGN_TAINT]))
    return fake_api


def actuator(
    kube: http.HTTPKubeClient, clock: FakeClock, **options: object
) -> node_status.NodeStatusActuator:
    return node_status.NodeStatusActuator(
        kube,
        "node-a",
        clock=clock,
        condition_types=(MEMORY_CONDITION, DISK_CONDITION),
        taint_keys=(MEMORY_TAINT, DISK_TAINT),
        **options,  # type: ignore[arg-type]
    )


def conditions(api: FakeAPIServer) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in api.cluster.get("nodes", "", "node-a")["status"]["conditions"]}


def taints(api: FakeAPIServer) -> list[dict[str, str]]:
    return list(api.cluster.get("nodes", "", "node-a")["spec"].get("taints") or [])


def test_conditions_merge_by_type_and_keep_kubelet_conditions(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    result = actuator(kube, clock).apply(decision(memory=True))
    assert result.errors == ()
    published = conditions(node)
    assert set(published) == {"Ready", "MemoryPressure", MEMORY_CONDITION, DISK_CONDITION}
    assert published["Ready"]["lastHeartbeatTime"] == "2026-01-01T00:00:00Z", "untouched"
    assert published[MEMORY_CONDITION]["status"] == "True"
    assert published[DISK_CONDITION]["status"] == "False"
    patch = node.requests_to("PATCH", "/status$")[-1].body
    assert {c["type"] for c in patch["status"]["conditions"]} == {MEMORY_CONDITION, DISK_CONDITION}


def test_transition_time_moves_only_on_status_change_and_heartbeats_are_paced(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    status = actuator(kube, clock, heartbeat_period=300.0)
    status.apply(decision(memory=True))
    first = conditions(node)[MEMORY_CONDITION]
    writes = len(node.requests_to("PATCH", "/status$"))
    for _ in range(29):  # 290 s of steady pressure: no heartbeat due yet
        clock.advance(10)
        status.apply(decision(memory=True))
    assert len(node.requests_to("PATCH", "/status$")) == writes
    clock.advance(10)
    status.apply(decision(memory=True))
    beat = conditions(node)[MEMORY_CONDITION]
    assert len(node.requests_to("PATCH", "/status$")) == writes + 1
    assert beat["lastTransitionTime"] == first["lastTransitionTime"]
    assert beat["lastHeartbeatTime"] > first["lastHeartbeatTime"]
    clock.advance(10)
    status.apply(decision(memory=False))
    cleared = conditions(node)[MEMORY_CONDITION]
    assert cleared["status"] == "False"
    assert cleared["lastTransitionTime"] > first["lastTransitionTime"]
    assert cleared["reason"] == "NodeAgentHasSufficientMemory"


def test_message_only_change_waits_for_the_heartbeat(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    status = actuator(kube, clock)
    status.apply(decision(memory=True))
    writes = len(node.writes())
    changed = decision(memory=True)
    moved = dataclasses.replace(changed.conditions[0], message="memory.available 40Mi < 100Mi")
    status.apply(dataclasses.replace(changed, conditions=(moved, *changed.conditions[1:])))
    assert len(node.writes()) == writes


def test_taints_keep_foreign_taints(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    status = actuator(kube, clock)
    status.apply(decision(memory=True))
    assert taints(node) == [FOREIGN_TAINT, {"key": MEMORY_TAINT, "effect": "NoSchedule"}]
    status.apply(decision(memory=True, taints=(Taint(MEMORY_TAINT, "PreferNoSchedule"),)))
    assert taints(node) == [FOREIGN_TAINT, {"key": MEMORY_TAINT, "effect": "PreferNoSchedule"}]
    status.apply(decision(memory=False))
    assert taints(node) == [FOREIGN_TAINT]
    sent = node.requests_to("PATCH", "/nodes/node-a$")[-1].body
    assert sent["metadata"]["resourceVersion"], "every taint patch is guarded"


def test_taint_patch_survives_a_concurrent_writer(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    status = actuator(kube, clock)
    status.apply(decision())
    other = {"key": "example.com/maintenance", "effect": "NoExecute"}
    node.cluster.patch(
        "nodes", "", "node-a", {"spec": {"taints": [FOREIGN_TAINT, other]}}
    )  # another controller, after our last read
    early_warning = (Taint(MEMORY_TAINT, "NoSchedule"),)
    result = status.apply(decision(taints=early_warning))  # conditions unchanged
    assert result.errors == ()
    assert taints(node) == [FOREIGN_TAINT, other, {"key": MEMORY_TAINT, "effect": "NoSchedule"}]
    node_patches = node.requests_to("PATCH", "/nodes/node-a$")
    assert len(node_patches) == 2, "409 once, then re-read and succeed"
    assert len(node.requests_to("GET", "/nodes/node-a$")) == 2


def test_restart_adopts_state_and_writes_nothing(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    actuator(kube, clock).apply(decision(memory=True), HEADROOM)
    writes = len(node.writes())
    clock.advance(30)
    restarted = actuator(kube, clock)
    restarted.adopt()
    for _ in range(10):
        restarted.apply(decision(memory=True), HEADROOM)
        clock.advance(10)
    assert len(node.writes()) == writes, "a restart neither resets nor flaps anything"


def test_outage_loses_no_change_and_keeps_the_decided_transition_time(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    status = actuator(kube, clock)
    status.apply(decision(memory=False))
    decided_at = clock.wall() + 10
    with node.outage(status=503):
        clock.advance(10)
        failed = status.apply(decision(memory=True))
        assert failed.errors and not failed.conditions
        clock.advance(60)
        status.apply(decision(memory=True))
    clock.advance(10)
    recovered = status.apply(decision(memory=True))
    assert recovered.errors == ()
    published = conditions(node)[MEMORY_CONDITION]
    assert published["status"] == "True"
    assert published["lastTransitionTime"] == client.api_time(decided_at)
    assert taints(node)[-1]["key"] == MEMORY_TAINT


def test_annotation_written_on_material_change_and_refresh_only(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    status = actuator(kube, clock, annotation_refresh_period=300.0, annotation_min_change=0.05)
    status.apply(decision(), HEADROOM)
    annotation = json.loads(
        node.cluster.get("nodes", "", "node-a")["metadata"]["annotations"][PRESSURE_ANNOTATION]
    )
    assert annotation["signals"]["memory.available"] == {
        "available": 600 << 20,
        "capacity": 1 << 30,
        "threshold": 100 << 20,
    }
    writes = len(node.writes())
    small = dict(HEADROOM)
    small[Signal.MEMORY_AVAILABLE] = node_status.SignalHeadroom(580 << 20, 1 << 30, 100 << 20)
    clock.advance(10)
    status.apply(decision(), small)
    assert len(node.writes()) == writes, "2% move: below pressureAnnotationMinChange"
    big = dict(HEADROOM)
    big[Signal.MEMORY_AVAILABLE] = node_status.SignalHeadroom(300 << 20, 1 << 30, 100 << 20)
    status.apply(decision(), big)
    assert len(node.writes()) == writes + 1


def test_dry_run_writes_nothing(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    status = actuator(kube, clock, dry_run=True)
    result = status.apply(decision(memory=True), HEADROOM)
    assert result.wrote and result.conditions and result.taints is not None
    assert node.writes() == []


@pytest.mark.parametrize(
    ("desired", "current", "expected"),
    [
        pytest.param([], [FOREIGN_TAINT], None, id="nothing-owned"),
        pytest.param(
            [Taint(MEMORY_TAINT, "NoSchedule")],
            [{"key": MEMORY_TAINT, "effect": "NoSchedule", "timeAdded": "t"}],
            None,
            id="already-there",
        ),
        pytest.param(
            [],
            [{"key": MEMORY_TAINT, "effect": "NoSchedule"}, FOREIGN_TAINT],
            [FOREIGN_TAINT],
            id="remove-own",
        ),
        pytest.param(
            [Taint(DISK_TAINT, "NoSchedule")],
            [{"key": MEMORY_TAINT, "effect": "NoSchedule"}],
            [{"key": DISK_TAINT, "effect": "NoSchedule"}],
            id="swap-own",
        ),
    ],
)
def test_plan_taints(
    desired: list[Taint], current: list[dict[str, str]], expected: list[dict[str, str]] | None
) -> None:
    assert node_status.plan_taints(desired, current, (MEMORY_TAINT, DISK_TAINT)) == expected


def test_requests_per_hour_at_rest_are_heartbeats_only(
    node: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    status = actuator(kube, clock, heartbeat_period=300.0, annotation_refresh_period=300.0)
    status.apply(decision(), HEADROOM)
    before = len(node.requests)
    for _ in range(360):  # one hour at a 10 s interval, nothing changing
        clock.advance(10)
        status.apply(decision(), HEADROOM)
    during = node.requests[before:]
    assert len(during) == 24, "12 condition heartbeats + 12 annotation refreshes"
    assert {r.method for r in during} == {"PATCH"}
