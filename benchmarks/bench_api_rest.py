"""API requests per node per hour when nothing happens: the agent's cost to the API server.

    python -m benchmarks.bench_api_rest                    # 2 virtual hours, defaults
    python -m benchmarks.bench_api_rest --hours 3 --set conditionHeartbeatPeriod=10m

The whole agent as ``nodeagent run`` builds it (real collector reading this machine,
engine, actuators, the real ``kubernetes`` client over HTTP to the fake API server) is
driven cycle by cycle in virtual time: a :class:`~nodeagent.base.clock.FakeClock` advanced by
each poll's wait, so hours pass in seconds while every request is a real HTTP exchange
logged by the server. The first hour includes start-up (reading the Node, listing and
watching pods, the first publication); the figures are the requests of the following
hours, by verb and resource. The pod watch is renewed in real time by the pod cache
(every ``podWatchTimeout`` x U[1, 2], 1800-3600 s), so its ~1.3 renewals per hour are
added from that rule rather than observed.
"""

from __future__ import annotations

import argparse
import collections
import re
import tempfile
import time
from pathlib import Path

from nodeagent.agent.config import camel_to_snake, load_config
from nodeagent.agent.runtime import Agent
from nodeagent.base.clock import FakeClock
from nodeagent.kube import http, retry
from tests.doubles import kube as fake
from tests.doubles.triggers import FakeTriggers
from tests.e2e import harness
from tests.fakeapi import objects, server

NODE = "bench-node"
WATCH_RENEWALS_PER_HOUR = 3600 / (1800 * 1.5)
"""Expected renewals of a watch lasting podWatchTimeout x U[1, 2] with the default 1800 s."""


def describe(request: server.Request) -> str:
    path = re.sub(r"/namespaces/[^/]+", "/namespaces/NS", request.path)
    path = re.sub(r"/events/[^/]+$", "/events/NAME", path)
    path = re.sub(rf"/nodes/{NODE}", "/nodes/NODE", path)
    watch = " (watch)" if request.param("watch") == "true" else ""
    return f"{request.method} {path}{watch}"


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench_api_rest")
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="a config field"
    )
    args = parser.parse_args()
    overrides = {camel_to_snake(k): v for k, v in (item.split("=", 1) for item in args.set)}

    cluster = fake.FakeCluster()
    cluster.create("nodes", objects.node(NODE))
    for index in range(20):
        cluster.create("pods", objects.pod(f"pod-{index}", node_name=NODE))
    clock = FakeClock(start=1000.0, wall_offset=time.time() - 1000.0)
    with server.running(cluster) as api, tempfile.TemporaryDirectory() as scratch:
        kubeconfig = harness.write_kubeconfig(Path(scratch) / "kubeconfig", api.url)
        config = load_config(
            overrides={
                "node_name": NODE,
                "kubeconfig": str(kubeconfig),
                "nodefs_path": "/",
                "imagefs_path": "/",
                "pod_storage_scan_interval": 0,
                **overrides,
            },
            environ={},
        )
        kube = http.HTTPKubeClient.connect(
            http.load_configuration(kubeconfig),
            qps=config.kube_api_qps,
            burst=config.kube_api_burst,
            retry_policy=retry.RetryPolicy(attempts=config.kube_api_retries),
            clock=clock,
        )
        agent = Agent.build(
            config, clock=clock, kube=kube, triggers=FakeTriggers(clock), serve_metrics=False
        )
        assert agent.pod_cache is not None
        agent.pod_cache.start()
        agent.pod_cache.wait_synced(5)
        started = time.perf_counter()
        boundaries = [clock.now() + 3600 * (hour + 1) for hour in range(int(args.hours))]
        per_hour: list[collections.Counter[str]] = []
        seen = 0
        for boundary in boundaries:
            while clock.now() < boundary:
                agent.loop.tick()
                agent.actuation.apply_pending()
            time.sleep(0.05)  # let the last answers be logged
            requests = api.requests[seen:]
            seen += len(requests)
            per_hour.append(collections.Counter(describe(r) for r in requests))
        elapsed = time.perf_counter() - started
        agent.pod_cache.stop()
        cycles = agent.loop.cycles
        agent.close()

    print(f"{cycles} cycles over {len(per_hour)} virtual hours in {elapsed:.1f} s of real time")
    print()
    for hour, counts in enumerate(per_hour, start=1):
        label = "hour 1 (start-up included)" if hour == 1 else f"hour {hour}"
        print(f"{label}: {sum(counts.values())} requests")
        for what, count in sorted(counts.items()):
            print(f"  {count:>5}  {what}")
    steady = per_hour[1:] or per_hour
    average = sum(sum(c.values()) for c in steady) / len(steady)
    print()
    print(
        f"at rest: {average:.0f} requests per node per hour, plus about "
        f"{WATCH_RENEWALS_PER_HOUR:.1f} pod watch renewals"
    )


if __name__ == "__main__":
    main()
