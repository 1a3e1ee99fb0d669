"""Real memory load for the trigger tests and benchmark: cgroups, an allocator, a staller.

Run as ``python -m tests.triggers.loadgen allocate|stall ...`` in a child process; each
child first moves itself into the cgroups it is given, so its charges start at zero there
(cgroup v1 does not move charges that were made elsewhere).

``allocate`` touches anonymous memory in small chunks, reading the cgroup's
``memory.usage_in_bytes`` after each one, and prints one JSON line when usage first
reaches the threshold: the CLOCK_MONOTONIC time of that read (``crossed_at``) and of the
read before it (``previous_read_at``); the true crossing lies between the two. It then
keeps charging ``overshoot`` bytes more (the kernel checks thresholds only every 128 page
charges) and waits for stdin to close.

``stall`` produces real memory pressure without swap: inside a memcg with a small limit
it re-reads a file much larger than the limit after dropping the file's cached pages,
so each read waits on reclaim and I/O. It prints ``started_at`` and runs until killed
or for ``--seconds``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import mmap
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

MEMCG_ROOT = Path("/sys/fs/cgroup/memory")
CGROUP2_ROOT = Path("/sys/fs/cgroup/unified")
PAGE = mmap.PAGESIZE
_names = itertools.count()


def join_cgroup(directory: str) -> None:
    with open(os.path.join(directory, "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))


def read_usage(directory: str) -> int:
    with open(os.path.join(directory, "memory.usage_in_bytes")) as usage:
        return int(usage.read())


@contextlib.contextmanager
def temporary_cgroup(root: Path, *, limit_bytes: int | None = None) -> Iterator[Path]:
    """A fresh cgroup under ``root``, emptied (SIGKILL) and removed on exit."""
    path = root / f"nodeagent-trig-{os.getpid()}-{next(_names)}"
    path.mkdir()
    try:
        if limit_bytes is not None:
            (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
        yield path
    finally:
        for _ in range(100):
            pids = [int(pid) for pid in (path / "cgroup.procs").read_text().split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.02)
        else:
            raise RuntimeError(f"could not remove {path}")


def spawn(*args: str) -> subprocess.Popen[str]:
    """Run this module with ``args`` in a child, stdin and stdout piped."""
    repo = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.triggers.loadgen", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=repo,
    )


def start_allocator(
    cgroup: Path | str, threshold: int, *, overshoot: int = 2 << 20, delay: float = 0.0
) -> subprocess.Popen[str]:
    """A child that joins ``cgroup`` and allocates until usage passes ``threshold`` by
    ``overshoot`` (keep it >= 1 MiB: the kernel compares thresholds every 128 page
    charges), after sleeping ``delay`` seconds; see :func:`read_report`."""
    return spawn(
        "allocate",
        f"--cgroup={cgroup}",
        f"--threshold={threshold}",
        f"--overshoot={overshoot}",
        f"--delay={delay}",
    )


def read_report(child: subprocess.Popen[str]) -> dict[str, float]:
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        raise RuntimeError(f"load generator exited with {child.wait()} before reporting")
    report: dict[str, float] = json.loads(line)
    return report


def stop(child: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.kill()
    child.communicate()


def allocate(cgroup: str, threshold: int, overshoot: int, chunk: int, delay: float) -> None:
    join_cgroup(cgroup)
    total = max(threshold - read_usage(cgroup), 0) + overshoot + 64 * chunk
    region = mmap.mmap(-1, total)
    filler = b"\x01" * chunk
    time.sleep(delay)
    previous_read_at = time.monotonic()
    crossed: dict[str, float] | None = None
    offset = 0
    while offset + chunk <= total:
        region[offset : offset + chunk] = filler
        offset += chunk
        if crossed is None:
            usage = read_usage(cgroup)
            read_at = time.monotonic()
            if usage >= threshold:
                crossed = {"crossed_at": read_at, "previous_read_at": previous_read_at}
                overshoot_end = offset + overshoot
            previous_read_at = read_at
        elif offset >= overshoot_end:
            break
    if crossed is None:
        raise SystemExit(f"usage never reached {threshold}")
    print(json.dumps(crossed), flush=True)
    sys.stdin.read()


def stall(memcg: str, cgroup2: str | None, file: str, seconds: float) -> None:
    join_cgroup(memcg)
    if cgroup2:
        join_cgroup(cgroup2)
    fd = os.open(file, os.O_RDONLY)
    print(json.dumps({"started_at": time.monotonic()}), flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        offset = 0
        while block := os.pread(fd, 1 << 20, offset):
            offset += len(block)
            if time.monotonic() >= end:
                break


def make_stall_file(path: Path, size: int = 256 << 20) -> Path:
    """A file of ``size`` bytes on disk, flushed, so its cached pages can be dropped."""
    if not path.exists() or path.stat().st_size != size:
        with open(path, "wb") as out:
            block = os.urandom(1 << 20)
            for _ in range(size >> 20):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
    return path


def main() -> None:
    parser = argparse.ArgumentParser(prog="loadgen")
    commands = parser.add_subparsers(dest="command", required=True)
    alloc = commands.add_parser("allocate")
    alloc.add_argument("--cgroup", required=True)
    alloc.add_argument("--threshold", type=int, required=True)
    alloc.add_argument("--overshoot", type=int, default=2 << 20)
    alloc.add_argument("--chunk", type=int, default=16 * PAGE)
    alloc.add_argument("--delay", type=float, default=0.0)
    stall_parser = commands.add_parser("stall")
    stall_parser.add_argument("--memcg", required=True)
    stall_parser.add_argument("--cgroup2")
    stall_parser.add_argument("--file", required=True)
    stall_parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    if args.command == "allocate":
        allocate(args.cgroup, args.threshold, args.overshoot, args.chunk, args.delay)
    else:
        stall(args.memcg, args.cgroup2, args.file, args.seconds)


if __name__ == "__main__":
    main()
