"""SignalCollector: a complete, hand-checked collection on every layout; re-reading
groups alone; degrading one signal at a time and saying so once; pods coming and going;
the ephemeral-storage scan on its own interval."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from nodeagent.agent.config import load_config
from nodeagent.base.errors import ConfigError
from nodeagent.k8s.pods import QOSClass
from nodeagent.model import FsLayout, PodUID, PsiLine, Signal, SignalValue, Unavailable
from nodeagent.signals.cgroups import CgroupVersion
from nodeagent.signals.collector import (
    COLLECTED_SIGNALS,
    PER_SECOND_GROUPS,
    SignalCollector,
    SignalGroup,
)
from tests.doubles.host import GIB, MIB, HostTree, Memory, Psi


def populate(tree: HostTree) -> None:
    """A small node: 16 GiB, kubepods limited to 14 GiB, two pods, kubelet dirs."""
    tree.proc(mem_total=16 * GIB, tasks=655, pid_max=32768, threads_max=127655)
    tree.root_memory(Memory(6 * GIB, inactive_file=2 * GIB, active_file=1 * GIB))
    tree.kubepods(Memory(3 * GIB, inactive_file=1 * GIB), limit=14 * GIB)
    tree.pod("g", Memory(1 * GIB, inactive_file=256 * MIB), qos=QOSClass.GUARANTEED, tasks=4)
    tree.pod("b", Memory(512 * MIB), qos=QOSClass.BURSTABLE, tasks=9)
    tree.pressure("memory", Psi(some=(12.5, 6.0, 2.0, 999), full=(3.0, 1.0, 0.5, 111)))
    tree.pressure("io", Psi(some=(1.0, 1.0, 1.0, 5)))
    tree.pressure("cpu", Psi(some=(40.0, 30.0, 20.0, 7), full=None))
    tree.pod_logs("default", "b-0", "b", {"c/0.log": 4096})
    for directory in ("/var/lib/kubelet/pods", "/var/lib/containerd"):
        tree.path(directory).mkdir(parents=True, exist_ok=True)


def test_a_full_collection_on_every_layout(tree: HostTree) -> None:
    populate(tree)
    with SignalCollector(host_root=tree.root) as collector:
        observations = collector.collect(42.0)
        degraded = collector.degraded()
    signals = observations.signals
    assert observations.time == 42.0
    assert list(signals) == list(COLLECTED_SIGNALS)
    assert degraded == {}, degraded

    memory = signals[Signal.MEMORY_AVAILABLE]
    assert isinstance(memory, SignalValue)
    assert (memory.available, memory.capacity) == (12 * GIB, 16 * GIB)
    allocatable = signals[Signal.ALLOCATABLE_MEMORY_AVAILABLE]
    assert isinstance(allocatable, SignalValue)
    assert (allocatable.available, allocatable.capacity) == (12 * GIB, 14 * GIB)
    pids = signals[Signal.PID_AVAILABLE]
    assert isinstance(pids, SignalValue)
    assert (pids.available, pids.capacity) == (32768 - 655, 32768)

    vfs = os.statvfs(tree.root)
    for signal in (Signal.NODEFS_AVAILABLE, Signal.IMAGEFS_AVAILABLE, Signal.CONTAINERFS_AVAILABLE):
        value = signals[signal]
        assert isinstance(value, SignalValue)
        assert value.capacity == vfs.f_blocks * vfs.f_frsize
    inodes = signals[Signal.NODEFS_INODES_FREE]
    assert isinstance(inodes, SignalValue)
    assert inodes.capacity == vfs.f_files
    assert observations.fs_layout is FsLayout.SINGLE

    assert observations.psi["memory"].some == PsiLine(12.5, 6.0, 2.0, 999)
    assert observations.psi["memory"].full == PsiLine(3.0, 1.0, 0.5, 111)
    assert observations.psi["cpu"].full is None
    assert {"node/memory", "node/io", "node/cpu"} <= observations.psi.keys()
    assert {"kubepods/memory", "kubepods/io", "kubepods/cpu"} <= observations.psi.keys()

    pods = observations.pods
    assert set(pods) == {"g", "b"}
    assert (pods[PodUID("g")].memory, pods[PodUID("g")].processes) == (768 * MIB, 4)
    assert (pods[PodUID("b")].memory, pods[PodUID("b")].processes) == (512 * MIB, 9)
    assert pods[PodUID("b")].logs is not None
    assert pods[PodUID("b")].logs_inodes == 3  # pod dir, container dir, 0.log
    assert pods[PodUID("g")].logs is None


def test_re_reading_one_group_keeps_the_others(tree: HostTree) -> None:
    populate(tree)
    with SignalCollector(host_root=tree.root) as collector:
        first = collector.collect(1.0)
        tree.root_memory(Memory(10 * GIB))
        tree.proc(mem_total=16 * GIB, tasks=30000, pid_max=32768)
        second = collector.collect(2.0, {SignalGroup.MEMORY})
        times = collector.read_times()
    assert second.value(Signal.MEMORY_AVAILABLE) != first.value(Signal.MEMORY_AVAILABLE)
    assert second.value(Signal.PID_AVAILABLE) == first.value(Signal.PID_AVAILABLE)
    assert second.pods == first.pods
    assert times[SignalGroup.MEMORY] == 2.0
    assert times[SignalGroup.PIDS] == 1.0


def test_the_first_collection_reads_everything_even_when_asked_for_less(tree: HostTree) -> None:
    populate(tree)
    with SignalCollector(host_root=tree.root) as collector:
        observations = collector.collect(0.0, {SignalGroup.PSI})
    assert all(isinstance(value, SignalValue) for value in observations.signals.values())
    assert observations.pods


def test_a_broken_source_degrades_only_its_signal_and_is_logged_once(
    tree: HostTree, caplog: pytest.LogCaptureFixture
) -> None:
    populate(tree)
    loadavg = tree.path("/proc/loadavg")
    loadavg.write_text("garbage\n")
    caplog.set_level(logging.INFO, logger="nodeagent.signals")
    with SignalCollector(host_root=tree.root) as collector:
        for second in range(3):
            observations = collector.collect(float(second))
        pids = observations.signals[Signal.PID_AVAILABLE]
        assert isinstance(pids, Unavailable)
        assert str(loadavg) in pids.reason
        assert collector.degraded() == {"pid.available": pids.reason}
        others = [
            value for signal, value in observations.signals.items() if signal != "pid.available"
        ]
        assert all(isinstance(value, SignalValue) for value in others)
        warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "pid.available" in warnings[0].getMessage()

        loadavg.write_text("0.1 0.2 0.3 1/100 5\n")
        recovered = collector.collect(3.0)
        assert recovered.value(Signal.PID_AVAILABLE) is not None
        assert collector.degraded() == {}
    assert any("available again" in record.getMessage() for record in caplog.records)


def test_pods_come_and_go(tree: HostTree) -> None:
    populate(tree)
    with SignalCollector(host_root=tree.root) as collector:
        assert set(collector.collect(0.0).pods) == {"g", "b"}
        open_before = collector._reader.open_count
        tree.remove_cgroup(tree.pod_cgroup("g", QOSClass.GUARANTEED))
        tree.pod("new", Memory(1 * MIB), qos=QOSClass.BEST_EFFORT)
        pods = collector.collect(1.0, PER_SECOND_GROUPS).pods
        assert set(pods) == {"b", "new"}
        assert collector.pod_cgroups[PodUID("new")].qos is QOSClass.BEST_EFFORT
        # g's three files closed, new's three opened
        assert collector._reader.open_count == open_before


def test_kubepods_created_after_start_is_found(tree: HostTree) -> None:
    tree.root_memory(Memory(1 * GIB))
    with SignalCollector(host_root=tree.root) as collector:
        collector.collect(0.0)
        assert collector.cgroups.kubepods_cgroup is None
        assert {"pods", "psi/kubepods/memory"} <= collector.degraded().keys()
        tree.kubepods(Memory(0), limit=8 * GIB)
        tree.pressure("memory", Psi(some=(7.0, 0.0, 0.0, 1)), cgroup=tree.kubepods_cgroup)
        tree.pod("late", Memory(2 * MIB), qos=QOSClass.BURSTABLE)
        collector.collect(0.5, {SignalGroup.FILESYSTEMS})
        assert collector.cgroups.kubepods_cgroup is None  # looked for with the pods only
        observations = collector.collect(1.0, PER_SECOND_GROUPS)
        assert collector.cgroups.kubepods_cgroup == tree.kubepods_cgroup
        assert observations.pods[PodUID("late")].memory == 2 * MIB
        assert observations.value(Signal.ALLOCATABLE_MEMORY_AVAILABLE) is not None
        assert observations.psi["kubepods/memory"].some.avg10 == 7.0
        assert not {"pods", "psi/kubepods/memory"} & collector.degraded().keys()


def test_pod_storage_is_scanned_on_its_own_interval(tree: HostTree) -> None:
    populate(tree)
    log_dir = tree.pod_logs("default", "b-0", "b", {"c/0.log": 4096})
    with SignalCollector(host_root=tree.root, pod_storage_scan_interval=30) as collector:
        first = collector.collect(0.0).pods[PodUID("b")].logs
        (log_dir / "c" / "1.log").write_bytes(b"x" * 100_000)
        assert collector.collect(10.0).pods[PodUID("b")].logs == first
        scan = collector.last_storage_scan
        assert scan is not None
        assert scan.time == 0.0
        assert collector.read_times()[SignalGroup.POD_STORAGE] == 0.0
        assert collector.read_times()[SignalGroup.PODS] == 10.0
        later = collector.collect(31.0).pods[PodUID("b")].logs
    assert first is not None
    assert later is not None
    assert later > first


def test_a_scan_refreshed_elsewhere_shows_up_in_the_next_collection(tree: HostTree) -> None:
    populate(tree)
    log_dir = tree.pod_logs("default", "b-0", "b", {"c/0.log": 4096})
    with SignalCollector(host_root=tree.root, pod_storage_scan_interval=3600) as collector:
        first = collector.collect(0.0).pods[PodUID("b")].logs_inodes
        (log_dir / "c" / "1.log").write_bytes(b"x")
        collector.refresh_pod_storage(1.0)  # as a background thread would
        second = collector.collect(2.0, {SignalGroup.MEMORY}).pods[PodUID("b")].logs_inodes
    assert (first, second) == (3, 4)


def test_interval_zero_disables_the_scan(tree: HostTree) -> None:
    populate(tree)
    with SignalCollector(host_root=tree.root, pod_storage_scan_interval=0) as collector:
        pods = collector.collect(0.0).pods
        assert collector.last_storage_scan is None
    assert pods[PodUID("b")].logs is None


def test_pure_v1_has_no_node_pressure_files(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V1, hybrid=False)
    populate(tree)
    with SignalCollector(host_root=tree.root) as collector:
        observations = collector.collect(0.0)
        degraded = collector.degraded()
    assert {"memory", "io", "cpu"} == set(observations.psi)
    assert "no cgroup2 hierarchy" in degraded["psi/node/memory"]
    assert "no cgroup2 hierarchy" in degraded["psi/kubepods/cpu"]


def test_from_settings(tree: HostTree) -> None:
    populate(tree)
    tree.cgroup("/guard", Memory(1 * GIB), limit=4 * GIB)
    config = load_config(
        overrides={
            "host_root": str(tree.root),
            "node_cgroup": "guard",
            "pod_storage_scan_interval": "1m",
        },
        environ={},
    )
    with SignalCollector.from_settings(config) as collector:
        observations = collector.collect(0.0)
        assert collector.cgroups.node_cgroup == "/guard"
    memory = observations.value(Signal.MEMORY_AVAILABLE)
    assert memory is not None
    assert memory.capacity == 4 * GIB


def test_missing_host_root_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="hostRoot"):
        SignalCollector(host_root=tmp_path / "absent")


def test_an_unlistable_qos_parent_degrades_pods_naming_it(
    tree: HostTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(tree)
    burstable = str(tree.memory_dir(tree.pod_cgroup("x", QOSClass.BURSTABLE)).parent)
    listdir = os.listdir

    def refuse_burstable(path: str) -> list[str]:
        if path == burstable:
            raise PermissionError(13, "Permission denied", path)
        return listdir(path)

    monkeypatch.setattr(os, "listdir", refuse_burstable)
    with SignalCollector(host_root=tree.root) as collector:
        observations = collector.collect(0.0, PER_SECOND_GROUPS)
        assert collector.degraded()["pods"] == f"cannot list {burstable}: Permission denied"
    assert observations.pods == {}
    assert observations.value(Signal.MEMORY_AVAILABLE) is not None


def test_signals_carried_over_keep_the_time_they_were_read(tree: HostTree) -> None:
    tree.root_memory(Memory(1 * GIB))
    with SignalCollector(host_root=tree.root) as collector:
        everything = collector.collect(1.0)
        assert everything.sampled_at == {} and everything.psi_sampled_at is None
        filesystems = collector.collect(1.5, {SignalGroup.FILESYSTEMS})
        assert filesystems.sampled_at[Signal.MEMORY_AVAILABLE] == 1.0
        assert filesystems.sampled_at[Signal.PID_AVAILABLE] == 1.0
        assert Signal.NODEFS_AVAILABLE not in filesystems.sampled_at
        assert filesystems.psi_sampled_at == 1.0


def test_a_resized_pod_is_read_from_the_same_cgroup(tree: HostTree) -> None:
    """In-place resize (KEP-1287): the kubelet rewrites the pod cgroup's limits in place
    (the QoS class, hence the parent, never changes). Nothing about the pod is cached
    from its limits: the next collection reads the same files, usage past the old limit
    included, and no pod is reported gone and back."""
    populate(tree)
    with SignalCollector(host_root=tree.root) as collector:
        assert collector.collect(0.0).pods[PodUID("b")].memory == 512 * MIB
        cgroups = collector.pod_cgroups
        open_before = collector._reader.open_count
        tree.cgroup(tree.pod_cgroup("b", QOSClass.BURSTABLE), Memory(1536 * MIB), limit=2 * GIB)
        pods = collector.collect(1.0, PER_SECOND_GROUPS).pods
        assert pods[PodUID("b")].memory == 1536 * MIB
        assert collector.pod_cgroups[PodUID("b")] == cgroups[PodUID("b")]
        assert collector._reader.open_count == open_before  # the same files, still open
