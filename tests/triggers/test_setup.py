"""Arming from configuration: which trigger goes on which file, and memcg re-arming."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.agent.config import load_config
from nodeagent.triggers import psi, setup
from nodeagent.triggers.api import Mechanism, MechanismState, MechanismStatus
from tests.doubles.triggers import FakeTriggers

Mi = 1 << 20

V1 = setup.TriggerPaths(
    cgroup_version=1,
    proc_pressure_dir="/host/proc/pressure",
    memory_cgroup_dirs={"node": "/host/sys/fs/cgroup/memory", "kubepods": "/m/kubepods"},
    pressure_cgroup_dirs={"node": "/host/sys/fs/cgroup/unified"},
)
V2 = setup.TriggerPaths(
    cgroup_version=2,
    proc_pressure_dir="/proc/pressure",
    memory_cgroup_dirs={"node": "/sys/fs/cgroup/n.slice", "kubepods": "/sys/fs/cgroup/kubepods"},
    pressure_cgroup_dirs={"node": "/sys/fs/cgroup/n.slice", "kubepods": "/sys/fs/cgroup/kubepods"},
)


def settings(**overrides: Any) -> Any:
    return load_config(environ={}, overrides=overrides)


@pytest.mark.parametrize(
    ("spec", "paths", "file"),
    [
        pytest.param("memory some 1s 2s", V1, "/host/proc/pressure/memory", id="system"),
        pytest.param(
            "node/io full 1s 2s", V1, "/host/sys/fs/cgroup/unified/io.pressure", id="hybrid-node"
        ),
        pytest.param(
            "kubepods/memory some 1s 2s",
            V2,
            "/sys/fs/cgroup/kubepods/memory.pressure",
            id="v2-kubepods",
        ),
        pytest.param("kubepods/memory some 1s 2s", V1, None, id="scope-without-cgroup2-dir"),
    ],
)
def test_pressure_file(spec: str, paths: setup.TriggerPaths, file: str | None) -> None:
    assert paths.pressure_file(psi.TriggerSpec.parse(spec)) == file


def test_static_triggers_on_v2_watch_memory_events_and_arm_psi() -> None:
    triggers = FakeTriggers()
    config = settings(psi_triggers="memory some 150ms 1s,kubepods/memory full 100ms 2s")
    statuses = setup.arm_static_triggers(triggers, config, V2)
    assert triggers.armed == {
        "psi:memory some 150ms 1s": (
            Mechanism.PSI,
            "/proc/pressure/memory",
            psi.TriggerSpec.parse("memory some 150ms 1s"),
        ),
        "psi:kubepods/memory full 100ms 2s": (
            Mechanism.PSI,
            "/sys/fs/cgroup/kubepods/memory.pressure",
            psi.TriggerSpec.parse("kubepods/memory full 100ms 2s"),
        ),
        "memory.events:node": (Mechanism.MEMORY_EVENTS, "/sys/fs/cgroup/n.slice", "inotify"),
        "memory.events:kubepods": (Mechanism.MEMORY_EVENTS, "/sys/fs/cgroup/kubepods", "inotify"),
    }
    assert all(status.state is MechanismState.ACTIVE for status in statuses.values())


def test_static_triggers_on_v1_skip_memory_events_and_report_unknown_scopes() -> None:
    triggers = FakeTriggers()
    config = settings(psi_triggers="memory some 150ms 1s,kubepods/memory full 100ms 2s")
    statuses = setup.arm_static_triggers(triggers, config, V1)
    assert list(triggers.armed) == ["psi:memory some 150ms 1s"]
    missing = statuses["psi:kubepods/memory full 100ms 2s"]
    assert missing.state is MechanismState.UNAVAILABLE
    assert "'kubepods'" in missing.detail


def test_memory_events_watch_can_be_disabled() -> None:
    triggers = FakeTriggers()
    setup.arm_static_triggers(triggers, settings(memory_events_notification="false"), V2)
    assert not [name for name in triggers.armed if name.startswith("memory.events")]


def test_rearm_memory_thresholds_arms_each_threshold_at_its_usage() -> None:
    triggers = FakeTriggers()
    statuses = setup.rearm_memory_thresholds(
        triggers,
        settings(),
        V1,
        scope="node",
        usage=600 * Mi,
        available=500 * Mi,
        thresholds={
            "memory.available<100Mi hard": 100 * Mi,
            "memory.available<300Mi soft": 300 * Mi,
        },
    )
    assert triggers.armed == {
        "memcg:node:memory.available<100Mi hard": (
            Mechanism.MEMCG_THRESHOLD,
            "/host/sys/fs/cgroup/memory",
            1000 * Mi + 1,
        ),
        "memcg:node:memory.available<300Mi soft": (
            Mechanism.MEMCG_THRESHOLD,
            "/host/sys/fs/cgroup/memory",
            800 * Mi + 1,
        ),
    }
    assert set(statuses) == set(triggers.armed)
    # the usage the values came from goes with them (a threshold it is past is spent)
    assert set(triggers.observed.values()) == {600 * Mi}


def test_rearm_memory_thresholds_disarms_thresholds_no_longer_configured() -> None:
    triggers = FakeTriggers()
    arguments: dict[str, Any] = {"scope": "kubepods", "usage": 0, "available": 100 * Mi}
    setup.rearm_memory_thresholds(
        triggers, settings(), V1, thresholds={"a": Mi, "b": 2 * Mi}, **arguments
    )
    triggers.arm_psi("psi:x", "/p", psi.TriggerSpec.parse("memory some 1s 2s"))
    setup.rearm_memory_thresholds(triggers, settings(), V1, thresholds={"b": 2 * Mi}, **arguments)
    assert set(triggers.armed) == {"memcg:kubepods:b", "psi:x"}


@pytest.mark.parametrize(
    ("paths", "config"),
    [
        pytest.param(V2, settings(), id="cgroup-v2"),
        pytest.param(V1, settings(kernel_memcg_notification="false"), id="disabled"),
    ],
)
def test_rearm_memory_thresholds_does_nothing_without_v1_or_when_disabled(
    paths: setup.TriggerPaths, config: Any
) -> None:
    triggers = FakeTriggers()
    triggers.arm_memory_threshold("memcg:node:old", "/x", 1)
    statuses = setup.rearm_memory_thresholds(
        triggers, config, paths, scope="node", usage=0, available=Mi, thresholds={"a": 1}
    )
    assert statuses == {}
    assert triggers.armed == {}


def test_fake_triggers_wait_runs_in_virtual_time() -> None:
    triggers = FakeTriggers()
    triggers.arm_memory_threshold("t", "/x", 1)
    assert triggers.wait(1.0) == []
    assert triggers.clock.now() == 1.0
    triggers.fire("t")
    (wake,) = triggers.wait(1.0)
    assert (wake.trigger, wake.time) == ("t", 1.0)
    assert triggers.clock.now() == 1.0


def test_degraded_components_name_each_trigger_not_fully_active() -> None:
    triggers = FakeTriggers()
    triggers.scripted["psi:memory some 150ms 1s"] = MechanismStatus(
        Mechanism.PSI, MechanismState.FALLBACK, "/proc/pressure/memory", "armed 300ms 2s"
    )
    statuses = setup.arm_static_triggers(triggers, settings(), V2)
    assert setup.degraded_components(statuses) == {
        "trigger/psi:memory some 150ms 1s": "fallback: armed 300ms 2s",
        "trigger/psi:io full 150ms 1s": None,
        "trigger/memory.events:node": None,
        "trigger/memory.events:kubepods": None,
    }
