"""Recorded traces: one JSON object per line, one evaluation cycle per line.

A line carries what the agent would have collected at that moment (the schema is in
docs/eviction.md)::

    {"time": 60, "fsLayout": "single",
     "signals": {"memory.available": {"available": 524288000, "capacity": 2147483648,
                                      "activeFile": 268435456},
                 "nodefs.available": {"unavailable": "statvfs failed"},
                 "memory.pressure.some.avg10": {"value": 25.0}},
     "psi": {"memory": {"some": {"avg10": 25.0, "avg60": 12.1, "avg300": 3.2, "total": 1}}},
     "reclaimable": {"images": 1073741824},
     "pods": [{"namespace": "default", "name": "a", "priority": 0,
               "requests": {"memory": "256Mi"}, "limits": {"memory": "1Gi"},
               "usage": {"memory": 536870912, "activeFile": 0, "rootfs": 0, "logs": 0},
               "containers": [{"name": "app", "limits": {"ephemeral-storage": "1Gi"},
                               "usage": {"rootfs": 0, "logs": 0}}],
               "volumes": [{"name": "scratch",
                            "emptyDir": {"medium": "", "sizeLimit": "512Mi"},
                            "usage": 0}]}]}

Parsing is strict (an unknown key is an error naming the line and the key, so a typo
never silently changes a replay) and produces the same values the agent's collector
does: :class:`~nodeagent.model.NodeObservations` and :class:`~nodeagent.model.PodInfo`.
A pod's QoS class is derived from its requests and limits when the line does not give
it, and its RuntimeClass ``overhead`` is added to its requests, as the kubelet counts it
when ranking. A usage key that is absent means "no stats" for that figure.

``containers`` and ``volumes`` (both optional) feed the local-storage limit checks. The
pod-level ``ephemeral-storage`` limit is the pod's ``limits`` entry when given (the
trace's producer computed it as the kubelet does), else the sum of its containers'
limits plus any ``ephemeral-storage`` overhead. Where the pod's own ``usage.rootfs`` /
``usage.logs`` are absent they are its containers' sums, and ``usage.localVolumes``
defaults to the usage of its disk-backed emptyDir volumes.

``activeFile`` (a memory signal's, a pod's usage) is the clean active page cache, which
only ``activePageCache: reclaimable`` reads (:mod:`nodeagent.eviction.page_cache`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    FiniteFloat,
    NonNegativeInt,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from nodeagent.base.errors import NodeAgentError
from nodeagent.eviction.thresholds import PSI_CAPACITY, PSI_SIGNALS
from nodeagent.k8s import quantities as units
from nodeagent.k8s.pods import QOSClass
from nodeagent.model import (
    DISK_MEDIUM,
    ContainerInfo,
    ContainerUsage,
    EmptyDirVolume,
    FsLayout,
    NodeObservations,
    Observation,
    PodInfo,
    PodUID,
    PodUsage,
    PsiLine,
    PsiStats,
    Resource,
    Signal,
    SignalValue,
    Unavailable,
)

__all__ = ["TraceError", "TraceSample", "derive_qos", "parse_trace", "parse_trace_line"]


class TraceError(NodeAgentError):
    """A trace line that cannot be replayed; the message names the line and the problem."""


@dataclass(frozen=True, slots=True)
class TraceSample:
    """One trace line, as the engine's inputs."""

    line: int
    observations: NodeObservations
    pods: tuple[PodInfo, ...]


def _amounts(value: Any) -> Any:
    """Resource maps take whole base units or quantity strings (``256Mi``; for cpu,
    ``500m`` is 500 millicores)."""
    if not isinstance(value, Mapping):
        return value
    amounts = {}
    for name, amount in value.items():
        if not isinstance(amount, str):
            amounts[name] = amount
            continue
        try:
            exact, _ = units.parse_exact_quantity(amount)
        except units.UnitError as exc:
            raise ValueError(f"{name}: {exc}") from None
        amounts[name] = math.ceil(exact * 1000 if name == "cpu" else exact)
    return amounts


ResourceAmounts = Annotated[dict[str, NonNegativeInt], BeforeValidator(_amounts)]


def _amount(value: Any) -> Any:
    """One amount in bytes: a whole number or a quantity string."""
    if isinstance(value, str):
        return _amounts({"amount": value})["amount"]
    return value


class _Strict(BaseModel):
    # strict: no silent coercion (``true`` is not 1, ``1.5`` is not a byte count).
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True, strict=True
    )


class _Signal(_Strict):
    available: int | None = None
    capacity: NonNegativeInt | None = None
    value: float | None = Field(default=None, ge=0, le=100)
    unavailable: str | None = None
    active_file: NonNegativeInt | None = None
    """Memory signals: the clean active page cache of their cgroup."""

    @model_validator(mode="after")
    def _one_shape(self) -> _Signal:
        shapes = (
            self.available is not None and self.capacity is not None,
            self.value is not None,
            self.unavailable is not None,
        )
        mixed = self.value is not None and (self.available, self.capacity) != (None, None)
        if sum(shapes) != 1 or mixed or (self.available is None) != (self.capacity is None):
            raise ValueError(
                'give {"available": N, "capacity": N}, {"value": PERCENT} (PSI signals) '
                'or {"unavailable": "reason"}'
            )
        if (self.available or 0) > (self.capacity or 0):
            raise ValueError(
                f"available {self.available} exceeds capacity {self.capacity} "
                f"(capacity is the whole: available plus used)"
            )
        return self


