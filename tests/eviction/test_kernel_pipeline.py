"""Signals from the real kernel, decided on by the engine: the agent's pipeline minus the
API. A test memory cgroup stands in for the node (its limit is the capacity of
``memory.available``) with a kubelet-shaped pod inside that allocates past a hard
threshold; a small tmpfs stands in for the node filesystem and is filled past its
thresholds. The engine must see the pressure and pick the pod that holds the memory."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from nodeagent.eviction import engine
from nodeagent.k8s.pods import QOSClass
from nodeagent.k8s.pressure import Pressure
from nodeagent.model import PodInfo, PodUID, Signal
from nodeagent.signals.collector import SignalCollector
from tests.signals.realkernel import (
    MEMCG_ROOT,
    batching_tolerance,
    cgroups,
    hog,
    require_v1_memory_controller,
    tmpfs,
    unique_name,
)

from .builders import Mi, policy

pytestmark = pytest.mark.kernel


def test_a_pod_allocating_past_a_hard_threshold_is_chosen(tmp_path: Path) -> None:
    require_v1_memory_controller()
    name = unique_name()
    uid = str(uuid.uuid4())
    layout = [
        name,
        f"{name}/kubepods",
        f"{name}/kubepods/besteffort",
        f"{name}/kubepods/besteffort/pod{uid}",
        f"{name}/kubepods/besteffort/pod{uid}/c0ffee",
    ]
    resolved = policy(eviction_hard="memory.available<96Mi", enforce_node_allocatable="")
    pods = [
        PodInfo("default", "hog", PodUID(uid), qos=QOSClass.BEST_EFFORT),
        PodInfo("kube-system", "agent", PodUID("static-agent"), static=True),
    ]
    with cgroups(MEMCG_ROOT, layout) as dirs, hog() as process:
        (dirs[0] / "memory.limit_in_bytes").write_text(str(256 * Mi))
        process.join(dirs[4])
        with SignalCollector(node_cgroup=f"/{name}", nodefs_path=tmp_path) as collector:
            state = engine.EngineState()
            calm, state = engine.evaluate(resolved, state, collector.collect(0.0), pods, 0.0)
            process.allocate(anon_mib=192, file_mib=0, file_path=tmp_path / "unused")
            observed = collector.collect(1.0)
            pressed, state = engine.evaluate(resolved, state, observed, pods, 1.0)

    assert not calm.pressure[Pressure.MEMORY] and not calm.evictions
    available = observed.value(Signal.MEMORY_AVAILABLE)
    assert available is not None and available.capacity == 256 * Mi
    assert pressed.pressure[Pressure.MEMORY]
    (met,) = pressed.thresholds_met
    assert (met.signal, met.hard) == (Signal.MEMORY_AVAILABLE, True)
    assert met.threshold_quantity == 96 * Mi > met.available
    (eviction,) = pressed.evictions
    assert eviction.pod.name == "hog"
    assert eviction.grace_period_seconds == 1
    assert eviction.reclaim_estimate >= 192 * Mi - batching_tolerance()
    assert eviction.message.startswith(
        "The node was low on resource: memory. Threshold quantity: 96Mi, available: "
    )
    assert pressed.ranked == ("default/hog",)  # the static pod is never a candidate


def test_a_filesystem_filled_past_its_thresholds_raises_disk_pressure(tmp_path: Path) -> None:
    resolved = policy(
        eviction_hard="nodefs.available<10%,nodefs.inodesFree<5%",
        eviction_soft="nodefs.available<50%",
        eviction_soft_grace_period="nodefs.available=1m",
    )
    mount = tmp_path / "nodefs"
    with (
        tmpfs(mount, size="8m", nr_inodes=400),
        SignalCollector(nodefs_path=mount, imagefs_path=mount) as collector,
    ):
        state = engine.EngineState()
        calm, state = engine.evaluate(resolved, state, collector.collect(0.0), [], 0.0)
        (mount / "half").write_bytes(b"x" * (5 * Mi))
        soft, state = engine.evaluate(resolved, state, collector.collect(1.0), [], 1.0)
        (mount / "rest").write_bytes(b"x" * (int(2.5 * Mi)))
        for index in range(380):
            (mount / f"f{index}").touch()
        hard, state = engine.evaluate(resolved, state, collector.collect(2.0), [], 2.0)

    assert not calm.pressure[Pressure.DISK]
    assert soft.pressure[Pressure.DISK]
    assert [(m.signal, m.hard, m.grace_satisfied) for m in soft.thresholds_met] == [
        (Signal.NODEFS_AVAILABLE, False, False),
        (Signal.CONTAINERFS_AVAILABLE, False, False),
    ]
    assert not soft.node_reclaim  # nothing is actionable yet
    met = {(m.signal, m.hard) for m in hard.thresholds_met}
    assert {(Signal.NODEFS_AVAILABLE, True), (Signal.NODEFS_INODES_FREE, True)} <= met
    assert hard.node_reclaim == ("containers", "images")
    assert hard.evictions == ()  # no pods on this node
