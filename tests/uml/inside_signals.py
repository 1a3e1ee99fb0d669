"""Inside a cgroup v2 guest: the signals on real cgroup v2 hierarchies, beside the kernel's
own numbers. Run by tests/uml/test_v2_signals.py (one command); writes ``signals.json``.

Every figure the agent reports is recorded together with what the kernel's files say
right after, so the test on the host compares them:

- ``root``: ``memory.available`` on the v2 root, before and with a 32 MiB process;
- ``node_cgroup``: a node cgroup with ``memory.max`` under a parent with a lower one;
- ``systemd`` and ``cgroupfs``: kubepods with ``memory.max`` (allocatable) and pods of
  every QoS class laid out as each kubelet driver names them, with real processes,
  page cache (on an ext4 disk) and threads; found by auto-detection.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from nodeagent.model import Signal, SignalValue
from nodeagent.signals.collector import SignalCollector
from tests.uml.workload import (
    CGROUP2,
    Workload,
    count_lines,
    enable_controllers,
    make_cgroup,
    make_tree,
    meminfo,
    read_int,
    remove_tree,
    stat,
    write_results,
)

DISK_MOUNT = os.environ.get("GUEST_DISK", "")
"""An ext4 filesystem inside the guest: the page cache that hostfs and 9p shares lack."""
MiB = 1 << 20
KUBEPODS_LIMIT = 256 * MiB
CONTAINER = "0123456789abcdef" * 4


def collector(**kwargs: Any) -> SignalCollector:
    return SignalCollector(host_root="/", nodefs_path="/", imagefs_path="/", **kwargs)


def value(observation: object) -> dict[str, Any]:
    if isinstance(observation, SignalValue):
        return {
            "available": observation.available,
            "capacity": observation.capacity,
            "source": observation.source,
        }
    return {"unavailable": str(observation)}


def clean_active_file(cgroup: Path) -> int:
    """The kernel's ``active_file - file_dirty - file_writeback`` of ``cgroup``, now."""
    figures = stat(cgroup)
    return max(figures["active_file"] - figures["file_dirty"] - figures["file_writeback"], 0)


def working_set(cgroup: Path) -> int:
    return max(read_int(cgroup / "memory.current") - stat(cgroup)["inactive_file"], 0)


def root_sample(signals: SignalCollector) -> dict[str, Any]:
    observed = signals.collect(time.monotonic()).signals[Signal.MEMORY_AVAILABLE]
    root, info = stat(CGROUP2), meminfo()
    return {
        "agent": value(observed),
        "mem_total": info["MemTotal"],
        "root_stat_working_set": root["anon"] + root["file"] - root["inactive_file"],
        "meminfo_working_set": info["AnonPages"]
        + info["Buffers"]
        + info["Cached"]
        + info["SwapCached"]
        - info["Inactive(file)"],
    }


def check_root() -> dict[str, Any]:
    signals = collector()
    before = root_sample(signals)
    hog_cgroup = make_cgroup(CGROUP2 / "hog.slice")
    hog = Workload(hog_cgroup, anon=32 * MiB)
    with_hog = root_sample(signals)
    hog.stop()
    remove_tree(hog_cgroup)
    paths = signals.cgroups
    return {
        "version": str(paths.version),
        "kubepods": paths.kubepods_cgroup,
        "before": before,
        "with_hog": with_hog,
        "hog": 32 * MiB,
    }


def check_node_cgroup() -> dict[str, Any]:
    outer = make_tree(CGROUP2, "outer.slice", memory_max=160 * MiB)
    enable_controllers(outer)
    node = make_cgroup(outer / "node.slice", memory_max=200 * MiB, parent_of_more=True)
    work = make_cgroup(node / "work.scope")
    load = Workload(work, anon=24 * MiB, file=8 * MiB, file_path=f"{DISK_MOUNT}/node-file")
    results: dict[str, Any] = {}
    for name, cgroup, path in (
        ("nested", "/outer.slice/node.slice", node),
        ("outer", "/outer.slice", outer),
    ):
        observed = collector(node_cgroup=cgroup).collect(time.monotonic())
        results[name] = {
            "agent": value(observed.signals[Signal.MEMORY_AVAILABLE]),
            "memory_current": read_int(path / "memory.current"),
            "inactive_file": stat(path)["inactive_file"],
            "working_set": working_set(path),
        }
    results["limits"] = {"outer": 160 * MiB, "node": 200 * MiB}
    load.stop()
    remove_tree(outer)
    return results


