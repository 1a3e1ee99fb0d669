"""Per-pod ephemeral storage: logs, disk-backed emptyDir volumes, writable layers.

These are directory walks, thousands of ``lstat`` calls where the rest of a collection
makes a few hundred reads, so they run on their own interval (``podStorageScanInterval``)
and the per-second collection reuses the last scan. Like the kubelet's ``du``-based
volume metrics, a walk counts ``st_blocks`` (space actually allocated) once per inode,
never crosses into another filesystem, and counts every entry, the top directory
included, as one inode.

Where each part is found, without asking the API server:

* **logs**: ``<podLogsPath>/<namespace>_<name>_<uid>/`` (the kubelet's layout), one
  subdirectory per container name holding every restart's files.
* **local volumes**: ``<kubeletRootDir>/pods/<uid>/volumes/kubernetes.io~empty-dir/*``,
  one directory per volume name. A memory-backed emptyDir is a tmpfs mount, on another
  device than the directory holding it: its usage is memory (already in the pod's
  working set), so it is left out of the pod's local-volume total but still measured by
  name, as the kubelet checks it against its ``sizeLimit``. hostPath volumes are not
  attributed: which host paths a pod mounts is only in its spec.
* **writable layers**: the root of a container is an overlay mount whose ``upperdir``
  is the layer on the host. We take one process of each container cgroup and read its
  ``/proc/<pid>/mountinfo``. That needs the host's PID namespace (``hostPID`` in a
  DaemonSet; always true on bare metal): from another namespace the kernel shows no
  PIDs in ``cgroup.procs``, and the layers are reported unreachable. The same file
  names the container: the kubelet bind-mounts its termination-message file from
  ``<kubeletRootDir>/pods/<uid>/containers/<name>/``. A layer whose container cannot
  be named still counts in the pod's total.

Per container (by name) the scan keeps its writable layer and logs, and per emptyDir
volume (by name) its usage: what the local-storage limit checks compare with the
containers' ``ephemeral-storage`` limits and the volumes' ``sizeLimit``.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypedDict

from nodeagent.model import ContainerUsage, PodUID
from nodeagent.signals import parse
from nodeagent.signals.cgroups import PodCgroup
from nodeagent.signals.files import read_once

EMPTY_DIR_PLUGIN = "kubernetes.io~empty-dir"


@dataclass(frozen=True, slots=True)
class DiskUsage:
    bytes: int
    inodes: int

    def __add__(self, other: DiskUsage) -> DiskUsage:
        return DiskUsage(self.bytes + other.bytes, self.inodes + other.inodes)


NO_USAGE = DiskUsage(0, 0)


def disk_usage(path: str) -> DiskUsage:
    """Space and inodes used under ``path`` (``du -x`` semantics, hard links once).

    Entries that vanish or cannot be read during the walk are skipped: a pod writing
    logs while we walk is normal. Raises :class:`OSError` only if ``path`` itself
    cannot be examined.
    """
    top = os.lstat(path)
    device = top.st_dev
    used = top.st_blocks * 512
    inodes = 1
    linked: set[int] = set()
    pending = [path] if stat.S_ISDIR(top.st_mode) else []
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_dev != device:
                    continue  # a mount point: another filesystem's usage
                if stat.S_ISDIR(info.st_mode):
                    pending.append(entry.path)
                elif info.st_nlink > 1:
                    if info.st_ino in linked:
                        continue
                    linked.add(info.st_ino)
                used += info.st_blocks * 512
                inodes += 1
    return DiskUsage(used, inodes)


def disk_usage_by_child(path: str) -> tuple[DiskUsage, dict[str, DiskUsage]]:
    """:func:`disk_usage` of ``path``, and of each directory directly below it by name
    (the directory's own entry and any plain file in it count in the total only)."""
    top = os.lstat(path)
    total = DiskUsage(top.st_blocks * 512, 1)
    children: dict[str, DiskUsage] = {}
    try:
        entries = os.scandir(path)
    except OSError:
        return total, children
    with entries:
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
                if info.st_dev != top.st_dev:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    usage = disk_usage(entry.path)
                    children[entry.name] = usage
                else:
                    usage = DiskUsage(info.st_blocks * 512, 1)
            except OSError:
                continue
            total += usage
    return total, children


_NO_CONTAINERS: Mapping[str, ContainerUsage] = MappingProxyType({})
_NO_VOLUMES: Mapping[str, int] = MappingProxyType({})


class StorageFields(TypedDict):
    """The storage fields of :class:`~nodeagent.model.PodUsage`, as keywords."""

    rootfs: int | None
    rootfs_inodes: int | None
    logs: int | None
    logs_inodes: int | None
    local_volumes: int | None
    local_volumes_inodes: int | None
    containers: Mapping[str, ContainerUsage]
    volumes: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class PodStorage:
    """One pod's ephemeral storage; ``None`` where the part could not be found."""

    rootfs: DiskUsage | None = None
    logs: DiskUsage | None = None
    local_volumes: DiskUsage | None = None
    """Disk-backed emptyDir volumes only."""
    containers: Mapping[str, ContainerUsage] = field(default_factory=lambda: _NO_CONTAINERS)
    """Writable layer and logs per container name, where the name is known."""
    volumes: Mapping[str, int] = field(default_factory=lambda: _NO_VOLUMES)
    """Bytes per emptyDir volume name, memory-backed ones included."""

    def usage_fields(self) -> StorageFields:
        rootfs, logs, volumes = self.rootfs, self.logs, self.local_volumes
        return {
            "rootfs": None if rootfs is None else rootfs.bytes,
            "rootfs_inodes": None if rootfs is None else rootfs.inodes,
            "logs": None if logs is None else logs.bytes,
            "logs_inodes": None if logs is None else logs.inodes,
            "local_volumes": None if volumes is None else volumes.bytes,
            "local_volumes_inodes": None if volumes is None else volumes.inodes,
            "containers": self.containers,
            "volumes": self.volumes,
        }


NO_STORAGE_FIELDS: StorageFields = PodStorage().usage_fields()
"""A pod no scan has seen yet: no storage stats."""


@dataclass(frozen=True, slots=True)
class StorageScan:
    """The result of one scan: usage by pod, what could not be read, and its cost."""

    time: float
    pods: Mapping[PodUID, PodStorage]
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Reason by part (``logs``, ``local-volumes``, ``rootfs``) when a whole part is
    unreachable."""
    seconds: float = 0.0
    """Wall time the scan took."""


class PodStorageScanner:
    """Walks the pods' logs, emptyDir volumes and writable layers.

    Paths are as this process sees them (below the host root). Safe to run in another
    thread than the collection: it reads only its own files.
    """

    def __init__(
        self,
        *,
        host_root: str,
        proc_dir: str,
        kubelet_root_dir: str,
        pod_logs_dir: str,
    ) -> None:
        self._host_root = host_root.rstrip("/")
        self._proc_dir = proc_dir
        self._pods_dir = os.path.join(kubelet_root_dir, "pods")
        self._logs_dir = pod_logs_dir

    def scan(self, pods: Mapping[PodUID, PodCgroup], *, now: float) -> StorageScan:
        started = time.perf_counter()
        unavailable: dict[str, str] = {}
        logs = self._logs(unavailable)
        volumes = self._local_volumes(unavailable)
        rootfs = self._writable_layers(pods, unavailable)
        storage = {
            uid: _pod_storage(logs.get(uid), volumes.get(uid), rootfs.get(uid))
            for uid in logs.keys() | volumes.keys() | rootfs.keys()
        }
        return StorageScan(
            time=now,
            pods=storage,
            unavailable=unavailable,
            seconds=time.perf_counter() - started,
        )

    def _logs(self, unavailable: dict[str, str]) -> dict[PodUID, _ByName]:
        """Per pod, its log directory's usage and each container's (subdirectory's)."""
        try:
            names = os.listdir(self._logs_dir)
        except OSError as exc:
            unavailable["logs"] = f"cannot list {self._logs_dir}: {exc.strerror or exc}"
            return {}
        usage: dict[PodUID, _ByName] = {}
        for name in names:
            uid = parse.pod_uid_from_log_dir(name)
            if uid is None:
                continue
            try:
                usage[PodUID(uid)] = disk_usage_by_child(os.path.join(self._logs_dir, name))
            except OSError:
                continue  # the pod's logs were removed while we listed them
        return usage

    def _local_volumes(self, unavailable: dict[str, str]) -> dict[PodUID, _ByName]:
        """Per pod, the usage of its disk-backed emptyDir volumes, and each volume's by
        name (memory-backed ones too)."""
        try:
            uids = os.listdir(self._pods_dir)
        except OSError as exc:
            unavailable["local-volumes"] = f"cannot list {self._pods_dir}: {exc.strerror or exc}"
            return {}
        usage: dict[PodUID, _ByName] = {}
        for uid in uids:
            volumes = os.path.join(self._pods_dir, uid, "volumes", EMPTY_DIR_PLUGIN)
            total = NO_USAGE
            by_name: dict[str, DiskUsage] = {}
            try:
                parent_device = os.stat(volumes).st_dev
                names = os.listdir(volumes)
            except OSError:
                usage[PodUID(uid)] = (total, by_name)  # no emptyDir volume
                continue
            for name in names:
                volume = os.path.join(volumes, name)
                try:
                    memory_backed = os.lstat(volume).st_dev != parent_device
                    by_name[name] = disk_usage(volume)
                except OSError:
                    continue
                if not memory_backed:  # tmpfs usage is memory, not disk
                    total += by_name[name]
            usage[PodUID(uid)] = (total, by_name)
        return usage

    def _writable_layers(
        self, pods: Mapping[PodUID, PodCgroup], unavailable: dict[str, str]
    ) -> dict[PodUID, _ByName]:
        """Per pod, its containers' writable layers, and each one's by container name."""
        usage: dict[PodUID, _ByName] = {}
        containers_seen = 0
        for uid, pod in pods.items():
            total: DiskUsage | None = None
            by_name: dict[str, DiskUsage] = {}
            for container_dir in _child_dirs(pod.memory_dir):
                containers_seen += 1
                root = self._container_root(container_dir, uid)
                if root is None:
                    continue
                upper, name = root
                try:
                    layer = disk_usage(self._host_root + upper)
                except OSError:
                    continue
                total = layer if total is None else total + layer
                if name is not None:
                    by_name[name] = layer
            if total is not None:
                usage[uid] = (total, by_name)
        if containers_seen and not usage:
            unavailable["rootfs"] = (
                "no container's root filesystem was reachable: their processes are not "
                f"visible in {self._proc_dir} (run in the host PID namespace) or they do "
                "not run on overlay"
            )
        return usage

    def _container_root(self, container_dir: str, uid: PodUID) -> tuple[str, str | None] | None:
        """The writable layer of the container whose cgroup is ``container_dir``, and the
        container's name when its mounts tell it."""
        try:
            procs = read_once(os.path.join(container_dir, "cgroup.procs")).split()
        except OSError:
            return None
        for pid in procs:
            if pid == b"0":
                continue  # a process outside our PID namespace
            try:
                mountinfo = read_once(f"{self._proc_dir}/{int(pid)}/mountinfo")
            except OSError:
                continue  # it exited: try the next one
            text = mountinfo.decode("utf-8", "surrogateescape")
            upper = parse.overlay_upperdir(text)
            if upper is None:
                return None
            return upper, parse.container_name_from_mountinfo(text, uid)
        return None


_ByName = tuple[DiskUsage, Mapping[str, DiskUsage]]
"""A pod's total for one part of its storage, and the same per container or volume."""


def _pod_storage(
    logs: _ByName | None, volumes: _ByName | None, rootfs: _ByName | None
) -> PodStorage:
    """One pod's storage from the three parts of a scan."""
    layers = rootfs[1] if rootfs is not None else {}
    log_dirs = logs[1] if logs is not None else {}
    containers = {
        name: ContainerUsage(
            rootfs=None if name not in layers else layers[name].bytes,
            logs=None if name not in log_dirs else log_dirs[name].bytes,
        )
        for name in layers.keys() | log_dirs.keys()
    }
    return PodStorage(
        rootfs=None if rootfs is None else rootfs[0],
        logs=None if logs is None else logs[0],
        local_volumes=None if volumes is None else volumes[0],
        containers=containers or _NO_CONTAINERS,
        volumes=(
            {name: usage.bytes for name, usage in volumes[1].items()}
            if volumes is not None and volumes[1]
            else _NO_VOLUMES
        ),
    )


def _child_dirs(directory: str) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            return [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []
