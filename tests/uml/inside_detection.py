"""Inside a cgroup v2 guest: ``nodeagent run --standalone`` under a real memory hog.

    python -m tests.uml.inside_detection --scope root --runs 20 [--agent-arg=...]

Run by tests/uml/test_v2_detection.py and benchmarks/bench_detection_v2.py; writes
``detection-<scope>-<label>.json`` to the command's results directory.

For a scope (``root``: ``memory.available`` of the v2 root, capacity MemTotal;
``node``: a node cgroup with ``memory.max`` as capacity) the agent guards a hard
``memory.available`` threshold. Once the agent's own memory has stopped growing, a
ballast process takes memory down to :data:`BALLAST_HEADROOM` above the threshold and
holds it (allocation runs at about 20 MiB/s in user-mode-linux, so each run cannot start
from afar; it is made again, smaller, if other processes grow into that headroom). Then
for each run a hog joins the scope's cgroup before it allocates, approaches the
threshold, waits a random part of a second, and allocates on in 64 KiB steps, reading
``available`` the agent's way after each; it records the CLOCK_MONOTONIC instant of its
first reading below the threshold. A run in which memory crossed while the hog waited
measures nothing: it is counted apart and run again. Transparent huge pages are set to
``madvise`` first (:func:`quiet_hugepages`).
The latency is the agent's ``decidedMonotonic`` of the decision acting on the threshold
minus that instant (memory.current moves in 256 KiB charge batches, so a decision can
come slightly before the hog's own reading of its crossing: negative). The hog is then
killed and the next run waits for the agent to see the threshold released.

Also measured (``--cpu-window``, seconds; 0 skips it): the agent's CPU (``utime +
stime`` of /proc/<pid>/stat, 10 ms ticks) at rest (before the ballast: hundreds of MiB of
headroom) and near the threshold (with the ballast held), each after
:data:`SETTLE_S` for the agent's start-up or the ballast's allocation to fade.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_detection import (
    AgentProcess,
    acting_on,
    is_decision,
    relieved,
    trigger_kind,
)
from tests.uml.workload import (
    CGROUP2,
    Workload,
    enable_controllers,
    make_cgroup,
    read_int,
    stat,
    write_results,
)

MiB = 1 << 20
NODE_LIMIT = 512 * MiB
NODE_CGROUP = "/node.slice"
BALLAST_HEADROOM = 24 * MiB
APPROACH = 4 * MiB
"""The hog allocates fast down to this far above the threshold, then pauses, then steps."""
SETTLE_S = 5.0

_HOG = r"""
import json, mmap, os, random, sys, time
spec = json.loads(sys.argv[1])
with open(spec["procs"], "w") as procs:
    procs.write("0")
stat = os.open(spec["stat"], os.O_RDONLY)
current = os.open(spec["current"], os.O_RDONLY) if spec["current"] else -1

def inactive_and_usage():
    values = {}
    for line in os.pread(stat, 8192, 0).split(b"\n"):
        if line:
            key, value = line.split()
            values[key] = int(value)
    usage = int(os.pread(current, 64, 0)) if current >= 0 else values[b"anon"] + values[b"file"]
    return usage, values[b"inactive_file"]

def available():
    usage, inactive = inactive_and_usage()
    return spec["capacity"] - max(usage - inactive, 0)

threshold = spec["threshold"]
memory = mmap.mmap(-1, 64 << 20)
offset = 0
while available() > threshold + spec["approach"]:
    for page in range(offset, offset + (1 << 20), 4096):
        memory[page] = 1
    offset += 1 << 20
print("near", flush=True)
time.sleep(spec["delay"])
if available() < threshold:  # crossed while it waited: by something else
    print(json.dumps({"crossed_at": None}), flush=True)
    sys.stdin.read()
crossed_at = None
while True:
    for page in range(offset, offset + (64 << 10), 4096):
        memory[page] = 1
    offset += 64 << 10
    now_available = available()
    if crossed_at is None and now_available < threshold:
        crossed_at = time.monotonic()
    if now_available < threshold - (1 << 20):
        break
