"""The cluster as one scheduling cycle sees it, laid out for vectorized evaluation.

kube-scheduler walks a list of per-node structs and calls every Filter and Score plugin
once per node. In Python that costs microseconds per call, so this snapshot stores the
cluster by column instead: node ``i`` (in node-tree order, see :func:`node_tree_order`)
is column ``i`` of

* ``allocatable`` / ``requested``: int64 ``[resource, node]`` matrices (milli-CPU,
  bytes, counts), ``nonzero_requested`` for the scoring strategies' cpu and memory;
* ``pod_count`` / ``allowed_pods``;
* label columns (:class:`LabelColumns`): one int32 code array per label key, so a node
  selector is a handful of array comparisons however many nodes there are;
* ``taint_set``: the id of the node's distinct taint list (clusters have few), so
  toleration checks run once per taint set, not once per node;
* image presence per image name.

Plugins receive the snapshot and an array of node indices and answer for all of them
at once. Static node data never changes during a plan; per-node usage changes only
through :meth:`ClusterSnapshot.add_pod` / :meth:`remove_pod` (the scheduler's "assume").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from nodeagent.scheduler import api

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
BETA_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"

NodeIndices = npt.NDArray[np.intp]
Int64s = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

FIXED_RESOURCES = (api.CPU, api.MEMORY, api.EPHEMERAL_STORAGE)
CPU_ROW, MEMORY_ROW, EPHEMERAL_ROW = 0, 1, 2


def zone_key(labels: Mapping[str, str]) -> str:
    """kube-scheduler's node-tree key: region and zone, or ``""`` for neither."""
    zone = labels.get(ZONE_LABEL, labels.get(BETA_ZONE_LABEL, ""))
    region = labels.get(REGION_LABEL, labels.get(BETA_REGION_LABEL, ""))
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"


def node_tree_order(nodes: Sequence[api.Node]) -> list[int]:
    """Input positions in zone round-robin order: the 0th node of every zone (zones in
    first-seen order), then the 1st of every zone, and so on, skipping spent zones."""
    zones: dict[str, list[int]] = {}
    for position, node in enumerate(nodes):
        zones.setdefault(zone_key(node.labels), []).append(position)
    order: list[int] = []
    members = list(zones.values())
    depth = 0
    while len(order) < len(nodes):
        order.extend(zone[depth] for zone in members if depth < len(zone))
        depth += 1
    return order


@dataclass(frozen=True, slots=True)
class LabelColumn:
    codes: npt.NDArray[np.int32]
    """Per node: index into ``values``, or -1 when the node lacks the label."""
    values: tuple[str, ...]
    code_of: Mapping[str, int]


class LabelColumns:
    """Node labels by key, for vectorized selector evaluation."""

    def __init__(self, labels: Sequence[Mapping[str, str]]) -> None:
        self._size = len(labels)
        raw: dict[str, dict[int, str]] = {}
        for i, node_labels in enumerate(labels):
            for key, value in node_labels.items():
                raw.setdefault(key, {})[i] = value
        self._columns: dict[str, LabelColumn] = {}
        for key, by_node in raw.items():
            code_of: dict[str, int] = {}
            codes = np.full(self._size, -1, dtype=np.int32)
            for i, value in by_node.items():
                codes[i] = code_of.setdefault(value, len(code_of))
            self._columns[key] = LabelColumn(codes, tuple(code_of), code_of)
        self._absent = np.full(self._size, -1, dtype=np.int32)

    def column(self, key: str) -> LabelColumn:
        found = self._columns.get(key)
        return found if found is not None else LabelColumn(self._absent, (), {})


@dataclass(frozen=True, slots=True)
class ImageState:
    size: int
    """Bytes, as the first node listing the image reported it."""
    nodes: NodeIndices


