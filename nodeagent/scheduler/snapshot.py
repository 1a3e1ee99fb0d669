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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from nodeagent.k8s.pressure import Taint
from nodeagent.k8s.resources import CPU, EPHEMERAL_STORAGE, MEMORY
from nodeagent.scheduler import api

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
BETA_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"

NodeIndices = npt.NDArray[np.intp]
Int64s = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Float64s = npt.NDArray[np.float64]

FIXED_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE)
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

    def set_node(self, index: int, labels: Mapping[str, str]) -> None:
        """Replace node ``index``'s labels (the live scheduler's node update)."""
        for key in set(self._columns) - set(labels):
            self._columns[key].codes[index] = -1
        for key, value in labels.items():
            column = self._columns.get(key)
            if column is None:
                codes = np.full(self._size, -1, dtype=np.int32)
                column = self._columns[key] = LabelColumn(codes, (), {})
            code = column.code_of.get(value)
            if code is None:
                code_of = dict(column.code_of)
                code = code_of[value] = len(code_of)
                column = self._columns[key] = LabelColumn(
                    column.codes, (*column.values, value), code_of
                )
            column.codes[index] = code

    def column(self, key: str) -> LabelColumn:
        found = self._columns.get(key)
        return found if found is not None else LabelColumn(self._absent, (), {})


GroupKey = tuple[str, frozenset[tuple[str, str]], bool]
"""A pod group: namespace, labels, terminating."""


class PodGroups:
    """Bound pods grouped by namespace, labels and whether they are terminating, with
    each group's pod count per node.

    Workloads share labels (a Deployment's pods differ only in name), so a cluster of
    tens of thousands of pods has a few hundred groups. PodTopologySpread and
    InterPodAffinity ask "how many pods matching this selector, per node": the answer is
    the sum of the matching groups' counts, found through an inverted index on
    ``(key, value)``, without looking at a single pod."""

    def __init__(self) -> None:
        self.keys: list[GroupKey] = []
        self.labels: list[dict[str, str]] = []
        self.per_node: list[dict[int, int]] = []
        self._id: dict[GroupKey, int] = {}
        self._by_pair: dict[tuple[str, str], set[int]] = {}

    def update(self, pod: api.Pod, node: int, sign: int) -> None:
        key = (pod.namespace, frozenset(pod.labels.items()), pod.deleting)
        group = self._id.get(key)
        if group is None:
            group = self._id[key] = len(self.keys)
            self.keys.append(key)
            self.labels.append(dict(pod.labels))
            self.per_node.append({})
            for pair in pod.labels.items():
                self._by_pair.setdefault(pair, set()).add(group)
        counts = self.per_node[group]
        left = counts.get(node, 0) + sign
        if left:
            counts[node] = left
        else:
            counts.pop(node, None)

    def matching(
        self,
        selector: api.LabelSelector,
        namespace: Callable[[str], bool],
        *,
        include_terminating: bool = True,
    ) -> list[int]:
        """Groups whose labels ``selector`` matches, in namespaces ``namespace`` accepts."""
        candidates: Iterable[int] = range(len(self.keys))
        for pair in selector.match_labels:
            candidates = self._by_pair.get(pair, set())
            break
        found = []
        for group in candidates:
            ns, _, terminating = self.keys[group]
            if terminating and not include_terminating:
                continue
            if self.per_node[group] and namespace(ns) and selector.matches(self.labels[group]):
                found.append(group)
        return found

    def placements(self, groups: Iterable[int]) -> tuple[NodeIndices, Int64s]:
        """The nodes holding pods of ``groups`` and how many each (a node may repeat)."""
        nodes: list[int] = []
        counts: list[int] = []
        for group in groups:
            per_node = self.per_node[group]
            nodes += per_node.keys()
            counts += per_node.values()
        return np.array(nodes, dtype=np.intp), np.array(counts, dtype=np.int64)

    def counts(self, groups: Iterable[int], size: int) -> Int64s:
        """Pods of ``groups`` per node, as an array over all nodes."""
        total = np.zeros(size, dtype=np.int64)
        for group in groups:
            per_node = self.per_node[group]
            if per_node:
                nodes = np.fromiter(per_node.keys(), dtype=np.intp, count=len(per_node))
                amounts = np.fromiter(per_node.values(), dtype=np.int64, count=len(per_node))
                np.add.at(total, nodes, amounts)
        return total


