"""``nodefs.*``, ``imagefs.*`` and ``containerfs.*`` from ``statvfs``, and the fs layout.

As the kubelet does: available bytes are the blocks free to unprivileged users
(``f_bavail``, not ``f_bfree``), capacity is ``f_blocks``, inodes free ``f_ffree`` out of
``f_files``. Blocks are counted in ``f_frsize`` units, the POSIX unit of ``f_blocks``, as
cAdvisor's ``getVfsStats`` counts them for the kubelet.

The layout follows from the devices the configured paths live on:

* imagefs on the nodefs device: **single** filesystem; containerfs = nodefs.
* imagefs elsewhere: **dedicated imagefs**, containerfs = imagefs, unless a
  ``containerfsPath`` on the nodefs device says writable layers stayed behind:
  **split** image filesystem, containerfs = nodefs.

A path that does not exist (no kubelet on this machine yet) makes its signals
unavailable with that reason: the kubelet would have no observation either, and an
operator learns exactly which path to configure.

Where no ``imagefsPath`` is configured, the container runtime says where its image
filesystem is (CRI ``ImageFsInfo``, :class:`RuntimeFilesystems`), and, for runtimes that
keep writable layers apart (CRI-O's split image filesystem), its container filesystem:
the kubelet's CRI stats provider finds imagefs the same way, then takes capacity and
available from the filesystem of that mountpoint, as here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from nodeagent.cri.client import CRIError, ImageFsInfo
from nodeagent.model import FsLayout, Observation, Signal, SignalValue, Unavailable


@dataclass(frozen=True, slots=True)
class FsStat:
    """What one ``statvfs`` (and ``stat`` for the device) said about a path."""

    device: int
    bytes: SignalValue
    inodes: Observation


def stat_filesystem(path: str, label: str) -> FsStat | Unavailable:
    """``statvfs`` of ``path``; ``label`` names it in the ``source`` of the values."""
    try:
        device = os.stat(path).st_dev
        vfs = os.statvfs(path)
    except FileNotFoundError:
        return Unavailable(f"path {path} does not exist")
    except OSError as exc:
        return Unavailable(f"cannot statvfs {path}: {exc.strerror or exc}")
    source = f"statvfs({label})"
    inodes: Observation
    if vfs.f_files > 0:
        inodes = SignalValue(available=vfs.f_ffree, capacity=vfs.f_files, source=source)
    else:
        # btrfs and some network filesystems do not count inodes.
        inodes = Unavailable(f"{path}: the filesystem reports no inode counts")
    return FsStat(
        device=device,
        bytes=SignalValue(
            available=vfs.f_bavail * vfs.f_frsize,
            capacity=vfs.f_blocks * vfs.f_frsize,
            source=source,
        ),
        inodes=inodes,
    )


def detect_layout(
    nodefs: FsStat | Unavailable,
    imagefs: FsStat | Unavailable,
    containerfs: FsStat | Unavailable | None,
) -> FsLayout:
    """The kubelet's three layouts, from the devices of the configured paths."""
    if not isinstance(nodefs, FsStat) or not isinstance(imagefs, FsStat):
        return FsLayout.SINGLE
    if imagefs.device == nodefs.device:
        return FsLayout.SINGLE
    if isinstance(containerfs, FsStat) and containerfs.device == nodefs.device:
        return FsLayout.SPLIT
    return FsLayout.DEDICATED_IMAGEFS


def _relabel(stat: FsStat | Unavailable, note: str) -> FsStat | Unavailable:
    if isinstance(stat, Unavailable):
        return Unavailable(f"{stat.reason} {note}")
    inodes = stat.inodes
    return FsStat(
        device=stat.device,
        bytes=SignalValue(stat.bytes.available, stat.bytes.capacity, f"{stat.bytes.source} {note}"),
        inodes=(
            SignalValue(inodes.available, inodes.capacity, f"{inodes.source} {note}")
            if isinstance(inodes, SignalValue)
            else inodes
        ),
    )


@dataclass(frozen=True, slots=True)
class FsPath:
    """A configured path: where this process finds it (below the host root), and how
    the operator wrote it (for sources and messages)."""

    path: str
    label: str


