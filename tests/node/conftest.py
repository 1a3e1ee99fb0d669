"""Fixtures of the ``node`` tests: one real control plane and one real node (kubelet +
containerd, :mod:`tests.node.node`) per session, a namespace per test.

The control plane is the ``controlplane`` tests' (tests/controlplane/cluster.py) plus the
node lifecycle controller: with a kubelet behind the Node it is what lifts the
``node.kubernetes.io/not-ready`` taint every new Node gets, and what would mark the node
unreachable if the kubelet stopped posting. It is a plane of its own, not the
``controlplane`` tests' one: their Nodes have no kubelets, and the controller would taint
them all.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.controlplane import cluster
from tests.controlplane.cluster import ControlPlane
from tests.node import node as node_module
from tests.node.node import Node

CONTROLLERS = (*cluster.CONTROLLERS, "node-lifecycle-controller")
_started: list[tuple[ControlPlane, Node]] = []


@pytest.fixture(scope="session")
def node_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    reason = cluster.unavailable() or node_module.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with cluster.running(
        tmp_path_factory.mktemp("node-controlplane"), controllers=CONTROLLERS
    ) as plane:
        yield plane


@pytest.fixture(scope="session")
def node(node_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    with node_module.running(node_plane, tmp_path_factory.mktemp("node")) as running:
        _started.append((node_plane, running))
        yield running


@pytest.fixture
def namespace(node: Node) -> Iterator[str]:
    """A namespace of the test's own; its pods are deleted (by the real kubelet, which
    stops their containers) before the namespace is."""
    plane = node.plane
    node.wait_calm()
    name = plane.namespace(f"t-{uuid.uuid4().hex[:10]}")
    yield name
    plane.admin.request("DELETE", f"/api/v1/namespaces/{name}/pods", {"gracePeriodSeconds": 1})
    node_module.wait_pods_gone(node, name)
    plane.admin.request("DELETE", f"/api/v1/namespaces/{name}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for plane, running in _started:
        terminalreporter.write_line(
            f"node: control plane started in {plane.times}; node Ready in {running.times}"
        )
