"""Boot user-mode-linux (a real cgroup v2 kernel run as an ordinary process) with a script.

Debian's ``user-mode-linux`` package ships ``/usr/bin/linux.uml``, a Linux 6.1 kernel
built to run as a user process: no VM and no KVM. Booted with the host's ``/`` as its
root filesystem (hostfs), it runs a script of ours as PID 1, with the project's Python
and virtualenv reachable at the same paths, and mounts ``cgroup2`` with the memory,
cpu, io and pids controllers: the hierarchy most nodes run, which this machine's hybrid
cgroup v1 host cannot give.

:func:`boot` writes an init wrapper that mounts /proc, /sys and the cgroup2 hierarchy,
runs the command, records its exit status in a results directory on the host (hostfs
writes land on the host at once) and powers the machine off; the host side bounds the
whole boot with a timeout and kills the machine's process group if it runs out, so a
hung guest never outlives its test.

What the kernel is like inside, measured: single CPU; allocation about 20 MiB/s;
``pread`` of a cgroup file about 100 µs; importing nodeagent about 6 s; no PSI
(``/proc/pressure`` is absent); hostfs keeps no page cache, so page cache needs the
ext4 disk :func:`boot` can attach (``disk_mib``, mounted at :data:`DISK_MOUNT`).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LINUX_UML = Path("/usr/bin/linux.uml")
DISK_MOUNT = "/mnt/ubd"
"""Where the ext4 disk is mounted inside (``/dev/ubdb``), when one is attached."""
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Boot:
    """What one boot produced."""

    output: str
    """The guest's console: the kernel's messages and the command's stdout/stderr."""
    status: int | None
    """The command's exit status; ``None`` if it never finished (killed by the timeout,
    or the guest crashed)."""
    timed_out: bool
    results: Path
    """A host directory the command could write to (``$UML_RESULTS`` inside)."""


@functools.cache
def available() -> str | None:
    """Why user-mode-linux cannot be booted here, or ``None`` when it can.

    Installed is not enough: Debian's 6.1 build panics at init on hosts whose CPUs
    have a larger extended register state than it was built for (seen on CPUs with
    AMX: ``ptrace set fp regs failed, errno = 14``). One small probe boot per session
    tells, and its console says why."""
    if not LINUX_UML.is_file():
        return f"{LINUX_UML} is missing (apt-get install user-mode-linux)"
    probe = _boot(["true"], mem_mib=64, timeout_s=60.0)
    if probe.status == 0:
        return None
    lines = [line.strip() for line in probe.output.splitlines() if line.strip()]
    # The kernel's own words before its stack dump: the failing call, then the panic.
    telling = [line for line in lines if "ptrace" in line or line.startswith("Kernel panic")]
    why = "; ".join(telling or lines[-1:] or ["no console output"])
    state = "timed out" if probe.timed_out else f"status {probe.status}"
    return f"{LINUX_UML} cannot boot on this host ({state}): {why}"


def _init_script(command: Sequence[str], results: Path, env: Mapping[str, str]) -> str:
    exports = "\n".join(f"export {key}={shlex.quote(value)}" for key, value in env.items())
    disk = f"[ -b /dev/ubdb ] && mkdir -p {DISK_MOUNT} && mount -t ext4 /dev/ubdb {DISK_MOUNT}\n"
    return f"""#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root PYTHONDONTWRITEBYTECODE=1 UML_RESULTS={shlex.quote(str(results))}
{exports}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
{disk}cd {shlex.quote(str(REPO_ROOT))}
{shlex.join(command)} > {shlex.quote(str(results / "output"))} 2>&1
echo $? > {shlex.quote(str(results / "status"))}
sync
echo o > /proc/sysrq-trigger
sleep 60
"""


def boot(
    command: Sequence[str],
    *,
    mem_mib: int = 384,
    timeout_s: float = 120.0,
    disk_mib: int | None = None,
    env: Mapping[str, str] | None = None,
    workdir: Path | None = None,
) -> Boot:
    """Boot, run ``command`` as root inside (cwd: the repository), power off.

    ``mem_mib`` is the guest's RAM (``mem=``; MemTotal comes out about 30 MiB lower).
    ``disk_mib`` attaches a sparse ext4 image as ``/dev/ubdb``, mounted at
    :data:`DISK_MOUNT`: the only filesystem inside with a page cache. The machine is
    killed after ``timeout_s``. ``workdir`` (a fresh temporary directory by default,
    kept) holds the init script, the disk image and the results directory.
    """
    reason = available()
    if reason is not None:
        raise RuntimeError(reason)
    return _boot(
        command, mem_mib=mem_mib, timeout_s=timeout_s, disk_mib=disk_mib, env=env, workdir=workdir
    )


def _boot(
    command: Sequence[str],
    *,
    mem_mib: int,
    timeout_s: float,
    disk_mib: int | None = None,
    env: Mapping[str, str] | None = None,
    workdir: Path | None = None,
) -> Boot:
    work = workdir or Path(tempfile.mkdtemp(prefix="nodeagent-uml-"))
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    init = work / "init.sh"
    init.write_text(_init_script(command, results, env or {}))
    init.chmod(0o755)
    args = [
        str(LINUX_UML),
        f"mem={mem_mib}M",
        "root=/dev/root",
        "rootfstype=hostfs",
        "rootflags=/",
        "rw",
        "quiet",
        f"init={init}",
        "con=null",
        "con0=fd:0,fd:1",
    ]
    if disk_mib is not None:
        image = work / "disk.img"
        with image.open("wb") as file:
            file.truncate(disk_mib << 20)
        subprocess.run(
            ["mkfs.ext4", "-q", "-F", str(image)],
            check=True,
            env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"},
        )
        args.append(f"ubd1={image}")
    # UML keeps its guest RAM in a file under TMPDIR, which it wants on tmpfs (it warns
    # and runs slower on a disk); give it its own directory, removed afterwards.
    shm = Path("/dev/shm")
    guest_tmp = Path(
        tempfile.mkdtemp(prefix="nodeagent-uml-ram-", dir=shm if shm.is_dir() else work)
    )
    process = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "TMPDIR": str(guest_tmp)},
        start_new_session=True,
    )
    timed_out = False
    try:
        console, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)
        console, _ = process.communicate()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        shutil.rmtree(guest_tmp, ignore_errors=True)
        (work / "disk.img").unlink(missing_ok=True)
    status_file = results / "status"
    status = int(status_file.read_text()) if status_file.is_file() else None
    output_file = results / "output"
    output = console.decode(errors="replace")
    if output_file.is_file():
        output += "\n--- command output ---\n" + output_file.read_text(errors="replace")
    return Boot(output=output, status=status, timed_out=timed_out, results=results)


def python_module(module: str, *args: str) -> list[str]:
    """The command that runs ``python -m module args`` inside with this interpreter."""
    return [sys.executable, "-m", module, *args]
