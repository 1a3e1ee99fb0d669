"""Real processes in real cgroups, for the checks that run inside a cgroup v2 guest.

A :class:`Workload` is a child Python process that joins a cgroup *before* it allocates
(cgroup v2 never moves charges: memory charged before a move stays where it was; the
interpreter's own start-up memory stays with the parent's cgroup),
allocates and touches anonymous memory, optionally writes a file (page cache, on a
filesystem that has one), starts extra threads, says ``ready`` and waits for its stdin
to close. Runs on the host too; only the cgroup paths are v2-specific.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

CGROUP2 = Path("/sys/fs/cgroup")

_CHILD = r"""
import json, mmap, os, sys, threading, time
spec = json.loads(sys.argv[1])
with open(spec["procs"], "w") as procs:
    procs.write("0")  # join the cgroup before allocating: v2 never moves charges
memory = mmap.mmap(-1, max(spec["anon"], 4096))
for offset in range(0, spec["anon"], 4096):
    memory[offset] = 1
if spec["file"]:
    with open(spec["file_path"], "wb") as out:
        block = b"\x5a" * (1 << 20)
        for _ in range(spec["file"] >> 20):
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    for _ in range(spec["reads"]):  # read again: the second access activates the pages
        with open(spec["file_path"], "rb") as again:
            while again.read(1 << 20):
                pass
stop = threading.Event()
for _ in range(spec["threads"]):
    threading.Thread(target=stop.wait, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def enable_controllers(cgroup: Path, controllers: str = "+memory +pids +cpu") -> None:
    """Let ``cgroup``'s children have the controllers (v2's ``subtree_control``)."""
    (cgroup / "cgroup.subtree_control").write_text(controllers)


def make_cgroup(path: Path, *, memory_max: int | None = None, parent_of_more: bool = False) -> Path:
    """``mkdir`` a v2 cgroup (its parents' controllers must be enabled already)."""
    path.mkdir(exist_ok=True)
    if memory_max is not None:
        (path / "memory.max").write_text(str(memory_max))
    if parent_of_more:
        enable_controllers(path)
    return path


def make_tree(root: Path, relative: str, *, memory_max: int | None = None) -> Path:
    """Every cgroup on the way from ``root`` to ``relative``, controllers enabled on the
    way down; ``memory_max`` on the last one."""
    current = root
    parts = [part for part in relative.split("/") if part]
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        current = make_cgroup(current / part, memory_max=memory_max if last else None)
        if not last:
            enable_controllers(current)
    return current


class Workload:
    """A child process in ``cgroup`` using ``anon`` bytes, a ``file`` of that many bytes
    at ``file_path`` (read back ``reads`` times: twice puts it in the active page cache)
    and ``threads`` extra threads."""

    def __init__(
        self,
        cgroup: Path,
        *,
        anon: int = 0,
        file: int = 0,
        file_path: str = "",
        threads: int = 0,
        reads: int = 0,
    ) -> None:
        spec = {
            "reads": reads,
            "procs": str(cgroup / "cgroup.procs"),
            "anon": anon,
            "file": file,
            "file_path": file_path,
            "threads": threads,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-S", "-c", _CHILD, json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"workload in {cgroup} failed: {line!r}")

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def read_int(path: Path) -> int:
    return int(path.read_text().strip())


def stat(cgroup: Path) -> dict[str, int]:
    return {
        key: int(value)
        for key, value in (
            line.split() for line in (cgroup / "memory.stat").read_text().splitlines()
        )
    }


def meminfo() -> dict[str, int]:
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, rest = line.split(":", 1)
        values[key] = int(rest.split()[0]) * 1024
    return values


def count_lines(cgroup: Path, name: str) -> int:
    """Lines of ``name`` in ``cgroup`` and every cgroup below it."""
    total = 0
    for directory, _, files in os.walk(cgroup):
        if name in files:
            total += Path(directory, name).read_text().count("\n")
    return total


def remove_tree(cgroup: Path) -> None:
    """``rmdir`` a cgroup and everything below it (their processes must be gone)."""
    for directory, _, _ in sorted(os.walk(cgroup), key=lambda e: -len(e[0])):
        for _ in range(50):
            try:
                os.rmdir(directory)
                break
            except OSError:
                time.sleep(0.05)  # the last process's exit is still being reaped


def write_results(name: str, results: object) -> None:
    """Write ``results`` as JSON into the command's results directory."""
    directory = Path(os.environ["GUEST_RESULTS"])
    (directory / f"{name}.json").write_text(json.dumps(results, indent=2, sort_keys=True))
