"""The poll schedule: what is due when, and how long the loop may wait for a trigger."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.agent.config import load_config
from nodeagent.triggers.schedule import Poll, PollSchedule


def schedule() -> PollSchedule:
    config = load_config(environ={}, overrides={"poll_interval": "1s"})
    return PollSchedule.from_settings(config)


def test_everything_is_due_before_the_first_run() -> None:
    assert schedule().due(100.0) == {Poll.NODE, Poll.FILESYSTEMS}
    assert schedule().timeout(100.0) == 0.0


def test_each_poll_keeps_its_own_interval() -> None:
    plan = schedule().ran(Poll, 10.0)
    assert plan.due(10.4) == frozenset()
    assert plan.timeout(10.2) == pytest.approx(0.3)
    assert plan.due(10.5) == {Poll.FILESYSTEMS}
    plan = plan.ran({Poll.FILESYSTEMS}, 10.5)
    assert plan.timeout(10.5) == pytest.approx(0.5)
    assert plan.due(11.0) == {Poll.NODE, Poll.FILESYSTEMS}


def test_a_triggered_read_postpones_the_next_poll() -> None:
    plan = schedule().ran(Poll, 0.0).ran({Poll.NODE}, 0.7)
    assert Poll.NODE not in plan.due(1.0)
    assert Poll.NODE in plan.due(1.7)


@given(st.floats(min_value=0, max_value=1e6), st.floats(min_value=0, max_value=10))
def test_timeout_reaches_exactly_the_next_due_poll(start: float, later: float) -> None:
    plan = schedule().ran(Poll, start)
    now = start + later
    wait = plan.timeout(now)
    assert wait >= 0
    assert plan.due(now + wait) or wait == 0
    if wait > 0:
        assert not plan.due(now)
