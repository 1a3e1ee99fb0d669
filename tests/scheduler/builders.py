"""Builders for scheduler tests: Kubernetes-shaped dicts, parsed by the real parser."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nodeagent.scheduler import api, config, framework, objects, registry
from nodeagent.scheduler.snapshot import ClusterSnapshot


def node_dict(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Mapping[str, str]] = (),
    unschedulable: bool = False,
    extra: Mapping[str, str] | None = None,
    images: Sequence[tuple[Sequence[str], int]] = (),
    annotations: Mapping[str, str] | None = None,
    conditions: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra or {})}
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {
            "allocatable": allocatable,
            "images": [{"names": list(n), "sizeBytes": s} for n, s in images],
            "conditions": [{"type": t, "status": s} for t, s in (conditions or {}).items()],
        },
    }


def node(name: str, **kwargs: Any) -> api.Node:
    return objects.parse_node(node_dict(name, **kwargs))


def container(
    name: str = "c",
    *,
    requests: Mapping[str, str] | None = None,
    image: str = "registry.example/app:1",
    host_ports: Iterable[int] = (),
    restart_always: bool = False,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "image": image,
        "resources": {"requests": dict(requests or {})},
        "ports": [{"containerPort": p, "hostPort": p} for p in host_ports],
    }
    extended = {n: v for n, v in (requests or {}).items() if "/" in n}
    if extended:  # the API server wants a limit, equal, on what cannot be overcommitted
        out["resources"]["limits"] = extended
    if restart_always:
        out["restartPolicy"] = "Always"
    return out


def pod_dict(
    name: str = "p",
    *,
    namespace: str = "default",
    requests: Mapping[str, str] | None = None,
    containers: Sequence[dict[str, Any]] | None = None,
    init_containers: Sequence[dict[str, Any]] = (),
    node_name: str = "",
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": list(containers)
        if containers is not None
        else [container(requests=requests)],
        "initContainers": list(init_containers),
        **spec,
    }
    if node_name:
        body["nodeName"] = node_name
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": body}


def pod(name: str = "p", **kwargs: Any) -> api.Pod:
    return objects.parse_pod(pod_dict(name, **kwargs))


def snapshot(nodes: Sequence[api.Node], pods: Iterable[api.Pod] = ()) -> ClusterSnapshot:
    return ClusterSnapshot(nodes, pods)


def default_framework(
    document: Mapping[str, Any] | None = None, now: float = 0.0
) -> framework.Framework:
    plugins = registry.in_tree_registry()
    configuration = config.parse_configuration(document, plugins)
    return framework.Framework(configuration.profiles[0], plugins, framework.Handle(now=now))
