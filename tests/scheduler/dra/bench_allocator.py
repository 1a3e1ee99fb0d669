"""How fast the allocator filters nodes, in the shape of kube-scheduler's scheduler_perf
``SchedulingWithResourceClaimTemplate`` (each node publishes one slice of devices, each
pod asks for one device through a class selecting the driver), scaled to many nodes.

    PYTHONPATH=. python3 -m tests.scheduler.dra.bench_allocator [nodes] [devices-per-node]

Prints, for one pod's claim filtered over every node: the first sweep (every device's
selector evaluated once, every node's pools gathered), a warm sweep, a sweep with half
of each node's devices taken (the search skips them), a sweep where every node is full,
and a sweep through a rebuilt inventory over the same parsed slices (what a scheduler
does after a slice update). The parsed slices are frozen out of the collector's reach
first, as the live scheduler freezes what its informers listed
(:mod:`nodeagent.base.heap`). Wall-clock figures: the load average is printed beside them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from nodeagent.base import heap
from nodeagent.scheduler import api
from nodeagent.scheduler.dra import model
from nodeagent.scheduler.dra.allocator import Allocator, InUse, Inventory

DRIVER = "test-driver.cdi.k8s.io"


def _slice(node: int, devices: int) -> model.ResourceSlice:
    return model.parse_resource_slice(
        {
            "metadata": {"name": f"node-{node}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": f"node-{node}",
                "pool": {"name": f"node-{node}", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"dev-{d}",
                        "attributes": {"model": {"string": "x"}, "index": {"int": d}},
                        "capacity": {"memory": {"value": "1Gi"}},
                    }
                    for d in range(devices)
                ],
            },
        }
    )


def _load() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return f.read().split()[0]


def main(argv: list[str]) -> None:
    count = int(argv[0]) if argv else 5000
    per_node = int(argv[1]) if len(argv) > 1 else 10
    slices = [_slice(i, per_node) for i in range(count)]
    classes = {
        "test-class": model.parse_device_class(
            {
                "metadata": {"name": "test-class"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        )
    }
    claim = model.parse_resource_claim(
        {
            "metadata": {"name": "claim", "namespace": "test"},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "test-class"}}]
                }
            },
        }
    )
    nodes = [api.Node(f"node-{i}", {"kubernetes.io/hostname": f"node-{i}"}) for i in range(count)]
    heap.freeze()
    inventory = Inventory(slices)

    def taken(fraction: float) -> InUse:
        return InUse(
            devices=frozenset(
                model.DeviceID(DRIVER, f"node-{i}", f"dev-{d}")
                for i in range(count)
                for d in range(int(per_node * fraction))
            )
        )

    def sweep(label: str, allocator: Callable[[], Allocator], runs: int = 3) -> None:
        """The fastest of ``runs`` sweeps (a shared machine slows some down, none up)."""
        took = float("inf")
        for _ in range(runs):
            start = time.perf_counter()
            chosen = allocator()
            allocated = sum(chosen.allocate(node, [claim]).ok for node in nodes)
            took = min(took, time.perf_counter() - start)
        print(f"{label:<46} {took:7.3f} s  {count / took:9,.0f} nodes/s  ({allocated} allocated)")

    print(f"{count} nodes x {per_node} devices; load average {_load()}")
    sweep(
        "first sweep (selectors evaluated, pools found)", lambda: Allocator(classes, inventory), 1
    )
    sweep("warm sweep", lambda: Allocator(classes, inventory))
    half = taken(0.5)
    sweep("half the devices taken (first time)", lambda: Allocator(classes, inventory, half), 1)
    sweep("half the devices taken", lambda: Allocator(classes, inventory, half))
    full = taken(1.0)
    sweep("every node full", lambda: Allocator(classes, inventory, full))
    sweep("rebuilt inventory, half taken", lambda: Allocator(classes, Inventory(slices), half))
    sweep(
        "updated() inventory, half taken",
        lambda: Allocator(classes, inventory.updated(slices), half),
    )
    print(f"load average {_load()}")


if __name__ == "__main__":
    main(sys.argv[1:])
