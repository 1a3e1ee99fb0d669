"""HTTPKubeClient over the real ``kubernetes`` client against the fake API server: the
requests it sends, error translation, retries with backoff and Retry-After, the QPS
bucket, outages and latency, watch streaming and prompt close."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import kubernetes.client
import pytest

from nodeagent.base import errors
from nodeagent.base.clock import FakeClock
from nodeagent.kube import client, http, retry
from nodeagent.kube import errors as kube_errors
from nodeagent.serving import tls
from tests.fakeapi import objects
from tests.fakeapi.fixtures import configuration, write_kubeconfig
from tests.fakeapi.server import FakeAPIServer


@pytest.fixture
def seeded(fake_api: FakeAPIServer) -> FakeAPIServer:
    fake_api.cluster.create("nodes", objects.node("node-a"))
    fake_api.cluster.create("pods", objects.pod("p1", uid="uid-1", labels={"app": "x"}))
    fake_api.cluster.create("pods", objects.pod("p2", node_name="node-b"))
    return fake_api


POLICY = retry.RetryPolicy(attempts=4, initial_delay=0.5, max_delay=4.0)


def make_client(
    api: FakeAPIServer,
    clock: FakeClock,
    *,
    observer: client.ApiCallObserver | None = None,
    policy: retry.RetryPolicy = POLICY,
    qps: float = 1000.0,
    burst: int = 1000,
    timeout: tuple[float, float] = (2.0, 5.0),
) -> http.HTTPKubeClient:
    return http.HTTPKubeClient.connect(
        configuration(api.url),
        qps=qps,
        burst=burst,
        retry_policy=policy,
        observer=observer,
        clock=clock,
        timeout=timeout,
    )


def test_reads_and_patches_send_what_the_server_expects(
    seeded: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    node = kube.get_node("node-a")
    assert node["metadata"]["name"] == "node-a"
    patch = {"status": {"conditions": [{"type": "NodeAgentDiskPressure", "status": "False"}]}}
    patched = kube.patch_node_status("node-a", patch)
    assert "NodeAgentDiskPressure" in [c["type"] for c in patched["status"]["conditions"]]
    kube.patch_node("node-a", {"metadata": {"annotations": {"a": "b"}}})
    patches = seeded.requests_to("PATCH", "/api/v1/nodes/node-a")
    assert [r.content_type for r in patches] == ["application/strategic-merge-patch+json"] * 2
    assert [r.path for r in patches] == ["/api/v1/nodes/node-a/status", "/api/v1/nodes/node-a"]
    listed = kube.list_pods(field_selector="spec.nodeName=node-a")
    assert [p["metadata"]["name"] for p in listed.items] == ["p1"]
    assert listed.resource_version == str(seeded.cluster.resource_version)


def test_eviction_body_carries_grace_and_uid(
    seeded: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    kube.evict_pod("default", "p1", grace_period_seconds=1, uid="uid-1")
    body = seeded.requests_to("POST", "/pods/p1/eviction$")[-1].body
    assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
    assert body["deleteOptions"] == {"gracePeriodSeconds": 1, "preconditions": {"uid": "uid-1"}}
    assert seeded.cluster.evictions[-1].outcome == 201


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        pytest.param("missing", errors.NotFound, id="404-not-found"),
        pytest.param("uid", errors.Conflict, id="409-uid-precondition"),
        pytest.param("pdb", kube_errors.EvictionBlocked, id="429-pdb"),
    ],
)
def test_eviction_answers_become_typed_errors_without_retry(
    seeded: FakeAPIServer,
    kube: http.HTTPKubeClient,
    setup: str,
    expected: type[Exception],
) -> None:
    name, uid = "p1", "uid-1"
    if setup == "missing":
        name = "nope"
    elif setup == "uid":
        uid = "other"
    else:
        seeded.cluster.add_pdb("default", "pdb", selector="app=x")
    with pytest.raises(expected):
        kube.evict_pod("default", name, grace_period_seconds=5, uid=uid)
    assert len(seeded.requests_to("POST", "/eviction$")) == 1, "answers are not retried"


def test_server_errors_are_retried_with_backoff_then_succeed(
    seeded: FakeAPIServer, clock: FakeClock
) -> None:
    observer = client.RecordingObserver()
    kube = make_client(seeded, clock, observer=observer)
    seeded.fail_next(2, status=503, path="/nodes/node-a$")
    started = clock.now()
    assert kube.get_node("node-a")["metadata"]["name"] == "node-a"
    assert len(seeded.requests_to("GET", "/nodes/node-a$")) == 3
    assert [code for _, _, code in observer.requests] == ["503", "503", "200"]
    assert observer.retries == [("get", "nodes", "Unavailable")] * 2
    assert clock.now() - started <= 0.5 + 1.0, "full-jitter waits stay within their bounds"


def test_retry_after_is_honoured_for_throttling(seeded: FakeAPIServer, clock: FakeClock) -> None:
    kube = make_client(seeded, clock)
    seeded.fail_next(1, status=429, path="/nodes/node-a$", retry_after=3)
    started = clock.now()
    kube.get_node("node-a")
    assert clock.now() - started >= 3.0


def test_persistent_outage_raises_server_error_after_all_attempts(
    seeded: FakeAPIServer, clock: FakeClock
) -> None:
    kube = make_client(seeded, clock)
    with seeded.outage(status=503), pytest.raises(errors.ServerError):
        kube.get_node("node-a")
    assert len(seeded.requests_to("GET", "/nodes/node-a$")) == 4


def test_connection_refused_is_a_server_error_and_recovers(
    seeded: FakeAPIServer, clock: FakeClock
) -> None:
    kube = make_client(seeded, clock, policy=retry.RetryPolicy(attempts=2))
    with seeded.outage(refuse=True), pytest.raises(errors.ServerError):
        kube.get_node("node-a")
    assert kube.get_node("node-a")["metadata"]["name"] == "node-a"


def test_slow_answer_times_out_as_server_error(seeded: FakeAPIServer, clock: FakeClock) -> None:
    kube = make_client(seeded, clock, policy=retry.NO_RETRY, timeout=(1.0, 0.2))
    seeded.add_latency(0.6, path="/nodes/node-a$")
    with pytest.raises(errors.ServerError):
        kube.get_node("node-a")


def test_latency_below_timeout_is_tolerated(seeded: FakeAPIServer, clock: FakeClock) -> None:
    kube = make_client(seeded, clock, timeout=(1.0, 2.0))
    seeded.add_latency(0.2)
    assert kube.get_node("node-a")["metadata"]["name"] == "node-a"


def test_qps_bucket_spaces_requests(seeded: FakeAPIServer, clock: FakeClock) -> None:
    kube = make_client(seeded, clock, qps=5.0, burst=10)
    started = clock.now()
    for _ in range(20):
        kube.get_node("node-a")
    # 10 go at once, the next 10 at 5/s; real time passing only adds tokens
    assert 1.9 <= clock.now() - started <= 2.1


def test_watch_streams_events_and_closes_promptly(
    seeded: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    seeded.cluster.bookmark_interval = 0.1
    listed = kube.list_pods(field_selector="spec.nodeName=node-a")
    stream = kube.watch_pods(
        resource_version=listed.resource_version,
        field_selector="spec.nodeName=node-a",
        timeout_seconds=30,
    )
    threading.Timer(0.2, seeded.cluster.create, ("pods", objects.pod("p3"))).start()
    seen: list[client.WatchEvent] = []
    closer = threading.Timer(0.8, stream.close)
    closer.start()
    started = time.monotonic()
    seen.extend(stream)
    assert time.monotonic() - started < 2.0, "close() interrupts a blocked read"
    kinds = [e.type for e in seen]
    assert client.WatchEventType.ADDED in kinds and client.WatchEventType.BOOKMARK in kinds
    added = next(e for e in seen if e.type is client.WatchEventType.ADDED)
    assert added.object["metadata"]["name"] == "p3"
    request = seeded.requests_to("GET", "/api/v1/pods$")[-1]
    assert request.param("allowWatchBookmarks") == "true"
    assert request.param("resourceVersion") == listed.resource_version


def test_a_streamed_list_is_read_in_blocks_of_many_chunks(
    seeded: FakeAPIServer, kube: http.HTTPKubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's one chunk per event is unchunked here from large reads of the
    socket, not a chunk per read: the reads are fewer than the events."""
    for n in range(300):
        seeded.cluster.create("pods", objects.pod(f"bulk-{n}"))
    reads: list[int] = []
    unchunked = http.unchunked

    def counting(read: Callable[[int], bytes]) -> Iterator[bytes]:
        def counted(limit: int) -> bytes:
            reads.append(limit)
            return read(limit)

        return unchunked(counted)

    monkeypatch.setattr(http, "unchunked", counting)
    stream = kube.watch_list(client.Collection.PODS, timeout_seconds=30)
    names = []
    for event in stream:
        if event.type is client.WatchEventType.BOOKMARK:
            break
        names.append(event.object["metadata"]["name"])
    stream.close()
    assert {f"bulk-{n}" for n in range(300)} <= set(names)
    assert 0 < len(reads) < len(names)


