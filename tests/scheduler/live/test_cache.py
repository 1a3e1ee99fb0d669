"""The scheduler cache: assume / confirm / forget / expire, and a snapshot updated in place
that answers exactly like one rebuilt from scratch."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from nodeagent.base.clock import FakeClock
from nodeagent.k8s.pressure import Taint
from nodeagent.k8s.resources import CPU
from nodeagent.scheduler import api
from nodeagent.scheduler.live.cache import AlreadyAccounted, SchedulerCache
from nodeagent.scheduler.live.events import ClusterEvent
from nodeagent.scheduler.snapshot import ClusterSnapshot


def node(name: str, cpu: int = 2000, **fields: object) -> api.Node:
    return api.Node(name, allocatable={CPU: cpu, api.PODS: 110}, **fields)  # type: ignore[arg-type]


def pod(name: str, cpu: int = 500, node_name: str = "") -> api.Pod:
    return api.Pod("default", name, uid=f"u-{name}", node_name=node_name, requests={CPU: cpu})


def requested(cache: SchedulerCache, name: str) -> int:
    with cache.cycle() as snapshot:
        return int(snapshot.requested[snapshot.row[CPU], snapshot.index[name]])


class TestAccountedOnce:
    """A pod is accounted once, wherever it is: the issue's phantom usage came from a
    second ``assume`` replacing the first without releasing it."""

    def test_assume_of_an_assumed_or_bound_pod_is_refused(self) -> None:
        cache = SchedulerCache(clock=FakeClock().now)
        cache.add_node(node("n1"))
        cache.add_node(node("n2"))
        cache.assume(pod("a"), "n1")
        with pytest.raises(AlreadyAccounted):
            cache.assume(pod("a"), "n2")
        assert requested(cache, "n1") == 500 and requested(cache, "n2") == 0
        assert cache.accounts("u-a")
        assert cache.confirm("u-a", "n1")
        with pytest.raises(AlreadyAccounted):
            cache.assume(pod("a"), "n2")
        assert cache.accounts("u-a") and requested(cache, "n2") == 0

    def test_forget_releases_exactly_the_assumption_and_says_so(self) -> None:
        cache = SchedulerCache(clock=FakeClock().now)
        cache.add_node(node("n1"))
        cache.assume(pod("a", cpu=700), "n1")
        assert cache.forget("u-a") and requested(cache, "n1") == 0
        assert not cache.forget("u-a"), "nothing left to release"
        assert not cache.accounts("u-a")

    def test_deleting_an_assumed_pod_releases_it_and_reports_it(self) -> None:
        cache = SchedulerCache(clock=FakeClock().now)
        cache.add_node(node("n1"))
        cache.assume(pod("a"), "n1")
        gone = cache.remove_bound("u-a")
        assert gone is not None and gone.node_name == "n1"
        assert requested(cache, "n1") == 0 and cache.remove_bound("u-a") is None


def test_assume_confirm_forget_and_expire() -> None:
    clock = FakeClock()
    cache = SchedulerCache(clock=clock.now, assume_ttl=30)
    cache.add_node(node("n1"))
    assumed = cache.assume(pod("a"), "n1")
    assert assumed.node_name == "n1" and requested(cache, "n1") == 500
    assert cache.confirm("u-a", "n1") and not cache.is_assumed("u-a")
    assert requested(cache, "n1") == 500, "confirming does not count twice"
    cache.assume(pod("b"), "n1")
    cache.forget("u-b")
    assert requested(cache, "n1") == 500
    cache.assume(pod("c"), "n1")
    cache.finish_binding("u-c")
    clock.advance(29)
    assert cache.expire_assumed() == []
    clock.advance(2)
    assert [p.name for p in cache.expire_assumed()] == ["c"]
    assert requested(cache, "n1") == 500
    cache.remove_bound("u-a")
    assert requested(cache, "n1") == 0


def test_node_changes_are_written_in_place_and_reported_as_events() -> None:
    cache = SchedulerCache(clock=FakeClock().now)
    assert cache.add_node(node("n1")) == {ClusterEvent.NODE_ADD}
    cache.add_bound(pod("a", node_name="n1"))
    with cache.cycle():
        pass
    taint = Taint("node.kubernetes.io/memory-pressure", "NoSchedule")
    events = cache.update_node(node("n1", cpu=4000, taints=(taint,)))
    assert events == {ClusterEvent.NODE_ALLOCATABLE_CHANGE, ClusterEvent.NODE_TAINT_CHANGE}
    with cache.cycle() as snapshot:
        assert snapshot.taint_sets[snapshot.taint_set[0]] == (taint,)
        assert snapshot.allocatable[snapshot.row[CPU], 0] == 4000
        assert snapshot.static_generation == 1
    stats = cache.stats()
    assert (stats.rebuilds, stats.node_updates, stats.bound) == (1, 1, 1)
    cache.add_node(node("n2"))
    with cache.cycle() as snapshot:
        assert snapshot.size == 2
    stats = cache.stats()
    assert (stats.rebuilds, stats.relayouts) == (1, 1), "a new node is laid out in place"


labels = st.dictionaries(st.sampled_from(["zone", "disk", "gpu"]), st.sampled_from("abc"))
taints = st.lists(
    st.builds(Taint, st.sampled_from(["k1", "k2"]), st.sampled_from(["NoSchedule"])),
    max_size=2,
).map(tuple)
nodes_strategy = st.lists(
    st.tuples(labels, taints, st.integers(0, 8000), st.booleans()), min_size=1, max_size=6
)


@settings(max_examples=80, deadline=None)
@given(nodes_strategy, st.data())
def test_in_place_updates_equal_a_rebuild(
    initial: list[tuple[dict[str, str], tuple[Taint, ...], int, bool]], data: st.DataObject
) -> None:
    def make(i: int, spec: tuple[dict[str, str], tuple[Taint, ...], int, bool]) -> api.Node:
        lab, tai, cpu, unschedulable = spec
        return api.Node(
            f"n{i}", labels=lab, taints=tai, allocatable={CPU: cpu}, unschedulable=unschedulable
        )

    nodes = [make(i, spec) for i, spec in enumerate(initial)]
    live = ClusterSnapshot(nodes)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(nodes) - 1))
        nodes[i] = make(
            i, data.draw(st.tuples(labels, taints, st.integers(0, 8000), st.booleans()))
        )
        live.update_node(live.index[nodes[i].name], nodes[i])
    fresh = ClusterSnapshot(nodes)
    assert live.names == fresh.names
    assert np.array_equal(live.allocatable[live.row[CPU]], fresh.allocatable[fresh.row[CPU]])
    assert np.array_equal(live.unschedulable, fresh.unschedulable)
    for i in range(live.size):
        assert live.taint_sets[live.taint_set[i]] == fresh.taint_sets[fresh.taint_set[i]]
    for key in ("zone", "disk", "gpu"):
        a, b = live.labels.column(key), fresh.labels.column(key)
        values_a = [a.values[c] if c >= 0 else None for c in a.codes]
        values_b = [b.values[c] if c >= 0 else None for c in b.codes]
        assert values_a == values_b
