"""CPU per scheduling cycle of the volume shapes, in process: where the live scheduler's
time goes on ``bench_vs_kube_scheduler``'s ``csi-pvs`` and ``local-pvs`` shapes, without
an API server (the planner's cycle: the same plugins, the same ``VolumeCatalog``).

    python -m benchmarks.bench_volume_cycle [--nodes 5000] [--pods 500]
        [--shapes csi-pvs,local-pvs] [--profile]

Builds the benchmark's objects (its nodes, 1,000 bound pods, its storage objects: CSINodes
and bound CSI PVs, or a WaitForFirstConsumer class and one local PV per pod, round robin
over the nodes), then schedules every pending pod and prints the process CPU per cycle;
``--profile`` adds cProfile's top functions by cumulative time (the cycle is slower
under it).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time
from typing import Any

from benchmarks import bench_vs_kube_scheduler as vs
from benchmarks.bench_scheduler import node_object, pod_object
from nodeagent.scheduler import config, objects, registry, scheduling, storage
from nodeagent.scheduler.framework import Handle, build_frameworks
from nodeagent.scheduler.snapshot import ClusterSnapshot


def cluster_items(shape: str, nodes: int, pods: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    items = [node_object(i, 3, rng) for i in range(nodes)]
    items += [pod_object(i, f"node-{rng.randrange(nodes)}") for i in range(vs.INIT_PODS)]
    pvs, claims = vs.storage_objects(shape, pods, "bench", nodes)
    bound = shape == "csi-pvs"
    for pv in pvs:
        pv.update(kind="PersistentVolume", apiVersion="v1")
        pv["status"] = {"phase": "Bound" if bound else "Available"}
        if bound:
            pv["spec"]["claimRef"]["namespace"] = "default"
    for claim in claims:
        claim.update(kind="PersistentVolumeClaim", apiVersion="v1")
        claim["metadata"]["namespace"] = "default"
        claim["status"] = {"phase": "Bound" if bound else "Pending"}
    if bound:
        items += [
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": f"node-{i}"},
                "spec": {
                    "drivers": [
                        {"name": vs.CSI_DRIVER, "nodeID": f"node-{i}", "allocatable": {"count": 39}}
                    ]
                },
            }
            for i in range(nodes)
        ]
    else:
        items.append(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": vs.LOCAL_CLASS},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        )
    items += pvs + claims
    for i in range(pods):
        pod = pod_object(vs.INIT_PODS + i, None)
        claim = {"claimName": f"data-{vs.INIT_PODS + i}"}
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": claim}]
        items.append(pod)
    return items


def run(shape: str, nodes: int, pods: int, *, profile: bool) -> None:
    cluster = objects.read_cluster([{"kind": "List", "items": cluster_items(shape, nodes, pods)}])
    plugins = registry.in_tree_registry()
    handle = Handle(volumes=storage.VolumeCatalog(cluster.storage), rng=random.Random(1))
    frameworks = build_frameworks(config.parse_configuration(None, plugins), plugins, handle)
    snapshot = ClusterSnapshot(cluster.nodes, cluster.bound_pods())
    scheduler = scheduling.Scheduler(frameworks, snapshot, rng=random.Random(1))
    pending = [p for p in cluster.pods if not p.node_name]
    profiler = cProfile.Profile() if profile else None
    started = time.process_time()
    if profiler is not None:
        profiler.enable()
    placed = sum(scheduler.schedule_one(pod).node is not None for pod in pending)
    if profiler is not None:
        profiler.disable()
    cpu = time.process_time() - started
    print(
        f"{shape}: {nodes} nodes, {placed}/{len(pending)} placed, "
        f"{cpu / len(pending) * 1000:.2f} ms CPU per cycle{' (profiled)' if profile else ''}"
    )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--shapes", default=",".join(vs.VOLUME_SHAPES))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    for shape in args.shapes.split(","):
        if shape not in vs.VOLUME_SHAPES:
            parser.error(f"--shapes: {shape!r} is not one of {', '.join(vs.VOLUME_SHAPES)}")
        run(shape, args.nodes, args.pods, profile=args.profile)


if __name__ == "__main__":
    main()
