"""End-to-end throughput and CPU per pod of ``nodeagent scheduler`` against the fake API
server, as kube-scheduler's scheduler_perf ``SchedulingBasic`` measures it: 5000 nodes and
10 000 pending pods created up front; the time from the scheduler's start to every pod
bound. kube-scheduler's CI floor for this shape (``misc/performance-config.yaml``) is 680
pods/s (Go, in-process API server and etcd); issue 20 asks 1,200 pods/s and at most
0.6 ms of CPU per bound pod.

    python -m benchmarks.bench_scheduler_live [--nodes 5000] [--pods 10000] [--repeat 3]
    python -m benchmarks.bench_scheduler_live --profile     # + where the CPU goes (py-spy)
    python -m benchmarks.bench_scheduler_live --never-fit 200 --churn 50   # Unschedulable

With ``--never-fit N`` (scheduler_perf's Unschedulable shape), N more pods ask 9 CPU,
more than any node has, and while the run goes on a churn of events that cannot help
them (``--churn`` a second of each: a cordoned node created and the one before last
deleted, a node's allocatable memory changed, a bound pod's status patched) is written
to the server; printed besides: the never-fit pods'
**wasted retries** (``unschedulable`` attempts beyond each pod's first) per pod.

Each repetition runs in a fresh interpreter. The fake API server (tests/fakeapi:
Python, ThreadingHTTPServer, JSON) runs in its own process, so it does not share the
scheduler's interpreter lock; the scheduler talks to it over loopback HTTP with the real
``kubernetes`` client, and sends its bindings and ``Scheduled`` events from its binding
process (:mod:`nodeagent.scheduler.live.bind_process`; ``--in-process-binding`` sends
them from the scheduler's own threads). The client has no rate limit, as in
scheduler_perf, so every pod's ``Scheduled`` event is written (the server's count is
printed). The three processes share the machine's cores. Printed per run:

* **ceiling**: pods per second the fake server takes the per-pod writes for (the
  binding POST and the ``Scheduled`` event, through the same client, the event as the
  binding process writes it), with as many pods in flight as the scheduler keeps and
  nothing else running;
* **end to end**: start -> all bound, pods/s, and the ratio to the ceiling;
* **CPU per bound pod**: user + system CPU of the scheduler process (all threads, from
  its start to the last bind and the reporter idle) and of the binding process (its
  whole life: start-up and the last events included), divided by the pods;
* the scheduling thread's split (algorithm = filter + score + select; assume = assume
  + reserve + permit + hand-off), informer sync, the binding cycle's mean latency, the
  kernel's share of each process's CPU, the peak RSS of both;
* with ``--profile``: the CPU of each process split by what it was doing
  (:mod:`benchmarks.cpu_breakdown`, py-spy samples; the run itself is slowed by the
  sampling, so its rate is not comparable).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import resource
import statistics
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

from benchmarks import cpu_breakdown
from nodeagent.kube import http, pipeline, retry, writes
from nodeagent.kube.events import NORMAL, InvolvedObject, UniqueEvents
from nodeagent.scheduler import registry
from nodeagent.scheduler.live import bind_child
from nodeagent.scheduler.live import settings as live_settings
from nodeagent.scheduler.live.scheduler import LiveScheduler
from tests.doubles import kube as fake
from tests.fakeapi import server
from tests.fakeapi.fixtures import configuration, write_kubeconfig

PROFILE = live_settings.DEFAULT_PROFILE
NEVER_FIT_CPU = "9"
"""More than any node's 4 CPU (scheduler_perf's pod-large-cpu)."""


class Churn:
    """Events that cannot help a pod no node fits, ``rate`` of each a second: a cordoned
    4-CPU node created (and the one created before the last deleted, as the real-apiserver
    benchmark's churn), a node's allocatable memory changed (32 GiB <-> 31 GiB) and a bound
    pod's status patched. The nodes are written over a plain connection of their own, so
    the churn's own client costs the scheduler process next to nothing."""

    def __init__(
        self,
        kube: http.HTTPKubeClient,
        url: str,
        nodes: int,
        rate: float,
        bound: Callable[[], int],
    ) -> None:
        self._kube, self._nodes, self._rate, self._bound = kube, nodes, rate, bound
        self._server = urllib.parse.urlsplit(url)
        self._stop = threading.Event()
        self.events = 0
        self._thread = threading.Thread(target=self._run, name="churn", daemon=True)
        self._thread.start()

    def _send(self, connection: HTTPConnection, method: str, path: str, body: Any) -> None:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload else {}
        connection.request(method, path, payload, headers)
        answer = connection.getresponse()
        answer.read()
        if answer.status >= 300:
            raise RuntimeError(f"churn: {method} {path} answered {answer.status}")

    def _run(self) -> None:
        rng = random.Random(3)
        connection = HTTPConnection(self._server.hostname or "", self._server.port)
        created: list[str] = []
        n = 0
        while not self._stop.wait(1 / self._rate):
            added = node(f"churn-{n:05d}", n % 3)
            added["spec"] = {"unschedulable": True}
            self._send(connection, "POST", "/api/v1/nodes", added)
            created.append(added["metadata"]["name"])
            self.events += 1
            if len(created) > 2:
                self._send(connection, "DELETE", f"/api/v1/nodes/{created.pop(0)}", None)
                self.events += 1
            memory = "31Gi" if n % 2 else "32Gi"
            self._kube.patch_node_status(
                f"node-{rng.randrange(self._nodes):05d}",
                {"status": {"allocatable": {"cpu": "4", "memory": memory, "pods": "110"}}},
            )
            self.events += 1
            bound = self._bound()
            if bound:
                self._kube.patch_pod_status(
                    "default",
                    f"pod-{rng.randrange(bound):05d}",
                    {"status": {"message": f"churn {n}"}},
                )
                self.events += 1
            n += 1
        for name in created:
            self._send(connection, "DELETE", f"/api/v1/nodes/{name}", None)
        connection.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def node(name: str, zone: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": f"zone-{zone}",
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pending_pod(name: str, scheduler: str = PROFILE) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "200Mi"}},
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def serve(
    conn: multiprocessing.connection.Connection, nodes: int, pods: int, never_fit: int = 0
) -> None:
    """The fake API server's process: fill the store, serve, report binds, stop."""
    cluster = fake.FakeCluster(history_limit=4 * (nodes + pods) + 100_000)
    for i in range(nodes):
        cluster.create("nodes", node(f"node-{i:05d}", i % 3))
    for i in range(never_fit):
        big = pending_pod(f"never-fit-{i:05d}")
        big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = NEVER_FIT_CPU
        cluster.create("pods", big)
    for i in range(pods):
        cluster.create("pods", pending_pod(f"pod-{i:05d}"))
    api = server.FakeAPIServer(cluster)
    api.start()
    serving = os.times()
    conn.send(api.port)
    conn.recv()  # stop
    scheduled = sum(e.get("reason") == "Scheduled" for e in cluster.list("events").items)
    done = os.times()
    cpu = (done.user - serving.user, done.system - serving.system)
    conn.send((len(cluster.bindings), scheduled, cpu))
    api.stop()


