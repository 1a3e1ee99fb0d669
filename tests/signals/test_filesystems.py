"""nodefs, imagefs and containerfs from statvfs, and the kubelet's three layouts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.model import FsLayout, Signal, SignalValue, Unavailable
from nodeagent.signals import filesystems
from nodeagent.signals.filesystems import FilesystemReader, FsPath, FsStat, detect_layout


def fs(device: int) -> FsStat:
    return FsStat(device=device, bytes=SignalValue(1, 2), inodes=SignalValue(3, 4))


MISSING = Unavailable("path /x does not exist")


@pytest.mark.parametrize(
    ("nodefs", "imagefs", "containerfs", "expected"),
    [
        pytest.param(fs(1), fs(1), None, FsLayout.SINGLE, id="single"),
        pytest.param(fs(1), fs(2), None, FsLayout.DEDICATED_IMAGEFS, id="dedicated"),
        pytest.param(fs(1), fs(2), fs(2), FsLayout.DEDICATED_IMAGEFS, id="dedicated-explicit"),
        pytest.param(fs(1), fs(2), fs(1), FsLayout.SPLIT, id="split"),
        pytest.param(fs(1), fs(1), fs(1), FsLayout.SINGLE, id="single-explicit"),
        pytest.param(fs(1), MISSING, None, FsLayout.SINGLE, id="no-imagefs"),
        pytest.param(MISSING, fs(2), None, FsLayout.SINGLE, id="no-nodefs"),
    ],
)
def test_detect_layout(
    nodefs: FsStat | Unavailable,
    imagefs: FsStat | Unavailable,
    containerfs: FsStat | Unavailable | None,
    expected: FsLayout,
) -> None:
    assert detect_layout(nodefs, imagefs, containerfs) is expected


def test_values_are_statvfs_exactly(tmp_path: Path) -> None:
    stat = filesystems.stat_filesystem(str(tmp_path), "/var/lib/kubelet")
    vfs = os.statvfs(tmp_path)
    assert isinstance(stat, FsStat)
    assert stat.bytes.available == vfs.f_bavail * vfs.f_frsize
    assert stat.bytes.capacity == vfs.f_blocks * vfs.f_frsize
    assert stat.inodes == SignalValue(vfs.f_ffree, vfs.f_files, "statvfs(/var/lib/kubelet)")
    assert stat.device == os.stat(tmp_path).st_dev


def test_missing_path_names_it(tmp_path: Path) -> None:
    stat = filesystems.stat_filesystem(str(tmp_path / "var/lib/kubelet"), "/var/lib/kubelet")
    assert stat == Unavailable(f"path {tmp_path}/var/lib/kubelet does not exist")


def test_filesystem_without_inode_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.statvfs(tmp_path)
    fields = [real.f_bsize, real.f_frsize, real.f_blocks, real.f_bfree, real.f_bavail, 0, 0, 0]
    fields += [real.f_flag, real.f_namemax]
    monkeypatch.setattr(os, "statvfs", lambda path: os.statvfs_result(fields))
    stat = filesystems.stat_filesystem(str(tmp_path), "/btrfs")
    assert isinstance(stat, FsStat)
    assert isinstance(stat.inodes, Unavailable)
    assert "no inode counts" in stat.inodes.reason
    assert stat.bytes.capacity == real.f_blocks * real.f_frsize


def test_single_filesystem_copies_nodefs_into_containerfs(tmp_path: Path) -> None:
    (tmp_path / "kubelet").mkdir()
    (tmp_path / "containerd").mkdir()
    reader = FilesystemReader(
        nodefs=FsPath(str(tmp_path / "kubelet"), "/var/lib/kubelet"),
        imagefs=FsPath(str(tmp_path / "containerd"), "/var/lib/containerd"),
        containerfs=None,
    )
    signals, layout = reader.read()
    assert layout is FsLayout.SINGLE
    nodefs = signals[Signal.NODEFS_AVAILABLE]
    containerfs = signals[Signal.CONTAINERFS_AVAILABLE]
    assert isinstance(nodefs, SignalValue)
    assert isinstance(containerfs, SignalValue)
    assert containerfs.capacity == nodefs.capacity
    assert "containerfs = nodefs" in containerfs.source
    assert set(signals) == {
        Signal.NODEFS_AVAILABLE,
        Signal.NODEFS_INODES_FREE,
        Signal.IMAGEFS_AVAILABLE,
        Signal.IMAGEFS_INODES_FREE,
        Signal.CONTAINERFS_AVAILABLE,
        Signal.CONTAINERFS_INODES_FREE,
    }


def test_missing_imagefs_degrades_only_imagefs(tmp_path: Path) -> None:
    reader = FilesystemReader(
        nodefs=FsPath(str(tmp_path), "/var/lib/kubelet"),
        imagefs=FsPath(str(tmp_path / "nope"), "/var/lib/containerd"),
        containerfs=None,
    )
    signals, _ = reader.read()
    assert isinstance(signals[Signal.NODEFS_AVAILABLE], SignalValue)
    assert isinstance(signals[Signal.CONTAINERFS_INODES_FREE], SignalValue)
    assert signals[Signal.IMAGEFS_AVAILABLE] == Unavailable(f"path {tmp_path}/nope does not exist")
    assert signals[Signal.IMAGEFS_INODES_FREE] == signals[Signal.IMAGEFS_AVAILABLE]
