"""What a churn of nodes added and deleted costs the live scheduler's cache, in process
(no API server): the snapshot built from every node and pod (what each node added or
deleted cost before the cache kept its snapshot in place) against the same node event
applied in place, and the scheduling cycle's CPU per pod with and without such a churn
between pods (the plugins' caches of node data follow the change).

The cluster is bench_scheduler's basic shape (4 CPU / 32 GiB nodes over 3 zones, every
node with a published ``nodeagent.io/pressure`` annotation unless ``--no-annotations``),
``--bound`` pods bound at random; the churn is the Unschedulable shape's: a cordoned node
created and the one created before the last deleted.

    python -m benchmarks.bench_snapshot_churn [--nodes 5000] [--bound 11000] [--pods 2000]
        [--churn-every 2] [--no-annotations]

CPU time (``time.process_time``), so the figures hold on a loaded machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time

from benchmarks.bench_scheduler import NOW, generate
from nodeagent.base.clock import FakeClock
from nodeagent.scheduler import api, config, objects, registry, scheduling
from nodeagent.scheduler.framework import Handle, build_frameworks
from nodeagent.scheduler.live.cache import SchedulerCache
from nodeagent.scheduler.objects import ClusterObjects
from nodeagent.scheduler.snapshot import ClusterSnapshot


def cluster(nodes: int, bound: int, pods: int, *, annotations: bool) -> ClusterObjects:
    parsed = objects.read_cluster(
        [{"kind": "List", "items": generate(nodes, pods, bound, zones=3, shape="basic")}]
    )
    if not annotations:
        parsed = dataclasses.replace(
            parsed, nodes=tuple(dataclasses.replace(n, annotations={}) for n in parsed.nodes)
        )
    return parsed


class NodeChurn:
    """A cordoned node created, and the one created before the last deleted."""

    def __init__(self, cache: SchedulerCache, template: api.Node) -> None:
        self._cache, self._template = cache, template
        self._created: list[str] = []
        self._n = 0

    def step(self) -> None:
        name = f"churn-{self._n}"
        zone = f"zone-{self._n % 3}"
        labels = {**self._template.labels, "kubernetes.io/hostname": name}
        labels["topology.kubernetes.io/zone"] = zone
        node = dataclasses.replace(self._template, name=name, labels=labels, unschedulable=True)
        self._cache.add_node(node)
        self._created.append(name)
        if len(self._created) > 2:
            self._cache.remove_node(self._created.pop(0))
        self._n += 1


def loaded_cache(parsed: ClusterObjects) -> SchedulerCache:
    cache = SchedulerCache(clock=FakeClock().now)
    for node in parsed.nodes:
        cache.add_node(node)
    for pod in parsed.bound_pods():
        cache.add_bound(pod)
    return cache


def node_events(parsed: ClusterObjects, events: int) -> dict[str, float]:
    """The first build, a rebuild, and one churn step with the next cycle's snapshot."""
    cache = loaded_cache(parsed)
    started = time.process_time()
    with cache.cycle() as snapshot:
        pass
    built = time.process_time() - started
    started = time.process_time()
    ClusterSnapshot(list(snapshot.nodes), [p for on in snapshot.pods_on_node for p in on])
    rebuilt = time.process_time() - started
    churn = NodeChurn(cache, parsed.nodes[0])
    started = time.process_time()
    for _ in range(events):
        churn.step()
        with cache.cycle():
            pass
    in_place = (time.process_time() - started) / events
    return {
        "first_build_ms": 1000 * built,
        "rebuild_ms": 1000 * rebuilt,
        "step_ms": 1000 * in_place,
        "rebuilds": cache.stats().rebuilds,
    }


def cycles(parsed: ClusterObjects, churn_every: int) -> float:
    """CPU us per pod scheduled, a churn step before every ``churn_every``-th pod (0: none)."""
    cache = loaded_cache(parsed)
    plugins = registry.in_tree_registry()
    frameworks = build_frameworks(
        config.parse_configuration(None, plugins),
        plugins,
        Handle(now=NOW + 60, rng=random.Random(1)),
    )
    churn = NodeChurn(cache, parsed.nodes[0])
    pending = [p for p in parsed.pods if not p.node_name]
    with cache.cycle() as snapshot:
        scheduler = scheduling.Scheduler(frameworks, snapshot, rng=random.Random(1))
    started = time.process_time()
    for i, pod in enumerate(pending):
        if churn_every and i % churn_every == 0:
            churn.step()
        with cache.cycle() as snapshot:
            scheduler.snapshot = snapshot
            result = scheduler.schedule_pod(frameworks[pod.scheduler_name], pod)
            if result.node is not None:
                cache.assume(pod, result.node)  # as the live scheduler: into the cache
    return 1e6 * (time.process_time() - started) / len(pending)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--bound", type=int, default=11_000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--events", type=int, default=400, help="node events timed")
    parser.add_argument("--churn-every", type=int, default=2, help="pods per churn step")
    parser.add_argument("--no-annotations", action="store_true")
    args = parser.parse_args()
    parsed = cluster(args.nodes, args.bound, args.pods, annotations=not args.no_annotations)
    events = node_events(parsed, args.events)
    print(
        f"{args.nodes} nodes, {args.bound} bound pods: snapshot built from every node and pod"
        f" {events['rebuild_ms']:.1f} ms CPU (first build {events['first_build_ms']:.1f});"
        f" a churn step (a node added and one deleted, the next cycle's snapshot)"
        f" {events['step_ms']:.2f} ms; the cache built its snapshot from every node and pod"
        f" {events['rebuilds']:.0f} times over {args.events} steps"
    )
    quiet = cycles(parsed, 0)
    churned = cycles(parsed, args.churn_every)
    print(
        f"scheduling cycle, {len([p for p in parsed.pods if not p.node_name])} pods:"
        f" {quiet:.0f} us CPU/pod without churn, {churned:.0f} with a churn step every"
        f" {args.churn_every} pods ({churned / quiet:.2f}x): each churn step (two node"
        f" events) costs {(churned - quiet) * args.churn_every / 1000:.2f} ms of CPU in all,"
        f" the step and what the cycles after it recompute"
    )


if __name__ == "__main__":
    main()
