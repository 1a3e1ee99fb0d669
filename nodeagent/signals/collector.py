"""One place that reads every signal: :class:`SignalCollector`.

The agent loop calls :meth:`SignalCollector.collect` every second (and at once when a
kernel notification fires) and gets a complete :class:`~nodeagent.model.NodeObservations`.
Signals come in :class:`SignalGroup` s that can be re-read alone: the loop's
filesystem poll re-reads ``FILESYSTEMS`` (statvfs) and keeps the rest of the last
collection, so it opens no file. Values of groups not re-read are carried over from
their last read, dated with it (``NodeObservations.sampled_at``, for the engine's
one-action-per-sample rule; :meth:`read_times` too); the first collection reads
everything.

Per-pod ephemeral storage (``POD_STORAGE``) is a walk of directories, far costlier than
the rest, so it is refreshed at most every ``pod_storage_scan_interval`` seconds and
the last scan is reused in between. A loop that would rather not pay for the walk on
its own thread can leave ``POD_STORAGE`` out and call :meth:`refresh_pod_storage` from
another thread: it touches only its own files and swaps its result in atomically.

A source that cannot be read makes only its own signal :class:`~nodeagent.model.Unavailable`
(with the reason), the others are still read; :meth:`degraded` lists what is degraded
and why, and every change is logged once (not every second).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Mapping
from enum import StrEnum
from pathlib import Path
from types import TracebackType

from nodeagent.base.errors import ConfigError, SignalReadError
from nodeagent.cri.client import ImageFsInfo
from nodeagent.model import (
    FsLayout,
    NodeObservations,
    Observation,
    PodUID,
    PodUsage,
    PsiStats,
    Signal,
    SignalValue,
    Unavailable,
)
from nodeagent.signals.cgroups import (
    CgroupPaths,
    PodCgroup,
    PodCgroupIndex,
    detect_cgroups,
    find_kubepods,
    missing_kubepods_reason,
)
from nodeagent.signals.files import FileReader
from nodeagent.signals.filesystems import FilesystemReader, FsPath, RuntimeFilesystems
from nodeagent.signals.memory import MemoryReader
from nodeagent.signals.pids import PidReader, PodTasks
from nodeagent.signals.pod_storage import (
    NO_STORAGE_FIELDS,
    PodStorageScanner,
    StorageFields,
    StorageScan,
)
from nodeagent.signals.psi import PsiReader
from nodeagent.signals.settings import SignalSourceSettings

_log = logging.getLogger("nodeagent.signals")


class SignalGroup(StrEnum):
    """Signals read together, because they come from the same files."""

    MEMORY = "memory"
    """``memory.available``, ``allocatableMemory.available`` and swap."""
    FILESYSTEMS = "filesystems"
    """``nodefs.*``, ``imagefs.*``, ``containerfs.*`` and the filesystem layout."""
    PIDS = "pids"
    """``pid.available``."""
    PSI = "psi"
    """``/proc/pressure/*`` and the node cgroup's ``*.pressure``."""
    PODS = "pods"
    """Per-pod memory working set and task count (cgroup reads)."""
    POD_STORAGE = "pod-storage"
    """Per-pod logs, emptyDir and writable-layer usage (directory walks, on their own
    interval)."""


ALL_GROUPS: frozenset[SignalGroup] = frozenset(SignalGroup)
PER_SECOND_GROUPS: frozenset[SignalGroup] = ALL_GROUPS - {SignalGroup.POD_STORAGE}
"""Everything but the directory walks: what the 5 ms budget at 250 pods is about."""

GROUP_SIGNALS: Mapping[SignalGroup, tuple[Signal, ...]] = {
    SignalGroup.MEMORY: (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE),
    SignalGroup.FILESYSTEMS: (
        Signal.NODEFS_AVAILABLE,
        Signal.NODEFS_INODES_FREE,
        Signal.IMAGEFS_AVAILABLE,
        Signal.IMAGEFS_INODES_FREE,
        Signal.CONTAINERFS_AVAILABLE,
        Signal.CONTAINERFS_INODES_FREE,
    ),
    SignalGroup.PIDS: (Signal.PID_AVAILABLE,),
}

COLLECTED_SIGNALS: tuple[Signal, ...] = tuple(
    signal for signals in GROUP_SIGNALS.values() for signal in signals
)
"""The kubelet's signals, which this collector observes. (The PSI signals the engine
evaluates are derived from :attr:`NodeObservations.psi`.)"""

_NOT_READ = Unavailable("not read yet")

_PodCgroupUsage = tuple[int | None, PodTasks | None, int | None]
"""A pod cgroup's working set, tasks and clean active page cache (when read)."""


def _counted(value: SignalValue, active: int | None) -> SignalValue:
    """``value`` counting ``active`` (the clean active page cache) as available."""
    return value if active is None else value.counting_reclaimable(active)


def _under(host_root: str, path: str | Path) -> str:
    """``path`` (absolute on the host) as this process sees it below ``host_root``."""
    return host_root.rstrip("/") + "/" + str(path).lstrip("/")


DEFAULT_IMAGEFS_PATH = "/var/lib/containerd"


def _imagefs(
    root: str, path: str | Path | None, image_fs_info: Callable[[], ImageFsInfo] | None
) -> FsPath | RuntimeFilesystems:
    """The configured imagefs path; unset, where the container runtime says it is."""
    if path is not None:
        return FsPath(_under(root, path), str(path))
    fallback = FsPath(_under(root, DEFAULT_IMAGEFS_PATH), DEFAULT_IMAGEFS_PATH)
    if image_fs_info is None:
        return fallback
    return RuntimeFilesystems(image_fs_info, host_root=root, fallback=fallback)


class _Degradations:
    """The reason each degraded source is degraded; logs each change once."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self.reasons: dict[str, str] = {}

    def update(self, source: str, reason: str | None) -> None:
        previous = self.reasons.get(source)
        if reason == previous:
            return
        if reason is None:
            del self.reasons[source]
            self._logger.info("%s is available again", source)
        else:
            self.reasons[source] = reason
            self._logger.warning("%s is unavailable: %s", source, reason)


class SignalCollector:
    """Reads the node's signals and per-pod usage below one host root.

    Build it with :meth:`from_settings`; call :meth:`collect` as often as needed;
    :meth:`close` releases the file descriptors it keeps open between reads.
    Not thread-safe, except :meth:`refresh_pod_storage` (see the module docstring).
    """

    def __init__(
        self,
        *,
        host_root: str | Path = "/",
        node_cgroup: str = "/",
        kubepods_cgroup: str | None = None,
        nodefs_path: str | Path = "/var/lib/kubelet",
        imagefs_path: str | Path | None = DEFAULT_IMAGEFS_PATH,
        containerfs_path: str | Path | None = None,
        pod_logs_path: str | Path = "/var/log/pods",
        kubelet_root_dir: str | Path = "/var/lib/kubelet",
        pod_storage_scan_interval: float = 30.0,
        logger: logging.Logger | None = None,
        max_open_files: int | None = None,
        image_fs_info: Callable[[], ImageFsInfo] | None = None,
        active_file: bool = False,
    ) -> None:
        root = str(host_root)
        if not os.path.isdir(root):
            raise ConfigError(f"hostRoot {root!r} is not a directory", field="hostRoot")
        self.host_root = root
        self._log = logger or _log
        self._proc_dir = _under(root, "/proc")
        self._kubepods_auto = kubepods_cgroup is None
        self._paths = detect_cgroups(
            _under(root, "/sys/fs/cgroup"),
            node_cgroup=node_cgroup,
            kubepods_cgroup=kubepods_cgroup,
        )
        self._reader = FileReader(max_open=max_open_files)
        self._active_file = active_file
        self._memory = MemoryReader(self._paths, proc_dir=self._proc_dir, active_file=active_file)
        self._pids = PidReader(proc_dir=self._proc_dir, version=self._paths.version)
        self._psi = PsiReader(proc_dir=self._proc_dir, cgroups=self._paths)
        self._filesystems = FilesystemReader(
            nodefs=FsPath(_under(root, nodefs_path), str(nodefs_path)),
            imagefs=_imagefs(root, imagefs_path, image_fs_info),
            containerfs=(
                None
                if containerfs_path is None
                else FsPath(_under(root, containerfs_path), str(containerfs_path))
            ),
        )
        self._pod_index = self._new_pod_index()
        self._storage_interval = pod_storage_scan_interval
        self._scanner = PodStorageScanner(
            host_root=root,
            proc_dir=self._proc_dir,
            kubelet_root_dir=_under(root, kubelet_root_dir),
            pod_logs_dir=_under(root, pod_logs_path),
        )

        self._degradations = _Degradations(self._log)
        self._signals: dict[Signal, Observation] = dict.fromkeys(COLLECTED_SIGNALS, _NOT_READ)
        self._psi_stats: dict[str, PsiStats] = {}
        self._layout = FsLayout.SINGLE
        self._swap: SignalValue | None = None
        self._mem_total: int | None = None
        """``MemTotal`` from the last full memory read, for :meth:`memory_probe`."""
        self._active_files: dict[Signal, int] = {}
        """The clean active page cache behind each memory signal, when read."""
        self._pod_cgroup_usage: dict[PodUID, _PodCgroupUsage] = {}
        self._storage: StorageScan | None = None
        self._merged_storage: StorageScan | None = None
        self._storage_fields: dict[PodUID, StorageFields] = {}
        self._pods: dict[PodUID, PodUsage] = {}
        self._read_times: dict[SignalGroup, float] = {}

    @classmethod
    def from_settings(
        cls,
        settings: SignalSourceSettings,
        *,
        logger: logging.Logger | None = None,
        image_fs_info: Callable[[], ImageFsInfo] | None = None,
        active_file: bool = False,
    ) -> SignalCollector:
        """``active_file``: also read the clean active page cache of the memory signals'
        cgroups and of each pod (``activePageCache: reclaimable`` needs it)."""
        return cls(
            host_root=settings.host_root,
            node_cgroup=settings.node_cgroup,
            kubepods_cgroup=settings.kubepods_cgroup,
            nodefs_path=settings.nodefs_path,
            imagefs_path=settings.imagefs_path,
            containerfs_path=settings.containerfs_path,
            pod_logs_path=settings.pod_logs_path,
            kubelet_root_dir=settings.kubelet_root_dir,
            pod_storage_scan_interval=settings.pod_storage_scan_interval,
            logger=logger,
            image_fs_info=image_fs_info,
            active_file=active_file,
        )

    # -- what the rest of the agent needs to know ---------------------------------------

    @property
    def cgroups(self) -> CgroupPaths:
        """The resolved cgroup version and directories (node, kubepods), for the kernel
        triggers. Changes once if kubepods appears after start (auto-detection)."""
        return self._paths

    @property
    def pod_cgroups(self) -> Mapping[PodUID, PodCgroup]:
        """The pod cgroups found by the last ``PODS`` read."""
        return self._pod_index.pods if self._pod_index is not None else {}

    def degraded(self) -> Mapping[str, str]:
        """Reason by degraded source: signal names (``nodefs.available``), ``psi/<scope>``,
        ``pods``, ``pod-storage/<part>``. Empty when everything was read."""
        return dict(self._degradations.reasons)

    def read_times(self) -> Mapping[SignalGroup, float]:
        """When each group was last read (the ``now`` passed to :meth:`collect`, or to
        :meth:`refresh_pod_storage` for ``POD_STORAGE``)."""
        times = dict(self._read_times)
        if self._storage is not None:
            times[SignalGroup.POD_STORAGE] = self._storage.time
        return times

    @property
    def last_storage_scan(self) -> StorageScan | None:
        return self._storage

    @property
    def psi_sources(self) -> Mapping[str, str]:
        """The file each PSI scope is read from, keyed ``psi/<scope>`` (signals carry
        their own ``source``)."""
        return {f"psi/{scope}": path for scope, path in self._psi.sources.items()}

    @property
    def proc_dir(self) -> str:
        """The host's /proc as this process sees it (``/proc/pressure`` is below it)."""
        return self._proc_dir

    def memory_probe(self, signal: Signal) -> Callable[[], int] | None:
        """A function that re-reads ``signal``'s available bytes now, and nothing else:
        the fast path of the adaptive memory poll
        (:mod:`nodeagent.triggers.adaptive`). ``memory.available`` reads the node
        cgroup's usage and ``memory.stat`` (or the v2 root's ``memory.stat``, or
        /proc/meminfo without cgroups), taking ``MemTotal`` from the last full
        collection; ``allocatableMemory.available`` reads kubepods' limit, usage and
        ``memory.stat``. A collector that reads the active page cache counts its clean
        part as available here, as ``activePageCache: reclaimable`` will count it in the
        decision. Every file stays open between reads. ``None`` for other
        signals, and for allocatable without a kubepods cgroup. The function raises
        :class:`SignalReadError` (or :class:`OSError`) when it cannot read.
        """
        if signal is Signal.MEMORY_AVAILABLE:
            return self._probe_node
        if signal is Signal.ALLOCATABLE_MEMORY_AVAILABLE and self._paths.kubepods_cgroup:
            return self._probe_allocatable
        return None

    def _probe_node(self) -> int:
        memory = self._memory
        if memory.node_needs_meminfo or self._mem_total is None:
            meminfo = memory.meminfo(self._reader)
        else:
            meminfo = {"MemTotal": self._mem_total}
        value, active = memory.node_reading(self._reader, meminfo)
        return _counted(value, active).available

    def _probe_allocatable(self) -> int:
        observation, active = self._memory.allocatable_reading(self._reader)
        if isinstance(observation, Unavailable):
            raise SignalReadError(observation.reason)
        return _counted(observation, active).available

    # -- collection ---------------------------------------------------------------------

    def collect(self, now: float, groups: Collection[SignalGroup] = ALL_GROUPS) -> NodeObservations:
        """Read ``groups`` (plus any group never read yet) and return every signal.

        ``POD_STORAGE`` is re-scanned only when its interval has passed since the last
        scan (or never, with an interval of 0).
        """
        wanted = set(groups)
        wanted.update(group for group in PER_SECOND_GROUPS if group not in self._read_times)
        if self._storage is None:
            wanted.add(SignalGroup.POD_STORAGE)
        if (
            self._kubepods_auto
            and self._paths.kubepods_cgroup is None
            and SignalGroup.PODS in wanted
        ):
            # Looked for with the pods (the node poll), not on every filesystem poll.
            self._redetect_kubepods()
        if SignalGroup.MEMORY in wanted:
            self._collect_memory()
        if SignalGroup.FILESYSTEMS in wanted:
            signals, self._layout = self._filesystems.read()
            self._store(signals)
        if SignalGroup.PIDS in wanted:
            self._store({Signal.PID_AVAILABLE: self._guard(self._pids.node)})
        if SignalGroup.PSI in wanted:
            self._collect_psi(now)
        pods_changed = False
        if SignalGroup.PODS in wanted:
            self._collect_pod_cgroups()
            pods_changed = True
        if SignalGroup.POD_STORAGE in wanted and self._storage_due(now):
            self.refresh_pod_storage(now)
            pods_changed = True
        if pods_changed or self._storage_swapped():
            self._pods = self._merge_pods()
        for group in wanted - {SignalGroup.POD_STORAGE}:
            self._read_times[group] = now
        read_times = self._read_times
        return NodeObservations(
            time=now,
            signals=dict(self._signals),
            pods=self._pods,
            psi=dict(self._psi_stats),
            fs_layout=self._layout,
            swap=self._swap,
            active_file=dict(self._active_files),
            sampled_at={
                signal: read_times[group]
                for group, signals in GROUP_SIGNALS.items()
                if group not in wanted
                for signal in signals
            },
            psi_sampled_at=None if SignalGroup.PSI in wanted else read_times[SignalGroup.PSI],
        )

    def refresh_pod_storage(self, now: float) -> StorageScan:
        """Walk the pods' logs, emptyDir volumes and writable layers now."""
        scan = self._scanner.scan(dict(self.pod_cgroups), now=now)
        self._storage = scan
        return scan

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> SignalCollector:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- groups -------------------------------------------------------------------------

    def _guard(self, read: Callable[[FileReader], Observation]) -> Observation:
        try:
            return read(self._reader)
        except SignalReadError as exc:
            return Unavailable(str(exc))

    def _store(self, signals: Mapping[Signal, Observation]) -> None:
        for signal, observation in signals.items():
            self._signals[signal] = observation
            self._degradations.update(
                signal.value, observation.reason if isinstance(observation, Unavailable) else None
            )

    def _collect_memory(self) -> None:
        node_active: int | None = None
        try:
            meminfo = self._memory.meminfo(self._reader)
        except SignalReadError as exc:
            node: Observation = Unavailable(str(exc))
            self._swap = None
            self._mem_total = None
        else:
            self._mem_total = meminfo["MemTotal"]
            try:
                node, node_active = self._memory.node_reading(self._reader, meminfo)
            except SignalReadError as exc:
                node = Unavailable(str(exc))
            self._swap = self._memory.swap(meminfo)
        allocatable_active: int | None = None
        try:
            allocatable, allocatable_active = self._memory.allocatable_reading(self._reader)
        except SignalReadError as exc:
            allocatable = Unavailable(str(exc))
        self._store(
            {
                Signal.MEMORY_AVAILABLE: node,
                Signal.ALLOCATABLE_MEMORY_AVAILABLE: allocatable,
            }
        )
        self._active_files = {
            signal: active
            for signal, active in (
                (Signal.MEMORY_AVAILABLE, node_active),
                (Signal.ALLOCATABLE_MEMORY_AVAILABLE, allocatable_active),
            )
            if active is not None
        }

    def _collect_psi(self, now: float) -> None:
        stats, unavailable = self._psi.read(self._reader, now)
        self._psi_stats = stats
        for scope in self._psi.sources.keys() | unavailable.keys():
            self._degradations.update(f"psi/{scope}", unavailable.get(scope))

    def _collect_pod_cgroups(self) -> None:
        index = self._pod_index
        if index is None:
            self._pod_cgroup_usage = {}
            self._degradations.update("pods", missing_kubepods_reason(self._paths))
            return
        try:
            gone = index.refresh()
        except OSError as exc:
            self._pod_cgroup_usage = {}
            directory = exc.filename or self._paths.kubepods_memory_dir
            self._degradations.update("pods", f"cannot list {directory}: {exc.strerror or exc}")
            return
        self._degradations.update("pods", None)
        reader = self._reader
        for pod in gone:
            reader.forget(pod.files)
        working_set = self._memory.pod_working_set
        pod_memory = self._memory.pod_memory if self._active_file else None
        tasks = self._pids.pod_tasks
        last = self._pod_cgroup_usage
        usage: dict[PodUID, _PodCgroupUsage] = {}
        for uid, pod in index.pods.items():
            active: int | None = None
            try:
                if pod_memory is None:
                    memory: int | None = working_set(reader, pod)
                else:
                    memory, active = pod_memory(reader, pod)
            except FileNotFoundError:
                continue  # removed since the listing
            except (OSError, ValueError):
                memory = None
            previous = last.get(uid)
            try:
                counted: PodTasks | None = tasks(reader, pod, previous and previous[1])
            except (OSError, ValueError):
                counted = None
            usage[uid] = (memory, counted, active)
        self._pod_cgroup_usage = usage

    def _storage_due(self, now: float) -> bool:
        if self._storage_interval <= 0:
            return False
        last = self._storage
        return last is None or now - last.time >= self._storage_interval

    def _storage_swapped(self) -> bool:
        """Whether another thread stored a new scan since the pods were last merged."""
        return self._storage is not self._merged_storage

    def _merge_pods(self) -> dict[PodUID, PodUsage]:
        scan = self._storage
        if scan is not self._merged_storage:
            self._merged_storage = scan
            self._storage_fields = (
                {uid: storage.usage_fields() for uid, storage in scan.pods.items()}
                if scan is not None
                else {}
            )
            if scan is not None:
                for part in ("logs", "local-volumes", "rootfs"):
                    self._degradations.update(f"pod-storage/{part}", scan.unavailable.get(part))
        fields = self._storage_fields
        no_storage = NO_STORAGE_FIELDS
        pods: dict[PodUID, PodUsage] = {}
        for uid, (memory, tasks, active) in self._pod_cgroup_usage.items():
            pods[uid] = PodUsage(
                uid=uid,
                memory=memory,
                active_file=active,
                processes=None if tasks is None else tasks.processes,
                threads=None if tasks is None else tasks.threads,
                **fields.get(uid, no_storage),
            )
        if self._pod_index is None:
            # Without pod cgroups, what is on disk is all we know of the pods.
            for uid in fields.keys() - pods.keys():
                pods[uid] = PodUsage(uid=uid, **fields[uid])
        return pods

    # -- layout changes -----------------------------------------------------------------

    def _new_pod_index(self) -> PodCgroupIndex | None:
        if self._paths.kubepods_cgroup is None or self._paths.memory_root is None:
            return None
        return PodCgroupIndex(self._paths)

    def _redetect_kubepods(self) -> None:
        """The kubelet may create kubepods after we start: look again, cheaply."""
        if self._paths.memory_root is None:
            return
        found = find_kubepods(self._paths.memory_root, self._paths.node_cgroup)
        if found is None:
            return
        self._log.info("found the kubepods cgroup at %s", found)
        self._paths = detect_cgroups(
            self._paths.mount, node_cgroup=self._paths.node_cgroup, kubepods_cgroup=found
        )
        self._memory = MemoryReader(
            self._paths, proc_dir=self._proc_dir, active_file=self._active_file
        )
        self._psi = PsiReader(proc_dir=self._proc_dir, cgroups=self._paths)
        self._pod_index = self._new_pod_index()
