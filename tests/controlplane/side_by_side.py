"""What the modules that run each scenario under both schedulers share: nodeagent's
scheduler as deployed (manifests/scheduler: its RBAC and its configuration) beside the
real kube-scheduler, and a run's teardown that waits for nodeagent's bindings in flight
before the namespace goes.

The wait matters: a binding still in flight (a PreBind waiting on the PV controller or on
a driver) posts into a namespace being deleted, and the apiserver's NamespaceLifecycle
admission refuses it with a 403. That is not a missing RBAC verb, and the modules' check
that nodeagent made no refused request must keep failing on a real one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.controlplane import objects as o
from tests.controlplane import processes
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.test_scheduler import (
    SCHEDULER_NAMESPACE,
    bindings_in_flight,
    shipped_config,
    start,
)
from tests.waiting import eventually

SCHEDULERS = ("nodeagent-scheduler", "default-scheduler")
"""The scheduler names a scenario's pods name, one run each."""


@contextlib.contextmanager
def both_running(plane: ControlPlane, label: str, tmp: Path) -> Iterator[processes.Process]:
    """nodeagent's scheduler with the shipped RBAC and configuration, and kube-scheduler
    (no leader election), both running inside the block; yields nodeagent's process."""
    plane.apply(o.kustomize(o.MANIFESTS / "scheduler"))
    kubeconfig = plane.service_account_kubeconfig(SCHEDULER_NAMESPACE, "nodeagent-scheduler")
    ours = start(plane, f"nodeagent-{label}", kubeconfig, shipped_config(tmp))
    theirs = processes.kube_scheduler(
        plane, f"kube-scheduler-{label}", {"leaderElection": {"leaderElect": False}}
    )
    with processes.stopped_after(ours, theirs):
        yield ours


def delete_namespace(
    plane: ControlPlane, ours: processes.Process, token: str, namespace: str
) -> None:
    """Delete the namespace's pods, wait until nodeagent has no binding in flight, then
    delete the namespace."""
    admin = plane.admin
    admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": 0})
    eventually(lambda: bindings_in_flight(ours, token) == 0, timeout=60, what="bindings in flight")
    admin.request("DELETE", f"/api/v1/namespaces/{namespace}")
