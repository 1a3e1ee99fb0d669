"""One evaluation cycle of the eviction engine, at 110 and 1000 pods.

    python -m benchmarks.bench_engine [--repeat N]

Scenarios, each on a node with every default kubelet threshold plus a soft memory one:

* ``at rest``: no threshold met (the cycle the agent runs every second, nearly always);
* ``memory, kubelet``: a hard memory threshold met, every pod ranked, the top one evicted;
* ``disk, kubelet``: a hard nodefs threshold met, disk usage summed per pod by layout;
* ``memory, relief``: as ``memory, kubelet`` with the relief strategy;
* ``PSI, kubelet``: a soft PSI threshold past its grace period;
* ``at rest, no LSI``: ``at rest`` with ``localStorageCapacityIsolation: false``, the
  baseline for the cost of the local-storage checks (every other scenario runs them);
* ``local storage``: no threshold met, 3% of the pods over a local-storage limit (all
  evicted in the cycle).

Half the pods set local-storage limits (container ``ephemeral-storage`` limits, an
emptyDir with a ``sizeLimit``, a memory-backed one), with per-container and per-volume
usage, none over them except in ``local storage``.

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

from nodeagent.agent.config import load_config
from nodeagent.eviction import engine
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.model import (
    ContainerInfo,
    ContainerUsage,
    EmptyDirVolume,
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


def node(
    pods: int, seed: int = 7, over_limits: float = 0.0
) -> tuple[tuple[PodInfo, ...], dict[PodUID, PodUsage]]:
    """``pods`` pods and their usage; a share ``over_limits`` of them over a local-storage
    limit (their own random stream, so the rest of the node is the same either way)."""
    rng = random.Random(seed)
    storage_rng = random.Random(seed + 1)
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
        if storage_rng.random() < 0.5:
            infos[-1], usage = _storage_limited(infos[-1], usage, storage_rng, over_limits)
    return tuple(infos), usage


def _storage_limited(
    pod: PodInfo, usage: dict[PodUID, PodUsage], rng: random.Random, over_limits: float
) -> tuple[PodInfo, dict[PodUID, PodUsage]]:
    """``pod`` with two limited containers, a limited emptyDir and a memory-backed one,
    using up to half of each limit (or twice the container's, for a share of them)."""
    limit = rng.choice([Gi, 2 * Gi, 4 * Gi])
    containers = (ContainerInfo("app", limit), ContainerInfo("sidecar", limit // 4))
    volumes = (
        EmptyDirVolume("scratch", size_limit=limit),
        EmptyDirVolume("shm", "Memory", 64 * Mi),
    )
    limited = replace(
        pod,
        limits={**pod.limits, "ephemeral-storage": limit + limit // 4},
        containers=containers,
        volumes=volumes,
    )
    record = usage.get(pod.uid)
    if record is None:
        return limited, usage
    app_logs = 2 * limit if rng.random() < over_limits else rng.randint(0, limit // 8)
    per_container = {
        "app": ContainerUsage(rootfs=rng.randint(0, limit // 8), logs=app_logs),
        "sidecar": ContainerUsage(rootfs=0, logs=rng.randint(0, limit // 16)),
    }
    scratch = rng.randint(0, limit // 8)
    usage[pod.uid] = replace(
        record,
        rootfs=sum(c.rootfs or 0 for c in per_container.values()),
        logs=sum(c.logs or 0 for c in per_container.values()),
        local_volumes=scratch,
        containers=per_container,
        volumes={"scratch": scratch, "shm": rng.randint(0, 32 * Mi)},
    )
    return limited, usage


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
    no_lsi = policy(local_storage_capacity_isolation="false")
    scenarios: dict[str, Scenario] = {
        "at rest, no LSI": lambda u: (no_lsi, observations(u, memory=20 * Gi, nodefs=300 * Gi)),
        "at rest": lambda u: (kubelet, observations(u, memory=20 * Gi, nodefs=300 * Gi)),
        "memory, kubelet": lambda u: (kubelet, observations(u, memory=512 * Mi, nodefs=300 * Gi)),
        "disk, kubelet": lambda u: (kubelet, observations(u, memory=20 * Gi, nodefs=10 * Gi)),
        "memory, relief": lambda u: (relief, observations(u, memory=512 * Mi, nodefs=300 * Gi)),
        "PSI, kubelet": lambda u: (
            kubelet,
            observations(u, memory=20 * Gi, nodefs=300 * Gi, stall=35.0),
        ),
        "local storage": lambda u: (kubelet, observations(u, memory=20 * Gi, nodefs=300 * Gi)),
    }
    sizes = (110, 1000)
    print(f"{'scenario':<18}{'pods':>6}{'median µs':>12}{'p99 µs':>10}{'per pod µs':>12}")
    results: dict[tuple[str, int], float] = {}
    for name, build in scenarios.items():
        for size in sizes:
            pods, usage = node(size, over_limits=0.06 if name == "local storage" else 0.0)
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
    print()
    for size in sizes:
        baseline = results["at rest, no LSI", size]
        at_rest, evicting = results["at rest", size], results["local storage", size]
        print(
            f"local-storage checks at {size} pods: at rest x{at_rest / baseline:.2f}"
            f" (+{at_rest - baseline:.1f} µs), evicting x{evicting / baseline:.2f}"
            f" (+{evicting - baseline:.1f} µs) of at rest without them"
        )


if __name__ == "__main__":
    main()
