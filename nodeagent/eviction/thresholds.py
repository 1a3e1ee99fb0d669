"""Eviction thresholds: the kubelet's statements parsed into values, and their arithmetic.

A threshold is ``signal < value`` (``memory.available<500Mi``, ``nodefs.available<10%``),
optionally with a grace period (a *soft* threshold; grace 0 means *hard*) and a minimum
reclaim that keeps it active until the signal recovers past ``value + min_reclaim``.
Parsing follows the kubelet's ``ParseThresholdConfig`` rule for rule, including its error
texts, its defaults and its silent cases (``0%`` and ``100%`` drop a statement), so a
kubelet configuration means the same thing here. See the kubelet's ``thresholdsMet`` and
docs/eviction.md.

Beyond the kubelet, PSI signals (``memory.pressure.some.avg10`` ...) take ``>``: they
fire when the share of stalled time rises above a percentage. To keep one comparison for
every signal, a PSI observation is expressed as *unstalled* time in hundredths of a
percent (``available = 10000 - stall``, ``capacity = 10000``) and a PSI threshold ``> t``
resolves to ``available < 10000 - t``; min reclaim then means "until the stall falls
``min_reclaim`` below the threshold".

Everything here is pure and raises :class:`ThresholdError` (a ``ValueError`` naming the
configuration field) on bad input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from enum import StrEnum

from nodeagent.base import durations
from nodeagent.k8s import quantities as units
from nodeagent.model import FsLayout, Signal, SignalValue

__all__ = [
    "DEFAULT_EVICTION_HARD",
    "PSI_CAPACITY",
    "PSI_SIGNALS",
    "Operator",
    "Percentage",
    "Quantity",
    "StallPercent",
    "Threshold",
    "ThresholdError",
    "ThresholdStatements",
    "ThresholdValue",
    "build_threshold_config",
    "check_stall_reclaim",
    "derive_containerfs_thresholds",
    "is_met",
    "parse_flag_map",
    "parse_grace_periods",
    "parse_minimum_reclaims",
    "parse_signal",
    "parse_threshold_config",
    "parse_threshold_statement",
    "parse_threshold_statements",
    "reclaim_quantity",
    "resolve",
    "threshold_quantity",
]

PSI_SIGNALS: frozenset[Signal] = frozenset(s for s in Signal if ".pressure." in s)
"""Signals read from PSI, compared with ``>``."""

PSI_CAPACITY = 10_000
"""A PSI observation's capacity: 100% in hundredths of a percent."""


class Operator(StrEnum):
    LESS_THAN = "LessThan"
    GREATER_THAN = "GreaterThan"


@dataclass(frozen=True, slots=True)
class Quantity:
    """An absolute amount: bytes, inodes or PIDs."""

    value: int
    format: units.QuantityFormat = units.QuantityFormat.BINARY_SI
    """How the user wrote it, which is how the kubelet prints it in messages."""

    def __str__(self) -> str:
        return units.format_quantity(self.value, self.format)


@dataclass(frozen=True, slots=True)
class Percentage:
    """A fraction of the signal's capacity, float32-exact as the kubelet stores it."""

    fraction: float

    def __str__(self) -> str:
        # Enough digits for every percent the property returns, so the text parses back.
        return f"{self.percent:.12g}%"

    @property
    def percent(self) -> float:
        """The shortest percentage that parses back to this fraction (15, not 15.000001)."""
        target = units.float32(self.fraction)
        for digits in range(10):
            candidate = round(self.fraction * 100, digits)
            if units.float32(units.float32(candidate) / 100) == target:
                return candidate
        return self.fraction * 100


@dataclass(frozen=True, slots=True)
class StallPercent:
    """A PSI stall share in hundredths of a percent (2050 = 20.5%)."""

    hundredths: int

    def __str__(self) -> str:
        return f"{self.hundredths / 100:g}%"


ThresholdValue = Quantity | Percentage | StallPercent

