"""The clients ``benchmarks/bench_extender.py`` calls the extender with.

kube-scheduler is a Go program: what it sees of an extender call is its ``HTTPExtender``
(k8s.io/kubernetes/pkg/scheduler/extender.go) marshalling the arguments, Go's
``http.Transport`` exchanging them, and the answer decoded. :class:`GoClient` is that
code itself, at the release tests/controlplane/go.mod pins, in a long-lived process of
its own (``tests/controlplane/extenderclient``) that the benchmark tells when to call;
it answers, per call, the wall time it measured, its own CPU time, the longest wait for
a core of any of its threads and whether the call opened a connection (httptrace's
``GotConn``). Its NodeInfos hold whole Nodes, so that its heap, and its garbage
collector's work, are a scheduler's. It is
built on first use into the control plane's cache directory, beside kube-scheduler, from
the module cache and build cache ``tests/controlplane/build.sh`` fills (seconds when
they are warm), and again only when its source or go.mod changes.

:class:`PythonClient` is ``http.client`` and ``ssl`` behaving as Go's transport does
(one connection kept alive, closed after 90 s idle, ``TCP_NODELAY``): the fallback
where there is no Go toolchain. It sends a body encoded once and never decodes the
answer, so the wall time it measures leaves out the JSON work (and the collector) that
kube-scheduler's client spends on every call.
"""

from __future__ import annotations

import enum
import hashlib
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tests.controlplane import cluster

GO_IDLE_CONN_TIMEOUT_S = 90.0
"""Go's ``http.Transport`` closes a connection idle this long (``IdleConnTimeout`` in
kube-scheduler's transport defaults): the next call opens a new one, TLS included."""

BASELINE = "baseline"
"""The benchmark's route that reads a call's body and answers ``{}``: the exchange
without the extender's work."""

SOURCE = cluster.HERE / "extenderclient" / "main.go"
BUILD_TIMEOUT_S = 900.0
"""A cold build compiles kube-scheduler's packages (minutes on 2 cores); a warm one
links in seconds."""


class ClientKind(enum.Enum):
    GO = "go"
    PYTHON = "python"


@dataclass(frozen=True)
class Call:
    """One call as the client saw it: its wall time, whether it opened a connection,
    how long the client waited for a core during it and the CPU time it spent on it
    (with a new connection, the client's side of the handshake)."""

    verb: str
    gap: float
    wall: float
    connected: bool
    waited: float
    cpu: float


@dataclass(frozen=True)
class Payload:
    """The pod being scheduled and the nodes kube-scheduler calls the extender with (its
    NodeInfos, whole Node objects), sent by name only when ``node_cache_capable``."""

    pod: dict[str, Any]
    nodes: list[dict[str, Any]]
    node_cache_capable: bool = True

    def body(self) -> bytes:
        """ExtenderArgs as kube-scheduler marshals them (Go's compact JSON)."""
        if self.node_cache_capable:
            names = [obj["metadata"]["name"] for obj in self.nodes]
            message = {"Pod": self.pod, "Nodes": None, "NodeNames": names}
        else:
            items = {"metadata": {}, "items": self.nodes}
            message = {"Pod": self.pod, "Nodes": items, "NodeNames": None}
        return json.dumps(message, separators=(",", ":")).encode()


