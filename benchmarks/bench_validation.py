"""What the planner's API-server validation costs next to reading the cluster: the
objects of benchmarks/bench_scheduler's cluster (nodes, bound and pending pods) checked
by :mod:`nodeagent.scheduler.validation` alone, and the whole ``read_cluster`` (which
validates, then parses)::

    python -m benchmarks.bench_validation [--nodes 5000] [--pods 10000]

Prints the best of ``--repeat`` rounds of each, and the validation's share.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from benchmarks.bench_scheduler import generate
from nodeagent.scheduler import objects, validation


def best(run: Callable[[], object], repeat: int) -> float:
    fastest = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        fastest = min(fastest, time.perf_counter() - started)
    return fastest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    items = generate(args.nodes, args.pods, args.nodes)
    document = [{"kind": "List", "items": items}]
    pods = [item for item in items if item["kind"] == "Pod"]
    nodes = [item for item in items if item["kind"] == "Node"]

    def validate() -> None:
        for pod in pods:
            validation.pod(pod)
        for node in nodes:
            validation.node(node)

    checked = best(validate, args.repeat)
    read = best(lambda: objects.read_cluster(document), args.repeat)
    per_object = checked / len(items) * 1e6
    print(
        f"{len(nodes)} nodes + {len(pods)} pods: validation {checked * 1000:.0f} ms"
        f" ({per_object:.1f} us an object), read_cluster {read * 1000:.0f} ms;"
        f" validation {checked / read:.0%} of it"
    )


if __name__ == "__main__":
    main()
