"""imagefs (and containerfs) located through the runtime's CRI ImageFsInfo."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nodeagent.cri.client import FilesystemUsage
from nodeagent.model import FsLayout, Observation, Signal, SignalValue, Unavailable
from nodeagent.signals.filesystems import FilesystemReader, FsPath, RuntimeFilesystems
from tests.doubles.cri import FakeRuntime


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def reader(
    host: Path, runtime: FakeRuntime, clock: Clock
) -> tuple[FilesystemReader, RuntimeFilesystems]:
    located = RuntimeFilesystems(
        runtime.image_fs_info,
        host_root=str(host),
        fallback=FsPath(str(host / "var/lib/containerd"), "/var/lib/containerd"),
        refresh=600.0,
        retry=60.0,
        clock=clock,
    )
    return FilesystemReader(
        nodefs=FsPath(str(host / "var/lib/kubelet"), "/var/lib/kubelet"),
        imagefs=located,
        containerfs=None,
    ), located


def source(signals: Mapping[Signal, Observation], signal: Signal) -> str:
    observed = signals[signal]
    assert isinstance(observed, SignalValue), observed
    return observed.source


def usage(mountpoint: str) -> FilesystemUsage:
    return FilesystemUsage(mountpoint, used_bytes=10, inodes_used=1)


def test_the_runtime_says_where_imagefs_is_below_the_host_root(tmp_path: Path) -> None:
    for directory in ("var/lib/kubelet", "var/lib/containerd", "var/lib/containers/storage"):
        (tmp_path / directory).mkdir(parents=True)
    runtime = FakeRuntime(image_filesystems=(usage("/var/lib/containers/storage"),))
    clock = Clock()
    fs_reader, _ = reader(tmp_path, runtime, clock)
    signals, layout = fs_reader.read()
    assert (
        source(signals, Signal.IMAGEFS_AVAILABLE)
        == "statvfs(/var/lib/containers/storage from CRI ImageFsInfo)"
    )
    assert layout is FsLayout.SINGLE  # all on tmp_path's filesystem
    # Asked once per refresh period, not every read.
    fs_reader.read()
    clock.now = 599.0
    fs_reader.read()
    assert runtime.removed("image_fs_info") == [""]
    clock.now = 600.0
    fs_reader.read()
    assert len(runtime.removed("image_fs_info")) == 2


def test_a_reported_container_filesystem_becomes_containerfs(tmp_path: Path) -> None:
    for directory in ("var/lib/kubelet", "images", "layers"):
        (tmp_path / directory).mkdir(parents=True)
    runtime = FakeRuntime(
        image_filesystems=(usage("/images"),), container_filesystems=(usage("/layers"),)
    )
    signals, _ = reader(tmp_path, runtime, Clock())[0].read()
    assert source(signals, Signal.CONTAINERFS_AVAILABLE) == (
        "statvfs(/layers from CRI ImageFsInfo)"
    )


def test_without_an_answer_the_usual_path_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "var/lib/kubelet").mkdir(parents=True)
    (tmp_path / "var/lib/containerd").mkdir(parents=True)
    runtime = FakeRuntime(failures={"image_fs_info": "UNAVAILABLE: no socket"})
    clock = Clock()
    fs_reader, located = reader(tmp_path, runtime, clock)
    signals, _ = fs_reader.read()
    assert source(signals, Signal.IMAGEFS_AVAILABLE) == (
        "statvfs(/var/lib/containerd; CRI image_fs_info: UNAVAILABLE: no socket)"
    )
    # Retried after the retry period; the answer then stands.
    runtime.failures.clear()
    runtime.image_filesystems = (usage("/var/lib/containerd"),)
    clock.now = 59.0
    fs_reader.read()
    assert located.error == "CRI image_fs_info: UNAVAILABLE: no socket"
    clock.now = 60.0
    signals, _ = fs_reader.read()
    assert not located.error
    assert "from CRI ImageFsInfo" in source(signals, Signal.IMAGEFS_AVAILABLE)


def test_a_missing_fallback_says_why_the_runtime_did_not_answer(tmp_path: Path) -> None:
    (tmp_path / "var/lib/kubelet").mkdir(parents=True)
    runtime = FakeRuntime(failures={"image_fs_info": "UNAVAILABLE: no socket"})
    signals, _ = reader(tmp_path, runtime, Clock())[0].read()
    assert signals[Signal.IMAGEFS_AVAILABLE] == Unavailable(
        f"path {tmp_path}/var/lib/containerd does not exist; "
        "CRI image_fs_info: UNAVAILABLE: no socket"
    )
