"""The scheduler cache's snapshot, kept in place through any sequence of node adds,
updates (zone moves included) and deletes and pod adds, updates, assumptions and
deletes, equals a snapshot built from scratch: every column and every derived index
(pod groups, affinity terms, host ports, claim users, images, preemption's per-node
arrays), with the nodes in the order of kube-scheduler's node tree
(``nodeTree.list()`` in pkg/scheduler/backend/cache/node_tree.go), which the reference
below re-implements on plain lists."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from nodeagent.base.clock import FakeClock
from nodeagent.k8s.pressure import Taint
from nodeagent.k8s.resources import CPU, EPHEMERAL_STORAGE, MEMORY
from nodeagent.scheduler import api
from nodeagent.scheduler.live.cache import AlreadyAccounted, SchedulerCache
from nodeagent.scheduler.snapshot import ClusterSnapshot, NodeTree, zone_key

NODE_NAMES = [f"n{i}" for i in range(7)]
GPU = "example.com/gpu"
UIDS = [f"u{i}" for i in range(10)]
RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE, GPU)
"""Every resource the nodes and pods here have: a row no node has any more stays, zero."""


class ReferenceTree:
    """node_tree.go's nodeTree: zones in a list, nodes appended, empty zones dropped."""

    def __init__(self) -> None:
        self.zones: list[str] = []
        self.tree: dict[str, list[str]] = {}

    def add(self, node: api.Node) -> None:
        zone = zone_key(node.labels)
        if zone not in self.tree:
            self.zones.append(zone)
            self.tree[zone] = []
        self.tree[zone].append(node.name)

    def remove(self, node: api.Node) -> None:
        zone = zone_key(node.labels)
        self.tree[zone].remove(node.name)
        if not self.tree[zone]:
            del self.tree[zone]
            self.zones.remove(zone)

    def list(self) -> list[str]:
        out: list[str] = []
        depth = 0
        total = sum(len(v) for v in self.tree.values())
        while len(out) < total:
            for zone in self.zones:
                if depth < len(self.tree[zone]):
                    out.append(self.tree[zone][depth])
            depth += 1
        return out


zones = st.sampled_from(
    [
        {},
        {"topology.kubernetes.io/zone": "a"},
        {"topology.kubernetes.io/zone": "b"},
        {"topology.kubernetes.io/zone": "b", "topology.kubernetes.io/region": "r"},
        {"failure-domain.beta.kubernetes.io/zone": "c"},
    ]
)
extra_labels = st.dictionaries(st.sampled_from(["disk", "gpu"]), st.sampled_from("xy"), max_size=2)
taints = st.lists(
    st.builds(Taint, st.sampled_from(["k1", "k2"]), st.sampled_from(["NoSchedule"])),
    max_size=2,
).map(tuple)
images = st.lists(
    st.builds(
        api.NodeImage,
        st.lists(st.sampled_from(["img-a", "img-b", "img-c"]), min_size=1, max_size=2).map(tuple),
        st.integers(1, 5).map(lambda mib: mib << 20),
    ),
    max_size=2,
).map(tuple)
allocatable = st.fixed_dictionaries(
    {CPU: st.integers(0, 8000), api.PODS: st.integers(0, 110)},
    optional={MEMORY: st.integers(0, 1 << 34), GPU: st.integers(0, 4)},
)


@st.composite
def nodes(draw: st.DrawFn) -> api.Node:
    return api.Node(
        draw(st.sampled_from(NODE_NAMES)),
        labels={**draw(zones), **draw(extra_labels)},
        taints=draw(taints),
        unschedulable=draw(st.booleans()),
        allocatable=draw(allocatable),
        images=draw(images),
    )


term = st.builds(
    api.PodAffinityTerm,
    st.sampled_from(["kubernetes.io/hostname", "topology.kubernetes.io/zone"]),
    st.sampled_from([api.LabelSelector((("app", "a"),)), api.LabelSelector((("app", "b"),)), None]),
)
affinity = st.one_of(
    st.none(),
    st.builds(
        api.PodAffinity,
        required=st.lists(term, max_size=1).map(tuple),
        required_anti=st.lists(term, max_size=1).map(tuple),
        preferred=st.lists(
            st.builds(api.WeightedPodAffinityTerm, st.integers(1, 3), term), max_size=1
        ).map(tuple),
    ),
)
volumes = st.lists(
    st.one_of(
        st.builds(
            api.PodVolume,
            st.just("data"),
            st.just(api.VolumeKind.CLAIM),
            st.sampled_from(["c1", "c2"]),
        ),
        st.builds(api.PodVolume, st.just("scratch"), st.just(api.VolumeKind.EPHEMERAL)),
    ),
    max_size=2,
).map(tuple)


