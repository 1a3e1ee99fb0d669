"""The guests themselves: a command's output and status come back from a real cgroup v2
kernel, the checkout's Python runs inside, a command past its timeout is killed and the
guest serves on, and a guest that stops answering is killed whole."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

from tests.uml import machine
from tests.uml.conftest import GUEST_MEM_MIB

pytestmark = [pytest.mark.uml, pytest.mark.timeout(600)]


def test_the_command_runs_as_root_on_cgroup_v2_and_its_status_comes_back(
    guest: machine.Guest,
) -> None:
    run = guest.run(
        [
            "sh",
            "-c",
            "id -u; stat -fc %T /sys/fs/cgroup; grep MemTotal /proc/meminfo; uname -r; exit 3",
        ],
        timeout_s=60,
    )
    assert (run.status, run.timed_out) == (3, False), run.output
    uid, filesystem, _, mem_total_kib, _, release = run.output.split()
    assert (uid, filesystem, release) == ("0", "cgroup2fs", guest.release)
    # The kernel keeps some of the guest's RAM for itself: MemTotal is a little lower.
    assert (GUEST_MEM_MIB - 96) * 1024 < int(mem_total_kib) <= GUEST_MEM_MIB * 1024


def test_the_guest_runs_this_checkout_with_this_python(guest: machine.Guest) -> None:
    run = guest.run(
        [sys.executable, "-c", "import nodeagent, sys; print(nodeagent.__file__, sys.prefix)"],
        timeout_s=120,
    )
    assert run.status == 0, run.output
    assert run.output.split() == [str(machine.REPO_ROOT / "nodeagent" / "__init__.py"), sys.prefix]


def test_the_host_is_read_only_inside_but_the_results_directory(guest: machine.Guest) -> None:
    probe = machine.REPO_ROOT / "pyproject.toml"
    run = guest.run(
        ["sh", "-c", f'echo x >> {probe}; echo written > "$GUEST_RESULTS/file"'], timeout_s=60
    )
    assert "Read-only file system" in run.output
    assert (run.results / "file").read_text() == "written\n"


def test_a_command_past_its_timeout_is_killed_with_its_children_and_the_guest_serves_on(
    guest: machine.Guest,
) -> None:
    run = guest.run(["sh", "-c", "sleep 600 & sleep 601"], timeout_s=2)
    assert (run.status, run.timed_out) == (None, True)
    left = guest.run(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"], timeout_s=60)
    assert left.status == 0
    assert "sleep 60" not in left.output


def test_a_guest_that_stops_answering_is_killed_and_leaves_nothing_behind(
    guest: machine.Guest, tmp_path: Path
) -> None:
    """A second guest of the same kernel, whose server the command freezes."""
    with machine.start(guest.kernel, mem_mib=192, workdir=tmp_path, answer_grace_s=2) as frozen:
        run = frozen.run(["sh", "-c", "kill -STOP $PPID"], timeout_s=5)
        assert (run.status, run.timed_out) == (None, True)
        assert frozen.gone is not None and "no answer" in frozen.gone
        with pytest.raises(RuntimeError, match="is gone"):
            frozen.run(["true"])
        assert not [pid for pid, cmdline in command_lines() if str(tmp_path).encode() in cmdline]


def command_lines() -> list[tuple[str, bytes]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                found.append((entry.name, (entry / "cmdline").read_bytes()))
    return found