class TermKind(StrEnum):
    REQUIRED_AFFINITY = "requiredAffinity"
    REQUIRED_ANTI_AFFINITY = "requiredAntiAffinity"
    PREFERRED_AFFINITY = "preferredAffinity"
    PREFERRED_ANTI_AFFINITY = "preferredAntiAffinity"


TermKey = tuple[TermKind, str, api.PodAffinityTerm, int]
"""Kind, the owning pod's namespace, the term, its weight (1 for required terms)."""


class AffinityTerms:
    """The pod (anti-)affinity terms of bound pods, deduplicated, with how many pods on
    each node carry each one: what InterPodAffinity's symmetry checks iterate (replicas
    of a workload share their terms, so this is short however many pods there are)."""

    def __init__(self) -> None:
        self.per_node: dict[TermKey, dict[int, int]] = {}
        self._by_pair: dict[tuple[str, str], set[TermKey]] = {}
        """Terms by the first ``matchLabels`` pair of their selector: only a pod carrying
        that pair can match them."""
        self._unindexed: set[TermKey] = set()

    @staticmethod
    def keys_of(pod: api.Pod) -> list[TermKey]:
        affinity = pod.pod_affinity
        if affinity is None:
            return []
        ns = pod.namespace
        keys: list[TermKey] = [(TermKind.REQUIRED_AFFINITY, ns, t, 1) for t in affinity.required]
        keys += [(TermKind.REQUIRED_ANTI_AFFINITY, ns, t, 1) for t in affinity.required_anti]
        keys += [(TermKind.PREFERRED_AFFINITY, ns, w.term, w.weight) for w in affinity.preferred]
        keys += [
            (TermKind.PREFERRED_ANTI_AFFINITY, ns, w.term, w.weight)
            for w in affinity.preferred_anti
        ]
        return keys

    def update(self, pod: api.Pod, node: int, sign: int) -> None:
        for key in self.keys_of(pod):
            counts = self.per_node.get(key)
            if counts is None:
                counts = self.per_node[key] = {}
                self._index(key).add(key)
            left = counts.get(node, 0) + sign
            if left:
                counts[node] = left
            else:
                counts.pop(node, None)
                if not counts:
                    del self.per_node[key]
                    self._index(key).discard(key)

    def _index(self, key: TermKey) -> set[TermKey]:
        selector = key[2].selector
        if selector is not None and selector.match_labels:
            return self._by_pair.setdefault(selector.match_labels[0], set())
        return self._unindexed

    def could_match(self, pod: api.Pod, *kinds: TermKind) -> list[tuple[TermKey, dict[int, int]]]:
        """The terms of ``kinds`` whose selector might select ``pod`` (a superset: the
        caller still matches each), found through the pod's own labels."""
        keys = set(self._unindexed)
        for pair in pod.labels.items():
            keys |= self._by_pair.get(pair, set())
        return [(key, self.per_node[key]) for key in keys if key[0] in kinds]


@dataclass(frozen=True, slots=True)
class NodePods:
    """One node's bound pods as arrays, in ``pods_on_node`` order: what preemption's dry
    run reads for every candidate node, built once per node and kept until the node's
    pods change (:meth:`ClusterSnapshot.node_pods`)."""

    pods: tuple[api.Pod, ...]
    priority: Int64s
    started: Float64s
    """``status.startTime``; NaN where the pod has none."""
    usage: Int64s
    """:meth:`ClusterSnapshot.usage_matrix` of ``pods``."""


@dataclass(frozen=True, slots=True)
class ImageState:
    size: int
    """Bytes, as the first node listing the image reported it."""
    nodes: NodeIndices


