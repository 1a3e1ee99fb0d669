"""Objects for the real apiserver, complete enough to pass its validation (which the
fake's builders need not), and reading helpers over :class:`Rest`."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.controlplane.cluster import ControlPlane, Rest

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
T = TypeVar("T")


def node(
    name: str,
    *,
    cpu: str = "2",
    memory: str = "4Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                **(labels or {}),
            },
        },
        "spec": {"taints": taints} if taints else {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def pod(
    name: str,
    namespace: str,
    *,
    cpu: str = "100m",
    scheduler: str = "nodeagent-scheduler",
    priority_class: str | None = None,
    labels: dict[str, str] | None = None,
    node_name: str | None = None,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 30,
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_name:
        spec["nodeName"] = node_name
    if tolerations:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }


def running(rest: Rest, namespace: str, name: str) -> dict[str, Any]:
    """Mark a pod Running and Ready, as its kubelet would (the disruption controller
    counts only ready pods as healthy)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result: dict[str, Any] = rest.merge_patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}/status",
        {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                ],
            }
        },
    )
    return result


def get_pod(rest: Rest, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = rest.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return result


def pod_condition(pod_object: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (pod_object.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return dict(condition)
    return None


def events(rest: Rest, namespace: str, *, reason: str | None = None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = rest.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if reason is None or e.get("reason") == reason]


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize DIRECTORY``'s objects, as ``kubectl apply -k`` would send them."""
    done = subprocess.run(
        ["kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory}: {done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def agent_pod_token(
    plane: ControlPlane, shipped: list[dict[str, Any]], name: str, node: str
) -> str:
    """A pod of the shipped DaemonSet on ``node`` (its template: the agent's
    ServiceAccount, system-node-critical, so never an eviction candidate) and the token
    the kubelet would mount into it: bound to the pod, so the apiserver puts ``node`` in
    the caller's user info, which the node-confinement policy reads."""
    [daemonset] = [d for d in shipped if d["kind"] == "DaemonSet"]
    template = daemonset["spec"]["template"]
    namespace = daemonset["metadata"]["namespace"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template["metadata"], "name": name, "namespace": namespace},
        "spec": {**template["spec"], "nodeName": node},
    }
    plane.admin.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    account = template["spec"]["serviceAccountName"]
    return plane.service_account_token(namespace, account, create=False, pod=name)