@pytest.mark.parametrize("as_status", [False, True], ids=["error-event", "http-410"])
def test_watch_from_expired_version_raises_gone(
    seeded: FakeAPIServer, kube: http.HTTPKubeClient, as_status: bool
) -> None:
    old = str(seeded.cluster.resource_version - 1)
    seeded.cluster.create("pods", objects.pod("p9"))
    seeded.cluster.compact()
    seeded.watch_gone_as_status = as_status
    with pytest.raises(kube_errors.Gone):
        list(kube.watch_pods(resource_version=old, timeout_seconds=5))


def test_events_are_created_and_patched(seeded: FakeAPIServer, kube: http.HTTPKubeClient) -> None:
    created = kube.create_event(
        "default",
        {
            "metadata": {"name": "node-a.x", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "node-a"},
            "reason": "EvictionThresholdMet",
            "message": "Attempting to reclaim memory",
            "type": "Warning",
            "count": 1,
        },
    )
    assert created["reason"] == "EvictionThresholdMet"
    kube.patch_event("default", "node-a.x", {"count": 4})
    assert seeded.cluster.get("events", "default", "node-a.x")["count"] == 4


def test_a_pod_status_patch_is_a_strategic_merge_without_the_generated_module(
    seeded: FakeAPIServer, tmp_path: Path
) -> None:
    """The scheduler's first unschedulable pod patches its status: in a fresh process,
    that write must not import the generated CoreV1Api module (0.2-0.4 s of CPU under
    the scheduling loop), and it is a strategic merge (a condition list merged by type)."""
    seeded.cluster.create("pods", objects.pod("patched"))
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", seeded.url)
    script = f"""
import sys
from pathlib import Path
from nodeagent.kube import http
kube = http.HTTPKubeClient.connect(http.load_configuration(Path({str(kubeconfig)!r})))
condition = {{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}}
kube.patch_pod_status("default", "patched", {{"status": {{"conditions": [condition]}}}})
print("kubernetes.client.api.core_v1_api" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    request = seeded.requests_to("PATCH", "/pods/patched/status$")[-1]
    assert request.content_type == "application/strategic-merge-patch+json"
    conditions = seeded.cluster.get("pods", "default", "patched")["status"]["conditions"]
    assert [c["reason"] for c in conditions if c["type"] == "PodScheduled"] == ["Unschedulable"]


def test_load_configuration_errors_name_the_source() -> None:
    with pytest.raises(errors.ConfigError, match="cannot load Kubernetes client configuration"):
        http.load_configuration(Path("/nonexistent/kubeconfig"))


def test_load_configuration_reads_a_kubeconfig(tmp_path: Path, fake_api: FakeAPIServer) -> None:
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{fake_api.url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: u}}]\n"
    )
    config = http.load_configuration(path)
    assert config.host == fake_api.url
    assert http.cluster_configured(path)


class TestKeepAlivePosts:
    """Bindings and events go over kept-alive HTTP/1.1 connections (:class:`http.
    KeepAlive`): one connection serves request after request, the bearer token and the
    ApiClient's headers go with each, answers are translated like any other, and a
    connection that broke is never used again."""

    def test_sequential_posts_share_one_connection(
        self, seeded: FakeAPIServer, clock: FakeClock
    ) -> None:
        kube = make_client(seeded, clock)
        for i in range(5):
            seeded.cluster.create("pods", objects.pod(f"k{i}", uid=f"uid-k{i}", node_name=""))
            kube.bind_pod("default", f"k{i}", uid=f"uid-k{i}", node_name="node-a")
            kube.create_event("default", _event(f"k{i}"))
        assert len(seeded._connections) == 1  # every POST above on the same one
        assert [b[1] for b in seeded.cluster.bindings] == [f"k{i}" for i in range(5)]
        kube.close()  # and the kept connection is closed with the client
        deadline = time.monotonic() + 10
        while seeded._connections and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not seeded._connections

    def test_the_token_and_client_headers_are_sent(
        self, seeded: FakeAPIServer, clock: FakeClock, tmp_path: Path
    ) -> None:
        # a kubeconfig's token, as operators and the binding process connect
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", seeded.url, token="s3cret")
        config = http.load_configuration(kubeconfig)
        kube = http.HTTPKubeClient.connect(config, qps=1000.0, burst=1000, clock=clock)
        seeded.cluster.create("pods", objects.pod("p3", uid="uid-3", node_name=""))
        kube.bind_pod("default", "p3", uid="uid-3", node_name="node-a")
        [request] = [r for r in seeded.requests if r.path.endswith("/binding")]
        assert request.authorization == "Bearer s3cret"
        assert request.content_type == "application/json"
        assert request.body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}

    def test_answers_are_translated(self, seeded: FakeAPIServer, clock: FakeClock) -> None:
        kube = make_client(seeded, clock)
        with pytest.raises(errors.Conflict, match="already assigned"):
            kube.bind_pod("default", "p2", uid="", node_name="node-a")
        with pytest.raises(errors.NotFound):
            kube.bind_pod("default", "absent", uid="", node_name="node-a")
        seeded.cluster.create("pods", objects.pod("p3", uid="uid-3", node_name=""))
        with pytest.raises(errors.Conflict, match="UID in precondition"):
            kube.bind_pod("default", "p3", uid="another", node_name="node-a")
        kube.bind_pod("default", "p3", uid="uid-3", node_name="node-a")
        assert seeded.cluster.bindings == [("default", "p3", "node-a")]

    def test_a_broken_connection_is_dropped_and_the_retry_gets_a_new_one(
        self, seeded: FakeAPIServer, clock: FakeClock
    ) -> None:
        observer = client.RecordingObserver()
        kube = make_client(seeded, clock, observer=observer)
        kube.create_event("default", _event("before"))
        seeded.lose_responses(1, method="POST", path="/events$")
        # the write was applied, its answer lost: the retry, on a new connection, is
        # answered as a real API server answers it
        with pytest.raises(errors.Conflict, match="already exists"):
            kube.create_event("default", _event("lost"))
        assert kube.create_event("default", _event("after"))["reason"] == "Scheduled"
        assert observer.requests == [
            ("create", "events", "201"),
            ("create", "events", "error"),
            ("create", "events", "409"),
            ("create", "events", "201"),
        ]
        assert [r[2] for r in observer.retries] == ["Unavailable"]

    def test_a_proxy_falls_back_to_the_client_pool(self, seeded: FakeAPIServer) -> None:
        config = configuration(seeded.url)
        config.proxy = "http://127.0.0.1:9"
        api_client = kubernetes.client.ApiClient(config)
        assert http.KeepAlive.for_client(api_client, (1.0, 1.0)) is None
        config = configuration(seeded.url)
        assert http.KeepAlive.for_client(kubernetes.client.ApiClient(config), (1.0, 1.0))


def _event(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": name, "namespace": "default"},
        "reason": "Scheduled",
        "message": f"Successfully assigned default/{name} to node-a",
        "type": "Normal",
    }


class TestKeepAliveOverTLS:
    """The kept-alive POSTs speak TLS with the configuration's CA, and refuse a server
    the CA did not sign unless verification is off (as the ApiClient's own pool)."""

    @pytest.fixture
    def tls_server(self, tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
        pem = tls.self_signed_pem(["127.0.0.1"])
        certificate = tmp_path / "server.pem"
        certificate.write_bytes(pem)
        seen: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                seen.append(f"{self.path} {self.headers.get('Authorization')}")
                body = b'{"kind":"Event","metadata":{"name":"e"},"reason":"Scheduled"}'
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"https://127.0.0.1:{httpd.server_address[1]}", certificate, seen
        finally:
            httpd.shutdown()
            httpd.server_close()

    def test_posts_verify_the_server_with_the_configured_ca(
        self, tls_server: tuple[str, Path, list[str]], clock: FakeClock
    ) -> None:
        url, certificate, seen = tls_server
        config = configuration(url)
        config.ssl_ca_cert = str(certificate)
        config.api_key = {"authorization": "Bearer t0ken"}
        kube = http.HTTPKubeClient.connect(config, qps=1000.0, burst=1000, clock=clock)
        for name in ("a", "b"):
            assert kube.create_event("default", _event(name))["reason"] == "Scheduled"
        assert seen == ["/api/v1/namespaces/default/events Bearer t0ken"] * 2
        kube.close()

    def test_an_unknown_ca_is_refused_unless_verification_is_off(
        self, tls_server: tuple[str, Path, list[str]], clock: FakeClock
    ) -> None:
        url, _, seen = tls_server
        kube = http.HTTPKubeClient.connect(
            configuration(url), qps=1000.0, burst=1000, clock=clock, retry_policy=retry.NO_RETRY
        )
        with pytest.raises(errors.ServerError, match="CERTIFICATE_VERIFY_FAILED"):
            kube.create_event("default", _event("a"))
        assert seen == []
        config = configuration(url)
        config.verify_ssl = False
        insecure = http.HTTPKubeClient.connect(config, qps=1000.0, burst=1000, clock=clock)
        assert insecure.create_event("default", _event("a"))["reason"] == "Scheduled"


def test_an_idle_connection_the_server_closed_is_replaced_before_use(
    seeded: FakeAPIServer, clock: FakeClock
) -> None:
    observer = client.RecordingObserver()
    kube = make_client(seeded, clock, observer=observer, policy=retry.NO_RETRY)
    kube.create_event("default", _event("before"))
    for sock in list(seeded._connections):  # the server drops its idle connections
        sock.shutdown(socket.SHUT_RDWR)
    deadline = time.monotonic() + 10
    while seeded._connections and time.monotonic() < deadline:  # the server lets go
        time.sleep(0.01)
    assert not seeded._connections
    assert kube.create_event("default", _event("after"))["reason"] == "Scheduled"
    assert observer.requests == [("create", "events", "201")] * 2
