"""The real :class:`~nodeagent.kube.client.KubeClient`, over the official ``kubernetes``
client.

Requests are built by ``kubernetes.client.CoreV1Api`` (URLs, query parameters, auth,
TLS, content types) but answers are read raw (``_preload_content=False``) and parsed as
plain JSON: turning each pod into generated models is the slowest thing the library
does, and the agent reads a dozen fields. The two calls made once per scheduled pod,
the binding and the event, skip the generated methods and urllib3 altogether: their
bodies are serialised to JSON bytes once and POSTed by :class:`KeepAlive`, a handful of
persistent HTTP/1.1 connections (``http.client``, one per request in flight) with the
ApiClient's host, TLS settings, default headers and bearer token. Through the generated
method a binding cost about 240 us of client CPU, through urllib3's pool directly 120,
through ``http.client`` 65 (docs/scheduler.md, "Throughput and CPU per pod"). Answers
are decoded with msgspec (a 10,000-pod list: 23 ms, against 31 with :mod:`json`).

Lists and watches, what every informer starts with, skip the generated methods too
(GETs through the ApiClient's pool, :meth:`HTTPKubeClient._get`): importing the
generated API modules costs 0.2-0.4 s of CPU, on the scheduler's start-up path before
its first binding. The informers' lists are streamed as client-go's reflector streams
them (:meth:`HTTPKubeClient.watch_list`: a watch that begins with the current state,
served by the watch cache); where the API server does not stream, they are read in
pages of 500 as client-go's pager reads them, by a thread that starts at once and
reads ahead, so the informer parses page n while the API server builds page n+1
(:meth:`HTTPKubeClient.list_pages`).

Every call goes through one path (:meth:`HTTPKubeClient._call`):

1. take a token from the client-side bucket (bounded QPS/burst);
2. send, with connect/read timeouts;
3. translate ``ApiException`` and urllib3/socket failures into
   :mod:`nodeagent.kube.errors` (``raise ... from`` keeps the cause);
4. retry faults with backoff and jitter (:mod:`nodeagent.kube.retry`), reporting each
   request and retry to an :class:`~nodeagent.kube.client.ApiCallObserver`.

Watches are not retried here: the informer (:mod:`nodeagent.kube.informer`) owns
reconnection, because only it knows the resourceVersion to resume from.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import json
import os
import queue
import select
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import kubernetes.client
import kubernetes.config
import msgspec
import urllib3
from kubernetes.client.exceptions import ApiException

from nodeagent.base import errors
from nodeagent.base.clock import Clock, RealClock
from nodeagent.kube import client, ratelimit, retry, writes
from nodeagent.kube import errors as kube_errors
from nodeagent.kube.address import Address

T = TypeVar("T")

USER_AGENT = "nodeagent"

JSON = "application/json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

DEFAULT_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds for ordinary requests."""

LIST_PAGE_SIZE = 500
"""Objects per page of a list (client-go's pager asks for 500)."""


def load_configuration(
    kubeconfig: Path | None = None, *, context: str | None = None
) -> kubernetes.client.Configuration:
    """Cluster access: ``kubeconfig`` if given, else the in-cluster service account when
    running in a pod, else ``$KUBECONFIG`` / ``~/.kube/config``.

    Raises :class:`nodeagent.base.errors.ConfigError` naming what was tried."""
    configuration = kubernetes.client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig) if kubeconfig is not None else None,
                context=context,
                client_configuration=configuration,
            )
    except (kubernetes.config.ConfigException, OSError, ValueError, TypeError) as exc:
        source = str(kubeconfig) if kubeconfig else "in-cluster config or ~/.kube/config"
        raise errors.ConfigError(
            f"cannot load Kubernetes client configuration from {source}: {exc}",
            field="kubeconfig",
        ) from exc
    return configuration


def cluster_configured(kubeconfig: Path | None = None) -> bool:
    """Whether a cluster can be reached by configuration at all (for standalone mode)."""
    if kubeconfig is not None or os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    default = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    return any(Path(p).is_file() for p in default.split(os.pathsep) if p)


@dataclass(frozen=True, slots=True)
class ConnectionSpec:
    """How to reach the API server, as plain values: unlike a client or its
    Configuration, it pickles, so a process of its own (the scheduler's binding process)
    connects with the very settings of the process that started it."""

    kubeconfig: Path | None = None
    """None: in-cluster, else ``$KUBECONFIG`` / ``~/.kube/config`` (:func:`load_configuration`)."""
    qps: float = 5.0
    burst: int = 10
    retry_policy: retry.RetryPolicy = retry.DEFAULT
    timeout: tuple[float, float] = DEFAULT_TIMEOUT
    pool_size: int | None = None

    def resolve(self) -> tuple[Address, Callable[[], dict[str, str]]]:
        """The API server as plain values, and what reads the credentials' headers
        (asked again from time to time: a token that rotates), for a process that
        imports no ``kubernetes`` (the binding process)."""
        configuration = load_configuration(self.kubeconfig)
        return address(configuration), functools.partial(credentials, configuration)

    def connect(self, observer: client.ApiCallObserver | None = None) -> HTTPKubeClient:
        return HTTPKubeClient.connect(
            load_configuration(self.kubeconfig),
            qps=self.qps,
            burst=self.burst,
            retry_policy=self.retry_policy,
            observer=observer,
            timeout=self.timeout,
            pool_size=self.pool_size,
        )


