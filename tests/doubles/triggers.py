"""An in-memory :class:`~nodeagent.triggers.api.Triggers` for tests of the loop.

It records what was armed, fires wakes when told to (:meth:`FakeTriggers.fire`), and
answers :meth:`FakeTriggers.wait` at once: with the pending wakes, or, when there are
none, after advancing the given fake clock by the timeout, so a loop test runs in
virtual time (``wait(None)`` with nothing pending returns ``[]`` at once rather than
blocking forever). Statuses can be scripted per name to exercise the degraded paths.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Mapping

from nodeagent.base.clock import FakeClock
from nodeagent.triggers import psi
from nodeagent.triggers.api import Mechanism, MechanismState, MechanismStatus, MemoryProbe, Wake


class FakeTriggers:
    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.armed: dict[str, tuple[Mechanism, str, object]] = {}
        """Name -> (mechanism, path, what: usage bytes, a PSI spec, or the thresholds of
        a memory poll)."""
        self.arm_calls: list[str] = []
        """Names in the order arming was requested (including no-op re-arms)."""
        self.probes: dict[str, MemoryProbe] = {}
        """The probe of each armed memory poll (never called here: tests call it)."""
        self.observed: dict[str, int | None] = {}
        """What the loop last handed each memory poll (available bytes) or memcg
        threshold (the usage its value was derived from)."""
        self.observed_at: dict[str, float | None] = {}
        self.scripted: dict[str, MechanismStatus] = {}
        """Statuses to report instead of ACTIVE when these names are armed."""
        self.waits: list[float | None] = []
        self._pending: list[Wake] = []
        self._statuses: dict[str, MechanismStatus] = {}
        self._lock = threading.Lock()
        self.closed = False

    def _arm(self, name: str, mechanism: Mechanism, path: str, what: object) -> MechanismStatus:
        self.arm_calls.append(name)
        self.armed[name] = (mechanism, path, what)
        status = self.scripted.get(name) or MechanismStatus(
            mechanism, MechanismState.ACTIVE, path, str(what)
        )
        self._statuses[name] = status
        return status

    def arm_memory_threshold(
        self, name: str, cgroup_dir: str, usage_bytes: int, *, observed_usage: int | None = None
    ) -> MechanismStatus:
        self.observed[name] = observed_usage
        return self._arm(name, Mechanism.MEMCG_THRESHOLD, cgroup_dir, usage_bytes)

    def watch_memory_events(self, name: str, cgroup_dir: str) -> MechanismStatus:
        return self._arm(name, Mechanism.MEMORY_EVENTS, cgroup_dir, "inotify")

    def arm_psi(self, name: str, pressure_file: str, spec: psi.TriggerSpec) -> MechanismStatus:
        return self._arm(name, Mechanism.PSI, pressure_file, spec)

    def arm_memory_poll(
        self,
        name: str,
        source: str,
        probe: MemoryProbe,
        thresholds: tuple[int, ...],
        *,
        observed: int | None = None,
        observed_at: float | None = None,
    ) -> MechanismStatus:
        self.probes[name] = probe
        self.observed[name] = observed
        self.observed_at[name] = observed_at
        return self._arm(name, Mechanism.MEMORY_POLL, source, thresholds)

    def disarm(self, name: str) -> None:
        self.probes.pop(name, None)
        self.armed.pop(name, None)
        self._statuses.pop(name, None)

    def fire(self, name: str, count: int = 1) -> None:
        """Queue a wake of the armed trigger ``name`` at the clock's current time."""
        mechanism = self.armed[name][0]
        with self._lock:
            self._pending.append(Wake(name, mechanism, self.clock.now(), count))

    def wake(self) -> None:
        with self._lock:
            self._pending.append(Wake("wake", Mechanism.WAKE, self.clock.now()))

    def wait(self, timeout_s: float | None) -> list[Wake]:
        self.waits.append(timeout_s)
        with self._lock:
            wakes, self._pending = self._pending, []
        if not wakes and timeout_s:
            self.clock.advance(timeout_s)
        return wakes

    def status(self) -> Mapping[str, MechanismStatus]:
        return types.MappingProxyType(dict(self._statuses))

    def close(self) -> None:
        self.closed = True
