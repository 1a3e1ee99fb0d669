"""NodePressure keeps every node's score across a snapshot kept in place: after any
sequence of nodes added, changed and deleted and of the clock moving on (annotations
going stale), its scores equal each node's score computed afresh. It rescores only the
nodes that changed or went stale (the churn of a large cluster costs per node changed)."""

from __future__ import annotations

import json

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from nodeagent.k8s.pressure import PRESSURE_ANNOTATION
from nodeagent.k8s.resources import CPU
from nodeagent.scheduler import api
from nodeagent.scheduler.framework import CycleState, Handle
from nodeagent.scheduler.plugins import node_pressure
from nodeagent.scheduler.snapshot import ClusterSnapshot, NodeTree

NOW = 1_714_557_600.0  # 2024-05-01T10:00:00Z
NAMES = [f"n{i}" for i in range(6)]


def published(at: float) -> str:
    stamp = np.datetime64(int(at), "s")
    return f"{stamp}Z"


@st.composite
def nodes(draw: st.DrawFn) -> api.Node:
    annotations: dict[str, str] = {}
    kind = draw(st.sampled_from(["none", "headroom", "garbage"]))
    if kind == "headroom":
        document = {
            "time": published(NOW + draw(st.integers(-400, 100))),
            "signals": {"memory": {"available": draw(st.integers(0, 100)), "capacity": 100}},
        }
        annotations[PRESSURE_ANNOTATION] = json.dumps(document)
    elif kind == "garbage":
        annotations[PRESSURE_ANNOTATION] = "{oops"
    conditions = {"MemoryPressure": "True"} if draw(st.booleans()) else {}
    return api.Node(
        draw(st.sampled_from(NAMES)),
        labels={"topology.kubernetes.io/zone": draw(st.sampled_from("ab"))},
        annotations=annotations,
        conditions=conditions,
        allocatable={CPU: 1000},
    )


operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), nodes()),
        st.tuples(st.just("delete"), st.sampled_from(NAMES)),
        st.tuples(st.just("wait"), st.integers(0, 200)),
        st.tuples(st.just("score"), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_scores_kept_across_changes_equal_scores_computed_afresh(
    ops: list[tuple[str, object]],
) -> None:
    handle = Handle(now=NOW)
    plugin = node_pressure.new(node_pressure.Args(), handle)
    tree, known = NodeTree(), {}
    snapshot = ClusterSnapshot([])

    def score_all() -> list[int]:
        scores = plugin.score(CycleState(), api.Pod("d", "p"), snapshot, snapshot.all_nodes)
        listed: list[int] = scores.tolist()
        return listed

    for op, arg in ops:
        if op == "put":
            assert isinstance(arg, api.Node)
            if arg.name in known:
                snapshot.update_node(snapshot.index[arg.name], arg)
                moved = tree.update(arg)
            else:
                tree.add(arg)
                moved = True
            known[arg.name] = arg
            if moved:
                names, unchanged = tree.order()
                snapshot.set_nodes(names, known, lambda _: (), unchanged=unchanged)
        elif op == "delete" and arg in known:
            del known[str(arg)]
            tree.remove(str(arg))
            names, unchanged = tree.order()
            snapshot.set_nodes(names, known, lambda _: (), unchanged=unchanged)
        elif op == "wait":
            assert isinstance(arg, int)
            handle.now += arg
        elif op == "score":
            score_all()
    fresh = node_pressure.new(node_pressure.Args(), Handle(now=handle.now))
    assert score_all() == [fresh.node_score(node)[0] for node in snapshot.nodes]


def test_only_changed_and_stale_nodes_are_rescored() -> None:
    handle = Handle(now=NOW)
    plugin = node_pressure.new(node_pressure.Args(), handle)
    evaluated: list[str] = []
    evaluate = plugin._evaluate

    def counting(node: api.Node) -> tuple[int, str, float]:
        evaluated.append(node.name)
        return evaluate(node)

    plugin._evaluate = counting  # type: ignore[method-assign]
    fresh = {"signals": {"memory": {"available": 50, "capacity": 100}}}
    nodes = [
        api.Node(f"n{i}", annotations={PRESSURE_ANNOTATION: json.dumps(fresh)}) for i in range(50)
    ]
    aging = {**fresh, "time": published(NOW)}
    nodes[7] = api.Node("n7", annotations={PRESSURE_ANNOTATION: json.dumps(aging)})
    snapshot = ClusterSnapshot(nodes)
    pod = api.Pod("d", "p")
    plugin.score(CycleState(), pod, snapshot, snapshot.all_nodes)
    assert len(evaluated) == 50
    evaluated.clear()
    snapshot.update_node(3, api.Node("n3"))
    node_of = {node.name: node for node in snapshot.nodes} | {"new": api.Node("new")}
    snapshot.set_nodes(["new", *snapshot.names[:10], *snapshot.names[11:]], node_of, lambda _: ())
    scores = plugin.score(CycleState(), pod, snapshot, snapshot.all_nodes)
    assert sorted(evaluated) == ["n3", "new"], "n10 left; the others moved, unchanged"
    assert scores[snapshot.index["n3"]] == scores[0] == 50  # neutral: no annotation
    evaluated.clear()
    handle.now = NOW + node_pressure.Args().stale_after_seconds + 1
    plugin.score(CycleState(), pod, snapshot, snapshot.all_nodes)
    assert evaluated == ["n7"], "its annotation went stale"
