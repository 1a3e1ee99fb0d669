"""Boot a real cgroup v2 kernel once and run commands in it with the checkout's Python.

This machine's host is cgroup v1 (hybrid); most nodes run cgroup v2, whose memory
files only a v2 kernel has. Three ways to boot one, behind one interface (:class:`Guest`):

- ``uml``: Debian's ``user-mode-linux`` (``/usr/bin/linux.uml``, Linux 6.1 built to run
  as an ordinary process: no VM), the host's ``/`` its root through hostfs. One CPU,
  emulated system calls (allocation about 20 MiB/s, a ``pread`` of a cgroup file about
  40 µs), no PSI. It does not boot on every CPU: Debian's build panics at init where
  the CPU's extended register state is larger than it was built for (seen with AMX:
  ``ptrace set fp regs failed, errno = 14``).
- ``kvm``: Debian's own kernel (``linux-image-amd64``) under ``qemu-system-x86_64
  -accel kvm``, the host's ``/`` shared over 9p (:mod:`tests.uml.qemu`): a real machine's
  kernel, PSI included, two CPUs.
- ``tcg``: the same kernel under qemu's own emulation, where neither of the others
  boots: slower, but it runs on any x86-64 machine with qemu.

Every guest sees the host's files read-only at their own paths, so the checkout and its
Python (``sys.executable``, its site-packages) run inside as on the host, over a tmpfs
on ``/tmp``, ``/var/tmp``, ``/run`` and ``/dev/shm``, with cgroup2 at
``/sys/fs/cgroup`` and the loopback interface up. One directory, the guest's work
directory, is shared read-write at its host path: each command's results directory
(``$GUEST_RESULTS`` inside) is there, and ``disk``, where an ext4 disk image is mounted
when :func:`start` is given ``disk_mib`` (``$GUEST_DISK``): the filesystem inside for a
test's page cache.

A guest boots once and serves commands one at a time over a serial line
(:mod:`tests.uml.guest`): a test run pays one boot per kernel, not one per test. A
command past its timeout is killed inside and the guest serves on; a guest that does
not answer within the timeout plus :data:`ANSWER_GRACE_S` is killed whole, with every
process it had on the host.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.uml import qemu

LINUX_UML = Path("/usr/bin/linux.uml")
REPO_ROOT = Path(__file__).resolve().parents[2]
CONTROL_LINE = "/dev/ttyS1"
"""The guest's end of the control line: its second serial line on every kernel."""
ANSWER_GRACE_S = 30.0
"""How long past a command's timeout the host waits for the guest to say it killed it."""


class Kernel(enum.StrEnum):
    UML = "uml"
    KVM = "kvm"
    TCG = "tcg"

    @property
    def description(self) -> str:
        return {
            Kernel.UML: "user-mode-linux",
            Kernel.KVM: "Debian's kernel under qemu -accel kvm",
            Kernel.TCG: "Debian's kernel under qemu's emulation (TCG)",
        }[self]


BOOT_TIMEOUT_S = {Kernel.UML: 60.0, Kernel.KVM: 60.0, Kernel.TCG: 240.0}


@dataclass(frozen=True)
class Run:
    """What one command produced."""

    output: str
    """The command's stdout and stderr."""
    status: int | None
    """Its exit status (negative: killed by that signal); ``None`` if it was killed at
    its timeout or the guest died under it."""
    timed_out: bool
    results: Path
    """The host directory the command could write to (``$GUEST_RESULTS`` inside)."""
    seconds: float


class BootFailed(RuntimeError):
    """The kernel did not come up; the message ends with its own words."""


def missing(kernel: Kernel) -> str | None:
    """Why ``kernel`` cannot even be tried here, or ``None``: nothing is booted."""
    if kernel is Kernel.UML:
        if not LINUX_UML.is_file():
            return f"{LINUX_UML} is missing (apt-get install user-mode-linux)"
        if os.geteuid() != 0:
            return "user-mode-linux's guest writes its results to the host as root"
        return None
    reason = qemu.missing()
    if reason is None and kernel is Kernel.KVM:
        reason = qemu.kvm_problem()
    return reason


