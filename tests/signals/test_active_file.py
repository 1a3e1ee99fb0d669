"""The clean active page cache (``active_file`` less dirty and writeback pages) of the
node, kubepods and each pod, on fixture trees of every layout, against hand-computed
values; read only by a collector asked for it, with the kubelet's figures unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.k8s.pods import QOSClass
from nodeagent.model import NodeObservations, Signal, SignalValue
from nodeagent.signals.cgroups import CgroupVersion
from nodeagent.signals.collector import PER_SECOND_GROUPS, SignalCollector
from nodeagent.signals.memory import clean_active_file
from tests.doubles.host import GIB, MIB, HostTree, Memory

ALLOCATABLE = Signal.ALLOCATABLE_MEMORY_AVAILABLE


def collect(tree: HostTree, *, active_file: bool) -> NodeObservations:
    with SignalCollector(host_root=tree.root, active_file=active_file) as collector:
        return collector.collect(0.0, PER_SECOND_GROUPS)


def busy_node(tree: HostTree) -> None:
    tree.proc(mem_total=16 * GIB)
    tree.root_memory(Memory(6 * GIB, inactive_file=1 * GIB, active_file=3 * GIB, dirty=256 * MIB))
    tree.kubepods(
        Memory(3 * GIB, inactive_file=256 * MIB, active_file=2 * GIB, writeback=64 * MIB),
        limit=4 * GIB,
    )
    # a: a hot 1.5 GiB file of which 100 MiB dirty; b: anonymous memory only
    tree.pod(
        "a",
        Memory(1800 * MIB, inactive_file=100 * MIB, active_file=1536 * MIB, dirty=100 * MIB),
        qos=QOSClass.BEST_EFFORT,
    )
    tree.pod("b", Memory(700 * MIB), qos=QOSClass.BURSTABLE)


@pytest.mark.parametrize(
    ("active", "dirty", "writeback", "clean"),
    [
        pytest.param(100, 0, 0, 100, id="all-clean"),
        pytest.param(100, 30, 20, 50, id="dirty-and-writeback-out"),
        pytest.param(100, 80, 40, 0, id="more-dirty-than-active"),
        pytest.param(0, 0, 0, 0, id="none"),
    ],
)
def test_clean_active_file(active: int, dirty: int, writeback: int, clean: int) -> None:
    assert clean_active_file(active, dirty, writeback) == clean


def test_node_kubepods_and_pods_report_their_clean_active_file(tree: HostTree) -> None:
    busy_node(tree)
    observations = collect(tree, active_file=True)
    assert observations.active_file == {
        Signal.MEMORY_AVAILABLE: 3 * GIB - 256 * MIB,
        ALLOCATABLE: 2 * GIB - 64 * MIB,
    }
    assert {uid: pod.active_file for uid, pod in observations.pods.items()} == {
        "a": 1436 * MIB,
        "b": 0,
    }


def test_reading_it_changes_no_kubelet_figure(tree: HostTree) -> None:
    busy_node(tree)
    with_active = collect(tree, active_file=True)
    without = collect(tree, active_file=False)
    assert with_active.signals == without.signals
    assert {uid: p.memory for uid, p in with_active.pods.items()} == {
        uid: p.memory for uid, p in without.pods.items()
    }
    # the kubelet's working sets: active file stays in them
    assert {uid: p.memory for uid, p in without.pods.items()} == {"a": 1700 * MIB, "b": 700 * MIB}
    # not asked for, not read
    assert without.active_file == {}
    assert all(pod.active_file is None for pod in without.pods.values())


def test_the_probe_counts_it_as_the_decision_will(tree: HostTree) -> None:
    busy_node(tree)
    for active_file, node_extra, allocatable_extra in (
        (False, 0, 0),
        (True, 3 * GIB - 256 * MIB, 2 * GIB - 64 * MIB),
    ):
        with SignalCollector(host_root=tree.root, active_file=active_file) as collector:
            observations = collector.collect(0.0, PER_SECOND_GROUPS)
            node = observations.value(Signal.MEMORY_AVAILABLE)
            allocatable = observations.value(ALLOCATABLE)
            assert node is not None and allocatable is not None
            node_probe = collector.memory_probe(Signal.MEMORY_AVAILABLE)
            allocatable_probe = collector.memory_probe(ALLOCATABLE)
            assert node_probe is not None and allocatable_probe is not None
            assert node_probe() == node.available + node_extra
            assert allocatable_probe() == allocatable.available + allocatable_extra


def test_meminfo_fallback_reads_active_file_dirty_and_writeback(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    (tree.path("/sys/fs/cgroup") / "cgroup.controllers").unlink()
    tree.proc(
        mem_total=8 * GIB,
        anon=1 * GIB,
        inactive_file=1 * GIB,
        active_file=2 * GIB,
        dirty=16 * MIB,
        writeback=16 * MIB,
    )
    observations = collect(tree, active_file=True)
    assert observations.active_file == {Signal.MEMORY_AVAILABLE: 2 * GIB - 32 * MIB}
    node = observations.value(Signal.MEMORY_AVAILABLE)
    assert isinstance(node, SignalValue)
    assert node.available == 8 * GIB - 3 * GIB  # the kubelet's: active file is used


def test_v2_root_reads_its_memory_stat(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    tree.proc(mem_total=16 * GIB)
    tree.root_memory(Memory(4 * GIB, inactive_file=512 * MIB, active_file=1 * GIB, dirty=1 * MIB))
    observations = collect(tree, active_file=True)
    assert observations.active_file[Signal.MEMORY_AVAILABLE] == 1023 * MIB


def test_a_memory_stat_without_the_key_reports_nothing(tree: HostTree) -> None:
    busy_node(tree)
    stat = tree.memory_dir(tree.kubepods_cgroup) / "memory.stat"
    key = "total_active_file" if tree.version is CgroupVersion.V1 else "active_file"
    stat.write_text(
        "".join(line + "\n" for line in stat.read_text().splitlines() if line.split()[0] != key)
    )
    observations = collect(tree, active_file=True)
    assert ALLOCATABLE not in observations.active_file
    assert Signal.MEMORY_AVAILABLE in observations.active_file
