"""TriggerSet without special privileges: waking, waiting, inotify on fixture files, PSI
emulation by polling, and every fallback reachable with fixture directories."""

from __future__ import annotations

import logging
import os
import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.agent.config import load_config
from nodeagent.triggers import psi
from nodeagent.triggers.api import Mechanism, MechanismState
from nodeagent.triggers.triggerset import WAKE_TRIGGER, TriggerSet
from tests.triggers.conftest import write_pressure

SPEC = psi.TriggerSpec.parse("memory some 150ms 1s")


@pytest.fixture
def triggers() -> Iterator[TriggerSet]:
    with TriggerSet(poll_interval=0.05) as trigger_set:
        yield trigger_set


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_wait_times_out_empty(triggers: TriggerSet) -> None:
    start = time.monotonic()
    assert triggers.wait(0.05) == []
    assert 0.05 <= time.monotonic() - start < 0.5
    assert triggers.wait(0) == []


def test_wake_from_another_thread_returns_at_once(triggers: TriggerSet) -> None:
    timer = threading.Timer(0.05, triggers.wake)
    timer.start()
    start = time.monotonic()
    wakes = triggers.wait(5.0)
    assert time.monotonic() - start < 1.0
    assert [(wake.trigger, wake.mechanism) for wake in wakes] == [(WAKE_TRIGGER, Mechanism.WAKE)]
    timer.join()


def test_wakes_before_wait_are_coalesced(triggers: TriggerSet) -> None:
    triggers.wake()
    triggers.wake()
    (wake,) = triggers.wait(0)
    assert wake.count == 2
    assert triggers.wait(0) == []


def test_close_is_idempotent_and_releases_descriptors(tmp_path: Path) -> None:
    (tmp_path / "memory.events").write_text("low 0\n")
    (tmp_path / "memory.max").write_text("536870912\n")
    before = open_fds()
    trigger_set = TriggerSet()
    trigger_set.watch_memory_events("events", str(tmp_path))
    trigger_set.close()
    trigger_set.close()
    assert open_fds() == before


# --- cgroup v2 memory.events (inotify) on fixture files ----------------------------------


def test_memory_events_change_wakes(triggers: TriggerSet, tmp_path: Path) -> None:
    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    (tmp_path / "memory.max").write_text("536870912\n")
    status = triggers.watch_memory_events("node", str(tmp_path))
    assert status.state is MechanismState.ACTIVE
    assert "536870912" in status.detail and "not at an eviction threshold" in status.detail
    assert triggers.wait(0) == []
    threading.Timer(0.05, events.write_text, ["low 0\nhigh 1\nmax 0\noom 0\noom_kill 0\n"]).start()
    wakes = triggers.wait(5.0)
    assert [(wake.trigger, wake.mechanism) for wake in wakes] == [("node", Mechanism.MEMORY_EVENTS)]


def test_two_names_on_one_file_both_wake(triggers: TriggerSet, tmp_path: Path) -> None:
    events = tmp_path / "memory.events"
    events.write_text("high 0\n")
    (tmp_path / "memory.max").write_text("1048576\n")
    triggers.watch_memory_events("a", str(tmp_path))
    triggers.watch_memory_events("b", str(tmp_path))
    events.write_text("high 1\n")
    assert {wake.trigger for wake in triggers.wait(1.0)} == {"a", "b"}
    triggers.disarm("a")
    events.write_text("high 2\n")
    assert {wake.trigger for wake in triggers.wait(1.0)} == {"b"}


def test_memory_events_removed_degrades(triggers: TriggerSet, tmp_path: Path) -> None:
    events = tmp_path / "memory.events"
    events.write_text("high 0\n")
    (tmp_path / "memory.max").write_text("1048576\n")
    triggers.watch_memory_events("node", str(tmp_path))
    events.unlink()
    assert [wake.trigger for wake in triggers.wait(1.0)] == ["node"]
    status = triggers.status()["node"]
    assert status.state is MechanismState.UNAVAILABLE
    assert "removed" in status.detail
    assert triggers.wait(0.05) == []


def test_memory_events_missing_is_unavailable(triggers: TriggerSet, tmp_path: Path) -> None:
    status = triggers.watch_memory_events("node", str(tmp_path))
    assert status.state is MechanismState.UNAVAILABLE
    assert "no memory.events" in status.detail
    # Retried when asked again: the cgroup may have appeared since.
    (tmp_path / "memory.events").write_text("high 0\n")
    (tmp_path / "memory.max").write_text("1048576\n")
    assert triggers.watch_memory_events("node", str(tmp_path)).state is MechanismState.ACTIVE


def test_memory_events_without_a_limit_does_not_claim_to_detect(
    triggers: TriggerSet, tmp_path: Path
) -> None:
    """Without memory.max the file changes only on OOM kills: never at an eviction
    threshold, so the watch must not report itself active."""
    (tmp_path / "memory.events").write_text("high 0\nmax 0\n")
    (tmp_path / "memory.max").write_text("max\n")
    status = triggers.watch_memory_events("node", str(tmp_path))
    assert status.state is MechanismState.UNAVAILABLE
    assert "no memory.max limit" in status.detail and "memory poll" in status.detail


