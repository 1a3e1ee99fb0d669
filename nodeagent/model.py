"""The agent's shared vocabulary: what is observed, about whom, and what is decided.

Every stage of the agent speaks in these values, which is what lets each stage be
tested alone:

    signals (readers)  ->  NodeObservations  ->  eviction engine  ->  Decision  ->  actuators

The readers in :mod:`nodeagent.signals` produce a :class:`NodeObservations` (one per
collection); a trace line replayed by ``nodeagent simulate`` produces the same value;
the engine turns it, together with the pods' specs (:class:`PodInfo`), prior state and
``now``, into a :class:`Decision` that the actuators apply.

Names follow the kubelet so that an operator's vocabulary carries over: signal names are
spelled exactly as in ``--eviction-hard`` and the KubeletConfiguration, usage keys as in
the kubelet Summary API.

All values are frozen: a collection is a snapshot, and nothing downstream may edit it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NewType

from nodeagent.k8s.pods import QOSClass
from nodeagent.k8s.pressure import Pressure, Taint
from nodeagent.k8s.quantities import QuantityFormat

PodUID = NewType("PodUID", str)
"""A pod's ``metadata.uid``; the join key between cgroup usage and API objects."""


class Signal(StrEnum):
    """Eviction signals, spelled as the kubelet spells them.

    Every signal is an amount *available* with a *capacity*; thresholds on them fire
    when available drops below the threshold.
    """

    MEMORY_AVAILABLE = "memory.available"
    ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
    NODEFS_AVAILABLE = "nodefs.available"
    NODEFS_INODES_FREE = "nodefs.inodesFree"
    IMAGEFS_AVAILABLE = "imagefs.available"
    IMAGEFS_INODES_FREE = "imagefs.inodesFree"
    CONTAINERFS_AVAILABLE = "containerfs.available"
    CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
    PID_AVAILABLE = "pid.available"
    # Beyond the kubelet: PSI stall shares (percent of wall time, from the node cgroup's
    # *.pressure file when present, else /proc/pressure). Thresholds on them fire when the
    # stall rises *above* the threshold; see docs/eviction.md.
    MEMORY_PRESSURE_SOME_AVG10 = "memory.pressure.some.avg10"
    MEMORY_PRESSURE_SOME_AVG60 = "memory.pressure.some.avg60"
    MEMORY_PRESSURE_SOME_AVG300 = "memory.pressure.some.avg300"
    MEMORY_PRESSURE_FULL_AVG10 = "memory.pressure.full.avg10"
    MEMORY_PRESSURE_FULL_AVG60 = "memory.pressure.full.avg60"
    MEMORY_PRESSURE_FULL_AVG300 = "memory.pressure.full.avg300"
    IO_PRESSURE_SOME_AVG10 = "io.pressure.some.avg10"
    IO_PRESSURE_SOME_AVG60 = "io.pressure.some.avg60"
    IO_PRESSURE_SOME_AVG300 = "io.pressure.some.avg300"
    IO_PRESSURE_FULL_AVG10 = "io.pressure.full.avg10"
    IO_PRESSURE_FULL_AVG60 = "io.pressure.full.avg60"
    IO_PRESSURE_FULL_AVG300 = "io.pressure.full.avg300"


CLEAN_ACTIVE_FILE = "clean active_file"
"""How a memory observation that counts the clean active page cache as available says so
in its source."""


class LocalStorageLimit(StrEnum):
    """The local ephemeral-storage limits the kubelet enforces every cycle, apart from any
    threshold (``localStorageCapacityIsolation``); spelled as the kubelet's eviction
    metric labels, they stand where a signal would in an eviction."""

    EMPTY_DIR = "emptydirfs.limit"
    """An emptyDir volume used more than its ``sizeLimit``."""
    POD = "ephemeralpodfs.limit"
    """The pod used more than its pod-level ``ephemeral-storage`` limit."""
    CONTAINER = "ephemeralcontainerfs.limit"
    """A container used more than its own ``ephemeral-storage`` limit."""


EvictionSignal = Signal | LocalStorageLimit
"""Why a pod is evicted: a threshold's signal, or a local-storage limit."""


class Resource(StrEnum):
    """The resource a signal starves; used in eviction messages (``The node was low on
    resource: memory.``) and to pick the ranking."""

    MEMORY = "memory"
    EPHEMERAL_STORAGE = "ephemeral-storage"
    INODES = "inodes"
    PIDS = "pids"


