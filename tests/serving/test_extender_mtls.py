"""kube-scheduler's side of the extender's mutual TLS: the project's extender client,
configured by an ``extenders:`` entry exactly as kube-scheduler reads it
(``enableHTTPS``, ``tlsConfig.caFile``/``serverName`` and the client ``certFile``/
``keyFile``), calls the real extender server started with a client CA, as
docs/security.md tells operators to set it up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.extender import server
from nodeagent.extender.nodeview import NodeView
from nodeagent.scheduler.extenders.client import ExtenderError, HTTPExtender
from nodeagent.scheduler.extenders.settings import ExtenderConfig
from nodeagent.scheduler.plugins import node_pressure
from nodeagent.serving.server import Protection
from nodeagent.serving.settings import ListenAddress, MetricsAuth, resolve
from tests.extenders import tls
from tests.fakeapi.fixtures import configuration
from tests.fakeapi.server import FakeAPIServer

ARGS = {"Pod": {"metadata": {"name": "web", "namespace": "default"}}, "NodeNames": ["n1"]}


@pytest.fixture
def pki(tmp_path: Path) -> tls.Pki:
    return tls.make_pki(tmp_path / "pki")


@pytest.fixture
def url(fake_api: FakeAPIServer, pki: tls.Pki) -> Iterator[str]:
    security = resolve(MetricsAuth.KUBERNETES, pki.server_cert, pki.server_key, pki.ca)
    protection = Protection.connect(security, configuration=lambda: configuration(fake_api.url))
    endpoint, _ = server.make_server(
        NodeView(),
        server.PressureJudge(node_pressure.Args()),
        ListenAddress("127.0.0.1", 0),
        protection=protection,
    )
    with endpoint:
        yield f"https://127.0.0.1:{endpoint.port}"


def scheduler_entry(url: str, pki: tls.Pki, **tls_config: Any) -> HTTPExtender:
    """The extender as kube-scheduler's configuration names it."""
    entry = {
        "urlPrefix": url,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": 1,
        "nodeCacheCapable": True,
        "enableHTTPS": True,
        "tlsConfig": {"caFile": str(pki.ca), "serverName": "localhost", **tls_config},
    }
    return HTTPExtender(ExtenderConfig.model_validate(entry))


def test_kube_schedulers_client_certificate_opens_the_verbs(url: str, pki: tls.Pki) -> None:
    extender = scheduler_entry(url, pki, certFile=str(pki.client_cert), keyFile=str(pki.client_key))
    try:
        assert extender.send("filter", ARGS)["NodeNames"] == ["n1"]
        assert extender.send("prioritize", ARGS) == [{"Host": "n1", "Score": 5}]
    finally:
        extender.close()


def test_without_its_certificate_kube_scheduler_is_refused(url: str, pki: tls.Pki) -> None:
    extender = scheduler_entry(url, pki)
    try:
        with pytest.raises(ExtenderError, match="code 401"):
            extender.send("filter", ARGS)
    finally:
        extender.close()


def test_a_certificate_from_another_ca_fails_the_handshake(
    url: str, pki: tls.Pki, tmp_path: Path
) -> None:
    other = tls.make_pki(tmp_path / "other")
    extender = scheduler_entry(
        url, pki, certFile=str(other.client_cert), keyFile=str(other.client_key)
    )
    try:
        with pytest.raises(ExtenderError):
            extender.send("filter", ARGS)
    finally:
        extender.close()
