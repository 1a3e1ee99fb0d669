"""Durations in Go spelling: parsing, formatting, and the errors for bad input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.triggers import durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("150ms", 0.15, id="milliseconds"),
        pytest.param("2s", 2.0, id="seconds"),
        pytest.param("1m30s", 90.0, id="compound"),
        pytest.param("1.5h", 5400.0, id="fractional-hours"),
        pytest.param("250us", 0.00025, id="microseconds"),
        pytest.param("0.5", 0.5, id="bare-number-is-seconds"),
        pytest.param(3, 3.0, id="int"),
        pytest.param(" 10s ", 10.0, id="surrounding-space"),
    ],
)
def test_parse(text: str | float, seconds: float) -> None:
    assert durations.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1 sec", id="unknown-unit"),
        pytest.param("s", id="no-number"),
        pytest.param("1s2", id="trailing-number"),
        pytest.param("-1s", id="negative"),
        pytest.param("", id="empty"),
        pytest.param("nan", id="nan"),
        pytest.param(True, id="bool"),
    ],
)
def test_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        durations.parse_duration(text)


@given(st.integers(min_value=0, max_value=10**11))
def test_format_round_trips_whole_microseconds(micros: int) -> None:
    seconds = micros / 1_000_000
    assert round(durations.parse_duration(durations.format_duration(seconds)) * 1e6) == micros
