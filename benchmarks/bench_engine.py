"""One evaluation cycle of the eviction engine, at 110 and 1000 pods.

    python -m benchmarks.bench_engine [--repeat N]

Scenarios, each on a node with every default kubelet threshold plus a soft memory one:

* ``at rest``: no threshold met (the cycle the agent runs every second, nearly always);
* ``memory, kubelet``: a hard memory threshold met, every pod ranked, the top one evicted;
* ``disk, kubelet``: a hard nodefs threshold met, disk usage summed per pod by layout;
* ``memory, relief``: as ``memory, kubelet`` with the relief strategy;
* ``PSI, kubelet``: a soft PSI threshold past its grace period.

Each scenario carries the engine state from cycle to cycle, as the agent does, with a
fresh observation time per cycle. Prints the median and 99th percentile of one cycle,
and the cost per pod at 1000 relative to 110 (1.0 = linear). Target: under 1 ms at 110
pods.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from nodeagent.config import load_config
from nodeagent.eviction import engine
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.model import (
    FsLayout,
    NodeObservations,
    PodInfo,
    PodUID,
    PodUsage,
    PsiLine,
    PsiStats,
    Signal,
    SignalValue,
)

Mi, Gi = 1 << 20, 1 << 30
TARGET_US_AT_110 = 1000.0

Scenario = Callable[[dict[PodUID, PodUsage]], tuple[EvictionPolicy, NodeObservations]]
"""Pod usage -> the policy and the observation of one scenario."""


def node(pods: int, seed: int = 7) -> tuple[tuple[PodInfo, ...], dict[PodUID, PodUsage]]:
    rng = random.Random(seed)
    infos = []
    usage = {}
    for i in range(pods):
        uid = PodUID(f"{i:08x}-0000-4000-8000-000000000000")
        request = rng.choice([0, 64 * Mi, 256 * Mi, Gi])
        infos.append(
            PodInfo(
                namespace=f"ns{i % 17}",
                name=f"pod-{i}",
                uid=uid,
                priority=rng.choice([0, 0, 100, 1000, 2_000_000_000]),
                static=i % 50 == 0,
                requests={"memory": request, "ephemeral-storage": rng.choice([0, Gi])},
                termination_grace_period_seconds=rng.choice([10, 30, 60]),
            )
        )
        if rng.random() < 0.98:
            usage[uid] = PodUsage(
                uid=uid,
                memory=rng.randint(0, 2 * request + 64 * Mi),
                rootfs=rng.randint(0, Gi),
                logs=rng.randint(0, 256 * Mi),
                local_volumes=rng.randint(0, Gi),
                rootfs_inodes=rng.randint(0, 10_000),
                logs_inodes=rng.randint(0, 100),
                local_volumes_inodes=rng.randint(0, 10_000),
                processes=rng.randint(1, 200),
            )
    return tuple(infos), usage


def observations(
    usage: dict[PodUID, PodUsage], *, memory: int, nodefs: int, stall: float = 0.0
) -> NodeObservations:
    return NodeObservations(
        time=0.0,
        signals={
            Signal.MEMORY_AVAILABLE: SignalValue(memory, 64 * Gi),
            Signal.ALLOCATABLE_MEMORY_AVAILABLE: SignalValue(memory, 60 * Gi),
            Signal.NODEFS_AVAILABLE: SignalValue(nodefs, 500 * Gi),
            Signal.NODEFS_INODES_FREE: SignalValue(30_000_000, 32_000_000),
            Signal.IMAGEFS_AVAILABLE: SignalValue(nodefs, 500 * Gi),
            Signal.IMAGEFS_INODES_FREE: SignalValue(30_000_000, 32_000_000),
            Signal.PID_AVAILABLE: SignalValue(4_000_000, 4_194_304),
        },
        pods=usage,
        psi={"memory": PsiStats(some=PsiLine(stall, stall, stall, 0), full=None)},
        fs_layout=FsLayout.SINGLE,
    )


def policy(**overrides: str) -> EvictionPolicy:
    base = {
        "eviction_soft": "memory.available<8Gi,memory.pressure.some.avg10>20",
        "eviction_soft_grace_period": "memory.available=1m,memory.pressure.some.avg10=0s",
        "merge_default_eviction_settings": "true",
        "eviction_hard": "memory.available<1Gi",
    }
    return EvictionPolicy.from_settings(load_config(environ={}, overrides={**base, **overrides}))


def time_cycles(
    resolved: EvictionPolicy,
    sample: NodeObservations,
    pods: tuple[PodInfo, ...],
    repeat: int,
) -> list[float]:
    """Microseconds per cycle, state carried, time advancing 1 s per cycle."""
    state = engine.EngineState()
    samples = [replace(sample, time=float(t)) for t in range(repeat + 20)]
    durations = []
    for index, current in enumerate(samples):
        start = time.perf_counter_ns()
        _, state = engine.evaluate(resolved, state, current, pods, current.time)
        elapsed = time.perf_counter_ns() - start
        if index >= 20:  # warm-up
            durations.append(elapsed / 1000)
    return durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=2000, help="cycles per scenario at 110 pods")
    args = parser.parse_args()

    kubelet = policy()
    relief = policy(eviction_strategy="relief")
    scenarios: dict[str, Scenario] = {
        "at rest": lambda u: (kubelet, observations(u, memory=20 * Gi, nodefs=300 * Gi)),
        "memory, kubelet": lambda u: (kubelet, observations(u, memory=512 * Mi, nodefs=300 * Gi)),
        "disk, kubelet": lambda u: (kubelet, observations(u, memory=20 * Gi, nodefs=10 * Gi)),
        "memory, relief": lambda u: (relief, observations(u, memory=512 * Mi, nodefs=300 * Gi)),
        "PSI, kubelet": lambda u: (
            kubelet,
            observations(u, memory=20 * Gi, nodefs=300 * Gi, stall=35.0),
        ),
    }
    sizes = (110, 1000)
    print(f"{'scenario':<18}{'pods':>6}{'median µs':>12}{'p99 µs':>10}{'per pod µs':>12}")
    results: dict[tuple[str, int], float] = {}
    for name, build in scenarios.items():
        for size in sizes:
            pods, usage = node(size)
            resolved, sample = build(usage)
            repeat = args.repeat if size == sizes[0] else max(200, args.repeat // 5)
            durations = sorted(time_cycles(resolved, sample, pods, repeat))
            median = statistics.median(durations)
            p99 = durations[int(len(durations) * 0.99) - 1]
            results[name, size] = median
            print(f"{name:<18}{size:>6}{median:>12.1f}{p99:>10.1f}{median / size:>12.3f}")
    print()
    for name in scenarios:
        small, large = results[name, sizes[0]], results[name, sizes[1]]
        per_pod_ratio = (large / sizes[1]) / (small / sizes[0])
        verdict = "ok" if small < TARGET_US_AT_110 else "OVER TARGET"
        print(
            f"{name:<18} 1000/110 pods: x{large / small:.1f} time, x{per_pod_ratio:.2f} per pod;"
            f" 110 pods vs 1 ms target: {small / TARGET_US_AT_110:.2f} ({verdict})"
        )


if __name__ == "__main__":
    main()
