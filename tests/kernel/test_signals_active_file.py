"""The clean active page cache on this machine's real cgroup v1 memory controller.

A process in a kubelet-shaped pod cgroup writes a file on the machine's disk, syncs it
and reads it twice (the second read activates its pages): the reader's clean active file
for the pod and for kubepods must match ``total_active_file - total_dirty -
total_writeback`` as the kernel reports it at that moment, the kubelet's working set
must still hold the file, and the decision view must give it back as available.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from nodeagent.eviction.page_cache import ActivePageCache, view
from nodeagent.model import PodUID, Signal
from nodeagent.signals.collector import PER_SECOND_GROUPS, SignalCollector
from tests.signals.realkernel import (
    MEMCG_ROOT,
    batching_tolerance,
    cgroups,
    require_v1_memory_controller,
    stat_key,
    unique_name,
)

pytestmark = pytest.mark.kernel

MIB = 1 << 20
FILE_MIB = 48

READER = """
import os, sys
path, mib = sys.argv[1], int(sys.argv[2])
sys.stdin.readline()
with open(path, "wb") as out:
    for _ in range(mib):
        out.write(b"z" * (1 << 20))
    out.flush()
    os.fsync(out.fileno())
for _ in range(2):
    with open(path, "rb") as again:
        while again.read(1 << 20):
            pass
print("ready", flush=True)
sys.stdin.readline()
"""


def clean_active(directory: Path) -> int:
    active = stat_key(directory, "total_active_file")
    return max(
        active - stat_key(directory, "total_dirty") - stat_key(directory, "total_writeback"), 0
    )


def test_a_file_read_twice_is_clean_active_page_cache(tmp_path: Path) -> None:
    require_v1_memory_controller()
    name = unique_name()
    uid = str(uuid.uuid4())
    layout = [name, f"{name}/kubepods", f"{name}/kubepods/pod{uid}"]
    with cgroups(MEMCG_ROOT, layout) as dirs:
        _, kubepods_dir, pod_dir = dirs
        (kubepods_dir / "memory.limit_in_bytes").write_text(str(512 * MIB))
        process = subprocess.Popen(
            [sys.executable, "-c", READER, str(tmp_path / "hot"), str(FILE_MIB)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            (pod_dir / "cgroup.procs").write_text(f"{process.pid}\n")
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write("go\n")
            process.stdin.flush()
            assert process.stdout.readline().strip() == "ready"
            with SignalCollector(node_cgroup=f"/{name}", active_file=True) as collector:
                pod_low, kubepods_low = clean_active(pod_dir), clean_active(kubepods_dir)
                observed = collector.collect(0.0, PER_SECOND_GROUPS)
                pod_high, kubepods_high = clean_active(pod_dir), clean_active(kubepods_dir)
            with SignalCollector(node_cgroup=f"/{name}") as collector:
                kubelet = collector.collect(0.0, PER_SECOND_GROUPS)
        finally:
            process.kill()
            process.wait(timeout=10)

    tolerance = batching_tolerance()
    pod = observed.pods[PodUID(uid)]
    assert pod.active_file is not None
    assert (
        min(pod_low, pod_high) - tolerance <= pod.active_file <= max(pod_low, pod_high) + tolerance
    )
    assert pod.active_file >= FILE_MIB * MIB * 3 // 4, pod.active_file
    kubepods = observed.active_file[Signal.ALLOCATABLE_MEMORY_AVAILABLE]
    assert min(kubepods_low, kubepods_high) - tolerance <= kubepods
    assert kubepods <= max(kubepods_low, kubepods_high) + tolerance
    # the kubelet's working set holds the file; counted as reclaimable, it is available
    pod_kubelet = kubelet.pods[PodUID(uid)].memory
    assert pod_kubelet is not None and pod_kubelet >= pod.active_file
    counted = view(observed, ActivePageCache.RECLAIMABLE)
    raw = observed.value(Signal.ALLOCATABLE_MEMORY_AVAILABLE)
    seen = counted.value(Signal.ALLOCATABLE_MEMORY_AVAILABLE)
    assert raw is not None and seen is not None
    assert seen.available == min(raw.available + kubepods, raw.capacity)
    assert counted.pods[PodUID(uid)].memory == max((pod.memory or 0) - pod.active_file, 0)
