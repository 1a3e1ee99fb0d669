"""Kubernetes quantities, Go durations and kubelet percentages, parsed and printed exactly.

Thresholds are written the way the kubelet reads them (``100Mi``, ``1.5Gi``, ``10%``,
``1m30s``), so parsing must accept and reject the same strings, and printing must give
the same canonical text the kubelet writes into eviction messages (1.5 GiB prints as
``1536Mi``, one byte over 1 GiB as ``1073741825``).

* Quantities: the grammar of ``k8s.io/apimachinery`` ``resource.Quantity`` is checked
  with a regular expression, then the value is computed exactly, as a ``Decimal``. This
  is the project's one quantity parser (the agent's pods, the scheduler's objects and the
  configuration all read quantities through it); it used to hand the arithmetic to the
  ``kubernetes`` client, whose import alone cost every command half a second. Counts are
  whole units (bytes, inodes, PIDs), so a fractional quantity rounds *up*: for an integer
  observation ``available < q`` holds exactly when ``available < ceil(q)``.
* Percentages: the kubelet parses them as float32 and divides by 100 in float32
  (:func:`float32` rounds a float to the nearest float32, as a Go conversion does), then
  multiplies the capacity in float64 and truncates. Those float32 artefacts are kept on
  purpose (10% of 10 GiB is 1 073 741 840, not ...824) so that the agent and the kubelet
  agree to the byte on the same node.
* Durations: Go's ``time.ParseDuration`` grammar (``300ms``, ``1m30s``, ``2h``); a bare
  number other than ``0`` is an error, as in Go.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from decimal import Context, Decimal
from enum import StrEnum

__all__ = [
    "ParsedQuantity",
    "QuantityFormat",
    "UnitError",
    "float32",
    "format_quantity",
    "json_number",
    "parse_exact_quantity",
    "parse_percentage",
    "parse_quantity",
    "quantity_value",
    "readable_quantity",
]


class QuantityFormat(StrEnum):
    """How a quantity prints, as ``resource.Quantity`` remembers from its input."""

    BINARY_SI = "BinarySI"
    """``Ki``, ``Mi``... (and every amount the kubelet computes itself, e.g. ``available``)."""
    DECIMAL_SI = "DecimalSI"
    """``k``, ``M``, ``G``... or no suffix."""
    DECIMAL_EXPONENT = "DecimalExponent"
    """``1e3``."""


class UnitError(ValueError):
    """A quantity, percentage or duration that does not parse; the message says why."""


@dataclass(frozen=True, slots=True)
class ParsedQuantity:
    value: int
    """Whole units, rounded up from any fraction."""
    format: QuantityFormat


_QUANTITY = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_QUANTITY_HELP = (
    "expected a number with an optional suffix: Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024), "
    "n, u, m, k, M, G, T, P, E (powers of 1000) or an exponent such as e6"
)
_EXACT = Context(prec=1000)
"""Scaling by a suffix rounds nothing (the default context keeps 28 digits, and
``10000000000000000000000000001`` has 29)."""
_BINARY_SCALE = {prefix: Decimal(1024**power) for power, prefix in enumerate("KMGTPE", 1)}
_DECIMAL_SCALE = {
    "": Decimal(1),
    **{prefix: Decimal(1000) ** power for power, prefix in enumerate("kMGTPE", 1)},
    **{prefix: Decimal(1000) ** -power for power, prefix in enumerate("mun", 1)},
}


def parse_quantity(text: str) -> ParsedQuantity:
    """Parse a Kubernetes quantity (``100Mi``, ``1.5G``, ``1e3``, ``1200``) into whole units."""
    exact, quantity_format = parse_exact_quantity(text)
    return ParsedQuantity(value=math.ceil(exact), format=quantity_format)


def parse_exact_quantity(text: str) -> tuple[Decimal, QuantityFormat]:
    """The exact value of a quantity (``500m`` is 0.5) and the format it was written in."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise UnitError(f"invalid quantity {text!r}: {_QUANTITY_HELP}")
    suffix = match.group("suffix") or ""
    if len(suffix) > 1 and not suffix.endswith("i"):  # e3, E-2: an exponent, not exa (E)
        return _in_range(Decimal(text), text), QuantityFormat.DECIMAL_EXPONENT
    number = Decimal(text[: len(text) - len(suffix)])
    if suffix.endswith("i"):
        exact = _EXACT.multiply(number, _BINARY_SCALE[suffix[0]])
        return _in_range(exact, text), QuantityFormat.BINARY_SI
    exact = _EXACT.multiply(number, _DECIMAL_SCALE[suffix])
    return _in_range(exact, text), QuantityFormat.DECIMAL_SI


