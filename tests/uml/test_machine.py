"""The user-mode-linux fixture itself: output and exit status come back, and a guest that
hangs is killed at the timeout."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.uml.conftest import Boot

pytestmark = [pytest.mark.uml, pytest.mark.timeout(300)]


def test_the_command_runs_as_root_on_cgroup_v2_and_its_status_comes_back(uml: Boot) -> None:
    boot = uml(
        ["sh", "-c", "id -u; stat -fc %T /sys/fs/cgroup; grep MemTotal /proc/meminfo; exit 3"],
        mem_mib=128,
        timeout_s=60,
    )
    assert (boot.status, boot.timed_out) == (3, False)
    command_output = boot.output.split("--- command output ---")[1].split()
    assert command_output[:2] == ["0", "cgroup2fs"]
    assert 90 * 1024 < int(command_output[3]) <= 128 * 1024  # kB: MemTotal follows mem=
    assert "Power down" in boot.output


def test_a_hung_guest_is_killed_at_the_timeout(uml: Boot) -> None:
    boot = uml(["sleep", "600"], mem_mib=64, timeout_s=8)
    assert (boot.status, boot.timed_out) == (None, True)
    init = f"init={boot.results.parent / 'init.sh'}".encode()
    assert not [pid for pid, cmdline in command_lines() if init in cmdline]  # none outlives it


def command_lines() -> list[tuple[str, bytes]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                found.append((entry.name, (entry / "cmdline").read_bytes()))
    return found
