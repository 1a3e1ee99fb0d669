"""Health: liveness follows the loop's beats on the clock; readiness waits for the first
evaluation and the API (unless standalone)."""

from __future__ import annotations

import pytest

from nodeagent.base.clock import FakeClock
from nodeagent.serving.health import Health


def make(requires_api: bool = True) -> tuple[FakeClock, Health]:
    clock = FakeClock(start=1000.0)
    return clock, Health(clock=clock, liveness_timeout=30.0, requires_api=requires_api)


def test_alive_during_startup_then_dead_when_no_evaluation_comes() -> None:
    clock, health = make()
    assert health.liveness().ok
    clock.advance(30.0)
    assert health.liveness().ok
    clock.advance(0.5)
    result = health.liveness()
    assert not result.ok
    assert "30.5 s" in result.detail


@pytest.mark.parametrize(
    ("beats", "now", "alive"),
    [
        pytest.param([1001.0], 1031.0, True, id="at-the-limit"),
        pytest.param([1001.0], 1031.1, False, id="just-past-the-limit"),
        pytest.param([1001.0, 1025.0], 1050.0, True, id="a-later-beat-renews"),
        pytest.param([1001.0, 1002.0], 1040.0, False, id="stalled-after-beating"),
    ],
)
def test_liveness_is_judged_from_the_last_beat(beats: list[float], now: float, alive: bool) -> None:
    clock, health = make()
    for beat in beats:
        health.beat(beat)
    clock.advance(now - clock.now())
    assert health.liveness().ok is alive


def test_readiness_needs_a_first_evaluation_and_the_api() -> None:
    clock, health = make()
    assert not health.readiness().ok
    health.beat(clock.now())
    result = health.readiness()
    assert not result.ok
    assert "API" in result.detail
    health.set_api_reachable(True)
    assert health.readiness().ok
    health.set_api_reachable(False, "connection refused by 10.0.0.1:6443")
    result = health.readiness()
    assert (result.ok, result.detail) == (False, "connection refused by 10.0.0.1:6443")


def test_standalone_is_ready_after_the_first_evaluation() -> None:
    clock, health = make(requires_api=False)
    assert not health.readiness().ok
    health.beat(clock.now())
    result = health.readiness()
    assert result.ok
    assert "standalone" in result.detail


def test_a_stalled_loop_is_not_ready_either() -> None:
    clock, health = make(requires_api=False)
    health.beat(clock.now())
    clock.advance(31.0)
    assert not health.readiness().ok