class ServerProcess:
    def __init__(self, nodes: int, pods: int, never_fit: int = 0) -> None:
        self._conn, child = multiprocessing.Pipe()
        self._process = multiprocessing.Process(
            target=serve, args=(child, nodes, pods, never_fit), daemon=True
        )
        self._process.start()
        self.pid = self._process.pid or 0
        self.url = f"http://127.0.0.1:{self._conn.recv()}"

    def stop(self) -> tuple[int, int, tuple[float, float]]:
        """Stop the server; the bindings it saw, the ``Scheduled`` events it stored and
        the CPU seconds (user, system) it used serving."""
        self._conn.send("stop")
        bindings, scheduled, cpu = self._conn.recv()
        self._process.join(10)
        return int(bindings), int(scheduled), (float(cpu[0]), float(cpu[1]))


def client(url: str, pool: int) -> http.HTTPKubeClient:
    return http.HTTPKubeClient.connect(
        configuration(url),
        qps=100_000,
        burst=100_000,
        retry_policy=retry.RetryPolicy(attempts=3),
        timeout=(5.0, 60.0),
        pool_size=pool,
    )


def bind_target(url: str, directory: Path) -> http.ConnectionSpec:
    """How the binding process reaches the fake server: no client-side rate limit."""
    return http.ConnectionSpec(
        write_kubeconfig(directory / "kubeconfig", url),
        qps=100_000,
        burst=100_000,
        retry_policy=retry.RetryPolicy(attempts=3),
        timeout=(5.0, 60.0),
    )


