"""NodeResourcesFit (filter and the three scoring strategies), BalancedAllocation and
ImageLocality, table-driven from kube-scheduler's rules, including the documentation's
worked examples."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from nodeagent.scheduler import api, objects
from nodeagent.scheduler.framework import CycleState, Handle
from nodeagent.scheduler.plugins import (
    balanced_allocation,
    image_locality,
    node_resources_fit,
    resource_allocation,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot
from tests.scheduler import builders as b

MI = 1024**2


def fit(**args: Any) -> node_resources_fit.NodeResourcesFit:
    return node_resources_fit.new(node_resources_fit.Args.model_validate(args), Handle())


def filter_status(
    plugin: node_resources_fit.NodeResourcesFit, pod: api.Pod, snap: ClusterSnapshot, node: int = 0
) -> api.Status:
    state = CycleState()
    plugin.pre_filter(state, pod, snap)
    mask = plugin.filter(state, pod, snap, snap.all_nodes)
    status = plugin.filter_node(state, pod, snap, node)
    assert bool(mask[node]) == status.is_success
    return status


@pytest.mark.parametrize(
    ("node_kwargs", "running", "wanted", "expected"),
    [
        pytest.param({}, [], {"cpu": "1"}, api.SUCCESS, id="fits"),
        pytest.param({}, [{"cpu": "3"}], {"cpu": "1"}, api.SUCCESS, id="exactly-full-fits"),
        pytest.param(
            {},
            [{"cpu": "3"}],
            {"cpu": "1001m"},
            api.unschedulable("Insufficient cpu"),
            id="one-milli-too-many",
        ),
        pytest.param(
            {},
            [{"cpu": "3", "memory": "7Gi"}],
            {"cpu": "2", "memory": "2Gi"},
            api.unschedulable("Insufficient cpu", "Insufficient memory"),
            id="all-reasons",
        ),
        pytest.param(
            {},
            [],
            {"cpu": "5"},
            api.unschedulable("Insufficient cpu", unresolvable=True),
            id="larger-than-node-unresolvable",
        ),
        pytest.param(
            {"pods": 1},
            [{"cpu": "1"}],
            {},
            api.unschedulable("Too many pods"),
            id="too-many-pods-even-requesting-nothing",
        ),
        pytest.param(
            {},
            [],
            {"example.com/gpu": "1"},
            api.unschedulable("Insufficient example.com/gpu", unresolvable=True),
            id="extended-missing",
        ),
        pytest.param(
            {"extra": {"example.com/gpu": "2"}},
            [{"example.com/gpu": "1"}],
            {"example.com/gpu": "1"},
            api.SUCCESS,
            id="extended-fits",
        ),
        pytest.param(
            {},
            [],
            {"ephemeral-storage": "1Gi"},
            api.unschedulable("Insufficient ephemeral-storage", unresolvable=True),
            id="ephemeral",
        ),
        pytest.param({}, [], {"cpu": "0"}, api.SUCCESS, id="zero-request"),
    ],
)
def test_fit_filter(
    node_kwargs: dict[str, Any],
    running: list[dict[str, str]],
    wanted: dict[str, str],
    expected: api.Status,
) -> None:
    node = b.node("n1", **node_kwargs)
    pods = [b.pod(f"r{i}", requests=r, node_name="n1") for i, r in enumerate(running)]
    status = filter_status(fit(), b.pod("new", requests=wanted), b.snapshot([node], pods))
    assert (status.code, status.reasons) == (expected.code, expected.reasons)


class TestFitChecksFollowTheSnapshotsRows:
    """The Filter's checks are remembered per request shape; the rows they read are the
    snapshot's, which differ between snapshots and grow when a node first lists a
    resource. One plugin instance must judge each snapshot by its own rows."""

    GPU = "example.com/gpu"

    def verdicts(
        self, plugin: node_resources_fit.NodeResourcesFit, snap: ClusterSnapshot
    ) -> list[bool]:
        pod = b.pod("new", requests={"cpu": "1", self.GPU: "2"})
        return [filter_status(plugin, pod, snap, i).is_success for i in range(snap.size)]

    def test_a_resource_no_node_has_then_nodes_that_have_it(self) -> None:
        plugin = fit()
        without = b.snapshot([b.node("n1"), b.node("n2")])
        assert self.verdicts(plugin, without) == [False, False]
        gpus = [b.node("n1", extra={self.GPU: "1"}), b.node("n2", extra={self.GPU: "4"})]
        assert self.verdicts(plugin, b.snapshot(gpus)) == [False, True]
        assert self.verdicts(plugin, without) == [False, False]

    def test_rows_in_another_order(self) -> None:
        plugin = fit()
        other = "example.com/aaa"  # sorts before the gpu: its row comes first
        first = b.snapshot([b.node("n1", extra={self.GPU: "4"})])
        second = b.snapshot([b.node("n1", extra={other: "8", self.GPU: "1"})])
        assert first.row[self.GPU] != second.row[self.GPU]
        assert self.verdicts(plugin, first) == [True]
        assert self.verdicts(plugin, second) == [False]
        assert self.verdicts(plugin, first) == [True]


@pytest.mark.parametrize(
    "args",
    [
        pytest.param({"ignoredResources": ["example.com/gpu"]}, id="ignored-resource"),
        pytest.param({"ignoredResourceGroups": ["example.com"]}, id="ignored-group"),
    ],
)
def test_ignored_extended_resources_are_not_checked(args: dict[str, Any]) -> None:
    snap = b.snapshot([b.node("n1")])
    assert filter_status(fit(**args), b.pod(requests={"example.com/gpu": "4"}), snap).is_success


def test_hugepages_cannot_be_ignored() -> None:
    snap = b.snapshot([b.node("n1")])
    status = filter_status(
        fit(ignoredResourceGroups=["hugepages-2Mi"]), b.pod(requests={"hugepages-2Mi": "2Mi"}), snap
    )
    assert status.reasons == ("Insufficient hugepages-2Mi",)


def scores(plugin: Any, pod: api.Pod, snap: ClusterSnapshot) -> list[int]:
    state = CycleState()
    if hasattr(plugin, "pre_score"):
        assert plugin.pre_score(state, pod, snap, snap.all_nodes).is_success
    vector = [int(s) for s in plugin.score(state, pod, snap, snap.all_nodes)]
    assert vector == [plugin.score_node(pod, snap, i) for i in range(snap.size)]
    return vector


TWO_NODES = [
    b.node("n1", cpu="4", memory="10000"),
    b.node("n2", cpu="6", memory="10000"),
]


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        # node1: cpu (4000-3000)*100/4000=25, mem 50 -> 37; node2: 50, 50 -> 50
        pytest.param("LeastAllocated", [37, 50], id="least"),
        # node1: cpu 75, mem 50 -> 62; node2: 50, 50 -> 50
        pytest.param("MostAllocated", [62, 50], id="most"),
    ],
)
def test_least_and_most_allocated_upstream_example(strategy: str, expected: list[int]) -> None:
    plugin = fit(scoringStrategy={"type": strategy})
    pod = b.pod(requests={"cpu": "3", "memory": "5000"})
    assert scores(plugin, pod, b.snapshot(TWO_NODES)) == expected


def test_scoring_uses_non_zero_defaults_for_missing_requests() -> None:
    snap = b.snapshot([b.node("n1", cpu="1", memory=str(1000 * MI))])
    pod = b.pod(containers=[b.container()])  # no requests: 100m and 200Mi assumed
    assert scores(fit(), pod, snap) == [((900 * 100 // 1000) + (800 * 100 // 1000)) // 2]


def test_least_allocated_zero_when_over_capacity_most_allocated_clamps() -> None:
    snap = b.snapshot(
        [b.node("n1", cpu="1", memory="1Gi")],
        [b.pod("r", requests={"cpu": "2", "memory": "1Gi"}, node_name="n1")],
    )
    pod = b.pod(requests={"cpu": "1", "memory": "0"})
    assert scores(fit(scoringStrategy={"type": "LeastAllocated"}), pod, snap) == [0]
    assert scores(fit(scoringStrategy={"type": "MostAllocated"}), pod, snap) == [100]


@pytest.mark.parametrize(
    ("gigabyte", "megabytes", "expected"),
    [
        pytest.param("1024Mi", ("256Mi", "512Mi"), [60, 69], id="1GB-as-1024MiB"),
        pytest.param("1G", ("256M", "512M"), [60, 70], id="1GB-as-decimal"),
    ],
)
def test_requested_to_capacity_ratio_documentation_example(
    gigabyte: str, megabytes: tuple[str, str], expected: list[int]
) -> None:
    # Resource bin packing docs: weights foo 5, memory 1, cpu 3; shape {0,0},{100,10};
    # the page's arithmetic, with integer utilization and Go's rounding, gives Node1 60 and
    # Node2 69 reading 1GB as 1024 MiB, 60 and 70 reading it as 10^9 bytes.
    quarter, half = megabytes
    args = {
        "scoringStrategy": {
            "type": "RequestedToCapacityRatio",
            "resources": [
                {"name": "intel.com/foo", "weight": 5},
                {"name": "memory", "weight": 1},
                {"name": "cpu", "weight": 3},
            ],
            "requestedToCapacityRatio": {
                "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
            },
        }
    }
    nodes = [
        b.node("node1", cpu="8", memory=gigabyte, extra={"intel.com/foo": "4"}),
        b.node("node2", cpu="8", memory=gigabyte, extra={"intel.com/foo": "8"}),
    ]
    running = [
        b.pod(
            "u1", requests={"intel.com/foo": "1", "memory": quarter, "cpu": "1"}, node_name="node1"
        ),
        b.pod("u2", requests={"intel.com/foo": "2", "memory": half, "cpu": "6"}, node_name="node2"),
    ]
    pod = b.pod(requests={"intel.com/foo": "2", "memory": quarter, "cpu": "2"})
    assert scores(fit(**args), pod, b.snapshot(nodes, running)) == expected


@pytest.mark.parametrize(
    ("shape", "utilization", "expected"),
    [
        pytest.param([(0, 100), (100, 0)], 0, 100, id="spread-empty"),
        pytest.param([(0, 100), (100, 0)], 33, 67, id="spread-descending-truncates-toward-zero"),
        pytest.param([(0, 0), (100, 100)], 33, 33, id="pack"),
        pytest.param([(20, 50), (80, 90)], 10, 50, id="below-first-point"),
        pytest.param([(20, 50), (80, 90)], 50, 70, id="between"),
        pytest.param([(20, 50), (80, 90)], 95, 90, id="beyond-last-point"),
    ],
)
def test_broken_linear_function(
    shape: list[tuple[int, int]], utilization: int, expected: int
) -> None:
    assert resource_allocation.broken_linear(shape, utilization) == expected
    vector = resource_allocation.broken_linear_vector(
        shape, np.array([[utilization]], dtype=np.int64)
    )
    assert int(vector[0, 0]) == expected


def test_rtcr_drops_zero_scores_and_rounds_half_away_from_zero() -> None:
    # cpu scores 0 (dropped), memory 50 -> 50; a 0-scoring resource must not dilute.
    shape = [(0, 0), (100, 100)]
    assert (
        resource_allocation.requested_to_capacity_ratio_score(
            shape, [0, 50], [100, 100], [1, 1], [True, True]
        )
        == 50
    )
    # (25*1 + 50*... ) : weights 1 and 1, scores 25 and 26 -> 25.5 -> 26
    assert (
        resource_allocation.requested_to_capacity_ratio_score(
            shape, [25, 26], [100, 100], [1, 1], [True, True]
        )
        == 26
    )


def _containers(*requests: dict[str, str]) -> list[dict[str, Any]]:
    """One container per request list, as upstream's ``MakePod().Req(a).Req(b)``."""
    return [b.container(f"c{i}", requests=r) for i, r in enumerate(requests)]


