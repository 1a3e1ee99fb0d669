"""Scheduler throughput: pods placed per second with the default profile.

The basic shape follows kube-scheduler's ``SchedulingBasic`` scheduler_perf workload:
nodes of 4 CPU / 32 GiB / 110 pods spread over zones, ``--init-pods`` pods already bound,
then ``--pods`` pending pods of 100m / 500 MiB each scheduled one at a time. Every node
also carries a ``nodeagent.io/pressure`` annotation with random headroom, so NodePressure
scores for real. kube-scheduler's CI requires >= 680 pods/s on 5000 nodes / 10,000 pods
(Go, in-process API server); this module's target is >= 200 pods/s.

``--shape`` adds the workloads of the plugins that look at other pods (3 zones):

* ``spread``: every pending pod belongs to a Deployment of 100 replicas and carries a
  zone spread constraint (DoNotSchedule, maxSkew 1) over the Deployment's labels;
* ``anti-affinity``: 10 % of the pending pods, in groups of 10, have required hostname
  anti-affinity to their own group;
* ``preemption``: every node full of priority-0 pods (4 x 1 CPU), then ``--preemptors``
  pods of priority 1000 (1 CPU) that must each preempt: figures are preemptions/s.

Targets: spread and anti-affinity >= 1000 pods/s, preemption >= 100 preemptions/s (at
5000 nodes). Each shape is printed with the basic shape measured in the same run, side by
side, as the baseline ratio.

Timed: the planner's scheduling loop only (snapshot and profile built before the clock
starts; their cost is printed separately, as is the cost of parsing the objects from
their Kubernetes form).

    python -m benchmarks.bench_scheduler                        # 500, 1000, 5000, 15000 nodes
    python -m benchmarks.bench_scheduler --nodes 5000 --pods 10000
    python -m benchmarks.bench_scheduler --nodes 5000 --tainted-fraction 0.9   # filter-heavy
    python -m benchmarks.bench_scheduler --repeat 3             # median of 3 runs per size
    python -m benchmarks.bench_scheduler --nodes 5000 --zones 3 \
        --shape spread,anti-affinity,preemption
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

from nodeagent import model
from nodeagent.k8s.pressure import PRESSURE_ANNOTATION
from nodeagent.scheduler import api, config, objects, planner, registry, scheduling
from nodeagent.scheduler.framework import Handle, build_frameworks
from nodeagent.scheduler.snapshot import ClusterSnapshot

GIB = 1024**3
MIB = 1024**2
NOW = 1_700_000_000.0
TARGET = 200
KUBE_SCHEDULER_CI = 680
SHAPE_TARGETS = {"basic": TARGET, "spread": 1000, "anti-affinity": 1000, "preemption": 100}
DEPLOYMENT_SIZE = 100
ANTI_AFFINITY_GROUP = 10


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
            "annotations": {PRESSURE_ANNOTATION: json.dumps(annotation)},
        },
        "spec": {"taints": [{"key": "dedicated", "value": "other", "effect": "NoSchedule"}]}
        if tainted
        else {},
        "status": {
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
        },
    }


def pod_object(
    index: int,
    node: str | None,
    *,
    cpu: str = "100m",
    memory: str = "500Mi",
    priority: int | None = None,
    labels: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ]
    }
    if node is not None:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    spec.update(extra or {})
    metadata: dict[str, Any] = {"name": f"pod-{index}", "namespace": "default"}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def shaped_pod(shape: str, index: int) -> dict[str, Any]:
    """Pending pod ``index`` of ``shape`` (see the module docstring)."""
    if shape == "spread":
        labels = {"app": f"deploy-{index // DEPLOYMENT_SIZE}"}
        constraint = {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": labels},
        }
        return pod_object(
            index, None, labels=labels, extra={"topologySpreadConstraints": [constraint]}
        )
    if shape == "anti-affinity" and index % 10 == 0:
        labels = {"group": f"g-{index // (10 * ANTI_AFFINITY_GROUP)}"}
        term = {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        return pod_object(index, None, labels=labels, extra={"affinity": anti})
    return pod_object(index, None)


def generate(
    nodes: int,
    pods: int,
    init_pods: int,
    *,
    zones: int = 10,
    seed: int = 1,
    tainted_fraction: float = 0.0,
    shape: str = "basic",
) -> list[dict[str, Any]]:
    """A cluster as decoded Kubernetes objects; the same seed gives the same cluster.
    ``tainted_fraction`` of the nodes carry a taint no pod tolerates (a cluster where
    most nodes are filtered out, so each cycle must examine more of them). With shape
    ``preemption``, ``pods`` is the number of preemptors and every node is full."""
    rng = random.Random(seed)
    items = [
        node_object(i, zones, rng, tainted=rng.random() < tainted_fraction) for i in range(nodes)
    ]
    if shape == "preemption":
        started = 0
        for n in range(nodes):
            for _ in range(4):
                items.append(pod_object(started, f"node-{n}", cpu="1", memory="1Gi", priority=0))
                started += 1
        items += [
            pod_object(started + i, None, cpu="1", memory="1Gi", priority=1000) for i in range(pods)
        ]
        return items
    items += [pod_object(i, f"node-{rng.randrange(nodes)}") for i in range(init_pods)]
    items += [shaped_pod(shape, init_pods + i) for i in range(pods)]
    return items


def run(
    nodes: int,
    pods: int,
    init_pods: int,
    *,
    zones: int = 10,
    seed: int = 1,
    tainted_fraction: float = 0.0,
    shape: str = "basic",
) -> dict[str, float]:
    items = generate(
        nodes,
        pods,
        init_pods,
        zones=zones,
        seed=seed,
        tainted_fraction=tainted_fraction,
        shape=shape,
    )
    started = time.perf_counter()
    cluster = objects.read_cluster([{"kind": "List", "items": items}])
    parsed = time.perf_counter()
    plugins = registry.in_tree_registry()
    frameworks = build_frameworks(
        config.parse_configuration(None, plugins),
        plugins,
        Handle(now=NOW + 60, rng=random.Random(seed)),
    )
    snapshot = ClusterSnapshot(cluster.nodes, cluster.bound_pods())
    scheduler = scheduling.Scheduler(frameworks, snapshot, rng=random.Random(seed))
    pending: list[api.Pod] = [p for p in cluster.pods if not p.node_name]
    built = time.perf_counter()
    placed = nominated = 0
    for pod in pending:
        result = scheduler.schedule_one(pod)
        placed += result.node is not None
        offer = result.preemption
        if offer is not None and offer.nominated_node is not None:
            nominated += 1
            planner.apply_preemption(
                snapshot, next(iter(frameworks.values())).handle.nominator, pod, offer
            )
    done = time.perf_counter()
    return {
        "nodes": nodes,
        "pods": len(pending),
        "placed": placed,
        "nominated": nominated,
        "parse_s": parsed - started,
        "build_s": built - parsed,
        "schedule_s": done - built,
        "pods_per_s": len(pending) / (done - built),
    }


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return sorted(runs, key=lambda result: result["schedule_s"])[len(runs) // 2]


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
    parser.add_argument(
        "--shape",
        default="basic",
        help="comma-separated: basic, spread, anti-affinity, preemption (module docstring)",
    )
    parser.add_argument(
        "--preemptors", type=int, default=500, help="pending pods of the preemption shape"
    )
    args = parser.parse_args()
    shapes = [s.strip() for s in args.shape.split(",") if s.strip()]
    unknown = set(shapes) - set(SHAPE_TARGETS)
    if unknown:
        parser.error(f"unknown shape(s): {', '.join(sorted(unknown))}")
    repeat = max(args.repeat, 1)
    print(
        f"default profile, {args.pods} pending pods, {args.init_pods} bound, {args.zones} zones,"
        f" seed {args.seed}, tainted fraction {args.tainted_fraction}, median of {repeat} run(s)"
    )
    header = (
        f"{'shape':>13} {'nodes':>6} {'placed':>7} {'parse s':>8} {'build s':>8} {'sched s':>8}"
        f" {'pods/s':>8} {'us/pod':>7} {'/target':>8} {'/basic':>7} {'/kube CI':>9}"
    )
    print(header)
    for nodes in (int(n) for n in args.nodes.split(",")):
        baseline: dict[str, float] | None = None
        for shape in ["basic", *(s for s in shapes if s != "basic")]:
            pods = args.preemptors if shape == "preemption" else args.pods
            runs = [
                run(
                    nodes,
                    pods,
                    args.init_pods,
                    zones=args.zones,
                    seed=args.seed,
                    tainted_fraction=args.tainted_fraction,
                    shape=shape,
                )
                for _ in range(repeat)
            ]
            r = _median(runs)
            if shape == "basic":
                baseline = r
                if "basic" not in shapes:
                    continue
            done = int(r["nominated"] if shape == "preemption" else r["placed"])
            rate = r["pods_per_s"]
            versus = rate / baseline["pods_per_s"] if baseline else 1.0
            print(
                f"{shape:>13} {nodes:>6} {done:>7} {r['parse_s']:>8.2f} {r['build_s']:>8.2f}"
                f" {r['schedule_s']:>8.2f} {rate:>8.0f} {1e6 / rate:>7.0f}"
                f" {rate / SHAPE_TARGETS[shape]:>7.2f}x {versus:>6.2f}x"
                f" {rate / KUBE_SCHEDULER_CI:>8.2f}x"
            )


if __name__ == "__main__":
    main()
