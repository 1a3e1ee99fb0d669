"""pytest fixtures: a running fake API server and real clients pointed at it.

Import them into a conftest (``from tests.fakeapi.fixtures import fake_api, ...``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from nodeagent.base.clock import FakeClock
from nodeagent.kube import http, retry
from tests.fakeapi import server

FAST_RETRY = retry.RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.05)
"""Retries that keep real-time tests fast (sleeps go through a FakeClock anyway)."""


def write_kubeconfig(path: Path, server: str, *, token: str = "") -> Path:
    """A kubeconfig for the fake server at ``server`` (a bearer ``token``, or none), for
    what connects as operators do: the commands, the scheduler's binding process."""
    user = {"token": token} if token else {}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "me", "user": user}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
                "current-context": "fake",
            }
        )
    )
    return path


def configuration(url: str) -> kubernetes.client.Configuration:
    config = kubernetes.client.Configuration()
    config.host = url
    return config


@pytest.fixture
def fake_api() -> Iterator[server.FakeAPIServer]:
    with server.running() as api:
        yield api


@pytest.fixture
def core_api(fake_api: server.FakeAPIServer) -> Iterator[kubernetes.client.CoreV1Api]:
    """The official client's CoreV1Api, unwrapped (for testing the fake itself)."""
    config = configuration(fake_api.url)
    config.retries = False
    with kubernetes.client.ApiClient(config) as api_client:
        yield kubernetes.client.CoreV1Api(api_client)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1000.0, wall_offset=1_800_000_000.0)


@pytest.fixture
def kube(fake_api: server.FakeAPIServer, clock: FakeClock) -> Iterator[http.HTTPKubeClient]:
    """The agent's HTTP client against the fake, with a FakeClock for retries and QPS."""
    client = http.HTTPKubeClient.connect(
        configuration(fake_api.url),
        qps=1000.0,
        burst=1000,
        retry_policy=FAST_RETRY,
        clock=clock,
        timeout=(2.0, 5.0),
    )
    try:
        yield client
    finally:
        client.close()