class _PsiLine(_Strict):
    avg10: float = Field(default=0.0, ge=0, le=100)
    avg60: float = Field(default=0.0, ge=0, le=100)
    avg300: float = Field(default=0.0, ge=0, le=100)
    total: NonNegativeInt = 0


class _Psi(_Strict):
    some: _PsiLine
    full: _PsiLine | None = None


class _Usage(_Strict):
    memory: NonNegativeInt | None = None
    active_file: NonNegativeInt | None = None
    rootfs: NonNegativeInt | None = None
    logs: NonNegativeInt | None = None
    local_volumes: NonNegativeInt | None = None
    rootfs_inodes: NonNegativeInt | None = None
    logs_inodes: NonNegativeInt | None = None
    local_volumes_inodes: NonNegativeInt | None = None
    processes: NonNegativeInt | None = None


class _ContainerUsage(_Strict):
    rootfs: NonNegativeInt | None = None
    logs: NonNegativeInt | None = None


class _Container(_Strict):
    name: str = Field(min_length=1)
    limits: ResourceAmounts = Field(default_factory=dict)
    usage: _ContainerUsage | None = None


_MEDIUM = r"^(|Memory|HugePages(-[0-9]+[A-Za-z]*)?)$"


class _EmptyDir(_Strict):
    medium: str = Field(default="", pattern=_MEDIUM)
    size_limit: Annotated[NonNegativeInt | None, BeforeValidator(_amount)] = None


class _Volume(_Strict):
    name: str = Field(min_length=1)
    empty_dir: _EmptyDir | None = None
    usage: NonNegativeInt | None = None
    """Bytes used."""


class _Pod(_Strict):
    namespace: str = "default"
    name: str
    uid: str | None = None
    priority: int = 0
    qos: QOSClass | None = None
    critical: bool = False
    static: bool = False
    mirror: bool = False
    daemonset: bool = False
    termination_grace_period_seconds: NonNegativeInt = 30
    requests: ResourceAmounts = Field(default_factory=dict)
    limits: ResourceAmounts = Field(default_factory=dict)
    overhead: ResourceAmounts = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    usage: _Usage | None = None
    containers: list[_Container] = Field(default_factory=list)
    volumes: list[_Volume] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names_unique(self) -> _Pod:
        for kind, names in (
            ("container", [c.name for c in self.containers]),
            ("volume", [v.name for v in self.volumes]),
        ):
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise ValueError(f"{kind} {twice[0]!r} listed twice")
        return self


class _Line(_Strict):
    time: FiniteFloat
    fs_layout: FsLayout = FsLayout.SINGLE
    signals: dict[Signal, _Signal] = Field(default_factory=dict)
    psi: dict[str, _Psi] = Field(default_factory=dict)
    reclaimable: dict[str, NonNegativeInt] = Field(default_factory=dict)
    pods: list[_Pod] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_only_for_psi(self) -> _Line:
        for signal, observed in self.signals.items():
            if observed.value is not None and signal not in PSI_SIGNALS:
                raise ValueError(
                    f"{signal}: only PSI signals take a value; this one needs available, capacity"
                )
            if observed.available is not None and signal in PSI_SIGNALS:
                raise ValueError(f'{signal}: give the stall as {{"value": PERCENT}}')
            if observed.active_file is not None and (
                signal not in _MEMORY_SIGNALS or observed.available is None
            ):
                raise ValueError(
                    f"{signal}: only memory.available and allocatableMemory.available, observed"
                    " with available and capacity, take activeFile"
                )
        return self


_MEMORY_SIGNALS = frozenset({Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE})


def derive_qos(requests: Mapping[str, int], limits: Mapping[str, int]) -> QOSClass:
    """The QoS class from pod-level cpu/memory requests and limits: BestEffort with none,
    Guaranteed when both are limited and every request equals its limit (an unset
    request defaults to the limit, as the API server does), Burstable otherwise."""
    compute = ("cpu", "memory")
    if not any(requests.get(name) for name in compute) and not any(
        limits.get(name) for name in compute
    ):
        return QOSClass.BEST_EFFORT
    guaranteed = all(
        limits.get(name) and requests.get(name, limits[name]) == limits[name] for name in compute
    )
    return QOSClass.GUARANTEED if guaranteed else QOSClass.BURSTABLE


def parse_trace_line(text: str, line: int) -> TraceSample:
    """Parse one JSON line (``line`` is its 1-based number, for messages)."""
    try:
        parsed = _Line.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'line'}: {error['msg']}"
            for error in exc.errors()
        )
        raise TraceError(f"trace line {line}: {problems}") from None
    return _sample(parsed, line)


