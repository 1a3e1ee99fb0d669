"""Signals served from a sample a timer refreshes (``statsHousekeepingInterval``): when
samples are taken, what the loop sees between them, how old it is, and the setting."""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.agent.config import load_config
from nodeagent.base.clock import FakeClock, RealClock
from nodeagent.base.errors import ConfigError
from nodeagent.model import NodeObservations, Signal, SignalValue
from nodeagent.signals.cgroups import CgroupPaths
from nodeagent.signals.collector import PER_SECOND_GROUPS, SignalGroup
from nodeagent.signals.housekeeping import HousekeepingSchedule, HousekeptCollector
from tests.agent.rig import Rig
from tests.doubles.host import GIB

Mi = 1 << 20


class ReadingCollector:
    """A collector whose memory.available is whatever ``available`` is when it reads."""

    def __init__(self) -> None:
        self.available = 900 * Mi
        self.reads: list[tuple[float, frozenset[SignalGroup]]] = []
        self.threads: set[str] = set()
        self.cgroups = CgroupPaths(None, "/sys/fs/cgroup", None, None, None)

    def collect(self, now: float, groups: Collection[SignalGroup]) -> NodeObservations:
        self.reads.append((now, frozenset(groups)))
        self.threads.add(threading.current_thread().name)
        value = SignalValue(available=self.available, capacity=1024 * Mi, source="test")
        return NodeObservations(time=now, signals={Signal.MEMORY_AVAILABLE: value})

    def degraded(self) -> Mapping[str, str]:
        return {"pods": "test"}


def available(observations: NodeObservations) -> int | None:
    value = observations.value(Signal.MEMORY_AVAILABLE)
    return None if value is None else value.available


class TestHousekeepingSchedule:
    @pytest.mark.parametrize(
        ("interval", "phase", "now", "due"),
        [
            pytest.param(10.0, 3.0, 0.0, 3.0, id="before-the-first"),
            pytest.param(10.0, 3.0, 3.0, 13.0, id="at-one-the-next"),
            pytest.param(10.0, 3.0, 12.9, 13.0, id="just-before"),
            pytest.param(10.0, 0.0, 25.0, 30.0, id="no-phase"),
            pytest.param(15.0, 7.5, -1.0, 7.5, id="negative-now"),
        ],
    )
    def test_next_after(self, interval: float, phase: float, now: float, due: float) -> None:
        assert HousekeepingSchedule(interval, phase).next_after(now) == pytest.approx(due)

    @given(
        interval=st.floats(min_value=1e-3, max_value=3600),
        phase_share=st.floats(min_value=0, max_value=1, exclude_max=True),
        now=st.floats(min_value=0, max_value=1e7),
    )
    def test_the_next_sample_is_within_one_interval(
        self, interval: float, phase_share: float, now: float
    ) -> None:
        schedule = HousekeepingSchedule(interval, phase_share * interval)
        due = schedule.next_after(now)
        assert now < due <= now + interval * (1 + 1e-9)

    def test_a_random_phase_lies_within_the_interval(self) -> None:
        phases = {HousekeepingSchedule.random_phase(10.0).phase for _ in range(50)}
        assert all(0 <= phase <= 10.0 for phase in phases)
        assert len(phases) > 1

    @pytest.mark.parametrize("interval", [0.0, -1.0])
    def test_the_interval_must_be_positive(self, interval: float) -> None:
        with pytest.raises(ValueError, match="interval"):
            HousekeepingSchedule(interval)


