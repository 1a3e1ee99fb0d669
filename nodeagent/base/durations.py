"""Durations as operators write them, in Go's spelling (``150ms``, ``1m30s``, ``5m``).

The kubelet's configuration spells durations this way, so nodeagent does too, for every
field: ``pollInterval: 500ms`` reads like ``evictionPressureTransitionPeriod: 5m``. This
module is the one place that parses and prints them:

- :func:`parse_go_duration` and :func:`format_go_duration` follow Go's ``time`` package
  exactly (signs, the units ``ns us µs ms s m h``, its error texts and ``Duration.String``),
  because the eviction fields must accept and show what the kubelet does;
- :func:`parse_seconds` is what every other field uses: a plain number of seconds or a Go
  duration, finite and not negative.
"""

from __future__ import annotations

import math
import re
from typing import Any


class DurationError(ValueError):
    """Not a duration; the message says why, in Go's words where Go has them."""


_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # U+00B5 micro sign
    "μs": 1e-6,  # U+03BC Greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_TERM = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string (``1m30s`` -> 90.0, ``300ms`` -> 0.3, ``-5s``)."""
    body = text
    sign = 1.0
    if body[:1] in ("+", "-"):
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    if not body:
        raise DurationError(f'time: invalid duration "{text}"')
    seconds = 0.0
    position = 0
    while position < len(body):
        term = _DURATION_TERM.match(body, position)
        assert term is not None  # the pattern matches the empty string
        number, unit = term.groups()
        if number in ("", "."):
            raise DurationError(f'time: invalid duration "{text}"')
        if not unit:
            raise DurationError(f'time: missing unit in duration "{text}"')
        if unit not in _DURATION_UNITS:
            raise DurationError(f'time: unknown unit "{unit}" in duration "{text}"')
        seconds += float(number) * _DURATION_UNITS[unit]
        position = term.end()
    return sign * seconds


def format_go_duration(seconds: float) -> str:
    """Go's ``Duration.String()``: ``1m30s``, ``5m0s``, ``300ms``, ``0s``."""
    nanoseconds = round(seconds * 1e9)
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    nanoseconds = abs(nanoseconds)
    if nanoseconds < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanoseconds >= size or unit == "ns":
                return sign + _trim_fraction(nanoseconds, size) + unit
    hours, rest = divmod(nanoseconds, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = _trim_fraction(rest, 1_000_000_000) + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def parse_seconds(value: Any) -> float:
    """Seconds in ``value``: a number of seconds or a Go duration string.

    >>> parse_seconds("1m30s"), parse_seconds("150ms"), parse_seconds(2)
    (90.0, 0.15, 2.0)

    Raises :class:`DurationError` naming the value when it is neither, or negative, or
    not finite.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = parse_go_duration(text)
    else:
        raise DurationError(f"expected a duration such as 500ms, 2s or 1m30s, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise DurationError(f"duration must be finite and not negative, got {value!r}")
    return seconds


def positive_seconds(value: Any, example: str = "") -> float:
    """:func:`parse_seconds` for a setting that must be above zero (a period, a timeout);
    the error suggests ``example`` when given."""
    seconds = parse_seconds(value)
    if seconds <= 0:
        raise ValueError("must be a positive duration" + (f" such as {example}" if example else ""))
    return seconds


def _trim_fraction(amount: int, unit: int) -> str:
    whole, fraction = divmod(amount, unit)
    if not fraction:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")