_CPU_ONLY = ({"cpu": "1000m"}, {"cpu": "2000m"})
_CPU_AND_MEMORY = ({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"})
_WITH_GPU = [{"name": "cpu"}, {"name": "memory"}, {"name": "nvidia.com/gpu"}]


@pytest.mark.parametrize(
    ("pod_requests", "nodes", "bound", "resources", "expected"),
    [
        pytest.param(
            _CPU_AND_MEMORY,
            [("node1", 4000, 10000, None), ("node2", 6000, 10000, None)],
            {},
            None,
            [68, 75],
            id="nothing scheduled, resources requested, differently sized nodes",
        ),
        pytest.param(
            _CPU_AND_MEMORY,
            [("node1", 10000, 20000, None), ("node2", 10000, 20000, None)],
            {"node1": _CPU_ONLY, "node2": _CPU_AND_MEMORY},
            None,
            [73, 74],
            id="resources requested, pods scheduled with resources",
        ),
        pytest.param(
            _CPU_AND_MEMORY,
            [("node1", 10000, 20000, None), ("node2", 10000, 50000, None)],
            {"node1": _CPU_ONLY, "node2": _CPU_AND_MEMORY},
            None,
            [73, 70],
            id="resources requested, pods scheduled with resources, differently sized nodes",
        ),
        pytest.param(
            ({"memory": "2000"}, {"memory": "3000"}),
            [("node1", 3000, 5000, None), ("node2", 3000, 5000, None)],
            {"node1": _CPU_ONLY},
            None,
            [100, 50],
            id="resources requested, pods scheduled with resources, nodes to reach min/max score",
        ),
        pytest.param(
            _CPU_ONLY,
            [("node1", 6000, 10000, None), ("node2", 6000, 10000, None)],
            {"node1": _CPU_ONLY, "node2": _CPU_AND_MEMORY},
            None,
            [62, 62],
            id="requested resources at node capacity",
        ),
        pytest.param(
            ({"cpu": "0", "memory": "0", "nvidia.com/gpu": "1"},),
            [("node1", 3500, 40000, 8), ("node2", 3500, 40000, 8)],
            {
                "node1": (
                    {"cpu": "1000m", "memory": "2000"},
                    {"cpu": "2000m", "memory": "3000", "nvidia.com/gpu": "3"},
                ),
                "node2": _CPU_AND_MEMORY,
            },
            _WITH_GPU,
            [75, 76],
            id="scalar resource is included in the score computation if pod requests it",
        ),
        pytest.param(
            _CPU_AND_MEMORY,
            [("node1", 3500, 40000, 8), ("node2", 3500, 40000, None)],
            {},
            _WITH_GPU,
            [56, 56],
            id="scalar resource is not included in the score computation if pod doesn't request it",
        ),
    ],
)
def test_balanced_allocation_upstream_cases(
    pod_requests: tuple[dict[str, str], ...],
    nodes: list[tuple[str, int, int, int | None]],
    bound: dict[str, tuple[dict[str, str], ...]],
    resources: list[dict[str, str]] | None,
    expected: list[int],
) -> None:
    """kube-scheduler v1.36.3's ``TestNodeResourcesBalancedAllocation`` table (its DRA
    cases are in tests/scheduler/dra): the change in balance the pod makes."""
    snap = b.snapshot(
        [
            b.node(
                name,
                cpu=f"{cpu}m",
                memory=str(memory),
                extra={"nvidia.com/gpu": str(gpus)} if gpus else None,
            )
            for name, cpu, memory, gpus in nodes
        ],
        [
            b.pod(f"bound-{name}", node_name=name, containers=_containers(*requests))
            for name, requests in bound.items()
        ],
    )
    args = (
        None
        if resources is None
        else balanced_allocation.Args.model_validate({"resources": resources})
    )
    plugin = balanced_allocation.new(args, Handle())
    pod = b.pod(containers=_containers(*pod_requests))
    assert scores(plugin, pod, snap) == expected
    # "if PreScore not called": Score computes the pod's requests itself
    unprepared = plugin.score(CycleState(), pod, snap, snap.all_nodes)
    assert unprepared.tolist() == expected


@pytest.mark.parametrize(
    ("node_cpu", "expected"),
    [
        pytest.param("4", 68, id="fractions-075-050"),  # with 87, without 100
        pytest.param("6", 75, id="balanced"),  # with 100, without 100: unchanged
    ],
)
def test_balanced_allocation_scores_the_change_on_an_empty_node(
    node_cpu: str, expected: int
) -> None:
    snap = b.snapshot([b.node("n1", cpu=node_cpu, memory="10000")])
    plugin = balanced_allocation.new(None, Handle())
    assert scores(plugin, b.pod(requests={"cpu": "3", "memory": "5000"}), snap) == [expected]


def test_balanced_allocation_three_resources_uses_population_std() -> None:
    plugin = balanced_allocation.new(
        balanced_allocation.Args.model_validate(
            {"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "ephemeral-storage"}]}
        ),
        Handle(),
    )
    snap = b.snapshot([b.node("n1", cpu="10", memory="100", extra={"ephemeral-storage": "100"})])
    pod = b.pod(requests={"cpu": "1", "memory": "50", "ephemeral-storage": "90"})
    # with the pod: fractions .1 .5 .9 -> mean .5, std sqrt((.16+0+.16)/3) = .3266 -> 67;
    # without: all 0 -> 100; 50 + (50 + 67 - 100) / 2 = 58
    assert scores(plugin, pod, snap) == [58]


@pytest.mark.parametrize(
    ("with_pod", "without_pod", "expected"),
    [(100, 100, 75), (100, 50, 100), (50, 100, 50), (67, 100, 58), (51, 100, 50), (50, 99, 50)],
)
def test_balance_change_maps_onto_50_to_100(with_pod: int, without_pod: int, expected: int) -> None:
    """``balancedResourceScorer``'s ``MaxNodeScore/2 + (MaxNodeScore/2 + with - without)/2``
    in Go's integer division; both balances are 50..100."""
    assert resource_allocation.balance_change(with_pod, without_pod) == expected


def test_balanced_allocation_skips_best_effort_pods() -> None:
    plugin = balanced_allocation.new(None, Handle())
    snap = b.snapshot([b.node("n1")])
    assert plugin.pre_score(
        CycleState(), b.pod(containers=[b.container()]), snap, snap.all_nodes
    ).is_skip


def test_image_locality_scales_by_spread_and_container_count() -> None:
    size = 500 * MI
    nodes = [
        b.node("n1", images=[(["registry.example/app:1"], size)]),
        b.node(
            "n2",
            images=[(["registry.example/app:1"], size), (["registry.example/side:1"], 300 * MI)],
        ),
        b.node("n3"),
    ]
    snap = b.snapshot(nodes)
    plugin = image_locality.new(None, Handle())
    one = b.pod(containers=[b.container(image="registry.example/app:1")])
    # spread 2/3: int(500Mi * 2/3) = 349525333 -> 100*(349525333-23Mi)/(1000Mi-23Mi) = 31
    assert scores(plugin, one, snap) == [31, 31, 0]
    two = b.pod(
        containers=[
            b.container("a", image="registry.example/app:1"),
            b.container("b", image="registry.example/side:1"),
        ]
    )
    assert scores(plugin, two, snap) == [15, 20, 0]


@pytest.mark.parametrize("seed", range(5))
def test_bulk_statuses_equal_per_node_statuses(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [
        b.node(f"n{i}", cpu=str(rng.choice([1, 2, 4])), pods=rng.choice([1, 3, 110]))
        for i in range(40)
    ]
    bound = [
        b.pod(f"p{i}", requests={"cpu": "1"}, node_name=f"n{rng.randrange(40)}") for i in range(30)
    ]
    snap = b.snapshot(nodes, bound)
    fit = node_resources_fit.new(None, Handle())
    pod = b.pod("new", requests={"cpu": str(rng.choice([1, 2, 3])), "memory": "1Gi"})
    state = CycleState()
    fit.pre_filter(state, pod, snap)
    distinct, which = fit.filter_statuses(state, pod, snap, snap.all_nodes)
    expected = [fit.filter_node(state, pod, snap, int(n)) for n in snap.all_nodes]
    assert [distinct[i] for i in which] == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.49999999999999994, 0), (0.5, 1), (1.5, 2), (2.5, 3), (-0.5, -1), (-2.5, -3), (7.0, 7)],
)
def test_go_round_vector_is_go_math_round(value: float, expected: int) -> None:
    """Go's ``math.Round`` (PodTopologySpread's score): half away from zero, and exact
    where ``floor(x + 0.5)`` is not (the first case)."""
    from nodeagent.scheduler.plugins import helpers

    assert helpers.go_round(value) == expected
    assert helpers.go_round_vector(np.array([value])).tolist() == [expected]


def test_balanced_allocation_on_a_node_without_allocatable_is_unchanged_balance() -> None:
    """``calculateNodeAllocatableRequest`` skips a resource the node has none of: with
    neither cpu nor memory, both balances are 100 (no fractions) and the score is 75."""
    snap = b.snapshot([b.node("empty", cpu="0", memory="0"), b.node("n1", cpu="4", memory="4Gi")])
    plugin = balanced_allocation.new(None, Handle())
    assert scores(plugin, b.pod(requests={"cpu": "1", "memory": "1Gi"}), snap) == [75, 75]


def test_image_locality_counts_image_volumes_under_the_containers_threshold() -> None:
    """Upstream's "pod with ImageVolume" (``TestImageLocalityPriority``): a container of
    gcr.io/30 and an image volume of gcr.io/300, over node1 (300, 600, 900 MB) and node2
    (4000, 30 MB). The volume's image counts (node1: 300 MB x 1/2 spread), the threshold
    stays one container's: 100 * (150M - 23M) / (1000M - 23M) = 12, node2 0."""
    mb = 1024 * 1024
    nodes = [
        b.node(
            "node1",
            images=[
                (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * mb),
                (["gcr.io/600:latest"], 600 * mb),
                (["gcr.io/900:latest"], 900 * mb),
            ],
        ),
        b.node(
            "node2", images=[(["gcr.io/4000:latest"], 4000 * mb), (["gcr.io/30:latest"], 30 * mb)]
        ),
    ]
    body = b.pod_dict(containers=[b.container(image="gcr.io/30")])
    body["spec"]["volumes"] = [{"name": "imageVolume", "image": {"reference": "gcr.io/300"}}]
    pod = objects.parse_pod(body)
    assert (pod.images, pod.container_count) == (("gcr.io/30:latest", "gcr.io/300:latest"), 1)
    plugin = image_locality.new(None, Handle())
    assert scores(plugin, pod, b.snapshot(nodes)) == [12, 0]