class _Line:
    """The host's end of the control line: one JSON message a line."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pending = b""

    def send(self, message: Mapping[str, Any]) -> None:
        self.sock.settimeout(None)
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def receive(self, deadline: float) -> dict[str, Any] | None:
        """The next message; ``None`` when the guest has gone; TimeoutError at
        ``deadline``."""
        while b"\n" not in self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message


class Guest:
    """A booted kernel serving commands. Made by :func:`start`; a context manager that
    powers it off."""

    def __init__(self, kernel: Kernel, work: Path, *, mem_mib: int, answer_grace_s: float) -> None:
        self.kernel = kernel
        self.work = work
        self.mem_mib = mem_mib
        self.answer_grace_s = answer_grace_s
        self.release = ""
        """``uname -r`` inside."""
        self.boot_s = 0.0
        """From starting the kernel's process to the guest's hello."""
        self.runs = 0
        self.gone: str | None = None
        """Why the guest can serve no more, once it cannot."""
        self._process: subprocess.Popen[bytes] | None = None
        self._line: _Line | None = None
        self._sockets: list[socket.socket] = []
        self._cleanup: list[Path] = []
        self._lock = threading.Lock()

    @property
    def console_path(self) -> Path:
        return self.work / "console.log"

    def console(self) -> str:
        """The kernel's console so far (and qemu's own messages)."""
        try:
            return self.console_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __str__(self) -> str:
        return f"{self.kernel} (Linux {self.release}, {self.kernel.description})"

    def run(
        self,
        command: Sequence[str],
        *,
        timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> Run:
        """Run ``command`` as root inside (cwd: the repository), killed past
        ``timeout_s``."""
        with self._lock:
            if self.gone is not None or self._line is None:
                raise RuntimeError(f"the {self} guest is gone: {self.gone}")
            self.runs += 1
            results = self.work / "runs" / str(self.runs)
            results.mkdir(parents=True)
            request = {
                "id": self.runs,
                "command": list(command),
                "env": dict(env or {}),
                "timeout_s": timeout_s,
                "results": str(results),
            }
            started = time.monotonic()
            answer: dict[str, Any] | None = None
            timed_out = False
            try:
                self._line.send(request)
                answer = self._line.receive(started + timeout_s + self.answer_grace_s)
            except TimeoutError:
                timed_out = True
                self.gone = f"no answer {timeout_s + self.answer_grace_s:.0f} s after a command"
            except OSError as error:
                self.gone = f"the control line failed: {error}"
            if answer is None:
                self.gone = self.gone or "the guest went away: " + telling(self.console())
                self._kill()
            output_file = results / "output"
            output = output_file.read_text(errors="replace") if output_file.is_file() else ""
            return Run(
                output=output,
                status=None if answer is None else answer["status"],
                timed_out=timed_out or (answer is not None and answer["timed_out"]),
                results=results,
                seconds=time.monotonic() - started,
            )

    def stop(self) -> None:
        """Ask the guest to power off; kill it if it does not within 30 s."""
        with self._lock:
            if self._process is None:
                return
            if self.gone is None and self._line is not None:
                try:
                    self._line.send({"stop": True})
                    self._process.wait(timeout=30)
                except (OSError, subprocess.TimeoutExpired):
                    pass
                self.gone = "stopped"
            self._kill()

    def __enter__(self) -> Guest:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def _kill(self) -> None:
        process = self._process
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            _wait_gone(process.pid)
        for sock in self._sockets:
            sock.close()
        for path in self._cleanup:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def _boot(
        self,
        args: list[str],
        pass_fds: Sequence[int],
        env: Mapping[str, str],
        host_end: socket.socket,
        timeout_s: float,
    ) -> None:
        """Start the kernel's process and wait for the guest's hello on ``host_end``
        (a connected socket, or the listening one qemu connects to)."""
        started = time.monotonic()
        deadline = started + timeout_s
        with self.console_path.open("wb") as console:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                pass_fds=pass_fds,
                env={**os.environ, **env},
                start_new_session=True,
            )
        self._sockets.append(host_end)
        threading.Thread(target=self._watch, args=(self._process,), daemon=True).start()
        hello: dict[str, Any] | None = None
        state = ""
        try:
            if host_end.type == socket.SOCK_STREAM and _is_listening(host_end):
                host_end.settimeout(max(deadline - time.monotonic(), 0.001))
                connection, _ = host_end.accept()
                self._sockets.append(connection)
                host_end = connection
            self._line = _Line(host_end)
            hello = self._line.receive(deadline)
        except TimeoutError:
            state = f"no hello within {timeout_s:.0f} s"
        except OSError:
            hello = None
        if hello is None:
            if not state:
                code = self._process.wait()
                state = f"its process exited ({code}) after {time.monotonic() - started:.1f} s"
            self.gone = state
            self._kill()
            raise BootFailed(
                f"{self.kernel} ({self.kernel.description}) did not boot: {state}: "
                + telling(self.console() + self._guest_log())
            )
        self.release = str(hello["release"])
        self.boot_s = time.monotonic() - started

    def _watch(self, process: subprocess.Popen[bytes]) -> None:
        """When the kernel's process ends, unblock whoever waits on the control line."""
        process.wait()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _guest_log(self) -> str:
        path = self.work / "guest.log"
        return "\n" + path.read_text(errors="replace") if path.is_file() else ""


