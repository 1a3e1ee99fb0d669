"""One epoll loop over every kernel notification the agent arms.

:class:`TriggerSet` is the real :class:`~nodeagent.triggers.api.Triggers`. Each armed
trigger is one descriptor in one epoll instance:

- memcg-threshold: an eventfd registered in ``cgroup.event_control`` (POLLIN);
- memory-events: one inotify instance shared by all watches, a watch per file (POLLIN);
- psi: the pressure file itself, opened O_RDWR with the trigger written to it (POLLPRI);
- wake: an eventfd that :meth:`TriggerSet.wake` writes to (POLLIN).

Two triggers have no descriptor and are polled by :meth:`TriggerSet.wait` itself, which
wakes for their reads and returns only when something fired or the caller's timeout ran
out: a PSI trigger the kernel refuses, emulated by reading the pressure file at the poll
interval (:class:`~nodeagent.triggers.psi.StallTracker`), and the adaptive memory poll
(:mod:`~nodeagent.triggers.adaptive`), which reads a memory signal through a probe the
signals layer provides, at an interval that shrinks as the signal nears a threshold, and
fires when the set of thresholds it is below changes.

Failures never raise out of arming: a missing file, a refusing kernel or a removed
cgroup becomes the trigger's status, logged once when it changes, and the loop's poll
carries on. A descriptor the kernel reports as broken (EPOLLERR: the cgroup or its
pressure file went away) is dropped at once, so a dead trigger cannot spin the loop.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass

from nodeagent.base import durations
from nodeagent.base.errors import SignalReadError
from nodeagent.triggers import adaptive, kernel, memcg, psi
from nodeagent.triggers.api import (
    Mechanism,
    MechanismState,
    MechanismStatus,
    MemoryProbe,
    Wake,
)
from nodeagent.triggers.settings import TriggerSettings

WAKE_TRIGGER = "wake"
"""The trigger name of wakes caused by :meth:`TriggerSet.wake`."""

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class _MemcgThreshold:
    cgroup_dir: str
    usage_bytes: int
    fd: int


@dataclass(slots=True)
class _KernelPsi:
    path: str
    spec: psi.TriggerSpec
    fd: int


@dataclass(slots=True)
class _PolledPsi:
    path: str
    spec: psi.TriggerSpec
    tracker: psi.StallTracker
    due: float


@dataclass(slots=True)
class _PolledMemory:
    source: str
    probe: MemoryProbe
    thresholds: tuple[int, ...]
    due: float
    rate: adaptive.FallRate
    below: frozenset[int] | None = None
    """The thresholds the last read was below; ``None`` before the first read."""


@dataclass(slots=True)
class _MemoryEvents:
    path: str
    wd: int


@dataclass(slots=True)
class _Unarmed:
    """A trigger that could not be armed (its status says why)."""


_Entry = _MemcgThreshold | _KernelPsi | _PolledPsi | _PolledMemory | _MemoryEvents | _Unarmed
_Polled = (_PolledPsi, _PolledMemory)


@dataclass(slots=True)
class _Named:
    entry: _Entry
    key: tuple[object, ...] = ()
    """What the trigger was asked for, where the entry alone does not say (PSI)."""


class TriggerSet:
    """Kernel notifications, multiplexed; see the module docstring and
    :class:`~nodeagent.triggers.api.Triggers` for the contract.

    ``poll_interval`` is how often emulated PSI triggers read their file (the loop's
    poll interval). With ``psi_kernel_triggers=False`` every PSI trigger is emulated.
    ``memory_poll`` bounds the adaptive memory poll's interval (floor, ceiling) and
    sets the fall rate it assumes when memory is not moving.
    """

    def __init__(
        self,
        *,
        poll_interval: float = 1.0,
        psi_kernel_triggers: bool = True,
        rearm_policy: memcg.RearmPolicy | None = None,
        memory_poll: adaptive.PollBounds | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        self._memory_poll = memory_poll or adaptive.PollBounds(
            floor=min(adaptive.DEFAULT_FLOOR_S, poll_interval),
            ceiling=poll_interval,
            min_rate=adaptive.DEFAULT_MIN_RATE,
        )
        self._poll_interval = poll_interval
        self._psi_kernel_triggers = psi_kernel_triggers
        self._rearm = rearm_policy or memcg.RearmPolicy.for_page_size(
            os.sysconf("SC_PAGE_SIZE"), hysteresis_bytes=memcg.DEFAULT_HYSTERESIS_BYTES
        )
        self._log = logger or _log
        self._epoll = select.epoll()
        self._waker = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self._waker, select.EPOLLIN)
        self._inotify: kernel.Inotify | None = None
        self._named: dict[str, _Named] = {}
        self._by_fd: dict[int, str] = {}
        self._by_wd: dict[int, list[str]] = {}
        self._statuses: dict[str, MechanismStatus] = {}
        self._closed = False

    @classmethod
    def from_settings(
        cls, settings: TriggerSettings, *, logger: logging.Logger | None = None
    ) -> TriggerSet:
        return cls(
            poll_interval=settings.poll_interval,
            psi_kernel_triggers=settings.psi_kernel_triggers,
            rearm_policy=memcg.RearmPolicy.for_page_size(
                os.sysconf("SC_PAGE_SIZE"), hysteresis_bytes=settings.memory_threshold_hysteresis
            ),
            memory_poll=adaptive.PollBounds(
                floor=min(settings.memory_poll_floor, settings.poll_interval),
                ceiling=settings.poll_interval,
                min_rate=settings.memory_poll_assumed_rate,
            ),
            logger=logger,
        )

    # --- arming -----------------------------------------------------------------------

    def arm_memory_threshold(
        self, name: str, cgroup_dir: str, usage_bytes: int, *, observed_usage: int | None = None
    ) -> MechanismStatus:
        """Notify when the cgroup v1 memcg in ``cgroup_dir`` crosses ``usage_bytes`` of
        ``memory.usage_in_bytes``, in either direction.

        ``observed_usage`` is the usage the caller's collection saw (None: not known).
        Re-arming the same name in the same cgroup is a no-op while the armed value is
        within the :class:`~nodeagent.triggers.memcg.RearmPolicy` of ``usage_bytes`` and
        not spent. The kernel takes a threshold that usage is already past as crossed
        and stays silent; if usage passed it between that collection and the
        registration (which waits for an RCU grace period), the trigger notifies at
        once, as the kernel would have.
        """
        current = self._named.get(name)
        if (
            current is not None
            and isinstance(current.entry, _MemcgThreshold)
            and current.entry.cgroup_dir == cgroup_dir
            and not self._rearm.needs_rearm(
                current.entry.usage_bytes, usage_bytes, usage=observed_usage
            )
        ):
            return self._statuses[name]
        path = os.path.join(cgroup_dir, "memory.usage_in_bytes")
        try:
            fd = kernel.register_memcg_threshold(cgroup_dir, usage_bytes)
        except OSError as exc:
            self._release(name)
            return self._unarmed(
                name,
                ("memcg", cgroup_dir),
                Mechanism.MEMCG_THRESHOLD,
                path,
                _memcg_refusal(cgroup_dir, exc),
            )
        entry = _MemcgThreshold(cgroup_dir, usage_bytes, fd)
        self._replace(name, entry, fd=fd, events=select.EPOLLIN)
        if observed_usage is not None and observed_usage < usage_bytes:
            with contextlib.suppress(OSError, ValueError):
                if int(kernel.read_small_file(path)) >= usage_bytes:
                    os.eventfd_write(fd, 1)
        return self._set_status(
            name,
            MechanismStatus(
                Mechanism.MEMCG_THRESHOLD, MechanismState.ACTIVE, path, f"crosses {usage_bytes}"
            ),
        )

    def watch_memory_events(self, name: str, cgroup_dir: str) -> MechanismStatus:
        """Notify when the cgroup v2 ``memory.events`` in ``cgroup_dir`` changes (the
        kernel bumps it on every memory.high, memory.max and OOM event)."""
        path = os.path.join(cgroup_dir, "memory.events")
        current = self._named.get(name)
        if (
            current is not None
            and isinstance(current.entry, _MemoryEvents)
            and current.entry.path == path
        ):
            return self._statuses[name]
        limit = _memory_limit(cgroup_dir)
        if limit is None and os.path.exists(path):
            self._release(name)
            return self._unarmed(
                name,
                ("events", path),
                Mechanism.MEMORY_EVENTS,
                path,
                f"{cgroup_dir} has no memory.max limit: its memory.events counts only OOM "
                f"kills, and never changes at an eviction threshold (the memory poll "
                f"watches those)",
            )
        try:
            if self._inotify is None:
                self._inotify = kernel.Inotify()
                self._epoll.register(self._inotify.fd, select.EPOLLIN)
            # IN_MODIFY is what kernfs' cgroup_file_notify() raises; IN_DELETE_SELF
            # and the IN_IGNORED that follows tell us the cgroup went away.
            wd = self._inotify.add_watch(path, kernel.IN_MODIFY | kernel.IN_DELETE_SELF)
        except OSError as exc:
            self._release(name)
            reason = (
                f"no memory.events in {cgroup_dir} (a root cgroup, cgroup v1, or the memory "
                f"controller not enabled for it)"
                if exc.errno == errno.ENOENT
                else f"cannot watch {path}: {exc.strerror}"
            )
            return self._unarmed(name, ("events", path), Mechanism.MEMORY_EVENTS, path, reason)
        self._replace(name, _MemoryEvents(path, wd))
        self._by_wd.setdefault(wd, []).append(name)
        return self._set_status(
            name,
            MechanismStatus(
                Mechanism.MEMORY_EVENTS,
                MechanismState.ACTIVE,
                path,
                f"inotify IN_MODIFY: fires when the cgroup reaches memory.max ({limit} bytes) "
                f"or OOMs, not at an eviction threshold below it",
            ),
        )

    def arm_psi(self, name: str, pressure_file: str, spec: psi.TriggerSpec) -> MechanismStatus:
        """Notify when ``spec``'s stall is reached on ``pressure_file``.

        Falls back, saying so in the status and the log, to the nearest window an
        unprivileged process may use when the kernel answers EINVAL, and to polling
        the file's ``total`` when the kernel refuses triggers altogether.
        """
        current = self._named.get(name)
        key: tuple[object, ...] = ("psi", pressure_file, spec)
        if current is not None and current.key == key and not isinstance(current.entry, _Unarmed):
            return self._statuses[name]
        refusal: OSError | None = None
        if self._psi_kernel_triggers:
            armed = spec
            try:
                fd = kernel.open_psi_trigger(pressure_file, spec.kernel_request())
            except OSError as exc:
                refusal = exc
                wider = psi.unprivileged_equivalent(spec)
                if exc.errno == errno.EINVAL and wider is not None:
                    try:
                        fd = kernel.open_psi_trigger(pressure_file, wider.kernel_request())
                        armed, refusal = wider, None
                    except OSError as wider_exc:
                        refusal = wider_exc
            if refusal is None:
                entry = _KernelPsi(pressure_file, armed, fd)
                self._replace(name, entry, key=key, fd=fd, events=select.EPOLLPRI)
                if armed == spec:
                    status = MechanismStatus(
                        Mechanism.PSI, MechanismState.ACTIVE, pressure_file, str(spec)
                    )
                else:
                    status = MechanismStatus(
                        Mechanism.PSI,
                        MechanismState.FALLBACK,
                        pressure_file,
                        f"armed {armed} instead of {spec}: the kernel refused a "
                        f"{durations.format_go_duration(spec.window_s)} window (EINVAL); "
                        f"without CAP_SYS_RESOURCE it accepts only multiples of 2s",
                    )
                return self._set_status(name, status)
        return self._arm_polled_psi(name, pressure_file, spec, key, refusal)

    def _arm_polled_psi(
        self,
        name: str,
        pressure_file: str,
        spec: psi.TriggerSpec,
        key: tuple[object, ...],
        refusal: OSError | None,
    ) -> MechanismStatus:
        why = (
            "kernel triggers disabled by configuration"
            if refusal is None
            else f"the kernel refused the trigger ({_describe(refusal)})"
        )
        now = time.monotonic()
        try:
            total = psi.parse_total(kernel.read_small_file(pressure_file), spec.line)
        except (OSError, ValueError) as exc:
            self._release(name)
            return self._unarmed(
                name,
                key,
                Mechanism.PSI,
                pressure_file,
                f"{why}, and the file cannot be polled either: {_describe(exc)}",
            )
        _, tracker = psi.StallTracker(spec).observe(now, total)
        self._replace(
            name, _PolledPsi(pressure_file, spec, tracker, now + self._poll_interval), key=key
        )
        return self._set_status(
            name,
            MechanismStatus(
                Mechanism.PSI,
                MechanismState.FALLBACK,
                pressure_file,
                f"{spec} emulated by reading the stall total every "
                f"{durations.format_go_duration(self._poll_interval)}: {why}",
            ),
        )

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
        """Read ``probe`` (one memory signal's available bytes) at the adaptive interval
        and wake when the set of ``thresholds`` (bytes of available) it is below changes.

        ``observed`` is the value the caller read in a full collection, at
        ``observed_at`` (monotonic seconds; default now): it counts as a read taken
        then, so the next one is scheduled from the moment of the collection, not from
        this call (a cycle on a slow kernel can take longer than the poll's floor), and
        a crossing it shows is not reported again. Re-arming the same name and source
        keeps the poll's rate.
        """
        now = time.monotonic()
        sampled = now if observed_at is None else min(observed_at, now)
        current = self._named.get(name)
        if (
            current is not None
            and isinstance(current.entry, _PolledMemory)
            and current.entry.source == source
        ):
            entry = current.entry
            entry.probe = probe
            if entry.thresholds != thresholds:
                entry.thresholds = thresholds
                entry.due = now
            if observed is not None and sampled > (entry.rate.time or float("-inf")):
                self._observe_memory(entry, observed, sampled)
            return self._statuses[name]
        entry = _PolledMemory(source, probe, thresholds, due=now, rate=adaptive.FallRate())
        if observed is not None:
            self._observe_memory(entry, observed, sampled)
        self._replace(name, entry)
        bounds = self._memory_poll
        return self._set_status(
            name,
            MechanismStatus(
                Mechanism.MEMORY_POLL,
                MechanismState.ACTIVE,
                source,
                f"read every {durations.format_go_duration(bounds.floor)} to "
                f"{durations.format_go_duration(bounds.ceiling)}, sooner the nearer a "
                f"threshold and the faster memory falls",
            ),
        )

    def disarm(self, name: str) -> None:
        """Release the trigger ``name`` and forget its status; unknown names are fine."""
        self._release(name)
        self._statuses.pop(name, None)

    # --- waiting ----------------------------------------------------------------------

    def wake(self) -> None:
        """Make the current or next :meth:`wait` return at once. Thread- and
        signal-handler-safe (one write to an eventfd); a no-op once closed."""
        waker = self._waker
        if waker >= 0:
            os.eventfd_write(waker, 1)

    def wait(self, timeout_s: float | None) -> list[Wake]:
        """Wakes since the last call, waiting up to ``timeout_s`` for the first one."""
        # One clock read per round: a wake-up costs little on a real host, but each
        # system call counts where they are dear (user-mode-linux, gVisor).
        now = time.monotonic()
        deadline = None if timeout_s is None else now + max(0.0, timeout_s)
        while True:
            wakes = self._poll_emulated(now)
            limit = deadline
            for named in self._named.values():
                if isinstance(named.entry, _Polled):
                    limit = named.entry.due if limit is None else min(limit, named.entry.due)
            block = -1.0 if limit is None else max(0.0, limit - now)
            events = self._epoll.poll(0.0 if wakes else block)
            now = time.monotonic()
            for fd, mask in events:
                wakes.extend(self._on_ready(fd, mask, now))
            if wakes:
                return _coalesce(wakes)
            if deadline is not None and now >= deadline:
                return []

    def _poll_emulated(self, now: float) -> list[Wake]:
        wakes: list[Wake] = []
        for name, named in list(self._named.items()):
            entry = named.entry
            if isinstance(entry, _PolledMemory):
                if now >= entry.due and self._poll_memory(name, entry, now):
                    wakes.append(Wake(name, Mechanism.MEMORY_POLL, now))
                continue
            if not isinstance(entry, _PolledPsi) or now < entry.due:
                continue
            entry.due = now + self._poll_interval
            try:
                total = psi.parse_total(kernel.read_small_file(entry.path), entry.spec.line)
            except (OSError, ValueError) as exc:
                self._release(name)
                self._unarmed(
                    name,
                    named.key,
                    Mechanism.PSI,
                    entry.path,
                    f"polling stopped: {_describe(exc)}",
                )
                continue
            fired, entry.tracker = entry.tracker.observe(now, total)
            if fired:
                wakes.append(Wake(name, Mechanism.PSI, time.monotonic()))
        return wakes

    def _poll_memory(self, name: str, entry: _PolledMemory, now: float) -> bool:
        """Read one memory signal; schedule the next read; whether to wake the loop."""
        try:
            available = entry.probe()
        except (OSError, SignalReadError) as exc:
            # The loop's full collection reports the signal unavailable; retry at the
            # ceiling rather than spin on a failing read.
            entry.due = now + self._memory_poll.ceiling
            self._log.debug("memory poll %s: %s", name, _describe(exc))
            return False
        previous = entry.below
        return self._observe_memory(entry, available, now) != previous and previous is not None

    def _observe_memory(self, entry: _PolledMemory, available: int, now: float) -> frozenset[int]:
        """Record one reading of the signal: its fall rate, its side of each threshold,
        and when to read next. Returns the thresholds it is below."""
        bounds = self._memory_poll
        entry.rate = entry.rate.observe(now, available)
        entry.due = adaptive.next_poll_time(
            headroom=adaptive.nearest_headroom(available, entry.thresholds),
            rate=entry.rate.rate,
            floor=bounds.floor,
            ceiling=bounds.ceiling,
            min_rate=bounds.min_rate,
            now=now,
        )
        entry.below = adaptive.crossed_below(available, entry.thresholds)
        return entry.below

    def _on_ready(self, fd: int, mask: int, stamp: float) -> list[Wake]:
        if fd == self._waker:
            return [Wake(WAKE_TRIGGER, Mechanism.WAKE, stamp, kernel.drain_eventfd(fd))]
        if self._inotify is not None and fd == self._inotify.fd:
            return self._on_inotify(stamp)
        name = self._by_fd.get(fd)
        if name is None:  # released earlier in this batch
            return []
        entry = self._named[name].entry
        if isinstance(entry, _MemcgThreshold):
            count = kernel.drain_eventfd(fd)
            if not os.path.exists(os.path.join(entry.cgroup_dir, "cgroup.event_control")):
                # The kernel signals the eventfd one last time when the cgroup goes.
                self._lost(name, Mechanism.MEMCG_THRESHOLD, entry.cgroup_dir, "cgroup removed")
            return [Wake(name, Mechanism.MEMCG_THRESHOLD, stamp, max(count, 1))]
        if isinstance(entry, _KernelPsi):
            if mask & select.EPOLLERR:
                self._lost(
                    name,
                    Mechanism.PSI,
                    entry.path,
                    "the pressure file went away (cgroup removed, or its PSI disabled)",
                )
                return []
            return [Wake(name, Mechanism.PSI, stamp)]
        return []

    def _on_inotify(self, stamp: float) -> list[Wake]:
        assert self._inotify is not None
        wakes: list[Wake] = []
        for wd, mask in self._inotify.read_events():
            if mask & kernel.IN_Q_OVERFLOW:
                names = [name for names in self._by_wd.values() for name in names]
            else:
                names = list(self._by_wd.get(wd, ()))
            for name in names:
                wakes.append(Wake(name, Mechanism.MEMORY_EVENTS, stamp))
                if mask & (kernel.IN_IGNORED | kernel.IN_DELETE_SELF):
                    entry = self._named[name].entry
                    path = entry.path if isinstance(entry, _MemoryEvents) else ""
                    self._lost(name, Mechanism.MEMORY_EVENTS, path, "memory.events removed")
        return wakes

    # --- status -----------------------------------------------------------------------

    def status(self) -> Mapping[str, MechanismStatus]:
        """Every armed name's current status (a snapshot)."""
        return types.MappingProxyType(dict(self._statuses))

    def _set_status(self, name: str, status: MechanismStatus) -> MechanismStatus:
        previous = self._statuses.get(name)
        self._statuses[name] = status
        if previous == status:
            return status
        if status.state is MechanismState.ACTIVE:
            # Re-arming a memory threshold changes the detail every collection or so.
            level = logging.DEBUG if previous and previous.state is status.state else logging.INFO
        else:
            level = logging.WARNING
            if previous and previous.state is status.state and previous.detail == status.detail:
                level = logging.DEBUG
        self._log.log(
            level,
            "trigger %s (%s on %s): %s: %s",
            name,
            status.mechanism,
            status.path,
            status.state,
            status.detail,
        )
        return status

    def _unarmed(
        self, name: str, key: tuple[object, ...], mechanism: Mechanism, path: str, reason: str
    ) -> MechanismStatus:
        self._named[name] = _Named(_Unarmed(), key)
        return self._set_status(
            name, MechanismStatus(mechanism, MechanismState.UNAVAILABLE, path, reason)
        )

    def _lost(self, name: str, mechanism: Mechanism, path: str, reason: str) -> None:
        key = self._named[name].key
        self._release(name)
        self._unarmed(name, key, mechanism, path, reason)

    # --- bookkeeping ------------------------------------------------------------------

    def _replace(
        self,
        name: str,
        entry: _Entry,
        *,
        key: tuple[object, ...] = (),
        fd: int | None = None,
        events: int = 0,
    ) -> None:
        """Install ``entry`` under ``name`` (polling ``fd`` for ``events``); the previous
        entry is released afterwards, so a re-armed trigger has no gap."""
        previous = self._named.get(name)
        self._named[name] = _Named(entry, key)
        if fd is not None:
            self._by_fd[fd] = name
            self._epoll.register(fd, events)
        if previous is not None:
            self._release_entry(name, previous.entry)

    def _release(self, name: str) -> None:
        named = self._named.pop(name, None)
        if named is not None:
            self._release_entry(name, named.entry)

    def _release_entry(self, name: str, entry: _Entry) -> None:
        if isinstance(entry, _MemcgThreshold | _KernelPsi):
            self._by_fd.pop(entry.fd, None)
            self._epoll.unregister(entry.fd)
            os.close(entry.fd)  # closing the eventfd also unregisters the memcg threshold
        elif isinstance(entry, _MemoryEvents):
            names = self._by_wd.get(entry.wd, [])
            if name in names:
                names.remove(name)
            if not names:
                self._by_wd.pop(entry.wd, None)
                if self._inotify is not None:
                    self._inotify.rm_watch(entry.wd)

    def close(self) -> None:
        """Release every trigger and the epoll instance. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for name in list(self._named):
            self._release(name)
        if self._inotify is not None:
            self._inotify.close()
        self._epoll.close()
        waker, self._waker = self._waker, -1
        os.close(waker)

    def __enter__(self) -> TriggerSet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _coalesce(wakes: list[Wake]) -> list[Wake]:
    merged: dict[str, Wake] = {}
    for wake in wakes:
        earlier = merged.get(wake.trigger)
        merged[wake.trigger] = (
            wake
            if earlier is None
            else Wake(wake.trigger, wake.mechanism, earlier.time, earlier.count + wake.count)
        )
    return list(merged.values())


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{errno.errorcode.get(exc.errno, exc.errno)}: {exc.strerror}"
    return str(exc)


def _memory_limit(cgroup_dir: str) -> int | None:
    """A cgroup v2 directory's ``memory.max`` in bytes; ``None`` when unlimited or
    unreadable."""
    try:
        text = kernel.read_small_file(os.path.join(cgroup_dir, "memory.max")).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _memcg_refusal(cgroup_dir: str, exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        if not os.path.isdir(cgroup_dir):
            return f"cgroup {cgroup_dir} does not exist"
        return (
            f"no cgroup.event_control or memory.usage_in_bytes in {cgroup_dir}: not a cgroup "
            f"v1 memory cgroup (on cgroup v2, memory.events and PSI triggers take its place)"
        )
    return f"cannot register the threshold: {_describe(exc)}"
