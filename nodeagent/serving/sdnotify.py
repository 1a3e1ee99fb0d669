"""systemd's notify protocol: readiness, status, stopping, and the watchdog.

Under ``Type=notify`` systemd waits for ``READY=1`` before it considers the agent
started, and with ``WatchdogSec=`` it kills and restarts the agent when no
``WATCHDOG=1`` arrives in time. The loop sends one from each evaluation cycle, so the
watchdog proves what matters (decisions are still being made), not merely that the
process exists.

The protocol is one datagram of ``KEY=value`` lines to the ``AF_UNIX`` socket named by
``$NOTIFY_SOCKET`` (a path, or an abstract address written with a leading ``@``).
``$WATCHDOG_USEC`` gives the timeout; ``$WATCHDOG_PID``, when set, names the process
it is meant for. It is implemented here in a few lines rather than through a binding
to libsystemd, which a container image does not have.

Outside systemd (no ``$NOTIFY_SOCKET``) every call is a no-op, and a notification
that cannot be delivered is logged once and never raised: the agent protects the node
whether or not its supervisor listens.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


def _socket_address(value: str) -> str | None:
    """The ``sendto`` address for ``$NOTIFY_SOCKET``, or None when unsupported."""
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


class SystemdNotifier:
    """Sends notifications to systemd (or to nothing, outside it).

    Contract for the loop::

        notifier = SystemdNotifier.from_environ()
        ...first evaluation done...
        notifier.ready()
        while running:
            ...one evaluation cycle...
            notifier.watchdog(clock.now())   # sent at most every WATCHDOG_USEC / 2
        notifier.stopping()
        notifier.close()
    """

    def __init__(self, address: str | None, *, watchdog_timeout: float | None) -> None:
        """``address`` is the value of ``$NOTIFY_SOCKET`` (None disables everything);
        ``watchdog_timeout`` is systemd's ``WatchdogSec`` in seconds, or None."""
        self._address = _socket_address(address) if address else None
        if address and self._address is None:
            log.warning("NOTIFY_SOCKET=%r is not a unix socket; not notifying systemd", address)
        self._watchdog_timeout = watchdog_timeout if self._address else None
        self._socket: socket.socket | None = None
        self._last_watchdog: float | None = None
        self._warned = False

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, *, pid: int | None = None
    ) -> SystemdNotifier:
        """Read ``$NOTIFY_SOCKET``, ``$WATCHDOG_USEC`` and ``$WATCHDOG_PID`` as
        ``sd_notify(3)`` and ``sd_watchdog_enabled(3)`` do."""
        environ = os.environ if environ is None else environ
        pid = os.getpid() if pid is None else pid
        timeout: float | None = None
        usec = environ.get("WATCHDOG_USEC", "")
        watchdog_pid = environ.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not watchdog_pid or watchdog_pid == str(pid)):
            timeout = int(usec) / 1e6
        return cls(environ.get("NOTIFY_SOCKET") or None, watchdog_timeout=timeout)

    @property
    def enabled(self) -> bool:
        """Whether a supervisor listens (``$NOTIFY_SOCKET`` was set)."""
        return self._address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between two ``WATCHDOG=1`` (half the timeout, as systemd advises),
        or None when no watchdog is configured."""
        return None if self._watchdog_timeout is None else self._watchdog_timeout / 2

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=value`` lines in one datagram; True when delivered."""
        if self._address is None:
            return False
        message = "\n".join(assignments).encode()
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.sendto(message, self._address)
        except OSError as exc:
            if not self._warned:
                log.warning("cannot notify systemd at %r: %s", self._address, exc)
                self._warned = True
            return False
        return True

    def ready(self, status: str = "") -> bool:
        """The agent is up: its first evaluation is done."""
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        """A one-line status shown by ``systemctl status``."""
        return self.notify(f"STATUS={text}")

    def watchdog(self, now: float) -> bool:
        """Feed the watchdog from an evaluation cycle completed at ``now`` (monotonic
        seconds); sends only when half the timeout passed since the last one. True
        when a ping was sent."""
        interval = self.watchdog_interval
        if interval is None:
            return False
        if self._last_watchdog is not None and now - self._last_watchdog < interval:
            return False
        self._last_watchdog = now
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        """The agent is shutting down on purpose (systemd then expects no more pings)."""
        return self.notify("STOPPING=1")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
