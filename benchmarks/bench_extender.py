"""Latency and CPU of ``nodeagent extender``'s verbs over real HTTP, called the way
kube-scheduler calls them.

    python -m benchmarks.bench_extender [--sporadic-seconds 150] [--calls 200]
        [--nodes 5000] [--full-nodes 500] [--tls-calls 100] [--updates-per-second 20]

kube-scheduler calls an extender once per pod being scheduled (``/filter``, then
``/prioritize``, one after the other), through Go's ``http.Transport``: one connection
kept alive between calls and closed after 90 s idle, Nagle off (``TCP_NODELAY``), over
HTTPS in the documented deployment. The client here does the same (:class:`Caller`).
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
  call against calls on one kept-alive connection, interleaved call by call.

Throughout, a stand-in for the node watch updates ``--updates-per-second`` nodes (a new
resourceVersion and a freshly published pressure annotation; the agent republishes every
5 minutes, 17 nodes/s at 5000) and keeps the delivered objects as the informer's store
does, so the server does its per-node work, and its garbage collector walks what a real
one would, while it serves. The garbage collector's pauses are printed per pattern.

Columns: ``cpu``, the CPU time of the serving thread in the handler (body read, decode,
verdicts, encode; ``time.thread_time``); ``srv``, all the CPU time the connection's
thread spent for the call (with a new connection: the thread's start and the server's
side of the TLS handshake; HTTP parsing; the answer); ``run p99``, the wall time less
the longer of the client's and the server's thread's waits for a core during the call
(``/proc/thread-self/schedstat``; the two may wait at the same time, so their sum would
count some of it twice). That is an upper bound of the wall time on a machine with a
core to spare (waits for the GIL behind another thread that waits for a core stay in
it): on a busy 2-core machine the wall time is mostly waiting. ``cli p99``: the client
thread's CPU time per call (Python's ``http.client`` and ``ssl``; with a new
connection, the client's side of the handshake). ``gc max``: the most CPU time the
garbage collector took inside one call's handler (collections run in whichever thread
allocates when a threshold is crossed). Under each pattern, the call whose handler took
the most CPU, with what was in it (the collector's share, the serving thread's page
faults and preemptions), so that an outlier names its cause.

Targets (issue 20): p99 under 10 ms for every call at 5000 names, the first after an idle
gap included; handler CPU at most 3 ms per 5000-name call.
"""

from __future__ import annotations

import argparse
import functools
import gc
import http.client
import json
import multiprocessing
import random
import resource
import socket
import ssl
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from nodeagent import model
from nodeagent.kube.client import api_time
from nodeagent.observability.server import ObservabilityServer, StartResponse, WSGIApp
from nodeagent.observability.settings import ListenAddress
from nodeagent.scheduler.extenders import server
from nodeagent.scheduler.extenders.nodeview import NodeView
from nodeagent.scheduler.plugins import node_pressure
from nodeagent.serving.server import Protection
from nodeagent.serving.settings import MetricsAuth, resolve
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
                model.PRESSURE_ANNOTATION: json.dumps(pressure),
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