def bind_ceiling(pods: int, directory: Path) -> float:
    """Pods per second the fake server takes the scheduler's per-pod writes for (the
    binding POST and the ``Scheduled`` event), written as the binding process writes
    them (its pipelined posters, their limits, the event from its template), every pod
    at once, nothing else running: the server's pace, the end-to-end run's bound."""
    proc = ServerProcess(0, pods)
    kube = client(proc.url, 4)
    address, credentials = bind_target(proc.url, directory).resolve()
    events = UniqueEvents(reason="Scheduled", event_type=NORMAL, component=PROFILE, host="ceiling")
    node_name = "node-00000"
    failures: list[BaseException] = []

    async def write_all(targets: list[tuple[str, str]]) -> float:
        bindings = pipeline.Poster(address, credentials, limits=bind_child.BINDING_LIMITS)
        recorder = pipeline.Poster(address, credentials, limits=bind_child.EVENT_LIMITS)
        finished = asyncio.Event()
        left = 2 * len(targets)

        def done(error: BaseException | None) -> None:
            nonlocal left
            if error is not None:
                failures.append(error)
            left -= 1
            if left == 0:
                finished.set()

        def bound(name: str, uid: str, error: BaseException | None) -> None:
            done(error)
            body = events.body(
                InvolvedObject("Pod", name, "default", uid),
                f"Successfully assigned default/{name} to {node_name}",
            )
            recorder.post(
                "create",
                "events",
                what=name,
                path=writes.events_path("default"),
                body=body,
                done=done,
            )

        started = time.perf_counter()
        for name, uid in targets:
            bindings.post(
                "create",
                "pods/binding",
                what=name,
                path=writes.binding_path("default", name),
                body=writes.binding_body("default", name, uid=uid, node_name=node_name),
                done=functools.partial(bound, name, uid),
            )
        await finished.wait()
        elapsed = time.perf_counter() - started
        bindings.close()
        recorder.close()
        return elapsed

    try:
        listed = kube.list_pods()
        targets = [(p["metadata"]["name"], p["metadata"]["uid"]) for p in listed.items]
        elapsed = asyncio.run(write_all(targets))
    finally:
        kube.close()
        _, scheduled, _ = proc.stop()
    assert not failures, f"{len(failures)} writes failed, e.g. {failures[0]}"
    assert scheduled == len(targets), f"{scheduled} events stored for {len(targets)} pods"
    return len(targets) / elapsed


def _peak_rss_mib(pid: int) -> float:
    """A live process's peak resident set (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _process_cpu(pid: int) -> float:
    """A live process's CPU seconds so far (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    """CPU seconds of the child processes ended and waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _system_cpu(who: int) -> float:
    """Kernel CPU seconds of this process (``RUSAGE_SELF``) or its waited-for children."""
    return resource.getrusage(who).ru_stime


@dataclasses.dataclass(frozen=True)
class Unschedulable:
    """The Unschedulable shape's part: pods that fit no node, and the churn."""

    never_fit: int = 0
    churn: float = 0.0


