"""Latency and CPU of ``nodeagent extender``'s verbs over real HTTP, called the way
kube-scheduler calls them.

    python -m benchmarks.bench_extender [--sporadic-seconds 150] [--calls 200]
        [--nodes 5000] [--full-nodes 500] [--tls-calls 100] [--updates-per-second 20]
        [--client go|python]

kube-scheduler calls an extender once per pod being scheduled (``/filter``, then
``/prioritize``, one after the other), through its ``HTTPExtender``: the arguments
marshalled to JSON, Go's ``http.Transport`` (one connection kept alive between calls and
closed after 90 s idle, over HTTPS in the documented deployment), the answer decoded.
The client here is that code (``--client go``, the default): kube-scheduler's own
extender client at the release tests/controlplane/go.mod pins, in a Go process of its
own that idles between pods as kube-scheduler's does, built on first use
(:mod:`benchmarks.extender_clients`). Without a Go toolchain, or with ``--client
python``, Python's ``http.client`` and ``ssl`` behave as Go's transport does; that
client sends a body encoded once and never decodes the answer, so it spends less CPU per
call than kube-scheduler's (0.2-0.7 ms against 2-4 ms). Either way each 5000-name call
sends all 5000 names (kube-scheduler sends the nodes its filters passed, by default at
most 10% of 5000: ``percentageOfNodesToScore``).
Patterns:

* **sporadic**: pods arrive one per 1-15 s (uniformly random, seeded), over
  ``--sporadic-seconds``, with at least three gaps of 12 s or more (longer than any cache
  lifetime the extender had) and ``--idle-gaps`` pauses of 95 s, after which the call
  opens a new connection (TLS handshake included), as Go's does; over HTTPS unless
  ``--no-sporadic-tls``. Each pod is a /filter and a /prioritize with 5000 node names.
  ``after >= 12 s`` is the first call after each long gap on a kept connection.
* **back to back**: ``--calls`` calls per case, no pause, plain HTTP: 5000 names
  (``nodeCacheCapable: true``) and 500 whole Node objects (about 9 KB each), *warm*
  (the view has the same resourceVersions) and *cold* (unknown versions: /prioritize
  parses every node from the request); ``base`` is a route on the same server that reads
  the same body and answers ``{}`` (HTTP and body transfer alone).
* **TLS**: /filter with 5000 names over HTTPS, a fresh connection (and handshake) per
  call against calls on one kept-alive connection, interleaved call by call
  (kube-scheduler's client: the same transport, its idle connection closed after every
  call).

Throughout, a stand-in for the node watch updates ``--updates-per-second`` nodes (a new
resourceVersion and a freshly published pressure annotation; the agent republishes every
5 minutes, 17 nodes/s at 5000) and keeps the delivered objects as the informer's store
does, so the server does its per-node work, and its garbage collector walks what a real
one would, while it serves. The garbage collector's pauses are printed per pattern.

Columns: ``new``, how many of the calls opened a connection (kube-scheduler's client:
httptrace's ``GotConn``); ``cpu``, the CPU time of the serving thread in the handler
(body read, decode, verdicts, encode; ``time.thread_time``); ``srv``, all the CPU time
the connection's thread spent for the call (with a new connection: the thread's start
and the server's side of the TLS handshake; HTTP parsing; the answer); ``run p99``, the
wall time less the longer of the client's and the server's waits for a core during the
call (schedstat; the two may wait at the same time, so their sum would count some of it
twice; kube-scheduler's client counts the longest wait of any one of its threads, since
its goroutines hop between them and some wait off the call's path). That is an upper
bound of the wall time on a machine with a core to spare (waits for the GIL behind
another thread that waits for a core stay in it): on a busy 2-core machine the wall
time is mostly waiting. ``cli``: the client's CPU
time per call: kube-scheduler's client process's (``getrusage``; the JSON both ways,
the transport, with a new connection the client's side of the handshake, its garbage
collector; the process does nothing else), or the Python client thread's. ``gc max``:
the most CPU time the server's garbage collector took inside one call's handler
(collections run in whichever thread allocates when a threshold is crossed). Under each
pattern, the call whose handler took the most CPU, with what was in it (the collector's
share, the serving thread's page faults and preemptions), so that an outlier names its
cause.

Targets (issue 20): p99 under 10 ms for every call at 5000 names, the first after an idle
gap included; handler CPU at most 3 ms per 5000-name call.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import multiprocessing
import random
import resource
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from benchmarks.extender_clients import (
    BASELINE,
    GO_IDLE_CONN_TIMEOUT_S,
    PYTHON_CLIENTS,
    Call,
    ClientKind,
    Clients,
    Payload,
    run_queue_wait,
)
from nodeagent.extender import server
from nodeagent.extender.nodeview import NodeView
from nodeagent.k8s.pressure import PRESSURE_ANNOTATION
from nodeagent.kube.client import api_time
from nodeagent.scheduler.plugins import node_pressure
from nodeagent.serving.endpoints import ObservabilityServer, StartResponse, WSGIApp
from nodeagent.serving.server import Protection
from nodeagent.serving.settings import ListenAddress, MetricsAuth, resolve
from nodeagent.serving.tls import ServingCertificate

GiB = 2**30


def node(i: int, now: float, version: str) -> dict[str, Any]:
    """A Node as a real cluster lists it (managedFields aside)."""
    name = node_name(i)
    pressure = {
        "time": api_time(now),
        "signals": {
            "memory.available": {
                "available": (4 + i % 20) * GiB,
                "capacity": 32 * GiB,
                "threshold": GiB // 10,
            },
            "nodefs.available": {
                "available": 60 * GiB,
                "capacity": 100 * GiB,
                "threshold": 10 * GiB,
            },
        },
    }
    taints = (
        [{"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}] if i % 10 == 0 else []
    )
    conditions = [
        {
            "type": kind,
            "status": "False",
            "lastHeartbeatTime": api_time(now),
            "lastTransitionTime": api_time(now - 86400),
            "reason": f"KubeletHasSufficient{kind}",
            "message": "kubelet has sufficient resources available",
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "NodeAgentMemoryPressure")
    ]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"6f1c2a3b-0000-4000-8000-{i:012d}",
            "resourceVersion": version,
            "creationTimestamp": api_time(now - 86400 * 30),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": f"eu-west-1{'abc'[i % 3]}",
                "node-role.kubernetes.io/worker": "",
                "pool": "general",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                PRESSURE_ANNOTATION: json.dumps(pressure),
            },
        },
        "spec": {
            "podCIDR": f"10.{i // 256}.{i % 256}.0/24",
            "providerID": f"aws:///eu-west-1a/i-{i:017x}",
            "taints": taints,
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "3920m", "memory": "31Gi", "pods": "110"},
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kernelVersion": "6.1.0-18-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.13",
                "kubeletVersion": "v1.30.1",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {
                    "names": [
                        f"registry.example.com/team{j}/app@sha256:{j * 7919:064x}",
                        f"registry.example.com/team{j}/app:v1.{j}.0",
                    ],
                    "sizeBytes": 100_000_000 + j,
                }
                for j in range(30)
            ],
        },
    }


def pod() -> dict[str, Any]:
    """A Deployment's pod as kube-scheduler holds it when it calls the extender: as the
    API server stored it after admission (defaults, the service account's token volume,
    the default not-ready/unreachable tolerations), pending, unscheduled."""
    token = "kube-api-access-7xk2p"
    tolerations = [
        {
            "key": f"node.kubernetes.io/{taint}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
        for taint in ("not-ready", "unreachable")
    ]
    return {
        "metadata": {
            "name": "web-7d4b9c6f8d-x2k9p",
            "generateName": "web-7d4b9c6f8d-",
            "namespace": "default",
            "uid": "3f6c1e2a-9b7d-4c1e-8a2f-5d6e7f809a1b",
            "resourceVersion": "1234567",
            "creationTimestamp": "2026-11-27T04:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c6f8d"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d4b9c6f8d",
                    "uid": "0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "volumes": [
                {
                    "name": token,
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                        }
                                    ]
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/team1/web:v1.4.2",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "LOG_LEVEL", "value": "info"}],
                    "resources": {
                        "limits": {"memory": "512Mi"},
                        "requests": {"cpu": "1", "memory": "512Mi"},
                    },
                    "volumeMounts": [
                        {
                            "name": token,
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                        "timeoutSeconds": 1,
                        "periodSeconds": 10,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": tolerations,
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


POD = pod()


def _echo(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
    return [b"{}"]


@dataclass(frozen=True)
class Handled:
    """What the server spent on one call, measured in the connection's thread:
    ``handler``, the CPU time in the extender's WSGI app (body read, decode, verdicts,
    encode); ``call``, all the CPU time the thread spent since its previous answer (on
    a new connection: the thread start and the TLS handshake; then reading and parsing
    the request, the handler, writing the previous answer); ``waited``, the thread's
    wait for a core over the same span. What is inside ``handler``, to tell an outlier's
    cause: ``collector``, the CPU the garbage collector took in this thread during the
    handler; ``faults``, the thread's minor page faults; ``switches``, how often it was
    preempted (involuntary context switches)."""

    handler: float
    call: float
    waited: float
    collector: float
    faults: int
    switches: int

    def why(self) -> str:
        return (
            f"{self.handler * 1e3:.2f} ms: collector {self.collector * 1e3:.2f} ms,"
            f" {self.faults} page faults, preempted {self.switches}x"
        )


@dataclass
class ServerCPU:
    """Per call (in the order of the answers), what the server's connection threads
    spent on it (:class:`Handled`). Install :meth:`collecting` in ``gc.callbacks`` for
    the collector's share."""

    calls: list[Handled] = field(default_factory=list)
    _marks: threading.local = field(default_factory=threading.local)

    def collecting(self, phase: str, info: dict[str, int]) -> None:
        """A ``gc.callbacks`` entry: the collector's CPU time, per thread."""
        marks, now = self._marks, time.thread_time()
        if phase == "start":
            marks.collection_started = now
        else:
            marks.collector = getattr(marks, "collector", 0.0) + now - marks.collection_started

    def timed(self, app: WSGIApp) -> WSGIApp:
        marks = self._marks

        def timed(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            collector, usage = getattr(marks, "collector", 0.0), _thread_usage()
            started = time.thread_time()
            try:
                return app(environ, start_response)
            finally:
                now, waited = time.thread_time(), run_queue_wait()
                after = _thread_usage()
                self.calls.append(
                    Handled(
                        handler=now - started,
                        call=now - getattr(marks, "last", 0.0),
                        waited=waited - getattr(marks, "waited", 0.0),
                        collector=getattr(marks, "collector", 0.0) - collector,
                        faults=after.ru_minflt - usage.ru_minflt,
                        switches=after.ru_nivcsw - usage.ru_nivcsw,
                    )
                )
                marks.last, marks.waited = now, waited

        return timed


def _thread_usage() -> resource.struct_rusage:
    return resource.getrusage(resource.RUSAGE_THREAD)


class Pauses:
    """The garbage collector's pauses while a pattern runs (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds[info["generation"]].append(time.perf_counter() - self._started)

    def __enter__(self) -> Pauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def line(self) -> str:
        full = self.seconds[2]
        young = self.seconds[0] + self.seconds[1]
        return (
            f"  gc: {len(young)} young collections (max {max(young, default=0) * 1e3:.1f} ms),"
            f" {len(full)} full (max {max(full, default=0) * 1e3:.1f} ms)"
        )


@dataclass
class Extender:
    """The extender on a real socket, with its node view fed as a watch would."""

    port: int
    view: NodeView
    objects: list[dict[str, Any]]
    cpu: ServerCPU

    def feed(self, per_second: float, stop: threading.Event) -> None:
        """Publishes fresh annotations on ``per_second`` nodes a second, round robin,
        keeping each delivered object as the informer's store does (the objects the
        garbage collector then has to walk)."""
        if per_second <= 0:
            return
        store = {obj["metadata"]["name"]: obj for obj in self.objects}
        version, i = 10**6, 0
        while not stop.wait(1.0 / per_second):
            version += 1
            obj = node(i, time.time(), str(version))
            store[obj["metadata"]["name"]] = obj
            self.view.upsert(obj)
            i = (i + 1) % len(self.objects)


@contextmanager
def extender(nodes: int, *, tls: bool, updates_per_second: float) -> Iterator[Extender]:
    now = time.time()
    view = NodeView()
    objects = [node(i, now, str(1000 + i)) for i in range(nodes)]
    for obj in objects:
        view.upsert(obj)
    metrics = server.ExtenderMetrics(view)
    service = server.ExtenderService(view, server.PressureJudge(node_pressure.Args()), metrics)
    protection = None
    if tls:  # a self-signed certificate, open verbs: the handshake is what is measured
        certificate = ServingCertificate(
            resolve(MetricsAuth.KUBERNETES, None, None, None), hosts=("127.0.0.1",)
        )
        protection = Protection(
            resolve(MetricsAuth.NONE, None, None, None), certificate=certificate
        )
    cpu = ServerCPU()
    endpoint = ObservabilityServer(
        ListenAddress("127.0.0.1", 0),
        registry=metrics.registry,
        health=server.ExtenderHealth(view),
        routes={
            **{path: cpu.timed(app) for path, app in service.routes().items()},
            f"/{BASELINE}": _echo,
        },
        protection=protection,
    )
    gc.freeze()  # as `nodeagent extender` does once its node view has listed
    stop = threading.Event()
    # ... and then every few seconds (a tree without it: the one freeze above)
    try:
        from nodeagent.base import heap

        freezing: Callable[[threading.Event], None] | None = functools.partial(
            heap.freeze_until, every=server.FREEZE_EVERY_S
        )
    except ImportError:
        freezing = None
    with endpoint, _collecting(cpu):
        running = Extender(endpoint.port, view, objects, cpu)
        threads = [threading.Thread(target=running.feed, args=(updates_per_second, stop))]
        if freezing is not None:
            threads.append(threading.Thread(target=freezing, args=(stop,)))
        for thread in threads:
            thread.start()
        try:
            yield running
        finally:
            stop.set()
            for thread in threads:
                thread.join()


@contextmanager
def _collecting(cpu: ServerCPU) -> Iterator[None]:
    """``cpu`` told of every collection while the block runs."""
    gc.callbacks.append(cpu.collecting)
    try:
        yield
    finally:
        gc.callbacks.remove(cpu.collecting)


@dataclass
class Served:
    """What the server measured over a pattern: per call, in the order of the calls
    (:class:`Handled`), and the collector's pauses."""

    calls: list[Handled]
    collections: Pauses


