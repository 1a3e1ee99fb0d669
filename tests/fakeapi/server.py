"""A fake kube-apiserver over HTTP, for the real ``kubernetes`` client.

It serves a :class:`tests.doubles.kube.FakeCluster` (the store with kube-apiserver's
semantics) on ``127.0.0.1:<random port>`` from a daemon thread, so tests drive the agent's
real HTTP client end to end: URL building, content types, query parameters, error
bodies, watch streaming, retries and timeouts.

Routes (what the agent and the live scheduler call):

    GET    /api/v1/nodes[/NAME]                      (?watch=true streams)
    POST   /api/v1/nodes
    PATCH  /api/v1/nodes/NAME[/status]               strategic, merge or JSON patch
    DELETE /api/v1/nodes/NAME                        (gone at once: nodes have no grace)
    GET    /api/v1/pods, /api/v1/namespaces/NS/pods  (?fieldSelector, labelSelector, watch)
    (every list: ?limit and ?continue page it; every page of one list is of one snapshot,
    as the real server's; a malformed token is 400, an unknown one 410 Gone; a list at
    resourceVersion=0 is served whole, limit or not, as the watch cache serves it)
    (every watch: ?sendInitialEvents=true&resourceVersionMatch=NotOlderThan streams the
    list, WatchList: an ADDED event per object, then with ?allowWatchBookmarks a
    bookmark annotated k8s.io/initial-events-end; a watch from ""/"0" without the option
    gets it by default, as the real server defaults it; the options validated as the
    real server does, 422; ``watch_list = False`` refuses them as a server with the
    WatchList feature off)
    GET    /api/v1/namespaces/NS/pods/NAME
    POST   /api/v1/namespaces/NS/pods
    DELETE /api/v1/namespaces/NS/pods/NAME           DeleteOptions body or query
    POST   /api/v1/namespaces/NS/pods/NAME/eviction  policy/v1 Eviction
    POST   /api/v1/namespaces/NS/pods/NAME/binding   v1 Binding (sets spec.nodeName and
                                                     PodScheduled=True; 409 if bound)
    PATCH  /api/v1/namespaces/NS/pods/NAME/status
    GET    /apis/policy/v1/poddisruptionbudgets      (?watch=true streams)
    GET    /api/v1/persistentvolumes[/NAME], /api/v1[/namespaces/NS]/persistentvolumeclaims
           /apis/storage.k8s.io/v1/{storageclasses,csinodes,csidrivers}[/NAME],
           /apis/storage.k8s.io/v1[/namespaces/NS]/csistoragecapacities  (?watch=true)
    POST, PUT the same (PUT: resourceVersion precondition, 409 when stale)
    GET    /apis/resource.k8s.io/v1/{resourceslices,deviceclasses}[/NAME],
           /apis/resource.k8s.io/v1[/namespaces/NS]/resourceclaims[/NAME]  (?watch=true),
           /apis/resource.k8s.io/v1[/namespaces/NS]/resourceclaimtemplates[/NAME]  (?watch=true)
    POST, PUT, DELETE the same; PUT, PATCH  .../resourceclaims/NAME/status
    GET    /apis/coordination.k8s.io/v1/namespaces/NS/leases[/NAME]
    POST   /apis/coordination.k8s.io/v1/namespaces/NS/leases
    PUT    /apis/coordination.k8s.io/v1/namespaces/NS/leases/NAME  (resourceVersion: 409)
    GET    /api/v1/events, /api/v1/namespaces/NS/events
    POST   /api/v1/namespaces/NS/events
    PATCH  /api/v1/namespaces/NS/events/NAME
    POST   /apis/authentication.k8s.io/v1/tokenreviews, /apis/authorization.k8s.io/v1/
           subjectaccessreviews                      (tests.doubles.reviews)

Faults, all optionally limited to a method and a path pattern: the next N answers with a
given status (``fail_next``), added latency (``add_latency``), a full outage answering 503
(``outage(status=503)``) or refusing connections (``outage(refuse=True)``: the listening
socket is closed and reopened on the same port afterwards).

Every request is logged (:attr:`FakeAPIServer.requests`) with method, path, query, content
type and decoded body, so tests assert on what was *sent* as well as on the stored state.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec

from nodeagent.base import errors
from nodeagent.kube import client
from nodeagent.kube import errors as kube_errors
from nodeagent.kube.errors import failure_status as _status
from tests.doubles import kube as fake
from tests.doubles import reviews as fakereviews


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any
    authorization: str = ""
    """The request's Authorization header, as sent."""

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