def end_to_end(
    nodes: int,
    pods: int,
    *,
    workers: int,
    profile: bool,
    binding_process: bool,
    directory: Path,
    unschedulable: Unschedulable = Unschedulable(),
) -> dict[str, Any]:
    settings = live_settings.load(None, registry.in_tree_registry(), leader_elect=False)
    # as scheduler_perf does: no client-side rate limit (events have the same budget)
    settings = dataclasses.replace(settings, bind_workers=workers, qps=100_000, burst=100_000)
    proc = ServerProcess(nodes, pods, unschedulable.never_fit)
    kube = client(proc.url, workers + 8)
    target = bind_target(proc.url, directory) if binding_process else None
    churn: Churn | None = None
    scheduler = LiveScheduler(kube, settings, seed=1, bind_target=target)
    sampling = contextlib.ExitStack()
    raw = Path(os.environ.get("BENCH_PROFILE_RAW") or directory / "profile.raw")
    if profile:  # py-spy on this process and its children (server, binding process)
        sampling.enter_context(cpu_breakdown.Sampler(os.getpid(), raw))
        time.sleep(1.0)  # py-spy attaches
    started = time.perf_counter()
    cpu_started = time.process_time()
    children_started = _children_cpu()
    system_started = _system_cpu(resource.RUSAGE_SELF)
    children_system_started = _system_cpu(resource.RUSAGE_CHILDREN)
    try:
        assert scheduler.start(sync_timeout=300, freeze_heap=True)  # as the command
        synced = time.perf_counter() - started
        # the binding process has started and waits for its first binding: what it
        # used so far is its start-up (interpreter, imports, connecting)
        binder = scheduler.process_binder
        binder_pid = binder.pid if binder else None
        startup_cpu = _process_cpu(binder_pid) if binder_pid else 0.0
        if unschedulable.never_fit and unschedulable.churn:
            churn = Churn(kube, proc.url, nodes, unschedulable.churn, lambda: scheduler.bound_count)
        while scheduler.bound_count < pods:
            time.sleep(0.01)
            if time.perf_counter() - started > 600:
                raise RuntimeError(f"only {scheduler.bound_count} of {pods} bound in 600 s")
        elapsed = time.perf_counter() - started
        if churn is not None:
            churn.stop()
        while not scheduler.reporter.idle():  # the last pods' events are part of the cost
            time.sleep(0.01)
        cpu = time.process_time() - cpu_started
        system = _system_cpu(resource.RUSAGE_SELF) - system_started
        binding_process_rss = _peak_rss_mib(binder_pid) if binder_pid else 0.0
        binding = scheduler.metrics.binding_duration.labels("bound")
        times = dict(scheduler.times)
    finally:
        if churn is not None:
            churn.stop()
        scheduler.stop(bind_timeout=60)  # joins the binding process, its events written
        binding_process_cpu = _children_cpu() - children_started
        binding_process_system = _system_cpu(resource.RUSAGE_CHILDREN) - children_system_started
        kube.close()
        bindings, scheduled_events, (server_user, server_system) = proc.stop()
        sampling.close()
    result = {
        "seconds": elapsed,
        "pods_per_second": pods / elapsed,
        "sync_seconds": synced,
        "bindings_on_server": bindings,
        "scheduled_events": scheduled_events,
        "events_dropped": scheduler.metrics.events_dropped._value.get(),
        "algorithm_seconds": times["algorithm"],
        "assume_seconds": times["assume"],
        "cycles": int(times["cycles"]),
        "cpu_seconds": cpu,
        "system_seconds": system,
        "binding_process_system_seconds": binding_process_system,
        "binding_process_cpu_seconds": binding_process_cpu,
        "binding_process_rss_mib": binding_process_rss,
        "server_cpu_seconds": server_user + server_system,
        "binding_process_startup_seconds": startup_cpu,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "binding_mean_ms": 1000 * binding._sum.get() / max(1, pods),
    }
    if unschedulable.never_fit:
        attempts = scheduler.metrics.attempts.labels("unschedulable", PROFILE)._value.get()
        result["wasted_retries_per_pod"] = (
            attempts - unschedulable.never_fit
        ) / unschedulable.never_fit
        result["churn_events"] = churn.events if churn is not None else 0
        result["snapshot_rebuilds"] = scheduler.cache.stats().rebuilds
    if profile:
        processes = {"scheduler process": (os.getpid(), cpu - system, system)}
        if binder_pid:
            processes["binding process"] = (
                binder_pid,
                binding_process_cpu - binding_process_system,
                binding_process_system,
            )
        processes["fake API server"] = (proc.pid, server_user, server_system)
        samples = cpu_breakdown.parse(raw)
        result["profile"] = cpu_breakdown.breakdown(samples, processes, pods)
    return result


