"""Filesystem signals on real tmpfs mounts with size and inode limits, filled for real.

The readers' bytes and inodes must equal ``os.statvfs`` exactly at every stage, down to
a full filesystem; two mounts make a real dedicated-imagefs and split layout; a tmpfs
mounted as a memory-backed emptyDir is not counted as disk.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from nodeagent.model import FsLayout, PodUID, Signal, SignalValue
from nodeagent.signals.collector import SignalCollector, SignalGroup
from nodeagent.signals.pod_storage import disk_usage
from tests.signals.realkernel import tmpfs

pytestmark = pytest.mark.kernel

FILESYSTEMS = {SignalGroup.FILESYSTEMS}


def assert_matches_statvfs(collector: SignalCollector, mount: Path) -> tuple[int, int]:
    observations = collector.collect(0.0, FILESYSTEMS)
    vfs = os.statvfs(mount)
    available = observations.signals[Signal.NODEFS_AVAILABLE]
    inodes = observations.signals[Signal.NODEFS_INODES_FREE]
    assert available == SignalValue(
        vfs.f_bavail * vfs.f_frsize, vfs.f_blocks * vfs.f_frsize, f"statvfs({mount})"
    )
    assert inodes == SignalValue(vfs.f_ffree, vfs.f_files, f"statvfs({mount})")
    return available.available, inodes.available


def fill_bytes(directory: Path) -> None:
    chunk = b"z" * (256 << 10)
    with open(directory / "filler", "wb") as out:
        while True:
            try:
                out.write(chunk)
                out.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return


def fill_inodes(directory: Path) -> int:
    created = 0
    while True:
        try:
            (directory / f"i{created}").touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            return created
        created += 1


def test_nodefs_bytes_and_inodes_equal_statvfs_down_to_full(tmp_path: Path) -> None:
    with (
        tmpfs(tmp_path / "nodefs", size="8m", nr_inodes=200) as mount,
        SignalCollector(nodefs_path=mount, imagefs_path=mount) as collector,
    ):
        empty_bytes, empty_inodes = assert_matches_statvfs(collector, mount)
        assert empty_bytes == 8 << 20

        (mount / "some").write_bytes(b"a" * (3 << 20))
        some_bytes, _ = assert_matches_statvfs(collector, mount)
        assert some_bytes == empty_bytes - (3 << 20)

        fill_bytes(mount)
        full_bytes, _ = assert_matches_statvfs(collector, mount)
        assert full_bytes == 0

        (mount / "filler").unlink()
        (mount / "some").unlink()
        created = fill_inodes(mount)
        _, full_inodes = assert_matches_statvfs(collector, mount)
        assert full_inodes == 0
        assert created == empty_inodes

        observations = collector.collect(1.0, FILESYSTEMS)
        assert observations.fs_layout is FsLayout.SINGLE
        assert observations.signals[Signal.IMAGEFS_INODES_FREE] == SignalValue(
            0, 200, f"statvfs({mount})"
        )


def test_dedicated_and_split_image_filesystems(tmp_path: Path) -> None:
    with (
        tmpfs(tmp_path / "kubelet", size="8m", nr_inodes=300) as nodefs,
        tmpfs(tmp_path / "images", size="4m", nr_inodes=100) as imagefs,
    ):
        (imagefs / "layer").write_bytes(b"l" * (1 << 20))
        with SignalCollector(nodefs_path=nodefs, imagefs_path=imagefs) as dedicated:
            observations = dedicated.collect(0.0, FILESYSTEMS)
        assert observations.fs_layout is FsLayout.DEDICATED_IMAGEFS
        image = observations.value(Signal.IMAGEFS_AVAILABLE)
        container = observations.value(Signal.CONTAINERFS_AVAILABLE)
        assert image is not None
        assert container is not None
        assert (image.available, image.capacity) == (3 << 20, 4 << 20)
        assert (container.available, container.capacity) == (image.available, image.capacity)

        writable = nodefs / "containers"
        writable.mkdir()
        with SignalCollector(
            nodefs_path=nodefs, imagefs_path=imagefs, containerfs_path=writable
        ) as split:
            observations = split.collect(0.0, FILESYSTEMS)
        assert observations.fs_layout is FsLayout.SPLIT
        node = observations.value(Signal.NODEFS_AVAILABLE)
        container = observations.value(Signal.CONTAINERFS_AVAILABLE)
        assert node is not None
        assert container is not None
        assert container.capacity == node.capacity == 8 << 20


def test_memory_backed_empty_dir_and_mount_points_are_not_disk(tmp_path: Path) -> None:
    uid = "5d2c9c4e-0000-4000-8000-000000000001"
    volumes = tmp_path / "kubelet" / "pods" / uid / "volumes" / "kubernetes.io~empty-dir"
    disk = volumes / "scratch"
    disk.mkdir(parents=True)
    (disk / "data").write_bytes(b"d" * 10_000)
    with tmpfs(volumes / "shm", size="4m", nr_inodes=50) as memory_backed:
        (memory_backed / "big").write_bytes(b"m" * (2 << 20))
        with tmpfs(disk / "mounted", size="1m", nr_inodes=10) as inner:
            (inner / "x").write_bytes(b"x" * 4096)
            with SignalCollector(
                kubelet_root_dir=tmp_path / "kubelet",
                pod_logs_path=tmp_path / "logs",
                pod_storage_scan_interval=60,
            ) as collector:
                scan = collector.refresh_pod_storage(0.0)
            # The scratch volume and the mount point directory itself (an inode of
            # the tmpfs root, on another device): only scratch and data count.
            expected = disk_usage(str(disk))
    usage = scan.pods[PodUID(uid)].local_volumes
    assert usage == expected
    assert usage is not None
    assert usage.bytes < 1 << 20
    assert usage.inodes == 2
