"""How the long-running commands (``run``, ``scheduler``, ``extender``) stop.

SIGTERM (a Deployment, DaemonSet or systemd stopping us) and SIGINT (Ctrl-C) both ask
for an orderly stop: the command's own shutdown path runs, nothing is killed mid-write.
The previous handlers come back afterwards, so a command run in-process (the tests)
leaves the interpreter as it found it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def on_stop_signals(request_stop: Callable[[], object]) -> Iterator[None]:
    """Call ``request_stop`` on SIGTERM or SIGINT while the block runs."""

    def handler(signum: int, frame: FrameType | None) -> None:
        request_stop()

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, restored in previous.items():
            signal.signal(sig, restored)
