"""Waiting on a condition, never on a sleep: a test polls what it needs until it holds,
within a bound generous enough for a loaded machine (a condition that holds costs
nothing to wait for)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T | None], timeout: float = 30.0, what: str = "") -> T:
    """``check()``'s first truthy value, polled every 20 ms; AssertionError after
    ``timeout`` seconds, naming ``what`` (or the check)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {what or check}")
        time.sleep(0.02)
