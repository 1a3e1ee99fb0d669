"""What the running agent costs its node: CPU and RSS of ``nodeagent run``.

    sudo python -m benchmarks.bench_agent_footprint                # 60 s per mode
    sudo python -m benchmarks.bench_agent_footprint --duration 30 --modes cluster

The DaemonSet's resource requests and limits come from these figures. The agent runs as
in production, default intervals (1 s node poll, 500 ms filesystem poll, kernel
triggers), on a node-sized workload: 110 pods with real (empty) memory cgroups under a
node cgroup of our own and their log and emptyDir directories (the workload of
``benchmarks.bench_observability``), while this process scrapes ``/metrics`` every
second and samples the agent's CPU time and RSS from /proc every second.

- ``cluster``: against the fake API server (in this process, on loopback) holding its
  Node and the 110 pods: list + watch, node status and annotation, events;
- ``standalone``: no cluster; pods found from the cgroups.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from benchmarks.bench_detection import AgentProcess
from benchmarks.bench_observability import _sample, fake_node
from tests.doubles import kube as fake
from tests.e2e import harness
from tests.fakeapi import objects, server

NODE = "bench-node"
MIB = 1024 * 1024


@contextlib.contextmanager
def cluster_args(pods: int) -> Iterator[list[str]]:
    cluster = fake.FakeCluster()
    cluster.create("nodes", objects.node(NODE))
    for index in range(pods):
        cluster.create("pods", objects.pod(f"pod-{index}", node_name=NODE))
    with server.running(cluster) as api, tempfile.TemporaryDirectory() as scratch:
        kubeconfig = harness.write_kubeconfig(Path(scratch) / "kubeconfig", api.url)
        # Plain HTTP scrapes, as measured before metricsAuth existed: what serving
        # securely adds per scrape is benchmarks/bench_serving.py's figure.
        yield [f"--kubeconfig={kubeconfig}", f"--node-name={NODE}", "--metrics-auth=none"]


def measure(
    mode: str, args: list[str], environ: Mapping[str, str], duration: float, scrape: float
) -> None:
    agent = AgentProcess([*args, "--metrics-address=127.0.0.1:0"], env=environ)
    try:
        started = agent.wait(lambda r: r.get("message") == "nodeagent running", timeout=30)
        url = started["metrics"] + "/metrics"
        pid = agent.process.pid
        cpu_start, _, _ = _sample(pid)
        start = last_time = next_scrape = time.monotonic()
        last_cpu, peak = cpu_start, 0
        per_second: list[float] = []
        rss: list[int] = []
        while time.monotonic() - start < duration:
            if time.monotonic() >= next_scrape:
                with urllib.request.urlopen(url, timeout=5) as response:
                    response.read()
                next_scrape += scrape
            time.sleep(1.0)
            cpu, resident, peak = _sample(pid)
            now = time.monotonic()
            per_second.append((cpu - last_cpu) / (now - last_time))
            rss.append(resident)
            last_cpu, last_time = cpu, now
        elapsed = last_time - start
    finally:
        agent.stop()
    steady = rss[len(rss) // 2 :]
    print(f"== {mode}: {elapsed:.0f} s after start-up, scraped every {scrape:g} s")
    print(f"CPU average:          {1000 * (last_cpu - cpu_start) / elapsed:.1f} millicores")
    print(f"CPU p99 of 1 s steps: {1000 * statistics.quantiles(per_second, n=100)[98]:.1f} mc")
    print(f"RSS steady (median):  {statistics.median(steady) / MIB:.1f} MiB")
    print(f"RSS growth 2nd half:  {(steady[-1] - steady[0]) / MIB:+.2f} MiB")
    print(f"RSS peak (VmHWM):     {peak / MIB:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench_agent_footprint")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--scrape-interval", type=float, default=1.0)
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--modes", default="cluster,standalone")
    args = parser.parse_args()
    with fake_node(args.pods) as node:
        environ = {**os.environ, **node}
        for mode in args.modes.split(","):
            if mode == "cluster":
                with cluster_args(args.pods) as extra:
                    measure(mode, extra, environ, args.duration, args.scrape_interval)
            else:
                measure(mode, ["--standalone"], environ, args.duration, args.scrape_interval)
    print(f"workload: {args.pods} pods (cgroups, logs, emptyDirs) on this machine")


if __name__ == "__main__":
    main()
