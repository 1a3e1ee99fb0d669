"""Builders for the API objects tests put into the fake cluster."""

from __future__ import annotations

import uuid
from typing import Any


def node(
    name: str = "node-a",
    *,
    conditions: list[dict[str, Any]] | None = None,
    taints: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "conditions": conditions
            if conditions is not None
            else [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                },
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                    "message": "kubelet has sufficient memory available",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                },
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }
    if taints is not None:
        obj["spec"]["taints"] = taints
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    return obj


def pod(
    name: str,
    *,
    namespace: str = "default",
    node_name: str = "node-a",
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    priority: int | None = None,
    phase: str = "Running",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    owner_kind: str | None = None,
    grace: int | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "containers": [{"name": "main", "image": "busybox", "resources": resources}],
    }
    if priority is not None:
        spec["priority"] = priority
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or str(uuid.uuid4()),
        "labels": labels or {},
    }
    if annotations:
        meta["annotations"] = annotations
    if owner_kind:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner_kind,
                "name": "owner",
                "uid": "o-1",
                "controller": True,
            }
        ]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}
