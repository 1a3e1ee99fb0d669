"""The planner's validation table against the real kube-apiserver v1.36: each refused
shape is refused by a server-side dry-run create (422, or 403 from admission), each
accepted one created (201), so tests/scheduler/validation_cases.py says what the API
server does."""

from __future__ import annotations

import pytest

from tests.controlplane.cluster import ControlPlane
from tests.scheduler.validation_cases import ACCEPTED, REFUSED, Case, cases

pytestmark = pytest.mark.controlplane


def _dry_run(plane: ControlPlane, namespace: str, case: Case) -> tuple[int, object]:
    obj = case.build()
    if case.kind in ("Pod", "PodDisruptionBudget", "ReplicaSet"):
        obj["metadata"]["namespace"] = namespace
    path = {
        "Pod": f"/api/v1/namespaces/{namespace}/pods",
        "PodDisruptionBudget": f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
        "Node": "/api/v1/nodes",
        "Namespace": "/api/v1/namespaces",
        "ReplicaSet": f"/apis/apps/v1/namespaces/{namespace}/replicasets",
    }[case.kind]
    return plane.admin.request("POST", path, obj, query={"dryRun": "All"})


@pytest.mark.parametrize("case", cases(REFUSED))
def test_the_apiserver_refuses(control_plane: ControlPlane, namespace: str, case: Case) -> None:
    status, body = _dry_run(control_plane, namespace, case)
    assert status == case.status, body


@pytest.mark.parametrize("case", cases(ACCEPTED))
def test_the_apiserver_accepts(control_plane: ControlPlane, namespace: str, case: Case) -> None:
    status, body = _dry_run(control_plane, namespace, case)
    assert status == 201, body