@dataclass
class _Fault:
    status: int
    remaining: int
    method: str | None
    path: re.Pattern[str] | None
    retry_after: float | None = None

    def applies(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path is None or self.path.search(path) is not None
        )


@dataclass
class _Latency:
    seconds: float
    method: str | None
    path: re.Pattern[str] | None


@dataclass
class _FaultState:
    faults: list[_Fault] = field(default_factory=list)
    latencies: list[_Latency] = field(default_factory=list)
    outage_status: int | None = None
    lost: list[_Fault] = field(default_factory=list)
    """Requests applied whose answer never leaves (the connection is cut instead)."""


_NODE = re.compile(r"^/api/v1/nodes(?:/(?P<name>[^/]+)(?:/(?P<sub>status))?)?$")
_PODS = re.compile(
    r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/pods"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>eviction|status|binding))?)?$"
)
_PDBS = re.compile(
    r"^/apis/policy/v1(?:/namespaces/(?P<ns>[^/]+))?/poddisruptionbudgets(?:/(?P<name>[^/]+))?$"
)
_LEASES = re.compile(
    r"^/apis/coordination\.k8s\.io/v1(?:/namespaces/(?P<ns>[^/]+))?/leases(?:/(?P<name>[^/]+))?$"
)
_STORAGE = re.compile(
    r"^/(?:api/v1|apis/storage\.k8s\.io/v1)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<kind>persistentvolumes|persistentvolumeclaims|storageclasses|csinodes|csidrivers"
    r"|csistoragecapacities)(?:/(?P<name>[^/]+))?$"
)
_RESOURCES = re.compile(
    r"^/apis/resource\.k8s\.io/v1(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<kind>resourceslices|deviceclasses|resourceclaims|resourceclaimtemplates)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>status))?)?$"
)
_EVENTS = re.compile(r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/events(?:/(?P<name>[^/]+))?$")


_CONTINUE = "fake-continue-"
"""How the fake's continue tokens begin: one that does not is refused as malformed (400),
one that does but is unknown has expired (410), as the real server tells them apart."""


class FakeAPIServer:
    """The HTTP front of a :class:`FakeCluster`; use :func:`running` to start one."""

    def __init__(self, cluster: fake.FakeCluster | None = None) -> None:
        self.cluster = cluster or fake.FakeCluster()
        self.requests: list[Request] = []
        self.watch_gone_as_status = False
        """Answer a watch from an expired resourceVersion with HTTP 410 instead of the
        usual 200 + ERROR event (both happen with real servers, depending on the path)."""
        self.watch_list = True
        """kube-apiserver's WatchList feature (on by default since 1.34): off, a watch
        asking for initial events is refused 422, and none is sent by default."""
        self._faults = _FaultState()
        self._lock = threading.Lock()
        self.continues: dict[str, tuple[str, list[Any]]] = {}
        """A paged list's rest, by its continue token: (resourceVersion, items)."""
        self._held = threading.Condition()
        self._holds: list[Hold] = []
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def reviews(self) -> fakereviews.Reviews:
        """The cluster's tokens and grants, behind TokenReviews and SubjectAccessReviews."""
        return self.cluster.reviews

    # --- lifecycle ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        handler = _make_handler(self)
        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        httpd.daemon_threads = True
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and cut every open connection (as a crashed server would)."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            connections = list(self._connections)
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._stopping.clear()

    def close(self) -> None:
        self.stop()
        self.cluster.close()

    # --- faults -------------------------------------------------------------------------
    def fail_next(
        self,
        times: int,
        *,
        status: int = 503,
        method: str | None = None,
        path: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` (a Status body)."""
        with self._lock:
            self._faults.faults.append(
                _Fault(status, times, method, re.compile(path) if path else None, retry_after)
            )

    def add_latency(
        self, seconds: float, *, method: str | None = None, path: str | None = None
    ) -> None:
        with self._lock:
            self._faults.latencies.append(
                _Latency(seconds, method, re.compile(path) if path else None)
            )

    def lose_responses(self, times: int, *, method: str | None = None, path: str) -> None:
        """Apply the next ``times`` matching requests, then cut the connection instead of
        answering (an API server that committed a write and died before replying)."""
        with self._lock:
            self._faults.lost.append(_Fault(0, times, method, re.compile(path)))

    def hold(self, path: str) -> Hold:
        """Until :meth:`Hold.release` (or the end of a ``with`` block), requests whose
        path matches wait before they are applied, and watches on it send nothing; what
        happened meanwhile follows in order (a slow request, a lagging watch cache).
        A held request has had its faults decided when it arrived."""
        hold = Hold(self, re.compile(path))
        with self._held:
            self._holds.append(hold)
        return hold

    def _release(self, hold: Hold, through: int | None) -> None:
        with self._held:
            if through is not None:
                hold.through = through
            elif hold in self._holds:
                self._holds.remove(hold)
            self._held.notify_all()

    def _wait_unheld(self, path: str, resource_version: str = "") -> None:
        rv = int(resource_version) if resource_version.isdigit() else None

        def free() -> bool:
            return not any(
                h.pattern.search(path) and (rv is None or rv > h.through) for h in self._holds
            )

        with self._held:
            self._held.wait_for(free)

    def _lose(self, method: str, path: str) -> bool:
        with self._lock:
            for fault in self._faults.lost:
                if fault.remaining > 0 and fault.applies(method, path):
                    fault.remaining -= 1
                    return True
        return False

    def clear_faults(self) -> None:
        with self._lock:
            self._faults = _FaultState()

    @contextlib.contextmanager
    def outage(self, *, status: int = 503, refuse: bool = False) -> Iterator[None]:
        """The API is down inside the block: every request gets ``status``, or with
        ``refuse`` the port stops listening (connection refused) and comes back after."""
        if refuse:
            self.stop()
            try:
                yield
            finally:
                self.start()
            return
        with self._lock:
            self._faults.outage_status = status
        try:
            yield
        finally:
            with self._lock:
                self._faults.outage_status = None

    def _fault_for(self, method: str, path: str) -> tuple[int | None, float | None, float]:
        with self._lock:
            delay = sum(
                lat.seconds
                for lat in self._faults.latencies
                if (lat.method is None or lat.method == method)
                and (lat.path is None or lat.path.search(path))
            )
            if self._faults.outage_status is not None:
                return self._faults.outage_status, None, delay
            for fault in self._faults.faults:
                if fault.remaining > 0 and fault.applies(method, path):
                    fault.remaining -= 1
                    return fault.status, fault.retry_after, delay
        return None, None, delay

    # --- assertions -----------------------------------------------------------------------
    def requests_to(self, method: str, path_pattern: str) -> list[Request]:
        pattern = re.compile(path_pattern)
        with self._lock:
            return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    def log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def writes(self) -> list[Request]:
        """Every request that could change state (not GET)."""
        with self._lock:
            return [r for r in self.requests if r.method != "GET"]


@dataclass(eq=False)
class Hold:
    """One :meth:`FakeAPIServer.hold`."""

    server: FakeAPIServer
    pattern: re.Pattern[str]
    through: int = 0
    """Watch events up to this resourceVersion go out even while held."""

    def release(self) -> None:
        self.server._release(self, None)

    def release_through(self, resource_version: str) -> None:
        """Let watch events up to ``resource_version`` go out; hold the rest."""
        self.server._release(self, int(resource_version))

    def __enter__(self) -> Hold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def running(cluster: fake.FakeCluster | None = None) -> Iterator[FakeAPIServer]:
    server = FakeAPIServer(cluster)
    server.start()
    try:
        yield server
    finally:
        server.close()


# --- request handling -----------------------------------------------------------------------


class _Reply(Exception):
    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


def _make_handler(server: FakeAPIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        api = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    api: FakeAPIServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        if self.api._stopping.is_set():  # accepted while the server was going down
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        # headers and body go out in separate writes: without this, Nagle's algorithm and
        # the client's delayed ACK add ~40 ms to every answer
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.api._lock:
            self.api._connections.add(self.connection)

    def finish(self) -> None:
        with self.api._lock:
            self.api._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read FakeAPIServer.requests instead of stderr

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        query = parse_qs(split.query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            body = msgspec.json.decode(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = Request(
            method, split.path, query, content_type, body, self.headers.get("Authorization") or ""
        )
        self.api.log(request)
        status, retry_after, delay = self.api._fault_for(method, split.path)
        self.api._wait_unheld(split.path)
        if delay:
            time.sleep(delay)
        try:
            if status is not None:
                headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
                error = kube_errors.from_status(
                    status, "injected fault", what=f"{method} {split.path}"
                )
                raise _Reply(status, fake.status_body(error), headers)
            self._route(request)
        except _Reply as reply:
            if self.api._lose(method, split.path):
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            self._send(reply.status, reply.body, reply.headers)
        except errors.KubeAPIError as exc:
            self._send(exc.status or 500, fake.status_body(exc))

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        payload = msgspec.json.encode(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    # --- routing ------------------------------------------------------------------------
    def _route(self, request: Request) -> None:
        cluster = self.api.cluster
        if match := _NODE.match(request.path):
            name, sub = match.group("name"), match.group("sub") or ""
            if request.method == "GET" and name is None:
                self._list_or_watch(request, "nodes", None, "NodeList")
            elif request.method == "GET":
                raise _Reply(200, cluster.get("nodes", "", name))
            elif request.method == "POST" and name is None:
                raise _Reply(201, cluster.create("nodes", _object_body(request)))
            elif request.method == "PATCH" and name is not None:
                raise _Reply(200, self._patch(request, "nodes", "", name, sub))
            elif request.method == "DELETE" and name is not None and not sub:
                options = request.body if isinstance(request.body, dict) else {}
                uid = (options.get("preconditions") or {}).get("uid")
                dry_run = request.param("dryRun") == "All"
                raise _Reply(200, cluster.delete("nodes", "", name, uid=uid, dry_run=dry_run))
            else:
                raise _Reply(405, _status(405, "MethodNotAllowed", "method not allowed"))
            return
        if match := _PODS.match(request.path):
            ns, name, sub = match.group("ns"), match.group("name"), match.group("sub") or ""
            if request.method == "GET" and name is None:
                self._list_or_watch(request, "pods", ns, "PodList")
            elif request.method == "GET" and not sub:
                raise _Reply(200, cluster.get("pods", ns or "", name))
            elif request.method == "POST" and name is None and ns:
                raise _Reply(201, cluster.create("pods", _object_body(request), ns))
            elif request.method == "POST" and sub == "eviction" and ns:
                self._evict(request, ns, name)
            elif request.method == "POST" and sub == "binding" and ns:
                self._bind(request, ns, name)
            elif request.method == "DELETE" and name and ns and not sub:
                raise _Reply(200, self._delete(request, ns, name))
            elif request.method == "PATCH" and name and ns:
                raise _Reply(200, self._patch(request, "pods", ns, name, sub))
            else:
                raise _Reply(405, _status(405, "MethodNotAllowed", "method not allowed"))
            return
        if match := _EVENTS.match(request.path):
            ns, name = match.group("ns"), match.group("name")
            if request.method == "GET" and name is None:
                self._list_or_watch(request, "events", ns, "EventList")
            elif request.method == "GET":
                raise _Reply(200, cluster.get("events", ns or "", name))
            elif request.method == "POST" and ns and name is None:
                raise _Reply(201, cluster.create("events", _object_body(request), ns))
            elif request.method == "PATCH" and ns and name:
                raise _Reply(200, self._patch(request, "events", ns, name, ""))
            else:
                raise _Reply(405, _status(405, "MethodNotAllowed", "method not allowed"))
            return
        if match := _PDBS.match(request.path):
            ns, name = match.group("ns"), match.group("name")
            if request.method == "GET" and name is None:
                self._list_or_watch(request, "poddisruptionbudgets", ns, "PodDisruptionBudgetList")
            elif request.method == "GET" and ns:
                raise _Reply(200, cluster.get("poddisruptionbudgets", ns, name))
            else:
                raise _Reply(405, _status(405, "MethodNotAllowed", "method not allowed"))
            return
        if match := _STORAGE.match(request.path):
            ns, name, kind = match.group("ns"), match.group("name"), match.group("kind")
            scoped = kind in fake.CLUSTER_SCOPED
            if request.method == "GET" and name is None:
                list_kind = fake.KIND_NAMES[kind][1] + "List"
                self._list_or_watch(request, kind, None if scoped else ns, list_kind)
            elif request.method == "GET":
                raise _Reply(200, cluster.get(kind, "" if scoped else ns or "", name))
            elif request.method == "POST" and name is None and (scoped or ns):
                raise _Reply(201, cluster.create(kind, _object_body(request), ns or ""))
            elif request.method == "PUT" and name and (scoped or ns):
                body = _object_body(request)
                raise _Reply(200, cluster.replace(kind, "" if scoped else ns or "", name, body))
            else:
                raise _Reply(405, _status(405, "MethodNotAllowed", "method not allowed"))
            return
        if match := _RESOURCES.match(request.path):
            self._resource(request, match)
            return
        if match := _LEASES.match(request.path):
            ns, name = match.group("ns"), match.group("name")
            if request.method == "GET" and name is None:
                self._list_or_watch(request, "leases", ns, "LeaseList")
            elif request.method == "GET" and ns:
                raise _Reply(200, cluster.get("leases", ns, name))
            elif request.method == "POST" and ns and name is None:
                raise _Reply(201, cluster.create("leases", _object_body(request), ns))
            elif request.method == "PUT" and ns and name:
                raise _Reply(200, cluster.replace("leases", ns, name, _object_body(request)))
            else:
                raise _Reply(405, _status(405, "MethodNotAllowed", "method not allowed"))
            return
        if (
            review := self.api.cluster.reviews.answer(request.method, request.path, request.body)
        ) is not None:
            raise _Reply(*review)
        raise _Reply(
            404,
            _status(404, "NotFound", f"the server could not find {request.path}"),
        )

    def _resource(self, request: Request, match: re.Match[str]) -> None:
        """resource.k8s.io/v1: list, watch, get, create, PUT (the object, or its status:
        a status PUT changes only the status, an object PUT keeps the stored status, as
        kube-apiserver's status subresource does) and status patches."""
        cluster = self.api.cluster
        ns, name, kind = match.group("ns"), match.group("name"), match.group("kind")
        sub = match.group("sub") or ""
        scoped = kind in fake.CLUSTER_SCOPED
        where = "" if scoped else ns or ""
        if request.method == "GET" and name is None:
            list_kind = fake.KIND_NAMES[kind][1] + "List"
            self._list_or_watch(request, kind, None if scoped else ns, list_kind)
        elif request.method == "GET" and not sub:
            raise _Reply(200, cluster.get(kind, where, name))
        elif request.method == "POST" and name is None and (scoped or ns):
            raise _Reply(201, cluster.create(kind, _object_body(request), ns or ""))
        elif request.method == "PUT" and name and (scoped or ns):
            body = dict(_object_body(request))
            current = cluster.get(kind, where, name)
            if sub:
                merged = dict(current)
                merged["status"] = body.get("status") or {}
                merged["metadata"] = {
                    **current["metadata"],
                    "resourceVersion": (body.get("metadata") or {}).get("resourceVersion"),
                }
                body = merged
            elif "status" in current:
                body["status"] = current["status"]
            raise _Reply(200, cluster.replace(kind, where, name, body))
        elif request.method == "PATCH" and name and sub and (scoped or ns):
            raise _Reply(200, self._patch(request, kind, where, name, sub))
        elif request.method == "DELETE" and name and not sub and (scoped or ns):
            raise _Reply(200, self._delete(request, where, name, kind))
        else:
            raise _Reply(405, _status(405, "MethodNotAllowed", "method not allowed"))

    def _patch(self, request: Request, kind: str, ns: str, name: str, sub: str) -> Any:
        try:
            patch_type = fake.PatchType(request.content_type)
        except ValueError:
            raise _Reply(
                415,
                _status(415, "UnsupportedMediaType", f"unsupported patch {request.content_type}"),
            ) from None
        return self.api.cluster.patch(
            kind,
            ns,
            name,
            request.body,
            patch_type=patch_type,
            subresource=sub,
            dry_run=request.param("dryRun") == "All",
        )

    def _delete(self, request: Request, ns: str, name: str, kind: str = "pods") -> Any:
        options = request.body if isinstance(request.body, dict) else {}
        grace = options.get("gracePeriodSeconds")
        if grace is None and request.param("gracePeriodSeconds") is not None:
            grace = int(request.param("gracePeriodSeconds") or 0)
        uid = (options.get("preconditions") or {}).get("uid")
        return self.api.cluster.delete(
            kind,
            ns,
            name,
            grace_period_seconds=grace,
            uid=uid,
            dry_run=request.param("dryRun") == "All",
        )

    def _evict(self, request: Request, ns: str, name: str) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        if body.get("kind", "Eviction") != "Eviction":
            raise _Reply(400, _status(400, "BadRequest", "expected an Eviction body"))
        if (body.get("metadata") or {}).get("name", name) != name:
            raise _Reply(400, _status(400, "BadRequest", "name in URL and body differ"))
        self.api.cluster.evict(ns, name, body, dry_run=request.param("dryRun") == "All")
        raise _Reply(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})

    def _bind(self, request: Request, ns: str, name: str) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        if body.get("kind", "Binding") != "Binding":
            raise _Reply(400, _status(400, "BadRequest", "expected a Binding body"))
        meta = body.get("metadata") or {}
        if meta.get("name", name) != name:
            raise _Reply(400, _status(400, "BadRequest", "name in URL and body differ"))
        node = (body.get("target") or {}).get("name")
        if not node:
            raise _Reply(422, _status(422, "Invalid", "target.name: Required value"))
        self.api.cluster.bind(ns, name, uid=meta.get("uid") or None, node_name=node)
        raise _Reply(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})

    def _list_or_watch(self, request: Request, kind: str, ns: str | None, list_kind: str) -> None:
        field_selector = request.param("fieldSelector") or ""
        label_selector = request.param("labelSelector") or ""
        if request.param("watch") in ("true", "1"):
            self._watch(request, kind, ns, field_selector, label_selector)
            return
        token = request.param("continue") or ""
        if token:
            with self.api._lock:
                snapshot = self.api.continues.pop(token, None)
            if snapshot is None and not token.startswith(_CONTINUE):
                raise _Reply(400, _status(400, "BadRequest", "invalid continue token: not valid"))
            if snapshot is None:
                raise _Reply(410, _status(410, "Expired", "the continue token has expired"))
            resource_version, items = snapshot
        else:
            listed = self.api.cluster.list(
                kind, ns, field_selector=field_selector, label_selector=label_selector
            )
            resource_version, items = listed.resource_version, list(listed.items)
        metadata: dict[str, Any] = {"resourceVersion": resource_version}
        limit = int(request.param("limit") or 0)
        at_any_version = not token and request.param("resourceVersion") == "0"
        if 0 < limit < len(items) and not at_any_version:
            items, rest = items[:limit], items[limit:]
            with self.api._lock:
                token = f"{_CONTINUE}{resource_version}-{len(self.api.continues)}-{id(rest)}"
                self.api.continues[token] = (resource_version, rest)
            metadata.update({"continue": token, "remainingItemCount": len(rest)})
        raise _Reply(
            200, {"kind": list_kind, "apiVersion": "v1", "metadata": metadata, "items": items}
        )

    def _watch(
        self, request: Request, kind: str, ns: str | None, field_selector: str, label_selector: str
    ) -> None:
        timeout = request.param("timeoutSeconds")
        initial_events = self._initial_events(request)
        stop = threading.Event()
        events = self.api.cluster.watch(
            kind,
            ns,
            resource_version=request.param("resourceVersion") or "",
            field_selector=field_selector,
            label_selector=label_selector,
            timeout_seconds=float(timeout) if timeout else None,
            allow_bookmarks=request.param("allowWatchBookmarks") == "true",
            stop=stop,
            send_initial_events=initial_events,
        )
        try:
            self.api.cluster.check_watch_version(request.param("resourceVersion") or "")
        except kube_errors.Gone as exc:
            if self.api.watch_gone_as_status:
                raise _Reply(410, fake.status_body(exc)) from None
            self._start_stream()
            self._chunk({"type": "ERROR", "object": fake.status_body(exc)})
            self._end_stream()
            return
        self._start_stream()
        watcher = threading.Thread(target=self._watch_peer, args=(stop,), daemon=True)
        watcher.start()
        try:
            for event in events:
                if initial_events is None and not self.api.watch_list and _ends_initial(event):
                    continue  # not defaulted to WatchList: the initial events, no bookmark
                self.api._wait_unheld(request.path, event.resource_version)
                self._chunk({"type": event.type.value, "object": event.object})
        except kube_errors.Gone as exc:
            self._chunk({"type": "ERROR", "object": fake.status_body(exc)})
        except OSError:
            stop.set()
            self.close_connection = True
            return
        finally:
            stop.set()
        with contextlib.suppress(OSError):
            self._end_stream()

    def _initial_events(self, request: Request) -> bool | None:
        """A watch's ``sendInitialEvents``, validated as kube-apiserver's
        ``validateWatchOptions`` does (422 Invalid): it needs ``resourceVersionMatch``
        NotOlderThan, which needs it, and the WatchList feature. None: not asked (the
        cluster defaults it from the resourceVersion)."""
        asked = request.param("sendInitialEvents")
        match = request.param("resourceVersionMatch")
        problems = []
        if asked is not None and match != "NotOlderThan":
            problems.append("resourceVersionMatch: sendInitialEvents requires NotOlderThan")
        if asked is not None and not self.api.watch_list:
            problems.append("sendInitialEvents: forbidden unless the WatchList feature is on")
        if match and asked is None:
            problems.append("resourceVersionMatch: forbidden for watch without sendInitialEvents")
        if problems:
            raise _Reply(422, _status(422, "Invalid", "; ".join(problems)))
        return None if asked is None else asked == "true"

    def _watch_peer(self, stop: threading.Event) -> None:
        """End the watch when the client hangs up or the server stops."""
        sock = self.connection
        while not stop.is_set():
            if self.api._stopping.is_set():
                stop.set()
                return
            try:
                readable, _, _ = select.select([sock], [], [], 0.05)
                if readable and not sock.recv(1, socket.MSG_PEEK):
                    stop.set()
                    return
            except (OSError, ValueError):
                stop.set()
                return

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, event: Any) -> None:
        data = msgspec.json.encode(event) + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _ends_initial(event: client.WatchEvent) -> bool:
    annotations = (event.object.get("metadata") or {}).get("annotations") or {}
    return (
        event.type is client.WatchEventType.BOOKMARK
        and annotations.get(client.INITIAL_EVENTS_END) == "true"
    )


def _object_body(request: Request) -> dict[str, Any]:
    if not isinstance(request.body, dict):
        raise _Reply(400, _status(400, "BadRequest", "expected a JSON object"))
    return request.body


__all__ = ["FakeAPIServer", "Request", "running"]
