"""How much one signal collection costs, by number of pods.

Run from the repository root::

    python -m benchmarks.bench_signals            # full run, about half a minute
    python -m benchmarks.bench_signals --quick    # fewer iterations

For cgroup v1 (cgroupfs driver, hybrid) and v2 (systemd driver) fixture trees with 110,
250 and 1000 pods it measures:

* the per-second collection (node signals, PSI, filesystems, per-pod working set and
  task count: :data:`~nodeagent.signals.collector.PER_SECOND_GROUPS`): median and p99
  wall time, and CPU time as a share of one core at a 1 s interval;
* linearity: cost per pod at each size, and the ratio to the 110-pod figure;
* the same collection without kept-open descriptors (open/read/close per file), to
  show what the descriptor cache buys;
* the ephemeral-storage scan (logs, emptyDir, writable layers), which runs on its own
  interval.

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
from functools import partial
from pathlib import Path

from nodeagent.model import QOSClass
from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion
from nodeagent.signals.collector import PER_SECOND_GROUPS, SignalCollector
from nodeagent.signals.fixtures import GIB, MIB, HostTree, Memory, Psi

SIZES = (110, 250, 1000)
REAL_MEMORY = Path("/sys/fs/cgroup/memory")
REAL_PIDS = Path("/sys/fs/cgroup/pids")
QUIET = logging.getLogger("benchmarks.bench_signals.collector")
LAYOUTS = (
    ("v1 cgroupfs", CgroupVersion.V1, CgroupDriver.CGROUPFS),
    ("v2 systemd", CgroupVersion.V2, CgroupDriver.SYSTEMD),
)
QOS_CYCLE = (QOSClass.BURSTABLE, QOSClass.BURSTABLE, QOSClass.GUARANTEED, QOSClass.BEST_EFFORT)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    QUIET.setLevel(logging.CRITICAL)  # degraded sources (no kubelet here) are expected
    iterations = 100 if args.quick else 500

    print(f"per-second collection ({iterations} iterations per row)")
    header = (
        f"{'layout':<12} {'pods':>5} {'median ms':>10} {'p99 ms':>8} {'CPU %@1s':>9} "
        f"{'µs/pod':>7} {'ratio':>6} {'no-cache ms':>12} {'scan ms':>8}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="bench-signals-") as workdir:
        for label, version, driver in LAYOUTS:
            per_pod_base = None
            for pods in SIZES:
                tree = build_tree(Path(workdir) / f"{version}-{pods}", pods, version, driver)
                with SignalCollector(host_root=tree.root, logger=QUIET) as collector:
                    first = collector.collect(0.0)
                    assert len(first.pods) == pods, (len(first.pods), pods)
                    walls, cpu = timed(
                        partial(collector.collect, 1.0, PER_SECOND_GROUPS), iterations
                    )
                    scans, _ = timed(partial(collector.refresh_pod_storage, 2.0), 5)
                with SignalCollector(
                    host_root=tree.root, max_open_files=0, logger=QUIET
                ) as uncached:
                    uncached.collect(0.0)
                    cold, _ = timed(
                        partial(uncached.collect, 1.0, PER_SECOND_GROUPS), iterations // 5
                    )
                median = statistics.median(walls)
                per_pod = median / pods
                per_pod_base = per_pod_base or per_pod
                print(
                    f"{label:<12} {pods:>5} {median * 1e3:>10.2f} {p99(walls) * 1e3:>8.2f} "
                    f"{cpu / iterations * 100:>9.3f} {per_pod * 1e6:>7.1f} "
                    f"{per_pod / per_pod_base:>6.2f} {statistics.median(cold) * 1e3:>12.2f} "
                    f"{statistics.median(scans) * 1e3:>8.1f}"
                )
    if real_kernel_available():
        print(
            "\nper-second collection on this machine's kernel (cgroup v1 memory and pids "
            "controllers, empty pod cgroups with two container cgroups each)"
        )
        print(header)
        print("-" * len(header))
        per_pod_base = None
        for pods in SIZES:
            with real_kubepods(pods) as node_cgroup:
                with SignalCollector(node_cgroup=node_cgroup, logger=QUIET) as collector:
                    first = collector.collect(0.0, PER_SECOND_GROUPS)
                    assert len(first.pods) == pods, (len(first.pods), pods)
                    walls, cpu = timed(
                        partial(collector.collect, 1.0, PER_SECOND_GROUPS), iterations
                    )
                with SignalCollector(
                    node_cgroup=node_cgroup, max_open_files=0, logger=QUIET
                ) as uncached:
                    uncached.collect(0.0, PER_SECOND_GROUPS)
                    cold, _ = timed(
                        partial(uncached.collect, 1.0, PER_SECOND_GROUPS), iterations // 5
                    )
            median = statistics.median(walls)
            per_pod = median / pods
            per_pod_base = per_pod_base or per_pod
            print(
                f"{'real v1':<12} {pods:>5} {median * 1e3:>10.2f} {p99(walls) * 1e3:>8.2f} "
                f"{cpu / iterations * 100:>9.3f} {per_pod * 1e6:>7.1f} "
                f"{per_pod / per_pod_base:>6.2f} {statistics.median(cold) * 1e3:>12.2f} "
                f"{'-':>8}"
            )
    else:
        print("\n(real-kernel rows skipped: needs root and cgroup v1 memory and pids controllers)")
    print(
        "\nCPU %@1s: CPU time of one collection as a share of one core when collecting "
        "every second.\nratio: µs/pod relative to the 110-pod row (1.00 = linear)."
    )


if __name__ == "__main__":
    main()