print(json.dumps({"crossed_at": crossed_at}), flush=True)
sys.stdin.read()
"""


class Scope:
    """Where the agent looks and how ``available`` is computed there."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "node":
            enable_controllers(CGROUP2)
            node = make_cgroup(CGROUP2 / NODE_CGROUP.strip("/"), memory_max=NODE_LIMIT)
            enable_controllers(node)
            self.cgroup = node
            self.capacity = NODE_LIMIT
            self.current = str(node / "memory.current")
            self.agent_args = [f"--node-cgroup={NODE_CGROUP}"]
            self.threshold = 64 * MiB
        else:
            self.cgroup = CGROUP2
            self.capacity = _mem_total()
            self.current = ""
            self.agent_args = []
            self.threshold = 160 * MiB

    def leaf(self, name: str) -> Path:
        """A cgroup below the scope for a process (v2: processes live in leaves)."""
        return make_cgroup(self.cgroup / name)

    def available(self) -> int:
        values = stat(self.cgroup)
        usage = read_int(Path(self.current)) if self.current else values["anon"] + values["file"]
        return self.capacity - max(usage - values["inactive_file"], 0)

    def hog(self, delay: float) -> subprocess.Popen[str]:
        spec = {
            "procs": str(self.leaf("hog") / "cgroup.procs"),
            "stat": str(self.cgroup / "memory.stat"),
            "current": self.current,
            "capacity": self.capacity,
            "threshold": self.threshold,
            "approach": APPROACH,
            "delay": delay,
        }
        return subprocess.Popen(
            [sys.executable, "-S", "-c", _HOG, json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )


HUGEPAGES = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def quiet_hugepages() -> None:
    """Debian's kernel backs anonymous memory with huge pages wherever it can
    (``always``), and khugepaged collapses partly used ranges of every process in the
    background, the agent's own heap included: at the v2 root, memory then falls by
    megabytes at a time with no hog, across a threshold the hog waits 4 MiB above. With
    ``madvise``, only where a program asks (none here). user-mode-linux has no THP."""
    if HUGEPAGES.is_file():
        HUGEPAGES.write_text("madvise")


def _mem_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def settled(scope: Scope, *, window_s: float = 2.0, timeout_s: float = 180.0) -> int:
    """``available`` once it moved less than 1 MiB over ``window_s``: the agent is done
    starting (under qemu's emulation it grows by some 60 MiB over its first minute, all
    of it taken from the v2 root's ``available``)."""
    deadline = time.monotonic() + timeout_s
    last = scope.available()
    while True:
        time.sleep(window_s)
        now = scope.available()
        if abs(now - last) < MiB or time.monotonic() > deadline:
            return now
        last = now


class Ballast:
    """Memory held so that ``available`` sits :data:`BALLAST_HEADROOM` above the
    threshold; made again, smaller, when the scope's other processes have grown into the
    headroom, so that killing a hog always brings memory back above the threshold."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.size = 0
        self.held: Workload | None = None

    def hold(self, available: int) -> None:
        """Hold what brings ``available`` (as it would be without the ballast) down."""
        self.stop()
        self.size = max(available - self.scope.threshold - BALLAST_HEADROOM, 0)
        self.held = Workload(self.scope.leaf("ballast"), anon=self.size)

    def keep_headroom(self) -> None:
        available = self.scope.available()
        if available < self.scope.threshold + BALLAST_HEADROOM // 2:
            self.hold(available + self.size)

    def stop(self) -> None:
        if self.held is not None:
            self.held.stop()
            self.held = None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(pid: int, window: float) -> float:
    """The share of one CPU ``pid`` used over the next ``window`` seconds."""
    start, used = time.monotonic(), cpu_seconds(pid)
    time.sleep(window)
    return (cpu_seconds(pid) - used) / (time.monotonic() - start)


def stop(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait()


def run(
    scope_name: str, runs: int, extra: list[str], label: str, cpu_window: float
) -> dict[str, Any]:
    quiet_hugepages()
    scope = Scope(scope_name)
    agent = AgentProcess(
        [
            "--standalone",
            f"--eviction-hard=memory.available<{scope.threshold // MiB}Mi",
            "--metrics-address=127.0.0.1:0",
            "--log-level=debug",
            *scope.agent_args,
            *extra,
        ]
    )
    triggers: dict[str, str] = {}

    def noting(matches: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], bool]:
        """``matches``, recording the trigger statuses the agent logs on the way."""

        def match(record: dict[str, Any]) -> bool:
            message = str(record.get("message", ""))
            if record.get("logger", "").startswith("nodeagent.triggers"):
                triggers[message.split(" ", 2)[1]] = message
            return matches(record)

        return match

    results: dict[str, Any] = {"scope": scope_name, "label": label, "args": extra}
    try:
        agent.wait(noting(is_decision), timeout=120)
        if cpu_window > 0:
            time.sleep(SETTLE_S)
            results["available_at_rest"] = scope.available()
            results["cpu_rest"] = cpu_share(agent.process.pid, cpu_window)
        ballast = Ballast(scope)
        ballast.hold(settled(scope))
        agent.drain(noting(is_decision))
        if cpu_window > 0:
            time.sleep(SETTLE_S)
            results["available_near"] = scope.available()
            results["cpu_near"] = cpu_share(agent.process.pid, cpu_window)
        latencies: list[float] = []
        caught: list[str] = []
        moved = 0
        while len(latencies) < runs:
            if moved > runs:
                raise RuntimeError(f"memory crossed the threshold without the hog {moved} times")
            ballast.keep_headroom()
            agent.drain(noting(is_decision))
            hog = scope.hog(delay=random.uniform(0, 1.0))
            try:
                assert hog.stdout is not None
                if hog.stdout.readline().strip() != "near":
                    raise RuntimeError("the hog failed before the threshold")
                crossed = json.loads(hog.stdout.readline())["crossed_at"]
                decision = agent.wait(noting(acting_on("memory.available")), timeout=30)
            finally:
                stop(hog)
            if crossed is None:
                moved += 1
            else:
                latencies.append(decision["decidedMonotonic"] - crossed)
                caught.append(trigger_kind(decision))
            agent.wait(noting(relieved), timeout=30)
        ballast.stop()
        results["latencies_s"] = latencies
        results["caught_by"] = caught
        results["moved_while_waiting"] = moved
        results["triggers"] = triggers
    finally:
        agent.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scope", choices=("root", "node"), required=True)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--label", default="adaptive")
    parser.add_argument("--cpu-window", type=float, default=0.0)
    parser.add_argument("--agent-arg", action="append", default=[])
    args = parser.parse_args()
    results = run(args.scope, args.runs, args.agent_arg, args.label, args.cpu_window)
    write_results(f"detection-{args.scope}-{args.label}", results)


if __name__ == "__main__":
    main()
