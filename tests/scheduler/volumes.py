"""Builders for the volume plugins' tests: storage objects as the API serves them, parsed
by the real reader, and a harness that runs one plugin's PreFilter and Filter on every
node (both Filter forms, which must agree)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nodeagent.scheduler import api, config, framework, objects, storage
from nodeagent.scheduler.snapshot import ClusterSnapshot
from tests.scheduler import builders


def pv(
    name: str,
    *,
    sc: str = "",
    size: str = "1Gi",
    modes: Sequence[str] = ("ReadWriteOnce",),
    phase: str = "Available",
    labels: Mapping[str, str] | None = None,
    claim: tuple[str, str] | tuple[str, str, str] | None = None,
    hosts: Sequence[str] | None = None,
    affinity: Sequence[Mapping[str, Any]] | None = None,
    csi: tuple[str, str] | None = None,
    source: Mapping[str, Any] | None = None,
    rv: str = "1",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "storageClassName": sc,
        "capacity": {"storage": size},
        "accessModes": list(modes),
    }
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
        if len(claim) == 3:
            spec["claimRef"]["uid"] = claim[2]
    if hosts is not None:
        affinity = [
            {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": list(hosts)}
                ]
            }
        ]
    if affinity is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": list(affinity)}}
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    spec.update(source or {})
    return {
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": dict(labels or {}), "resourceVersion": rv},
        "spec": spec,
        "status": {"phase": phase},
    }


def pvc(
    name: str,
    *,
    sc: str | None = None,
    size: str | None = "1Gi",
    modes: Sequence[str] = ("ReadWriteOnce",),
    volume: str = "",
    bound: bool = False,
    namespace: str = "default",
    selected_node: str | None = None,
    owner_uid: str | None = None,
    phase: str = "Pending",
    deleting: bool = False,
    selector: Mapping[str, Any] | None = None,
    uid: str = "",
    rv: str = "1",
) -> dict[str, Any]:
    annotations = {}
    if bound:
        annotations[storage.ANN_BIND_COMPLETED] = "yes"
    if selected_node is not None:
        annotations[storage.ANN_SELECTED_NODE] = selected_node
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": annotations,
        "uid": uid or f"uid-{namespace}-{name}",
        "resourceVersion": rv,
    }
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": owner_uid, "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = "2024-05-01T10:00:00Z"
    spec: dict[str, Any] = {"accessModes": list(modes), "volumeName": volume}
    if sc is not None:
        spec["storageClassName"] = sc
    if size is not None:
        spec["resources"] = {"requests": {"storage": size}}
    if selector is not None:
        spec["selector"] = dict(selector)
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Bound" if bound else phase},
    }


def storage_class(
    name: str,
    *,
    wait: bool = True,
    provisioner: str = storage.NOT_SUPPORTED_PROVISIONER,
    topologies: Sequence[Mapping[str, Sequence[str]]] = (),
) -> dict[str, Any]:
    return {
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer" if wait else "Immediate",
        "allowedTopologies": [
            {"matchLabelExpressions": [{"key": k, "values": list(v)} for k, v in t.items()]}
            for t in topologies
        ],
    }


def csi_node(name: str, limits: Mapping[str, int | None]) -> dict[str, Any]:
    drivers = []
    for driver, count in limits.items():
        entry: dict[str, Any] = {"name": driver, "nodeID": name}
        if count is not None:
            entry["allocatable"] = {"count": count}
        drivers.append(entry)
    return {"kind": "CSINode", "metadata": {"name": name}, "spec": {"drivers": drivers}}


def csi_driver(name: str, *, capacity: bool) -> dict[str, Any]:
    return {"kind": "CSIDriver", "metadata": {"name": name}, "spec": {"storageCapacity": capacity}}


def capacity(
    name: str,
    sc: str,
    *,
    size: str | None,
    labels: Mapping[str, str] | None,
    maximum: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": sc,
    }
    if size is not None:
        body["capacity"] = size
    if maximum is not None:
        body["maximumVolumeSize"] = maximum
    if labels is not None:
        body["nodeTopology"] = {"matchLabels": dict(labels)}
    return body


def claim_volume(claim: str, name: str = "") -> dict[str, Any]:
    return {"name": name or f"vol-{claim}", "persistentVolumeClaim": {"claimName": claim}}


def ephemeral_volume(name: str) -> dict[str, Any]:
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}


def pod_with(
    name: str = "p", *volumes: dict[str, Any], node_name: str = "", uid: str = ""
) -> api.Pod:
    body = builders.pod_dict(name, node_name=node_name, volumes=list(volumes))
    if uid:
        body["metadata"]["uid"] = uid
    return objects.parse_pod(body)


def catalog(*items: dict[str, Any]) -> storage.VolumeCatalog:
    cluster = objects.read_cluster(
        [{"kind": "List", "items": [builders.node_dict("unused"), *items]}]
    )
    return storage.VolumeCatalog(cluster.storage)


def handle(
    volumes: storage.VolumeCatalog, *, gates: Iterable[config.FeatureGate] = ()
) -> framework.Handle:
    return framework.Handle(volumes=volumes, features=config.FeatureGates(frozenset(gates)))


@dataclass(frozen=True)
class Outcome:
    pre_filter: api.Status
    filters: tuple[api.Status, ...]
    state: framework.CycleState


def run(
    plugin: Any,
    pod: api.Pod,
    nodes: Sequence[api.Node],
    existing: Iterable[api.Pod] = (),
) -> Outcome:
    """PreFilter, then Filter on every node in both forms (they must agree)."""
    snapshot = ClusterSnapshot(nodes, existing)
    state = framework.CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    if not status.is_success:
        return Outcome(status, (), state)
    by_name = {name: i for i, name in enumerate(snapshot.names)}
    order = np.array([by_name[n.name] for n in nodes], dtype=np.intp)
    mask = plugin.filter(state, pod, snapshot, order)
    statuses = tuple(plugin.filter_node(state, pod, snapshot, int(i)) for i in order)
    assert [s.is_success for s in statuses] == mask.tolist()
    return Outcome(status, statuses, state)