SIGNAL_RESOURCE: Mapping[EvictionSignal, Resource] = {
    Signal.MEMORY_AVAILABLE: Resource.MEMORY,
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: Resource.MEMORY,
    Signal.NODEFS_AVAILABLE: Resource.EPHEMERAL_STORAGE,
    Signal.NODEFS_INODES_FREE: Resource.INODES,
    Signal.IMAGEFS_AVAILABLE: Resource.EPHEMERAL_STORAGE,
    Signal.IMAGEFS_INODES_FREE: Resource.INODES,
    Signal.CONTAINERFS_AVAILABLE: Resource.EPHEMERAL_STORAGE,
    Signal.CONTAINERFS_INODES_FREE: Resource.INODES,
    Signal.PID_AVAILABLE: Resource.PIDS,
    **{s: Resource.MEMORY for s in Signal if s.startswith("memory.pressure.")},
    **{s: Resource.EPHEMERAL_STORAGE for s in Signal if s.startswith("io.pressure.")},
    **dict.fromkeys(LocalStorageLimit, Resource.EPHEMERAL_STORAGE),
}

SIGNAL_PRESSURE: Mapping[EvictionSignal, Pressure] = {
    Signal.MEMORY_AVAILABLE: Pressure.MEMORY,
    Signal.ALLOCATABLE_MEMORY_AVAILABLE: Pressure.MEMORY,
    Signal.NODEFS_AVAILABLE: Pressure.DISK,
    Signal.NODEFS_INODES_FREE: Pressure.DISK,
    Signal.IMAGEFS_AVAILABLE: Pressure.DISK,
    Signal.IMAGEFS_INODES_FREE: Pressure.DISK,
    Signal.CONTAINERFS_AVAILABLE: Pressure.DISK,
    Signal.CONTAINERFS_INODES_FREE: Pressure.DISK,
    Signal.PID_AVAILABLE: Pressure.PID,
    **{s: Pressure.MEMORY for s in Signal if s.startswith("memory.pressure.")},
    **{s: Pressure.DISK for s in Signal if s.startswith("io.pressure.")},
    **dict.fromkeys(LocalStorageLimit, Pressure.DISK),
}


class FsLayout(StrEnum):
    """How the node's filesystems are arranged, as the kubelet's eviction manager detects it."""

    SINGLE = "single"
    """nodefs = imagefs = containerfs."""
    DEDICATED_IMAGEFS = "dedicated-imagefs"
    """Images and writable layers on imagefs; containerfs = imagefs."""
    SPLIT = "split"
    """Writable layers with nodefs (containerfs = nodefs), images alone on imagefs."""


@dataclass(frozen=True, slots=True)
class SignalValue:
    """One observation of a signal: bytes, inodes or PIDs available out of capacity."""

    available: int
    capacity: int
    source: str = ""
    """Where the figures came from (a file path, ``statvfs(/var/lib/kubelet)``...)."""

    def counting_reclaimable(self, amount: int, what: str = CLEAN_ACTIVE_FILE) -> SignalValue:
        """This observation with ``amount`` more available: memory the signal counted as
        used that the kernel can reclaim (``what`` names it in the source). Never past
        the capacity, never below the observation itself."""
        available = min(self.available + max(amount, 0), self.capacity)
        return SignalValue(
            available=max(available, self.available),
            capacity=self.capacity,
            source=f"{self.source}; plus {what} as available",
        )


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A signal that could not be observed this collection, and why.

    The engine treats it as "no observation": thresholds on it are never met.
    """

    reason: str


Observation = SignalValue | Unavailable


@dataclass(frozen=True, slots=True)
class PsiLine:
    """One line of a PSI file: the share of wall time stalled, in percent, and the
    cumulative stall time in microseconds."""

    avg10: float
    avg60: float
    avg300: float
    total: int


@dataclass(frozen=True, slots=True)
class PsiStats:
    """``some`` and ``full`` lines of one pressure file (``full`` is absent for the
    system-wide ``cpu`` file on older kernels)."""

    some: PsiLine
    full: PsiLine | None = None


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """One container's ephemeral storage, in bytes (``None``: no stats)."""

    rootfs: int | None = None
    """Its writable layer."""
    logs: int | None = None
    """Its log directory (every restart's files)."""


