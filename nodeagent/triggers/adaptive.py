"""The adaptive memory poll: when to look at the node's memory next.

cgroup v2 has no usage-threshold notification (``memory.events`` moves only on
``high``, ``max`` and OOM events, and the v2 root has no ``memory.events`` at all), and
a v1 host without a writable ``cgroup.event_control`` has none either. Writing
``memory.high`` to make the kernel notify is not an option: it throttles the cgroup's
tasks and belongs to systemd and the kubelet. So the memory signals are *polled*, at an
interval that follows the risk: the time the node would need, at the rate available
memory has recently been falling, to use up what is left above the nearest threshold.

    delay = clamp(SAFETY * headroom / max(rate, min_rate), floor, ceiling)

- ``headroom``: available minus the nearest threshold, in bytes (0 or less: at the
  floor);
- ``rate``: how fast available has recently been falling, bytes per second
  (:class:`FallRate`, a peak that decays, so a burst of allocation is remembered for a
  while and a quiet node relaxes back);
- ``min_rate``: the rate assumed even when nothing moves, so that a node that has been
  idle near its threshold is still polled often enough to see a sudden allocator (the
  probe costs two ``pread`` calls);
- ``SAFETY``: look again after half the predicted time, so an allocator that speeds up
  by up to 2x is still seen before it crosses.

An idle node with gigabytes of headroom is read once per ``ceiling``; one close to a
threshold, or eating its headroom fast, at the ``floor``. Pure: the caller passes ``now``
and does the reads (:class:`~nodeagent.triggers.triggerset.TriggerSet`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SAFETY = 0.5
"""The share of the predicted time to crossing that may pass before the next read."""

DEFAULT_FLOOR_S = 0.03
DEFAULT_MIN_RATE = 512 << 20
"""512 MiB/s: an allocator faulting in fresh memory at several GiB/s is caught up with at
the first read that sees it fall (the rate is then the one observed); assuming more
would mean reading a node with a gigabyte to spare several times a second, which the
loop's 500 ms filesystem cycles (a full read each) already do."""
RATE_HALF_LIFE_S = 5.0
"""How fast a remembered fall rate decays once memory stops falling."""


@dataclass(frozen=True, slots=True)
class PollBounds:
    """The adaptive poll's configuration (``memoryPollFloor``, ``pollInterval``,
    ``memoryPollAssumedRate``)."""

    floor: float
    """Shortest delay between two reads, seconds."""
    ceiling: float
    """Longest delay between two reads, seconds."""
    min_rate: float
    """The fall rate assumed when memory falls slower (or not at all), bytes/s."""

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.ceiling:
            raise ValueError(f"need 0 < floor <= ceiling, got {self.floor}, {self.ceiling}")
        if self.min_rate <= 0:
            raise ValueError(f"min_rate must be positive, got {self.min_rate}")


def next_poll_time(
    *, headroom: float, rate: float, floor: float, ceiling: float, now: float, min_rate: float
) -> float:
    """When the memory should be read next (``now`` plus the delay above).

    ``headroom`` in bytes (negative: already past the threshold), ``rate`` in bytes per
    second that available memory is falling (negative or 0: not falling), ``floor`` and
    ``ceiling`` in seconds with ``0 < floor <= ceiling``, ``min_rate`` above 0.
    """
    if headroom <= 0:
        return now + floor
    delay = SAFETY * headroom / max(rate, min_rate)
    return now + min(ceiling, max(floor, delay))


def nearest_headroom(available: int, thresholds: tuple[int, ...]) -> float:
    """Bytes above the nearest threshold still above ``available``; when every
    threshold is already crossed, the distance to the lowest (negative). Infinite
    without thresholds."""
    if not thresholds:
        return math.inf
    above = [available - t for t in thresholds if available >= t]
    return min(above) if above else available - min(thresholds)


@dataclass(frozen=True, slots=True)
class FallRate:
    """How fast available memory has recently been falling, in bytes per second.

    Each sample's instantaneous fall rate replaces the estimate if it is higher;
    otherwise the estimate decays with a half-life of :data:`RATE_HALF_LIFE_S`. So one
    fast step keeps the poll quick for a few seconds and a node whose memory stopped
    falling relaxes to the ceiling.
    """

    time: float | None = None
    available: int = 0
    rate: float = 0.0

    def observe(self, now: float, available: int) -> FallRate:
        if self.time is None or now <= self.time:
            return FallRate(now, available, self.rate if self.time is not None else 0.0)
        elapsed = now - self.time
        instant = (self.available - available) / elapsed
        decayed = self.rate * 0.5 ** (elapsed / RATE_HALF_LIFE_S)
        return FallRate(now, available, max(instant, decayed, 0.0))


def crossed_below(available: int, thresholds: tuple[int, ...]) -> frozenset[int]:
    """The thresholds ``available`` is below (the eviction rule is ``available <
    threshold``, strictly)."""
    return frozenset(t for t in thresholds if available < t)