@st.composite
def pods(draw: st.DrawFn) -> api.Pod:
    uid = draw(st.sampled_from(UIDS))
    requests = draw(
        st.fixed_dictionaries({CPU: st.integers(0, 1000)}, optional={GPU: st.integers(1, 2)})
    )
    return api.Pod(
        draw(st.sampled_from(["default", "other"])),
        f"p-{uid}",
        uid=uid,
        node_name=draw(st.sampled_from(NODE_NAMES)),
        labels=draw(st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from("ab"))),
        requests=requests,
        nonzero_cpu=requests[CPU] or 100,
        nonzero_memory=200 << 20,
        host_ports=draw(
            st.lists(st.builds(api.HostPort, st.sampled_from([80, 443])), max_size=2).map(tuple)
        ),
        pod_affinity=draw(affinity),
        volumes=draw(volumes),
        priority=draw(st.integers(0, 2)),
        start_time=draw(st.one_of(st.none(), st.floats(0, 100))),
        deleting=draw(st.booleans()),
    )


operations = st.one_of(
    st.tuples(st.just("add_node"), nodes()),
    st.tuples(st.just("update_node"), nodes()),
    st.tuples(st.just("remove_node"), st.sampled_from(NODE_NAMES)),
    st.tuples(st.just("add_bound"), pods()),
    st.tuples(st.just("remove_bound"), st.sampled_from(UIDS)),
    st.tuples(st.just("assume"), pods()),
    st.tuples(st.just("forget"), st.sampled_from(UIDS)),
    st.tuples(st.just("mark_preempted"), st.sampled_from(UIDS)),
    st.tuples(st.just("node_pods"), st.just(None)),
)


def row(snapshot: ClusterSnapshot, matrix: Any, name: str) -> list[int]:
    at = snapshot.row.get(name)
    return [0] * snapshot.size if at is None else [int(v) for v in matrix[at]]


def state(snapshot: ClusterSnapshot) -> dict[str, Any]:
    """Everything the snapshot holds, in terms that do not depend on how it got there
    (label and taint codes, resource row order, the order of pods on a node)."""
    names = list(snapshot.names)
    keys = {key for node in snapshot.nodes for key in node.labels} | {"absent"}
    labels = {}
    for key in keys:
        column = snapshot.labels.column(key)
        assert len(column.codes) == snapshot.size
        labels[key] = [column.values[c] if c >= 0 else None for c in column.codes]
    groups = {}
    for group, per_node in zip(snapshot.pod_groups.keys, snapshot.pod_groups.per_node, strict=True):
        if per_node:
            groups[group] = {names[n]: c for n, c in per_node.items()}
    usage = {}
    for node, held in zip(names, snapshot.node_pods(range(snapshot.size)), strict=True):
        assert len(held.pods) == len(snapshot.pods_on_node[snapshot.index[node]])
        for j, pod in enumerate(held.pods):
            used = held.usage[:, j]
            usage[pod.uid] = (
                {r: int(used[snapshot.row[r]]) if r in snapshot.row else 0 for r in RESOURCES},
                [int(v) for v in used[-3:]],
                int(held.priority[j]),
            )
    return {
        "names": names,
        "index": dict(snapshot.index),
        "size": (snapshot.size, list(snapshot.all_nodes)),
        "nodes": list(snapshot.nodes),
        "allocatable": {r: row(snapshot, snapshot.allocatable, r) for r in RESOURCES},
        "requested": {r: row(snapshot, snapshot.requested, r) for r in RESOURCES},
        "nonzero": snapshot.nonzero_requested.tolist(),
        "pod_count": snapshot.pod_count.tolist(),
        "allowed_pods": snapshot.allowed_pods.tolist(),
        "unschedulable": snapshot.unschedulable.tolist(),
        "taints": [snapshot.taint_sets[t] for t in snapshot.taint_set],
        "labels": labels,
        "images": {k: (v.size, [names[n] for n in v.nodes]) for k, v in snapshot.images.items()},
        "pods": [sorted(p.uid for p in on) for on in snapshot.pods_on_node],
        "ports": {
            names[n]: sorted(p.port for p in ports)
            for n, ports in snapshot.used_ports.items()
            if ports
        },
        "claims": dict(snapshot.claim_users),
        "groups": groups,
        "terms": {
            k: {names[n]: c for n, c in v.items()}
            for k, v in snapshot.affinity_terms.per_node.items()
        },
        "usage": usage,
    }