def _address(configuration: kubernetes.client.Configuration) -> Address:
    url = urllib.parse.urlsplit(configuration.host)
    ca_data = configuration.ca_cert_data
    https = url.scheme == "https"
    return Address(
        host=url.hostname or "localhost",
        port=url.port or (443 if https else 80),
        https=https,
        prefix=url.path.rstrip("/"),
        ca_file=configuration.ssl_ca_cert,
        ca_data=ca_data.decode() if isinstance(ca_data, bytes) else ca_data,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=bool(configuration.verify_ssl),
        check_hostname=configuration.assert_hostname is not False,
        server_hostname=configuration.tls_server_name or None,
        headers=(("User-Agent", USER_AGENT),),
    )


def address(configuration: kubernetes.client.Configuration) -> Address:
    """``configuration``'s API server as plain values (for the binding process).
    Raises ConfigError for what :mod:`~nodeagent.kube.pipeline` does not speak (an HTTP
    proxy)."""
    if configuration.proxy:
        raise errors.ConfigError(
            f"the binding process cannot reach the API server through a proxy "
            f"({configuration.proxy}); bind from the scheduler's own process instead",
            field="proxy",
        )
    if urllib.parse.urlsplit(configuration.host).scheme not in ("http", "https"):
        raise errors.ConfigError(
            f"API server URL {configuration.host!r}: the scheme must be http or https",
            field="server",
        )
    return _address(configuration)


def credentials(configuration: kubernetes.client.Configuration) -> dict[str, str]:
    """The credentials' headers now: the library's own answer (a kubeconfig token, an
    in-cluster token re-read when it rotates, an exec plugin's)."""
    settings: Mapping[str, Any] = configuration.auth_settings()
    return {
        str(setting["key"]): str(setting["value"])
        for setting in settings.values()
        if setting["in"] == "header" and setting["value"]
    }


class Headers(Protocol):
    def get(self, name: str, /) -> str | None: ...


class Response(Protocol):
    """What :meth:`HTTPKubeClient._send` reads of an answer: urllib3's response, or
    :class:`Answer` from :class:`KeepAlive`."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Headers: ...

    @property
    def data(self) -> bytes: ...

    def release_conn(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer read whole by :class:`KeepAlive` (its connection is already free)."""

    status: int
    headers: Headers
    data: bytes

    def release_conn(self) -> None:
        """Nothing to release: the body was read before the connection went back."""


