"""pid.available and per-pod task counts, with and without a pids hierarchy."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.base.errors import SignalReadError
from nodeagent.k8s.pods import QOSClass
from nodeagent.model import PodUID, SignalValue
from nodeagent.signals.cgroups import CgroupVersion, PodCgroupIndex, detect_cgroups
from nodeagent.signals.files import FileReader
from nodeagent.signals.pids import PidReader, PodTasks
from tests.doubles.host import HostTree, Memory


@pytest.mark.parametrize(
    ("pid_max", "threads_max", "tasks", "expected"),
    [
        pytest.param(32768, 192730, 99, SignalValue(32669, 32768), id="pid_max-binds"),
        pytest.param(4194304, 127655, 655, SignalValue(127000, 127655), id="threads-max-binds"),
        pytest.param(4194304, 4194304, 70000, SignalValue(4124304, 4194304), id="above-65535"),
    ],
)
def test_pid_available(
    tmp_path: Path, pid_max: int, threads_max: int, tasks: int, expected: SignalValue
) -> None:
    tree = HostTree(tmp_path)
    tree.proc(pid_max=pid_max, threads_max=threads_max, tasks=tasks)
    reader = PidReader(proc_dir=str(tree.path("/proc")), version=CgroupVersion.V2)
    value = reader.node(FileReader())
    assert (value.available, value.capacity) == (expected.available, expected.capacity)


def test_unparsable_limit_names_the_problem(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.proc()
    tree.path("/proc/sys/kernel/threads-max").write_text("many\n")
    reader = PidReader(proc_dir=str(tree.path("/proc")), version=CgroupVersion.V2)
    with pytest.raises(SignalReadError, match="pid limits"):
        reader.node(FileReader())


@pytest.mark.parametrize(
    "version",
    [
        pytest.param(CgroupVersion.V1, id="v1-tasks"),
        pytest.param(CgroupVersion.V2, id="v2-threads"),
    ],
)
def test_tasks_are_counted_without_a_pids_controller(
    tmp_path: Path, version: CgroupVersion
) -> None:
    tree = HostTree(tmp_path, version=version, pids_hierarchy=False)
    tree.kubepods(Memory(0), limit=None)
    cgroup = tree.pod("p", Memory(1), qos=QOSClass.BURSTABLE, tasks=2)
    # Two containers below the pod: one process of 3 threads, two of 2 each.
    tasks_file = "tasks" if version is CgroupVersion.V1 else "cgroup.threads"
    for name, count, processes in (("c1", 3, 1), ("c2", 4, 2)):
        child = tree.memory_dir(f"{cgroup}/{name}")
        child.mkdir()
        (child / tasks_file).write_text("".join(f"{n}\n" for n in range(count)))
        (child / "cgroup.procs").write_text("".join(f"{n}\n" for n in range(processes)))
    if version is CgroupVersion.V2:
        (tree.memory_dir(cgroup) / "pids.current").unlink()  # pids not enabled in the subtree
    index = PodCgroupIndex(detect_cgroups(str(tree.path("/sys/fs/cgroup"))))
    index.refresh()
    reader = PidReader(proc_dir=str(tree.path("/proc")), version=version)
    assert reader.pod_tasks(FileReader(), index.pods[PodUID("p")]) == PodTasks(
        processes=2 + 1 + 2, threads=2 + 3 + 4
    )


def test_processes_are_recounted_only_when_threads_move(tmp_path: Path) -> None:
    """With pids.current the thread count is one read; the walk over the containers'
    cgroup.procs happens only when that count changed since the last one."""
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    tree.kubepods(Memory(0), limit=None)
    cgroup = tree.pod("p", Memory(1), tasks=0, containers={"c1": 41, "c2": 42})
    pids_current = tree.memory_dir(cgroup) / "pids.current"
    pids_current.write_text("5\n")
    index = PodCgroupIndex(detect_cgroups(str(tree.path("/sys/fs/cgroup"))))
    index.refresh()
    reader, files = (
        PidReader(proc_dir=str(tree.path("/proc")), version=CgroupVersion.V2),
        FileReader(),
    )
    pod = index.pods[PodUID("p")]
    first = reader.pod_tasks(files, pod)
    assert first == PodTasks(processes=2, threads=5)
    (tree.memory_dir(f"{cgroup}/cri-containerd-c1.scope") / "cgroup.procs").write_text("41\n43\n")
    assert reader.pod_tasks(files, pod, first) is first  # threads still 5: no walk
    pids_current.write_text("6\n")
    assert reader.pod_tasks(files, pod, first) == PodTasks(processes=3, threads=6)
