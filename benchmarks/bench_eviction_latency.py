"""From a threshold crossing to the Eviction request at the API server, end to end.

    sudo python -m benchmarks.bench_eviction_latency            # memory and tmpfs, 20 runs
    sudo python -m benchmarks.bench_eviction_latency --runs 30 --modes memory

Issue 3's measurement (root needed). A ``nodeagent run`` process talks to the fake API
server (in this process, on loopback) through the real ``kubernetes`` client, exactly as
in a cluster: its Node, one pod bound to it per run, list + watch, conditions, taints,
events and the Eviction. The pressure is real:

- ``memory``: the agent's node cgroup is a real 512 MiB cgroup v1 memcg with
  ``memory.available<64Mi``; a child allocates past it (as in ``bench_detection``);
- ``tmpfs``: nodefs is a real 64 MiB tmpfs with ``nodefs.available<16Mi``; a child
  writes past it.

Each child records the CLOCK_MONOTONIC instant it crossed the threshold; the server
stamps the instant the ``POST .../pods/<pod>/eviction`` arrives. The latency between
them covers detection, the decision, the hand-over to the actuation thread, safety
checks and the requests the worker sends first (the condition, the taint, the
``EvictionThresholdMet`` event), then the Eviction. The default configuration is used
(kernel notifications on, 1 s node poll, 500 ms filesystem poll), except for the cap
on evictions per interval, lifted because the runs follow each other within seconds.
Prints p50/p99/max per mode.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import bench_detection
from benchmarks.bench_detection import Mi, Result
from tests.doubles import kube as fake
from tests.e2e import harness
from tests.fakeapi import objects, server
from tests.triggers import loadgen

NODE = "bench-node"


class StampingServer(server.FakeAPIServer):
    """The fake API server, noting when each Eviction request arrives."""

    def __init__(self, cluster: fake.FakeCluster) -> None:
        super().__init__(cluster)
        self.eviction_arrivals: dict[str, float] = {}

    def log(self, request: server.Request) -> None:
        if request.method == "POST" and request.path.endswith("/eviction"):
            self.eviction_arrivals[request.path.split("/")[-2]] = time.monotonic()
        super().log(request)

    def arrived(self, pod: str) -> bool:
        return pod in self.eviction_arrivals


@contextlib.contextmanager
def api_server() -> Iterator[StampingServer]:
    cluster = fake.FakeCluster()
    cluster.create("nodes", objects.node(NODE))
    api = StampingServer(cluster)
    api.start()
    try:
        yield api
    finally:
        api.close()


def latencies(mode: str, runs: int) -> Result:
    measured = []
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nodeagent-")))
        api = stack.enter_context(api_server())
        kubeconfig = harness.write_kubeconfig(scratch / "kubeconfig", api.url)
        args = [
            f"--kubeconfig={kubeconfig}",
            f"--node-name={NODE}",
            "--metrics-address=127.0.0.1:0",
            # runs follow each other within seconds: the safety cap (5 per 10 s) would
            # hold back every sixth eviction and measure the cap, not the agent
            "--max-evictions-per-interval=1000",
        ]
        if mode == "memory":
            cgroup = stack.enter_context(
                loadgen.temporary_cgroup(loadgen.MEMCG_ROOT, limit_bytes=bench_detection.NODE_LIMIT)
            )
            threshold = bench_detection.MEMORY_THRESHOLD
            args += [
                f"--node-cgroup=/{cgroup.name}",
                f"--eviction-hard=memory.available<{threshold // Mi}Mi",
                f"--nodefs-path={scratch}",
                f"--imagefs-path={scratch}",
            ]
        else:
            mount = scratch / "nodefs"
            mount.mkdir()
            stack.enter_context(harness.mounted_tmpfs(mount, bench_detection.TMPFS_SIZE // Mi))
            threshold = bench_detection.NODEFS_THRESHOLD
            args += [
                f"--nodefs-path={mount}",
                f"--imagefs-path={mount}",
                f"--eviction-hard=nodefs.available<{threshold // Mi}Mi",
            ]
        agent = stack.enter_context(bench_detection.running_agent(args))
        for run in range(runs):
            name = f"victim-{run}"
            api.cluster.create("pods", objects.pod(name, node_name=NODE))
            time.sleep(0.3)  # the agent's pod watch delivers the pod
            agent.drain()
            delay = random.uniform(0, 1.0)
            if mode == "memory":
                child = loadgen.start_allocator(
                    cgroup, bench_detection.NODE_LIMIT - threshold + 1, delay=delay
                )
            else:
                child = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.bench_detection",
                        "fill",
                        f"--path={mount}",
                        f"--threshold={threshold}",
                        f"--delay={delay}",
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            try:
                crossed = loadgen.read_report(child)["crossed_at"]
                harness.wait_for(
                    "the Eviction request", functools.partial(api.arrived, name), timeout=30
                )
            finally:
                loadgen.stop(child)
                if mode != "memory":
                    (mount / "fill").unlink(missing_ok=True)
            measured.append(api.eviction_arrivals[name] - crossed)
            agent.wait(bench_detection.relieved, timeout=30)
    return Result(mode, measured)


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench_eviction_latency")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--modes", default="memory,tmpfs")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: it creates a memory cgroup and mounts a tmpfs")
    results = [latencies(mode, args.runs) for mode in args.modes.split(",")]
    bench_detection.report(results)


if __name__ == "__main__":
    main()
