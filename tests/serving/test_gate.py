"""The secure server as an attacker and a scraper meet it: real HTTPS requests to the
shared server (:mod:`nodeagent.serving`) whose reviews go through the project's
``kubernetes`` client to the fake API server's TokenReview and SubjectAccessReview.

Each test tries one way in and asserts the answer: no credentials, a forged or revoked
token, a token without the grant, a grant for another path or verb, path tricks, client
certificates from the CA and from elsewhere, an API server that does not answer; and
that probes stay open and a scrape storm costs one review per caller per 10 s."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from nodeagent.base.clock import FakeClock
from nodeagent.serving.auth import REVIEW_TTL
from nodeagent.serving.endpoints import ObservabilityServer
from nodeagent.serving.health import Health
from nodeagent.serving.server import Protection
from nodeagent.serving.settings import ListenAddress, MetricsAuth, resolve
from nodeagent.serving.wsgi import StartResponse
from tests.doubles.reviews import Identity
from tests.extenders import tls
from tests.fakeapi.fixtures import configuration
from tests.fakeapi.server import FakeAPIServer
from tests.observability import samples

SCRAPER = "system:serviceaccount:monitoring:prometheus"
SCRAPER_TOKEN = "prometheus-token"
STRANGER_TOKEN = "stranger-token"
PROBES = ("/healthz", "/readyz", "/livez")


@dataclass
class Answer:
    status: int
    body: bytes


@dataclass
class Client:
    """Real HTTPS requests to one server, verifying it against the test CA."""

    port: int
    pki: tls.Pki

    def context(self, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        if cert is not None:
            context.load_cert_chain(*cert)
        return context

    def request(
        self,
        path: str,
        *,
        token: str | None = None,
        cert: tuple[Path, Path] | None = None,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> Answer:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context(cert), timeout=15
        )
        try:
            sent = dict(headers or {})
            if token is not None:
                sent["Authorization"] = f"Bearer {token}"
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            return Answer(response.status, response.read())
        finally:
            connection.close()


class Clock:
    """Monotonic seconds the test moves (the review caches' clock)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def echo_route(environ: dict[str, object], start_response: StartResponse) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"verb answered\n"]


@contextmanager
def serving(
    fake_api: FakeAPIServer,
    pki: tls.Pki,
    *,
    auth: MetricsAuth = MetricsAuth.KUBERNETES,
    client_ca: bool = False,
    clock: Clock | None = None,
) -> Iterator[tuple[Client, ObservabilityServer]]:
    security = resolve(auth, pki.server_cert, pki.server_key, pki.ca if client_ca else None)
    protection = Protection.connect(
        security,
        configuration=lambda: configuration(fake_api.url),
        clock=clock or Clock(),
    )
    health = Health(clock=FakeClock(start=50.0), liveness_timeout=10.0, requires_api=False)
    health.beat(50.0)
    server = ObservabilityServer(
        ListenAddress("127.0.0.1", 0),
        registry=samples.fed_metrics().registry,
        health=health,
        routes={"/filter": echo_route},
        protection=protection,
    )
    with server:
        yield Client(server.port, pki), server


@pytest.fixture
def pki(tmp_path: Path) -> tls.Pki:
    return tls.make_pki(tmp_path / "pki")


@pytest.fixture
def api(fake_api: FakeAPIServer) -> FakeAPIServer:
    """Prometheus' service account may get /metrics; a stranger's token is valid but
    granted nothing."""
    fake_api.reviews.add_token(
        SCRAPER_TOKEN,
        Identity(
            SCRAPER,
            uid="0c1d",
            groups=("system:serviceaccounts", "system:authenticated"),
            extra={"authentication.kubernetes.io/pod-name": ("prometheus-0",)},
        ),
    )
    fake_api.reviews.add_token(STRANGER_TOKEN, Identity("stranger", groups=("devs",)))
    fake_api.reviews.grant(user=SCRAPER, paths=("/metrics",), verbs=("get",))
    return fake_api


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def client(api: FakeAPIServer, pki: tls.Pki, clock: Clock) -> Iterator[Client]:
    with serving(api, pki, clock=clock) as (client, _):
        yield client


# --- authentication: 401 ---------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-credentials"),
        pytest.param({"Authorization": "Bearer forged-token"}, id="forged-token"),
        pytest.param({"Authorization": "Bearer "}, id="empty-token"),
        pytest.param({"Authorization": "Basic cHJvbWV0aGV1czpzZWNyZXQ="}, id="basic-auth"),
        pytest.param({"Authorization": f"Token {SCRAPER_TOKEN}"}, id="wrong-scheme"),
        pytest.param({"X-Remote-User": SCRAPER}, id="impersonation-header"),
    ],
)
def test_callers_without_valid_credentials_get_401(client: Client, headers: dict[str, str]) -> None:
    answer = client.request("/metrics", headers=headers)
    assert answer.status == 401
    assert b"nodeagent_" not in answer.body