class ClusterSnapshot:
    """Nodes and their pods, by column; node ``i`` is ``nodes[i]`` in node-tree order."""

    def __init__(self, nodes: Sequence[api.Node], pods: Iterable[api.Pod] = ()) -> None:
        order = node_tree_order(nodes)
        self.nodes: tuple[api.Node, ...] = tuple(nodes[i] for i in order)
        self.names: tuple[str, ...] = tuple(node.name for node in self.nodes)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        size = len(self.nodes)
        self.size = size
        self.all_nodes: NodeIndices = np.arange(size, dtype=np.intp)

        scalar = sorted(
            {name for node in self.nodes for name in node.allocatable}
            - {*FIXED_RESOURCES, api.PODS}
        )
        self.resource_names: list[str] = [*FIXED_RESOURCES, *scalar]
        self.row: dict[str, int] = {name: i for i, name in enumerate(self.resource_names)}
        self.allocatable: Int64s = np.zeros((len(self.resource_names), size), dtype=np.int64)
        for i, node in enumerate(self.nodes):
            for name, amount in node.allocatable.items():
                if name != api.PODS:
                    self.allocatable[self.row[name], i] = amount
        self.allowed_pods: Int64s = np.array(
            [node.allocatable.get(api.PODS, 0) for node in self.nodes], dtype=np.int64
        )
        self.requested: Int64s = np.zeros_like(self.allocatable)
        self.nonzero_requested: Int64s = np.zeros((2, size), dtype=np.int64)
        self.pod_count: Int64s = np.zeros(size, dtype=np.int64)
        self.pods_on_node: list[list[api.Pod]] = [[] for _ in range(size)]
        self.used_ports: dict[int, list[api.HostPort]] = {}

        self.labels = LabelColumns([node.labels for node in self.nodes])
        self.unschedulable: Mask = np.array([n.unschedulable for n in self.nodes], dtype=bool)
        taint_set_of: dict[tuple[api.Taint, ...], int] = {}
        self.taint_set: NodeIndices = np.array(
            [taint_set_of.setdefault(n.taints, len(taint_set_of)) for n in self.nodes],
            dtype=np.intp,
        )
        self.taint_sets: tuple[tuple[api.Taint, ...], ...] = tuple(taint_set_of)

        holders: dict[str, list[int]] = {}
        sizes: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            for image in node.images:
                for name in image.names:
                    sizes.setdefault(name, image.size)
                    node_list = holders.setdefault(name, [])
                    if not node_list or node_list[-1] != i:
                        node_list.append(i)
        self.images: dict[str, ImageState] = {
            name: ImageState(sizes[name], np.array(held, dtype=np.intp))
            for name, held in holders.items()
        }

        for pod in pods:
            if pod.node_name in self.index:
                self.add_pod(pod, self.index[pod.node_name])

    def resource_row(self, name: str) -> int | None:
        return self.row.get(name)

    def _ensure_row(self, name: str) -> int:
        row = self.row.get(name)
        if row is None:
            row = len(self.resource_names)
            self.resource_names.append(name)
            self.row[name] = row
            zeros = np.zeros((1, self.size), dtype=np.int64)
            self.allocatable = np.vstack((self.allocatable, zeros))
            self.requested = np.vstack((self.requested, zeros))
        return row

    def add_pod(self, pod: api.Pod, node: int) -> None:
        """Account ``pod`` on node ``node`` (a bound pod, or one the scheduler assumes)."""
        self._account(pod, node, 1)
        self.pods_on_node[node].append(pod)
        if pod.host_ports:
            self.used_ports.setdefault(node, []).extend(pod.host_ports)

    def remove_pod(self, pod: api.Pod, node: int) -> None:
        self._account(pod, node, -1)
        self.pods_on_node[node].remove(pod)
        if pod.host_ports:
            ports = self.used_ports[node]
            for port in pod.host_ports:
                ports.remove(port)

    def _account(self, pod: api.Pod, node: int, sign: int) -> None:
        for name, amount in pod.requests.items():
            if name != api.PODS:
                row = self._ensure_row(name)  # may grow (replace) the matrices
                self.requested[row, node] += sign * amount
        self.nonzero_requested[CPU_ROW, node] += sign * pod.nonzero_cpu
        self.nonzero_requested[MEMORY_ROW, node] += sign * pod.nonzero_memory
        self.pod_count[node] += sign
