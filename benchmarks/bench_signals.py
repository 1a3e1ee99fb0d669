"""How much one signal collection costs, by number of pods.

Run from the repository root::

    python -m benchmarks.bench_signals            # full run, about a minute
    python -m benchmarks.bench_signals --quick    # fewer iterations
    python -m benchmarks.bench_signals --quick --active-file   # and reading active_file

For cgroup v1 (cgroupfs driver, hybrid) and v2 (systemd driver) fixture trees with 110,
250 and 1000 pods it measures:

* the per-second collection (node signals, PSI, filesystems, per-pod working set and
  task count: :data:`~nodeagent.signals.collector.PER_SECOND_GROUPS`): median and p99
  wall time, and CPU time as a share of one core at a 1 s interval;
* linearity: cost per pod at each size, and the ratio to the 110-pod figure;
* the same collection without kept-open descriptors (open/read/close per file), to
  show what the descriptor cache buys;
* the ephemeral-storage scan (logs, emptyDir, writable layers), which runs on its own
  interval, and the agent's whole CPU share: a collection every second plus a scan
  every default ``podStorageScanInterval``.

As root on a host with cgroup v1 memory and pids controllers it also builds the pod
hierarchy for real in the kernel and times the collection there.

``--active-file`` adds, beside each fixture row, the same collection reading the clean
active page cache too (what ``activePageCache: reclaimable`` asks of the reader: three
more keys of each ``memory.stat`` already read) and the ratio of the two medians.

Fixture files live on whatever filesystem holds the temporary directory; real cgroupfs
reads cost more per file (docs/signals.md has both).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from nodeagent.k8s.pods import QOSClass
from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion
from nodeagent.signals.collector import PER_SECOND_GROUPS, SignalCollector
from nodeagent.signals.settings import SignalSourceSettings
from tests.doubles.host import GIB, MIB, HostTree, Memory, Psi

SIZES = (110, 250, 1000)
REAL_MEMORY = Path("/sys/fs/cgroup/memory")
REAL_PIDS = Path("/sys/fs/cgroup/pids")
QUIET = logging.getLogger("benchmarks.bench_signals.collector")
LAYOUTS = (
    ("v1 cgroupfs", CgroupVersion.V1, CgroupDriver.CGROUPFS),
    ("v2 systemd", CgroupVersion.V2, CgroupDriver.SYSTEMD),
)
QOS_CYCLE = (QOSClass.BURSTABLE, QOSClass.BURSTABLE, QOSClass.GUARANTEED, QOSClass.BEST_EFFORT)
SCAN_INTERVAL = SignalSourceSettings().pod_storage_scan_interval
SCANS = 5


def build_tree(root: Path, pods: int, version: CgroupVersion, driver: CgroupDriver) -> HostTree:
    """A node with ``pods`` pods, each with two containers, logs and a small emptyDir."""
    tree = HostTree(root, version=version, driver=driver, hybrid=True)
    tree.proc(mem_total=64 * GIB, tasks=pods * 8 + 300)
    for resource in ("memory", "io", "cpu"):
        tree.pressure(resource, Psi(some=(1.0, 0.5, 0.2, 123456)))
    tree.root_memory(Memory(20 * GIB, inactive_file=4 * GIB, active_file=2 * GIB))
    tree.kubepods(Memory(16 * GIB, inactive_file=3 * GIB), limit=60 * GIB)
    for directory in ("/var/lib/kubelet", "/var/lib/containerd"):
        tree.path(directory).mkdir(parents=True, exist_ok=True)
    for n in range(pods):
        uid = f"{n:08x}-0000-4000-8000-{n:012x}"
        pid_a, pid_b = 100_000 + 2 * n, 100_001 + 2 * n
        tree.pod(
            uid,
            Memory(64 * MIB + n * 4096, inactive_file=8 * MIB, active_file=4 * MIB),
            qos=QOS_CYCLE[n % len(QOS_CYCLE)],
            tasks=5,
            containers={f"{n:04x}a": pid_a, f"{n:04x}b": pid_b},
        )
        tree.pod_logs("default", f"pod-{n}", uid, {"app/0.log": 2048, "sidecar/0.log": 512})
        tree.empty_dir(uid, "cache", {"a.bin": 4096, "b/c.bin": 100})
        for pid, container in ((pid_a, "a"), (pid_b, "b")):
            tree.container_rootfs(
                pid, f"/var/lib/containerd/snapshots/{n}{container}/fs", {"tmp/x": 1000}
            )
    return tree


@contextmanager
def real_kubepods(pods: int) -> Iterator[str]:
    """A kubelet-shaped hierarchy of ``pods`` empty pod cgroups (two container cgroups
    each) in this machine's cgroup v1 memory and pids controllers, under a node cgroup
    whose name is yielded; removed afterwards."""
    node = f"nodeagent-bench-{os.getpid()}"
    relative = [node, f"{node}/kubepods"]
    relative += [f"{node}/kubepods/{tier}" for tier in ("burstable", "besteffort")]
    for n in range(pods):
        tier = ("burstable", "besteffort", "")[n % 3]
        pod = f"{node}/kubepods/{tier}/pod{n:08x}-0000-4000-8000-{n:012x}".replace("//", "/")
        relative += [pod, f"{pod}/c{n}a", f"{pod}/c{n}b"]
    created: list[Path] = []
    try:
        for root in (REAL_MEMORY, REAL_PIDS):
            for path in relative:
                (root / path).mkdir()
                created.append(root / path)
        yield f"/{node}"
    finally:
        for directory in reversed(created):
            directory.rmdir()


def real_kernel_available() -> bool:
    return (
        os.geteuid() == 0
        and (REAL_MEMORY / "memory.usage_in_bytes").is_file()
        and REAL_PIDS.is_dir()
    )


def timed(function: Callable[[], object], iterations: int) -> tuple[list[float], float]:
    """Wall times of ``iterations`` calls, and the CPU seconds they used in total."""
    walls = []
    cpu_start = time.process_time()
    for _ in range(iterations):
        start = time.perf_counter()
        function()
        walls.append(time.perf_counter() - start)
    return walls, time.process_time() - cpu_start


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


@dataclass(frozen=True)
class Row:
    """What was measured for one layout and number of pods."""

    label: str
    pods: int
    walls: list[float]
    """Wall seconds of each per-second collection."""
    cpu_per_collection: float
    """CPU seconds of one per-second collection (mean)."""
    uncached: list[float]
    """Wall seconds of collections that open, read and close every file."""
    scan_wall: float | None = None
    """Wall seconds of one ephemeral-storage walk (median), when measured."""
    scan_cpu: float = 0.0
    """CPU seconds of one ephemeral-storage walk (mean)."""

    @property
    def agent_cpu_share(self) -> float:
        """CPU of collecting every second and walking storage every default interval,
        as a share of one core."""
        return self.cpu_per_collection + self.scan_cpu / SCAN_INTERVAL


HEADER = (
    f"{'layout':<12} {'pods':>5} {'median ms':>10} {'p99 ms':>8} {'CPU %@1s':>9} "
    f"{'µs/pod':>7} {'ratio':>6} {'no-cache ms':>12} {'scan ms':>8} {'agent CPU %':>12}"
)


def print_rows(rows: list[Row]) -> None:
    print(HEADER)
    print("-" * len(HEADER))
    base = statistics.median(rows[0].walls) / rows[0].pods
    for row in rows:
        median = statistics.median(row.walls)
        per_pod = median / row.pods
        scan = "-" if row.scan_wall is None else f"{row.scan_wall * 1e3:.1f}"
        print(
            f"{row.label:<12} {row.pods:>5} {median * 1e3:>10.2f} {p99(row.walls) * 1e3:>8.2f} "
            f"{row.cpu_per_collection * 100:>9.3f} {per_pod * 1e6:>7.1f} "
            f"{per_pod / base:>6.2f} {statistics.median(row.uncached) * 1e3:>12.2f} "
            f"{scan:>8} {row.agent_cpu_share * 100:>12.3f}"
        )


def measure(label: str, pods: int, iterations: int, **collector: Any) -> Row:
    """Time per-second collections (and, with a storage tree, walks) of ``pods`` pods
    by a collector built with ``collector`` keywords."""
    with SignalCollector(logger=QUIET, **collector) as cached:
        first = cached.collect(0.0)
        assert len(first.pods) == pods, (len(first.pods), pods)
        walls, cpu = timed(partial(cached.collect, 1.0, PER_SECOND_GROUPS), iterations)
        scan = cached.last_storage_scan
        scans, scan_cpu = timed(partial(cached.refresh_pod_storage, 2.0), SCANS)
    with SignalCollector(logger=QUIET, max_open_files=0, **collector) as uncached:
        uncached.collect(0.0, PER_SECOND_GROUPS)
        cold, _ = timed(partial(uncached.collect, 1.0, PER_SECOND_GROUPS), iterations // 5)
    has_storage = scan is not None and bool(scan.pods)
    return Row(
        label=label,
        pods=pods,
        walls=walls,
        cpu_per_collection=cpu / iterations,
        uncached=cold,
        scan_wall=statistics.median(scans) if has_storage else None,
        scan_cpu=scan_cpu / SCANS if has_storage else 0.0,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument(
        "--active-file",
        action="store_true",
        help="also time the collection that reads the clean active page cache",
    )
    args = parser.parse_args()
    QUIET.setLevel(logging.CRITICAL)  # degraded sources (no kubelet here) are expected
    iterations = 100 if args.quick else 500

    print(f"per-second collection ({iterations} iterations per row)")
    with tempfile.TemporaryDirectory(prefix="bench-signals-") as workdir:
        for label, version, driver in LAYOUTS:
            rows, reading = [], []
            for pods in SIZES:
                tree = build_tree(Path(workdir) / f"{version}-{pods}", pods, version, driver)
                rows.append(measure(label, pods, iterations, host_root=tree.root))
                if args.active_file:
                    reading.append(
                        measure(
                            f"{label} +activeFile",
                            pods,
                            iterations,
                            host_root=tree.root,
                            active_file=True,
                        )
                    )
            print_rows(rows)
            if reading:
                print_rows(reading)
                for plain, more in zip(rows, reading, strict=True):
                    ratio = statistics.median(more.walls) / statistics.median(plain.walls)
                    print(f"  {plain.pods} pods: reading active_file too costs {ratio:.2f}x")
    if real_kernel_available():
        print(
            "\nper-second collection on this machine's kernel (cgroup v1 memory and pids "
            "controllers, empty pod cgroups with two container cgroups each)"
        )
        rows = []
        for pods in SIZES:
            with real_kubepods(pods) as node_cgroup:
                rows.append(measure("real v1", pods, iterations, node_cgroup=node_cgroup))
        print_rows(rows)
    else:
        print("\n(real-kernel rows skipped: needs root and cgroup v1 memory and pids controllers)")
    print(
        "\nCPU %@1s: CPU time of one collection as a share of one core when collecting "
        "every second.\nratio: µs/pod relative to the first row (1.00 = linear).\n"
        f"agent CPU %: collecting every second plus one storage walk every {SCAN_INTERVAL:.0f} s "
        "(the default podStorageScanInterval), as a share of one core."
    )


if __name__ == "__main__":
    main()
