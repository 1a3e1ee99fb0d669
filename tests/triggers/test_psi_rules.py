"""PSI trigger specs, the kernel's window rules, and the user-space emulation of triggers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.triggers import psi


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "memory some 150ms 1s",
            psi.TriggerSpec(psi.Resource.MEMORY, psi.Line.SOME, 150_000, 1_000_000),
            id="system-memory",
        ),
        pytest.param(
            "node/io full 1s 10s",
            psi.TriggerSpec(psi.Resource.IO, psi.Line.FULL, 1_000_000, 10_000_000, "node"),
            id="node-cgroup-io",
        ),
        pytest.param(
            "kubepods/cpu some 500ms 500ms",
            psi.TriggerSpec(psi.Resource.CPU, psi.Line.SOME, 500_000, 500_000, "kubepods"),
            id="stall-equals-window",
        ),
    ],
)
def test_parse(text: str, expected: psi.TriggerSpec) -> None:
    spec = psi.TriggerSpec.parse(text)
    assert spec == expected
    assert str(spec) == text


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        pytest.param("memory some 150ms", "expected", id="too-few-fields"),
        pytest.param("swap some 1s 2s", "memory, io or cpu", id="unknown-resource"),
        pytest.param("memory most 1s 2s", "'some' or 'full'", id="unknown-line"),
        pytest.param("memory some 3s 2s", "at most the window", id="stall-over-window"),
        pytest.param("memory some 0s 2s", "more than 0", id="zero-stall"),
        pytest.param("memory some 100ms 400ms", "between 500ms and 10s", id="window-too-short"),
        pytest.param("memory some 1s 12s", "between 500ms and 10s", id="window-too-long"),
        pytest.param("memory some 1x 2s", "duration", id="bad-duration"),
    ],
)
def test_parse_rejects_with_what_is_allowed(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint) as raised:
        psi.TriggerSpec.parse(text)
    assert text.split(maxsplit=1)[0] in str(raised.value)


def test_kernel_request_is_microseconds_and_nul_terminated() -> None:
    spec = psi.TriggerSpec.parse("memory full 150ms 2s")
    assert spec.kernel_request() == b"full 150000 2000000\0"


specs = st.builds(
    lambda window, share: psi.TriggerSpec(
        psi.Resource.MEMORY, psi.Line.SOME, max(1, int(window * share)), window
    ),
    st.integers(min_value=psi.WINDOW_MIN_US, max_value=psi.WINDOW_MAX_US),
    st.floats(min_value=0.0, max_value=1.0),
)


@given(specs)
def test_unprivileged_equivalent_is_acceptable_and_keeps_the_share(spec: psi.TriggerSpec) -> None:
    wider = psi.unprivileged_equivalent(spec)
    if spec.window_us % psi.UNPRIVILEGED_WINDOW_STEP_US == 0:
        assert wider is None
        return
    assert wider is not None
    assert wider.window_us % psi.UNPRIVILEGED_WINDOW_STEP_US == 0
    assert spec.window_us < wider.window_us < spec.window_us + psi.UNPRIVILEGED_WINDOW_STEP_US
    assert wider.stall_share >= spec.stall_share
    assert wider.stall_us - 1 < spec.stall_share * wider.window_us
    assert (wider.resource, wider.line, wider.scope) == (spec.resource, spec.line, spec.scope)


@pytest.mark.parametrize(
    ("requested", "armed"),
    [
        pytest.param("memory some 150ms 1s", "memory some 300ms 2s", id="doc-example"),
        pytest.param("io full 1s 3s", "io full 1.333334s 4s", id="rounds-stall-up"),
        pytest.param("memory some 9s 9s", "memory some 10s 10s", id="to-the-limit"),
        pytest.param("memory some 100ms 2s", None, id="already-acceptable"),
    ],
)
def test_unprivileged_equivalent_examples(requested: str, armed: str | None) -> None:
    wider = psi.unprivileged_equivalent(psi.TriggerSpec.parse(requested))
    assert (None if wider is None else str(wider)) == armed


def test_parse_total() -> None:
    text = (
        "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=789\n"
    )
    assert psi.parse_total(text, psi.Line.SOME) == 123456
    assert psi.parse_total(text, psi.Line.FULL) == 789
    with pytest.raises(ValueError, match="full"):
        psi.parse_total(text.splitlines()[0], psi.Line.FULL)


def _feed(spec: str, samples: list[tuple[float, int]]) -> list[float]:
    tracker = psi.StallTracker(psi.TriggerSpec.parse(spec))
    fired_at = []
    for now, total in samples:
        fired, tracker = tracker.observe(now, total)
        if fired:
            fired_at.append(now)
    return fired_at


@pytest.mark.parametrize(
    ("spec", "samples", "fires_at"),
    [
        pytest.param(
            "memory some 150ms 1s",
            [(0.0, 0), (1.0, 100_000), (2.0, 200_000)],
            [],
            id="below-threshold",
        ),
        pytest.param(
            "memory some 150ms 1s",
            [(0.0, 0), (1.0, 100_000), (2.0, 300_000)],
            [2.0],
            id="crosses-in-second-window",
        ),
        pytest.param(
            "memory some 150ms 2s",
            [(0.0, 0), (1.0, 100_000), (2.0, 160_000)],
            [2.0],
            id="accumulates-over-the-window",
        ),
        pytest.param(
            "memory some 150ms 2s",
            [(0.0, 0), (1.0, 100_000), (2.0, 100_000), (3.0, 200_000), (4.0, 200_000)],
            [],
            id="old-stall-leaves-the-window",
        ),
        pytest.param(
            "memory some 150ms 2s",
            [(0.0, 0), (1.0, 500_000), (2.0, 1_000_000), (3.0, 1_500_000)],
            [1.0, 3.0],
            id="at-most-once-per-window",
        ),
        pytest.param(
            "memory some 500ms 500ms",
            [(0.0, 0), (1.0, 600_000)],
            [],
            id="sparse-samples-compare-shares",
        ),
        pytest.param(
            "memory some 150ms 1s",
            [(0.0, 5_000_000), (1.0, 10), (2.0, 200_000)],
            [2.0],
            id="counter-reset-starts-over",
        ),
    ],
)
def test_stall_tracker(spec: str, samples: list[tuple[float, int]], fires_at: list[float]) -> None:
    assert _feed(spec, samples) == fires_at


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.01, max_value=3.0), st.integers(min_value=0, max_value=3_000_000)
        ),
        min_size=1,
        max_size=40,
    )
)
def test_stall_tracker_fires_at_most_once_per_window_and_only_on_enough_stall(
    steps: list[tuple[float, int]],
) -> None:
    spec = psi.TriggerSpec.parse("memory some 200ms 2s")
    tracker = psi.StallTracker(spec)
    now, total = 0.0, 0
    history = [(now, total)]
    _, tracker = tracker.observe(now, total)
    fired_at: list[float] = []
    for gap, stall in steps:
        now += gap
        total += stall
        history.append((now, total))
        fired, tracker = tracker.observe(now, total)
        if fired:
            # Some sampled span ending now holds at least the stall the trigger asks for.
            assert any(
                total - t_total >= spec.stall_us * max(1.0, (now - t) / spec.window_s)
                for t, t_total in history[:-1]
            )
            fired_at.append(now)
    assert all(b - a >= spec.window_s for a, b in itertools.pairwise(fired_at))
    assert len(tracker.samples) <= len(history)
