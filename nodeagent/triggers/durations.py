"""Durations as operators write them: Go's spelling (``150ms``, ``1s``, ``1m30s``).

The kubelet's configuration spells durations this way, so ``pollInterval: 500ms`` reads
like ``evictionPressureTransitionPeriod: 5m``. Plain numbers are seconds.
"""

from __future__ import annotations

import math
import re

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(value: str | float) -> float:
    """Seconds in ``value``: a number of seconds or a Go duration string.

    >>> parse_duration("1m30s"), parse_duration("150ms"), parse_duration(2)
    (90.0, 0.15, 2.0)

    Raises ValueError naming the value when it is neither, or negative.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_go_duration(value.strip())
    else:
        raise ValueError(f"expected a duration such as 500ms or 2s, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"duration must be finite and not negative, got {value!r}")
    return seconds


def _parse_go_duration(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    position, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position == 0 or position != len(text):
        raise ValueError(
            f"expected a duration such as 500ms, 2s or 1m30s (units ns, us, ms, s, m, h), "
            f"got {text!r}"
        )
    return total


def format_duration(seconds: float) -> str:
    """The shortest exact Go spelling of a duration that is a whole number of
    microseconds: ``0.15`` -> ``150ms``, ``2.0`` -> ``2s``, ``90.0`` -> ``1m30s``."""
    micros = round(seconds * 1_000_000)
    if micros == 0:
        return "0s"
    if micros % 1_000_000:
        return f"{micros // 1000}ms" if micros % 1000 == 0 else f"{micros}us"
    whole = micros // 1_000_000
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(
        f"{amount}{unit}" for amount, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if amount
    )