ThresholdStatements = Mapping[Signal, ThresholdValue | None]
"""``evictionHard`` or ``evictionSoft`` parsed: the value per signal, ``None`` where the
kubelet drops the statement (exactly ``0%`` or ``100%``; kept so that it still overrides
a default)."""

DEFAULT_EVICTION_HARD: ThresholdStatements = {
    Signal.MEMORY_AVAILABLE: Quantity(100 << 20),
    Signal.NODEFS_AVAILABLE: Percentage(units.parse_percentage("10%")),
    Signal.NODEFS_INODES_FREE: Percentage(units.parse_percentage("5%")),
    Signal.IMAGEFS_AVAILABLE: Percentage(units.parse_percentage("15%")),
    Signal.IMAGEFS_INODES_FREE: Percentage(units.parse_percentage("5%")),
}
"""The kubelet's Linux default ``evictionHard`` (v1.33+, with ``imagefs.inodesFree``):
``memory.available<100Mi, nodefs.available<10%, nodefs.inodesFree<5%,
imagefs.available<15%, imagefs.inodesFree<5%``."""


@dataclass(frozen=True, slots=True)
class Threshold:
    """One configured (or derived) threshold; equal thresholds are the same threshold."""

    signal: Signal
    value: ThresholdValue
    grace_period: float = 0.0
    """Seconds the threshold must hold before it is acted on; 0 = hard."""
    min_reclaim: ThresholdValue | None = None
    derived_from: Signal | None = field(default=None, compare=False)
    """The configured signal this copy was made from (allocatable memory, containerfs)."""

    @property
    def operator(self) -> Operator:
        return Operator.GREATER_THAN if self.signal in PSI_SIGNALS else Operator.LESS_THAN

    @property
    def hard(self) -> bool:
        """The kubelet's rule: hard iff the grace period is zero (so a soft threshold
        configured with ``0s`` behaves as hard)."""
        return self.grace_period == 0

    def describe(self) -> str:
        """``memory.available<500Mi`` / ``memory.pressure.some.avg10>20%``."""
        return f"{self.signal}{'>' if self.operator is Operator.GREATER_THAN else '<'}{self.value}"


class ThresholdError(ValueError):
    """A threshold statement the kubelet would refuse; ``field`` is the config field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


# --- arithmetic ---------------------------------------------------------------------------


def resolve(value: ThresholdValue, capacity: int) -> int:
    """The amount a value stands for against ``capacity``.

    Percentages: float64 product of the float32 fraction, truncated, as the kubelet does.
    """
    if isinstance(value, Quantity):
        return value.value
    if isinstance(value, Percentage):
        return int(capacity * value.fraction)
    return value.hundredths


def threshold_quantity(threshold: Threshold, capacity: int) -> int:
    """The threshold in the signal's *available* units: met iff ``available < it``."""
    amount = resolve(threshold.value, capacity)
    if threshold.signal in PSI_SIGNALS:
        return capacity - amount
    return amount


def reclaim_quantity(threshold: Threshold, capacity: int) -> int:
    return 0 if threshold.min_reclaim is None else resolve(threshold.min_reclaim, capacity)


def is_met(threshold: Threshold, observed: SignalValue, *, enforce_min_reclaim: bool) -> bool:
    """Strict less-than; with ``enforce_min_reclaim`` the bar is ``threshold + min_reclaim``."""
    bar = threshold_quantity(threshold, observed.capacity)
    if enforce_min_reclaim:
        bar += reclaim_quantity(threshold, observed.capacity)
    return observed.available < bar


# --- parsing ------------------------------------------------------------------------------

_ALLOWED_SIGNALS = ", ".join(Signal)


def parse_signal(name: str, *, field: str) -> Signal:
    try:
        return Signal(name)
    except ValueError:
        raise ThresholdError(
            field, f"unsupported eviction signal {name!r} (allowed: {_ALLOWED_SIGNALS})"
        ) from None