_NOTHING: Mapping[str, ContainerUsage] = MappingProxyType({})
_NO_VOLUMES: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodUsage:
    """What one pod uses on this node, keyed by UID, as the kubelet Summary API names it.

    ``None`` means "no stats" for that figure, which the kubelet's ranking treats
    specially (a pod without stats is evicted first).
    """

    uid: PodUID
    memory: int | None = None
    """Working set of the pod cgroup, in bytes (usage - inactive_file, never below 0)."""
    active_file: int | None = None
    """Of that working set, the clean active page cache (``active_file`` less dirty and
    writeback pages): what the kernel can drop without I/O although the kubelet counts it
    as used. Read only when ``activePageCache: reclaimable`` asks for it."""
    rootfs: int | None = None
    """Bytes of the containers' writable layers."""
    logs: int | None = None
    """Bytes of the containers' logs."""
    local_volumes: int | None = None
    """Bytes of the pod's local volumes (disk-backed emptyDir, hostPath)."""
    rootfs_inodes: int | None = None
    logs_inodes: int | None = None
    local_volumes_inodes: int | None = None
    processes: int | None = None
    """Processes in the pod cgroup and below (lines of ``cgroup.procs``): the kubelet's
    ``process_stats.process_count``, by which PID pressure ranks pods."""
    threads: int | None = None
    """Threads in the pod cgroup and below (``pids.current``): each takes a PID, so
    these are what exhausts ``pid_max``; reported, not ranked by."""
    containers: Mapping[str, ContainerUsage] = field(default_factory=lambda: _NOTHING)
    """Per container, by name, where known (the local-storage limit checks need it)."""
    volumes: Mapping[str, int] = field(default_factory=lambda: _NO_VOLUMES)
    """Bytes used per emptyDir volume, by volume name, memory-backed ones included (they
    count against their ``sizeLimit`` but not in ``local_volumes``)."""


@dataclass(frozen=True, slots=True)
class NodeObservations:
    """One collection of every signal on the node, at one instant.

    ``time`` is seconds on the agent's clock (monotonic in the agent, trace time in a
    replay); the engine uses it for grace and transition periods.
    """

    time: float
    signals: Mapping[Signal, Observation]
    pods: Mapping[PodUID, PodUsage] = field(default_factory=dict)
    psi: Mapping[str, PsiStats] = field(default_factory=dict)
    """PSI by scope: ``"memory"``, ``"io"``, ``"cpu"`` for the system files in
    /proc/pressure, ``"node/memory"`` etc. for the node cgroup's files and
    ``"kubepods/memory"`` etc. for the pods' cgroup (what the pods, and only they, stall
    on)."""
    fs_layout: FsLayout = FsLayout.SINGLE
    swap: SignalValue | None = None
    """Swap free and total, when the node has swap."""
    reclaimable: Mapping[str, int] = field(default_factory=dict)
    """What node-level reclaim could free, when known: ``"containers"`` / ``"images"``
    (bytes held by dead containers / unused images) and ``"containersInodes"`` /
    ``"imagesInodes"``. The engine skips pod eviction when these would end the pressure."""

    sampled_at: Mapping[Signal, float] = field(default_factory=dict)
    """When each signal in ``signals`` carried over from an earlier read was read (a
    poll re-reads only the signals it is for, e.g. the filesystem poll only statvfs);
    a signal not listed was read at ``time``. The engine acts only on a signal sampled
    after the one it last judged, as the kubelet compares each signal's own time."""
    psi_sampled_at: float | None = None
    """When ``psi`` was read, if earlier than ``time``."""
    active_file: Mapping[Signal, int] = field(default_factory=dict)
    """Per memory signal, the clean active page cache of the cgroup it is read from
    (``active_file`` less dirty and writeback pages), which the kubelet's working set
    counts as used. Read only when ``activePageCache: reclaimable`` asks for it."""
    active_file_counted: bool = False
    """Whether ``signals`` and the pods' ``memory`` already count ``active_file`` as
    reclaimable (:func:`nodeagent.eviction.page_cache.view` was applied)."""

    def value(self, signal: Signal) -> SignalValue | None:
        """The observation of ``signal``, or ``None`` when it was unavailable."""
        observed = self.signals.get(signal)
        return observed if isinstance(observed, SignalValue) else None


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    """An app container of a pod spec, as far as the local-storage checks need it."""

    name: str
    ephemeral_storage_limit: int | None = None
    """Its ``limits.ephemeral-storage`` in bytes; ``None`` (or 0) when it sets none."""
    limit_format: QuantityFormat = QuantityFormat.BINARY_SI
    """How that limit was written, so a message prints it as the kubelet does."""


DISK_MEDIUM = ""
"""``emptyDir.medium`` of a volume on the node's disk (the API's default medium), the
only one the kubelet counts in a pod's local volumes (``IsLocalEphemeralVolume``); the
others (``Memory``: tmpfs, ``HugePages[-<size>]``: hugetlbfs) hold memory."""


