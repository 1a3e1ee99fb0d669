"""End-to-end detection: from a threshold crossing to the running agent's decision.

    sudo python -m benchmarks.bench_detection                  # all modes, 20 runs each
    sudo python -m benchmarks.bench_detection --runs 30 --modes notifications,poll-1s

Issue 4's measurement, on the real kernel (root needed). A ``nodeagent run --standalone``
process guards a real cgroup v1 memory cgroup as its node cgroup (``nodeCgroup``, a
512 MiB limit, so ``memory.available`` = 512 MiB - working set) with the hard threshold
``memory.available<64Mi``. For each run a child process joins that cgroup and allocates
steadily (64 KiB steps, reading ``memory.usage_in_bytes`` after each) past the crossing;
it records the CLOCK_MONOTONIC instant of its first reading past the threshold. The
latency is the ``decidedMonotonic`` field of the agent's decision line (logged as JSON,
the agent's CLOCK_MONOTONIC when the engine decided) minus that instant. Each run starts
at a random phase of the poll, and waits for the agent to see the memory freed before
the next.

Modes (the agent's configuration):

- ``notifications``: the defaults: memcg eventfd thresholds, PSI triggers, a 1 s node
  poll and a 500 ms filesystem poll;
- ``memory-poll``: no memcg eventfd (as with a read-only cgroupfs): the adaptive memory
  poll, as on cgroup v2;
- ``poll-1s``: no kernel notification, every read every 1 s;
- ``poll-10s``: no kernel notification, every read every 10 s (the kubelet's cadence);
- ``tmpfs``: a 64 MiB tmpfs as nodefs with ``nodefs.available<16Mi``, a child writing a
  file in 64 KiB steps and calling statvfs after each (defaults: 500 ms filesystem poll).

Prints p50/p99/max per mode and the ratios to the ``notifications`` mode.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.processes import LoggedProcess
from tests.triggers import loadgen

Mi = 1 << 20
NODE_LIMIT = 512 * Mi
MEMORY_THRESHOLD = 64 * Mi
TMPFS_SIZE = 64 * Mi
NODEFS_THRESHOLD = 16 * Mi

MODES: dict[str, list[str]] = {
    "notifications": [],
    "memory-poll": ["--kernel-memcg-notification=false"],
    "poll-1s": [
        "--kernel-memcg-notification=false",
        "--adaptive-memory-poll=false",
        "--psi-triggers=",
        "--poll-interval=1s",
        "--filesystem-poll-interval=1s",
    ],
    "poll-10s": [
        "--kernel-memcg-notification=false",
        "--adaptive-memory-poll=false",
        "--psi-triggers=",
        "--poll-interval=10s",
        "--filesystem-poll-interval=10s",
    ],
    "tmpfs": [],
}
PHASE_SPREAD = {
    "notifications": 1.0,
    "memory-poll": 1.0,
    "poll-1s": 1.0,
    "poll-10s": 10.0,
    "tmpfs": 0.5,
}
"""Seconds over which each run's start is spread (one poll interval)."""


@dataclass(frozen=True)
class Result:
    mode: str
    latencies_s: Sequence[float]
    triggers: Sequence[str] = ()
    """What caused each run's decision cycle (the decision line's ``trigger``)."""

    def percentile(self, q: float) -> float:
        return float(np.percentile(np.asarray(self.latencies_s), q))


class AgentProcess(LoggedProcess):
    """``nodeagent run`` in a child process, its JSON log lines read in a thread."""

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        super().__init__(["run", "--log-format=json", *args], env=env)


@contextlib.contextmanager
def running_agent(args: Sequence[str]) -> Iterator[AgentProcess]:
    agent = AgentProcess(args)
    try:
        agent.wait(lambda r: r.get("logger") == "nodeagent.decision", timeout=30)
        yield agent
    finally:
        agent.stop()


def is_decision(record: dict[str, Any]) -> bool:
    return record.get("logger") == "nodeagent.decision"


def acting_on(signal: str) -> Callable[[dict[str, Any]], bool]:
    def matches(record: dict[str, Any]) -> bool:
        return is_decision(record) and any(
            t["signal"] == signal and t["graceSatisfied"] for t in record.get("thresholds", ())
        )

    return matches


def relieved(record: dict[str, Any]) -> bool:
    return is_decision(record) and not record.get("thresholds")


def trigger_kind(decision: dict[str, Any]) -> str:
    """``memcg-threshold``, ``psi``, ``poll:node``... without the trigger's name."""
    trigger = str(decision.get("trigger", ""))
    return trigger if trigger.startswith("poll:") else trigger.split(":", 1)[0]