def parse_threshold_statements(
    entries: Mapping[str, str], *, field: str
) -> dict[Signal, ThresholdValue | None]:
    """evictionHard or evictionSoft (``field``), each ``signal: value`` entry parsed."""
    statements: dict[Signal, ThresholdValue | None] = {}
    for name, text in entries.items():
        signal = parse_signal(name, field=field)
        statements[signal] = _parse_threshold_value(signal, text.strip(), field=field)
    return statements


def parse_threshold_statement(
    signal_name: str, text: str, *, field: str, grace_period: float = 0.0
) -> Threshold | None:
    """One ``signal: value`` entry of evictionHard/evictionSoft; ``None`` when the kubelet
    drops it silently (exactly ``0%`` or ``100%``)."""
    signal = parse_signal(signal_name, field=field)
    value = _parse_threshold_value(signal, text.strip(), field=field)
    return None if value is None else Threshold(signal, value, grace_period)


def _parse_threshold_value(signal: Signal, text: str, *, field: str) -> ThresholdValue | None:
    if signal in PSI_SIGNALS:
        return _parse_stall(signal, text, field=field)
    if text.endswith("%"):
        if text in ("0%", "100%"):
            return None
        fraction = _parse_percentage(signal, text, field=field)
        if fraction < 0:
            raise ThresholdError(
                field, f"eviction percentage threshold {signal} must be >= 0%: {text}"
            )
        if fraction > 1:
            raise ThresholdError(
                field, f"eviction percentage threshold {signal} must be <= 100%: {text}"
            )
        return Percentage(fraction)
    quantity = _parse_quantity(signal, text, field=field)
    if quantity.value <= 0:
        raise ThresholdError(field, f"eviction threshold {signal} must be positive: {text}")
    return quantity


def parse_grace_periods(
    entries: Mapping[str, str], *, field: str = "evictionSoftGracePeriod"
) -> dict[Signal, float]:
    """Seconds per signal; every key must be a signal even if no soft threshold uses it."""
    periods = {}
    for name, text in entries.items():
        signal = parse_signal(name, field=field)
        try:
            seconds = durations.parse_go_duration(text.strip())
        except durations.DurationError as exc:
            raise ThresholdError(
                field, f"{exc} for {signal} (durations look like 90s, 1m30s, 2h)"
            ) from None
        if seconds < 0:
            raise ThresholdError(
                field, f"invalid eviction grace period specified: {text}, must be a positive value"
            )
        periods[signal] = seconds
    return periods


def parse_minimum_reclaims(
    entries: Mapping[str, str], *, field: str = "evictionMinimumReclaim"
) -> dict[Signal, ThresholdValue]:
    reclaims: dict[Signal, ThresholdValue] = {}
    for name, raw in entries.items():
        signal = parse_signal(name, field=field)
        text = raw.strip()
        if signal in PSI_SIGNALS:
            reclaims[signal] = _parse_stall(signal, text, field=field, allow_operator=False)
        elif text.endswith("%"):
            fraction = _parse_percentage(signal, text, field=field)
            if fraction <= 0:
                raise ThresholdError(
                    field, f"eviction percentage minimum reclaim {signal} must be positive: {text}"
                )
            reclaims[signal] = Percentage(fraction)
        else:
            quantity = _parse_quantity(signal, text, field=field)
            if quantity.value < 0:
                raise ThresholdError(
                    field, f"negative eviction minimum reclaim specified for {signal}"
                )
            reclaims[signal] = quantity
    return reclaims


def parse_threshold_config(
    *,
    hard: Mapping[str, str],
    soft: Mapping[str, str],
    grace_periods: Mapping[str, str],
    minimum_reclaims: Mapping[str, str],
    enforce_pods_allocatable: bool,
) -> tuple[Threshold, ...]:
    """The kubelet's ``ParseThresholdConfig`` from the text of each field: each parsed,
    then :func:`build_threshold_config`. ``hard`` is the effective map (defaults applied)."""
    parsed_hard = parse_threshold_statements(hard, field="evictionHard")
    periods = parse_grace_periods(grace_periods)
    parsed_soft = parse_threshold_statements(soft, field="evictionSoft")
    _require_grace_periods(parsed_soft, periods)  # before any minimum reclaim error
    return build_threshold_config(
        hard=parsed_hard,
        soft=parsed_soft,
        grace_periods=periods,
        minimum_reclaims=parse_minimum_reclaims(minimum_reclaims),
        enforce_pods_allocatable=enforce_pods_allocatable,
    )


