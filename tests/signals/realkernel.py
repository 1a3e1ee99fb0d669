"""Helpers for the signal tests that use this machine's kernel (tests/kernel/test_signals_*).

Everything created here is removed in ``finally`` blocks: cgroups (after their
processes are killed), tmpfs mounts. Tests skip only when the kernel or the privileges
truly lack the feature, and say which.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

CGROUP_MOUNT = Path("/sys/fs/cgroup")
MEMCG_ROOT = CGROUP_MOUNT / "memory"
PIDS_ROOT = CGROUP_MOUNT / "pids"
UNIFIED_ROOT = CGROUP_MOUNT / "unified"

_names = itertools.count()


def unique_name() -> str:
    return f"nodeagent-test-{os.getpid()}-{next(_names)}"


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"needs root to {what}")


def require_v1_memory_controller() -> None:
    require_root("create memory cgroups")
    if not (MEMCG_ROOT / "memory.usage_in_bytes").is_file():
        pytest.skip(f"this kernel has no cgroup v1 memory controller at {MEMCG_ROOT}")


@contextmanager
def cgroups(root: Path, relative: Sequence[str]) -> Iterator[list[Path]]:
    """``mkdir`` each relative path under ``root`` (parents first); ``rmdir`` them all,
    deepest first, however the test ends. Processes must be gone by then."""
    created: list[Path] = []
    try:
        for path in relative:
            directory = root / path
            directory.mkdir()
            created.append(directory)
        yield created
    finally:
        for directory in reversed(created):
            for _ in range(50):  # a killed process leaves its cgroup a moment later
                try:
                    directory.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)


HOG = """
import sys
_, anon_mib, file_mib, path = sys.stdin.readline().split()
blocks = [bytearray(b"x") * (1 << 20) for _ in range(int(anon_mib))]
with open(path, "wb") as out:
    for _ in range(int(file_mib)):
        out.write(b"y" * (1 << 20))
print("ready", flush=True)
sys.stdin.readline()
"""


class Hog:
    """A process that waits, then allocates and touches memory and writes a file."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOG],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def join(self, *cgroup_dirs: Path) -> None:
        """Move the hog into cgroups (before it allocates: v1 does not move charges)."""
        for directory in cgroup_dirs:
            (directory / "cgroup.procs").write_text(f"{self.pid}\n")

    def allocate(self, *, anon_mib: int, file_mib: int, file_path: Path) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"go {anon_mib} {file_mib} {file_path}\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


@contextmanager
def hog() -> Iterator[Hog]:
    process = Hog()
    try:
        yield process
    finally:
        process.stop()


@contextmanager
def tmpfs(mount_point: Path, *, size: str, nr_inodes: int) -> Iterator[Path]:
    """A small tmpfs at ``mount_point`` (created), unmounted however the test ends."""
    require_root("mount tmpfs")
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={size},nr_inodes={nr_inodes}",
            "tmpfs",
            str(mount_point),
        ],
        check=True,
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def read_int(path: Path) -> int:
    return int(path.read_text())


def stat_key(directory: Path, key: str) -> int:
    for line in (directory / "memory.stat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    raise KeyError(key)


def kernel_working_set(directory: Path) -> int:
    """What the kernel says right now: v1 usage_in_bytes - total_inactive_file."""
    usage = read_int(directory / "memory.usage_in_bytes")
    inactive = stat_key(directory, "total_inactive_file")
    return max(usage - inactive, 0)


def batching_tolerance() -> int:
    """v1 charges memory in per-CPU batches of 64 pages (and flushes memory.stat in
    similar batches), so two reads a moment apart may differ by this much."""
    return 2 * 64 * 4096 * (os.cpu_count() or 1)
