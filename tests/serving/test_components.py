"""The three servers as shipped: ``nodeagent run``, ``nodeagent scheduler`` and
``nodeagent extender`` run as processes with their default ``--metrics-auth kubernetes``
against the fake API server, and are scraped the way Prometheus does it (a bearer token
over HTTPS, the self-signed certificate pinned by the fingerprint the start log gives);
and their serving options, when wrong, exit 2 naming the option."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doubles.reviews import Identity
from tests.e2e import harness
from tests.extenders import tls
from tests.fakeapi import objects
from tests.fakeapi.fixtures import write_kubeconfig
from tests.fakeapi.server import FakeAPIServer
from tests.processes import logged_process

pytestmark = pytest.mark.timeout(120)

SCRAPER = "system:serviceaccount:monitoring:prometheus"
TOKEN = "prometheus-token"
EXTENDER_ARGS = {
    "Pod": {"metadata": {"name": "web", "namespace": "default"}, "spec": {}},
    "Nodes": None,
    "NodeNames": [harness.NODE],
}
"""ExtenderArgs as kube-scheduler marshals them (node names: nodeCacheCapable)."""


class Pinned:
    """HTTPS to a self-signed server, trusted by the SHA-256 fingerprint it logged (what
    ``openssl x509 -fingerprint -sha256`` prints), not by skipping the check."""

    def __init__(self, url: str, fingerprint: str) -> None:
        assert url.startswith("https://"), url
        host, port = url.removeprefix("https://").rsplit(":", 1)
        self.host, self.port, self.fingerprint = host, int(port), fingerprint

    def get(self, path: str, *, token: str | None = None) -> tuple[int, bytes]:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection(self.host, self.port, context=context, timeout=10)
        try:
            connection.connect()
            assert connection.sock is not None
            der = connection.sock.getpeercert(binary_form=True)
            assert der is not None
            digest = hashlib.sha256(der).hexdigest().upper()
            served = ":".join(digest[i : i + 2] for i in range(0, 64, 2))
            assert served == self.fingerprint, "not the certificate the server logged"
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


@pytest.fixture
def api(fake_api: FakeAPIServer) -> FakeAPIServer:
    fake_api.cluster.create("nodes", objects.node(harness.NODE))
    fake_api.reviews.add_token(TOKEN, Identity(SCRAPER, groups=("system:serviceaccounts",)))
    fake_api.reviews.add_token("stranger", Identity("stranger"))
    fake_api.reviews.grant(user=SCRAPER)
    return fake_api


def assert_secure_scrapes(api: FakeAPIServer, server: Pinned, metric: bytes) -> None:
    for probe in ("/healthz", "/livez"):
        assert server.get(probe)[0] == 200
    assert server.get("/metrics")[0] == 401
    assert server.get("/metrics", token="forged")[0] == 401
    assert server.get("/metrics", token="stranger")[0] == 403
    status, body = server.get("/metrics", token=TOKEN)
    assert status == 200
    assert metric in body
    # fail closed: an identity not reviewed yet, with the API down
    api.reviews.add_token("grafana", Identity("grafana"))
    api.reviews.grant(user="grafana")
    with api.outage(status=503):
        assert server.get("/metrics", token="grafana")[0] == 401
        assert server.get("/healthz")[0] == 200
    assert server.get("/metrics", token="grafana")[0] == 200


def test_the_agent_in_cluster_mode_serves_metrics_to_authorized_callers_only(
    api: FakeAPIServer, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url, token="agent")
    args = ["run", "--log-format", "json", "--kubeconfig", str(kubeconfig)]
    args += ["--node-name", harness.NODE, "--metrics-address", "127.0.0.1:0"]
    args += ["--nodefs-path", str(tmp_path), "--imagefs-path", str(tmp_path)]
    with logged_process(args) as agent:
        serving = agent.wait_line("serving")
        assert serving["metricsAuth"] == "kubernetes" and serving["selfSigned"] is True
        assert agent.wait_line("nodeagent running")["metrics"] == serving["url"]
        assert_secure_scrapes(
            api, Pinned(serving["url"], serving["sha256Fingerprint"]), b"nodeagent_signal_"
        )
        reviews = [r.authorization for r in api.requests_to("POST", "tokenreviews$")]
        assert set(reviews) == {"Bearer agent"}  # with the agent's own credentials
        assert agent.stop() == 0


def test_the_standalone_agent_serves_plain_http_by_default(tmp_path: Path) -> None:
    args = ["run", "--log-format", "json", "--standalone", "--metrics-address", "127.0.0.1:0"]
    with logged_process(args) as agent:
        serving = agent.wait_line("serving")
        assert serving["metricsAuth"] == "none" and serving["url"].startswith("http://")
        assert agent.stop() == 0


def test_the_scheduler_serves_metrics_to_authorized_callers_only(
    api: FakeAPIServer, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url, token="scheduler")
    args = ["scheduler", "--kubeconfig", str(kubeconfig), "--lease-namespace", "default"]
    args += ["--metrics-address", "127.0.0.1:0", "--log-format", "json"]
    with logged_process(args) as scheduler:
        serving = scheduler.wait_line("serving")
        assert serving["metricsAuth"] == "kubernetes"
        pinned = Pinned(serving["url"], serving["sha256Fingerprint"])
        assert_secure_scrapes(api, pinned, b"scheduler_")
        assert scheduler.stop() == 0


def test_the_extender_wants_the_schedulers_certificate_and_an_authorized_scraper(
    api: FakeAPIServer, tmp_path: Path
) -> None:
    pki = tls.make_pki(tmp_path / "pki")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.url, token="extender")
    args = ["extender", "--kubeconfig", str(kubeconfig), "--listen", "127.0.0.1:0"]
    args += ["--tls-cert-file", str(pki.server_cert), "--tls-private-key-file"]
    args += [str(pki.server_key), "--client-ca-file", str(pki.ca), "--log-format", "json"]
    with logged_process(args) as extender:
        serving = extender.wait_line("serving")
        assert serving["selfSigned"] is False
        port = int(serving["url"].rsplit(":", 1)[1])

        def call(path: str, *, cert: bool, token: str | None = None) -> int:
            context = ssl.create_default_context(cafile=str(pki.ca))
            if cert:
                context.load_cert_chain(pki.client_cert, pki.client_key)
            connection = http.client.HTTPSConnection("127.0.0.1", port, context=context)
            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            body = None if path == "/metrics" else json.dumps(EXTENDER_ARGS)
            connection.request("POST" if body else "GET", path, body=body, headers=headers)
            status = connection.getresponse().status
            connection.close()
            return status

        assert call("/filter", cert=False) == 401
        assert call("/filter", cert=False, token=TOKEN) == 401  # verbs take certificates only
        assert call("/filter", cert=True) == 200
        assert call("/prioritize", cert=True) == 200
        assert call("/metrics", cert=False) == 401
        assert call("/metrics", cert=False, token=TOKEN) == 200
        assert call("/metrics", cert=True) == 403  # kube-scheduler's certificate: no grant
        api.reviews.add_token("grafana", Identity("grafana"))
        api.reviews.grant(user="grafana")
        with api.outage(status=503):
            assert call("/metrics", cert=False, token="grafana") == 401  # fail closed
            assert call("/filter", cert=True) == 200  # the verbs need no review
        assert call("/metrics", cert=False, token="grafana") == 200
        assert extender.stop() == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["run", "--standalone", "--metrics-auth", "bogus"],
            "config field 'metricsAuth' (value 'bogus'): Input should be 'kubernetes' or 'none'",
            id="run-auth",
        ),
        pytest.param(
            ["run", "--standalone", "--tls-cert-file", "/x.crt"],
            "config field 'tlsCertFile' (value '/x.crt'): needs tlsPrivateKeyFile too",
            id="run-key",
        ),
        pytest.param(
            ["run", "--standalone", "--client-ca-file", "/ca.crt"],
            "config field 'clientCAFile' (value '/ca.crt'): client certificates need HTTPS",
            id="run-ca",
        ),
        pytest.param(
            ["run", "--standalone", "--tls-cert-file", "/x.crt", "--tls-private-key-file", "/k"],
            "config field 'tlsCertFile' (value '/x.crt') and tlsPrivateKeyFile (value '/k'):"
            " cannot load",
            id="run-files",
        ),
        pytest.param(
            ["scheduler", "--metrics-auth", "bogus"],
            "argument --metrics-auth: invalid MetricsAuth value: 'bogus'",
            id="scheduler-auth",
        ),
        pytest.param(
            ["scheduler", "--tls-private-key-file", "/k"],
            "--tls-private-key-file (value '/k'): needs --tls-cert-file too",
            id="scheduler-cert",
        ),
        pytest.param(
            ["extender", "--metrics-auth", "none", "--client-ca-file", "/ca.crt"],
            "--client-ca-file (value '/ca.crt'): client certificates need HTTPS",
            id="extender-ca",
        ),
        pytest.param(
            ["run", "--standalone", "--metrics-auth", "kubernetes", "--kubeconfig", "/nope"],
            "config field 'metricsAuth' (value 'kubernetes'): needs the Kubernetes API",
            id="run-kubernetes-without-api",
        ),
        pytest.param(
            ["extender", "--client-ca-file", "/nonexistent/ca.crt"],
            "--client-ca-file (value '/nonexistent/ca.crt'): cannot load the CA bundle",
            id="extender-ca-file",
        ),
    ],
)
def test_wrong_serving_options_exit_2_naming_the_option(args: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