MAX_EXPONENT = 1000
"""Quantities from 10^1000 up are refused. ``resource.Quantity`` holds any exponent, but
such a figure (``1e400000``) would be computed with as an integer of that many digits,
which Python refuses to convert past 4300 digits (and would be slow before): a clear
error beats a crash at start. The bound is far above anything a node counts (and above
what the Helm chart's schema lets through: an exponent of two digits)."""


def _in_range(value: Decimal, text: str) -> Decimal:
    if value and value.adjusted() >= MAX_EXPONENT:
        raise UnitError(f"invalid quantity {text!r}: too large (10^{MAX_EXPONENT} or more)")
    return value


def quantity_value(value: str | int | float | Decimal) -> Decimal:
    """The exact value of a quantity as it comes in a Kubernetes object or a YAML file:
    text (``128Mi``, parsed by the grammar above) or a plain number (YAML's ``2``)."""
    if isinstance(value, str):
        return parse_exact_quantity(value)[0]
    if isinstance(value, bool):  # an int to Python, never a quantity to Kubernetes
        raise UnitError(f"invalid quantity {value!r}: {_QUANTITY_HELP}")
    return Decimal(value)


_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")


def format_quantity(value: int, quantity_format: QuantityFormat = QuantityFormat.BINARY_SI) -> str:
    """The canonical text ``resource.Quantity.String()`` gives for a whole number.

    Binary amounts use the largest power-of-1024 suffix that divides them exactly, and
    fall back to decimal below 1024 (``1536Mi``, ``1073741825``, ``512``); decimal ones
    the largest power of 1000 (``1G``, ``1500M``, ``1k``).
    """
    sign = "-" if value < 0 else ""
    magnitude = -value if value < 0 else value
    if magnitude == 0:
        return "0"
    if quantity_format is QuantityFormat.BINARY_SI and magnitude >= 1024:
        # Powers of 1024 dividing the amount = trailing zero bits // 10 (no loop: this
        # runs for every candidate's message).
        exponent = min(((magnitude & -magnitude).bit_length() - 1) // 10, 6)
        return f"{sign}{magnitude >> (10 * exponent)}{_BINARY_SUFFIXES[exponent]}"
    exponent = 0
    while magnitude % 1000 == 0 and exponent < len(_DECIMAL_SUFFIXES) - 1:
        magnitude //= 1000
        exponent += 1
    if quantity_format is QuantityFormat.DECIMAL_EXPONENT:
        return f"{sign}{magnitude}e{3 * exponent}" if exponent else f"{sign}{magnitude}"
    return f"{sign}{magnitude}{_DECIMAL_SUFFIXES[exponent]}"


def readable_quantity(value: int) -> str:
    """For people: the canonical quantity when it is short (``1536Mi``), else three
    significant digits of the nearest binary unit (``4.88Gi`` for 5242880000)."""
    canonical = format_quantity(value)
    if len(canonical) <= 7:
        return canonical
    for suffix, size in (("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20)):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return canonical


_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_percentage(text: str) -> float:
    """``"10%"`` -> 0.1 as the kubelet stores it: the number parsed as float32, divided
    by 100 in float32 (so 10% is 0.100000001490116...).

    Range checks are the caller's: the kubelet's messages for them depend on the field.
    """
    number = text.rstrip("%")
    if not text.endswith("%") or _NUMBER.fullmatch(number) is None:
        raise UnitError(f"invalid percentage {text!r}: expected a number followed by %")
    return float32(float32(float(number)) / float32(100))


def float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (ties to even), overflowing to infinity,
    as Go's ``float32(x)`` and numpy's ``float32`` do. Arithmetic on two such values in
    float64, rounded again with this, gives the float32 result exactly: a float64 has
    more than twice float32's precision, so the double rounding cannot differ."""
    try:
        rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
    return rounded


def json_number(value: float) -> float | int:
    """A whole number as an int (``90``, not ``90.0``), anything else as it is."""
    return int(value) if float(value).is_integer() else value
