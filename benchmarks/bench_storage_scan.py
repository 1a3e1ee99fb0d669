"""CPU time of one pod-storage walk (logs, emptyDirs, writable layers), alone.

    python -m benchmarks.bench_storage_scan [--pods 250] [--walks 40]

The walk of ``benchmarks.bench_signals`` (cgroup v2 systemd fixture: per pod two
containers' log directories, an emptyDir and two writable layers), timed by itself so a
change to the walk can be compared with the code before it, run alternately in separate
processes (``PYTHONPATH=<checkout of the base> python -m benchmarks.bench_storage_scan``).
Prints the median CPU milliseconds of one walk.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_signals import build_tree
from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion
from nodeagent.signals.collector import SignalCollector


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--walks", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nodeagent-scan-") as workdir:
        tree = build_tree(Path(workdir), args.pods, CgroupVersion.V2, CgroupDriver.SYSTEMD)
        with SignalCollector(host_root=str(tree.root), pod_storage_scan_interval=60) as collector:
            collector.collect(0.0)
            cpu = []
            for walk in range(args.walks):
                started = time.process_time()
                collector.refresh_pod_storage(1.0 + walk)
                cpu.append(time.process_time() - started)
    median = statistics.median(cpu) * 1e3
    print(f"{args.pods} pods: one walk {median:.1f} ms CPU (median of {args.walks})")


if __name__ == "__main__":
    main()
