"""The adaptive memory poll: the pure timing rule, and TriggerSet running it."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.agent.config import load_config
from nodeagent.triggers import adaptive
from nodeagent.triggers.api import Mechanism, MechanismState
from nodeagent.triggers.triggerset import TriggerSet

Mi = 1 << 20
FLOOR, CEILING, MIN_RATE = 0.02, 1.0, float(1 << 30)

headrooms = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)
rates = st.floats(min_value=-1e11, max_value=1e11, allow_nan=False)
nows = st.floats(min_value=0, max_value=1e7, allow_nan=False)


def delay(headroom: float, rate: float) -> float:
    return (
        adaptive.next_poll_time(
            headroom=headroom,
            rate=rate,
            floor=FLOOR,
            ceiling=CEILING,
            now=100.0,
            min_rate=MIN_RATE,
        )
        - 100.0
    )


@pytest.mark.parametrize(
    ("headroom", "rate", "expected"),
    [
        (8 * 1024 * Mi, 0.0, CEILING),  # idle with 8 GiB to spare: the ceiling
        (100 * Mi, 0.0, 100 / 1024 / 2),  # 100 MiB at 1 GiB/s (assumed here): half of 98 ms
        (400 * Mi, 4 * MIN_RATE, 400 / 4096 / 2),  # falling 4 GiB/s: four times sooner
        (1 * Mi, 0.0, FLOOR),  # next to the threshold: the floor
        (0.0, 0.0, FLOOR),
        (-5 * Mi, 0.0, FLOOR),  # already past it
        (8 * 1024 * Mi, -MIN_RATE, CEILING),  # rising memory is not a reason to hurry
    ],
)
def test_delay_follows_headroom_over_rate(headroom: float, rate: float, expected: float) -> None:
    assert delay(headroom, rate) == pytest.approx(expected)


@given(headrooms, rates, nows)
def test_delay_stays_within_floor_and_ceiling(headroom: float, rate: float, now: float) -> None:
    due = adaptive.next_poll_time(
        headroom=headroom, rate=rate, floor=FLOOR, ceiling=CEILING, now=now, min_rate=MIN_RATE
    )
    assert now + FLOOR - 1e-6 <= due <= now + CEILING + 1e-6


@given(headrooms, headrooms, rates)
def test_less_headroom_never_waits_longer(a: float, b: float, rate: float) -> None:
    low, high = sorted((a, b))
    assert delay(low, rate) <= delay(high, rate)


@given(headrooms, rates, rates)
def test_a_faster_fall_never_waits_longer(headroom: float, a: float, b: float) -> None:
    slow, fast = sorted((a, b))
    assert delay(headroom, fast) <= delay(headroom, slow)


@given(
    st.floats(min_value=1, max_value=1e12),
    st.floats(min_value=1, max_value=1e11),
)
def test_a_steady_fall_is_read_before_it_crosses_or_within_the_floor(
    headroom: float, true_rate: float
) -> None:
    """Memory falling at a constant rate no faster than the one the poll assumes is
    read again before it crosses the threshold, or at most one floor after."""
    crossing = headroom / true_rate
    assert delay(headroom, true_rate) <= max(crossing, FLOOR) + 1e-9


@pytest.mark.parametrize(
    ("available", "thresholds", "expected"),
    [
        (500, (100, 300), 200),
        (250, (100, 300), 150),  # past 300 already: the next one down is what matters
        (50, (100, 300), -50),
        (50, (), math.inf),
    ],
)
def test_nearest_headroom(available: int, thresholds: tuple[int, ...], expected: float) -> None:
    assert adaptive.nearest_headroom(available, thresholds) == expected


def test_fall_rate_keeps_a_burst_then_decays() -> None:
    rate = adaptive.FallRate().observe(0.0, 1000 * Mi)
    assert rate.rate == 0.0
    rate = rate.observe(1.0, 900 * Mi)  # 100 MiB/s
    assert rate.rate == pytest.approx(100 * Mi)
    rate = rate.observe(1.0 + adaptive.RATE_HALF_LIFE_S, 900 * Mi)  # still for a half-life
    assert rate.rate == pytest.approx(50 * Mi)
    rate = rate.observe(2.0 + adaptive.RATE_HALF_LIFE_S, 1000 * Mi)  # rising: never negative
    assert 0 <= rate.rate < 50 * Mi


@given(st.lists(st.tuples(st.floats(0.001, 10), st.integers(0, 1 << 40)), max_size=30))
def test_fall_rate_is_never_negative(steps: list[tuple[float, int]]) -> None:
    rate, now = adaptive.FallRate(), 0.0
    for elapsed, available in steps:
        now += elapsed
        rate = rate.observe(now, available)
        assert rate.rate >= 0.0


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="floor"):
        adaptive.PollBounds(floor=2.0, ceiling=1.0, min_rate=1.0)
    with pytest.raises(ValueError, match="min_rate"):
        adaptive.PollBounds(floor=0.1, ceiling=1.0, min_rate=0)


# --- TriggerSet runs the poll -------------------------------------------------------------


class Memory:
    """A probe over a value the test moves; counts its reads."""

    def __init__(self, available: int) -> None:
        self.available = available
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.available


def bounds(floor: float = 0.01, ceiling: float = 0.5) -> adaptive.PollBounds:
    return adaptive.PollBounds(floor=floor, ceiling=ceiling, min_rate=MIN_RATE)


def test_memory_poll_wakes_when_a_threshold_is_crossed_either_way() -> None:
    memory = Memory(200 * Mi)
    with TriggerSet(memory_poll=bounds()) as triggers:
        status = triggers.arm_memory_poll("memory-poll:node", "node", memory, (100 * Mi,))
        assert (status.mechanism, status.state) == (Mechanism.MEMORY_POLL, MechanismState.ACTIVE)
        assert triggers.wait(0.05) == []  # the first read only learns the side
        memory.available = 99 * Mi
        started = time.monotonic()
        (wake,) = triggers.wait(2.0)
        assert (wake.trigger, wake.mechanism) == ("memory-poll:node", Mechanism.MEMORY_POLL)
        assert wake.time - started < 0.1  # 1 MiB of headroom: polled near the floor
        assert triggers.wait(0.05) == []  # still below: no wake per read
        memory.available = 300 * Mi
        assert [w.trigger for w in triggers.wait(2.0)] == ["memory-poll:node"]


def test_memory_poll_is_cheap_far_from_thresholds() -> None:
    memory = Memory(64 * 1024 * Mi)
    with TriggerSet(memory_poll=bounds(ceiling=0.2)) as triggers:
        triggers.arm_memory_poll("m", "node", memory, (100 * Mi,))
        triggers.wait(0.5)
        far = memory.reads
        memory.available = 101 * Mi
        triggers.arm_memory_poll("m", "node", memory, (100 * Mi,))
        triggers.wait(0.5)
        near = memory.reads - far
    assert far <= 4  # the ceiling: once per 200 ms
    assert near >= 20  # the floor: once per 10 ms


def test_memory_poll_survives_a_failing_probe() -> None:
    def broken() -> int:
        raise OSError(2, "No such file or directory")

    with TriggerSet(memory_poll=bounds()) as triggers:
        triggers.arm_memory_poll("m", "node", broken, (100 * Mi,))
        assert triggers.wait(0.05) == []
        assert triggers.status()["m"].state is MechanismState.ACTIVE


def test_memory_poll_settings_flow_into_the_trigger_set() -> None:
    config = load_config(
        environ={},
        overrides={
            "poll_interval": "2s",
            "memory_poll_floor": "5ms",
            "memory_poll_assumed_rate": "512Mi",
        },
    )
    with TriggerSet.from_settings(config) as triggers:
        status = triggers.arm_memory_poll("m", "node", Memory(1 << 40), (1,))
    assert "5ms" in status.detail and "2s" in status.detail


def test_a_value_the_loop_just_read_counts_as_a_read() -> None:
    """The loop hands over each full collection's value: the poll schedules from it and
    does not report again a crossing the loop has already seen."""
    memory = Memory(50 * Mi)
    with TriggerSet(memory_poll=bounds(ceiling=0.3)) as triggers:
        triggers.arm_memory_poll("m", "node", memory, (100 * Mi,), observed=50 * Mi)
        assert triggers.wait(0.1) == []  # below, as the loop saw: no wake
        reads = memory.reads
        memory.available = 64 * 1024 * Mi
        triggers.arm_memory_poll("m", "node", memory, (100 * Mi,), observed=64 * 1024 * Mi)
        assert triggers.wait(0.2) == []
        assert memory.reads == reads  # far above: the next read waits for the ceiling


def test_the_next_read_counts_from_when_the_loop_read_not_from_when_it_armed() -> None:
    """A cycle on a slow kernel (user-mode-linux: 100 ms and more) ends long after its
    collection. The poll's next read is due the floor after the collection: scheduling
    it from the end of the cycle left the memory unread for a whole cycle plus the
    floor, which is how one crossing took 150 ms to decide."""
    memory = Memory(101 * Mi)  # 1 MiB above the threshold: the floor
    # A floor far above the margin asserted, so a read due a floor after arming (the
    # fault) cannot pass on a loaded machine, and one due at once has room to spare.
    with TriggerSet(memory_poll=bounds(floor=0.5, ceiling=2.0)) as triggers:
        collected = time.monotonic() - 1.0  # the cycle took a second since
        triggers.arm_memory_poll(
            "m", "node", memory, (100 * Mi,), observed=101 * Mi, observed_at=collected
        )
        memory.available = 99 * Mi
        started = time.monotonic()
        (wake,) = triggers.wait(3.0)
        assert wake.time - started < 0.25  # overdue since the collection: read at once


def test_a_value_older_than_the_polls_own_read_is_ignored() -> None:
    memory = Memory(200 * Mi)
    with TriggerSet(memory_poll=bounds()) as triggers:
        triggers.arm_memory_poll("m", "node", memory, (100 * Mi,))
        assert triggers.wait(0.05) == []  # the poll's own reads: above
        memory.available = 99 * Mi
        stale = time.monotonic() - 10.0
        triggers.arm_memory_poll(
            "m", "node", memory, (100 * Mi,), observed=99 * Mi, observed_at=stale
        )
        # Had the stale value counted, the poll would think it already reported this side.
        assert [w.trigger for w in triggers.wait(1.0)] == ["m"]
