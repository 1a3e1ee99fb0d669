"""Signals served from a sample a timer refreshes, as a stats cache serves them.

The kubelet's eviction manager does not read cgroup files: it reads the Summary API,
whose numbers cAdvisor's *housekeeping* samples on a timer of its own (every 10 s, up to
15 s with dynamic housekeeping). A cycle then decides on a sample as old as the time
since the last housekeeping, whatever happened since. (Today's eviction manager asks the
summary for fresh stats of the root cgroup, ``updateStats``, which makes cAdvisor
re-sample it on demand, so the node's ``memory.available`` is fresh at each of its 10 s
cycles and only the per-pod stats are housekeeping's; docs/detection.md says what the
benchmark makes of each.)

``statsHousekeepingInterval`` makes the agent read that way, for comparing it with such a
reader (``benchmarks/bench_oom_race.py``): a housekeeping thread collects every signal
once per interval, at a phase of its own (random, as cAdvisor's timer is unrelated to
the eviction loop's), and every cycle of the loop evaluates the latest sample. A kernel
notification still wakes the loop, but only to that sample, and there is no fast memory
read (the adaptive memory poll is unavailable). It is never what an operator wants from
the agent itself: the default, 0, reads every signal at each cycle.

:class:`HousekeepingSchedule` (pure) says when samples are taken;
:class:`HousekeptCollector` (the shell: a thread and a clock) takes them. It is the only
caller of the wrapped collector's ``collect`` once built, so the collector, which is not
thread-safe, is never read from two threads at once.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from nodeagent.base.clock import Clock
from nodeagent.model import NodeObservations, Signal
from nodeagent.signals.cgroups import CgroupPaths
from nodeagent.signals.collector import ALL_GROUPS, PER_SECOND_GROUPS, SignalGroup

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HousekeepingSchedule:
    """Samples at ``phase + k * interval`` for every whole ``k``."""

    interval: float
    phase: float = 0.0

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"interval must be positive, got {self.interval}")

    @classmethod
    def random_phase(
        cls, interval: float, rng: random.Random | None = None
    ) -> HousekeepingSchedule:
        return cls(interval, (rng or random.Random()).uniform(0.0, interval))

    def next_after(self, now: float) -> float:
        """The first sampling instant strictly after ``now``."""
        due = self.phase + (math.floor((now - self.phase) / self.interval) + 1) * self.interval
        return due if due > now else due + self.interval  # float rounding at a boundary


class InnerCollector(Protocol):
    """What is wrapped: :class:`~nodeagent.signals.collector.SignalCollector`."""

    def collect(self, now: float, groups: Collection[SignalGroup]) -> NodeObservations: ...

    @property
    def cgroups(self) -> CgroupPaths: ...

    def degraded(self) -> Mapping[str, str]: ...


class HousekeptCollector:
    """The loop's collector, serving the latest sample a housekeeping thread took of
    every signal but the pods' disk usage (a thread of its own walks that, as ever).

    Built with a first sample taken at once; :meth:`start` starts the thread, which
    samples at each instant of ``schedule``; :meth:`stop` ends it. :meth:`housekeep` is
    what the thread does at each instant (tests call it directly, in virtual time).
    """

    def __init__(
        self, inner: InnerCollector, *, schedule: HousekeepingSchedule, clock: Clock
    ) -> None:
        self._inner = inner
        self.schedule = schedule
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest = inner.collect(clock.now(), PER_SECOND_GROUPS)

    # --- what the loop reads ----------------------------------------------------------
    def collect(self, now: float, groups: Collection[SignalGroup] = ALL_GROUPS) -> NodeObservations:
        """The latest sample, whatever is asked: its ``time`` is when it was taken, so
        the engine acts on each sample once, as on any signal not read again."""
        with self._lock:
            return self._latest

    def memory_probe(self, signal: Signal) -> Callable[[], int] | None:
        """No fast path: a re-read between samples would not be stale."""
        return None

    @property
    def cgroups(self) -> CgroupPaths:
        return self._inner.cgroups

    def degraded(self) -> Mapping[str, str]:
        return self._inner.degraded()

    # --- the housekeeping ---------------------------------------------------------------
    def housekeep(self, now: float) -> NodeObservations:
        """Take a sample now; the loop's next :meth:`collect` returns it."""
        sample = self._inner.collect(now, PER_SECOND_GROUPS)
        with self._lock:
            self._latest = sample
        return sample

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="stats-housekeeping", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        due = self.schedule.next_after(self._clock.now())
        while not self._stop.wait(max(0.0, due - self._clock.now())):
            now = self._clock.now()
            try:
                self.housekeep(now)
            except Exception:  # the loop keeps the last sample; the next one may work
                log.exception("stats housekeeping failed")
            due = self.schedule.next_after(now)
