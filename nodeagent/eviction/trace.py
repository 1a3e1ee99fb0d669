"""Recorded traces: one JSON object per line, one evaluation cycle per line.

A line carries what the agent would have collected at that moment (the schema is in
docs/eviction.md)::

    {"time": 60, "fsLayout": "single",
     "signals": {"memory.available": {"available": 524288000, "capacity": 2147483648},
                 "nodefs.available": {"unavailable": "statvfs failed"},
                 "memory.pressure.some.avg10": {"value": 25.0}},
     "psi": {"memory": {"some": {"avg10": 25.0, "avg60": 12.1, "avg300": 3.2, "total": 1}}},
     "reclaimable": {"images": 1073741824},
     "pods": [{"namespace": "default", "name": "a", "priority": 0,
               "requests": {"memory": "256Mi"}, "limits": {"memory": "1Gi"},
               "usage": {"memory": 536870912, "rootfs": 0, "logs": 0}}]}

Parsing is strict (an unknown key is an error naming the line and the key, so a typo
never silently changes a replay) and produces the same values the agent's collector
does: :class:`~nodeagent.model.NodeObservations` and :class:`~nodeagent.model.PodInfo`.
A pod's QoS class is derived from its requests and limits when the line does not give
it, and its RuntimeClass ``overhead`` is added to its requests, as the kubelet counts it
when ranking. A usage key that is absent means "no stats" for that figure.
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

from nodeagent.errors import NodeAgentError
from nodeagent.eviction import units
from nodeagent.eviction.thresholds import PSI_CAPACITY, PSI_SIGNALS
from nodeagent.model import (
    FsLayout,
    NodeObservations,
    Observation,
    PodInfo,
    PodUID,
    PodUsage,
    PsiLine,
    PsiStats,
    QOSClass,
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
    rootfs: NonNegativeInt | None = None
    logs: NonNegativeInt | None = None
    local_volumes: NonNegativeInt | None = None
    rootfs_inodes: NonNegativeInt | None = None
    logs_inodes: NonNegativeInt | None = None
    local_volumes_inodes: NonNegativeInt | None = None
    processes: NonNegativeInt | None = None


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
        return self


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


def _seconds(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _sample(parsed: _Line, line: int) -> TraceSample:
    signals: dict[Signal, Observation] = {}
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
                limits=dict(pod.limits),
                labels=dict(pod.labels),
            )
        )
        if pod.usage is not None:
            usage[uid] = PodUsage(uid=uid, **pod.usage.model_dump())
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
    )
    return TraceSample(line=line, observations=observations, pods=tuple(pods))
