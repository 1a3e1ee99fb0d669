"""The scheduler's start-up timeline: how long after its process started each step of
the way to the first binding came, logged as it happens.

An operator waits for the first binding from the moment the process starts, and most
of that time is not the scheduler's code: the interpreter and its imports, the API
server building the lists, the machine's other work. The timeline says which: the
``informers synced`` line carries when the informers started and how long each first
list took (they run at once, so the slowest is the one that counted), and a ``first
binding`` line says when the first pod was scheduled and when its binding was
answered. Every time is in seconds since the process started (the kernel's record of
it in ``/proc/self/stat``), so the imports before any of this code ran are counted too;
``benchmarks/bench_vs_kube_scheduler.py`` prints it per run beside kube-scheduler's
first binding.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nodeagent.kube.informer import Informer


def process_started(proc: Path = Path("/proc")) -> float | None:
    """When this process started, on the :func:`time.monotonic` clock (both count from
    the boot on Linux: ``starttime`` in ``/proc/self/stat`` is in clock ticks since
    then, and the monotonic clock is compared with the boot-time clock to place it).
    None where ``proc`` cannot tell."""
    try:
        fields = (proc / "self" / "stat").read_text().rsplit(")", 1)[1].split()
        started_since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, IndexError, ValueError, AttributeError):
        return None
    return time.monotonic() - (since_boot - started_since_boot)


class StartupTimeline:
    """Seconds since the process started, for the steps the scheduler logs once each.

    ``started``: the process's start on the monotonic clock (:func:`process_started`);
    None leaves the times out of the log (a platform without ``/proc``)."""

    def __init__(self, started: float | None) -> None:
        self._started = started
        self._lock = threading.Lock()
        self.informers_started: float | None = None
        self.first_scheduled: float | None = None
        self._bound = False

    def since_start(self, instant: float | None = None) -> float | None:
        """Seconds from the process start to ``instant`` (monotonic; default now)."""
        if self._started is None:
            return None
        return round((time.monotonic() if instant is None else instant) - self._started, 3)

    def starting_informers(self) -> None:
        self.informers_started = time.monotonic()

    def synced(self, informers: Iterable[Informer]) -> dict[str, Any]:
        """The ``informers synced`` line's timeline fields: when the informers started,
        and each first list's seconds (from its request to its last object handled)."""
        if self._started is None:
            return {}
        lists = {}
        for informer in informers:
            first = informer.stats.first_list
            if first is not None:
                lists[informer.list_watch.resource] = round(first[1] - first[0], 3)
        return {
            "sinceStart": self.since_start(),
            "informersStartedAt": self.since_start(self.informers_started),
            "listSeconds": lists,
        }

    def scheduled(self) -> None:
        """A pod got a node (its binding handed over); only the first counts."""
        if self.first_scheduled is None:
            self.first_scheduled = time.monotonic()

    def bound(self) -> dict[str, Any] | None:
        """The ``first binding`` line's fields for the first binding answered, else
        None (a later one, or no process start known)."""
        with self._lock:
            if self._bound or self._started is None:
                return None
            self._bound = True
        return {
            "sinceStart": self.since_start(),
            "firstScheduledAt": self.since_start(self.first_scheduled),
        }
