"""Scheduler throughput: pods placed per second with the default profile.

The shape follows kube-scheduler's ``SchedulingBasic`` scheduler_perf workload: nodes of
4 CPU / 32 GiB / 110 pods spread over zones, ``--init-pods`` pods already bound, then
``--pods`` pending pods of 100m / 500 MiB each scheduled one at a time. Every node also
carries a ``nodeagent.io/pressure`` annotation with random headroom, so NodePressure
scores for real. kube-scheduler's CI requires >= 680 pods/s on 5000 nodes / 10,000 pods
(Go, in-process API server); this module's target is >= 200 pods/s.

Timed: the planner's scheduling loop only (snapshot and profile built before the clock
starts; their cost is printed separately, as is the cost of parsing the objects from
their Kubernetes form).

    python -m benchmarks.bench_scheduler                        # 500, 1000, 5000, 15000 nodes
    python -m benchmarks.bench_scheduler --nodes 5000 --pods 10000
    python -m benchmarks.bench_scheduler --nodes 5000 --tainted-fraction 0.9   # filter-heavy
    python -m benchmarks.bench_scheduler --repeat 3             # median of 3 runs per size
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

from nodeagent import model
from nodeagent.scheduler import api, config, objects, registry, scheduling
from nodeagent.scheduler.framework import Handle, build_frameworks
from nodeagent.scheduler.snapshot import ClusterSnapshot

GIB = 1024**3
MIB = 1024**2
NOW = 1_700_000_000.0
TARGET = 200
KUBE_SCHEDULER_CI = 680


def node_object(
    index: int, zones: int, rng: random.Random, *, tainted: bool = False
) -> dict[str, Any]:
    """One Node as ``kubectl get -o json`` would print it."""
    capacity = 32 * GIB
    available = int(capacity * rng.uniform(0.05, 0.9))
    annotation = {
        "time": "2023-11-14T22:13:20Z",
        "signals": {
            model.Signal.MEMORY_AVAILABLE.value: {
                "available": available,
                "capacity": capacity,
                "threshold": 100 * MIB,
            }
        },
    }
    name = f"node-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/region": "region-1",
                "topology.kubernetes.io/zone": f"zone-{index % zones}",
            },
            "annotations": {model.PRESSURE_ANNOTATION: json.dumps(annotation)},
        },
        "spec": {"taints": [{"key": "dedicated", "value": "other", "effect": "NoSchedule"}]}
        if tainted
        else {},
        "status": {
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
        },
    }


def pod_object(index: int, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}},
            }
        ]
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{index}", "namespace": "default"},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def generate(
    nodes: int,
    pods: int,
    init_pods: int,
    *,
    zones: int = 10,
    seed: int = 1,
    tainted_fraction: float = 0.0,
) -> list[dict[str, Any]]:
    """A cluster as decoded Kubernetes objects; the same seed gives the same cluster.
    ``tainted_fraction`` of the nodes carry a taint no pod tolerates (a cluster where
    most nodes are filtered out, so each cycle must examine more of them)."""
    rng = random.Random(seed)
    items = [
        node_object(i, zones, rng, tainted=rng.random() < tainted_fraction) for i in range(nodes)
    ]
    items += [pod_object(i, f"node-{rng.randrange(nodes)}") for i in range(init_pods)]
    items += [pod_object(init_pods + i, None) for i in range(pods)]
    return items


def run(
    nodes: int,
    pods: int,
    init_pods: int,
    *,
    zones: int = 10,
    seed: int = 1,
    tainted_fraction: float = 0.0,
) -> dict[str, float]:
    items = generate(
        nodes, pods, init_pods, zones=zones, seed=seed, tainted_fraction=tainted_fraction
    )
    started = time.perf_counter()
    cluster = objects.read_cluster([{"kind": "List", "items": items}])
    parsed = time.perf_counter()
    plugins = registry.in_tree_registry()
    frameworks = build_frameworks(
        config.parse_configuration(None, plugins), plugins, Handle(now=NOW + 60)
    )
    snapshot = ClusterSnapshot(cluster.nodes, cluster.bound_pods())
    scheduler = scheduling.Scheduler(frameworks, snapshot, rng=random.Random(seed))
    pending: list[api.Pod] = [p for p in cluster.pods if not p.node_name]
    built = time.perf_counter()
    placed = sum(scheduler.schedule_one(pod).node is not None for pod in pending)
    done = time.perf_counter()
    return {
        "nodes": nodes,
        "pods": len(pending),
        "placed": placed,
        "parse_s": parsed - started,
        "build_s": built - parsed,
        "schedule_s": done - built,
        "pods_per_s": len(pending) / (done - built),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="500,1000,5000,15000")
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--init-pods", type=int, default=1_000)
    parser.add_argument("--zones", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per size; the median scheduling time is reported (a shared machine is noisy)",
    )
    parser.add_argument(
        "--tainted-fraction",
        type=float,
        default=0.0,
        help="share of nodes with a taint no pod tolerates (stresses filtering)",
    )
    args = parser.parse_args()
    print(
        f"default profile, {args.pods} pending pods (100m/500Mi), {args.init_pods} bound,"
        f" {args.zones} zones, seed {args.seed}, tainted fraction {args.tainted_fraction},"
        f" median of {max(args.repeat, 1)} run(s)"
    )
    header = (
        f"{'nodes':>6} {'placed':>7} {'parse s':>8} {'build s':>8} {'sched s':>8}"
        f" {'pods/s':>8} {'us/pod':>7} {'/target':>8} {'/kube CI':>9}"
    )
    print(header)
    for nodes in (int(n) for n in args.nodes.split(",")):
        runs = [
            run(
                nodes,
                args.pods,
                args.init_pods,
                zones=args.zones,
                seed=args.seed,
                tainted_fraction=args.tainted_fraction,
            )
            for _ in range(max(args.repeat, 1))
        ]
        r = sorted(runs, key=lambda result: result["schedule_s"])[len(runs) // 2]
        print(
            f"{nodes:>6} {int(r['placed']):>7} {r['parse_s']:>8.2f} {r['build_s']:>8.2f}"
            f" {r['schedule_s']:>8.2f} {r['pods_per_s']:>8.0f}"
            f" {1e6 / r['pods_per_s']:>7.0f} {r['pods_per_s'] / TARGET:>7.2f}x"
            f" {r['pods_per_s'] / KUBE_SCHEDULER_CI:>8.2f}x"
        )


if __name__ == "__main__":
    main()
