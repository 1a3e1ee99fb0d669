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

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar, cast

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

_T = TypeVar("_T")

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
    return _round_robin(list(zones.values()))


def _round_robin(zones: list[list[_T]]) -> list[_T]:
    if len(zones) <= 1:
        return list(zones[0]) if zones else []
    spent = object()  # zip_longest's filler: no node is it
    mixed = itertools.chain.from_iterable(itertools.zip_longest(*zones, fillvalue=spent))
    return cast(list[_T], [item for item in mixed if item is not spent])


class NodeTree:
    """kube-scheduler's node tree (``nodeTree`` in pkg/scheduler/backend/cache/node_tree.go):
    node names by zone, zones in the order they first gained a node. A node joins the end
    of its zone; a zone left empty is dropped (and goes last if it comes back); a node
    whose zone changes leaves its zone and joins the end of the new one. :meth:`order`
    is ``nodeTree.list()``: the zones round robin, the order in which the snapshot lays
    out its nodes and the node sampling walks them.

    The tree also knows where its order last changed, so that a node added at the end of
    its zone (or removed from near it) re-lists only the nodes from there on: the work of
    a churn of nodes added and deleted does not grow with the cluster."""

    def __init__(self) -> None:
        self._zones: dict[str, list[str]] = {}
        """Zone key -> its nodes; insertion order is the zones' order."""
        self._zone_of: dict[str, str] = {}
        self._listed: list[str] = []
        """:meth:`order` as it last answered."""
        self._unchanged = 0
        """How many of ``_listed``'s first names still hold."""

    def __len__(self) -> int:
        return len(self._zone_of)

    def add(self, node: api.Node) -> None:
        if node.name in self._zone_of:
            return
        zone = zone_key(node.labels)
        members = self._zones.get(zone, [])
        self._changed_at(zone, len(members))
        self._zone_of[node.name] = zone
        self._zones[zone] = members
        members.append(node.name)

    def remove(self, name: str) -> None:
        zone = self._zone_of.pop(name, None)
        if zone is None:
            return
        members = self._zones[zone]
        depth = members.index(name)
        self._changed_at(zone, depth)
        del members[depth]
        if not members:
            del self._zones[zone]

    def update(self, node: api.Node) -> bool:
        """Follow ``node``'s labels; True when it changed zone (and so place)."""
        zone = self._zone_of.get(node.name)
        if zone is not None and zone == zone_key(node.labels):
            return False
        self.remove(node.name)
        self.add(node)
        return True

    def _changed_at(self, zone: str, depth: int) -> None:
        """The node at ``depth`` of ``zone`` (a zone not in the tree goes last) is about
        to come or go: the order holds up to its place."""
        position, before = 0, True
        for other, members in self._zones.items():
            if other == zone:
                before = False
            position += min(len(members), depth) + (before and len(members) > depth)
        self._unchanged = min(self._unchanged, position)

    def order(self) -> tuple[list[str], int]:
        """``nodeTree.list()``, and how many of its first names are as the last call
        answered."""
        unchanged = min(self._unchanged, len(self._listed))
        zones = list(self._zones.values())
        # depth: the round of the round robin the first changed place falls in
        low, high = 0, max(map(len, zones), default=0)
        while low < high:  # the last depth whose rounds before it hold <= unchanged names
            middle = (low + high + 1) // 2
            if sum(min(len(z), middle) for z in zones) <= unchanged:
                low = middle
            else:
                high = middle - 1
        depth = low
        skip = unchanged - sum(min(len(z), depth) for z in zones)
        this_round = [z[depth] for z in zones if len(z) > depth][skip:]
        later = _round_robin([z[depth + 1 :] for z in zones if len(z) > depth + 1])
        self._listed = [*self._listed[:unchanged], *this_round, *later]
        self._unchanged = len(self._listed)
        return self._listed, unchanged


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

    def permute(self, source: NodeIndices) -> None:
        """Lay the columns out for a new node list: new node ``j`` is old node
        ``source[j]``, or a node without labels yet where that is -1. A column no node
        has any more is dropped; one whose values are mostly gone (hostnames of deleted
        nodes) is re-coded."""
        size = len(source)
        for key, column in list(self._columns.items()):
            codes = np.append(column.codes, np.int32(-1))[source]  # -1 takes the -1 appended
            present = codes[codes >= 0]
            if present.size == 0:
                del self._columns[key]
                continue
            values, code_of = column.values, column.code_of
            if len(values) > 64 and len(values) > 2 * present.size:
                live = np.unique(present)
                if 2 * live.size < len(values):
                    recode = np.full(len(values) + 1, -1, dtype=np.int32)
                    recode[live] = np.arange(live.size, dtype=np.int32)
                    codes = recode[codes]
                    values = tuple(values[i] for i in live.tolist())
                    code_of = {value: i for i, value in enumerate(values)}
            self._columns[key] = LabelColumn(codes, values, code_of)
        self._size = size
        self._absent = np.full(size, -1, dtype=np.int32)

    def column(self, key: str) -> LabelColumn:
        found = self._columns.get(key)
        return found if found is not None else LabelColumn(self._absent, (), {})


