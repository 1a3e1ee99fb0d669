"""Figures for the Kubernetes side: API requests per hour at rest, actuation latency, and the
cost of reading pods.

    python -m benchmarks.bench_kube

Everything runs against the fake API server (tests/fakeapi) over loopback HTTP with the
real ``kubernetes`` client, so latencies include the client's request building, JSON and
the socket round trip, but not a real API server's admission and etcd write.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from nodeagent.actuators import events, evictor, node_status, safety
from nodeagent.agent import podinfo as pods
from nodeagent.base.clock import FakeClock, RealClock
from nodeagent.kube import http, retry
from nodeagent.model import Signal
from tests.actuators.builders import (
    DISK_CONDITION,
    DISK_TAINT,
    MEMORY_CONDITION,
    MEMORY_TAINT,
    decision,
    pod_info,
)
from tests.fakeapi import objects, server
from tests.fakeapi.fixtures import configuration

HEADROOM = {
    Signal.MEMORY_AVAILABLE: node_status.SignalHeadroom(600 << 20, 1 << 30, 100 << 20),
}


def client(api: server.FakeAPIServer, clock: FakeClock | RealClock) -> http.HTTPKubeClient:
    return http.HTTPKubeClient.connect(
        configuration(api.url), qps=1000, burst=1000, retry_policy=retry.NO_RETRY, clock=clock
    )


def requests_per_hour_at_rest(heartbeat: float, annotation_refresh: float) -> dict[str, int]:
    """One simulated hour (FakeClock) of a 10 s loop with nothing changing."""
    with server.running() as api:
        api.cluster.create("nodes", objects.node("node-a"))
        clock = FakeClock(wall_offset=1_800_000_000.0)
        kube = client(api, clock)
        actuator = node_status.NodeStatusActuator(
            kube,
            "node-a",
            clock=clock,
            condition_types=(MEMORY_CONDITION, DISK_CONDITION),
            taint_keys=(MEMORY_TAINT, DISK_TAINT),
            heartbeat_period=heartbeat,
            annotation_refresh_period=annotation_refresh,
        )
        recorder = events.AgentEventRecorder(kube, node_name="node-a", clock=clock)
        ev = evictor.Evictor(kube, clock=clock, recorder=recorder, policy=safety.SafetyPolicy())
        actuator.apply(decision(), HEADROOM)  # start-up: adopt + first write
        start = len(api.requests)
        for _ in range(360):
            clock.advance(10)
            actuator.apply(decision(), HEADROOM)
            ev.apply(decision())
            recorder.flush()
        during = api.requests[start:]
        kube.close()
        return {
            "total": len(during),
            "status": sum(r.path.endswith("/status") for r in during),
            "node": sum(r.path == "/api/v1/nodes/node-a" for r in during),
            "other": sum(not r.path.startswith("/api/v1/nodes/") for r in during),
        }


def latency(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"


def decision_to_eviction_request(runs: int = 200) -> tuple[list[float], list[float]]:
    """From ``Evictor.apply`` being called to the Eviction arriving at the server, and to
    apply returning (answer received, event recorded)."""
    to_request, to_done = [], []
    with server.running() as api:
        clock = RealClock()
        kube = client(api, clock)
        recorder = events.AgentEventRecorder(kube, node_name="node-a", clock=clock)
        ev = evictor.Evictor(
            kube, clock=clock, recorder=recorder, policy=safety.SafetyPolicy(), max_evictions=10**6
        )
        arrived: list[float] = []
        original: Callable[[server.Request], None] = api.log

        def log(request: server.Request) -> None:
            if request.path.endswith("/eviction"):
                arrived.append(time.perf_counter())
            original(request)

        api.log = log  # type: ignore[method-assign]
        for i in range(runs):
            name = f"p{i}"
            api.cluster.create("pods", objects.pod(name, uid=f"uid-{name}"))
            started = time.perf_counter()
            ev.apply(decision(evict=(pod_info(name),)))
            done = time.perf_counter()
            to_request.append(arrived[-1] - started)
            to_done.append(done - started)
        kube.close()
    return to_request, to_done


def condition_change_to_patch(runs: int = 200) -> list[float]:
    samples = []
    with server.running() as api:
        api.cluster.create("nodes", objects.node("node-a"))
        clock = RealClock()
        kube = client(api, clock)
        actuator = node_status.NodeStatusActuator(
            kube,
            "node-a",
            clock=clock,
            condition_types=(MEMORY_CONDITION, DISK_CONDITION),
            taint_keys=(MEMORY_TAINT, DISK_TAINT),
        )
        actuator.adopt()
        for i in range(runs):
            started = time.perf_counter()
            actuator.apply(decision(memory=i % 2 == 0))
            samples.append(time.perf_counter() - started)
        kube.close()
    return samples


def pod_reading(count: int) -> tuple[float, float]:
    """(list over HTTP + parse, conversion to PodInfo) seconds for ``count`` pods."""
    with server.running() as api:
        for i in range(count):
            api.cluster.create(
                "pods",
                objects.pod(
                    f"p{i}", requests={"memory": "100Mi", "cpu": "100m"}, limits={"memory": "200Mi"}
                ),
            )
        kube = client(api, RealClock())
        kube.list_pods(field_selector="spec.nodeName=node-a")  # warm the connection
        started = time.perf_counter()
        listed = kube.list_pods(field_selector="spec.nodeName=node-a")
        listing = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(10):
            for item in listed.items:
                pods.pod_info(item)
        converting = (time.perf_counter() - started) / 10
        kube.close()
    return listing, converting


def main() -> None:
    print("API requests per hour at rest (10 s loop, 1 h simulated, nothing changing)")
    for heartbeat, refresh in ((300.0, 300.0), (300.0, 900.0), (600.0, 600.0)):
        counts = requests_per_hour_at_rest(heartbeat, refresh)
        print(
            f"  heartbeat {heartbeat:>4.0f}s, annotation refresh {refresh:>4.0f}s: "
            f"{counts['total']:>3} requests/h "
            f"(status {counts['status']}, node {counts['node']}, other {counts['other']})"
        )
    print("  + pod watch renewals: 3600 / (podWatchTimeout x U[1,2]) = 1.3/h at the 1800 s default")
    to_request, to_done = decision_to_eviction_request()
    print("Decision -> Eviction request at the server (200 runs):", latency(to_request))
    print("Decision -> apply returned (answer + Evicted event):  ", latency(to_done))
    print(
        "Condition flip -> status and taint patches applied:    ",
        latency(condition_change_to_patch()),
    )
    for count in (110, 1000):
        listing, converting = pod_reading(count)
        print(
            f"Pods x{count}: list over HTTP + JSON {listing * 1000:.1f} ms, "
            f"PodInfo conversion {converting * 1000:.2f} ms "
            f"({converting / count * 1e6:.1f} us/pod)"
        )


if __name__ == "__main__":
    main()
