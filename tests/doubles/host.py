"""Fake host trees, file for file in the kernel's formats, for tests, benchmarks and demos.

:class:`HostTree` writes under a directory what a host shows below ``/``: ``proc``
(meminfo, loadavg, pid limits, pressure), ``sys/fs/cgroup`` as cgroup v1, hybrid or v2
with the systemd or cgroupfs driver, the kubelet's pod and log directories. A
:class:`~nodeagent.signals.collector.SignalCollector` with ``host_root`` set to that
directory reads it exactly as it reads a real host.

Formats copy real kernels: a v1 ``memory.stat`` has the 42 keys of Linux 6.x in their
order (``total_*`` after the local ones), v1 spells "unlimited" as
9223372036854771712, v2 as ``max``; the v2 root has no ``memory.current`` or
``memory.max``. Numbers are derived consistently from the few a test chooses (usage,
inactive_file, limit), so tests state inputs and hand-computed expectations.

Files are rewritten in place (same inode), as :class:`~nodeagent.signals.files.FileReader`
expects of kernel files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.k8s.pods import QOSClass
from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion, normalize_cgroup

V1_UNLIMITED = 9223372036854771712
GIB = 1 << 30
MIB = 1 << 20

_V1_LOCAL_KEYS = (
    "cache",
    "rss",
    "rss_huge",
    "shmem",
    "mapped_file",
    "dirty",
    "writeback",
    "workingset_refault_anon",
    "workingset_refault_file",
    "swap",
    "swapcached",
    "pgpgin",
    "pgpgout",
    "pgfault",
    "pgmajfault",
    "inactive_anon",
    "active_anon",
    "inactive_file",
    "active_file",
    "unevictable",
)
_V2_KEYS = (
    "anon",
    "file",
    "kernel",
    "kernel_stack",
    "pagetables",
    "sec_pagetables",
    "percpu",
    "sock",
    "vmalloc",
    "shmem",
    "zswap",
    "zswapped",
    "file_mapped",
    "file_dirty",
    "file_writeback",
    "swapcached",
    "anon_thp",
    "file_thp",
    "shmem_thp",
    "inactive_anon",
    "active_anon",
    "inactive_file",
    "active_file",
    "unevictable",
    "slab_reclaimable",
    "slab_unreclaimable",
    "slab",
    "workingset_refault_anon",
    "workingset_refault_file",
    "workingset_activate_anon",
    "workingset_activate_file",
    "workingset_restore_anon",
    "workingset_restore_file",
    "workingset_nodereclaim",
    "pgscan",
    "pgsteal",
    "pgscan_kswapd",
    "pgscan_direct",
    "pgscan_khugepaged",
    "pgsteal_kswapd",
    "pgsteal_direct",
    "pgsteal_khugepaged",
    "pgfault",
    "pgmajfault",
    "pgrefill",
    "pgactivate",
    "pgdeactivate",
    "pglazyfree",
    "pglazyfreed",
    "zswpin",
    "zswpout",
    "thp_fault_alloc",
    "thp_collapse_alloc",
    "thp_swpout",
    "thp_swpout_fallback",
)


@dataclass(frozen=True, slots=True)
class Psi:
    """Values for one PSI file."""

    some: tuple[float, float, float, int] = (0.0, 0.0, 0.0, 0)
    full: tuple[float, float, float, int] | None = (0.0, 0.0, 0.0, 0)

    def render(self) -> str:
        lines = []
        for name, values in (("some", self.some), ("full", self.full)):
            if values is not None:
                avg10, avg60, avg300, total = values
                lines.append(
                    f"{name} avg10={avg10:.2f} avg60={avg60:.2f} avg300={avg300:.2f} total={total}"
                )
        return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Memory:
    """What a memory cgroup holds: ``usage`` bytes of which ``inactive_file`` are
    inactive page cache, ``active_file`` active page cache; the rest is anonymous."""

    usage: int
    inactive_file: int = 0
    active_file: int = 0
    dirty: int = 0
    """Of the page cache, pages waiting to be written back."""
    writeback: int = 0
    """Of the page cache, pages being written back."""

    @property
    def file(self) -> int:
        return self.inactive_file + self.active_file

    @property
    def anon(self) -> int:
        return self.usage - self.file


def _stat_values(keys: tuple[str, ...], memory: Memory, **totals: int) -> dict[str, int]:
    """A ``memory.stat``'s keys in order, zero but for ``totals`` and the LRU lists."""
    values = dict.fromkeys(keys, 0)
    values.update(
        totals,
        active_anon=memory.anon,
        inactive_file=memory.inactive_file,
        active_file=memory.active_file,
    )
    dirty, writeback = (
        ("dirty", "writeback") if "dirty" in keys else ("file_dirty", "file_writeback")
    )
    values[dirty], values[writeback] = memory.dirty, memory.writeback
    return values