GroupKey = tuple[str, frozenset[tuple[str, str]], bool]
"""A pod group: namespace, labels, terminating."""


_V = TypeVar("_V")
_A = TypeVar("_A", bound=np.generic)


@dataclass(frozen=True, slots=True)
class _Renumbering:
    """Old node index -> new, for a snapshot whose node list changed; indices below
    ``first`` keep their number."""

    new_of: NodeIndices
    listed: list[int]
    first: int

    def apply(self, by_node: dict[int, _V]) -> None:
        """Renumber ``by_node``'s keys in place (a key of a node removed is dropped)."""
        first = self.first
        if not by_node or first >= len(self.new_of):
            return
        if len(by_node) <= 16:
            moved = [k for k in by_node if k >= first]
        else:  # the keys scanned in C: most are below ``first`` and stay
            keys = np.fromiter(by_node, dtype=np.intp, count=len(by_node))
            moved = keys[keys >= first].tolist()
        values = [by_node.pop(k) for k in moved]
        listed = self.listed
        for k, value in zip(moved, values, strict=True):
            if listed[k] >= 0:
                by_node[listed[k]] = value


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

    def renumber(self, renumbering: _Renumbering, moved: Iterable[api.Pod]) -> None:
        """Follow the snapshot's nodes to their new indices: ``moved``, the pods on the
        nodes renumbered, name the groups that have counts to move."""
        groups = {self._id[(p.namespace, frozenset(p.labels.items()), p.deleting)] for p in moved}
        for group in groups:
            renumbering.apply(self.per_node[group])

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

    def renumber(self, renumbering: _Renumbering, moved: Iterable[api.Pod]) -> None:
        """Follow the snapshot's nodes to their new indices: ``moved``, the pods on the
        nodes renumbered, name the terms that have counts to move."""
        keys = {key for pod in moved if pod.pod_affinity is not None for key in self.keys_of(pod)}
        for key in keys:
            renumbering.apply(self.per_node[key])

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
        self.node_stamp: Int64s = np.arange(size, dtype=np.int64)
        """Per node: a number no other node data written into this snapshot had, renewed
        whenever the node's static data is (re)written and moved with it: what lets a
        cache of per-node values recompute only the nodes that changed."""
        self._next_stamp = size
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
        self._set_static(index, node, old)
        self.static_generation += 1

    def _set_static(self, index: int, node: api.Node, old: api.Node | None) -> None:
        """Write ``node``'s static data into column ``index`` (which held ``old``, or
        nothing yet); ``self.nodes[index]`` is ``node`` already."""
        if old is None or node.labels != old.labels:
            self.labels.set_node(index, node.labels)
        if old is None or node.taints != old.taints:
            taint_set = self._taint_set_of.get(node.taints)
            if taint_set is None:
                taint_set = self._taint_set_of[node.taints] = len(self._taint_set_of)
                self.taint_sets = (*self.taint_sets, node.taints)
            self.taint_set[index] = taint_set
        self.unschedulable[index] = node.unschedulable
        self.node_stamp[index] = self._next_stamp
        self._next_stamp += 1
        if old is None or node.allocatable != old.allocatable:
            self.allocatable[:, index] = 0
            for name, amount in node.allocatable.items():
                if name != api.PODS:
                    row = self._ensure_row(name)  # may grow (replace) the matrix: first
                    self.allocatable[row, index] = amount
            self.allowed_pods[index] = node.allocatable.get(api.PODS, 0)
        if old is None or node.images != old.images:
            if old is not None:
                self._list_images(index, old, -1)
            self._list_images(index, node, 1)

    def set_nodes(
        self,
        names: Sequence[str],
        node_of: Mapping[str, api.Node],
        pods_of: Callable[[str], Iterable[api.Pod]],
        *,
        unchanged: int = 0,
    ) -> None:
        """Make ``names`` (node-tree order) the snapshot's nodes, in place: nodes missing
        from it leave with their pods, new ones (``node_of[name]``) come with theirs
        (``pods_of(name)``), and the nodes kept move to their new places, every column
        and every per-node index following them. kube-scheduler's ``UpdateSnapshot``
        after its node tree changed: work in proportion to the nodes that moved and to
        what sits on them, instead of a snapshot rebuilt from every node and pod. A
        node kept must be as held here (:meth:`update_node` first); ``unchanged``: the
        first names are the snapshot's first nodes already (:meth:`NodeTree.order`)."""
        old_size, old_names, size = self.size, self.names, len(names)
        source = np.concatenate(
            (
                np.arange(unchanged, dtype=np.intp),
                np.fromiter(
                    map(self.index.get, names[unchanged:], itertools.repeat(-1)),
                    dtype=np.intp,
                    count=size - unchanged,
                ),
            )
        )
        kept = source >= 0
        new_of = np.full(old_size, -1, dtype=np.intp)
        new_of[source[kept]] = np.flatnonzero(kept)
        removed = np.flatnonzero(new_of < 0).tolist()
        for node in removed:
            self._drop_node(node)
        common = min(size, old_size)
        moved = np.flatnonzero(source[:common] != np.arange(common))
        first = int(moved[0]) if moved.size else common  # below it nothing changed

        tail = source[first:]
        fresh_tail = tail < 0
        tail_at = np.where(fresh_tail, 0, tail)

        def take(columns: npt.NDArray[_A]) -> npt.NDArray[_A]:
            """The columns in the new order: the unchanged head copied whole."""
            if not old_size:
                return np.zeros((*columns.shape[:-1], size), dtype=columns.dtype)
            gathered = columns[..., tail_at]
            gathered[..., fresh_tail] = 0
            return np.concatenate((columns[..., :first], gathered), axis=-1)

        self.allocatable = take(self.allocatable)
        self.requested = take(self.requested)
        self.nonzero_requested = take(self.nonzero_requested)
        self.pod_count = take(self.pod_count)
        self.allowed_pods = take(self.allowed_pods)
        self.unschedulable = take(self.unschedulable)
        self.taint_set = take(self.taint_set)
        self.node_stamp = take(self.node_stamp)
        self.labels.permute(source)
        renumbering = _Renumbering(new_of, new_of.tolist(), first)
        moved_pods = [pod for i in range(first, old_size) for pod in self.pods_on_node[i]]
        self.pod_groups.renumber(renumbering, moved_pods)
        self.affinity_terms.renumber(renumbering, moved_pods)
        renumbering.apply(self.used_ports)
        renumbering.apply(self._node_pods)
        on_node = self.pods_on_node
        self.pods_on_node = on_node[:first]
        self.pods_on_node += [on_node[i] if i >= 0 else [] for i in source[first:].tolist()]
        fresh = np.flatnonzero(~kept).tolist()
        self.nodes = self.nodes[:first] + tuple(map(node_of.__getitem__, names[first:]))
        self.names = tuple(names)
        for i in removed:
            del self.index[old_names[i]]
        index = self.index
        for j in range(first, size):
            index[names[j]] = j
        self.size = size
        self.all_nodes = np.arange(size, dtype=np.intp)
        self._renumber_images(new_of, first)
        for j in fresh:
            self._set_static(j, self.nodes[j], None)
        self.static_generation += 1
        for j in fresh:
            pods = list(pods_of(names[j]))
            if pods:
                self.add_pods(pods, [j] * len(pods))

    def _drop_node(self, node: int) -> None:
        """Take every pod off column ``node`` and its images out of the index."""
        for pod in reversed(list(self.pods_on_node[node])):
            self.remove_pod(pod, node)
        self._list_images(node, self.nodes[node], -1)

    def _list_images(self, index: int, node: api.Node, sign: int) -> None:
        """Add (``sign`` 1) or remove (-1) node ``index`` as a holder of ``node``'s images."""
        names = {name for image in node.images for name in image.names}
        for name in names:
            state = self.images.get(name)
            held = state.nodes if state is not None else np.empty(0, dtype=np.intp)
            at = int(np.searchsorted(held, index))
            held = np.insert(held, at, index) if sign > 0 else np.delete(held, at)
            if held.size == 0:
                del self.images[name]
            elif state is not None and at > 0:
                self.images[name] = ImageState(state.size, held)
            else:  # a new first holder: the size is as it reports it
                self.images[name] = ImageState(self._image_size(int(held[0]), name), held)

    def _image_size(self, index: int, name: str) -> int:
        for image in self.nodes[index].images:
            if name in image.names:
                return image.size
        raise ValueError(f"node {self.names[index]} does not list image {name}")

    def _renumber_images(self, new_of: NodeIndices, first: int) -> None:
        """Follow :meth:`set_nodes`' renumbering (the removed nodes unlisted already)."""
        for name, state in list(self.images.items()):
            if state.nodes[-1] < first:
                continue
            held = np.sort(new_of[state.nodes])
            size = state.size
            if held[0] != new_of[state.nodes[0]]:
                size = self._image_size(int(held[0]), name)
            self.images[name] = ImageState(size, held)

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
