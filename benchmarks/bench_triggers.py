"""How fast each detection mechanism sees memory pressure, on the real kernel.

    sudo python -m benchmarks.bench_triggers [--runs 30] [--psi-runs 20]

Measures, with real cgroups and real allocating/stalling processes (root needed):

- **memcg eventfd**: a child allocates past a usage threshold armed through a
  TriggerSet; latency is the Wake's timestamp minus the child's CLOCK_MONOTONIC reading
  of the first ``memory.usage_in_bytes`` value at or above the threshold.
- **polling memory.usage_in_bytes** every 1 s and every 10 s (the kubelet's cadence):
  as many children, each crossing its threshold at a random phase of the poll; latency
  is the poll that first saw the crossing minus the child's reading.
- **PSI trigger**: a child stalls on memory reclaim; latency is the Wake minus the
  moment the child started stalling, for the kernel trigger (widened to a 2 s window
  without CAP_SYS_RESOURCE) and for its emulation by polling the stall total each 1 s.

Prints p50/p99/max per mechanism and the ratios between them.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nodeagent.triggers import psi
from nodeagent.triggers.api import Wake
from nodeagent.triggers.triggerset import TriggerSet
from tests.triggers import loadgen

Mi = 1 << 20
HEADROOM = 32 * Mi
"""How far above its starting usage each child's threshold sits."""
PSI_SPEC = psi.TriggerSpec.parse("memory some 50ms 1s")


@dataclass(frozen=True)
class Result:
    mechanism: str
    latencies_s: Sequence[float]
    note: str = ""

    def percentile(self, q: float) -> float:
        return float(np.percentile(np.asarray(self.latencies_s), q))


def eventfd_latencies(runs: int) -> Result:
    latencies = []
    with TriggerSet() as triggers:
        for _ in range(runs):
            with loadgen.temporary_cgroup(loadgen.MEMCG_ROOT) as cgroup:
                threshold = loadgen.read_usage(str(cgroup)) + HEADROOM
                triggers.arm_memory_threshold("node", str(cgroup), threshold)
                child = loadgen.start_allocator(cgroup, threshold)
                try:
                    wakes = triggers.wait(10.0)
                    report = loadgen.read_report(child)
                finally:
                    loadgen.stop(child)
                triggers.disarm("node")
            if not wakes:
                raise RuntimeError("no notification within 10 s")
            latencies.append(wakes[0].time - report["crossed_at"])
    return Result("memcg eventfd (TriggerSet)", latencies)


def poll_latencies(runs: int, interval: float) -> Result:
    """``runs`` children at once, each crossing at a random phase of one poll loop."""
    with contextlib.ExitStack() as stack:
        cgroups = [
            stack.enter_context(loadgen.temporary_cgroup(loadgen.MEMCG_ROOT)) for _ in range(runs)
        ]
        thresholds = [loadgen.read_usage(str(cgroup)) + HEADROOM for cgroup in cgroups]
        detected: dict[int, float] = {}
        stop = threading.Event()

        def poll() -> None:
            tick = time.monotonic()
            while not stop.is_set() and len(detected) < runs:
                for index, cgroup in enumerate(cgroups):
                    if (
                        index not in detected
                        and loadgen.read_usage(str(cgroup)) >= thresholds[index]
                    ):
                        detected[index] = time.monotonic()
                tick += interval
                stop.wait(max(0.0, tick - time.monotonic()))

        poller = threading.Thread(target=poll)
        poller.start()
        children = [
            loadgen.start_allocator(cgroup, threshold, delay=random.uniform(0, interval))
            for cgroup, threshold in zip(cgroups, thresholds, strict=True)
        ]
        try:
            reports = [loadgen.read_report(child) for child in children]
            poller.join(timeout=interval * 3 + 10)
        finally:
            stop.set()
            poller.join()
            for child in children:
                loadgen.stop(child)
    if len(detected) < runs:
        raise RuntimeError(f"the {interval}s poll saw {len(detected)} of {runs} crossings")
    latencies = [detected[index] - reports[index]["crossed_at"] for index in range(runs)]
    return Result(f"poll usage_in_bytes every {interval:g}s", latencies)