POD = {
    "metadata": {"name": "web-0", "namespace": "default", "uid": "u-web-0"},
    "spec": {
        "containers": [{"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "1"}}}],
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
        ],
    },
}


def _go_json(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def message(node_names: list[str] | None, items: list[dict[str, Any]] | None) -> bytes:
    """ExtenderArgs as kube-scheduler marshals them."""
    nodes_field = None if items is None else {"metadata": {}, "items": items}
    return _go_json({"Pod": POD, "Nodes": nodes_field, "NodeNames": node_names})


def _echo(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
    return [b"{}"]


def run_queue_wait() -> float:
    """Seconds the calling thread has spent runnable but waiting for a core (the
    scheduler's ``/proc/thread-self/schedstat``); 0 where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


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


GO_IDLE_CONN_TIMEOUT_S = 90.0
"""Go's ``http.Transport`` closes a connection idle this long (``IdleConnTimeout`` in
kube-scheduler's transport defaults): the next call opens a new one, TLS included."""


class Caller:
    """POSTs over one connection kept alive between calls, as Go's http.Transport does:
    Nagle off (Go sets ``TCP_NODELAY`` on every connection), a new connection when the
    server closed it or it idled :data:`GO_IDLE_CONN_TIMEOUT_S`; ``fresh`` opens one per
    call instead. ``connected`` says whether the last call opened a connection,
    ``waited`` how long this thread waited for a core during it, ``cpu`` the CPU time
    it spent on it (with a new connection, the client's side of the handshake)."""

    def __init__(
        self,
        port: int,
        context: ssl.SSLContext | None,
        *,
        fresh: bool,
        idle_timeout: float = GO_IDLE_CONN_TIMEOUT_S,
    ) -> None:
        self._port, self._context, self._fresh = port, context, fresh
        self._idle_timeout = idle_timeout
        self._connection: http.client.HTTPConnection | None = None
        self._last_used = 0.0
        self.connected = False
        self.waited = 0.0
        self.cpu = 0.0

    def _connect(self) -> http.client.HTTPConnection:
        connection = (
            http.client.HTTPConnection("127.0.0.1", self._port, timeout=30)
            if self._context is None
            else http.client.HTTPSConnection(
                "127.0.0.1", self._port, timeout=30, context=self._context
            )
        )
        connection.connect()
        assert connection.sock is not None
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def post(self, path: str, body: bytes) -> float:
        """The call's wall time, connecting included."""
        started, waited, cpu = time.perf_counter(), run_queue_wait(), time.thread_time()
        idle = started - self._last_used > self._idle_timeout
        if self._connection is not None and idle:
            self._connection.close()
            self._connection = None
        self.connected = self._connection is None or self._fresh
        if self.connected:
            self._connection = self._connect()
        assert self._connection is not None
        self._connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = self._connection.getresponse()
        response.read()
        if self._fresh or response.will_close:
            self._connection.close()
            self._connection = None
        self._last_used = time.perf_counter()
        self.waited = run_queue_wait() - waited
        self.cpu = time.thread_time() - cpu
        elapsed = self._last_used - started
        assert response.status == 200, (path, response.status)
        return elapsed

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


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
            "/baseline": _echo,
        },
        protection=protection,
    )
    gc.freeze()  # as `nodeagent extender` does once its node view has listed
    stop = threading.Event()
    # ... and then every few seconds (a tree without it: the one freeze above)
    try:
        from nodeagent import heap

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


def _client_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a throwaway self-signed certificate
    return context


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Call:
    """One call as the client saw it."""

    verb: str
    gap: float
    wall: float
    connected: bool
    waited: float
    cpu: float

    @classmethod
    def made(cls, verb: str, gap: float, wall: float, caller: Caller) -> Call:
        """The call ``caller`` just made."""
        return cls(verb, gap, wall, caller.connected, caller.waited, caller.cpu)


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

    def add(self, wall: float, cpu: ServerCPU, caller: Caller) -> None:
        """The call just made by ``caller``, served by a server measured by ``cpu``."""
        self.record(Call.made("", 0.0, wall, caller), cpu.calls[-1])

    def record(self, call: Call, served: Handled) -> None:
        """``call`` and what the server spent on it."""
        self.wall.append(call.wall)
        self.cpu.append(served.handler)
        self.call_cpu.append(served.call)
        self.running.append(call.wall - max(call.waited, served.waited))
        self.client_cpu.append(call.cpu)
        self.handled.append(served)

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
        client = f"{_quantile(self.client_cpu, 0.99) * ms:>7.2f}" if self.client_cpu else f"{'':>7}"
        collector = max((served.collector for served in self.handled), default=0.0)
        return (
            f"{self.case:<44} {len(self.wall):>5} {spread(self.wall)} {max(self.wall) * ms:>7.2f}"
            f" {spread(self.cpu)} {spread(self.call_cpu)} {running} {client}"
            f" {collector * ms:>7.2f} {base} {verdict:>6}"
        )


HEADER = (
    f"{'case':<44} {'calls':>5} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'cpu p50':>7}"
    f" {'cpu p99':>7} {'srv p50':>7} {'srv p99':>7} {'run p99':>7} {'cli p99':>7} {'gc max':>7}"
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
        body = message([node_name(i) for i in range(nodes)], None)
        context = _client_context() if tls else None
        caller = Caller(port, context, fresh=False, idle_timeout=idle_timeout)
        for gap in pauses:
            time.sleep(gap)
            for verb in server.VERBS:  # kube-scheduler: filter, then prioritize
                calls.append(Call.made(verb, gap, caller.post(f"/{verb}", body), caller))
        caller.close()
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
    calls: int, nodes: int, full_nodes: int, updates_per_second: float
) -> tuple[list[Row], Pauses]:
    rows = []
    with (
        extender(nodes, tls=False, updates_per_second=updates_per_second) as ext,
        Pauses() as collections,
    ):
        now = time.time()
        cases = [
            (f"{nodes} names", message([o["metadata"]["name"] for o in ext.objects], None)),
            (f"{full_nodes} whole nodes, warm", message(None, ext.objects[:full_nodes])),
            (
                f"{full_nodes} whole nodes, cold",
                message(None, [node(i, now, f"cold-{i}") for i in range(full_nodes)]),
            ),
        ]
        caller = Caller(ext.port, None, fresh=False)
        for label, body in cases:
            for _ in range(3):  # warm-up
                caller.post("/baseline", body)
            base = [caller.post("/baseline", body) for _ in range(calls)]
            for verb in server.VERBS:
                for _ in range(3):
                    caller.post(f"/{verb}", body)
                row = Row(f"/{verb} {label}", base=base)
                for _ in range(calls):
                    row.add(caller.post(f"/{verb}", body), ext.cpu, caller)
                rows.append(row)
        caller.close()
    return rows, collections


def tls_calls(calls: int, nodes: int) -> list[Row]:
    """/filter over HTTPS, a new connection (handshake) per call against one kept-alive
    connection, interleaved call by call; ``srv`` includes the server's handshake CPU."""
    fresh = Row(f"/filter {nodes} names, fresh TLS")
    reused = Row(f"/filter {nodes} names, reused TLS")
    with extender(nodes, tls=True, updates_per_second=0) as ext:
        body = message([obj["metadata"]["name"] for obj in ext.objects], None)
        context = _client_context()
        kept = Caller(ext.port, context, fresh=False)
        new = Caller(ext.port, context, fresh=True)
        for _ in range(3):
            kept.post("/filter", body), new.post("/filter", body)
        for _ in range(calls):  # interleaved, call by call
            fresh.add(new.post("/filter", body), ext.cpu, new)
            reused.add(kept.post("/filter", body), ext.cpu, kept)
        kept.close()
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
    args = parser.parse_args()
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
            args.calls, args.nodes, args.full_nodes, args.updates_per_second
        )
        for row in rows:
            print(row.line())
        print(collections.line())
        print(costliest(rows))
    if args.tls_calls > 0:
        rows = tls_calls(args.tls_calls, args.nodes)
        for row in rows:
            print(row.line())
        print(costliest(rows))


if __name__ == "__main__":
    main()