@contextmanager
def served_here(
    nodes: int, *, tls: bool, updates_per_second: float
) -> Iterator[tuple[int, Callable[[], Served]]]:
    """The extender in this process, beside the client: its port, and what it
    measured (once the pattern is over)."""
    with (
        extender(nodes, tls=tls, updates_per_second=updates_per_second) as ext,
        Pauses() as collections,
    ):
        yield ext.port, lambda: Served(ext.cpu.calls, collections)


def _serve(connection: Connection, nodes: int, tls: bool, updates_per_second: float) -> None:
    with served_here(nodes, tls=tls, updates_per_second=updates_per_second) as (port, results):
        connection.send(port)
        connection.recv()  # the pattern is over
        connection.send(results())


@contextmanager
def served_apart(
    nodes: int, *, tls: bool, updates_per_second: float
) -> Iterator[tuple[int, Callable[[], Served]]]:
    """The extender in a process of its own, as it runs beside kube-scheduler: the
    client's work and the server's do not share an interpreter lock."""
    mine, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(
        target=_serve, args=(theirs, nodes, tls, updates_per_second), daemon=True
    )
    process.start()
    try:
        port = mine.recv()
        results: list[Served] = []

        def fetch() -> Served:
            if not results:
                mine.send("done")
                results.append(mine.recv())
            return results[0]

        yield port, fetch
        fetch()
    finally:
        process.join(timeout=60)
        if process.is_alive():
            process.kill()


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Row:
    case: str
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    call_cpu: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    """The wall time less the longer of the client's and the server's thread's waits for
    a core (both may wait at once): at least what the call takes with a core to spare."""
    client_cpu: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    handled: list[Handled] = field(default_factory=list)
    connections: int = 0
    """How many of the calls opened a connection."""

    def add(self, call: Call, cpu: ServerCPU) -> None:
        """``call``, just made, served by a server measured by ``cpu``."""
        self.record(call, cpu.calls[-1])

    def record(self, call: Call, served: Handled) -> None:
        """``call`` and what the server spent on it."""
        self.wall.append(call.wall)
        self.cpu.append(served.handler)
        self.call_cpu.append(served.call)
        self.running.append(call.wall - max(call.waited, served.waited))
        self.client_cpu.append(call.cpu)
        self.handled.append(served)
        self.connections += call.connected

    def costliest(self) -> Handled:
        """The call whose handler took the most CPU."""
        return max(self.handled, key=lambda served: served.handler)

    def line(self) -> str:
        ms = 1e3

        def spread(values: list[float]) -> str:
            if not values:
                return f"{'':>7} {'':>7}"
            return f"{statistics.median(values) * ms:>7.2f} {_quantile(values, 0.99) * ms:>7.2f}"

        base = f"{statistics.median(self.base) * ms:>7.2f}" if self.base else f"{'':>7}"
        verdict = "yes" if _quantile(self.wall, 0.99) < 0.010 else "NO"
        running = f"{_quantile(self.running, 0.99) * ms:>7.2f}" if self.running else f"{'':>7}"
        collector = max((served.collector for served in self.handled), default=0.0)
        return (
            f"{self.case:<44} {len(self.wall):>5} {self.connections:>4}"
            f" {spread(self.wall)} {max(self.wall) * ms:>7.2f}"
            f" {spread(self.cpu)} {spread(self.call_cpu)} {running} {spread(self.client_cpu)}"
            f" {collector * ms:>7.2f} {base} {verdict:>6}"
        )


