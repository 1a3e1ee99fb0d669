"""Fixtures for tests against the real control plane (marker ``controlplane``): one
etcd + kube-apiserver + kube-controller-manager per test session, a fresh namespace per
test, and node objects removed after the test that made them (every scheduler in the
session sees every node)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.controlplane import cluster, scrape
from tests.controlplane.cluster import ControlPlane, Nodes
from tests.controlplane.objects import MANIFESTS

_started: list[ControlPlane] = []


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    reason = cluster.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with cluster.running(tmp_path_factory.mktemp("controlplane")) as plane:
        _started.append(plane)
        yield plane


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A namespace of the test's own, emptied and deleted after it: pods are force-deleted
    first, since bound pods on nodes without kubelets would otherwise stay Terminating."""
    name = control_plane.namespace(f"t-{uuid.uuid4().hex[:10]}")
    yield name
    control_plane.admin.request(
        "DELETE", f"/api/v1/namespaces/{name}/pods", {"gracePeriodSeconds": 0}
    )
    control_plane.admin.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def nodes(control_plane: ControlPlane) -> Iterator[Nodes]:
    made = Nodes(control_plane)
    yield made
    made.delete_all()


@pytest.fixture(scope="session")
def metrics_token(control_plane: ControlPlane) -> str:
    """A Prometheus-like caller: ServiceAccount monitoring/prometheus bound to the shipped
    metrics-reader ClusterRole (applied from manifests/components/monitoring), so every
    /metrics read is a TokenReview and a SubjectAccessReview under the shipped RBAC."""
    role = MANIFESTS / "components" / "monitoring" / "metrics-reader.yaml"
    control_plane.apply([yaml.safe_load(role.read_text())])
    return scrape.metrics_reader_token(control_plane, "monitoring", "prometheus")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for plane in _started:
        terminalreporter.write_line(f"controlplane: started in {plane.times}")
