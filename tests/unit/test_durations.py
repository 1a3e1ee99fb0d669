"""Durations: Go's parsing and printing exactly (the eviction fields must read what the
kubelet reads), and plain seconds for every other field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.base import durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("30s", 30.0),
        ("1m30s", 90.0),
        ("300ms", 0.3),
        ("2h", 7200.0),
        ("1.5h", 5400.0),
        ("1h2m3s", 3723.0),
        ("-5s", -5.0),
        ("+5s", 5.0),
        ("1us", 1e-6),
        ("1µs", 1e-6),
        (".5s", 0.5),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert durations.parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("30", 'time: missing unit in duration "30"', id="bare-number"),
        pytest.param("1d", 'time: unknown unit "d" in duration "1d"', id="days"),
        pytest.param("", 'time: invalid duration ""', id="empty"),
        pytest.param("s", 'time: invalid duration "s"', id="no-number"),
        pytest.param("1m 30s", 'time: unknown unit "m " in duration "1m 30s"', id="space"),
        pytest.param("-", 'time: invalid duration "-"', id="sign-only"),
    ],
)
def test_bad_durations_fail_with_gos_message(text: str, message: str) -> None:
    with pytest.raises(durations.DurationError) as raised:
        durations.parse_go_duration(text)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (90, "1m30s"),
        (300, "5m0s"),
        (7200, "2h0m0s"),
        (0.3, "300ms"),
        (0.0015, "1.5ms"),
        (1.5, "1.5s"),
        (-5, "-5s"),
        (1e-7, "100ns"),
    ],
)
def test_durations_print_as_go_does(seconds: float, text: str) -> None:
    assert durations.format_go_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10**7))
def test_duration_text_reads_back(milliseconds: int) -> None:
    seconds = milliseconds / 1000
    assert durations.parse_go_duration(durations.format_go_duration(seconds)) == pytest.approx(
        seconds
    )


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
def test_seconds_or_go_durations(text: str | float, seconds: float) -> None:
    assert durations.parse_seconds(text) == pytest.approx(seconds)


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
def test_seconds_reject(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        durations.parse_seconds(text)


@given(st.integers(min_value=0, max_value=10**11))
def test_format_round_trips_whole_microseconds(micros: int) -> None:
    seconds = micros / 1_000_000
    assert round(durations.parse_seconds(durations.format_go_duration(seconds)) * 1e6) == micros