class ClusterSnapshot:
    """Nodes and their pods, by column; node ``i`` is ``nodes[i]`` in node-tree order."""

    def __init__(
        self,
        nodes: Sequence[api.Node],
        pods: Iterable[api.Pod] = (),
        *,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        workloads: Sequence[api.Workload] = (),
        disruption_budgets: Sequence[api.DisruptionBudget] = (),
    ) -> None:
        self.disruption_budgets: list[api.DisruptionBudget] = list(disruption_budgets)
        """PodDisruptionBudgets, for preemption's choice of victims."""
        self.namespace_labels: Mapping[str, Mapping[str, str]] = namespaces or {}
        """Namespace labels, for pod affinity's ``namespaceSelector``."""
        self.workloads: tuple[api.Workload, ...] = tuple(workloads)
        """Services, ReplicaSets, StatefulSets...: default spreading selectors."""
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
        self.pod_groups = PodGroups()
        self._slot_of: dict[int, int] = {}
        """Bound pod (by ``id``; the pods are held in ``pods_on_node``, so ids are stable)
        -> its column in ``_slot_usage``, filled the first time preemption asks."""
        self._slot_usage: Int64s = np.zeros((len(self.resource_names) + 3, 0), dtype=np.int64)
        """Per bound pod, :meth:`usage_matrix`'s column: what preemption's dry run shifts."""
        self._free_slots: list[int] = []
        self._node_pods: dict[int, NodePods] = {}
        """Node -> :meth:`node_pods`. Invariant: an entry's pods are the first pods of
        ``pods_on_node[node]`` (pods are only appended, and removing one of the entry's
        drops the entry), so the entry is current when the lengths agree. A pod added
        and removed again (a nominated pod during a cycle) keeps the entry."""
        self.affinity_terms = AffinityTerms()
        self.claim_users: dict[str, int] = {}
        """``namespace/claim`` -> how many pods here use it (``IsPVCUsedByPods``)."""

        self.static_generation = 0
        """Bumped by :meth:`update_node`: caches of static node data key on it."""
        self.labels = LabelColumns([node.labels for node in self.nodes])
        self.unschedulable: Mask = np.array([n.unschedulable for n in self.nodes], dtype=bool)
        taint_set_of: dict[tuple[Taint, ...], int] = {}
        self.taint_set: NodeIndices = np.array(
            [taint_set_of.setdefault(n.taints, len(taint_set_of)) for n in self.nodes],
            dtype=np.intp,
        )
        self.taint_sets: tuple[tuple[Taint, ...], ...] = tuple(taint_set_of)
        self._taint_set_of = taint_set_of

        self.images: dict[str, ImageState] = {}
        self._index_images()

        for pod in pods:
            if pod.node_name in self.index:
                self.add_pod(pod, self.index[pod.node_name])

    def update_node(self, index: int, node: api.Node) -> None:
        """Replace node ``index``'s static data (labels, taints, allocatable, images,
        conditions, annotations) in place, keeping its pods: what a live scheduler does
        when a watched Node changes, instead of rebuilding every column. The node's
        name must stay the same."""
        old = self.nodes[index]
        if old.name != node.name:
            raise ValueError(f"update_node: node {index} is {old.name}, not {node.name}")
        nodes = list(self.nodes)
        nodes[index] = node
        self.nodes = tuple(nodes)
        if node.labels != old.labels:
            self.labels.set_node(index, node.labels)
        if node.taints != old.taints:
            taint_set = self._taint_set_of.get(node.taints)
            if taint_set is None:
                taint_set = self._taint_set_of[node.taints] = len(self._taint_set_of)
                self.taint_sets = (*self.taint_sets, node.taints)
            self.taint_set[index] = taint_set
        self.unschedulable[index] = node.unschedulable
        if node.allocatable != old.allocatable:
            self.allocatable[:, index] = 0
            for name, amount in node.allocatable.items():
                if name != api.PODS:
                    self.allocatable[self._ensure_row(name), index] = amount
            self.allowed_pods[index] = node.allocatable.get(api.PODS, 0)
        if node.images != old.images:
            self._index_images()
        self.static_generation += 1

    def _index_images(self) -> None:
        holders: dict[str, list[int]] = {}
        sizes: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            for image in node.images:
                for name in image.names:
                    sizes.setdefault(name, image.size)
                    node_list = holders.setdefault(name, [])
                    if not node_list or node_list[-1] != i:
                        node_list.append(i)
        self.images = {
            name: ImageState(sizes[name], np.array(held, dtype=np.intp))
            for name, held in holders.items()
        }

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
            self._node_pods.clear()  # their usage matrices lack the new row
        return row

    def add_pod(self, pod: api.Pod, node: int) -> None:
        """Account ``pod`` on node ``node`` (a bound pod, or one the scheduler assumes)."""
        self.account(pod, node, 1)
        self._book(pod, node)

    def _book(self, pod: api.Pod, node: int) -> None:
        """Everything :meth:`add_pod` records besides the resource columns."""
        self.pods_on_node[node].append(pod)  # node_pods' cached prefix stays as it was
        self.pod_groups.update(pod, node, 1)
        if pod.pod_affinity is not None:
            self.affinity_terms.update(pod, node, 1)
        if pod.host_ports:
            self.used_ports.setdefault(node, []).extend(pod.host_ports)
        if pod.volumes:
            self._count_claims(pod, 1)

    def add_pods(self, pods: Sequence[api.Pod], nodes: Sequence[int]) -> None:
        """:meth:`add_pod` for many pods (``pods[j]`` on ``nodes[j]``), the resource
        columns in one scatter."""
        self.shift_requests(pods, nodes, 1)
        for pod, node in zip(pods, nodes, strict=True):
            self._book(pod, node)

    def remove_pods(self, pods: Sequence[api.Pod], nodes: Sequence[int]) -> None:
        self.shift_requests(pods, nodes, -1)
        for pod, node in zip(pods, nodes, strict=True):
            self._unbook(pod, node)

    def shift_requests(self, pods: Sequence[api.Pod], nodes: Sequence[int], sign: int) -> None:
        """:meth:`account` for many pods at once: one scatter per column."""
        if not pods:
            return
        rows: list[int] = []
        columns: list[int] = []
        amounts: list[int] = []
        row_of = self.row
        for pod, node in zip(pods, nodes, strict=True):
            for name, amount in pod.requests.items():
                if name != api.PODS:
                    row = row_of.get(name)
                    rows.append(self._ensure_row(name) if row is None else row)
                    columns.append(node)
                    amounts.append(sign * amount)
        at = np.asarray(nodes, dtype=np.intp)
        np.add.at(self.requested, (rows, columns), np.asarray(amounts, dtype=np.int64))
        cpu = np.fromiter((p.nonzero_cpu for p in pods), dtype=np.int64, count=len(pods))
        memory = np.fromiter((p.nonzero_memory for p in pods), dtype=np.int64, count=len(pods))
        np.add.at(self.nonzero_requested[CPU_ROW], at, sign * cpu)
        np.add.at(self.nonzero_requested[MEMORY_ROW], at, sign * memory)
        np.add.at(self.pod_count, at, sign)

    def remove_pod(self, pod: api.Pod, node: int) -> None:
        self.account(pod, node, -1)
        self._unbook(pod, node)

    def _unbook(self, pod: api.Pod, node: int) -> None:
        pods = self.pods_on_node[node]
        # By identity, newest first: list.remove would compare whole pods field by field.
        for i in range(len(pods) - 1, -1, -1):
            if pods[i] is pod:
                del pods[i]
                break
        else:
            raise ValueError(f"pod {pod.key} is not on node {self.names[node]}")
        cached = self._node_pods.get(node)
        if cached is not None and i < len(cached.pods):
            del self._node_pods[node]
        self.pod_groups.update(pod, node, -1)
        if pod.pod_affinity is not None:
            self.affinity_terms.update(pod, node, -1)
        slot = self._slot_of.pop(id(pod), None)
        if slot is not None:
            self._slot_usage[:, slot] = 0
            self._free_slots.append(slot)
        if pod.host_ports:
            ports = self.used_ports[node]
            for port in pod.host_ports:
                ports.remove(port)
        if pod.volumes:
            self._count_claims(pod, -1)

    def _count_claims(self, pod: api.Pod, sign: int) -> None:
        users = self.claim_users
        for volume in pod.volumes:
            if volume.kind is api.VolumeKind.CLAIM:
                name = volume.claim_name
            elif volume.kind is api.VolumeKind.EPHEMERAL:
                name = f"{pod.name}-{volume.name}"
            else:
                continue
            key = f"{pod.namespace}/{name}"
            left = users.get(key, 0) + sign
            if left > 0:
                users[key] = left
            else:
                users.pop(key, None)

    def _usage_column(self, pod: api.Pod) -> Int64s:
        column = np.zeros(len(self.resource_names) + 3, dtype=np.int64)
        for name, amount in pod.requests.items():
            if name != api.PODS:
                column[self._ensure_row(name)] = amount
        resources = len(self.resource_names)
        column = column[: resources + 3]
        column[resources : resources + 3] = (pod.nonzero_cpu, pod.nonzero_memory, 1)
        return column

    def _new_slot(self, pod: api.Pod) -> int:
        column = self._usage_column(pod)  # may add resource rows
        self._sync_slot_rows()
        if not self._free_slots:
            grown = max(64, self._slot_usage.shape[1])
            start = self._slot_usage.shape[1]
            self._slot_usage = np.hstack(
                (self._slot_usage, np.zeros((len(column), grown), dtype=np.int64))
            )
            self._free_slots.extend(range(start + grown - 1, start - 1, -1))
        slot = self._free_slots.pop()
        self._slot_usage[:, slot] = column
        return slot

    def _sync_slot_rows(self) -> None:
        """Give ``_slot_usage`` the resource rows added since it was last grown (zero for
        the pods already there), so every usage matrix has one row per resource."""
        missing = len(self.resource_names) + 3 - self._slot_usage.shape[0]
        if missing:
            at = self._slot_usage.shape[0] - 3
            self._slot_usage = np.insert(self._slot_usage, [at] * missing, 0, axis=0)

    def usage_matrix(self, pods: Sequence[api.Pod]) -> Int64s:
        """The usage of ``pods`` (bound here) as columns: resource rows, then non-zero cpu and
        memory, then 1 (the pod itself) - what :meth:`shift_columns` adds to nodes."""
        slot_of = self._slot_of
        slots = [slot_of.get(id(pod), -1) for pod in pods]
        for j, pod in enumerate(pods):
            if slots[j] < 0:  # first time asked: kept until the pod is removed
                slots[j] = slot_of[id(pod)] = self._new_slot(pod)
        self._sync_slot_rows()
        return self._slot_usage[:, slots]

    def node_pods(self, nodes: Iterable[int]) -> list[NodePods]:
        """Each of ``nodes``' bound pods as arrays (cached until they change)."""
        nodes = list(nodes)
        cache, on_node = self._node_pods, self.pods_on_node
        resources = len(self.resource_names)
        out: list[NodePods] = []
        for node in nodes:
            cached = cache.get(node)
            if cached is None or len(cached.pods) != len(on_node[node]):
                cached = cache[node] = self._arrays_of(tuple(on_node[node]))
            out.append(cached)
        if len(self.resource_names) != resources:  # a new row: make every matrix have it
            return self.node_pods(nodes)
        return out

    def _arrays_of(self, pods: tuple[api.Pod, ...]) -> NodePods:
        count = len(pods)
        return NodePods(
            pods,
            np.fromiter((p.priority for p in pods), dtype=np.int64, count=count),
            np.fromiter(
                (np.nan if p.start_time is None else p.start_time for p in pods),
                dtype=np.float64,
                count=count,
            ),
            self.usage_matrix(pods),
        )

    def shift_columns(
        self, usage: Int64s, nodes: NodeIndices, sign: int, *, distinct: bool = False
    ) -> None:
        """Add (``sign`` 1) or take away (-1) :meth:`usage_matrix` columns on ``nodes``
        (one node per column, repeats allowed unless ``distinct``): :meth:`account` for
        many pods at once."""
        if len(nodes) == 0:
            return
        resources = usage.shape[0] - 3
        if distinct:  # no repeated node: a plain indexed add, much faster than add.at
            self.requested[:resources, nodes] += sign * usage[:resources]
            self.nonzero_requested[:, nodes] += sign * usage[resources : resources + 2]
            self.pod_count[nodes] += sign * usage[resources + 2]
            return
        for row in range(resources):
            if usage[row].any():
                np.add.at(self.requested[row], nodes, sign * usage[row])
        np.add.at(self.nonzero_requested[CPU_ROW], nodes, sign * usage[resources])
        np.add.at(self.nonzero_requested[MEMORY_ROW], nodes, sign * usage[resources + 1])
        np.add.at(self.pod_count, nodes, sign * usage[resources + 2])

    def account(self, pod: api.Pod, node: int, sign: int) -> None:
        """Shift node ``node``'s resource columns by ``pod``'s requests (``sign`` 1 or
        -1) and nothing else: what a resource-only dry run (preemption) needs."""
        for name, amount in pod.requests.items():
            if name != api.PODS:
                row = self._ensure_row(name)  # may grow (replace) the matrices
                self.requested[row, node] += sign * amount
        self.nonzero_requested[CPU_ROW, node] += sign * pod.nonzero_cpu
        self.nonzero_requested[MEMORY_ROW, node] += sign * pod.nonzero_memory
        self.pod_count[node] += sign