def psi_latencies(runs: int, stall_file: Path) -> tuple[Result, Result]:
    kernel, emulated = [], []
    armed = ""
    for _ in range(runs):
        with (
            loadgen.temporary_cgroup(loadgen.MEMCG_ROOT, limit_bytes=16 * Mi) as memcg,
            TriggerSet() as triggers,
            TriggerSet(poll_interval=1.0, psi_kernel_triggers=False) as polled,
        ):
            armed = triggers.arm_psi("kernel", "/proc/pressure/memory", PSI_SPEC).detail
            polled.arm_psi("emulated", "/proc/pressure/memory", PSI_SPEC)
            polled_wakes: list[Wake] = []
            watcher = threading.Thread(target=_wait_into, args=(polled, 20.0, polled_wakes))
            child = loadgen.spawn("stall", f"--memcg={memcg}", f"--file={stall_file}")
            watcher.start()
            try:
                started = loadgen.read_report(child)["started_at"]
                wakes = triggers.wait(20.0)
                watcher.join()
            finally:
                loadgen.stop(child)
                watcher.join()
        if not wakes or not polled_wakes:
            raise RuntimeError("a PSI trigger did not fire within 20 s of stalling")
        kernel.append(wakes[0].time - started)
        emulated.append(polled_wakes[0].time - started)
        time.sleep(0.5)
    return (
        Result(f"PSI trigger, kernel ({PSI_SPEC})", kernel, armed),
        Result(f"PSI trigger, emulated by 1s polls ({PSI_SPEC})", emulated),
    )


def _wait_into(triggers: TriggerSet, timeout_s: float, wakes: list[Wake]) -> None:
    wakes.extend(triggers.wait(timeout_s))


def costs() -> list[tuple[str, float]]:
    """Per-operation costs that set the price of polling and of re-arming, in seconds."""
    figures = []
    with loadgen.temporary_cgroup(loadgen.MEMCG_ROOT) as cgroup, TriggerSet() as triggers:
        rounds = 50  # each registration waits for an RCU grace period in the kernel
        start = time.perf_counter()
        for index in range(rounds):
            triggers.arm_memory_threshold("node", str(cgroup), (1 << 30) + (index % 2) * 64 * Mi)
        figures.append(("re-arm one memcg threshold", (time.perf_counter() - start) / rounds))
        rounds = 5000
        start = time.perf_counter()
        for _ in range(rounds):
            loadgen.read_usage(str(cgroup))
        figures.append(("read memory.usage_in_bytes", (time.perf_counter() - start) / rounds))
    start = time.perf_counter()
    for _ in range(rounds):
        os.statvfs("/")
    figures.append(("statvfs of one filesystem", (time.perf_counter() - start) / rounds))
    return figures


def describe(results: Sequence[Result]) -> Iterator[str]:
    yield f"{'mechanism':<58} {'runs':>4} {'p50':>10} {'p99':>10} {'max':>10}"
    for result in results:
        yield (
            f"{result.mechanism:<58} {len(result.latencies_s):>4} "
            f"{_ms(result.percentile(50))} {_ms(result.percentile(99))} "
            f"{_ms(max(result.latencies_s))}"
        )
        if result.note:
            yield f"    armed: {result.note}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:>8.2f}ms"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_triggers")
    parser.add_argument("--runs", type=int, default=30, help="runs per memory mechanism")
    parser.add_argument("--psi-runs", type=int, default=20, help="runs of the PSI triggers")
    args = parser.parse_args(argv)
    # Each PSI run arms fresh triggers, each logging its 2 s fallback; the table says it once.
    logging.basicConfig(level=logging.ERROR, format="  log: %(message)s")
    if os.geteuid() != 0 or not loadgen.MEMCG_ROOT.is_dir():
        raise SystemExit("needs root and the cgroup v1 memory controller at /sys/fs/cgroup/memory")
    print(f"kernel {os.uname().release}, {os.cpu_count()} CPUs")
    steps: list[tuple[str, Callable[[], Result | tuple[Result, Result]]]] = [
        ("memcg eventfd", lambda: eventfd_latencies(args.runs)),
        ("1s poll", lambda: poll_latencies(args.runs, 1.0)),
        ("10s poll", lambda: poll_latencies(args.runs, 10.0)),
    ]
    stall_file = Path("/var/tmp") / f"nodeagent-bench-stall-{os.getpid()}.bin"
    if args.psi_runs > 0:
        steps.append(
            ("PSI", lambda: psi_latencies(args.psi_runs, loadgen.make_stall_file(stall_file)))
        )
    results: list[Result] = []
    try:
        for label, step in steps:
            started = time.monotonic()
            outcome = step()
            results.extend(outcome if isinstance(outcome, tuple) else (outcome,))
            print(f"  {label}: done in {time.monotonic() - started:.1f}s", flush=True)
    finally:
        stall_file.unlink(missing_ok=True)
    print()
    for line in describe(results):
        print(line)
    eventfd, poll_1s, poll_10s = results[:3]
    print()
    print("ratios of p50 / p99 latency:")
    for slower in (poll_1s, poll_10s):
        print(
            f"  {slower.mechanism} vs eventfd: "
            f"{slower.percentile(50) / eventfd.percentile(50):,.0f}x / "
            f"{slower.percentile(99) / eventfd.percentile(99):,.0f}x"
        )
    print()
    for label, seconds in costs():
        print(f"cost: {label:<32} {seconds * 1e6:8.1f}us")


if __name__ == "__main__":
    main()