class TestHousekeptCollector:
    def test_the_loop_reads_the_latest_sample_never_the_files(self) -> None:
        inner, clock = ReadingCollector(), FakeClock(100.0)
        collector = HousekeptCollector(inner, schedule=HousekeepingSchedule(10.0, 4.0), clock=clock)
        assert inner.reads == [(100.0, PER_SECOND_GROUPS)]  # the first sample, at once
        inner.available = 50 * Mi  # the node runs short after the sample
        for now in (101.0, 103.9):
            seen = collector.collect(now, {SignalGroup.MEMORY})
            assert (seen.time, available(seen)) == (100.0, 900 * Mi)
        collector.housekeep(104.0)
        seen = collector.collect(104.5, {SignalGroup.MEMORY})
        assert (seen.time, available(seen)) == (104.0, 50 * Mi)
        assert len(inner.reads) == 2

    @given(
        phase_share=st.floats(min_value=0, max_value=1, exclude_max=True),
        offset=st.floats(min_value=0, max_value=10, exclude_max=True),
    )
    def test_a_cycle_decides_on_stats_as_old_as_the_last_housekeeping(
        self, phase_share: float, offset: float
    ) -> None:
        """The kubelet's arrangement: a 10 s cycle reading a summary cAdvisor refreshes
        every 10 s on a timer of its own. Each cycle's sample is as old as the time since
        the last housekeeping, the same at every cycle: anywhere in [0, 10 s)."""
        inner, clock = ReadingCollector(), FakeClock(0.0)
        schedule = HousekeepingSchedule(10.0, phase_share * 10.0)
        collector = HousekeptCollector(inner, schedule=schedule, clock=clock)
        due = schedule.next_after(0.0)
        ages = []
        for cycle in range(1, 8):
            now = cycle * 10.0 + offset
            while due <= now:  # what the thread does, in virtual time
                collector.housekeep(due)
                due = schedule.next_after(due)
            ages.append(now - collector.collect(now).time)
        expected = (offset - schedule.phase) % 10.0
        for age in ages:
            assert 0 <= age <= 10.0
            # the same age at every cycle (to within float rounding at a boundary)
            assert min(abs(age - expected), 10.0 - abs(age - expected)) < 1e-6

    def test_no_fast_memory_read_and_the_rest_from_the_collector(self) -> None:
        inner = ReadingCollector()
        collector = HousekeptCollector(
            inner, schedule=HousekeepingSchedule(10.0), clock=FakeClock()
        )
        assert collector.memory_probe(Signal.MEMORY_AVAILABLE) is None
        assert collector.cgroups is inner.cgroups
        assert collector.degraded() == {"pods": "test"}

    def test_the_thread_samples_on_schedule_and_stops(self) -> None:
        inner = ReadingCollector()
        collector = HousekeptCollector(
            inner, schedule=HousekeepingSchedule(0.02), clock=RealClock()
        )
        collector.start()
        deadline = time.monotonic() + 10.0
        while len(inner.reads) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        collector.stop(5.0)
        stopped = len(inner.reads)
        assert stopped >= 4
        assert "stats-housekeeping" in inner.threads
        # each sample at or after its instant, in an interval of its own: none early or twice
        slots = [math.floor(now / 0.02) for now, _ in inner.reads[1:]]
        assert all(earlier < later for earlier, later in itertools.pairwise(slots))
        time.sleep(0.1)
        assert len(inner.reads) == stopped


class TestSetting:
    @pytest.mark.parametrize(
        ("value", "seconds"),
        [
            pytest.param("10s", 10.0, id="kubelet-housekeeping"),
            pytest.param("15s", 15.0, id="dynamic-housekeeping-ceiling"),
            pytest.param("0", 0.0, id="off"),
            pytest.param("1h", 3600.0, id="ceiling"),
        ],
    )
    def test_durations(self, value: str, seconds: float) -> None:
        config = load_config(overrides={"stats_housekeeping_interval": value}, environ={})
        assert config.stats_housekeeping_interval == seconds

    def test_off_by_default(self) -> None:
        assert load_config(environ={}).stats_housekeeping_interval == 0

    @pytest.mark.parametrize(
        ("value", "allowed"),
        [
            pytest.param("-5s", "not negative", id="negative"),
            pytest.param("2h", "up to 1h", id="beyond-an-hour"),
            pytest.param("soon", "invalid duration", id="not-a-duration"),
        ],
    )
    def test_refused_with_field_value_and_what_is_allowed(self, value: str, allowed: str) -> None:
        with pytest.raises(ConfigError) as refused:
            load_config(overrides={"stats_housekeeping_interval": value}, environ={})
        message = str(refused.value)
        assert "statsHousekeepingInterval" in message
        assert repr(value) in message
        assert allowed in message

    def test_the_agent_reads_through_housekeeping_when_set(self, tmp_path: Path) -> None:
        rig = Rig(tmp_path / "stale", settings={"stats_housekeeping_interval": "10s"})
        assert rig.agent.housekeeping is not None
        assert 0 <= rig.agent.housekeeping.schedule.phase <= 10.0
        assert Rig(tmp_path / "fresh").agent.housekeeping is None

    def test_pressure_after_the_sample_is_decided_on_at_the_next_housekeeping(
        self, tmp_path: Path
    ) -> None:
        rig = Rig(tmp_path, settings={"stats_housekeeping_interval": "10s"})
        housekeeping = rig.agent.housekeeping
        assert housekeeping is not None
        rig.set_node_usage(15 * GIB + 512 * Mi)  # available 512Mi < the rig's 1Gi threshold
        seen = [rig.cycle() for _ in range(3)]  # 1 s polls, the sample taken at build
        assert all(r is not None and not r.decision.thresholds_met for r in seen)
        housekeeping.housekeep(rig.clock.now())
        result = rig.cycle()
        assert result is not None and result.decision.thresholds_met