def test_a_revoked_token_is_refused_once_its_review_expires(
    client: Client, api: FakeAPIServer, clock: Clock
) -> None:
    assert client.request("/metrics", token=SCRAPER_TOKEN).status == 200
    api.reviews.revoke_token(SCRAPER_TOKEN)
    clock.now += REVIEW_TTL - 0.5
    assert client.request("/metrics", token=SCRAPER_TOKEN).status == 200  # cached, as kube
    clock.now += 1.0
    assert client.request("/metrics", token=SCRAPER_TOKEN).status == 401


# --- authorization: 403 and 200 ------------------------------------------------------------


def test_the_granted_scraper_gets_the_metrics(client: Client, api: FakeAPIServer) -> None:
    answer = client.request("/metrics", token=SCRAPER_TOKEN)
    assert answer.status == 200
    assert b"nodeagent_signal_available_bytes" in answer.body
    # the review says who asked, for what, as kube-apiserver expects it
    (spec,) = api.reviews.access_specs
    assert spec == {
        "user": SCRAPER,
        "uid": "0c1d",
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("GET", "/", id="index"),
        pytest.param("GET", "/metrics/", id="trailing-slash"),
        pytest.param("GET", "/debug/pprof", id="other-path"),
        pytest.param("POST", "/metrics", id="post"),
        pytest.param("HEAD", "/metrics", id="head"),
    ],
)
def test_a_grant_for_get_metrics_opens_nothing_else(client: Client, method: str, path: str) -> None:
    assert client.request(path, token=SCRAPER_TOKEN, method=method).status == 403


def test_an_authenticated_caller_without_a_grant_gets_403(client: Client) -> None:
    answer = client.request("/metrics", token=STRANGER_TOKEN)
    assert answer.status == 403
    assert b'user "stranger" cannot get path "/metrics"' in answer.body


def test_refusals_are_counted_on_the_servers_own_metrics(client: Client) -> None:
    for _ in range(3):
        client.request("/metrics")
    client.request("/metrics", token=STRANGER_TOKEN)
    body = client.request("/metrics", token=SCRAPER_TOKEN).body.decode()
    assert 'nodeagent_http_requests_denied_total{code="401"} 3.0' in body
    assert 'nodeagent_http_requests_denied_total{code="403"} 1.0' in body


def test_a_group_grant_lets_its_members_in(
    client: Client, api: FakeAPIServer, clock: Clock
) -> None:
    assert client.request("/metrics", token=STRANGER_TOKEN).status == 403
    api.reviews.grant(group="devs")
    assert client.request("/metrics", token=STRANGER_TOKEN).status == 403  # denial cached
    clock.now += REVIEW_TTL
    assert client.request("/metrics", token=STRANGER_TOKEN).status == 200


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/%6Detrics", id="percent-encoded"),
        pytest.param("/healthz/../metrics", id="dot-dot"),
        pytest.param("/healthz%2F..%2Fmetrics", id="encoded-dot-dot"),
        pytest.param("//metrics", id="double-slash"),
        pytest.param("/metrics?/healthz", id="query"),
        pytest.param("/metrics#/healthz", id="fragment"),
    ],
)
def test_path_tricks_never_reach_the_metrics_unauthenticated(client: Client, path: str) -> None:
    answer = client.request(path)
    assert answer.status in (401, 404)
    assert b"nodeagent_" not in answer.body


