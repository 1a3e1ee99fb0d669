"""The signals benchmark still runs: its fixture node has what it claims, and one
measurement of a tiny node fills every column (timing is the benchmark's job, not a
test's)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import bench_signals
from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion


def test_a_tiny_node_is_measured_in_every_column(tmp_path: Path) -> None:
    tree = bench_signals.build_tree(tmp_path, 3, CgroupVersion.V2, CgroupDriver.SYSTEMD)
    row = bench_signals.measure("v2 systemd", 3, 5, host_root=tree.root)
    assert len(row.walls) == 5
    assert len(row.uncached) == 1
    assert row.scan_wall is not None
    assert row.scan_cpu > 0
    assert row.agent_cpu_share > row.cpu_per_collection > 0
