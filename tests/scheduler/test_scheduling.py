"""Node selection: how many nodes to find, node-tree order, the start index carried
across cycles, chunked filtering equal to sequential filtering, and selectHost."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.scheduler import api, objects, scheduling, snapshot
from nodeagent.scheduler.framework import CycleState
from nodeagent.scheduler.snapshot import ClusterSnapshot, Mask, NodeIndices
from tests.scheduler import builders as b


@pytest.mark.parametrize(
    ("nodes", "profile", "global_", "expected"),
    [
        pytest.param(10, None, 0, 10, id="fewer-than-100-all"),
        pytest.param(99, 10, 0, 99, id="99-all-even-with-percentage"),
        pytest.param(100, None, 0, 100, id="100-at-least-100"),
        pytest.param(500, None, 0, 230, id="500-46pct"),
        pytest.param(1000, None, 0, 420, id="1000-42pct"),
        pytest.param(5000, None, 0, 500, id="5000-10pct"),
        pytest.param(5625, None, 0, 281, id="5625-5pct-floor"),
        pytest.param(15000, None, 0, 750, id="15000-5pct"),
        pytest.param(1000, None, 100, 1000, id="global-100-all"),
        pytest.param(1000, 20, 100, 200, id="profile-beats-global"),
        pytest.param(1000, 0, 100, 420, id="profile-0-is-adaptive"),
        pytest.param(1000, 5, 0, 100, id="never-below-100"),
    ],
)
def test_num_feasible_nodes_to_find(
    nodes: int, profile: int | None, global_: int, expected: int
) -> None:
    assert scheduling.num_feasible_nodes_to_find(profile, global_, nodes) == expected


def zoned(name: str, zone: str | None, *, beta: bool = False, region: str = "") -> api.Node:
    labels = {}
    if zone is not None:
        labels[
            "failure-domain.beta.kubernetes.io/zone" if beta else "topology.kubernetes.io/zone"
        ] = zone
    if region:
        labels["topology.kubernetes.io/region"] = region
    return b.node(name, labels=labels)


def test_node_tree_order_is_zone_round_robin() -> None:
    # Scheduler Performance Tuning page: zone1 = [n1..n4], zone2 = [n5, n6] -> n1 n5 n2 n6 n3 n4.
    nodes = [zoned(f"n{i}", "zone1") for i in range(1, 5)] + [
        zoned(f"n{i}", "zone2") for i in (5, 6)
    ]
    assert ClusterSnapshot(nodes).names == ("n1", "n5", "n2", "n6", "n3", "n4")


def test_zone_keys_use_region_beta_labels_and_empty_zone() -> None:
    nodes = [
        zoned("a1", "z", region="r1"),
        zoned("b1", "z", region="r2"),  # same zone name, other region: another zone
        zoned("c1", "z", beta=True, region="r1"),  # beta label: same key as a1
        zoned("d1", None),
        zoned("d2", None),
    ]
    assert snapshot.zone_key(nodes[0].labels) == snapshot.zone_key(nodes[2].labels)
    assert ClusterSnapshot(nodes).names == ("a1", "b1", "d1", "c1", "d2")


class OddFilter:
    """Rejects nodes whose index is odd; counts evaluated nodes."""

    name = "Odd"

    def __init__(self) -> None:
        self.seen = 0

    def filter(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        self.seen += len(nodes)
        result: Mask = nodes % 2 == 0
        return result

    def filter_node(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, node: int
    ) -> api.Status:
        return api.SUCCESS if node % 2 == 0 else api.unschedulable("odd")


def sequential(
    candidates: list[int], start: int, wanted: int, reject: set[int]
) -> tuple[list[int], list[int], int]:
    feasible: list[int] = []
    rejected: list[int] = []
    processed = 0
    for i in range(len(candidates)):
        if len(feasible) >= wanted:
            break
        node = candidates[(start + i) % len(candidates)]
        processed += 1
        (rejected if node in reject else feasible).append(node)
    return feasible, rejected, processed


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(1, 700),
    start=st.integers(0, 2000),
    wanted=st.integers(1, 400),
    seed=st.integers(0, 2**32),
    density=st.floats(0.0, 1.0),
)
def test_chunked_filtering_equals_sequential_filtering(
    size: int, start: int, wanted: int, seed: int, density: float
) -> None:
    rng = random.Random(seed)
    reject = {i for i in range(size) if rng.random() < density}

    class SetFilter:
        name = "Set"

        def filter(
            self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, nodes: NodeIndices
        ) -> Mask:
            return np.array([int(n) not in reject for n in nodes], dtype=bool)

        def filter_node(self, *args: object) -> api.Status:
            raise AssertionError

    candidates = np.arange(size, dtype=np.intp)
    empty = ClusterSnapshot([])
    outcome = scheduling.find_feasible(
        [SetFilter()],
        CycleState(),
        api.Pod("ns", "p"),
        empty,
        candidates,
        start=start % size,
        wanted=wanted,
    )
    feasible, rejected, processed = sequential(list(range(size)), start % size, wanted, reject)
    assert outcome.feasible.tolist() == feasible
    assert sorted(outcome.rejected.tolist()) == sorted(rejected)
    assert outcome.processed == processed


def test_start_index_carries_across_cycles_so_every_node_gets_a_turn() -> None:
    nodes = [b.node(f"n{i:03}") for i in range(200)]
    snap = b.snapshot(nodes)
    fw = b.default_framework(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "percentageOfNodesToScore": 50,
        }
    )
    sched = scheduling.Scheduler(
        {fw.scheduler_name: fw}, snap, percentage_of_nodes_to_score=50, rng=random.Random(0)
    )
    first = sched.schedule_pod(fw, b.pod("a"))
    assert first.outcome is not None and first.outcome.processed == 100
    assert sched.next_start_node_index == 100
    second = sched.schedule_pod(fw, b.pod("b"))
    assert second.outcome is not None
    assert set(second.outcome.feasible.tolist()) == set(range(100, 200))
    assert sched.next_start_node_index == 0


@pytest.mark.parametrize(
    "plugins",
    [
        pytest.param({"filter": {"disabled": [{"name": "*"}]}}, id="no-filter-plugins"),
        pytest.param(
            {
                "filter": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodePorts"}]},
                "preFilter": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodePorts"}]},
            },
            id="every-filter-skipped",
        ),
    ],
)
def test_start_index_advances_when_no_filter_runs(plugins: dict[str, Any]) -> None:
    snap = b.snapshot([b.node(f"n{i:03}") for i in range(200)])
    fw = b.default_framework(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"percentageOfNodesToScore": 50, "plugins": plugins}],
        }
    )
    sched = scheduling.Scheduler({fw.scheduler_name: fw}, snap, rng=random.Random(0))
    first = sched.schedule_pod(fw, b.pod("a"))
    assert first.outcome is not None and first.outcome.feasible.tolist() == list(range(100))
    assert sched.next_start_node_index == 100
    second = sched.schedule_pod(fw, b.pod("b"))
    assert second.outcome is not None
    assert second.outcome.feasible.tolist() == list(range(100, 200))


def test_processed_counts_rejected_nodes_too() -> None:
    odd = OddFilter()
    empty = ClusterSnapshot([])
    outcome = scheduling.find_feasible(
        [odd],
        CycleState(),
        api.Pod("ns", "p"),
        empty,
        np.arange(1000, dtype=np.intp),
        start=0,
        wanted=100,
    )
    assert outcome.feasible.tolist() == list(range(0, 200, 2))
    assert outcome.processed == 199  # stops right after the 100th feasible node
    assert len(outcome.rejected) == 99


def test_select_host_picks_the_best_total() -> None:
    assert scheduling.select_host(np.array([5, 9, 7], dtype=np.int64), random.Random(0)) == 1


def test_select_host_is_reproducible_with_a_seed() -> None:
    totals = np.array([3, 8, 8, 1, 8, 8], dtype=np.int64)
    picks = [scheduling.select_host(totals, random.Random(42)) for _ in range(5)]
    assert len(set(picks)) == 1
    assert picks[0] in (1, 2, 4, 5)


def test_select_host_samples_ties_uniformly() -> None:
    totals = np.array([8, 2, 8, 8, 8, 0], dtype=np.int64)
    rng = random.Random(7)
    counts = Counter(scheduling.select_host(totals, rng) for _ in range(8000))
    assert set(counts) == {0, 2, 3, 4}
    for position in (0, 2, 3, 4):
        assert 1800 < counts[position] < 2200  # 2000 expected; ~5 sigma band


def test_select_host_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="empty"):
        scheduling.select_host(np.zeros(0, dtype=np.int64), random.Random(0))


def nominated_pod(node: str) -> api.Pod:
    raw = b.pod_dict("p", requests={"cpu": "1"})
    raw["status"] = {"nominatedNodeName": node}
    return objects.parse_pod(raw)


def test_a_feasible_nominated_node_is_taken_without_scoring() -> None:
    # "busy" would score lowest (LeastAllocated), but the nomination wins outright.
    nodes = [b.node("idle-1"), b.node("idle-2"), b.node("busy")]
    snap = b.snapshot(nodes, [b.pod("r", requests={"cpu": "2"}, node_name="busy")])
    fw = b.default_framework()
    sched = scheduling.Scheduler({fw.scheduler_name: fw}, snap, rng=random.Random(0))
    result = sched.schedule_pod(fw, nominated_pod("busy"))
    assert result.node == "busy"
    assert result.scores is None
    assert sched.next_start_node_index == 0  # the fast path does not move the start


def test_an_infeasible_nominated_node_falls_back_to_a_full_cycle() -> None:
    nodes = [b.node("idle-1"), b.node("full", cpu="1")]
    snap = b.snapshot(nodes, [b.pod("r", requests={"cpu": "1"}, node_name="full")])
    fw = b.default_framework()
    sched = scheduling.Scheduler({fw.scheduler_name: fw}, snap, rng=random.Random(0))
    result = sched.schedule_pod(fw, nominated_pod("full"))
    assert result.node == "idle-1"
    status = result.node_status(snap.index["full"])
    assert status is not None and status.reasons == ("Insufficient cpu",)


@pytest.mark.parametrize(
    ("priority", "placed"),
    [
        pytest.param(5, "roomy", id="lower-priority-sees-the-nominated-pods-requests"),
        pytest.param(10, "roomy", id="equal-priority-too"),
        pytest.param(20, "tight", id="higher-priority-ignores-them"),
    ],
)
def test_nominated_pods_count_against_lower_or_equal_priority_pods(
    priority: int, placed: str
) -> None:
    # "tight" has 3 CPU free but 2 are promised to a nominated pod of priority 10; the
    # incoming pod (2 CPU) would score better on "tight" (MostAllocated) if it fit.
    nodes = [b.node("tight", cpu="4"), b.node("roomy", cpu="64")]
    snap = b.snapshot(nodes, [b.pod("r", requests={"cpu": "1"}, node_name="tight")])
    fw = b.default_framework(
        {
            "profiles": [
                {
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {"scoringStrategy": {"type": "MostAllocated"}},
                        }
                    ]
                }
            ]
        }
    )
    promised = objects.parse_pod(b.pod_dict("promised", requests={"cpu": "2"}, priority=10))
    fw.handle.nominator.add(promised, "tight")
    sched = scheduling.Scheduler({fw.scheduler_name: fw}, snap, rng=random.Random(0))
    incoming = objects.parse_pod(b.pod_dict("new", requests={"cpu": "2"}, priority=priority))
    assert sched.schedule_pod(fw, incoming).node == placed
    assert snap.pod_count[snap.index["tight"]] == 1  # the nominated pod is not left behind
