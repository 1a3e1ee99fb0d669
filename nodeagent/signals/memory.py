"""``memory.available``, ``allocatableMemory.available``, swap, and pod working sets.

The arithmetic is the kubelet's (``makeSignalObservations``), so our numbers can
be compared with its Summary API:

    working set = usage - inactive_file            (never below 0)
    available   = capacity - working set            (never below 0)

=====================  ====================================  =========================
cgroup                 usage                                 inactive_file
=====================  ====================================  =========================
v1 (any, root too)     ``memory.usage_in_bytes``             ``total_inactive_file``
v2 non-root            ``memory.current``                    ``inactive_file``
v2 root                ``anon + file`` of ``memory.stat``    ``inactive_file``
no memory cgroup       ``AnonPages + Buffers + Cached +      ``Inactive(file)``
                       SwapCached`` of /proc/meminfo
=====================  ====================================  =========================

The v2 root has no ``memory.current``; runc emulates the v1 root usage as
``anon + file`` from the root ``memory.stat`` and so do we. The meminfo row is our
fallback for kernels without cgroup memory files at the root; it is the same
quantity (anonymous pages plus the page cache, ``NR_FILE_PAGES``).

Capacity of ``memory.available`` is ``MemTotal``, unless the operator chose a node
cgroup with a memory limit: then that limit (v1 ``hierarchical_memory_limit``, v2 the
smallest ``memory.max`` on the way up), capped at ``MemTotal``.

The kubelet's working set keeps the *active* page cache (kubernetes#43916). A reader
made with ``active_file=True`` also reports, from the same ``memory.stat`` read, the
clean active page cache of each cgroup, what the kernel can drop without writing
anything back::

    clean active file = active_file - dirty - writeback      (never below 0)

=====================  ================================================
cgroup                 active_file, dirty, writeback
=====================  ================================================
v1                     ``total_active_file``, ``total_dirty``, ``total_writeback``
v2 (root too)          ``active_file``, ``file_dirty``, ``file_writeback``
no memory cgroup       ``Active(file)``, ``Dirty``, ``Writeback`` of /proc/meminfo
=====================  ================================================

Dirty and writeback pages sit on either LRU list, so subtracting all of them from the
active one can only understate what is reclaimable. Whether that figure counts as
available is the eviction policy's choice (``activePageCache``,
:mod:`nodeagent.eviction.page_cache`); the reader only measures it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import StrEnum
from typing import TypeVar

from nodeagent.base.errors import SignalReadError
from nodeagent.model import Observation, SignalValue, Unavailable
from nodeagent.signals import parse
from nodeagent.signals.cgroups import (
    CgroupPaths,
    CgroupVersion,
    PodCgroup,
    missing_kubepods_reason,
)
from nodeagent.signals.files import FileReader, read_checked

_MEMINFO_WORKING_SET_KEYS = ("AnonPages", "Buffers", "Cached", "SwapCached", "Inactive(file)")
"""What the meminfo fallback needs: usage is the first four, minus the last."""
_MEMINFO_ACTIVE_KEYS = ("Active(file)", "Dirty", "Writeback")

MEMINFO_KEYS = (
    "MemTotal",
    "SwapTotal",
    "SwapFree",
    *_MEMINFO_WORKING_SET_KEYS,
    *_MEMINFO_ACTIVE_KEYS,
)

_V1_INACTIVE = b"total_inactive_file "
_V2_INACTIVE = b"inactive_file "
_V1_ACTIVE = (b"total_active_file ", b"total_dirty ", b"total_writeback ")
_V2_ACTIVE = (b"active_file ", b"file_dirty ", b"file_writeback ")


class _NodeMode(StrEnum):
    """Where the node's working set comes from (see the table above)."""

    CGROUP = "cgroup"
    V2_ROOT = "v2-root"
    MEMINFO = "meminfo"
    MISSING = "missing"
    """A non-root node cgroup was configured on a host without a memory controller."""


def working_set(usage: int, inactive_file: int | None) -> int:
    """``usage - inactive_file``, clamped at 0; unchanged when the key is absent."""
    if inactive_file is None:
        return usage
    return usage - inactive_file if usage > inactive_file else 0