@dataclass(frozen=True, slots=True)
class EmptyDirVolume:
    """An emptyDir volume of a pod spec."""

    name: str
    medium: str = ""
    """``""`` (the node's disk), ``Memory`` (tmpfs) or ``HugePages[-<size>]``."""
    size_limit: int | None = None
    """``sizeLimit`` in bytes, when set."""
    size_limit_format: QuantityFormat = QuantityFormat.BINARY_SI
    """How it was written (``512Mi``, ``500M``)."""


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the engine needs to know about a pod from its spec and status.

    Built from a Pod object by the agent, or from a trace line by ``simulate``.
    Resource maps use the Kubernetes resource names (``memory``, ``cpu``,
    ``ephemeral-storage``) with values in base units (bytes, millicores).
    """

    namespace: str
    name: str
    uid: PodUID
    priority: int = 0
    qos: QOSClass = QOSClass.BEST_EFFORT
    critical: bool = False
    """Priority >= 2e9 or marked critical; never evicted."""
    static: bool = False
    """A static pod (config source not the API server) or its mirror; never evicted."""
    mirror: bool = False
    daemonset: bool = False
    """Owned by a DaemonSet (evicting it only makes it come back)."""
    termination_grace_period_seconds: int = 30
    requests: Mapping[str, int] = field(default_factory=dict)
    """Effective pod requests, overhead included where the kubelet counts it."""
    limits: Mapping[str, int] = field(default_factory=dict)
    """Effective pod limits as the kubelet's ``PodLimits`` counts them: the containers'
    sum, init containers by maximum, plus overhead where a limit is set. Its
    ``ephemeral-storage`` is the pod-level local-storage limit."""
    limit_formats: Mapping[str, QuantityFormat] = field(default_factory=dict)
    """How a pod-level limit prints where it is not binary (the format of the
    container quantity the kubelet's sum took it from)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    containers: tuple[ContainerInfo, ...] = ()
    """App containers (not init containers), in spec order; from the API only those
    that set an ``ephemeral-storage`` limit (the others cannot break one)."""
    volumes: tuple[EmptyDirVolume, ...] = ()
    """emptyDir volumes, in spec order (other volume types are not listed)."""

    @property
    def key(self) -> str:
        """``namespace/name``, as events and logs name the pod."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """A node condition the agent wants on its Node object."""

    type: str
    status: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ThresholdMet:
    """A threshold whose comparison holds this cycle."""

    signal: Signal
    hard: bool
    grace_satisfied: bool
    threshold_quantity: int
    """The threshold resolved against the observed capacity."""
    available: int
    """The observed available amount."""


@dataclass(frozen=True, slots=True)
class Eviction:
    """The engine's verdict that one pod must go, and why."""

    pod: PodInfo
    signal: EvictionSignal
    grace_period_seconds: int
    message: str
    reclaim_estimate: int = 0
    """Bytes (or inodes, PIDs) this eviction is expected to free for ``signal``."""


@dataclass(frozen=True, slots=True)
class NodeReclaimResult:
    """What node-level reclaim did before a disk eviction, measured by re-reading the
    filesystems after it (the kubelet's ``reclaimNodeLevelResources``)."""

    kinds: tuple[str, ...]
    """What was reclaimed, in order: ``containers`` (dead ones), ``images`` (unused)."""
    containers_removed: int
    images_removed: int
    """In a dry run: what would have been removed."""
    bytes_reclaimed: int
    """Bytes that became available on the filesystems reclaimed."""
    seconds: float
    enough: bool
    """No threshold is met any more counting its minimum reclaim: no pod is evicted."""
    dry_run: bool
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """Everything one evaluation cycle decided, and enough to explain it.

    ``conditions`` and ``taints`` are the *desired* state the actuators converge to;
    ``evictions`` are actions to take now. ``ranked`` keeps the candidates in eviction
    order for the signal acted on, so a log line can show why a pod was chosen.
    """

    time: float
    thresholds_met: tuple[ThresholdMet, ...]
    pressure: Mapping[Pressure, bool]
    conditions: tuple[NodeCondition, ...]
    taints: tuple[Taint, ...]
    evictions: tuple[Eviction, ...]
    candidates: tuple[Eviction, ...] = ()
    """Every evictable pod for the signal acted on, in eviction order (``evictions`` is
    a prefix of it). When an eviction is refused (a PodDisruptionBudget answers 429), the
    actuator replaces that pod with the next candidate not already chosen."""
    ranked: tuple[str, ...] = ()
    """``namespace/name`` of the candidates considered, in eviction order."""
    node_reclaim: tuple[str, ...] = ()
    """Node-level reclaim the engine asks for before evicting (e.g. ``images``)."""
    node_reclaim_result: NodeReclaimResult | None = None
    """What the agent's node-level reclaim did this cycle, when it ran."""
