"""Fixtures of the end-to-end tests: a real tmpfs as nodefs (root only), the fake API
server with the node and its pods, the kubelet's cleanup, and a kubeconfig."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doubles import kube as fake
from tests.e2e import harness
from tests.fakeapi import objects, server

TMPFS_MIB = 32


@pytest.fixture
def nodefs(tmp_path: Path) -> Iterator[harness.Node]:
    """A 32 MiB tmpfs laid out as the kubelet's root and pod-log directories."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    with harness.mounted_tmpfs(tmp_path / "nodefs", TMPFS_MIB) as root:
        yield harness.Node(root)


@pytest.fixture
def cluster() -> fake.FakeCluster:
    """The cluster's store: the node, and pods that take 1 s to terminate."""
    store = fake.FakeCluster(termination_delay=1.0)
    store.create("nodes", objects.node(harness.NODE))
    return store


@pytest.fixture
def api(cluster: fake.FakeCluster) -> Iterator[server.FakeAPIServer]:
    with server.running(cluster) as running:
        yield running


@pytest.fixture
def kubeconfig(api: server.FakeAPIServer, tmp_path: Path) -> Path:
    return harness.write_kubeconfig(tmp_path / "kubeconfig", api.url)


@pytest.fixture
def kubelet(cluster: fake.FakeCluster, nodefs: harness.Node) -> Iterator[harness.FakeKubelet]:
    stand_in = harness.FakeKubelet(cluster, nodefs, cleanup_after=0.5)
    stand_in.start()
    try:
        yield stand_in
    finally:
        stand_in.stop()