def clean_active_file(active_file: int, dirty: int, writeback: int) -> int:
    """Active page cache the kernel can drop without I/O: ``active_file`` less every
    dirty and writeback page, never below 0."""
    return max(active_file - dirty - writeback, 0)


def _optional_stat_key(data: bytes, key: bytes, path: str) -> int | None:
    try:
        return parse.stat_value(data, key)
    except ValueError as exc:
        raise SignalReadError(f"cannot parse {path}: {exc}") from exc


def _stat_key(data: bytes, key: bytes, path: str) -> int:
    value = _optional_stat_key(data, key, path)
    if value is None:
        raise SignalReadError(f"{path} has no {key.decode().strip()!r} line")
    return value


_T = TypeVar("_T")


def _read_parsed(reader: FileReader, path: str, parser: Callable[[bytes], _T], expected: str) -> _T:
    data = read_checked(reader, path)
    try:
        return parser(data)
    except ValueError as exc:
        raise SignalReadError(
            f"cannot parse {path}: expected {expected}, got {data[:40]!r}"
        ) from exc


def _read_int(reader: FileReader, path: str) -> int:
    return _read_parsed(reader, path, parse.parse_int, "an integer")


def _read_limit(reader: FileReader, path: str) -> int | None:
    return _read_parsed(reader, path, parse.parse_limit, "bytes or 'max'")