# --- probes ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PROBES)
def test_probes_need_no_credentials_even_with_the_api_down(
    client: Client, api: FakeAPIServer, path: str
) -> None:
    assert client.request(path).status == 200
    with api.outage(refuse=True):
        assert client.request(path).status == 200
    assert api.reviews.token_reviews == 0


# --- fail closed ---------------------------------------------------------------------------


@pytest.mark.parametrize("refuse", [True, False], ids=["refused", "503"])
def test_an_unreachable_api_fails_closed(client: Client, api: FakeAPIServer, refuse: bool) -> None:
    with api.outage(refuse=refuse, status=503):
        answer = client.request("/metrics", token=SCRAPER_TOKEN)
    assert answer.status == 401
    assert b"token review failed" in answer.body
    # and when the token review passes but the access review cannot be made
    api.fail_next(10, status=503, path="subjectaccessreviews")
    answer = client.request("/metrics", token=SCRAPER_TOKEN)
    assert answer.status == 403
    assert b"authorization review failed" in answer.body
    api.clear_faults()
    assert client.request("/metrics", token=SCRAPER_TOKEN).status == 200  # errors not cached


def test_a_review_the_api_refuses_fails_closed(client: Client, api: FakeAPIServer) -> None:
    """The component's own service account lacks system:auth-delegator: 403 from the API."""
    api.fail_next(1, status=403, path="tokenreviews")
    assert client.request("/metrics", token=SCRAPER_TOKEN).status == 401


# --- caches ------------------------------------------------------------------------------


def test_a_scrape_storm_costs_one_review_of_each_kind_per_ttl(
    client: Client, api: FakeAPIServer, clock: Clock
) -> None:
    answers: list[int] = []
    lock = threading.Lock()

    def scrape() -> None:
        status = client.request("/metrics", token=SCRAPER_TOKEN).status
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=scrape) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == [200] * 40
    assert (api.reviews.token_reviews, api.reviews.access_reviews) == (1, 1)
    clock.now += REVIEW_TTL
    assert client.request("/metrics", token=SCRAPER_TOKEN).status == 200
    assert (api.reviews.token_reviews, api.reviews.access_reviews) == (2, 2)


def test_denials_are_cached_too(client: Client, api: FakeAPIServer, clock: Clock) -> None:
    for _ in range(5):
        assert client.request("/metrics", token=STRANGER_TOKEN).status == 403
        assert client.request("/metrics", token="forged").status == 401
    assert (api.reviews.token_reviews, api.reviews.access_reviews) == (2, 1)
    api.reviews.grant(user="stranger")
    clock.now += REVIEW_TTL
    assert client.request("/metrics", token=STRANGER_TOKEN).status == 200


# --- client certificates -----------------------------------------------------------------


def test_client_certificates_authenticate_cn_and_o(
    api: FakeAPIServer, pki: tls.Pki, tmp_path: Path
) -> None:
    api.reviews.grant(group="metrics-readers")
    reader = tls.issue_client(pki, tmp_path / "reader", "grafana", groups=("metrics-readers",))
    outsider = tls.issue_client(pki, tmp_path / "outsider", "intruder", groups=("guests",))
    with serving(api, pki, client_ca=True) as (client, _):
        assert client.request("/metrics", cert=reader).status == 200
        assert api.reviews.token_reviews == 0  # a certificate needs no token review
        assert api.reviews.access_specs[-1]["user"] == "grafana"
        assert api.reviews.access_specs[-1]["groups"] == ["metrics-readers"]
        assert client.request("/metrics", cert=outsider).status == 403
        assert client.request("/metrics").status == 401