def build_threshold_config(
    *,
    hard: ThresholdStatements,
    soft: ThresholdStatements,
    grace_periods: Mapping[Signal, float],
    minimum_reclaims: Mapping[Signal, ThresholdValue],
    enforce_pods_allocatable: bool,
) -> tuple[Threshold, ...]:
    """The rest of ``ParseThresholdConfig``, on parsed fields: hard, then soft (each
    needing a grace period), min reclaim attached to every threshold of its signal, then
    the hard ``memory.available`` thresholds copied to ``allocatableMemory.available``
    when node allocatable is enforced on pods. ``hard`` is the effective map."""
    _require_grace_periods(soft, grace_periods)
    thresholds = [
        Threshold(signal, value, 0.0, minimum_reclaims.get(signal))
        for signal, value in hard.items()
        if value is not None
    ]
    thresholds += [
        Threshold(signal, value, grace_periods[signal], minimum_reclaims.get(signal))
        for signal, value in soft.items()
        if value is not None
    ]
    for threshold in thresholds:
        check_stall_reclaim(threshold.signal, threshold.value, threshold.min_reclaim)
    if enforce_pods_allocatable:
        thresholds += [
            replace(
                t,
                signal=Signal.ALLOCATABLE_MEMORY_AVAILABLE,
                derived_from=Signal.MEMORY_AVAILABLE,
            )
            for t in thresholds
            if t.signal is Signal.MEMORY_AVAILABLE and t.hard
        ]
    return tuple(_unique(thresholds))


_CONTAINERFS_SOURCES: Mapping[FsLayout, Mapping[Signal, Signal]] = {
    FsLayout.SINGLE: {
        Signal.CONTAINERFS_AVAILABLE: Signal.NODEFS_AVAILABLE,
        Signal.CONTAINERFS_INODES_FREE: Signal.NODEFS_INODES_FREE,
    },
    FsLayout.SPLIT: {
        Signal.CONTAINERFS_AVAILABLE: Signal.NODEFS_AVAILABLE,
        Signal.CONTAINERFS_INODES_FREE: Signal.NODEFS_INODES_FREE,
    },
    FsLayout.DEDICATED_IMAGEFS: {
        Signal.CONTAINERFS_AVAILABLE: Signal.IMAGEFS_AVAILABLE,
        Signal.CONTAINERFS_INODES_FREE: Signal.IMAGEFS_INODES_FREE,
    },
}


def derive_containerfs_thresholds(
    thresholds: Sequence[Threshold], layout: FsLayout
) -> tuple[Threshold, ...]:
    """Replace any configured containerfs thresholds by copies of the nodefs ones (single
    fs, split image fs) or the imagefs ones (dedicated imagefs), as the kubelet does once
    it knows the layout: containerfs thresholds cannot be set by hand."""
    sources = _CONTAINERFS_SOURCES[layout]
    kept = [t for t in thresholds if t.signal not in sources]
    copies = [
        replace(t, signal=target, derived_from=source)
        for target, source in sources.items()
        for t in thresholds
        if t.signal is source
    ]
    return tuple(_unique(kept + copies))


