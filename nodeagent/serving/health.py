"""Liveness and readiness, as the loop reports them.

The two probes answer different questions, and restart or route on different evidence:

* **Liveness** (``/healthz``): is the evaluation loop still turning? The loop calls
  :meth:`Health.beat` after every cycle; if no beat came for ``liveness_timeout``
  seconds the loop is wedged (a hung read of a dying filesystem, a deadlock) and
  the kubelet should restart the agent. The start of the process counts as a beat, so
  imports and the first collection have the same allowance.
* **Readiness** (``/readyz``): is the agent doing its job? Only while it is alive, once
  the first evaluation is done and, unless it runs standalone, the Kubernetes API is reachable:
  an agent that cannot patch its node nor evict is running but not ready, which holds
  a DaemonSet rollout instead of spreading a broken version.

The state is plain values behind a lock; reading it never blocks the loop for long.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from nodeagent.base.clock import Clock


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ok: bool
    detail: str
    """One line for a human (the probe's response body)."""


class Probes(Protocol):
    """What ``/healthz`` and ``/readyz`` ask: the agent's :class:`Health`, the
    scheduler's own answers."""

    def liveness(self) -> ProbeResult: ...

    def readiness(self) -> ProbeResult: ...


class Health:
    """What ``/healthz`` and ``/readyz`` answer.

    Contract for the loop: call :meth:`beat` once per completed evaluation cycle with
    the clock's ``now()``; call :meth:`set_api_reachable` whenever a request to the API
    succeeds or finally fails (after retries). Both are cheap and thread-safe.
    """

    def __init__(self, *, clock: Clock, liveness_timeout: float, requires_api: bool) -> None:
        """``requires_api=False`` for ``--standalone`` (no cluster): then readiness only
        waits for the first evaluation."""
        self._clock = clock
        self._timeout = liveness_timeout
        self._requires_api = requires_api
        self._lock = threading.Lock()
        self._last_beat = clock.now()
        self._evaluated = False
        self._api_reachable = False
        self._api_detail = "no request to the Kubernetes API yet"

    def beat(self, now: float) -> None:
        """One evaluation cycle completed at ``now`` (monotonic seconds)."""
        with self._lock:
            self._last_beat = now
            self._evaluated = True

    def set_api_reachable(self, reachable: bool, detail: str = "") -> None:
        """The last request to the API succeeded, or failed for ``detail``."""
        with self._lock:
            self._api_reachable = reachable
            self._api_detail = detail or (
                "Kubernetes API reachable" if reachable else "Kubernetes API unreachable"
            )

    def liveness(self) -> ProbeResult:
        now = self._clock.now()
        with self._lock:
            silence = now - self._last_beat
            evaluated = self._evaluated
        what = "last evaluation" if evaluated else "start"
        if silence > self._timeout:
            return ProbeResult(
                False,
                f"no evaluation for {silence:.1f} s since {what} (limit {self._timeout:g} s)",
            )
        return ProbeResult(True, f"{what} {silence:.1f} s ago")

    def readiness(self) -> ProbeResult:
        alive = self.liveness()
        if not alive.ok:
            return alive
        with self._lock:
            evaluated = self._evaluated
            reachable = self._api_reachable
            detail = self._api_detail
        if not evaluated:
            return ProbeResult(False, "first evaluation not done yet")
        if self._requires_api and not reachable:
            return ProbeResult(False, detail)
        return ProbeResult(True, "evaluating" + ("" if self._requires_api else " (standalone)"))