def pod_layout(driver: str) -> tuple[str, dict[str, tuple[str, str]]]:
    """kubepods and, per pod UID, (QoS, the container's cgroup), as each driver names
    them."""
    if driver == "systemd":
        return "kubepods.slice", {
            "1111-aaaa": (
                "Burstable",
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1111_aaaa.slice"
                f"/cri-containerd-{CONTAINER}.scope",
            ),
            "2222-bbbb": (
                "Guaranteed",
                f"kubepods.slice/kubepods-pod2222_bbbb.slice/cri-containerd-{CONTAINER}.scope",
            ),
            "3333-cccc": (
                "BestEffort",
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod3333_cccc.slice"
                f"/cri-containerd-{CONTAINER}.scope",
            ),
        }
    return "kubepods", {
        "1111-aaaa": ("Burstable", f"kubepods/burstable/pod1111-aaaa/{CONTAINER}"),
        "2222-bbbb": ("Guaranteed", f"kubepods/pod2222-bbbb/{CONTAINER}"),
        "3333-cccc": ("BestEffort", f"kubepods/besteffort/pod3333-cccc/{CONTAINER}"),
    }


def check_driver(driver: str) -> dict[str, Any]:
    kubepods, pods = pod_layout(driver)
    kubepods_dir = make_tree(CGROUP2, kubepods, memory_max=KUBEPODS_LIMIT)
    enable_controllers(kubepods_dir)
    containers = {uid: make_tree(CGROUP2, path) for uid, (_, path) in pods.items()}
    loads = [
        # Burstable: 24 MiB of anonymous memory plus an 8 MiB file (page cache), and a
        # second process with 3 extra threads.
        Workload(
            containers["1111-aaaa"],
            anon=24 * MiB,
            file=8 * MiB,
            file_path=f"{DISK_MOUNT}/{driver}-file",
        ),
        Workload(containers["1111-aaaa"], threads=3),
        Workload(containers["2222-bbbb"], anon=8 * MiB),
        # BestEffort: an 8 MiB file read back twice, into the active page cache
        Workload(
            containers["3333-cccc"],
            anon=4 * MiB,
            threads=1,
            file=8 * MiB,
            file_path=f"{DISK_MOUNT}/{driver}-hot",
            reads=2,
        ),
    ]
    signals = collector()
    observed = signals.collect(time.monotonic())
    with collector(active_file=True) as reading:
        kubepods_low = clean_active_file(kubepods_dir)
        pods_low = {uid: clean_active_file(c.parent) for uid, c in containers.items()}
        counted = reading.collect(time.monotonic())
        kubepods_high = clean_active_file(kubepods_dir)
        pods_high = {uid: clean_active_file(c.parent) for uid, c in containers.items()}
    paths = signals.cgroups
    results: dict[str, Any] = {
        "detected": {
            "version": str(paths.version),
            "driver": str(paths.driver),
            "kubepods": paths.kubepods_cgroup,
        },
        "allocatable": {
            "agent": value(observed.signals[Signal.ALLOCATABLE_MEMORY_AVAILABLE]),
            "limit": KUBEPODS_LIMIT,
            "working_set": working_set(kubepods_dir),
            "agent_active_file": counted.active_file.get(Signal.ALLOCATABLE_MEMORY_AVAILABLE),
            "active_file": [kubepods_low, kubepods_high],
        },
        "pods": {},
    }
    for uid, (qos, _) in pods.items():
        pod_dir = containers[uid].parent
        usage = observed.pods.get(uid)  # type: ignore[call-overload]
        cgroup = signals.pod_cgroups.get(uid)  # type: ignore[call-overload]
        results["pods"][uid] = {
            "qos": qos,
            "agent_qos": None if cgroup is None else str(cgroup.qos),
            "agent_memory": None if usage is None else usage.memory,
            "agent_processes": None if usage is None else usage.processes,
            "agent_threads": None if usage is None else usage.threads,
            "working_set": working_set(pod_dir),
            "inactive_file": stat(pod_dir)["inactive_file"],
            "pids_current": read_int(pod_dir / "pids.current"),
            "agent_active_file": counted.pods[uid].active_file,  # type: ignore[index]
            "active_file": [pods_low[uid], pods_high[uid]],
            "procs": count_lines(pod_dir, "cgroup.procs"),
            "threads": count_lines(pod_dir, "cgroup.threads"),
        }
    signals.close()
    for load in loads:
        load.stop()
    remove_tree(kubepods_dir)
    return results


def main() -> None:
    enable_controllers(CGROUP2)
    results: dict[str, Any] = {
        "controllers": (CGROUP2 / "cgroup.controllers").read_text().split(),
        "psi": Path("/proc/pressure").exists(),
        "root": check_root(),
        "node_cgroup": check_node_cgroup(),
    }
    for driver in ("systemd", "cgroupfs"):
        results[driver] = check_driver(driver)
    write_results("signals", results)


if __name__ == "__main__":
    main()
