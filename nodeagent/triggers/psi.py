"""PSI trigger specifications, the kernel's window rules, and polling emulation.

A PSI trigger asks the kernel: "tell me when tasks stalled on <resource> for at least
<stall> within any <window>". Operators write one as
``[<cgroup>/]<resource> <some|full> <stall> <window>``, for example
``memory some 150ms 1s`` (system-wide, /proc/pressure/memory) or
``node/memory full 100ms 2s`` (the node cgroup's ``memory.pressure``).

The kernel accepts windows from 500 ms to 10 s, but only from a process with
CAP_SYS_RESOURCE; anyone else may use multiples of 2 s only, and gets EINVAL otherwise.
:func:`unprivileged_equivalent` widens such a request to the nearest accepted window and
scales the stall with it, so the *share* of stalled time the operator asked for stays
the same (150 ms per 1 s is 15 %, so 300 ms per 2 s). When the kernel refuses triggers
altogether, :class:`StallTracker` reproduces the trigger's rule in user space from the
pressure file's cumulative ``total``, read at the loop's poll interval: it fires when the
stall accumulated over the last window reaches the threshold, at most once per window,
as the kernel does. ``total`` is exact; the ``avg10`` figure is an exponentially decayed
average updated every 2 s, which would add seconds of lag.

Everything here is pure; :mod:`nodeagent.triggers.kernel` does the system calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from nodeagent.base import durations

WINDOW_MIN_US = 500_000
WINDOW_MAX_US = 10_000_000
UNPRIVILEGED_WINDOW_STEP_US = 2_000_000
"""Without CAP_SYS_RESOURCE the kernel only accepts windows that are multiples of 2 s
(kernel/sched/psi.c, ``psi_trigger_create``), evaluated by the 2 s averaging worker."""


class Resource(StrEnum):
    MEMORY = "memory"
    IO = "io"
    CPU = "cpu"


class Line(StrEnum):
    SOME = "some"
    """At least one task stalled."""
    FULL = "full"
    """All non-idle tasks stalled at once."""


SYSTEM_SCOPE = ""
"""The scope of the system-wide files in /proc/pressure."""


@dataclass(frozen=True, slots=True)
class TriggerSpec:
    """One PSI trigger: fire when ``line`` stall on ``resource`` in ``scope`` reaches
    ``stall_us`` within any ``window_us``."""

    resource: Resource
    line: Line
    stall_us: int
    window_us: int
    scope: str = SYSTEM_SCOPE
    """``""`` for /proc/pressure, or the cgroup whose ``<resource>.pressure`` is used
    (``node``, ``kubepods``); the caller maps a scope to a directory."""

    def __post_init__(self) -> None:
        if not WINDOW_MIN_US <= self.window_us <= WINDOW_MAX_US:
            raise ValueError(
                f"PSI trigger {self}: window must be between "
                f"{durations.format_go_duration(WINDOW_MIN_US / 1e6)} and "
                f"{durations.format_go_duration(WINDOW_MAX_US / 1e6)} (the kernel's limits)"
            )
        if not 0 < self.stall_us <= self.window_us:
            raise ValueError(
                f"PSI trigger {self}: stall must be more than 0 and at most the window"
            )

    @classmethod
    def parse(cls, text: str) -> TriggerSpec:
        """``[<scope>/]<memory|io|cpu> <some|full> <stall> <window>``, durations in Go
        spelling (``150ms``, ``2s``). Raises ValueError saying what is allowed."""
        fields = text.split()
        if len(fields) != 4:
            raise ValueError(
                f"PSI trigger {text!r}: expected '[<cgroup>/]<memory|io|cpu> <some|full> "
                f"<stall> <window>', e.g. 'memory some 150ms 1s'"
            )
        scope, _, resource = fields[0].rpartition("/")
        if resource not in Resource.__members__.values():
            raise ValueError(f"PSI trigger {text!r}: resource must be memory, io or cpu")
        if fields[1] not in Line.__members__.values():
            raise ValueError(f"PSI trigger {text!r}: the line must be 'some' or 'full'")
        try:
            stall = durations.parse_seconds(fields[2])
            window = durations.parse_seconds(fields[3])
        except ValueError as exc:
            raise ValueError(f"PSI trigger {text!r}: {exc}") from exc
        return cls(
            resource=Resource(resource),
            line=Line(fields[1]),
            stall_us=round(stall * 1_000_000),
            window_us=round(window * 1_000_000),
            scope=scope,
        )

    def __str__(self) -> str:
        target = f"{self.scope}/{self.resource}" if self.scope else str(self.resource)
        return (
            f"{target} {self.line} {durations.format_go_duration(self.stall_us / 1e6)} "
            f"{durations.format_go_duration(self.window_us / 1e6)}"
        )

    @property
    def window_s(self) -> float:
        return self.window_us / 1_000_000

    @property
    def stall_share(self) -> float:
        """The stall threshold as a share of the window (0 to 1)."""
        return self.stall_us / self.window_us

    def kernel_request(self) -> bytes:
        """What is written to the pressure file to arm this trigger."""
        return f"{self.line} {self.stall_us} {self.window_us}\0".encode()


def unprivileged_equivalent(spec: TriggerSpec) -> TriggerSpec | None:
    """The trigger an unprivileged process may arm instead of ``spec``: the window
    rounded up to a multiple of 2 s, the stall scaled to keep its share of the window.
    ``None`` when ``spec`` already has such a window (the kernel refused it for another
    reason) or none within the kernel's 10 s limit exists."""
    step = UNPRIVILEGED_WINDOW_STEP_US
    if spec.window_us % step == 0:
        return None
    window = math.ceil(spec.window_us / step) * step
    if window > WINDOW_MAX_US:
        return None
    stall = min(window, -(-spec.stall_us * window // spec.window_us))
    return replace(spec, stall_us=stall, window_us=window)


def parse_total(text: str, line: Line) -> int:
    """The cumulative stall in microseconds on ``line`` of a pressure file's text
    (``some avg10=0.00 avg60=0.00 avg300=0.00 total=12345``)."""
    for row in text.splitlines():
        head, _, rest = row.partition(" ")
        if head == line:
            for field in rest.split():
                key, _, value = field.partition("=")
                if key == "total":
                    return int(value)
    raise ValueError(f"no '{line} ... total=N' line in pressure file")


@dataclass(frozen=True, slots=True)
class StallTracker:
    """A PSI trigger evaluated in user space from samples of the file's ``total``.

    Fires when the stall accumulated over the last window reaches the trigger's stall,
    at most once per window. When samples are further apart than the window, the
    stall threshold is scaled to the sampled span (the share of time is compared).
    """

    spec: TriggerSpec
    samples: tuple[tuple[float, int], ...] = ()
    """(seconds, total microseconds), oldest first; the oldest is the newest sample at
    least one window old, or the first one taken."""
    last_fired: float | None = None

    def observe(self, now: float, total_us: int) -> tuple[bool, StallTracker]:
        """Add a sample; return whether the trigger fires now, and the new state."""
        samples = self.samples
        if samples and (total_us < samples[-1][1] or now < samples[-1][0]):
            samples = ()  # the counter went back: the cgroup was recreated
        samples = (*samples, (now, total_us))
        window = self.spec.window_s
        cutoff = now - window
        start = 0
        for index, (taken, _) in enumerate(samples):
            if taken <= cutoff:
                start = index
        samples = samples[start:]
        base_time, base_total = samples[0]
        span = now - base_time
        fired = False
        if span > 0:
            needed = self.spec.stall_us * max(1.0, span / window)
            rested = self.last_fired is None or now - self.last_fired >= window
            fired = rested and total_us - base_total >= needed
        return fired, replace(self, samples=samples, last_fired=now if fired else self.last_fired)