class Client(Protocol):
    def call(self, verbs: Sequence[str], gap: float = 0.0) -> list[Call]:
        """Calls ``verbs`` (routes: ``filter``, ``prioritize``, ``baseline``) one after
        another, as one pod's, after a pause of ``gap`` seconds."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Client: ...

    def __exit__(self, *exc: object) -> None: ...


def run_queue_wait() -> float:
    """Seconds the calling thread has spent runnable but waiting for a core (the
    scheduler's ``/proc/thread-self/schedstat``); 0 where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class PythonClient:
    """POSTs ``payload`` over one connection kept alive between calls, as Go's
    http.Transport does: Nagle off (Go sets ``TCP_NODELAY`` on every connection), a new
    connection when the server closed it or it idled ``idle_timeout``; ``fresh`` opens
    one per call instead. Its CPU and waits are this thread's."""

    def __init__(
        self,
        port: int,
        payload: Payload,
        *,
        tls: bool,
        fresh: bool = False,
        idle_timeout: float = GO_IDLE_CONN_TIMEOUT_S,
    ) -> None:
        self._port, self._body, self._fresh = port, payload.body(), fresh
        self._context = _insecure_context() if tls else None
        self._idle_timeout = idle_timeout
        self._connection: http.client.HTTPConnection | None = None
        self._last_used = 0.0

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

    def call(self, verbs: Sequence[str], gap: float = 0.0) -> list[Call]:
        return [self._post(verb, gap) for verb in verbs]

    def _post(self, verb: str, gap: float) -> Call:
        started, waited, cpu = time.perf_counter(), run_queue_wait(), time.thread_time()
        idle = started - self._last_used > self._idle_timeout
        if self._connection is not None and idle:
            self._connection.close()
            self._connection = None
        connected = self._connection is None or self._fresh
        if connected:
            self._connection = self._connect()
        assert self._connection is not None
        self._connection.request(
            "POST", f"/{verb}", self._body, {"Content-Type": "application/json"}
        )
        response = self._connection.getresponse()
        response.read()
        if self._fresh or response.will_close:
            self._connection.close()
            self._connection = None
        self._last_used = time.perf_counter()
        assert response.status == 200, (verb, response.status)
        return Call(
            verb,
            gap,
            wall=self._last_used - started,
            connected=connected,
            waited=run_queue_wait() - waited,
            cpu=time.thread_time() - cpu,
        )

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> PythonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _insecure_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a throwaway self-signed certificate
    return context


class GoClientError(RuntimeError):
    """kube-scheduler's client failed a call, or its process ended."""


class GoClient:
    """kube-scheduler's ``HTTPExtender`` in a process of its own (``binary``, from
    :func:`go_client`), configured as manifests/extender/kube-scheduler-config.yaml's
    entry (``nodeCacheCapable`` unless the payload is whole nodes), ``urlPrefix`` the
    benchmark's server and ``tlsConfig.insecure`` for its self-signed certificate.
    ``fresh``: the transport's idle connection is closed after every call
    (``CloseIdleConnections``), so each call dials and handshakes anew with the same
    transport. ``idle_timeout`` replaces the transport's ``IdleConnTimeout`` (90 s) when
    it differs. ``baseline`` is a ``Filter`` through an HTTPExtender whose filterVerb is
    ``baseline``, sharing the same transport."""

    def __init__(
        self,
        binary: Path,
        port: int,
        payload: Payload,
        *,
        tls: bool,
        fresh: bool = False,
        idle_timeout: float = GO_IDLE_CONN_TIMEOUT_S,
    ) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as given:
            json.dump({"pod": payload.pod, "nodes": payload.nodes}, given)
        self._payload = Path(given.name)
        scheme = "https" if tls else "http"
        command = [
            str(binary),
            f"-url={scheme}://127.0.0.1:{port}/",
            f"-https={str(tls).lower()}",
            f"-payload={self._payload}",
            f"-node-cache-capable={str(payload.node_cache_capable).lower()}",
            f"-fresh={str(fresh).lower()}",
        ]
        if idle_timeout != GO_IDLE_CONN_TIMEOUT_S:
            command.append(f"-idle-conn-timeout={idle_timeout}s")
        # its standard error to a file, never to a pipe that could fill; closed in close()
        self._log = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        try:
            self._expect("ready")
        except BaseException:
            self.close()
            raise

    def _expect(self, line: str) -> None:
        assert self._process.stdout is not None
        got = self._process.stdout.readline().strip()
        if got != line:
            raise GoClientError(f"extenderclient said {got!r}, not {line!r}: {self._stderr()}")

    def _stderr(self) -> str:
        self._log.seek(0)
        return self._log.read().strip()[-2000:] or "(nothing on its standard error)"

    def call(self, verbs: Sequence[str], gap: float = 0.0) -> list[Call]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(" ".join(verbs) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            self._process.wait(timeout=10)
            raise GoClientError(f"extenderclient ended: {self._stderr()}")
        calls = []
        for answer in json.loads(line):
            if answer.get("error"):
                raise GoClientError(f"{answer['verb']}: {answer['error']}")
            calls.append(
                Call(
                    answer["verb"],
                    gap,
                    wall=answer["wall"],
                    connected=not answer["reused"],
                    waited=answer["waited"],
                    cpu=answer["cpu"],
                )
            )
        return calls

    def close(self) -> None:
        if self._process.stdin is not None and not self._process.stdin.closed:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._log.close()
        self._payload.unlink(missing_ok=True)

    def __enter__(self) -> GoClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def go_client() -> Path | str:
    """kube-scheduler's extender client built (or found up to date) in the control
    plane's cache directory; why not, in one line, when there is no Go toolchain or the
    build fails."""
    go = shutil.which("go")
    if go is None:
        return "no Go toolchain on PATH"
    directory = cluster.binaries_directory()
    binary = directory / "extenderclient"
    stamp_file = directory / ".extenderclient.stamp"
    sources = (SOURCE, cluster.HERE / "go.mod", cluster.HERE / "go.sum")
    stamp = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    if os.access(binary, os.X_OK) and _read(stamp_file) == stamp:
        return binary
    directory.mkdir(parents=True, exist_ok=True)
    print(f"building kube-scheduler's extender client into {binary}", file=sys.stderr)
    building = directory / f".extenderclient.{os.getpid()}"
    try:  # into a file of its own, then renamed: two builds at once leave one whole binary
        flags = ["-trimpath", "-buildvcs=false", "-ldflags=-s -w"]  # build.sh's, to reuse its cache
        subprocess.run(
            [go, "build", *flags, "-o", str(building), "./extenderclient"],
            cwd=cluster.HERE,
            check=True,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        os.replace(building, binary)
    except subprocess.CalledProcessError as failed:
        return f"go build ./extenderclient failed: {failed.stderr.strip()[-2000:]}"
    except subprocess.TimeoutExpired:
        return f"go build ./extenderclient took over {BUILD_TIMEOUT_S:g} s"
    finally:
        building.unlink(missing_ok=True)
    stamp_file.write_text(stamp)
    return binary


@dataclass(frozen=True)
class Clients:
    """Opens the benchmark's clients: kube-scheduler's (``binary``, a :class:`GoClient`)
    or, without one, a :class:`PythonClient`."""

    binary: Path | None = None

    @classmethod
    def choose(cls, kind: ClientKind) -> Clients:
        """``kind``'s clients; Python's, with a note on standard error, when Go's
        cannot be built here."""
        if kind is ClientKind.PYTHON:
            return cls()
        built = go_client()
        if isinstance(built, str):
            print(
                f"kube-scheduler's client unavailable ({built}): the Python client calls",
                file=sys.stderr,
            )
            return cls()
        return cls(built)

    @property
    def kind(self) -> ClientKind:
        return ClientKind.PYTHON if self.binary is None else ClientKind.GO

    def describe(self) -> str:
        if self.binary is None:
            return "client: Python http.client + ssl, behaving as Go's http.Transport"
        return (
            f"client: kube-scheduler's HTTPExtender (k8s.io/kubernetes {cluster.pinned_version()},"
            f" Go), {self.binary}"
        )

    def open(
        self,
        port: int,
        payload: Payload,
        *,
        tls: bool,
        fresh: bool = False,
        idle_timeout: float = GO_IDLE_CONN_TIMEOUT_S,
    ) -> Client:
        if self.binary is None:
            return PythonClient(port, payload, tls=tls, fresh=fresh, idle_timeout=idle_timeout)
        return GoClient(self.binary, port, payload, tls=tls, fresh=fresh, idle_timeout=idle_timeout)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


PYTHON_CLIENTS = Clients()
"""Python's client: what the benchmark's functions call with unless told otherwise."""