@dataclass
class HostTree:
    """Builds a fake host below ``root``. Paths in arguments are host paths."""

    root: Path
    version: CgroupVersion = CgroupVersion.V2
    driver: CgroupDriver = CgroupDriver.SYSTEMD
    hybrid: bool = False
    """v1 only: also mount a controller-less cgroup2 at ``unified`` (pressure files)."""
    pids_hierarchy: bool = True
    """v1 only: have a pids hierarchy (else tasks are counted from ``tasks`` files)."""
    _limits: dict[str, int | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        cgroup = self.path("/sys/fs/cgroup")
        if self.version is CgroupVersion.V2:
            self._write(
                cgroup / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n"
            )
        else:
            self._write(cgroup / "memory" / "memory.use_hierarchy", "1\n")
            if self.pids_hierarchy:
                (cgroup / "pids").mkdir(parents=True, exist_ok=True)
            if self.hybrid:
                self._write(cgroup / "unified" / "cgroup.controllers", "")
        self.root_memory(Memory(0))

    # -- paths ----------------------------------------------------------------------------

    def path(self, host_path: str) -> Path:
        """``host_path`` inside the tree."""
        return self.root / host_path.lstrip("/")

    def memory_dir(self, cgroup: str) -> Path:
        base = "/sys/fs/cgroup" if self.version is CgroupVersion.V2 else "/sys/fs/cgroup/memory"
        return self.path(base + normalize_cgroup(cgroup).rstrip("/"))

    def unified_dir(self, cgroup: str) -> Path | None:
        if self.version is CgroupVersion.V2:
            return self.memory_dir(cgroup)
        if not self.hybrid:
            return None
        return self.path("/sys/fs/cgroup/unified" + normalize_cgroup(cgroup).rstrip("/"))

    def pids_dir(self, cgroup: str) -> Path | None:
        if self.version is CgroupVersion.V2:
            return self.memory_dir(cgroup)
        if not self.pids_hierarchy:
            return None
        return self.path("/sys/fs/cgroup/pids" + normalize_cgroup(cgroup).rstrip("/"))

    @property
    def kubepods_cgroup(self) -> str:
        return "/kubepods.slice" if self.driver is CgroupDriver.SYSTEMD else "/kubepods"

    def pod_cgroup(self, uid: str, qos: QOSClass) -> str:
        """Where the kubelet puts the cgroup of pod ``uid`` of class ``qos``."""
        if self.driver is CgroupDriver.SYSTEMD:
            escaped = uid.replace("-", "_")
            if qos is QOSClass.GUARANTEED:
                return f"/kubepods.slice/kubepods-pod{escaped}.slice"
            tier = "burstable" if qos is QOSClass.BURSTABLE else "besteffort"
            return f"/kubepods.slice/kubepods-{tier}.slice/kubepods-{tier}-pod{escaped}.slice"
        if qos is QOSClass.GUARANTEED:
            return f"/kubepods/pod{uid}"
        tier = "burstable" if qos is QOSClass.BURSTABLE else "besteffort"
        return f"/kubepods/{tier}/pod{uid}"

    # -- /proc ----------------------------------------------------------------------------

    def proc(
        self,
        *,
        mem_total: int = 16 * GIB,
        anon: int = 2 * GIB,
        inactive_file: int = 1 * GIB,
        active_file: int = 512 * MIB,
        dirty: int = 0,
        writeback: int = 0,
        buffers: int = 64 * MIB,
        swap_total: int = 0,
        swap_free: int = 0,
        pid_max: int = 4194304,
        threads_max: int = 127655,
        tasks: int = 500,
    ) -> None:
        """``/proc/meminfo``, ``loadavg`` and the pid limits (sizes in bytes)."""
        kib = 1024
        cached = inactive_file + active_file - buffers
        used = anon + inactive_file + active_file
        meminfo = {
            "MemTotal": mem_total,
            "MemFree": mem_total - used,
            "MemAvailable": mem_total - anon,
            "Buffers": buffers,
            "Cached": cached,
            "SwapCached": 0,
            "Active": active_file,
            "Inactive": inactive_file,
            "Active(anon)": 0,
            "Inactive(anon)": 0,
            "Active(file)": active_file,
            "Inactive(file)": inactive_file,
            "Unevictable": 0,
            "Mlocked": 0,
            "SwapTotal": swap_total,
            "SwapFree": swap_free,
            "Zswap": 0,
            "Zswapped": 0,
            "Dirty": dirty,
            "Writeback": writeback,
            "AnonPages": anon,
            "Mapped": 0,
            "Shmem": 0,
        }
        text = "".join(f"{key + ':':<16}{value // kib:>8} kB\n" for key, value in meminfo.items())
        text += "HugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n"
        self._write(self.path("/proc/meminfo"), text)
        self._write(self.path("/proc/loadavg"), f"0.52 0.41 0.30 3/{tasks} 123456\n")
        self._write(self.path("/proc/sys/kernel/pid_max"), f"{pid_max}\n")
        self._write(self.path("/proc/sys/kernel/threads-max"), f"{threads_max}\n")

    def pressure(self, resource: str, psi: Psi, *, cgroup: str | None = None) -> None:
        """``/proc/pressure/<resource>``, or the ``<resource>.pressure`` of ``cgroup``."""
        if cgroup is None:
            self._write(self.path(f"/proc/pressure/{resource}"), psi.render())
            return
        directory = self.unified_dir(cgroup)
        if directory is None:
            raise ValueError("a pure cgroup v1 host has no per-cgroup pressure files")
        self._write(directory / f"{resource}.pressure", psi.render())

    # -- cgroups --------------------------------------------------------------------------

    def root_memory(self, memory: Memory, *, stat: bool = True) -> None:
        """The root memory cgroup (a new tree starts empty). v1: ``usage_in_bytes`` and
        ``memory.stat``; v2: only ``memory.stat`` (``stat=False``: a kernel without it)."""
        directory = self.memory_dir("/")
        if self.version is CgroupVersion.V1:
            self._write(directory / "memory.usage_in_bytes", f"{memory.usage}\n")
            self._write(directory / "memory.limit_in_bytes", f"{V1_UNLIMITED}\n")
            self._write(directory / "memory.stat", self._v1_stat(memory, "/"))
        elif stat:
            self._write(directory / "memory.stat", self._v2_stat(memory))
        else:
            (directory / "memory.stat").unlink(missing_ok=True)
        for resource in ("memory", "io", "cpu"):
            unified = self.unified_dir("/")
            if unified is not None:
                self._write(unified / f"{resource}.pressure", Psi().render())

    def cgroup(
        self,
        cgroup: str,
        memory: Memory,
        *,
        limit: int | None = None,
        tasks: int = 0,
        processes: int | None = None,
    ) -> Path:
        """A non-root cgroup with its memory files (and pids, pressure where they exist).

        ``tasks`` threads in ``processes`` processes (default: one thread each). Returns
        its memory directory.
        """
        procs = "".join(f"{1000 + n}\n" for n in range(tasks if processes is None else processes))
        cgroup = normalize_cgroup(cgroup)
        self._limits[cgroup] = limit
        directory = self.memory_dir(cgroup)
        if self.version is CgroupVersion.V1:
            self._write(directory / "memory.usage_in_bytes", f"{memory.usage}\n")
            self._write(
                directory / "memory.limit_in_bytes", f"{V1_UNLIMITED if limit is None else limit}\n"
            )
            self._write(directory / "memory.stat", self._v1_stat(memory, cgroup))
            self._write(directory / "tasks", "".join(f"{1000 + n}\n" for n in range(tasks)))
            self._write(directory / "cgroup.procs", procs)
        else:
            self._write(directory / "memory.current", f"{memory.usage}\n")
            self._write(directory / "memory.max", "max\n" if limit is None else f"{limit}\n")
            self._write(directory / "memory.stat", self._v2_stat(memory))
            self._write(
                directory / "cgroup.threads", "".join(f"{1000 + n}\n" for n in range(tasks))
            )
            self._write(directory / "cgroup.procs", procs)
        pids = self.pids_dir(cgroup)
        if pids is not None:
            self._write(pids / "pids.current", f"{tasks}\n")
            self._write(pids / "cgroup.procs", procs)
        unified = self.unified_dir(cgroup)
        if unified is not None:
            for resource in ("memory", "io", "cpu"):
                self._write(unified / f"{resource}.pressure", Psi().render())
        return directory

    def kubepods(self, memory: Memory, *, limit: int | None) -> str:
        """The node-allocatable cgroup and its QoS parents. Returns its cgroup path."""
        self.cgroup(self.kubepods_cgroup, memory, limit=limit)
        for qos in (QOSClass.BURSTABLE, QOSClass.BEST_EFFORT):
            parent = self.pod_cgroup("x", qos).rsplit("/", 1)[0]
            self.cgroup(parent, Memory(0))
        return self.kubepods_cgroup

    def pod(
        self,
        uid: str,
        memory: Memory,
        *,
        qos: QOSClass = QOSClass.BURSTABLE,
        tasks: int = 1,
        containers: Mapping[str, int | None] | None = None,
    ) -> str:
        """A pod cgroup with one cgroup per container. ``containers`` maps a container
        id to the PID running in it (``None``: no process). Returns the cgroup path."""
        cgroup = self.pod_cgroup(uid, qos)
        self.cgroup(cgroup, memory, tasks=tasks)
        for container, pid in (containers or {}).items():
            name = (
                f"cri-containerd-{container}.scope"
                if self.driver is CgroupDriver.SYSTEMD
                else container
            )
            child = self.memory_dir(f"{cgroup}/{name}")
            self._write(child / "cgroup.procs", "" if pid is None else f"{pid}\n")
        return cgroup

    def remove_cgroup(self, cgroup: str) -> None:
        """``rmdir`` a cgroup (and, unlike the kernel, its files) in every hierarchy."""
        for directory in (self.memory_dir(cgroup), self.pids_dir(cgroup), self.unified_dir(cgroup)):
            if directory is not None and directory.exists():
                for below, _, files in os.walk(directory, topdown=False):
                    for name in files:
                        os.remove(os.path.join(below, name))
                    os.rmdir(below)

    # -- kubelet and runtime directories -----------------------------------------------

    def pod_logs(self, namespace: str, name: str, uid: str, files: Mapping[str, int]) -> Path:
        """``/var/log/pods/<ns>_<name>_<uid>/``; ``files`` maps a relative path to a size."""
        directory = self.path(f"/var/log/pods/{namespace}_{name}_{uid}")
        self._fill(directory, files)
        return directory

    def empty_dir(self, uid: str, volume: str, files: Mapping[str, int]) -> Path:
        directory = self.path(
            f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/{volume}"
        )
        self._fill(directory, files)
        return directory

    def container_rootfs(self, pid: int, upperdir: str, files: Mapping[str, int]) -> Path:
        """Process ``pid`` with an overlay root whose writable layer is ``upperdir``."""
        layer = self.path(upperdir)
        self._fill(layer, files)
        base = upperdir.rsplit("/", 1)[0]
        self._write(
            self.path(f"/proc/{pid}/mountinfo"),
            "2000 1500 0:310 / / rw,relatime master:1 - overlay overlay "
            f"rw,lowerdir=/var/lib/containerd/snapshots/1/fs,upperdir={upperdir},"
            f"workdir={base}/work\n"
            "2001 2000 0:312 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n",
        )
        return layer

    # -- helpers --------------------------------------------------------------------------

    def _hierarchical_limit(self, cgroup: str) -> int:
        limits = []
        current = cgroup
        while current != "/":
            limit = self._limits.get(current)
            if limit is not None:
                limits.append(limit)
            current = current.rsplit("/", 1)[0] or "/"
        return min(limits, default=V1_UNLIMITED)

    def _v1_stat(self, memory: Memory, cgroup: str) -> str:
        values = _stat_values(_V1_LOCAL_KEYS, memory, cache=memory.file, rss=memory.anon)
        lines = [f"{key} {value}" for key, value in values.items()]
        limit = self._hierarchical_limit(cgroup)
        lines += [f"hierarchical_memory_limit {limit}", f"hierarchical_memsw_limit {V1_UNLIMITED}"]
        lines += [f"total_{key} {value}" for key, value in values.items()]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _v2_stat(memory: Memory) -> str:
        values = _stat_values(_V2_KEYS, memory, anon=memory.anon, file=memory.file)
        return "".join(f"{key} {value}\n" for key, value in values.items())

    @staticmethod
    def _write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    @staticmethod
    def _fill(directory: Path, files: Mapping[str, int]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, size in files.items():
            target = directory / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"x" * size)