@pytest.mark.kernel
def test_memory_events_absent_from_hybrid_cgroup2(triggers: TriggerSet) -> None:
    unified = Path("/sys/fs/cgroup/unified")
    if not (unified / "cgroup.controllers").exists():
        pytest.skip("no cgroup2 hierarchy at /sys/fs/cgroup/unified")
    if (unified / "memory.events").exists():
        pytest.skip("this host's cgroup2 has the memory controller")
    status = triggers.watch_memory_events("node", str(unified))
    assert status.state is MechanismState.UNAVAILABLE


# --- cgroup v1 thresholds: fallbacks reachable without a memcg ------------------------------


def test_memcg_threshold_outside_a_memcg_is_unavailable(
    triggers: TriggerSet, tmp_path: Path
) -> None:
    status = triggers.arm_memory_threshold("t", str(tmp_path), 1 << 30)
    assert status.mechanism is Mechanism.MEMCG_THRESHOLD
    assert status.state is MechanismState.UNAVAILABLE
    assert "not a cgroup v1 memory cgroup" in status.detail
    missing = triggers.arm_memory_threshold("u", str(tmp_path / "gone"), 1 << 30)
    assert "does not exist" in missing.detail


def test_memcg_threshold_without_a_free_descriptor_is_unavailable(
    triggers: TriggerSet, tmp_path: Path
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.dup(0)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))  # no new descriptor fits
    try:
        status = triggers.arm_memory_threshold("t", str(tmp_path), 1 << 30)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert status.state is MechanismState.UNAVAILABLE
    assert "EMFILE" in status.detail


# --- PSI: fallbacks and emulation on fixture files --------------------------------------


def test_psi_missing_file_is_unavailable(triggers: TriggerSet, tmp_path: Path) -> None:
    status = triggers.arm_psi("p", str(tmp_path / "memory"), SPEC)
    assert status.state is MechanismState.UNAVAILABLE
    assert "ENOENT" in status.detail


def test_psi_emulation_fires_on_stall_growth(tmp_path: Path) -> None:
    pressure = tmp_path / "memory"
    write_pressure(pressure, 0)
    spec = psi.TriggerSpec.parse("memory some 150ms 500ms")
    with TriggerSet(poll_interval=0.05, psi_kernel_triggers=False) as triggers:
        status = triggers.arm_psi("p", str(pressure), spec)
        assert status.state is MechanismState.FALLBACK
        assert "emulated" in status.detail
        assert "disabled by configuration" in status.detail
        assert triggers.wait(0.2) == []
        write_pressure(pressure, 200_000)
        start = time.monotonic()
        wakes = triggers.wait(2.0)
        assert [(wake.trigger, wake.mechanism) for wake in wakes] == [("p", Mechanism.PSI)]
        assert wakes[0].time - start < 0.2
        # At most once per window, and not again without new stall.
        assert triggers.wait(0.7) == []


def test_psi_emulation_stops_when_the_file_goes(tmp_path: Path) -> None:
    pressure = tmp_path / "memory"
    write_pressure(pressure, 0)
    with TriggerSet(poll_interval=0.02, psi_kernel_triggers=False) as triggers:
        triggers.arm_psi("p", str(pressure), SPEC)
        pressure.unlink()
        assert triggers.wait(0.1) == []
        status = triggers.status()["p"]
        assert status.state is MechanismState.UNAVAILABLE
        assert "polling stopped" in status.detail


def test_psi_emulation_needs_the_line(tmp_path: Path) -> None:
    pressure = tmp_path / "cpu"
    pressure.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    with TriggerSet(psi_kernel_triggers=False) as triggers:
        status = triggers.arm_psi("p", str(pressure), psi.TriggerSpec.parse("cpu full 1s 2s"))
    assert status.state is MechanismState.UNAVAILABLE
    assert "full" in status.detail


def test_status_changes_are_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="nodeagent.triggers")
    with TriggerSet() as triggers:
        for _ in range(3):
            triggers.watch_memory_events("node", str(tmp_path))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "no memory.events" in warnings[0].getMessage()


def test_disarm_forgets_status(triggers: TriggerSet, tmp_path: Path) -> None:
    triggers.watch_memory_events("node", str(tmp_path))
    triggers.disarm("node")
    triggers.disarm("never-armed")
    assert "node" not in triggers.status()


def test_from_settings_applies_poll_interval_and_psi_mode(tmp_path: Path) -> None:
    pressure = tmp_path / "memory"
    write_pressure(pressure, 0)
    config = load_config(
        environ={}, overrides={"poll_interval": "50ms", "psi_kernel_triggers": "0"}
    )
    with TriggerSet.from_settings(config) as triggers:
        status = triggers.arm_psi("p", str(pressure), SPEC)
    assert "emulated by reading the stall total every 50ms" in status.detail


def test_wake_after_close_is_a_no_op() -> None:
    triggers = TriggerSet()
    triggers.close()
    triggers.wake()
