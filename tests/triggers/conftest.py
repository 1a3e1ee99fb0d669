"""Fixtures for the trigger tests: real cgroups (cleaned up always) and fixture files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.triggers import loadgen


def _require(path: Path, what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"needs root to create {what}")
    if not path.is_dir():
        pytest.skip(f"this kernel has no {what} at {path}")


@pytest.fixture
def memcg_root() -> Path:
    """The cgroup v1 memory controller's root, where tests may create cgroups."""
    _require(loadgen.MEMCG_ROOT, "cgroup v1 memory cgroups")
    return loadgen.MEMCG_ROOT


@pytest.fixture
def memcg(memcg_root: Path) -> Iterator[Path]:
    """A fresh cgroup v1 memory cgroup without a limit."""
    with loadgen.temporary_cgroup(memcg_root) as path:
        yield path


@pytest.fixture
def small_memcg() -> Iterator[Path]:
    """A cgroup v1 memory cgroup limited to 16 MiB, where reading files stalls on reclaim."""
    _require(loadgen.MEMCG_ROOT, "cgroup v1 memory cgroups")
    with loadgen.temporary_cgroup(loadgen.MEMCG_ROOT, limit_bytes=16 << 20) as path:
        yield path


@pytest.fixture
def cgroup2() -> Iterator[Path]:
    """A fresh cgroup2 directory (on this hybrid host: under /sys/fs/cgroup/unified)."""
    _require(loadgen.CGROUP2_ROOT, "cgroup2 hierarchy")
    with loadgen.temporary_cgroup(loadgen.CGROUP2_ROOT) as path:
        yield path


@pytest.fixture(scope="session")
def stall_file() -> Iterator[Path]:
    """256 MiB on disk, in /var/tmp rather than a possibly tmpfs /tmp: its cached pages
    must be droppable for re-reading it to stall on reclaim and I/O."""
    path = Path("/var/tmp") / f"nodeagent-stall-{os.getpid()}.bin"
    try:
        yield loadgen.make_stall_file(path)
    finally:
        path.unlink(missing_ok=True)


def write_pressure(path: Path, some_total: int, full_total: int = 0) -> None:
    """A pressure file in the kernel's format."""
    path.write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={some_total}\n"
        f"full avg10=0.00 avg60=0.00 avg300=0.00 total={full_total}\n"
    )