def test_certificates_the_ca_did_not_sign_end_the_handshake(
    api: FakeAPIServer, pki: tls.Pki, tmp_path: Path
) -> None:
    other = tls.make_pki(tmp_path / "other")
    api.reviews.grant(user="kube-scheduler")
    server_only = tls.issue_client(
        pki, tmp_path / "server-only", "kube-scheduler", usage=ExtendedKeyUsageOID.SERVER_AUTH
    )
    with serving(api, pki, client_ca=True) as (client, _):
        for cert in ((other.client_cert, other.client_key), server_only):
            with pytest.raises((ssl.SSLError, ConnectionError)):
                client.request("/metrics", cert=cert)
        # the CA's own client certificate (CN kube-scheduler) is let in
        assert client.request("/metrics", cert=(pki.client_cert, pki.client_key)).status == 200


def test_without_a_client_ca_certificates_are_not_even_asked_for(
    api: FakeAPIServer, pki: tls.Pki
) -> None:
    api.reviews.grant(user="kube-scheduler")
    with serving(api, pki) as (client, _):
        answer = client.request("/metrics", cert=(pki.client_cert, pki.client_key))
        assert answer.status == 401


# --- certificate paths (the extender's verbs) ---------------------------------------------


def test_verbs_need_a_ca_signed_certificate_when_a_client_ca_is_set(
    api: FakeAPIServer, pki: tls.Pki
) -> None:
    with serving(api, pki, client_ca=True) as (client, _):
        assert client.request("/filter", method="POST", body=b"{}").status == 401
        assert client.request("/filter", token=SCRAPER_TOKEN, method="POST", body=b"{}").status == (
            401
        )
        answer = client.request(
            "/filter", cert=(pki.client_cert, pki.client_key), method="POST", body=b"{}"
        )
        assert (answer.status, answer.body) == (200, b"verb answered\n")
    assert api.reviews.token_reviews == api.reviews.access_reviews == 0


def test_verbs_stay_open_without_a_client_ca(api: FakeAPIServer, pki: tls.Pki) -> None:
    with serving(api, pki) as (client, _):
        assert client.request("/filter", method="POST", body=b"{}").status == 200
        assert client.request("/metrics").status == 401


# --- transport ---------------------------------------------------------------------------


def test_plain_http_on_the_secure_port_gets_no_page(client: Client) -> None:
    with socket.create_connection(("127.0.0.1", client.port), timeout=5) as raw:
        raw.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        received = b""
        try:
            while chunk := raw.recv(4096):
                received += chunk
        except ConnectionResetError:
            pass
    assert b"nodeagent_" not in received
    assert not received.startswith(b"HTTP/")
    # and the server still serves the next caller
    assert client.request("/healthz").status == 200


def test_metrics_auth_none_is_plain_open_http(api: FakeAPIServer, pki: tls.Pki) -> None:
    security = resolve(MetricsAuth.NONE, None, None, None)
    health = Health(clock=FakeClock(start=1.0), liveness_timeout=10.0, requires_api=False)
    with ObservabilityServer(
        ListenAddress("127.0.0.1", 0),
        registry=samples.fed_metrics().registry,
        health=health,
        protection=Protection(security),
    ) as server:
        assert server.url.startswith("http://")
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        connection.request("GET", "/metrics")
        assert connection.getresponse().status == 200
        connection.close()
    assert api.reviews.token_reviews == 0


def test_every_request_on_a_kept_alive_connection_passes_the_gate(client: Client) -> None:
    """Credentials are checked per request: a connection that was let in once is not a
    pass for the requests that follow on it."""
    connection = http.client.HTTPSConnection(
        "127.0.0.1", client.port, context=client.context(), timeout=15
    )
    try:
        connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {SCRAPER_TOKEN}"})
        first = connection.getresponse()
        assert first.status == 200
        assert b"nodeagent_" in first.read()
        reused = connection.sock
        assert reused is not None  # kept alive
        connection.request("GET", "/metrics")
        assert connection.sock is reused  # the second request went over the same connection
        second = connection.getresponse()
        assert second.status == 401
        assert b"nodeagent_" not in second.read()
    finally:
        connection.close()
