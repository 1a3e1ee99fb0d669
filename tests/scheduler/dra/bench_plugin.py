"""What DynamicResources costs a pod, in the shape of kube-scheduler's scheduler_perf
``SchedulingWithResourceClaimTemplate`` (``5000pods_500nodes``): one slice of devices
per node, half of them held by the init pods' claims, each pod with a claim of its own
asking one device through a class selecting the driver by CEL.

    PYTHONPATH=. python3 -m tests.scheduler.dra.bench_plugin [nodes] [pods] [devices-per-node]

Per pod: PreFilter, Filter over every node (the plugin's vectorized form, as the
scheduler calls it), Reserve on a feasible node picked at random (seeded), PreBind as
the planner runs it (committed to the catalog). Prints the CPU per pod and the
collector's share of it (its collections by generation and the time they took): what
the plugin keeps alive while a cycle runs is what the collector walks. The heap built
before is frozen, as the live scheduler freezes what its informers listed
(:mod:`nodeagent.base.heap`).
"""

from __future__ import annotations

import gc
import random
import sys
import time
from typing import Any

import numpy as np

from nodeagent.base import heap
from nodeagent.scheduler import api, framework, objects, resource_claims
from nodeagent.scheduler.framework import CycleState
from nodeagent.scheduler.plugins import dynamic_resources
from tests.scheduler import builders
from tests.scheduler import dra_builders as b


class _Collections:
    """The collector's runs (by generation) and their time, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.counts[info["generation"]] += 1
            self.seconds += time.perf_counter() - self._started


def _pod(index: int) -> api.Pod:
    return objects.parse_pod(
        {
            "kind": "Pod",
            "metadata": {"name": f"p{index}", "namespace": "default", "uid": f"pod-{index}"},
            "spec": {
                "containers": [{"name": "c", "image": "x"}],
                "resourceClaims": [{"name": "r", "resourceClaimName": f"claim-{index}"}],
            },
        }
    )


def main(argv: list[str]) -> None:
    count = int(argv[0]) if argv else 500
    pods = int(argv[1]) if len(argv) > 1 else 300
    per_node = int(argv[2]) if len(argv) > 2 else 10
    catalog = resource_claims.ResourceCatalog()
    catalog.set_class(
        resource_claims.parse_device_class(
            b.device_class(selector=f'device.driver == "{b.DRIVER}"')
        )
    )
    names = [f"node-{i}" for i in range(count)]
    for name in names:
        catalog.set_slice(resource_claims.parse_resource_slice(b.node_slice(name, per_node)))
    for i in range(count * per_node // 2):  # the init pods' claims: half the devices
        node, device = names[i % count], f"instance-{i // count}"
        body = b.claim_dict(
            f"init-{i}",
            uid=f"init-{i}",
            owner=None,
            allocated=[(node, device)],
            node=node,
            reserved=[(f"init-{i}", f"init-pod-{i}")],
        )
        catalog.set_claim(resource_claims.parse_resource_claim(body))
    for i in range(pods):
        body = b.claim_dict(f"claim-{i}", uid=f"claim-{i}", owner=f"pod-{i}")
        catalog.set_claim(resource_claims.parse_resource_claim(body))
    plugin = dynamic_resources.DynamicResources(
        dynamic_resources.Args(), framework.Handle(resources=catalog)
    )
    snapshot = builders.snapshot([builders.node(n) for n in names])
    nodes = np.arange(count)
    rng = random.Random(1)
    to_place = [_pod(i) for i in range(pods)]
    heap.freeze()
    collections = _Collections()
    gc.callbacks.append(collections)
    with open("/proc/loadavg", encoding="ascii") as f:
        load = f.read().split()[0]
    started = time.process_time()
    for pod in to_place:
        state = CycleState()
        if not plugin.pre_filter(state, pod, snapshot)[1].is_success:
            raise SystemExit(f"{pod.key}: PreFilter failed")
        feasible = np.flatnonzero(plugin.filter(state, pod, snapshot, nodes))
        if not len(feasible):
            raise SystemExit(f"{pod.key}: no node left (more pods than free devices?)")
        node = names[int(feasible[rng.randrange(len(feasible))])]
        if not plugin.reserve(state, pod, node).is_success:
            raise SystemExit(f"{pod.key}: Reserve failed")
        if not plugin.pre_bind(state, pod, node).is_success:
            raise SystemExit(f"{pod.key}: PreBind failed")
    took = time.process_time() - started
    gc.callbacks.remove(collections)
    print(
        f"{count} nodes x {per_node} devices, {pods} pods; load average {load}\n"
        f"CPU per pod {1000 * took / pods:.2f} ms; collections {collections.counts} "
        f"(generations 0, 1, 2), {1000 * collections.seconds / pods:.2f} ms per pod"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
