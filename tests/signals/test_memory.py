"""memory.available, allocatableMemory.available, swap and pod working sets on fixture
trees of every layout, against values computed by hand from the kubelet's formulas."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.k8s.pods import QOSClass
from nodeagent.model import Observation, PodUID, Signal, SignalValue, Unavailable
from nodeagent.signals.cgroups import CgroupVersion
from nodeagent.signals.collector import SignalCollector, SignalGroup
from tests.doubles.host import GIB, MIB, HostTree, Memory

MEMORY = {SignalGroup.MEMORY}


def memory_signals(tree: HostTree, node_cgroup: str = "/") -> tuple[Observation, Observation]:
    with SignalCollector(host_root=tree.root, node_cgroup=node_cgroup) as collector:
        observations = collector.collect(0.0, MEMORY)
    node = observations.signals[Signal.MEMORY_AVAILABLE]
    allocatable = observations.signals[Signal.ALLOCATABLE_MEMORY_AVAILABLE]
    return node, allocatable


def test_root_working_set_excludes_inactive_file(tree: HostTree) -> None:
    # usage 4 GiB of which 1 GiB inactive page cache: working set 3 GiB of 16 GiB.
    tree.proc(mem_total=16 * GIB)
    tree.root_memory(Memory(4 * GIB, inactive_file=1 * GIB, active_file=512 * MIB))
    node, _ = memory_signals(tree)
    assert isinstance(node, SignalValue)
    assert (node.available, node.capacity) == (13 * GIB, 16 * GIB)
    assert "MemTotal" in node.source


def test_active_file_stays_in_the_working_set(tree: HostTree) -> None:
    # kubernetes#43916: active page cache counts as used, as in the kubelet.
    tree.proc(mem_total=16 * GIB)
    tree.root_memory(Memory(4 * GIB, inactive_file=0, active_file=3 * GIB))
    node, _ = memory_signals(tree)
    assert isinstance(node, SignalValue)
    assert node.available == 12 * GIB


def test_working_set_never_goes_below_zero(tree: HostTree) -> None:
    # memory.stat is flushed lazily: inactive_file can briefly exceed usage.
    tree.proc(mem_total=16 * GIB)
    tree.root_memory(Memory(1 * GIB, inactive_file=1 * GIB))
    root = tree.memory_dir("/")
    if tree.version is CgroupVersion.V1:
        (root / "memory.usage_in_bytes").write_text(f"{512 * MIB}\n")
    node, _ = memory_signals(tree)
    assert isinstance(node, SignalValue)
    assert node.available == node.capacity == 16 * GIB


def test_v2_root_without_memory_stat_falls_back_to_meminfo(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    # AnonPages 2 GiB + Buffers 64 MiB + Cached (1.5 GiB - 64 MiB) = 3.5 GiB used,
    # minus Inactive(file) 1 GiB: working set 2.5 GiB of 16 GiB.
    tree.proc(mem_total=16 * GIB, anon=2 * GIB, inactive_file=1 * GIB, active_file=512 * MIB)
    tree.root_memory(Memory(0), stat=False)
    node, _ = memory_signals(tree)
    assert isinstance(node, SignalValue)
    assert node.available == 16 * GIB - 2560 * MIB
    assert "meminfo" in node.source


def test_no_memory_controller_reads_meminfo(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    (tree.path("/sys/fs/cgroup") / "cgroup.controllers").unlink()
    tree.proc(mem_total=8 * GIB, anon=1 * GIB, inactive_file=1 * GIB, active_file=0)
    node, allocatable = memory_signals(tree)
    # 1 GiB anon + 1 GiB cache - 1 GiB inactive = 1 GiB working set.
    assert isinstance(node, SignalValue)
    assert (node.available, node.capacity) == (7 * GIB, 8 * GIB)
    assert isinstance(allocatable, Unavailable)
    assert "no cgroup memory controller" in allocatable.reason


@pytest.mark.parametrize("key", ["AnonPages", "Cached", "Inactive(file)"])
def test_meminfo_fallback_names_a_missing_field(tmp_path: Path, key: str) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    (tree.path("/sys/fs/cgroup") / "cgroup.controllers").unlink()
    tree.proc()
    meminfo = tree.path("/proc/meminfo")
    lines = meminfo.read_text().splitlines(keepends=True)
    meminfo.write_text("".join(line for line in lines if not line.startswith(f"{key}:")))
    node, _ = memory_signals(tree)
    assert isinstance(node, Unavailable)
    assert node.reason == f"{meminfo} lacks {key}"


@pytest.mark.parametrize(
    ("limit", "expected_capacity"),
    [
        pytest.param(8 * GIB, 8 * GIB, id="limit-is-capacity"),
        pytest.param(64 * GIB, 16 * GIB, id="limit-above-memtotal"),
        pytest.param(None, 16 * GIB, id="unlimited"),
    ],
)
def test_node_cgroup_limit_is_the_capacity(
    tree: HostTree, limit: int | None, expected_capacity: int
) -> None:
    tree.proc(mem_total=16 * GIB)
    tree.cgroup("/guard.slice", Memory(6 * GIB, inactive_file=2 * GIB), limit=limit)
    node, _ = memory_signals(tree, node_cgroup="/guard.slice")
    assert isinstance(node, SignalValue)
    assert node.capacity == expected_capacity
    assert node.available == expected_capacity - 4 * GIB
    assert tree.memory_dir("/guard.slice").as_posix() in node.source


def test_node_cgroup_inherits_its_parents_limit(tree: HostTree) -> None:
    tree.proc(mem_total=16 * GIB)
    tree.cgroup("/parent", Memory(1 * GIB), limit=2 * GIB)
    tree.cgroup("/parent/guard", Memory(1 * GIB, inactive_file=256 * MIB), limit=None)
    node, _ = memory_signals(tree, node_cgroup="/parent/guard")
    assert isinstance(node, SignalValue)
    assert (node.available, node.capacity) == (2 * GIB - 768 * MIB, 2 * GIB)


def test_missing_node_cgroup_is_unavailable_with_the_path(tree: HostTree) -> None:
    node, _ = memory_signals(tree, node_cgroup="/nonexistent.slice")
    assert isinstance(node, Unavailable)
    assert "nonexistent.slice" in node.reason
    assert "No such file" in node.reason


def test_allocatable_from_kubepods(tree: HostTree) -> None:
    tree.kubepods(Memory(5 * GIB, inactive_file=1 * GIB), limit=12 * GIB)
    _, allocatable = memory_signals(tree)
    assert isinstance(allocatable, SignalValue)
    assert (allocatable.available, allocatable.capacity) == (8 * GIB, 12 * GIB)


def test_allocatable_without_limit_is_no_observation(tree: HostTree) -> None:
    tree.kubepods(Memory(5 * GIB), limit=None)
    _, allocatable = memory_signals(tree)
    assert isinstance(allocatable, Unavailable)
    assert "no memory limit" in allocatable.reason


def test_allocatable_without_kubepods_says_what_to_configure(tree: HostTree) -> None:
    _, allocatable = memory_signals(tree)
    assert isinstance(allocatable, Unavailable)
    assert "kubepodsCgroup" in allocatable.reason


def test_swap(tree: HostTree) -> None:
    tree.proc(swap_total=2 * GIB, swap_free=1536 * MIB)
    with SignalCollector(host_root=tree.root) as collector:
        swap = collector.collect(0.0, MEMORY).swap
    assert swap is not None
    assert (swap.available, swap.capacity) == (1536 * MIB, 2 * GIB)


def test_no_swap(tree: HostTree) -> None:
    with SignalCollector(host_root=tree.root) as collector:
        assert collector.collect(0.0, MEMORY).swap is None


def test_pod_working_sets(tree: HostTree) -> None:
    tree.kubepods(Memory(1 * GIB), limit=None)
    tree.pod("a", Memory(300 * MIB, inactive_file=100 * MIB), qos=QOSClass.GUARANTEED, tasks=3)
    tree.pod("b", Memory(200 * MIB, inactive_file=300 * MIB), qos=QOSClass.BEST_EFFORT, tasks=2)
    tree.pod("c", Memory(64 * MIB, active_file=60 * MIB), qos=QOSClass.BURSTABLE, tasks=7)
    with SignalCollector(host_root=tree.root) as collector:
        pods = collector.collect(0.0, {SignalGroup.PODS}).pods
    assert {uid: (pod.memory, pod.processes) for uid, pod in pods.items()} == {
        "a": (200 * MIB, 3),
        "b": (0, 2),
        "c": (64 * MIB, 7),
    }


@pytest.mark.parametrize(
    ("file", "contents", "expected"),
    [
        pytest.param("usage", "lots\n", "an integer", id="usage"),
        pytest.param("limit", "unlimited\n", "bytes or 'max'", id="limit"),
        pytest.param("limit", "", "bytes or 'max'", id="empty-limit"),
    ],
)
def test_malformed_kubepods_file_names_the_file_and_the_format(
    tree: HostTree, file: str, contents: str, expected: str
) -> None:
    tree.kubepods(Memory(1 * GIB), limit=4 * GIB)
    v2 = tree.version is CgroupVersion.V2
    names = {
        "usage": "memory.current" if v2 else "memory.usage_in_bytes",
        "limit": "memory.max" if v2 else "memory.limit_in_bytes",
    }
    path = tree.memory_dir(tree.kubepods_cgroup) / names[file]
    path.write_text(contents)
    node, allocatable = memory_signals(tree)
    assert isinstance(node, SignalValue)
    assert allocatable == Unavailable(
        f"cannot parse {path}: expected {expected}, got {contents.encode()!r}"
    )


def test_malformed_memory_stat_degrades_with_the_path(tree: HostTree) -> None:
    tree.kubepods(Memory(1 * GIB), limit=4 * GIB)
    tree.pod("p", Memory(1 * MIB), tasks=2)
    for cgroup in ("/", tree.kubepods_cgroup, tree.pod_cgroup("p", QOSClass.BURSTABLE)):
        stat = tree.memory_dir(cgroup) / "memory.stat"
        stat.write_text(stat.read_text().replace("inactive_file 0", "inactive_file lots"))
    with SignalCollector(host_root=tree.root) as collector:
        observations = collector.collect(0.0)
    for signal in (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE):
        value = observations.signals[signal]
        assert isinstance(value, Unavailable)
        assert value.reason.startswith("cannot parse ")
        assert "memory.stat" in value.reason
    pod = observations.pods[PodUID("p")]
    assert (pod.memory, pod.processes) == (None, 2)