def _repetition(conn: multiprocessing.connection.Connection, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as directory:
        ceiling = bind_ceiling(min(args.pods, 5000), Path(directory))
        run = end_to_end(
            args.nodes,
            args.pods,
            workers=args.workers,
            profile=args.profile,
            binding_process=not args.in_process_binding,
            directory=Path(directory),
            unschedulable=Unschedulable(args.never_fit, args.churn),
        )
    conn.send((ceiling, run))


def _in_fresh_process(args: argparse.Namespace) -> tuple[float, dict[str, Any]]:
    """One repetition (ceiling, then end to end) in an interpreter of its own, so that
    no thread, heap or connection of an earlier run weighs on it."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_repetition, args=(theirs, args))
    process.start()
    theirs.close()
    try:
        ceiling, run = ours.recv()
    except EOFError:
        process.join()
        raise RuntimeError(f"the repetition failed (exit code {process.exitcode})") from None
    process.join()
    return float(ceiling), run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=16, help="binding workers")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--never-fit", type=int, default=0, help="pods no node fits")
    parser.add_argument("--churn", type=float, default=50.0, help="churn events/s of each kind")
    parser.add_argument(
        "--in-process-binding",
        action="store_true",
        help="bind from the scheduler's own threads (no binding process)",
    )
    args = parser.parse_args()
    ceilings, runs = [], []
    pods = args.pods
    for _ in range(args.repeat):
        ceiling, run = _in_fresh_process(args)
        ceilings.append(ceiling)
        runs.append(run)
        run["cpu_per_pod_ms"] = (
            1000 * (run["cpu_seconds"] + run["binding_process_cpu_seconds"]) / pods
        )
        print(
            f"run: {run['pods_per_second']:.0f} pods/s end to end ({run['seconds']:.1f} s for"
            f" {pods} pods on {args.nodes} nodes; informers synced in"
            f" {run['sync_seconds']:.1f} s); fake server ceiling {ceiling:.0f} pods/s;"
            f" CPU per pod {run['cpu_per_pod_ms']:.2f} ms (scheduler process"
            f" {1000 * run['cpu_seconds'] / pods:.2f} + binding process"
            f" {1000 * run['binding_process_cpu_seconds'] / pods:.2f}); server saw"
            f" {run['bindings_on_server']} bindings and stored {run['scheduled_events']}"
            f" Scheduled events ({run['events_dropped']:.0f} dropped)"
        )
    rate = statistics.median(r["pods_per_second"] for r in runs)
    ceiling = statistics.median(ceilings)
    cpu_per_pod = statistics.median(r["cpu_per_pod_ms"] for r in runs)
    best = runs[[r["pods_per_second"] for r in runs].index(rate)] if len(runs) % 2 else runs[0]
    print(
        f"median end to end: {rate:.0f} pods/s (issue 20's target 1,200: {rate / 1200:.2f}x;"
        f" kube-scheduler's CI floor 680: {rate / 680:.2f}x)"
    )
    print(
        f"median fake-server ceiling (binding + Scheduled event per pod): {ceiling:.0f}"
        f" pods/s; end to end / ceiling: {rate / ceiling:.2f}"
    )
    print(
        f"median CPU per bound pod, scheduler + binding process, start to last bind:"
        f" {cpu_per_pod:.2f} ms (target 0.6)"
    )
    print(
        f"scheduling thread: algorithm {best['algorithm_seconds']:.2f} s"
        f" ({1e6 * best['algorithm_seconds'] / max(1, best['cycles']):.0f} us/pod),"
        f" assume+reserve+hand-off {best['assume_seconds']:.2f} s;"
        f" informer sync {best['sync_seconds']:.2f} s; binding cycle mean"
        f" {best['binding_mean_ms']:.1f} ms"
    )
    print(
        f"scheduler process: {best['cpu_seconds']:.1f} s CPU for {pods} pods"
        f" ({1000 * best['cpu_seconds'] / pods:.2f} ms/pod, all threads; kernel"
        f" {best['system_seconds']:.1f} s); peak RSS {best['max_rss_mib']:.0f} MiB"
    )
    binding = (
        f"binding process: {best['binding_process_cpu_seconds']:.1f} s CPU (start-up, its"
        f" CPU when the informers had synced, {best['binding_process_startup_seconds']:.2f} s"
        f" included; kernel"
        f" {best['binding_process_system_seconds']:.1f} s), peak RSS"
        f" {best['binding_process_rss_mib']:.0f} MiB; "
        if best["binding_process_rss_mib"]
        else ""
    )
    print(
        f"{binding}fake API server: {best['server_cpu_seconds']:.1f} s CPU; wall"
        f" {best['seconds']:.1f} s on {os.cpu_count()} cores"
    )
    if "wasted_retries_per_pod" in best:
        wasted = statistics.median(r["wasted_retries_per_pod"] for r in runs)
        print(
            f"never-fit pods: {args.never_fit}, wasted retries per pod {wasted:.2f} (median;"
            f" {best['churn_events']} churn events in the run shown; the scheduler cache built"
            f" its snapshot from every node and pod {best['snapshot_rebuilds']} times)"
        )
    if "profile" in best:
        print(best["profile"])


if __name__ == "__main__":
    main()
