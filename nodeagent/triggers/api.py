"""What the triggers tell the loop, and the seam the loop calls them through.

A trigger is a kernel notification armed on one file: a memory-usage threshold on a
cgroup v1 memcg, modifications of a cgroup v2 ``memory.events``, or a PSI trigger on a
pressure file. The loop does not sleep between collections; it calls
:meth:`Triggers.wait`, which returns as soon as any trigger fires (a list of
:class:`Wake`) or after the timeout (an empty list), so the periodic poll stays the
safety net and a notification only ever makes the next evaluation *earlier*.

Every armed name has a :class:`MechanismStatus`: the metrics layer exports it and an
operator reads from it whether detection is event-driven or poll-only on this node, and
why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from nodeagent.triggers import psi


class Mechanism(StrEnum):
    """The kernel mechanism behind a trigger."""

    MEMCG_THRESHOLD = "memcg-threshold"
    """cgroup v1: ``cgroup.event_control`` + eventfd on ``memory.usage_in_bytes``."""
    MEMORY_EVENTS = "memory-events"
    """cgroup v2: inotify on ``memory.events`` of a cgroup with a ``memory.max`` limit
    (the kernel notifies when the cgroup reaches its limit or OOMs, never at an eviction
    threshold below it)."""
    MEMORY_POLL = "memory-poll"
    """The adaptive poll of a memory signal (:mod:`nodeagent.triggers.adaptive`): where
    the kernel has no usage threshold (cgroup v2, or a v1 memcg without eventfd
    thresholds), the signal is read more often the nearer it is to a threshold."""
    PSI = "psi"
    """A PSI trigger (``<some|full> <stall us> <window us>``) on a pressure file, or its
    emulation by polling the file's ``total`` when the kernel refuses triggers."""
    WAKE = "wake"
    """:meth:`Triggers.wake`, called by another thread or a signal handler."""


class MechanismState(StrEnum):
    ACTIVE = "active"
    """Armed exactly as requested."""
    FALLBACK = "fallback"
    """Armed in a weaker form the detail names: a wider PSI window, or PSI emulated by
    polling."""
    UNAVAILABLE = "unavailable"
    """Nothing is armed; only the loop's periodic poll sees this pressure. The detail
    says why (missing file, refused by the kernel, cgroup removed)."""


@dataclass(frozen=True, slots=True)
class MechanismStatus:
    mechanism: Mechanism
    state: MechanismState
    path: str
    """The file the trigger is armed on (or was meant to be)."""
    detail: str
    """What is armed (``usage >= 1073741824``, ``some 300ms 2s``) or why it is not."""


MemoryProbe = Callable[[], int]
"""Reads one memory signal's ``available`` bytes now (the fast path: only the files
that signal needs). Raises :class:`OSError` or
:class:`~nodeagent.base.errors.SignalReadError` when it cannot."""


@dataclass(frozen=True, slots=True)
class Wake:
    """One trigger fired. Several notifications of one trigger read in the same
    :meth:`Triggers.wait` call are coalesced into one Wake."""

    trigger: str
    """The name the trigger was armed under."""
    mechanism: Mechanism
    time: float
    """``time.monotonic()`` when the notification was read; CLOCK_MONOTONIC is shared by
    every process on the host, so it compares with other processes' timestamps."""
    count: int = 1
    """Notifications coalesced into this wake."""


class Triggers(Protocol):
    """Kernel notifications that wake the agent's loop.

    Contract:

    - ``arm_*`` and ``watch_*`` are idempotent per name: calling again with the same
      arguments changes nothing; different arguments replace the trigger of that name
      (the new one is armed before the old one is released, so there is no gap). They
      never raise for a missing or refusing kernel mechanism: they return, and record,
      a status saying what happened.
    - :meth:`wait` returns the wakes that happened since the last call, waiting up to
      ``timeout_s`` for one (``None``: without limit; ``0``: do not block). A notification
      is a hint that a fresh read is due, never an observation: the caller re-reads.
    - :meth:`wake` may be called from any thread or a signal handler; everything else
      belongs to the thread that calls :meth:`wait`.
    """

    def arm_memory_threshold(
        self, name: str, cgroup_dir: str, usage_bytes: int, *, observed_usage: int | None = None
    ) -> MechanismStatus: ...

    def watch_memory_events(self, name: str, cgroup_dir: str) -> MechanismStatus: ...

    def arm_psi(self, name: str, pressure_file: str, spec: psi.TriggerSpec) -> MechanismStatus: ...

    def arm_memory_poll(
        self,
        name: str,
        source: str,
        probe: MemoryProbe,
        thresholds: tuple[int, ...],
        *,
        observed: int | None = None,
        observed_at: float | None = None,
    ) -> MechanismStatus: ...

    def disarm(self, name: str) -> None: ...

    def wait(self, timeout_s: float | None) -> list[Wake]: ...

    def wake(self) -> None: ...

    def status(self) -> Mapping[str, MechanismStatus]: ...

    def close(self) -> None: ...
