"""The node view does the per-node work when the watch delivers a node, once per
version: each node is assessed (its :class:`Standing`) as it arrives, the nodes held
before an assessor was installed included, and nodes are grouped by the taints their
filter reads. A request's names are then answered in one consistent read: scores looked
up into columns (:meth:`NodeView.scores`), and each distinct list of filter taints judged
once, with the names carrying a failing one (:meth:`NodeView.failing`). The view answers
like a plain mapping of name to node through any sequence of additions, updates and
deletions (slots and taint-list codes reused)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.extender.nodeview import NodeView, Standing, Taints
from nodeagent.k8s.pressure import Taint
from nodeagent.scheduler import api
from tests.scheduler.builders import node_dict

TAINT = {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}


def versioned(name: str, version: str, **fields: Any) -> dict[str, Any]:
    obj = node_dict(name, **fields)
    obj["metadata"]["resourceVersion"] = version
    return obj


class Assessor:
    """Counts assessments; a node's standing is its annotation ``score`` until its
    annotation ``until``, then ``score - 1``."""

    def __init__(self) -> None:
        self.assessed: list[str] = []

    def __call__(self, node: api.Node) -> Standing:
        self.assessed.append(node.name)
        score = int(node.annotations.get("score", "0"))
        until = float(node.annotations.get("until", "inf"))
        return Standing(score, max(score - 1, 0), until)


class Verdicts:
    """A filter verdict that fails every list of taints (its verdict: the list itself),
    or only those with a taint of ``key``; counts the lists it judged."""

    def __init__(self, key: str | None = None) -> None:
        self.key = key
        self.judged: list[Taints] = []

    def __call__(self, taints: Taints) -> Taints | None:
        self.judged.append(taints)
        if self.key is None or any(taint.key == self.key for taint in taints):
            return taints
        return None


class TestAssessment:
    def test_once_per_delivered_version_and_not_per_read(self) -> None:
        assess = Assessor()
        view = NodeView(assess=assess)
        view.upsert(versioned("a", "1", annotations={"score": "7"}))
        for _ in range(3):
            assert view.scores(["a"], 0.0, neutral=5).tolist() == [7]
        view.upsert(versioned("a", "2", annotations={"score": "3"}))
        assert view.scores(["a"], 0.0, neutral=5).tolist() == [3]
        assert assess.assessed == ["a", "a"]

    def test_nodes_held_before_the_assessor_are_assessed_when_it_comes(self) -> None:
        view = NodeView()
        view.upsert(versioned("a", "1", annotations={"score": "4"}))
        assert view.nodes["a"].standing is None
        assert view.scores(["a"], 0.0, neutral=5).tolist() == [5]
        view.assess_with(Assessor())
        standing = view.nodes["a"].standing
        assert standing is not None and standing.score(0.0) == 4
        assert view.scores(["a"], 0.0, neutral=5).tolist() == [4]

    def test_a_standing_steps_at_its_limit(self) -> None:
        standing = Standing(fresh=9, stale=5, fresh_until=100.0)
        assert [standing.score(t) for t in (0.0, 100.0, 100.5)] == [9, 9, 5]

    def test_the_columns_step_where_the_standing_does(self) -> None:
        view = NodeView(assess=Assessor())
        view.upsert(versioned("a", "1", annotations={"score": "9", "until": "100"}))
        assert [view.scores(["a", "a"], t, neutral=5).tolist() for t in (0.0, 100.0, 100.5)] == [
            [9, 9],
            [9, 9],
            [8, 8],
        ]

    def test_an_unknown_name_has_no_score_and_no_taints(self) -> None:
        view = NodeView(assess=Assessor())
        view.upsert(versioned("a", "1", annotations={"score": "2"}, taints=[TAINT]))
        assert view.scores(["nobody", "a", ""], 0.0, neutral=5).tolist() == [5, 2, 5]
        taints = view.nodes["a"].node.taints
        assert view.failing(["nobody", "a", ""], Verdicts()) == {taints: ["a"]}


class TestFailing:
    def test_each_distinct_list_is_judged_once_per_call(self) -> None:
        view = NodeView()
        for name in ("a", "b"):
            view.upsert(versioned(name, "1", taints=[TAINT]))
        view.upsert(versioned("c", "1", taints=[{**TAINT, "effect": "NoExecute"}]))
        view.upsert(versioned("d", "1"))
        a, c = view.nodes["a"].node.taints, view.nodes["c"].node.taints
        verdicts = Verdicts()
        assert view.failing(["d", "c", "b", "a", "nobody"], verdicts) == {a: ["b", "a"], c: ["c"]}
        assert len(verdicts.judged) == 2 and set(verdicts.judged) == {a, c}

    def test_only_failing_lists_and_the_names_asked(self) -> None:
        view = NodeView()
        view.upsert(versioned("a", "1", taints=[TAINT]))
        view.upsert(versioned("b", "1", taints=[{"key": "other", "effect": "NoSchedule"}]))
        assert view.failing(["a", "b"], Verdicts(key=TAINT["key"])) == {
            view.nodes["a"].node.taints: ["a"]
        }
        assert view.failing(["b"], Verdicts(key=TAINT["key"])) == {}
        assert view.failing(["a", "b"], Verdicts(key="absent")) == {}

    def test_a_deleted_node_fails_no_more(self) -> None:
        view = NodeView()
        view.upsert(versioned("a", "1", taints=[TAINT]))
        view.delete({"metadata": {"name": "a"}})
        verdicts = Verdicts()
        assert view.failing(["a"], verdicts) == {}
        assert verdicts.judged == []  # the list went with its last node

    def test_a_list_no_node_carries_is_forgotten(self) -> None:
        view = NodeView()
        for i in range(50):  # a churn of unique taint lists, one node at a time
            view.upsert(versioned("a", str(i), taints=[{**TAINT, "value": str(i)}]))
        verdicts = Verdicts()
        view.failing(["a"], verdicts)
        assert verdicts.judged == [(Taint(TAINT["key"], TAINT["effect"], "49"),)]

    def test_nodes_are_grouped_by_the_taints_their_filter_reads(self) -> None:
        def pressure_taints(taints: Taints) -> Taints:
            return tuple(taint for taint in taints if taint.key == TAINT["key"])

        view = NodeView(filter_taints=pressure_taints)
        for i in range(20):  # a taint of its own on each node, as an autoscaler's
            unique = {"key": "ToBeDeleted", "value": str(i), "effect": "NoSchedule"}
            view.upsert(versioned(f"n{i}", "1", taints=[unique, TAINT]))
        view.upsert(
            versioned("plain", "1", taints=[{"key": "ToBeDeleted", "effect": "NoSchedule"}])
        )
        verdicts = Verdicts()
        failing = view.failing([f"n{i}" for i in range(20)] + ["plain"], verdicts)
        assert verdicts.judged == [(Taint(TAINT["key"], TAINT["effect"]),)]
        assert list(failing.values()) == [[f"n{i}" for i in range(20)]]


NAMES = st.sampled_from([f"n{i}" for i in range(6)])
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete"]),
        NAMES,
        st.integers(0, 10),
        st.sampled_from([None, "NoSchedule", "NoExecute"]),
    ),
    max_size=60,
)


class TestAgainstAMapping:
    @settings(max_examples=200, deadline=None)
    @given(OPERATIONS, st.lists(NAMES, max_size=10))
    def test_reads_answer_as_a_mapping_of_the_last_writes(
        self, operations: list[tuple[str, str, int, str | None]], asked: list[str]
    ) -> None:
        view = NodeView(assess=Assessor())
        expected: dict[str, tuple[int, tuple[Taint, ...]]] = {}
        for i, (operation, name, score, effect) in enumerate(operations):
            if operation == "delete":
                view.delete({"metadata": {"name": name}})
                expected.pop(name, None)
                continue
            taints = () if effect is None else (Taint(TAINT["key"], effect),)
            listed = [{"key": t.key, "effect": t.effect} for t in taints]
            view.upsert(versioned(name, str(i), annotations={"score": str(score)}, taints=listed))
            expected[name] = (score, taints)
        assert view.scores(asked, 0.0, neutral=-7).tolist() == [
            expected[n][0] if n in expected else -7 for n in asked
        ]
        carried = [(n, expected[n][1]) for n in asked if n in expected and expected[n][1]]
        assert view.failing(asked, Verdicts()) == {
            taints: [n for n, t in carried if t == taints] for _, taints in carried
        }
        assert len(view) == len(expected)

    def test_the_columns_grow_past_their_first_capacity(self) -> None:
        view = NodeView(assess=Assessor())
        names = [f"node-{i}" for i in range(3000)]
        for i, name in enumerate(names):
            view.upsert(versioned(name, "1", annotations={"score": str(i % 11)}))
        assert view.scores(names, 0.0, neutral=5).tolist() == [i % 11 for i in range(3000)]

    def test_repacking_keeps_every_name_and_slot(self) -> None:
        view = NodeView(assess=Assessor())
        for i in range(1000):  # several repacks on the way
            view.upsert(versioned(f"n{i}", "1", annotations={"score": str(i % 11)}))
            if i % 3 == 0:
                view.delete({"metadata": {"name": f"n{i // 2}"}})
        held = sorted(view.nodes)
        assert view.scores(held, 0.0, neutral=-1).tolist() == [int(name[1:]) % 11 for name in held]