class MemoryReader:
    """Reads the memory signals for one resolved cgroup layout.

    Paths and source descriptions are computed once here, so a collection only reads
    and subtracts. Every method raises :class:`SignalReadError` with the file's path.
    """

    def __init__(self, paths: CgroupPaths, *, proc_dir: str, active_file: bool = False) -> None:
        self.paths = paths
        self.meminfo_path = f"{proc_dir}/meminfo"
        self.reads_active_file = active_file
        """Whether the readings carry the clean active page cache (else ``None``)."""
        self._v2 = paths.version is CgroupVersion.V2
        self._inactive_key = _V2_INACTIVE if self._v2 else _V1_INACTIVE
        self._inactive_line = b"\n" + self._inactive_key
        self._active_keys = _V2_ACTIVE if self._v2 else _V1_ACTIVE
        self._active_lines = tuple(b"\n" + key for key in self._active_keys)
        self._usage_name = "memory.current" if self._v2 else "memory.usage_in_bytes"
        self._limit_name = "memory.max" if self._v2 else "memory.limit_in_bytes"
        inactive_name = self._inactive_key.decode().strip()

        self._node_dir = paths.node_memory_dir
        self._node_is_root = paths.node_cgroup == "/"
        self._node_mode, self.node_source, self.node_source_limited = self._describe_node(
            inactive_name
        )
        # v2 has no hierarchical limit file: the effective limit is the smallest
        # memory.max from the node cgroup up to (not including) the root.
        self._v2_limit_files: tuple[str, ...] = ()
        if self._v2 and not self._node_is_root and paths.memory_root is not None:
            parts = paths.node_cgroup.strip("/").split("/")
            self._v2_limit_files = tuple(
                f"{paths.memory_root}/{'/'.join(parts[:depth])}/memory.max"
                for depth in range(len(parts), 0, -1)
            )

        kubepods_dir = paths.kubepods_memory_dir
        self._kubepods_dir = kubepods_dir
        if kubepods_dir is not None:
            version = "v2" if self._v2 else "v1"
            self.allocatable_source = (
                f"cgroup {version} {kubepods_dir}: {self._usage_name} - {inactive_name}; "
                f"capacity {self._limit_name}"
            )
        else:
            self.allocatable_source = ""

    def _describe_node(self, inactive_name: str) -> tuple[_NodeMode, str, str]:
        """How the node's working set is read: (mode, source, source when the cgroup's
        own limit is the capacity)."""
        node_dir = self._node_dir
        meminfo_formula = (
            f"{self.meminfo_path}: AnonPages + Buffers + Cached + SwapCached - Inactive(file)"
        )
        if node_dir is None:
            mode = _NodeMode.MEMINFO if self._node_is_root else _NodeMode.MISSING
            source = f"{meminfo_formula} (no cgroup memory controller); capacity MemTotal"
            return mode, source, source
        if self._node_is_root and self._v2:
            if os.path.exists(f"{node_dir}/memory.stat"):
                source = (
                    f"cgroup v2 {node_dir}/memory.stat: anon + file - inactive_file; "
                    "capacity MemTotal"
                )
                return _NodeMode.V2_ROOT, source, source
            source = f"{meminfo_formula} (the cgroup v2 root has no memory.stat); capacity MemTotal"
            return _NodeMode.MEMINFO, source, source
        version = "v2" if self._v2 else "v1"
        formula = f"cgroup {version} {node_dir}: {self._usage_name} - {inactive_name}"
        if self._node_is_root:
            return (
                _NodeMode.CGROUP,
                f"{formula}; capacity MemTotal",
                f"{formula}; capacity MemTotal",
            )
        return (
            _NodeMode.CGROUP,
            f"{formula}; capacity MemTotal (the cgroup has no lower memory limit)",
            f"{formula}; capacity the cgroup's memory limit",
        )

    @property
    def node_needs_meminfo(self) -> bool:
        """Whether :meth:`node` needs more of /proc/meminfo than ``MemTotal`` (which a
        fast re-read may take from the last full read: it changes only on hotplug)."""
        return self._node_mode is _NodeMode.MEMINFO

    # -- /proc/meminfo --------------------------------------------------------------------

    def meminfo(self, reader: FileReader) -> dict[str, int]:
        data = read_checked(reader, self.meminfo_path)
        try:
            values = parse.parse_meminfo(data, MEMINFO_KEYS)
        except ValueError as exc:
            raise SignalReadError(f"cannot parse {self.meminfo_path}: {exc}") from exc
        if "MemTotal" not in values:
            raise SignalReadError(f"{self.meminfo_path} has no MemTotal line")
        return values

    @staticmethod
    def swap(meminfo: dict[str, int]) -> SignalValue | None:
        """Swap free out of total, or ``None`` when the node has no swap."""
        total = meminfo.get("SwapTotal", 0)
        if total <= 0:
            return None
        return SignalValue(
            available=meminfo.get("SwapFree", 0), capacity=total, source="/proc/meminfo"
        )

    # -- memory.available -------------------------------------------------------------------

    def node(self, reader: FileReader, meminfo: dict[str, int]) -> SignalValue:
        return self.node_reading(reader, meminfo)[0]

    def node_reading(
        self, reader: FileReader, meminfo: dict[str, int]
    ) -> tuple[SignalValue, int | None]:
        """``memory.available``, and the node cgroup's clean active page cache when the
        reader was made to read it (else ``None``), from the same reads."""
        mem_total = meminfo["MemTotal"]
        mode = self._node_mode
        active: int | None = None
        if mode is _NodeMode.CGROUP:
            assert self._node_dir is not None
            usage = _read_int(reader, f"{self._node_dir}/{self._usage_name}")
            stat_path = f"{self._node_dir}/memory.stat"
            stat = read_checked(reader, stat_path)
            inactive = _optional_stat_key(stat, self._inactive_key, stat_path)
            limit = None if self._node_is_root else self._node_limit(reader, stat, stat_path)
            ws = working_set(usage, inactive)
            if limit is None or limit >= mem_total:
                capacity, source = mem_total, self.node_source
            else:
                capacity, source = limit, self.node_source_limited
            active = self._stat_active(stat, stat_path)
        elif mode is _NodeMode.V2_ROOT:
            assert self._node_dir is not None
            stat_path = f"{self._node_dir}/memory.stat"
            stat = read_checked(reader, stat_path)
            usage = _stat_key(stat, b"anon ", stat_path) + _stat_key(stat, b"file ", stat_path)
            ws = working_set(usage, _optional_stat_key(stat, _V2_INACTIVE, stat_path))
            capacity, source = mem_total, self.node_source
            active = self._stat_active(stat, stat_path)
        elif mode is _NodeMode.MEMINFO:
            missing = [key for key in _MEMINFO_WORKING_SET_KEYS if key not in meminfo]
            if missing:
                raise SignalReadError(f"{self.meminfo_path} lacks {', '.join(missing)}")
            anon, buffers, cached, swap_cached, inactive = (
                meminfo[key] for key in _MEMINFO_WORKING_SET_KEYS
            )
            ws = working_set(anon + buffers + cached + swap_cached, inactive)
            capacity, source = mem_total, self.node_source
            if self.reads_active_file and "Active(file)" in meminfo:
                active = clean_active_file(
                    meminfo["Active(file)"], meminfo.get("Dirty", 0), meminfo.get("Writeback", 0)
                )
        else:
            raise SignalReadError(
                f"node cgroup {self.paths.node_cgroup} needs a cgroup memory controller, "
                f"and none was found under {self.paths.mount}"
            )
        value = SignalValue(available=max(capacity - ws, 0), capacity=capacity, source=source)
        return value, active

    def _stat_active(self, stat: bytes, stat_path: str) -> int | None:
        """The clean active page cache in a ``memory.stat``, when asked for and present."""
        if not self.reads_active_file:
            return None
        active, dirty, writeback = (
            _optional_stat_key(stat, key, stat_path) for key in self._active_keys
        )
        if active is None:
            return None
        return clean_active_file(active, dirty or 0, writeback or 0)

    def _node_limit(self, reader: FileReader, stat: bytes, stat_path: str) -> int | None:
        if not self._v2:
            # Includes the ancestors' limits, which bound this cgroup too.
            limit = _optional_stat_key(stat, b"hierarchical_memory_limit ", stat_path)
            return None if limit is None or limit > parse.UNLIMITED_THRESHOLD else limit
        limits = [_read_limit(reader, path) for path in self._v2_limit_files]
        finite = [limit for limit in limits if limit is not None]
        return min(finite) if finite else None

    # -- allocatableMemory.available ------------------------------------------------------

    def allocatable(self, reader: FileReader) -> Observation:
        return self.allocatable_reading(reader)[0]

    def allocatable_reading(self, reader: FileReader) -> tuple[Observation, int | None]:
        """``allocatableMemory.available``, and kubepods' clean active page cache when the
        reader was made to read it (else ``None``), from the same reads."""
        directory = self._kubepods_dir
        if directory is None:
            return Unavailable(missing_kubepods_reason(self.paths)), None
        limit = _read_limit(reader, f"{directory}/{self._limit_name}")
        if limit is None:
            # The kubelet makes no observation either (its summary has no ``availableBytes``).
            reason = f"{directory} has no memory limit ({self._limit_name} unlimited)"
            return Unavailable(reason), None
        usage = _read_int(reader, f"{directory}/{self._usage_name}")
        stat_path = f"{directory}/memory.stat"
        stat = read_checked(reader, stat_path)
        ws = working_set(usage, _optional_stat_key(stat, self._inactive_key, stat_path))
        value = SignalValue(
            available=max(limit - ws, 0), capacity=limit, source=self.allocatable_source
        )
        return value, self._stat_active(stat, stat_path)

    # -- pods -------------------------------------------------------------------------------

    def pod_working_set(self, reader: FileReader, pod: PodCgroup) -> int:
        """The pod cgroup's working set. Raises :class:`OSError`/:class:`ValueError`
        untranslated: this is the hot path, and a vanished pod is routine."""
        usage = int(reader.read(pod.usage_file))
        stat = reader.read(pod.stat_file)
        # parse.stat_value, inlined: the key is never on the first line of memory.stat.
        start = stat.find(self._inactive_line)
        if start < 0:
            return usage
        start += len(self._inactive_line)
        end = stat.find(b"\n", start)
        inactive = int(stat[start:end] if end >= 0 else stat[start:])
        return usage - inactive if usage > inactive else 0

    def pod_memory(self, reader: FileReader, pod: PodCgroup) -> tuple[int, int]:
        """The pod cgroup's working set and its clean active page cache, from one read of
        each file. Raises like :meth:`pod_working_set`."""
        usage = int(reader.read(pod.usage_file))
        stat = reader.read(pod.stat_file)
        inactive, active, dirty, writeback = (
            _line_value(stat, line) for line in (self._inactive_line, *self._active_lines)
        )
        return working_set(usage, inactive), clean_active_file(
            active or 0, dirty or 0, writeback or 0
        )


def _line_value(stat: bytes, line: bytes) -> int | None:
    """The value on the line starting ``line`` (``b"\\nkey "``), for keys that are never
    on the first line of ``memory.stat``."""
    start = stat.find(line)
    if start < 0:
        return None
    start += len(line)
    end = stat.find(b"\n", start)
    return int(stat[start:end] if end >= 0 else stat[start:])