def _wait_gone(group: int, timeout_s: float = 10.0) -> None:
    """Until no process of the kernel's process group is left: user-mode-linux runs each
    guest process as a host process of its group, and those killed take a moment to go."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)


def _is_listening(sock: socket.socket) -> bool:
    return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))


TELLING = re.compile(r"panic|fail|error|cannot|could not|unable|denied|initramfs:|traceback", re.I)


def telling(console: str) -> str:
    """The lines of a console that say why a kernel did not come up: its own words
    (the failing call, the panic, qemu's or our init's complaint; not a warning), else
    its last lines."""
    lines = [line.strip() for line in console.splitlines() if line.strip()]
    chosen = [line for line in lines if TELLING.search(line) and "warning" not in line]
    return "; ".join(dict.fromkeys(chosen[-4:] or lines[-3:])) or "no console output"


def start(
    kernel: Kernel,
    *,
    mem_mib: int = 768,
    disk_mib: int | None = None,
    workdir: Path | None = None,
    boot_timeout_s: float | None = None,
    answer_grace_s: float = ANSWER_GRACE_S,
) -> Guest:
    """Boot ``kernel`` with ``mem_mib`` of RAM (and an ext4 disk of ``disk_mib``); raises
    :class:`BootFailed` with the kernel's own words if it does not come up, RuntimeError
    if it cannot be tried (:func:`missing`). ``workdir`` (a fresh temporary directory by
    default) is the guest's work directory."""
    reason = missing(kernel)
    if reason is not None:
        raise RuntimeError(f"{kernel} cannot be tried: {reason}")
    work = workdir or Path(tempfile.mkdtemp(prefix=f"nodeagent-{kernel}-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "disk").mkdir(exist_ok=True)
    guest = Guest(kernel, work, mem_mib=mem_mib, answer_grace_s=answer_grace_s)
    disk = _disk(work, disk_mib) if disk_mib is not None else None
    if disk is not None:
        guest._cleanup.append(disk)
    timeout_s = boot_timeout_s or BOOT_TIMEOUT_S[kernel]
    if kernel is Kernel.UML:
        _boot_uml(guest, disk, timeout_s)
    else:
        _boot_qemu(guest, disk, timeout_s)
    return guest


def _disk(work: Path, size_mib: int) -> Path:
    image = work / "disk.img"
    with image.open("wb") as file:
        file.truncate(size_mib << 20)
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", str(image)],
        check=True,
        env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"},
    )
    return image


def _serve(work: Path, *, disk: bool) -> str:
    """The shell lines every guest's init ends with: run :mod:`tests.uml.guest` from the
    checkout, then power off."""
    exports = [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME=/root",
        "PYTHONDONTWRITEBYTECODE=1",
    ]
    if disk:
        exports.append(f"GUEST_DISK={shlex.quote(str(work / 'disk'))}")
    log = shlex.quote(str(work / "guest.log"))
    return f"""export {" ".join(exports)}
cd {shlex.quote(str(REPO_ROOT))}
{shlex.quote(sys.executable)} -m tests.uml.guest {CONTROL_LINE} > {log} 2>&1
sync
echo o > /proc/sysrq-trigger
sleep 60
"""


GUEST_TMPFS = ("/tmp", "/var/tmp", "/run")
"""Where a guest mounts a tmpfs of its own (programs write there; the host is read-only)."""


def _checkout_hidden() -> bool:
    """Whether the checkout is under one of :data:`GUEST_TMPFS` (CI may clone under
    ``/tmp``), where the guest's own tmpfs would hide it."""
    return any(REPO_ROOT.is_relative_to(where) for where in GUEST_TMPFS)


def _checkout_under_tmpfs() -> list[str]:
    """A hidden checkout (:func:`_checkout_hidden`) mounted back from the host under
    user-mode-linux, read-only."""
    if not _checkout_hidden():
        return []
    repo = shlex.quote(str(REPO_ROOT))
    return [f"mkdir -p {repo} && mount -r -t hostfs -o {repo} hostfs {repo}"]


def _boot_uml(guest: Guest, disk: Path | None, timeout_s: float) -> None:
    work = shlex.quote(str(guest.work))
    tmpfs = [f"mount -t tmpfs -o mode=1777 tmpfs {where}" for where in GUEST_TMPFS]
    init = guest.work / "init.sh"
    init.write_text(
        "\n".join(
            [
                "#!/bin/sh",
                "mount -t proc proc /proc",
                "mount -t sysfs sysfs /sys",
                "mount -t cgroup2 cgroup2 /sys/fs/cgroup",
                *tmpfs,
                "mkdir -p /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /dev/shm",
                # The work directory is usually under /tmp, now a tmpfs: its mount point is
                # made there, and the host's directory mounted on it read-write.
                f"mkdir -p {work} && mount -t hostfs -o {work} hostfs {work}",
                *_checkout_under_tmpfs(),
                f"[ -b /dev/ubdb ] && mount -t ext4 /dev/ubdb {work}/disk",
                _serve(guest.work, disk=disk is not None),
            ]
        )
    )
    init.chmod(0o755)
    host_end, guest_end = socket.socketpair()
    fd = guest_end.fileno()
    args = [
        str(LINUX_UML),
        f"mem={guest.mem_mib}M",
        "root=/dev/root",
        "rootfstype=hostfs",
        "rootflags=/",
        "ro",
        "quiet",
        f"init={init}",
        "con=null",
        "con0=fd:0,fd:1",
        "ssl=null",
        f"ssl1=fd:{fd},fd:{fd}",
    ]
    if disk is not None:
        args.append(f"ubd1={disk}")
    # UML keeps its guest RAM in a file under TMPDIR, which it wants on tmpfs (it warns
    # and runs slower on a disk); its own directory, removed afterwards.
    shm = Path("/dev/shm")
    ram = Path(
        tempfile.mkdtemp(prefix="nodeagent-uml-ram-", dir=shm if shm.is_dir() else guest.work)
    )
    guest._cleanup.append(ram)
    try:
        guest._boot(args, [fd], {"TMPDIR": str(ram)}, host_end, timeout_s)
    finally:
        guest_end.close()


def _boot_qemu(guest: Guest, disk: Path | None, timeout_s: float) -> None:
    kernel = qemu.debian_kernel()
    assert not isinstance(kernel, str)  # missing() said it is there
    init = guest.work / "init.sh"
    init.write_text("#!/bin/sh\n" + _serve(guest.work, disk=disk is not None))
    init.chmod(0o755)
    initramfs = guest.work / "initramfs.cpio"
    initramfs.write_bytes(
        qemu.initramfs(
            kernel,
            qemu.init_script(
                guest.work,
                disk=disk is not None,
                then=["/bin/sh", str(init)],
                tmpfs=GUEST_TMPFS,
                keep=[REPO_ROOT] if _checkout_hidden() else [],
            ),
        )
    )
    guest._cleanup.append(initramfs)
    control = guest.work / "control.sock"
    control.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(control))
    listener.listen(1)
    guest._cleanup.append(control)
    args = qemu.argv(
        accelerator="kvm" if guest.kernel is Kernel.KVM else "tcg",
        kernel=kernel,
        initramfs_path=initramfs,
        work=guest.work,
        mem_mib=guest.mem_mib,
        control=control,
        disk=disk,
    )
    guest._boot(args, [], {}, listener, timeout_s)


def python_module(module: str, *args: str) -> list[str]:
    """The command that runs ``python -m module args`` inside with this interpreter."""
    return [sys.executable, "-m", module, *args]