HEADER = (
    f"{'case':<44} {'calls':>5} {'new':>4} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}"
    f" {'cpu p50':>7} {'cpu p99':>7} {'srv p50':>7} {'srv p99':>7} {'run p99':>7}"
    f" {'cli p50':>7} {'cli p99':>7} {'gc max':>7}"
    f" {'base':>7}"
    f" {'p99<10':>6}"
)


def sporadic_gaps(
    seconds: float,
    shortest: float,
    longest: float,
    rng: random.Random,
    *,
    idle_gaps: int = 0,
    idle_gap: float = 0.0,
) -> list[float]:
    """Uniform gaps between ``shortest`` and ``longest`` adding up to about ``seconds``,
    three or more of them long (``LONG_GAP`` of the longest or more), and ``idle_gaps``
    more of ``idle_gap`` seconds spread among them."""
    gaps: list[float] = []
    while sum(gaps) < seconds:
        gaps.append(rng.uniform(shortest, longest))
    long_gap = LONG_GAP * longest
    long_gaps = [i for i, gap in enumerate(gaps) if gap >= long_gap]
    for i in range(0, len(gaps), max(1, len(gaps) // 3)):
        if len(long_gaps) >= 3:
            break
        if i not in long_gaps:
            gaps[i] = rng.uniform(long_gap, longest)
            long_gaps.append(i)
    for n in range(idle_gaps):
        gaps.insert((n + 1) * len(gaps) // (idle_gaps + 1), idle_gap)
    return gaps


LONG_GAP = 0.8
"""Of the longest gap: 12 s of 15, longer than the extender's former score cache (10 s)."""

IDLE_GAP = 1.06
"""Of the transport's idle timeout: a pause after which kube-scheduler's transport has
closed its idle connection (95 s of 90)."""


def scheduled(nodes: int) -> Payload:
    """The pod and kube-scheduler's NodeInfos: ``nodes`` Nodes as the extender has them."""
    now = time.time()
    return Payload(POD, [node(i, now, str(1000 + i)) for i in range(nodes)])


@contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection while the block builds a client's payload and lets go of it
    (reference counting frees it): when the server runs in this process, the collections
    its thousands of Node dicts would cause are not the server's."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def sporadic(
    seconds: float,
    nodes: int,
    updates_per_second: float,
    *,
    gaps: tuple[float, float] = (1.0, 15.0),
    seed: int = 20,
    tls: bool = True,
    idle_gaps: int = 1,
    idle_timeout: float = GO_IDLE_CONN_TIMEOUT_S,
    apart: bool = False,
    clients: Clients = PYTHON_CLIENTS,
) -> tuple[list[Row], list[float], Pauses]:
    pauses = sporadic_gaps(
        seconds,
        *gaps,
        random.Random(seed),
        idle_gaps=idle_gaps,
        idle_gap=IDLE_GAP * idle_timeout,
    )
    long_gap = LONG_GAP * gaps[1]
    scheme = "HTTPS" if tls else "HTTP"
    rows = {verb: Row(f"sporadic /{verb} {nodes} names, {scheme}") for verb in server.VERBS}
    after_gap = Row(f"sporadic, first call after >= {long_gap:g} s")
    reconnected = Row(f"sporadic, after > {idle_timeout:g} s: new {scheme} connection")
    serving = served_apart if apart else served_here
    calls: list[Call] = []
    with serving(nodes, tls=tls, updates_per_second=updates_per_second) as (port, results):
        with collector_paused():
            client = clients.open(port, scheduled(nodes), tls=tls, idle_timeout=idle_timeout)
        with client:
            for gap in pauses:
                time.sleep(gap)
                calls += client.call(server.VERBS, gap)  # kube-scheduler: filter, prioritize
        served = results()
    for i, call in enumerate(calls):
        rows[call.verb].record(call, served.calls[i])
        if call.verb == server.FILTER and call.connected and call.gap > idle_timeout:
            reconnected.record(call, served.calls[i])
        elif call.verb == server.FILTER and call.gap >= long_gap:
            after_gap.record(call, served.calls[i])
    table = [*rows.values(), after_gap, *([reconnected] if idle_gaps else [])]
    return table, pauses, served.collections


def back_to_back(
    calls: int,
    nodes: int,
    full_nodes: int,
    updates_per_second: float,
    clients: Clients = PYTHON_CLIENTS,
) -> tuple[list[Row], Pauses]:
    rows = []
    with (
        extender(nodes, tls=False, updates_per_second=updates_per_second) as ext,
        Pauses() as collections,
    ):
        now, objects = time.time(), ext.objects
        cases: list[tuple[str, Callable[[], Payload]]] = [
            (f"{nodes} names", lambda: Payload(POD, objects)),
            (f"{full_nodes} whole nodes, warm", lambda: Payload(POD, objects[:full_nodes], False)),
            (
                f"{full_nodes} whole nodes, cold",
                lambda: Payload(POD, [node(i, now, f"cold-{i}") for i in range(full_nodes)], False),
            ),
        ]
        for label, payload in cases:
            with collector_paused():
                client = clients.open(ext.port, payload(), tls=False)
            with client:
                for _ in range(3):  # warm-up
                    client.call([BASELINE])
                base = [client.call([BASELINE])[0].wall for _ in range(calls)]
                for verb in server.VERBS:
                    for _ in range(3):
                        client.call([verb])
                    row = Row(f"/{verb} {label}", base=base)
                    for _ in range(calls):
                        row.add(client.call([verb])[0], ext.cpu)
                    rows.append(row)
    return rows, collections


def tls_calls(calls: int, nodes: int, clients: Clients = PYTHON_CLIENTS) -> list[Row]:
    """/filter over HTTPS, a new connection (handshake) per call against one kept-alive
    connection, interleaved call by call; ``srv`` includes the server's handshake CPU.
    kube-scheduler's client gets its new connections from the same transport, its idle
    connection closed after every call (``fresh``)."""
    fresh = Row(f"/filter {nodes} names, fresh TLS")
    reused = Row(f"/filter {nodes} names, reused TLS")
    with extender(nodes, tls=True, updates_per_second=0) as ext:
        payload = Payload(POD, ext.objects)
        with (
            clients.open(ext.port, payload, tls=True) as kept,
            clients.open(ext.port, payload, tls=True, fresh=True) as new,
        ):
            for _ in range(3):
                kept.call([server.FILTER]), new.call([server.FILTER])
            for _ in range(calls):  # interleaved, call by call
                fresh.add(new.call([server.FILTER])[0], ext.cpu)
                reused.add(kept.call([server.FILTER])[0], ext.cpu)
    return [fresh, reused]


def costliest(rows: list[Row]) -> str:
    """The call whose handler took the most CPU among ``rows``, and what was in it."""
    row = max(rows, key=lambda row: row.costliest().handler)
    return f"  costliest handler: {row.case.strip()}, {row.costliest().why()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--sporadic-seconds", type=float, default=150.0, help="0 skips the sporadic pattern"
    )
    parser.add_argument(
        "--sporadic-tls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="sporadic calls over HTTPS, the documented deployment (default) or plain HTTP",
    )
    parser.add_argument(
        "--idle-gaps",
        type=int,
        default=1,
        help=f"sporadic pauses of {IDLE_GAP * GO_IDLE_CONN_TIMEOUT_S:g} s, after which the"
        " call opens a new connection",
    )
    parser.add_argument(
        "--server-process",
        action="store_true",
        help="sporadic calls to an extender in a process of its own (default: a thread of"
        " the client's process)",
    )
    parser.add_argument("--calls", type=int, default=200, help="per back-to-back case")
    parser.add_argument("--tls-calls", type=int, default=100, help="per TLS case")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--full-nodes", type=int, default=500)
    parser.add_argument("--updates-per-second", type=float, default=20.0)
    parser.add_argument(
        "--gaps",
        type=float,
        nargs=2,
        default=(1.0, 15.0),
        metavar=("MIN", "MAX"),
        help="seconds between sporadic pods",
    )
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument(
        "--client",
        choices=[kind.value for kind in ClientKind],
        default=ClientKind.GO.value,
        help="kube-scheduler's own extender client, built from tests/controlplane (default;"
        " Python's when there is no Go toolchain), or Python's http.client",
    )
    args = parser.parse_args()
    clients = Clients.choose(ClientKind(args.client))
    print(clients.describe())
    print(HEADER)
    if args.sporadic_seconds > 0:
        rows, gaps, collections = sporadic(
            args.sporadic_seconds,
            args.nodes,
            args.updates_per_second,
            gaps=tuple(args.gaps),
            seed=args.seed,
            tls=args.sporadic_tls,
            idle_gaps=args.idle_gaps,
            apart=args.server_process,
            clients=clients,
        )
        for row in rows:
            print(row.line())
        print(
            f"  ({len(gaps)} pods over {sum(gaps):.0f} s, gaps {min(gaps):.1f}-{max(gaps):.1f} s,"
            f" {sum(g >= LONG_GAP * args.gaps[1] for g in gaps)} long)"
        )
        print(collections.line())
        print(costliest(rows))
    if args.calls > 0:
        rows, collections = back_to_back(
            args.calls, args.nodes, args.full_nodes, args.updates_per_second, clients
        )
        for row in rows:
            print(row.line())
        print(collections.line())
        print(costliest(rows))
    if args.tls_calls > 0:
        rows = tls_calls(args.tls_calls, args.nodes, clients)
        for row in rows:
            print(row.line())
        print(costliest(rows))


if __name__ == "__main__":
    main()
