"""Inside the guest: serve the host's commands over a serial line, one at a time.

    python -m tests.uml.guest /dev/ttyS1

Started by the guest's init (see :mod:`tests.uml.machine`) with the checkout as its
working directory; standard library only. It brings the loopback interface up, sets the
serial line raw, says hello (the kernel's release), then reads one JSON request a line:

- ``{"id": n, "command": [...], "env": {...}, "timeout_s": t, "results": dir}`` runs the
  command in a new session, its stdout and stderr in ``dir/output``, ``$GUEST_RESULTS``
  set to ``dir``; past ``timeout_s`` the whole session is killed. Whatever the command
  leaves running in its session is killed too, so one command's processes never
  disturb the next. The answer: ``{"id": n, "status": code or null, "timed_out": bool,
  "seconds": wall time}``.
- ``{"stop": true}``: sync and power the machine off.

A serial line, rather than files polled on the shared directory, so that both sides
block on a read and nothing in the guest wakes while a benchmark measures.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
import tty
from pathlib import Path
from typing import Any

RB_POWER_OFF = 0x4321FEDC
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def loopback_up() -> None:
    """``ip link set lo up`` without needing ``ip``: the agent serves metrics on
    127.0.0.1, and a fresh kernel's loopback is down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def open_line(path: str) -> int:
    """The serial line, raw: no echo, no line editing, no CR/LF translation, and no
    wait for a carrier that an emulated line never raises."""
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    tty.setraw(fd)
    attributes = termios.tcgetattr(fd)
    attributes[2] |= termios.CLOCAL
    attributes[2] &= ~termios.HUPCL
    termios.tcsetattr(fd, termios.TCSANOW, attributes)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


class Line:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = b""

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\n"
        while data:
            data = data[os.write(self.fd, data) :]

    def receive(self) -> dict[str, Any] | None:
        while b"\n" not in self.pending:
            chunk = os.read(self.fd, 4096)
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message


def kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def run(request: dict[str, Any]) -> dict[str, Any]:
    results = Path(request["results"])
    env = {**os.environ, **request.get("env", {}), "GUEST_RESULTS": str(results)}
    started = time.monotonic()
    with (results / "output").open("wb") as output:
        process = subprocess.Popen(
            request["command"],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        timed_out = False
        try:
            process.wait(timeout=request["timeout_s"])
        except subprocess.TimeoutExpired:
            timed_out = True
        kill_session(process.pid)
        process.wait()
    return {
        "id": request["id"],
        "status": None if timed_out else process.returncode,
        "timed_out": timed_out,
        "seconds": time.monotonic() - started,
    }


def power_off() -> None:
    """``reboot(RB_POWER_OFF)``: at once, with nothing left to run (init's own fallback,
    the sysrq trigger, powers off while its shell still runs, and a command it cannot
    start then makes init exit: a kernel panic on the way down)."""
    os.sync()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.reboot(RB_POWER_OFF)
    raise OSError(ctypes.get_errno(), "reboot(RB_POWER_OFF) failed")


def main() -> None:
    loopback_up()
    line = Line(open_line(sys.argv[1]))
    line.send({"release": os.uname().release})
    while (request := line.receive()) is not None and not request.get("stop"):
        line.send(run(request))
    power_off()


if __name__ == "__main__":
    main()
