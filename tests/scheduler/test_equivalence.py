"""Property tests: every vectorized Filter and Score equals its per-node specification
on random clusters and pods (taints, labels, selectors, ports, resources, images)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.scheduler import api
from nodeagent.scheduler.framework import CycleState, Handle
from nodeagent.scheduler.plugins import (
    balanced_allocation,
    image_locality,
    node_affinity,
    node_resources_fit,
    resource_allocation,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot
from tests.scheduler import builders as b

KEYS = ["zone", "disk", "gen", "nodeagent.io/memory-pressure", "bad key!"]
VALUES = ["a", "b", "07", "12", "x-y", ""]
TAINT_KEYS = ["k1", "k2", "nodeagent.io/memory-pressure", "node.kubernetes.io/disk-pressure"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
IMAGES = ["registry.example/a:1", "registry.example/b:1", "registry.example/c:1"]
RESOURCES = ["cpu", "memory", "ephemeral-storage", "example.com/gpu"]

quantities = st.integers(0, 64)
taints = st.lists(
    st.fixed_dictionaries(
        {
            "key": st.sampled_from(TAINT_KEYS),
            "value": st.sampled_from(["", "v"]),
            "effect": st.sampled_from(EFFECTS),
        }
    ),
    max_size=3,
)
labels = st.dictionaries(st.sampled_from(KEYS[:4]), st.sampled_from(VALUES), max_size=4)
ports = st.lists(
    st.fixed_dictionaries(
        {
            "containerPort": st.just(1),
            "hostPort": st.sampled_from([80, 8080]),
            "hostIP": st.sampled_from(["", "10.0.0.1"]),
            "protocol": st.sampled_from(["TCP", "UDP"]),
        }
    ),
    max_size=2,
)
requests = st.dictionaries(st.sampled_from(RESOURCES), quantities.map(str), max_size=4)


@st.composite
def nodes(draw: st.DrawFn, count: int) -> list[api.Node]:
    out = []
    for i in range(count):
        extra = draw(
            st.dictionaries(
                st.sampled_from(["ephemeral-storage", "example.com/gpu"]), quantities.map(str)
            )
        )
        images = draw(st.lists(st.sampled_from(IMAGES), max_size=3, unique=True))
        out.append(
            b.node(
                f"n{i}",
                cpu=str(draw(quantities)),
                memory=str(draw(quantities)),
                pods=draw(st.integers(0, 4)),
                labels=draw(labels),
                taints=draw(taints),
                unschedulable=draw(st.booleans()),
                extra=extra,
                images=[([image], draw(st.integers(0, 2 * 1024**3))) for image in images],
            )
        )
    return out


requirement = st.fixed_dictionaries(
    {
        "key": st.sampled_from(KEYS),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"]),
        "values": st.lists(st.sampled_from(VALUES), max_size=2),
    }
)
field_requirement = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["metadata.name", "metadata.uid"]),
        "operator": st.sampled_from(["In", "NotIn", "Exists"]),
        "values": st.lists(st.sampled_from(["n0", "n1", "n9"]), max_size=2),
    }
)
term = st.fixed_dictionaries(
    {},
    optional={
        "matchExpressions": st.lists(requirement, max_size=3),
        "matchFields": st.lists(field_requirement, max_size=1),
    },
)


@st.composite
def pods(draw: st.DrawFn) -> api.Pod:
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(
            st.dictionaries(st.sampled_from(KEYS[:3]), st.sampled_from(VALUES), max_size=2)
        )
    affinity: dict[str, Any] = {}
    if draw(st.booleans()):
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": draw(st.lists(term, max_size=3))
        }
    if draw(st.booleans()):
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = draw(
            st.lists(
                st.fixed_dictionaries({"weight": st.integers(1, 100), "preference": term}),
                max_size=3,
            )
        )
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    spec["tolerations"] = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "key": st.sampled_from(["", *TAINT_KEYS]),
                    "operator": st.sampled_from(["Equal", "Exists"]),
                    "value": st.sampled_from(["", "v"]),
                    "effect": st.sampled_from(["", *EFFECTS]),
                }
            ),
            max_size=3,
        )
    )
    containers = [
        {
            "name": f"c{i}",
            "image": draw(st.sampled_from(IMAGES)),
            "resources": {"requests": draw(requests)},
            "ports": draw(ports),
        }
        for i in range(draw(st.integers(0, 2)))
    ]
    return b.pod(containers=containers, **spec)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterSnapshot, api.Pod]:
    cluster_nodes = draw(nodes(draw(st.integers(1, 6))))
    running = [
        b.pod(
            f"r{i}",
            node_name=f"n{draw(st.integers(0, len(cluster_nodes) - 1))}",
            containers=[
                {
                    "name": "c",
                    "image": "i",
                    "resources": {"requests": draw(requests)},
                    "ports": draw(ports),
                }
            ],
        )
        for i in range(draw(st.integers(0, 6)))
    ]
    return ClusterSnapshot(cluster_nodes, running), draw(pods())


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(case=clusters())
def test_every_default_filter_matches_its_per_node_form(
    case: tuple[ClusterSnapshot, api.Pod],
) -> None:
    snap, pod = case
    fw = b.default_framework()
    for plugin in fw.filter:
        state = CycleState()
        if hasattr(plugin, "pre_filter"):
            plugin.pre_filter(state, pod, snap)
        mask = plugin.filter(state, pod, snap, snap.all_nodes)
        expected = [plugin.filter_node(state, pod, snap, i).is_success for i in range(snap.size)]
        assert [bool(m) for m in mask] == expected, plugin.name


STRATEGIES = [
    {
        "type": "LeastAllocated",
        "resources": [
            {"name": r, "weight": w} for r, w in zip(RESOURCES, (1, 2, 3, 4), strict=True)
        ],
    },
    {"type": "MostAllocated", "resources": [{"name": r, "weight": 5} for r in RESOURCES]},
    {
        "type": "RequestedToCapacityRatio",
        "resources": [
            {"name": r, "weight": w} for r, w in zip(RESOURCES, (3, 1, 2, 7), strict=True)
        ],
        "requestedToCapacityRatio": {
            "shape": [
                {"utilization": 0, "score": 10},
                {"utilization": 40, "score": 2},
                {"utilization": 100, "score": 7},
            ]
        },
    },
]


@SETTINGS
@given(case=clusters(), strategy=st.sampled_from(STRATEGIES))
def test_score_plugins_match_their_scalar_formulas(
    case: tuple[ClusterSnapshot, api.Pod], strategy: dict[str, Any]
) -> None:
    snap, pod = case
    plugins: list[Any] = [
        node_resources_fit.new(
            node_resources_fit.Args.model_validate({"scoringStrategy": strategy}), Handle()
        ),
        balanced_allocation.new(
            balanced_allocation.Args.model_validate(
                {"resources": [{"name": r} for r in RESOURCES]}
            ),
            Handle(),
        ),
        image_locality.new(None, Handle()),
        node_affinity.new(None, Handle()),
    ]
    for plugin in plugins:
        vector = plugin.score(CycleState(), pod, snap, snap.all_nodes)
        assert vector.tolist() == [plugin.score_node(pod, snap, i) for i in range(snap.size)], (
            plugin.name
        )


big = st.integers(0, 2**40)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(big, big, st.booleans(), st.integers(1, 100)), min_size=1, max_size=5),
)
def test_resource_formulas_vector_equals_scalar_on_large_values(
    rows: list[tuple[int, int, bool, int]],
) -> None:
    import numpy as np

    requested = [r for r, _, _, _ in rows]
    allocatable = [a for _, a, _, _ in rows]
    included = [i for _, _, i, _ in rows]
    weights = [w for _, _, _, w in rows]
    req = np.array([[r] for r in requested], dtype=np.int64)
    alloc = np.array([[a] for a in allocatable], dtype=np.int64)
    inc = np.array([[i] for i in included], dtype=bool)
    w = np.array(weights, dtype=np.int64)
    shape = [(0, 100), (50, 30), (100, 0)]
    assert int(
        resource_allocation.least_allocated_vector(req, alloc, w, inc)[0]
    ) == resource_allocation.least_allocated_score(requested, allocatable, weights, included)
    assert int(
        resource_allocation.most_allocated_vector(req, alloc, w, inc)[0]
    ) == resource_allocation.most_allocated_score(requested, allocatable, weights, included)
    assert int(
        resource_allocation.requested_to_capacity_ratio_vector(shape, req, alloc, w, inc)[0]
    ) == resource_allocation.requested_to_capacity_ratio_score(
        shape, requested, allocatable, weights, included
    )
    # the node's own requests: up to its requests with the pod
    held = [r * k // 100 for r, k in zip(requested, weights, strict=True)]
    assert int(
        resource_allocation.balanced_allocation_vector(
            req, np.array([[h] for h in held], dtype=np.int64), alloc, inc
        )[0]
    ) == resource_allocation.balanced_allocation_score(requested, held, allocatable, included)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(big, st.one_of(st.just(0), big), st.integers(1, 100)), min_size=1, max_size=4
    ),
    nodes=st.integers(1, 3),
    equal_weights=st.booleans(),
)
def test_resource_formulas_when_every_resource_is_included(
    rows: list[tuple[int, int, int]], nodes: int, equal_weights: bool
) -> None:
    """``included`` None (cpu and memory, gathered without masks) means all True: the
    mask-free paths give the scalar formulas' results, zero allocatable included, with
    equal weights (the default) or not."""
    import numpy as np

    requested = [r for r, _, _ in rows]
    allocatable = [a for _, a, _ in rows]
    weights = [rows[0][2] if equal_weights else w for _, _, w in rows]
    everything = [True] * len(rows)
    held = [r // 2 for r in requested]
    req = np.array([[r] * nodes for r in requested], dtype=np.int64)
    alloc = np.array([[a] * nodes for a in allocatable], dtype=np.int64)
    w = np.array(weights, dtype=np.int64)
    ra = resource_allocation
    expected = {
        "least": ra.least_allocated_score(requested, allocatable, weights, everything),
        "most": ra.most_allocated_score(requested, allocatable, weights, everything),
        "balanced": ra.balanced_allocation_score(requested, held, allocatable, everything),
    }
    got = {
        "least": ra.least_allocated_vector(req, alloc, w, None),
        "most": ra.most_allocated_vector(req, alloc, w, None),
        "balanced": ra.balanced_allocation_vector(
            req, np.array([[h] * nodes for h in held], dtype=np.int64), alloc, None
        ),
    }
    for formula, vector in got.items():
        assert vector.tolist() == [expected[formula]] * nodes, formula