class RuntimeFilesystems:
    """The image (and container) filesystem as the container runtime reports it.

    ``ImageFsInfo`` is asked at most every ``refresh`` seconds (the mountpoints move only
    when the runtime is reconfigured), or ``retry`` seconds after it failed; meanwhile
    the last answer stands. While the runtime has never answered, ``fallback`` (the
    usual containerd path) is used, its source saying why."""

    def __init__(
        self,
        image_fs_info: Callable[[], ImageFsInfo],
        *,
        host_root: str,
        fallback: FsPath,
        refresh: float = 600.0,
        retry: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ask = image_fs_info
        self._host_root = host_root.rstrip("/")
        self._fallback = fallback
        self._refresh = refresh
        self._retry = retry
        self._clock = clock
        self._next = float("-inf")
        self._located: tuple[FsPath, FsPath | None] | None = None
        self.error: str | None = None

    def locate(self) -> tuple[FsPath, FsPath | None]:
        """(image filesystem, container filesystem if the runtime reports one)."""
        now = self._clock()
        if now >= self._next:
            try:
                info = self._ask()
            except CRIError as exc:
                self.error = str(exc)
                self._next = now + self._retry
            else:
                self.error = None
                self._next = now + self._refresh
                self._located = self._paths(info) or self._located
        if self._located is not None:
            return self._located
        reason = self.error or "CRI ImageFsInfo reported no image filesystem"
        return FsPath(self._fallback.path, f"{self._fallback.label}; {reason}"), None

    def _paths(self, info: ImageFsInfo) -> tuple[FsPath, FsPath | None] | None:
        def located(mountpoint: str) -> FsPath:
            return FsPath(
                self._host_root + "/" + mountpoint.lstrip("/"), f"{mountpoint} from CRI ImageFsInfo"
            )

        images = [fs.mountpoint for fs in info.image_filesystems if fs.mountpoint]
        if not images:
            return None
        layers = [fs.mountpoint for fs in info.container_filesystems if fs.mountpoint]
        return located(images[0]), located(layers[0]) if layers else None


class FilesystemReader:
    """Reads the six filesystem signals from the configured paths, or from where the
    container runtime says its filesystems are."""

    def __init__(
        self,
        *,
        nodefs: FsPath,
        imagefs: FsPath | RuntimeFilesystems,
        containerfs: FsPath | None,
    ) -> None:
        self._nodefs = nodefs
        self._imagefs = imagefs
        self._containerfs = containerfs

    def read(self) -> tuple[dict[Signal, Observation], FsLayout]:
        nodefs = stat_filesystem(self._nodefs.path, self._nodefs.label)
        imagefs_path, containerfs_path = self._imagefs, self._containerfs
        runtime_error = None
        if isinstance(imagefs_path, RuntimeFilesystems):
            runtime = imagefs_path
            imagefs_path, reported = runtime.locate()
            runtime_error = runtime.error
            containerfs_path = containerfs_path or reported
        imagefs = stat_filesystem(imagefs_path.path, imagefs_path.label)
        if isinstance(imagefs, Unavailable) and runtime_error:
            imagefs = Unavailable(f"{imagefs.reason}; {runtime_error}")
        configured = (
            None
            if containerfs_path is None
            else stat_filesystem(containerfs_path.path, containerfs_path.label)
        )
        layout = detect_layout(nodefs, imagefs, configured)
        if configured is not None:
            containerfs = configured
        elif layout is FsLayout.DEDICATED_IMAGEFS:
            containerfs = _relabel(imagefs, "(containerfs = imagefs: dedicated imagefs)")
        else:
            containerfs = _relabel(nodefs, "(containerfs = nodefs: single filesystem)")
        signals: dict[Signal, Observation] = {}
        for stat, available, inodes_free in (
            (nodefs, Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE),
            (imagefs, Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE),
            (containerfs, Signal.CONTAINERFS_AVAILABLE, Signal.CONTAINERFS_INODES_FREE),
        ):
            if isinstance(stat, Unavailable):
                signals[available] = stat
                signals[inodes_free] = stat
            else:
                signals[available] = stat.bytes
                signals[inodes_free] = stat.inodes
        return signals, layout