def memory_latencies(mode: str, runs: int) -> Result:
    latencies = []
    triggers = []
    with loadgen.temporary_cgroup(loadgen.MEMCG_ROOT, limit_bytes=NODE_LIMIT) as cgroup:
        args = [
            "--standalone",
            f"--node-cgroup=/{cgroup.name}",
            f"--eviction-hard=memory.available<{MEMORY_THRESHOLD // Mi}Mi",
            "--metrics-address=127.0.0.1:0",
            *MODES[mode],
        ]
        with running_agent(args) as agent:
            for _ in range(runs):
                agent.drain()
                delay = random.uniform(0, PHASE_SPREAD[mode])
                # crossing: available < threshold, i.e. usage > limit - threshold
                child = loadgen.start_allocator(
                    cgroup, NODE_LIMIT - MEMORY_THRESHOLD + 1, delay=delay
                )
                try:
                    crossed = loadgen.read_report(child)["crossed_at"]
                    decision = agent.wait(acting_on("memory.available"), timeout=30)
                finally:
                    loadgen.stop(child)
                latencies.append(decision["decidedMonotonic"] - crossed)
                triggers.append(trigger_kind(decision))
                agent.wait(relieved, timeout=30)
    return Result(mode, latencies, triggers)


def fill(path: str, threshold: int, overshoot: int, delay: float) -> None:
    """Child: write a file under ``path`` in 64 KiB steps until free space is below
    ``threshold`` by ``overshoot``; print when it first was; wait for stdin to close."""
    chunk = b"\x5a" * (64 * 1024)
    time.sleep(delay)
    crossed_at: float | None = None
    with open(os.path.join(path, "fill"), "wb", buffering=0) as out:
        while True:
            out.write(chunk)
            stat = os.statvfs(path)
            available = stat.f_bavail * stat.f_frsize
            if crossed_at is None and available < threshold:
                crossed_at = time.monotonic()
            if available < threshold - overshoot:
                break
    print(json.dumps({"crossed_at": crossed_at}), flush=True)
    sys.stdin.read()


def tmpfs_latencies(runs: int) -> Result:
    latencies = []
    triggers = []
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as scratch:
        mount = Path(scratch)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE // Mi}m", "nodeagent-bench", scratch],
            check=True,
        )
        try:
            args = [
                "--standalone",
                f"--nodefs-path={mount}",
                f"--imagefs-path={mount}",
                f"--eviction-hard=nodefs.available<{NODEFS_THRESHOLD // Mi}Mi",
                "--metrics-address=127.0.0.1:0",
            ]
            with running_agent(args) as agent:
                for _ in range(runs):
                    agent.drain()
                    child = subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "benchmarks.bench_detection",
                            "fill",
                            f"--path={mount}",
                            f"--threshold={NODEFS_THRESHOLD}",
                            f"--delay={random.uniform(0, PHASE_SPREAD['tmpfs'])}",
                        ],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                    try:
                        crossed = loadgen.read_report(child)["crossed_at"]
                        decision = agent.wait(acting_on("nodefs.available"), timeout=30)
                    finally:
                        loadgen.stop(child)
                        (mount / "fill").unlink(missing_ok=True)
                    latencies.append(decision["decidedMonotonic"] - crossed)
                    triggers.append(trigger_kind(decision))
                    agent.wait(relieved, timeout=30)
        finally:
            subprocess.run(["umount", scratch], check=False)
    return Result("tmpfs", latencies, triggers)


def report(results: Sequence[Result]) -> None:
    print(f"{'mode':<15}{'runs':>6}{'p50':>12}{'p99':>12}{'max':>12}")
    for result in results:
        print(
            f"{result.mode:<15}{len(result.latencies_s):>6}"
            f"{result.percentile(50) * 1e3:>10.1f}ms"
            f"{result.percentile(99) * 1e3:>10.1f}ms"
            f"{max(result.latencies_s) * 1e3:>10.1f}ms"
        )
    for result in results:
        if not result.triggers:
            continue
        counts = collections.Counter(result.triggers)
        caught = ", ".join(f"{kind} {count}" for kind, count in counts.most_common())
        print(f"{result.mode}: caught by {caught}")
    base = next((r for r in results if r.mode == "notifications"), None)
    if base is None:
        return
    for result in results:
        if result.mode in ("notifications", "tmpfs"):
            continue
        p50 = result.percentile(50) / base.percentile(50)
        p99 = result.percentile(99) / base.percentile(99)
        print(f"{result.mode} / notifications: p50 {p50:.0f}x, p99 {p99:.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench_detection", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command")
    child = commands.add_parser("fill", help="(internal) the tmpfs filler")
    child.add_argument("--path", required=True)
    child.add_argument("--threshold", type=int, required=True)
    child.add_argument("--overshoot", type=int, default=1 * Mi)
    child.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES)
    )
    args = parser.parse_args()
    if args.command == "fill":
        fill(args.path, args.threshold, args.overshoot, args.delay)
        return
    if os.geteuid() != 0:
        raise SystemExit("needs root: it creates a memory cgroup and mounts a tmpfs")
    results = []
    for mode in args.modes.split(","):
        started = time.monotonic()
        result = (
            tmpfs_latencies(args.runs) if mode == "tmpfs" else memory_latencies(mode, args.runs)
        )
        print(f"{mode}: {args.runs} runs in {time.monotonic() - started:.0f}s", file=sys.stderr)
        results.append(result)
    report(results)


if __name__ == "__main__":
    main()