class KeepAlive:
    """Persistent HTTP/1.1 connections to the API server for the POSTs made once per
    scheduled pod (bindings, events): ``http.client`` connections, each used by one
    request at a time and kept for the next (as many as requests were ever in flight at
    once), with the ApiClient's host, TLS settings, default headers and bearer token.

    urllib3's pool does the same per request with far more Python: a Timeout cloned, a
    URL parsed, a header dict built, a response object with its decoders. An idle
    connection the server has closed is noticed before use (it reads as ready) and
    replaced; a connection that fails is closed, never reused, and the failure goes to
    the caller's retry policy (:meth:`HTTPKubeClient._call`), not a loop of its own.

    :meth:`for_client` answers None for what it does not speak (a proxy, a TLS server
    name other than the host's): those POSTs go through urllib3's pool instead."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        timeout: tuple[float, float],
        context: ssl.SSLContext | None,
    ) -> None:
        configuration = api_client.configuration
        url = urllib.parse.urlsplit(configuration.host)
        self._configuration = configuration
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._context = context
        self._timeout = timeout
        self._headers = {
            **api_client.default_headers,
            "Accept": "application/json",
            "Content-Type": "application/json",
        }
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def for_client(
        cls, api_client: kubernetes.client.ApiClient, timeout: tuple[float, float]
    ) -> KeepAlive | None:
        configuration = api_client.configuration
        if configuration.proxy or configuration.tls_server_name:
            return None
        scheme = urllib.parse.urlsplit(configuration.host).scheme
        if scheme not in ("http", "https"):
            return None
        return cls(api_client, timeout, _address(configuration).tls())

    def _connection(self) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                if not self._idle:
                    break
                idle = self._idle.pop()
            if idle.sock is not None and not _dropped(idle.sock):
                return idle
            idle.close()  # the server closed it while idle (or sent what nobody asked)
        connect = self._timeout[0]
        conn: http.client.HTTPConnection
        if self._context is not None:
            conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=connect, context=self._context
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=connect)
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(self._timeout[1])  # connected: reads wait this long
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def post(self, path: str, body: bytes) -> Answer:
        """POST ``body`` (JSON) to ``path`` and read the whole answer. Raises OSError or
        :class:`http.client.HTTPException` when no answer came."""
        return self.send("POST", path, body)

    def send(self, method: str, path: str, body: bytes, content_type: str = JSON) -> Answer:
        """:meth:`post` with another method (a PUT of a ResourceClaim) or body type (a
        strategic merge patch)."""
        # asked per request, as the ApiClient does
        headers = {**self._headers, **credentials(self._configuration)}
        if content_type != JSON:
            headers["Content-Type"] = content_type
        conn = self._connection()
        try:
            conn.request(method, self._prefix + path, body, headers)
            response = conn.getresponse()
            data = response.read()
        except BaseException:
            conn.close()
            raise
        with self._lock:
            keep = not (response.will_close or self._closed)
            if keep:
                self._idle.append(conn)
        if not keep:
            conn.close()
        return Answer(response.status, response.msg, data)

    def close(self) -> None:
        """Close the idle connections now, and those in use when their answer is read."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class HTTPKubeClient:
    """:class:`~nodeagent.kube.client.KubeClient` over HTTP. Thread-safe."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        *,
        limiter: ratelimit.TokenBucket | None = None,
        retry_policy: retry.RetryPolicy = retry.DEFAULT,
        observer: client.ApiCallObserver | None = None,
        clock: Clock | None = None,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    ) -> None:
        self._api = api_client
        self._clock = clock or RealClock()
        self._limiter = limiter or ratelimit.TokenBucket(5.0, 10, clock=self._clock)
        self._retry = retry_policy
        self._observer = observer or client.NullObserver()
        self._timeout = timeout
        self._keepalive = KeepAlive.for_client(api_client, timeout)

    @classmethod
    def connect(
        cls,
        configuration: kubernetes.client.Configuration,
        *,
        qps: float = 5.0,
        burst: int = 10,
        retry_policy: retry.RetryPolicy = retry.DEFAULT,
        observer: client.ApiCallObserver | None = None,
        clock: Clock | None = None,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        pool_size: int | None = None,
    ) -> HTTPKubeClient:
        """``pool_size``: connections kept to the API server (one per concurrent caller:
        the scheduler's binding workers plus its watches)."""
        clock = clock or RealClock()
        if pool_size is not None:
            configuration.connection_pool_maxsize = pool_size
        # the library's own urllib3 retries would hide faults from our policy and metrics
        configuration.retries = False
        api_client = kubernetes.client.ApiClient(configuration)
        api_client.user_agent = USER_AGENT
        return cls(
            api_client,
            limiter=ratelimit.TokenBucket(qps, burst, clock=clock),
            retry_policy=retry_policy,
            observer=observer,
            clock=clock,
            timeout=timeout,
        )

    # The generated API classes are built on first use: importing them costs 0.4 s of
    # CPU (core_v1_api is 30,000 lines), and a client that only binds and records
    # events (the scheduler's binding process) never needs them.
    @functools.cached_property
    def _core(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(self._api)

    @functools.cached_property
    def _resource(self) -> kubernetes.client.ResourceV1Api:
        return kubernetes.client.ResourceV1Api(self._api)

    @functools.cached_property
    def _coordination(self) -> kubernetes.client.CoordinationV1Api:
        return kubernetes.client.CoordinationV1Api(self._api)

    def close(self) -> None:
        if self._keepalive is not None:
            self._keepalive.close()
        self._api.close()  # type: ignore[no-untyped-call]

    # --- the one request path ------------------------------------------------------------
    def _send(
        self,
        verb: str,
        resource: str,
        what: str,
        request: Any,
        *,
        eviction: bool = False,
    ) -> Response:
        """One attempt: token, request, translation. Returns the unread response.

        An Eviction takes no token: the requests before it (events, node patches, their
        retries) must not make it wait, and the evictor caps evictions itself
        (``maxEvictionsPerInterval``)."""
        if not eviction:
            self._limiter.acquire()
        try:
            response: Response = request()
        except ApiException as exc:
            self._observer.api_request(verb, resource, str(exc.status))
            headers = exc.headers or {}
            raise kube_errors.from_status(
                int(exc.status or 0) or 500,
                exc.body,
                what=what,
                retry_after_header=headers.get("Retry-After"),
                eviction=eviction,
            ) from exc
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
            self._observer.api_request(verb, resource, "error")
            raise kube_errors.Unavailable(f"{what}: no answer: {exc}") from exc
        self._observer.api_request(verb, resource, str(response.status))
        if not 200 <= response.status <= 299:
            # only a raw request (:meth:`_post_json`) gets here: the generated methods
            # raise ApiException for these
            try:
                body = response.data
            except (urllib3.exceptions.HTTPError, OSError):
                body = b""
            finally:
                response.release_conn()
            raise kube_errors.from_status(
                response.status,
                body,
                what=what,
                retry_after_header=response.headers.get("Retry-After"),
                eviction=eviction,
            )
        return response

    def _call(
        self,
        verb: str,
        resource: str,
        what: str,
        request: Any,
        *,
        eviction: bool = False,
        decode: bool = True,
    ) -> client.KubeObject:
        """``decode=False``: the answer is read (the connection goes back to the pool)
        but not parsed, for calls whose answer nobody reads."""

        def attempt() -> client.KubeObject:
            response = self._send(verb, resource, what, request, eviction=eviction)
            try:
                data = response.data
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise kube_errors.Unavailable(f"{what}: answer cut short: {exc}") from exc
            finally:
                response.release_conn()
            if not data or not decode:
                return {}
            try:
                document = msgspec.json.decode(data)
            except msgspec.DecodeError as exc:
                raise kube_errors.Unavailable(f"{what}: answer is not JSON") from exc
            return document if isinstance(document, dict) else {}

        def on_retry(error: BaseException, delay: float) -> None:
            self._observer.api_retry(verb, resource, type(error).__name__)

        return retry.call(attempt, self._retry, sleep=self._clock.sleep, on_retry=on_retry)

    def _post_json(self, path: str, body: bytes) -> Callable[[], Response]:
        """A POST of an already serialised JSON ``body`` to ``path``, for the hot calls
        (bindings, events): over :class:`KeepAlive`'s connections, or (a proxy, a TLS
        server name) the ApiClient's own pool, without the generated method's argument
        validation and request model. Non-2xx answers are translated by :meth:`_send`."""
        return self._json_request("POST", path, body)

    def _json_request(
        self, method: str, path: str, body: bytes, content_type: str = JSON
    ) -> Callable[[], Response]:
        """:meth:`_post_json` for any method (the claims DynamicResources writes once per
        pod: a generated model costs about 1 ms per claim to build and serialise) and
        body type (``content_type``: a strategic merge patch, the scheduler's status
        writes, which would otherwise import the generated CoreV1Api module, 0.2-0.4 s
        of CPU, under the scheduling loop's first unschedulable pod)."""
        keepalive = self._keepalive
        if keepalive is not None:
            return functools.partial(keepalive.send, method, path, body, content_type)
        timeout = urllib3.Timeout(connect=self._timeout[0], read=self._timeout[1])

        def request() -> urllib3.BaseHTTPResponse:
            _, url, headers, _, _ = self._api.param_serialize(
                method,
                path,
                header_params={"Accept": JSON, "Content-Type": content_type},
                auth_settings=["BearerToken"],
            )
            response: urllib3.BaseHTTPResponse = self._api.rest_client.pool_manager.request(
                method, url, body=body, headers=headers, timeout=timeout, preload_content=False
            )
            return response

        return request

    # --- KubeClient -----------------------------------------------------------------------
    def get_node(self, name: str) -> client.KubeObject:
        return self._call(
            "get",
            "nodes",
            f"get node {name}",
            lambda: self._core.read_node(
                name, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        return self._call(
            "patch",
            "nodes",
            f"patch node {name}",
            lambda: self._core.patch_node(
                name,
                dict(patch),
                _content_type="application/strategic-merge-patch+json",
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        return self._call(
            "patch",
            "nodes/status",
            f"patch node {name} status",
            lambda: self._core.patch_node_status(
                name,
                dict(patch),
                _content_type="application/strategic-merge-patch+json",
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def _get(self, path: str, query: Mapping[str, str], *, read_timeout: float) -> Any:
        """A GET of ``path`` (a collection: a list or a watch) through the ApiClient's pool,
        its answer unread: without the generated ``list_*`` methods, whose modules
        (core_v1_api is 30,000 lines, and the models it pulls in) cost 0.2-0.4 s of CPU to
        import, on the start-up's critical path of every informer."""
        timeout = urllib3.Timeout(connect=self._timeout[0], read=read_timeout)

        def request() -> urllib3.BaseHTTPResponse:
            _, url, headers, _, _ = self._api.param_serialize(
                "GET",
                path,
                query_params=[(k, v) for k, v in query.items() if v],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response: urllib3.BaseHTTPResponse = self._api.rest_client.pool_manager.request(
                "GET", url, headers=headers, timeout=timeout, preload_content=False
            )
            return response

        return request

    def _list(self, resource: str, what: str, path: str, **query: str) -> client.ObjectList:
        """Every page of the collection, as one list."""
        items: list[client.KubeObject] = []
        resource_version = ""
        for page in self._pages(resource, what, path, query):
            items.extend(page.items)
            resource_version = page.resource_version
        return client.ObjectList(tuple(items), resource_version)

    def _pages(
        self, resource: str, what: str, path: str, query: Mapping[str, str]
    ) -> Iterator[client.ObjectList]:
        """The collection in pages of :data:`LIST_PAGE_SIZE` (client-go's pager size), each
        asked for with the previous page's ``continue`` token: all of one consistent
        snapshot, whose resourceVersion every page carries. Each page is fetched by a
        thread of its own while the caller handles the one before, so the API server
        serialises page n+1 while this process parses page n (one unpaged list of 10,000
        pods makes the server build 40 MB before the first byte arrives). An expired
        token (the listing took longer than etcd's compaction window) raises
        :class:`~nodeagent.kube.errors.Gone`, which makes an informer list again."""
        token = ""
        while True:
            page = dict(query, limit=str(LIST_PAGE_SIZE), **{"continue": token})
            document = self._call(
                "list",
                resource,
                what,
                self._get(path, page, read_timeout=self._timeout[1]),
            )
            metadata = document.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            yield client.ObjectList(
                tuple(document.get("items") or ()), str(metadata.get("resourceVersion", ""))
            )
            if not token:
                return

    def list_pages(
        self, collection: client.Collection, *, field_selector: str = "", label_selector: str = ""
    ) -> Iterator[client.ObjectList]:
        """``collection`` page by page, fetched from now on by a thread of its own while
        the caller handles the pages already in (:class:`~nodeagent.kube.informer.Informer`'s
        first list: its handlers parse page n while the server builds page n+1)."""
        query = {"fieldSelector": field_selector, "labelSelector": label_selector}
        resource = collection.resource
        return _prefetching(
            self._pages(resource, f"list {resource}", collection.path, query), f"list-{resource}"
        )

    def watch_list(
        self,
        collection: client.Collection,
        *,
        field_selector: str = "",
        label_selector: str = "",
        timeout_seconds: int = 1800,
    ) -> client.WatchStream:
        """``collection`` streamed as a watch from its current state
        (:class:`~nodeagent.kube.client.StreamingLister`): no resourceVersion, so the
        state is a consistent read, served from the watch cache once it is as fresh as
        etcd. One request instead of a page each 500 objects, and the API server
        writes the objects as it goes instead of building a page before its first byte."""
        resource = collection.resource
        return self._watch(
            resource,
            f"watch-list {resource} {field_selector}".strip(),
            collection.path,
            "",
            timeout_seconds,
            fieldSelector=field_selector,
            labelSelector=label_selector,
            sendInitialEvents="true",
            resourceVersionMatch="NotOlderThan",
        )

    def _watch(
        self,
        resource: str,
        what: str,
        path: str,
        resource_version: str,
        timeout_seconds: int,
        **query: str,
    ) -> client.WatchStream:
        """Open a watch of the collection at ``path`` (selectors in ``query``)."""
        what = f"{what} from {resource_version}"
        response = self._send(
            "watch",
            resource,
            what,
            self._get(
                path,
                {
                    **query,
                    "watch": "true",
                    "allowWatchBookmarks": "true",
                    "resourceVersion": resource_version,
                    "timeoutSeconds": str(timeout_seconds),
                },
                # the server ends the watch; the read timeout only catches a dead peer
                read_timeout=timeout_seconds + 30.0,
            ),
        )
        assert isinstance(response, urllib3.BaseHTTPResponse)  # never a KeepAlive answer
        return _HTTPWatch(response, what)

    def list_pods(self, *, field_selector: str = "", label_selector: str = "") -> client.ObjectList:
        return self._list(
            "pods",
            f"list pods {field_selector}".strip(),
            client.Collection.PODS.path,
            fieldSelector=field_selector,
            labelSelector=label_selector,
        )

    def watch_pods(
        self,
        *,
        resource_version: str,
        field_selector: str = "",
        label_selector: str = "",
        timeout_seconds: int = 1800,
    ) -> client.WatchStream:
        return self._watch(
            "pods",
            f"watch pods {field_selector}".strip(),
            client.Collection.PODS.path,
            resource_version,
            timeout_seconds,
            fieldSelector=field_selector,
            labelSelector=label_selector,
        )

    def list_nodes(self) -> client.ObjectList:
        return self._list("nodes", "list nodes", client.Collection.NODES.path)

    def watch_nodes(
        self, *, resource_version: str, timeout_seconds: int = 1800
    ) -> client.WatchStream:
        return self._watch(
            "nodes", "watch nodes", client.Collection.NODES.path, resource_version, timeout_seconds
        )

    def list_disruption_budgets(self) -> client.ObjectList:
        path = client.Collection.DISRUPTION_BUDGETS.path
        return self._list("poddisruptionbudgets", "list poddisruptionbudgets", path)

    def watch_disruption_budgets(
        self, *, resource_version: str, timeout_seconds: int = 1800
    ) -> client.WatchStream:
        return self._watch(
            "poddisruptionbudgets",
            "watch poddisruptionbudgets",
            client.Collection.DISRUPTION_BUDGETS.path,
            resource_version,
            timeout_seconds,
        )

    def list_storage(self, kind: client.StorageKind) -> client.ObjectList:
        return self._list(kind.value, f"list {kind.value}", kind.path)

    def watch_storage(
        self, kind: client.StorageKind, *, resource_version: str, timeout_seconds: int = 1800
    ) -> client.WatchStream:
        return self._watch(
            kind.value, f"watch {kind.value}", kind.path, resource_version, timeout_seconds
        )

    def replace_storage(
        self, kind: client.StorageKind, namespace: str, name: str, body: Mapping[str, Any]
    ) -> client.KubeObject:
        what = f"replace {kind.value} {namespace + '/' if namespace else ''}{name}"
        timeout = self._timeout
        if kind is client.StorageKind.PERSISTENT_VOLUMES:

            def request() -> Any:
                return self._core.replace_persistent_volume(
                    name,
                    _model(kubernetes.client.V1PersistentVolume, body),
                    _preload_content=False,
                    _request_timeout=timeout,
                )

        elif kind is client.StorageKind.PERSISTENT_VOLUME_CLAIMS:

            def request() -> Any:
                return self._core.replace_namespaced_persistent_volume_claim(
                    name,
                    namespace,
                    _model(kubernetes.client.V1PersistentVolumeClaim, body),
                    _preload_content=False,
                    _request_timeout=timeout,
                )

        else:
            raise ValueError(f"replace_storage: {kind.value} is not written by the scheduler")
        return self._call("update", kind.value, what, request)

    def list_resources(self, kind: client.ResourceKind) -> client.ObjectList:
        return self._list(kind.value, f"list {kind.value}", kind.path)

    def watch_resources(
        self, kind: client.ResourceKind, *, resource_version: str, timeout_seconds: int = 1800
    ) -> client.WatchStream:
        return self._watch(
            kind.value, f"watch {kind.value}", kind.path, resource_version, timeout_seconds
        )

    def get_resource_claim(self, namespace: str, name: str) -> client.KubeObject:
        return self._call(
            "get",
            "resourceclaims",
            f"get resourceclaim {namespace}/{name}",
            lambda: self._resource.read_namespaced_resource_claim(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def replace_resource_claim(
        self, namespace: str, name: str, body: Mapping[str, Any], *, status: bool = False
    ) -> client.KubeObject:
        resource = "resourceclaims/status" if status else "resourceclaims"
        path = writes.resource_claim_path(namespace, name, status=status)
        return self._call(
            "update",
            resource,
            f"replace {resource} {namespace}/{name}",
            self._json_request("PUT", path, msgspec.json.encode(body)),
        )

    def patch_resource_claim_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> client.KubeObject:
        return self._call(
            "patch",
            "resourceclaims/status",
            f"patch resourceclaim {namespace}/{name} status",
            self._json_request(
                "PATCH",
                writes.resource_claim_path(namespace, name, status=True),
                msgspec.json.encode(patch),
                STRATEGIC_MERGE_PATCH,
            ),
        )

    def create_resource_claim(self, namespace: str, body: Mapping[str, Any]) -> client.KubeObject:
        return self._call(
            "create",
            "resourceclaims",
            f"create resourceclaim in {namespace}",
            self._json_request(
                "POST", writes.resource_claims_path(namespace), msgspec.json.encode(body)
            ),
        )

    def delete_resource_claim(self, namespace: str, name: str, *, uid: str) -> None:
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
        self._call(
            "delete",
            "resourceclaims",
            f"delete resourceclaim {namespace}/{name}",
            self._json_request(
                "DELETE",
                writes.resource_claim_path(namespace, name),
                msgspec.json.encode(options),
            ),
            decode=False,
        )

    def bind_pod(self, namespace: str, name: str, *, uid: str, node_name: str) -> None:
        body = writes.binding_body(namespace, name, uid=uid, node_name=node_name)
        # the answer (a Status) is not read; only faults with no answer are retried
        self._call(
            "create",
            "pods/binding",
            f"bind pod {namespace}/{name} to {node_name}",
            self._post_json(writes.binding_path(namespace, name), body),
            decode=False,
        )

    def patch_pod_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> client.KubeObject:
        return self._call(
            "patch",
            "pods/status",
            f"patch pod {namespace}/{name} status",
            self._json_request(
                "PATCH",
                writes.pod_status_path(namespace, name),
                msgspec.json.encode(patch),
                STRATEGIC_MERGE_PATCH,
            ),
        )

    def get_lease(self, namespace: str, name: str) -> client.KubeObject:
        return self._call(
            "get",
            "leases",
            f"get lease {namespace}/{name}",
            lambda: self._coordination.read_namespaced_lease(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> client.KubeObject:
        return self._call(
            "create",
            "leases",
            f"create lease in {namespace}",
            lambda: self._coordination.create_namespaced_lease(
                namespace,
                _model(kubernetes.client.V1Lease, lease),
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def replace_lease(
        self, namespace: str, name: str, lease: Mapping[str, Any]
    ) -> client.KubeObject:
        return self._call(
            "update",
            "leases",
            f"update lease {namespace}/{name}",
            lambda: self._coordination.replace_namespaced_lease(
                name,
                namespace,
                _model(kubernetes.client.V1Lease, lease),
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def evict_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None,
        uid: str | None = None,
    ) -> None:
        body = kubernetes.client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=kubernetes.client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=_delete_options(grace_period_seconds, uid),
        )
        self._call(
            "create",
            "pods/eviction",
            f"evict pod {namespace}/{name}",
            lambda: self._core.create_namespaced_pod_eviction(
                name, namespace, body, _preload_content=False, _request_timeout=self._timeout
            ),
            eviction=True,
        )

    def delete_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None,
        uid: str | None = None,
    ) -> None:
        body = _delete_options(grace_period_seconds, uid) or kubernetes.client.V1DeleteOptions()
        self._call(
            "delete",
            "pods",
            f"delete pod {namespace}/{name}",
            lambda: self._core.delete_namespaced_pod(
                name,
                namespace,
                body=body,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> client.KubeObject:
        return self._call(
            "create",
            "events",
            f"create event in {namespace}",
            self._post_json(
                writes.events_path(namespace),
                msgspec.json.encode(event),
            ),
        )

    def post_event(self, namespace: str, body: bytes) -> None:
        self._call(
            "create",
            "events",
            f"create event in {namespace}",
            self._post_json(writes.events_path(namespace), body),
            decode=False,
        )

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        return self._call(
            "patch",
            "events",
            f"patch event {namespace}/{name}",
            lambda: self._core.patch_namespaced_event(
                name,
                namespace,
                dict(patch),
                _content_type="application/strategic-merge-patch+json",
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    # --- AccessReviewClient -----------------------------------------------------------------
    def create_token_review(self, token: str) -> client.KubeObject:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        return self._call(
            "create",
            "tokenreviews",
            "review a bearer token",
            self._post_json(
                "/apis/authentication.k8s.io/v1/tokenreviews", json.dumps(body).encode()
            ),
        )

    def create_subject_access_review(self, spec: Mapping[str, Any]) -> client.KubeObject:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": dict(spec),
        }
        return self._call(
            "create",
            "subjectaccessreviews",
            f"review access of {spec.get('user', '')!r}",
            self._post_json(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews", json.dumps(body).encode()
            ),
        )


class _HTTPWatch:
    """A watch response read line by line; :meth:`close` interrupts a blocked read."""

    def __init__(self, response: urllib3.BaseHTTPResponse, what: str) -> None:
        self._response = response
        self._what = what
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[client.WatchEvent]:
        buffer = b""
        blocks = self._blocks()
        try:
            while True:
                try:
                    block = next(blocks, b"")
                except (urllib3.exceptions.HTTPError, OSError, ValueError, AttributeError) as exc:
                    if self._closed.is_set():
                        return
                    raise kube_errors.Unavailable(f"{self._what}: stream broke: {exc}") from exc
                if not block:
                    return  # the server ended the watch (timeoutSeconds), or we closed it
                buffer += block
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield self._event(line)
        finally:
            self._release()

    def _blocks(self) -> Iterator[bytes]:
        """The body as it arrives: what each read of the socket brought, unchunked. The
        API server flushes every event as a chunk of its own (a couple of kilobytes for
        a pod), and ``http.client`` returns one chunk per read, with a line read for its
        size: most of a streamed list's reading. So the body is read from the socket's
        buffer in large blocks and unchunked here, many chunks a read."""
        source = _chunked_source(self._response)
        if source is None:  # not chunked, or encoded: the library unchunks and decodes
            while not self._closed.is_set():
                block = self._response.read1(65536)
                if not block:
                    return  # the server ended the watch (timeoutSeconds)
                yield block
            return
        for block in unchunked(source.read1):
            if self._closed.is_set():
                return
            yield block

    def _event(self, line: bytes) -> client.WatchEvent:
        try:
            document = msgspec.json.decode(line)
            kind = document["type"]
            obj = document["object"]
        except (msgspec.DecodeError, KeyError, TypeError) as exc:
            raise kube_errors.Unavailable(f"{self._what}: malformed event {line[:200]!r}") from exc
        if kind == "ERROR":
            status = int(obj.get("code") or 500) if isinstance(obj, dict) else 500
            raise kube_errors.from_status(status, json.dumps(obj), what=self._what)
        try:
            event_type = client.WatchEventType(kind)
        except ValueError as exc:
            raise kube_errors.Unavailable(f"{self._what}: unknown event type {kind!r}") from exc
        return client.WatchEvent(event_type, obj)

    def close(self) -> None:
        self._closed.set()
        sock = _socket_of(self._response)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _release(self) -> None:
        try:
            self._response.close()
            self._response.release_conn()
        except (OSError, urllib3.exceptions.HTTPError):
            pass


def _chunked_source(response: urllib3.BaseHTTPResponse) -> io.BufferedReader | None:
    """The buffered socket under ``response`` when its body is chunked, not encoded, and
    not read yet (so reading it directly skips nothing); else None."""
    inner = getattr(response, "_fp", None)
    if not isinstance(inner, http.client.HTTPResponse):
        return None
    if not inner.chunked or inner.chunk_left is not None:
        return None
    if response.headers.get("Content-Encoding", "identity") != "identity":
        return None
    source = inner.fp
    return source if isinstance(source, io.BufferedReader) else None


def unchunked(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """HTTP/1.1 chunked transfer coding (RFC 9112 section 7.1) undone: ``read(n)`` gives up
    to ``n`` bytes as they arrive (b"" at the end of the stream); each block yielded is
    the data of the whole chunks one read completed. Ends at the last chunk (trailers
    are skipped); a stream that ends before it raises ValueError, as does a malformed
    chunk size."""
    pending = bytearray()
    while True:
        data = read(65536)
        if not data:
            raise ValueError("the stream ended inside its chunked body")
        pending += data
        blocks: list[bytes] = []
        start = 0
        while True:
            eol = pending.find(b"\r\n", start)
            if eol < 0:
                break
            size = int(bytes(pending[start:eol]).partition(b";")[0], 16)
            if size == 0:  # the last chunk: the rest is trailers
                if blocks:
                    yield b"".join(blocks)
                return
            begin = eol + 2
            end = begin + size
            if end + 2 > len(pending):
                break
            blocks.append(bytes(pending[begin:end]))
            start = end + 2
        if start:
            del pending[:start]
        if blocks:
            yield b"".join(blocks)


def _prefetching(pages: Iterator[T], name: str) -> Iterator[T]:
    """``pages`` read by a thread of their own, started now, as fast as the server
    answers: the caller handles one page while the next ones arrive, and a caller that
    starts reading late (the scheduler, still importing its plugins) finds them waiting.
    Nothing is lost by reading ahead without bound: the caller keeps every page it reads
    (an informer's store). Errors come out where the page would have; a caller that
    stops early stops the thread at its next page."""
    ahead: queue.SimpleQueue[tuple[bool, T | BaseException | None]] = queue.SimpleQueue()
    stop = threading.Event()

    def produce() -> None:
        try:
            for page in pages:
                if stop.is_set():
                    return
                ahead.put((True, page))
            ahead.put((False, None))
        except BaseException as exc:  # handed to the consumer, raised there
            ahead.put((False, exc))

    def consume() -> Iterator[T]:
        try:
            while True:
                more, item = ahead.get()
                if isinstance(item, BaseException):
                    raise item
                if not more:
                    return
                yield item  # type: ignore[misc]  # a page when ``more``
        finally:
            stop.set()

    threading.Thread(target=produce, name=name, daemon=True).start()
    return consume()


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection was closed by the server: it reads as ready
    (an end of file, or a TLS close) while no request is out, as urllib3 checks."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _socket_of(response: urllib3.BaseHTTPResponse) -> socket.socket | None:
    connection = getattr(response, "connection", None) or getattr(response, "_connection", None)
    sock = getattr(connection, "sock", None)
    return sock if isinstance(sock, socket.socket) else None


def _delete_options(
    grace_period_seconds: int | None, uid: str | None
) -> kubernetes.client.V1DeleteOptions | None:
    """Delete options carrying the grace period and a uid precondition (so a namesake
    created since the decision is never hit), or None when there is neither."""
    options: dict[str, Any] = {}
    if grace_period_seconds is not None:
        options["grace_period_seconds"] = grace_period_seconds
    if uid is not None:
        options["preconditions"] = kubernetes.client.V1Preconditions(uid=uid)
    return kubernetes.client.V1DeleteOptions(**options) if options else None


def _model(model_type: Any, document: Mapping[str, Any]) -> Any:
    """The generated model the typed client wants as a request body."""
    model = model_type.from_dict(dict(document))
    if model is None:
        raise kube_errors.Invalid(f"a {model_type.__name__} must be a JSON object", status=400)
    return model
