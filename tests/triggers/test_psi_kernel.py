"""PSI triggers on the real kernel: /proc/pressure and cgroup2 ``memory.pressure``, the
2 s window fallback without CAP_SYS_RESOURCE, refusals, and real memory pressure."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.triggers import psi
from nodeagent.triggers.api import MechanismState, Wake
from nodeagent.triggers.triggerset import TriggerSet
from tests.triggers import loadgen
from tests.triggers.conftest import write_pressure

pytestmark = pytest.mark.kernel

PROC_MEMORY = Path("/proc/pressure/memory")
CAP_SYS_RESOURCE = 24
ONE_SECOND = psi.TriggerSpec.parse("memory some 150ms 1s")


@pytest.fixture
def proc_memory() -> Path:
    if not PROC_MEMORY.exists():
        pytest.skip("kernel without PSI (CONFIG_PSI off or booted with psi=0)")
    return PROC_MEMORY


def privileged() -> bool:
    """Whether this process may arm sub-2 s windows (CAP_SYS_RESOURCE is effective)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    return False


def test_one_second_window_falls_back_to_two_seconds(
    proc_memory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent.triggers")
    with TriggerSet() as triggers:
        status = triggers.arm_psi("memory", str(proc_memory), ONE_SECOND)
    if privileged():
        assert status.state is MechanismState.ACTIVE
        assert status.detail == str(ONE_SECOND)
        return
    assert status.state is MechanismState.FALLBACK
    assert status.detail.startswith("armed memory some 300ms 2s instead of memory some 150ms 1s")
    assert "CAP_SYS_RESOURCE" in status.detail
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "memory some 300ms 2s" in record.getMessage()


def test_two_second_window_is_armed_as_asked(proc_memory: Path) -> None:
    spec = psi.TriggerSpec.parse("memory full 100ms 2s")
    with TriggerSet() as triggers:
        status = triggers.arm_psi("memory", str(proc_memory), spec)
        assert status.state is MechanismState.ACTIVE
        assert triggers.arm_psi("memory", str(proc_memory), spec) == status


def test_cgroup2_memory_pressure_trigger_arms(cgroup2: Path) -> None:
    with TriggerSet() as triggers:
        status = triggers.arm_psi("pod", str(cgroup2 / "memory.pressure"), ONE_SECOND)
    assert status.state in (MechanismState.ACTIVE, MechanismState.FALLBACK)
    assert "emulated" not in status.detail


def test_psi_disabled_on_the_cgroup_after_arming_degrades(cgroup2: Path) -> None:
    with TriggerSet() as triggers:
        triggers.arm_psi("pod", str(cgroup2 / "memory.pressure"), ONE_SECOND)
        (cgroup2 / "cgroup.pressure").write_text("0")
        assert triggers.wait(0.5) == []
        status = triggers.status()["pod"]
        assert status.state is MechanismState.UNAVAILABLE
        assert "went away" in status.detail
        # Arming again while PSI is off there: the file is gone and cannot be polled.
        again = triggers.arm_psi("pod", str(cgroup2 / "memory.pressure"), ONE_SECOND)
        assert again.state is MechanismState.UNAVAILABLE
        assert "ENOENT" in again.detail


@pytest.fixture
def read_only_pressure_file(tmp_path: Path) -> Iterator[Path]:
    """A pressure file the kernel refuses to open for writing (a read-only bind mount),
    as it refuses trigger writes, while reading still works."""
    if os.geteuid() != 0:
        pytest.skip("needs root to bind-mount a file read-only")
    source, target = tmp_path / "source", tmp_path / "memory"
    write_pressure(source, 0)
    target.touch()
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], check=True)
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_refused_trigger_is_emulated_by_polling(read_only_pressure_file: Path) -> None:
    with TriggerSet(poll_interval=0.05) as triggers:
        status = triggers.arm_psi("memory", str(read_only_pressure_file), ONE_SECOND)
        assert status.state is MechanismState.FALLBACK
        assert "EROFS" in status.detail
        assert "emulated by reading the stall total every 50ms" in status.detail
        write_pressure(read_only_pressure_file.parent / "source", 400_000)
        assert [wake.trigger for wake in triggers.wait(2.0)] == ["memory"]


SENSITIVE = psi.TriggerSpec.parse("memory some 50ms 1s")
"""5 % of a second, for the kernel's triggers: the staller below fires them loaded or
quiet."""

SENSITIVE_EMULATED = psi.TriggerSpec.parse("memory some 10ms 1s")
"""1 % of a second, for the emulation: it sees the stall total as ``/proc/pressure``
publishes it, and on a quiet machine the staller stalls about 30 ms a second there
(40 at most over any 1 s, measured), short of 50 ms, while the kernel's own triggers,
which account stalls as they happen, still fire at 5 %."""


@pytest.mark.slow
def test_real_memory_pressure_fires_system_cgroup2_and_emulated_triggers(
    proc_memory: Path, small_memcg: Path, cgroup2: Path, stall_file: Path
) -> None:
    emulated: list[Wake] = []
    fired: dict[str, float] = {}
    with TriggerSet() as triggers, TriggerSet(poll_interval=0.1, psi_kernel_triggers=False) as em:
        triggers.arm_psi("system", str(proc_memory), SENSITIVE)
        triggers.arm_psi("cgroup", str(cgroup2 / "memory.pressure"), SENSITIVE)
        em.arm_psi("emulated", str(proc_memory), SENSITIVE_EMULATED)
        assert triggers.wait(0) == []
        staller = loadgen.spawn(
            "stall", f"--memcg={small_memcg}", f"--cgroup2={cgroup2}", f"--file={stall_file}"
        )
        watcher = threading.Thread(target=lambda: emulated.extend(em.wait(15.0)))
        watcher.start()
        try:
            started = loadgen.read_report(staller)["started_at"]
            deadline = time.monotonic() + 15.0
            while (len(fired) < 2 or watcher.is_alive()) and time.monotonic() < deadline:
                for wake in triggers.wait(min(0.2, deadline - time.monotonic())):
                    fired.setdefault(wake.trigger, wake.time - started)
        finally:
            loadgen.stop(staller)
            watcher.join()
    assert set(fired) == {"system", "cgroup"}, f"fired after (s): {fired}"
    assert [wake.trigger for wake in emulated] == ["emulated"]