def parse_trace(lines: Iterable[str]) -> Iterator[TraceSample]:
    """The samples of a whole trace, lazily; blank lines are skipped. Lines must come in
    time order (equal times are allowed: a repeated sample is a stale one)."""
    previous: TraceSample | None = None
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        sample = parse_trace_line(text, number)
        if previous is not None and sample.observations.time < previous.observations.time:
            raise TraceError(
                f"trace line {number}: time {_seconds(sample.observations.time)} is earlier "
                f"than the previous line's {_seconds(previous.observations.time)} "
                f"(one line per evaluation cycle, in time order)"
            )
        previous = sample
        yield sample


_EPHEMERAL_STORAGE = Resource.EPHEMERAL_STORAGE.value


def _pod_usage(uid: PodUID, pod: _Pod) -> PodUsage | None:
    """The pod's usage record: as given, with the defaults its containers and volumes
    imply (see the module docstring); ``None`` when the line says nothing of its usage."""
    containers = {
        c.name: ContainerUsage(c.usage.rootfs, c.usage.logs)
        for c in pod.containers
        if c.usage is not None
    }
    volumes = {v.name: v.usage for v in pod.volumes if v.usage is not None}
    if pod.usage is None and not containers and not volumes:
        return None
    fields = pod.usage.model_dump() if pod.usage is not None else {}
    for name in ("rootfs", "logs"):
        if fields.get(name) is None:
            fields[name] = _sum(getattr(c, name) for c in containers.values())
    if fields.get("local_volumes") is None:
        fields["local_volumes"] = _sum(
            v.usage
            for v in pod.volumes
            if v.empty_dir is not None and v.empty_dir.medium == DISK_MEDIUM
        )
    return PodUsage(uid=uid, containers=containers, volumes=volumes, **fields)


def _sum(values: Iterable[int | None]) -> int | None:
    """The sum of the known values; ``None`` (no stats) when none is known."""
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _seconds(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _sample(parsed: _Line, line: int) -> TraceSample:
    signals: dict[Signal, Observation] = {}
    active_file = {
        signal: observed.active_file
        for signal, observed in parsed.signals.items()
        if observed.active_file is not None
    }
    for signal, observed in parsed.signals.items():
        if observed.unavailable is not None:
            signals[signal] = Unavailable(observed.unavailable)
        elif observed.value is not None:
            stalled = min(round(observed.value * 100), PSI_CAPACITY)
            signals[signal] = SignalValue(PSI_CAPACITY - stalled, PSI_CAPACITY, source="trace")
        else:
            assert observed.available is not None and observed.capacity is not None
            signals[signal] = SignalValue(observed.available, observed.capacity, source="trace")
    pods = []
    usage = {}
    seen: set[PodUID] = set()
    for pod in parsed.pods:
        uid = PodUID(pod.uid or f"{pod.namespace}/{pod.name}")
        if uid in seen:
            raise TraceError(f"trace line {line}: pod {pod.namespace}/{pod.name} listed twice")
        seen.add(uid)
        requests = dict(pod.requests)
        for name, amount in pod.overhead.items():
            if amount:
                requests[name] = requests.get(name, 0) + amount
        limits = dict(pod.limits)
        storage_limits = [
            c.limits[_EPHEMERAL_STORAGE] for c in pod.containers if _EPHEMERAL_STORAGE in c.limits
        ]
        if _EPHEMERAL_STORAGE not in limits and storage_limits:
            limits[_EPHEMERAL_STORAGE] = sum(storage_limits) + pod.overhead.get(
                _EPHEMERAL_STORAGE, 0
            )
        pods.append(
            PodInfo(
                namespace=pod.namespace,
                name=pod.name,
                uid=uid,
                priority=pod.priority,
                qos=pod.qos or derive_qos(pod.requests, pod.limits),
                critical=pod.critical,
                static=pod.static,
                mirror=pod.mirror,
                daemonset=pod.daemonset,
                termination_grace_period_seconds=pod.termination_grace_period_seconds,
                requests=requests,
                limits=limits,
                labels=dict(pod.labels),
                containers=tuple(
                    ContainerInfo(c.name, c.limits.get(_EPHEMERAL_STORAGE)) for c in pod.containers
                ),
                volumes=tuple(
                    EmptyDirVolume(v.name, v.empty_dir.medium, v.empty_dir.size_limit)
                    for v in pod.volumes
                    if v.empty_dir is not None
                ),
            )
        )
        record = _pod_usage(uid, pod)
        if record is not None:
            usage[uid] = record
    observations = NodeObservations(
        time=parsed.time,
        signals=signals,
        pods=usage,
        psi={
            scope: PsiStats(
                some=PsiLine(**stats.some.model_dump()),
                full=None if stats.full is None else PsiLine(**stats.full.model_dump()),
            )
            for scope, stats in parsed.psi.items()
        },
        fs_layout=parsed.fs_layout,
        reclaimable=dict(parsed.reclaimable),
        active_file=active_file,
    )
    return TraceSample(line=line, observations=observations, pods=tuple(pods))
