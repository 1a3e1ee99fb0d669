"""PSI and pid.available read from this machine's kernel, against the kernel's own files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.model import Signal
from nodeagent.signals import parse
from nodeagent.signals.collector import SignalCollector, SignalGroup
from tests.signals.realkernel import (
    MEMCG_ROOT,
    UNIFIED_ROOT,
    cgroups,
    require_root,
    require_v1_memory_controller,
    unique_name,
)

pytestmark = pytest.mark.kernel

PSI = {SignalGroup.PSI}


def require_psi() -> None:
    path = Path("/proc/pressure/memory")
    if not path.exists():
        pytest.skip("this kernel has no /proc/pressure (PSI needs Linux 4.20+)")
    try:
        path.read_bytes()
    except OSError as exc:
        pytest.skip(f"PSI is disabled on this kernel: {exc.strerror}")


def test_system_psi_matches_the_kernel_files() -> None:
    require_psi()
    with SignalCollector() as collector:
        raw_before = {
            r: parse.parse_psi(Path(f"/proc/pressure/{r}").read_bytes())
            for r in ("memory", "io", "cpu")
        }
        first = collector.collect(0.0, PSI).psi
        time.sleep(0.05)
        second = collector.collect(1.0, PSI).psi
        raw_after = {
            r: parse.parse_psi(Path(f"/proc/pressure/{r}").read_bytes())
            for r in ("memory", "io", "cpu")
        }
        assert not any(source.startswith("psi/memory") for source in collector.degraded())
    for resource in ("memory", "io", "cpu"):
        read = second[resource]
        assert raw_before[resource].some.total <= read.some.total <= raw_after[resource].some.total
        assert first[resource].some.total <= read.some.total
        for value in (read.some.avg10, read.some.avg60, read.some.avg300):
            assert 0.0 <= value <= 100.0
    assert second["memory"].full is not None


def require_hybrid_cgroup2() -> None:
    require_psi()
    require_v1_memory_controller()
    if not (UNIFIED_ROOT / "cgroup.controllers").is_file():
        pytest.skip(f"no cgroup2 hierarchy at {UNIFIED_ROOT} on this host")


THRASHER = """
import os, sys
path = sys.argv[1]
sys.stdin.readline()
with open(path, "rb", buffering=0) as file:
    while True:
        file.seek(0)
        while file.read(1 << 20):
            pass
"""


def test_node_and_kubepods_pressure_files_see_a_real_stall(tmp_path: Path) -> None:
    """A process in a pod cgroup under kubepods, limited to 16 MiB, reads a 64 MiB file
    over and over: memcg reclaim stalls it, and the kernel accounts the stall to its
    cgroup2 ancestors, the node and kubepods cgroups, which the collector reads."""
    require_hybrid_cgroup2()
    data = tmp_path / "data"
    with open(data, "wb") as out:
        out.write(os.urandom(1 << 20) * 64)
        out.flush()
        os.fsync(out.fileno())
        os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    name = unique_name()
    layout = [name, f"{name}/kubepods", f"{name}/kubepods/podx"]
    with (
        cgroups(MEMCG_ROOT, layout) as (_, _, pod_memcg),
        cgroups(UNIFIED_ROOT, layout) as (node, kubepods, pod_unified),
        SignalCollector(node_cgroup=name) as collector,
    ):
        assert collector.cgroups.kubepods_unified_dir == str(kubepods)
        before = collector.collect(0.0, PSI).psi
        assert not any(source.startswith("psi/") for source in collector.degraded())
        assert before["node/memory"].some.total == before["kubepods/memory"].some.total == 0
        (pod_memcg / "memory.limit_in_bytes").write_text(str(16 << 20))
        with subprocess.Popen(
            [sys.executable, "-c", THRASHER, str(data)], stdin=subprocess.PIPE, text=True
        ) as process:
            try:
                for directory in (pod_memcg, pod_unified):
                    (directory / "cgroup.procs").write_text(f"{process.pid}\n")
                assert process.stdin is not None
                process.stdin.write("go\n")
                process.stdin.flush()
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    psi = collector.collect(time.monotonic(), PSI).psi
                    if psi["kubepods/memory"].some.total > 0:
                        break
                    time.sleep(0.05)
            finally:
                process.kill()
        raw = {
            scope: parse.parse_psi((directory / "memory.pressure").read_bytes())
            for scope, directory in (("node", node), ("kubepods", kubepods))
        }
    # Stalls are accounted to every cgroup2 ancestor of the stalled task; what was
    # read while it ran is at most what the files hold now.
    for scope in ("node", "kubepods"):
        assert 0 < psi[f"{scope}/memory"].some.total <= raw[scope].some.total
        assert psi[f"{scope}/memory"] != psi["memory"]  # not the system file


def count_tasks() -> int:
    return parse.parse_loadavg_tasks(Path("/proc/loadavg").read_bytes())


THREADS = """
import sys, threading
stop = threading.Event()
for _ in range(int(sys.argv[1])):
    threading.Thread(target=stop.wait, daemon=True).start()
print("up", flush=True)
sys.stdin.readline()
"""


def test_pid_available_follows_the_kernel() -> None:
    require_root("read every task of the system consistently")
    limits = [
        int(Path(f"/proc/sys/kernel/{name}").read_text()) for name in ("pid_max", "threads-max")
    ]
    with SignalCollector() as collector:
        before = collector.collect(0.0, {SignalGroup.PIDS}).value(Signal.PID_AVAILABLE)
        assert before is not None
        assert before.capacity == min(limits)
        assert abs(before.available - (min(limits) - count_tasks())) <= 32
        with subprocess.Popen(
            [sys.executable, "-c", THREADS, "200"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as process:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "up"
            during = collector.collect(1.0, {SignalGroup.PIDS}).value(Signal.PID_AVAILABLE)
            process.kill()
    assert during is not None
    assert 150 <= before.available - during.available <= 260
