"""Pods for the real node: built from the workload image (``imagePullPolicy: Never``:
nothing can be pulled), and read back through the real API and the node's cgroups."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.controlplane.cluster import ControlPlane
from tests.node import images
from tests.node.node import Node


def workload(
    name: str,
    namespace: str,
    args: list[str],
    *,
    node: str | None = None,
    scheduler: str | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    grace: int = 1,
    priority_class: str | None = None,
) -> dict[str, Any]:
    """A pod of one container running ``workload ARGS`` (see workload.c)."""
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "main",
                "image": images.WORKLOAD,
                "imagePullPolicy": "Never",
                "args": args,
                "resources": resources,
                "volumeMounts": mounts or [],
            }
        ],
        "volumes": volumes or [],
    }
    if node is not None:
        spec["nodeName"] = node
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }


def create(plane: ControlPlane, pod: dict[str, Any]) -> dict[str, Any]:
    namespace = pod["metadata"]["namespace"]
    created: dict[str, Any] = plane.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    return created


def get(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    status, body = plane.admin.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    if status == 404:
        return None
    if status != 200:
        raise RuntimeError(f"GET pod {namespace}/{name}: {status} {body}")
    result: dict[str, Any] = body
    return result


def wait_running(
    plane: ControlPlane, namespace: str, name: str, timeout: float = 60
) -> dict[str, Any]:
    """Wait until the kubelet reports the pod Running and Ready; fail on a terminal phase."""
    deadline = time.monotonic() + timeout
    while True:
        pod = get(plane, namespace, name)
        status = (pod or {}).get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        if pod is not None and status.get("phase") == "Running" and ready:
            return pod
        if status.get("phase") in ("Failed", "Succeeded"):
            raise RuntimeError(f"pod {namespace}/{name} ended: {status}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"pod {namespace}/{name} not running after {timeout:.0f} s: {status}"
            )
        time.sleep(0.1)


def cgroup(node: Node, pod: dict[str, Any]) -> Path:
    """The pod's memory cgroup as the kubelet's cgroupfs driver lays it out."""
    qos = str(pod["status"]["qosClass"]).lower()
    uid = pod["metadata"]["uid"]
    return node.kubepods / ("" if qos == "guaranteed" else qos) / f"pod{uid}"


def wait_gone(plane: ControlPlane, namespace: str, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while get(plane, namespace, name) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"pod {namespace}/{name} still there after {timeout:.0f} s")
        time.sleep(0.1)


USAGE_MOUNT: dict[str, Any] = {"name": "node-memory", "mountPath": "/node-memory", "readOnly": True}
"""Where a ramp reads the kubepods cgroup's usage (:func:`usage_volume`)."""


def usage_volume(node: Node) -> dict[str, Any]:
    """The node's kubepods memory cgroup, read-only: the ramp's measure of its crossing."""
    return {"name": "node-memory", "hostPath": {"path": str(node.kubepods), "type": "Directory"}}


def hold_args(size: int) -> list[str]:
    """``workload hold``: ``size`` bytes of anonymous memory, held."""
    return ["hold", str(size)]