def parse_flag_map(text: str, *, field: str, separator: str) -> dict[str, str]:
    """The kubelet's flag forms, ``sig<val,sig<val`` (``separator="<"``; PSI signals take
    ``>``) and ``sig=val,sig=val``: split on commas, then on the first separator, both
    sides trimmed. A signal named twice is an error, so a typo cannot silently replace an
    earlier value."""
    entries: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        if separator == "<":
            cut = min((i for i in (item.find("<"), item.find(">")) if i >= 0), default=-1)
        else:
            cut = item.find(separator)
        if cut < 0:
            raise ThresholdError(
                field, f"malformed pair {item.strip()!r}, expect string{separator}string"
            )
        name, value = item[:cut].strip(), item[cut + 1 :].strip()
        if separator == "<":
            _check_operator(name, item[cut], field=field)
        if name in entries:
            raise ThresholdError(
                field, f"duplicate eviction signal {name} (each signal may appear once)"
            )
        entries[name] = value
    return entries


# --- helpers ------------------------------------------------------------------------------


def _check_operator(name: str, operator: str, *, field: str) -> None:
    signal = parse_signal(name, field=field)
    if signal in PSI_SIGNALS and operator != ">":
        raise ThresholdError(
            field,
            f"{signal} is a PSI stall share and fires above its threshold: "
            f"write {signal}>PERCENT (0-100)",
        )
    if signal not in PSI_SIGNALS and operator != "<":
        raise ThresholdError(
            field, f"{signal} fires below its threshold, the only operator is '<': {signal}<VALUE"
        )


def _parse_quantity(signal: Signal, text: str, *, field: str) -> Quantity:
    try:
        parsed = units.parse_quantity(text)
    except units.UnitError as exc:
        raise ThresholdError(field, f"{signal}: {exc}") from None
    return Quantity(parsed.value, parsed.format)


def _parse_percentage(signal: Signal, text: str, *, field: str) -> float:
    try:
        return units.parse_percentage(text)
    except units.UnitError as exc:
        raise ThresholdError(field, f"{signal}: {exc}") from None


def _parse_stall(
    signal: Signal, text: str, *, field: str, allow_operator: bool = True
) -> StallPercent:
    body = text[1:].strip() if allow_operator and text.startswith(">") else text
    body = body.removesuffix("%").strip()
    try:
        number = Decimal(body)
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite() or not body or "_" in body:
        raise ThresholdError(
            field, f"{signal}: invalid stall percentage {text!r}: expected a number from 0 to 100"
        )
    hundredths = number * 100
    if hundredths != hundredths.to_integral_value():
        raise ThresholdError(
            field,
            f"{signal}: {text!r} has more than two decimals (PSI reports hundredths of a percent)",
        )
    # A threshold of 100% could never be exceeded; a min reclaim of 100% is merely strict.
    in_range = 0 <= number < 100 if allow_operator else 0 <= number <= 100
    if not in_range:
        bound = "below 100" if allow_operator else "at most 100"
        raise ThresholdError(field, f"{signal}: stall percentage must be >= 0 and {bound}: {text}")
    return StallPercent(int(hundredths))


def check_stall_reclaim(
    signal: Signal, value: ThresholdValue | None, min_reclaim: ThresholdValue | None
) -> None:
    """A PSI minimum reclaim larger than its threshold could never be met."""
    if (
        isinstance(value, StallPercent)
        and isinstance(min_reclaim, StallPercent)
        and min_reclaim.hundredths > value.hundredths
    ):
        raise ThresholdError(
            "evictionMinimumReclaim",
            f"{signal}: minimum reclaim {min_reclaim} exceeds the threshold "
            f"{value}; the stall could never fall far enough to end the pressure",
        )


def _require_grace_periods(soft: ThresholdStatements, periods: Mapping[Signal, float]) -> None:
    for signal, value in soft.items():
        if value is not None and signal not in periods:
            raise ThresholdError(
                "evictionSoft",
                f"grace period must be specified for the soft eviction threshold "
                f"{signal} (set evictionSoftGracePeriod {signal})",
            )


def _unique(thresholds: Iterable[Threshold]) -> list[Threshold]:
    """De-duplicated, first occurrence kept (the kubelet's ``mergeThresholds``)."""
    return list(dict.fromkeys(thresholds))
