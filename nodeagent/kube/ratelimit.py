"""Client-side request budget: a token bucket, as client-go's ``QPS``/``Burst``.

An agent runs on every node, so its API load is multiplied by the cluster size; the
bucket caps what one agent can send even if a bug made it loop. ``burst`` requests may go
at once, after which requests are spaced ``1/qps`` apart. Waiting uses the injected
:class:`~nodeagent.base.clock.Clock`, so tests observe the spacing without sleeping.
"""

from __future__ import annotations

import threading

from nodeagent.base.clock import Clock, RealClock


class TokenBucket:
    def __init__(self, qps: float, burst: int, *, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"token bucket needs qps > 0 and burst >= 1 (got {qps}, {burst})")
        self.qps = qps
        self.burst = burst
        self._clock = clock or RealClock()
        self._tokens = float(burst)
        self._updated = self._clock.now()
        self._lock = threading.Lock()

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.qps)
        self._updated = now

    def reserve(self) -> float:
        """Take a token; return how long the caller must wait before using it."""
        with self._lock:
            self._refill(self._clock.now())
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def acquire(self) -> float:
        """Block until a request may be sent; return the seconds waited."""
        delay = self.reserve()
        if delay > 0:
            self._clock.sleep(delay)
        return delay