@settings(max_examples=300, deadline=None)
@given(st.lists(operations, max_size=40), st.integers(0, 40))
def test_the_snapshot_kept_in_place_equals_one_built_from_scratch(
    ops: list[tuple[str, Any]], built_at: int
) -> None:
    cache = SchedulerCache(clock=FakeClock().now)
    tree = ReferenceTree()
    known: dict[str, api.Node] = {}
    for step, (op, arg) in enumerate(ops):
        if step == built_at:
            with cache.cycle():  # from here on the snapshot is kept, not rebuilt
                pass
        if op in ("add_node", "update_node"):
            old = known.get(arg.name)
            if old is not None and zone_key(old.labels) != zone_key(arg.labels):
                tree.remove(old)
                tree.add(arg)
            elif old is None:
                tree.add(arg)
            known[arg.name] = arg
            getattr(cache, op)(arg)
        elif op == "remove_node":
            if arg in known:
                tree.remove(known.pop(arg))
            cache.remove_node(arg)
        elif op == "add_bound":
            cache.add_bound(arg)
        elif op == "remove_bound":
            cache.remove_bound(arg)
        elif op == "assume":
            with contextlib.suppress(AlreadyAccounted):
                cache.assume(dataclasses.replace(arg, node_name=""), arg.node_name)
        elif op == "forget":
            cache.forget(arg)
        elif op == "mark_preempted":
            cache.mark_preempted(arg)
        elif op == "node_pods":
            with cache.cycle() as snapshot:
                snapshot.node_pods(range(snapshot.size))
    with cache.cycle() as live:
        accounted = [cache.bound(uid) for uid in UIDS]
        on_nodes = [p for p in accounted if p is not None and p.node_name in known]
        order = tree.list()
        assert list(live.names) == order
        fresh = ClusterSnapshot([known[name] for name in order], on_nodes)
        assert state(live) == state(fresh)
        assert np.array_equal(live.all_nodes, np.arange(len(order)))


tree_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "update", "order"]),
        st.sampled_from(NODE_NAMES),
        zones,
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(tree_ops)
def test_the_node_tree_lists_as_node_tree_go_and_knows_what_held(
    ops: list[tuple[str, str, dict[str, str]]],
) -> None:
    tree, reference = NodeTree(), ReferenceTree()
    known: dict[str, api.Node] = {}
    listed: list[str] = []
    for op, name, labels in ops:
        node = api.Node(name, labels=labels)
        if op == "add" and name not in known:
            tree.add(node)
            reference.add(node)
            known[name] = node
        elif op == "remove" and name in known:
            tree.remove(name)
            reference.remove(known.pop(name))
        elif op == "update" and name in known:
            moved = zone_key(known[name].labels) != zone_key(labels)
            assert tree.update(node) == moved
            if moved:
                reference.remove(known[name])
                reference.add(node)
            known[name] = node
        elif op == "order":
            names, unchanged = tree.order()
            assert names == reference.list()
            assert names[:unchanged] == listed[:unchanged]
            listed = list(names)
    names, unchanged = tree.order()
    assert names == reference.list()
    assert names[:unchanged] == listed[:unchanged]
    assert len(tree) == len(known)


def test_a_node_added_or_removed_at_the_end_of_its_zone_re_lists_only_the_rest() -> None:
    tree = NodeTree()
    for i in range(12):
        tree.add(api.Node(f"n{i}", labels={"topology.kubernetes.io/zone": "abc"[i % 3]}))
    names, _ = tree.order()
    assert names == [f"n{i}" for i in range(12)]
    tree.add(api.Node("late", labels={"topology.kubernetes.io/zone": "b"}))
    names, unchanged = tree.order()
    assert (names[-1], unchanged) == ("late", 12), "it goes last; the 12 before it hold"
    tree.remove("n10")  # zone b's fourth: b's fifth ("late") takes its place
    names, unchanged = tree.order()
    assert (names[10:], unchanged) == (["late", "n11"], 10)
    tree.remove("n0")
    names, unchanged = tree.order()
    assert (names[:3], unchanged) == (["n3", "n1", "n2"], 0)


def test_a_large_cluster_renumbers_its_indices_in_bulk() -> None:
    """Past 16 nodes per pod group or term, keys are renumbered through arrays."""
    cache = SchedulerCache(clock=FakeClock().now)
    term = api.PodAffinityTerm("kubernetes.io/hostname", api.LabelSelector((("app", "a"),)))
    known: dict[str, api.Node] = {}
    for i in range(60):
        node = api.Node(f"n{i:02d}", labels={"topology.kubernetes.io/zone": "abc"[i % 3]})
        known[node.name] = node
        cache.add_node(node)
        cache.add_bound(
            api.Pod(
                "default",
                f"p{i}",
                uid=f"u{i}",
                node_name=node.name,
                labels={"app": "a"},
                requests={CPU: 100},
                pod_affinity=api.PodAffinity(required_anti=(term,)),
                host_ports=(api.HostPort(80),),
            )
        )
    with cache.cycle() as snapshot:
        snapshot.node_pods(range(snapshot.size))
    for name in ("n04", "n30", "n59"):
        cache.remove_node(name)
        del known[name]
    cache.add_node(api.Node("n04", labels={"topology.kubernetes.io/zone": "a"}))
    known["n04"] = cache.node("n04")  # type: ignore[assignment]
    tree = ReferenceTree()
    for node in sorted(known.values(), key=lambda n: n.name):
        if node.name != "n04":
            tree.add(node)
    tree.add(known["n04"])
    with cache.cycle() as live:
        assert list(live.names) == tree.list()
        pods = [cache.bound(f"u{i}") for i in range(60)]
        on_nodes = [p for p in pods if p is not None and p.node_name in known]
        fresh = ClusterSnapshot([known[name] for name in live.names], on_nodes)
        assert state(live) == state(fresh)
