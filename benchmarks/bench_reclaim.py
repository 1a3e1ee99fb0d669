"""Node-level reclaim on a real containerd: how long the loop waits before a disk eviction.

    sudo python -m benchmarks.bench_reclaim [--repeat N] [--images N] [--pods N]

Starts Debian's containerd as the tests do (root on a tmpfs, images built here and
imported with ``ctr``, no registry), then for each repetition: imports ``--images``
unused 1 MiB images and runs, in each of ``--pods`` host-network pods, a container that
exits, three times (two dead containers per pod), and times

* ``inventory``: ListPodSandbox + ListContainers + ListImages, what any reclaim costs
  even when there is nothing to remove (the baseline);
* ``reclaim``: :meth:`NodeReclaimer.reclaim` of dead containers and every unused image,
  as the agent runs it before a disk eviction (real clock, real removals);
* ``reclaim, nothing left``: the same again at once, what a reclaim costs when the
  node holds nothing to remove.

Prints the median of each, their ratio, and the cost per object removed. Needs root,
containerd, ctr and runc.
"""

from __future__ import annotations

import argparse
import statistics
import time

from nodeagent.base.clock import RealClock
from nodeagent.eviction.layout import RECLAIM_CONTAINERS, RECLAIM_IMAGES
from nodeagent.reclaim.reclaimer import NodeReclaimer
from tests.cri.containerd import PINNED, MiB, available, start, stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--pods", type=int, default=5)
    args = parser.parse_args()
    reason = available()
    if reason is not None:
        raise SystemExit(f"cannot run containerd here: {reason}")
    runtime = start()
    inventories: list[float] = []
    reclaims: list[float] = []
    empties: list[float] = []
    removed: list[int] = []
    try:
        cri = runtime.runtime
        assert cri is not None
        runtime.build_and_import("nodeagent.test/app:1")
        for round_ in range(args.repeat):
            for n in range(args.images):
                runtime.build_and_import(f"nodeagent.test/unused-{round_}-{n}:1", padding=MiB)
            for p in range(args.pods):
                pod = (f"p{round_}-{p}", f"uid-{round_}-{p}")
                sandbox = runtime.run_sandbox(*pod)
                for attempt in range(3):
                    runtime.run_container(sandbox, pod, "app", "nodeagent.test/app:1", attempt)
            start_inventory = time.perf_counter()
            cri.list_sandboxes()
            cri.list_containers()
            cri.list_images()
            inventories.append(time.perf_counter() - start_inventory)
            reclaimer = NodeReclaimer(
                cri, clock=RealClock(), dry_run=False, pinned_images=PINNED, interval=0
            )
            start_reclaim = time.perf_counter()
            report = reclaimer.reclaim(
                (RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: None
            )
            reclaims.append(time.perf_counter() - start_reclaim)
            assert not report.errors, report.errors
            removed.append(len(report.containers) + len(report.images))
            start_empty = time.perf_counter()
            again = reclaimer.reclaim((RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: None)
            empties.append(time.perf_counter() - start_empty)
            assert not again.containers and not again.images
    finally:
        stop(runtime)
    inventory = statistics.median(inventories)
    reclaim = statistics.median(reclaims)
    objects = statistics.median(removed)
    print(
        f"containerd reclaim, {args.pods * 2} dead containers + {args.images} unused images "
        f"per run, {args.repeat} runs (medians)"
    )
    print(f"  inventory (3 list calls)   {inventory * 1e3:8.1f} ms   (baseline)")
    print(f"  reclaim (list + remove)    {reclaim * 1e3:8.1f} ms   x{reclaim / inventory:.0f}")
    print(f"  per object removed         {(reclaim - inventory) / objects * 1e3:8.1f} ms")
    empty = statistics.median(empties)
    print(f"  reclaim, nothing left      {empty * 1e3:8.1f} ms   x{empty / inventory:.1f}")


if __name__ == "__main__":
    main()
