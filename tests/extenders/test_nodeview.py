"""The node view does the per-node work when the watch delivers a node, once per
version: each node is assessed (its :class:`Standing`) as it arrives, the nodes held
before an assessor was installed included, and equal taint lists are one shared tuple
(a filter compares them by identity)."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler import api
from nodeagent.scheduler.extenders.nodeview import NodeView, Standing
from tests.scheduler.builders import node_dict

TAINT = {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}


def versioned(name: str, version: str, **fields: Any) -> dict[str, Any]:
    obj = node_dict(name, **fields)
    obj["metadata"]["resourceVersion"] = version
    return obj


class Assessor:
    """Counts assessments; a node's standing is its annotation ``score``."""

    def __init__(self) -> None:
        self.assessed: list[str] = []

    def __call__(self, node: api.Node) -> Standing:
        self.assessed.append(node.name)
        score = int(node.annotations.get("score", "0"))
        return Standing(score, score)


class TestAssessment:
    def test_once_per_delivered_version_and_not_per_read(self) -> None:
        assess = Assessor()
        view = NodeView(assess=assess)
        view.upsert(versioned("a", "1", annotations={"score": "7"}))
        for _ in range(3):
            standing = view.nodes["a"].standing
            assert standing is not None and standing.score(0.0) == 7
        view.upsert(versioned("a", "2", annotations={"score": "3"}))
        standing = view.nodes["a"].standing
        assert standing is not None and standing.score(0.0) == 3
        assert assess.assessed == ["a", "a"]

    def test_nodes_held_before_the_assessor_are_assessed_when_it_comes(self) -> None:
        view = NodeView()
        view.upsert(versioned("a", "1", annotations={"score": "4"}))
        assert view.nodes["a"].standing is None
        view.assess_with(Assessor())
        standing = view.nodes["a"].standing
        assert standing is not None and standing.score(0.0) == 4

    def test_a_standing_steps_at_its_limit(self) -> None:
        standing = Standing(fresh=9, stale=5, fresh_until=100.0)
        assert [standing.score(t) for t in (0.0, 100.0, 100.5)] == [9, 9, 5]


class TestTaintLists:
    def test_equal_lists_are_one_tuple(self) -> None:
        view = NodeView()
        for name in ("a", "b"):
            view.upsert(versioned(name, "1", taints=[TAINT]))
        view.upsert(versioned("c", "1", taints=[{**TAINT, "effect": "NoExecute"}]))
        a, b, c = (view.nodes[n].node.taints for n in "abc")
        assert a is b and a == b
        assert c is not a
        assert view.tainted == {"a", "b", "c"}
        view.delete({"metadata": {"name": "a"}})
        assert "a" not in view.nodes and view.tainted == {"b", "c"}
