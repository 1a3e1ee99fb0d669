"""The framework's ordering and status handling, with recording fake plugins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api, config, framework, registry, scheduling
from nodeagent.scheduler.framework import CycleState, PreFilterResult
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices
from tests.scheduler import builders as b


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []


class FakeFilter:
    """Rejects the named nodes; records which nodes it was asked about."""

    def __init__(self, name: str, rec: Recorder, reject: set[str], code: api.Code) -> None:
        self.name = name
        self.rec = rec
        self.reject = reject
        self.code = code

    def filter(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        self.rec.calls.append((self.name, "filter", sorted(snap.names[i] for i in nodes)))
        return np.array([snap.names[i] not in self.reject for i in nodes], dtype=bool)

    def filter_node(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, node: int
    ) -> api.Status:
        if snap.names[node] in self.reject:
            return api.Status(self.code, (f"{self.name} says no",))
        return api.SUCCESS


class FakePreFilter:
    def __init__(self, name: str, result: PreFilterResult | None, status: api.Status) -> None:
        self.name = name
        self.result = result
        self.status = status

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        return self.result, self.status


class FakeScore:
    def __init__(
        self,
        name: str,
        scores: dict[str, int],
        pre: api.Status = api.SUCCESS,
        normalize: bool = False,
    ) -> None:
        self.name = name
        self.scores = scores
        self.pre = pre
        if normalize:
            self.normalize_score = self._normalize

    def pre_score(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        return self.pre

    def score(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        return np.array([self.scores.get(snap.names[i], 0) for i in nodes], dtype=np.int64)

    def _normalize(self, state: CycleState, pod: api.Pod, scores: Int64s) -> Int64s:
        return scores * 2


class FakeReserve:
    def __init__(self, name: str, rec: Recorder, status: api.Status = api.SUCCESS) -> None:
        self.name = name
        self.rec = rec
        self.status = status

    def reserve(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        self.rec.calls.append((self.name, "reserve", node_name))
        return self.status

    def unreserve(self, state: CycleState, pod: api.Pod, node_name: str) -> None:
        self.rec.calls.append((self.name, "unreserve", node_name))


class FakePermit:
    def __init__(self, name: str, status: api.Status) -> None:
        self.name = name
        self.status = status

    def permit(self, state: CycleState, pod: api.Pod, node_name: str) -> tuple[api.Status, float]:
        return self.status, 0.0


class FakePostFilter:
    def __init__(
        self, name: str, rec: Recorder, status: api.Status, nominate: str | None = None
    ) -> None:
        self.name = name
        self.rec = rec
        self.status = status
        self.nominate = nominate

    def post_filter(
        self,
        state: CycleState,
        pod: api.Pod,
        snap: ClusterSnapshot,
        diagnosis: framework.Diagnosis,
        fw: framework.Framework,
    ) -> tuple[framework.PostFilterResult | None, api.Status]:
        rejected = [snap.names[i] for i in snap.all_nodes if diagnosis.node_status(i) is not None]
        self.rec.calls.append((self.name, "post_filter", sorted(rejected)))
        offer = None if self.nominate is None else framework.PostFilterResult(self.nominate)
        return offer, self.status


class NoDiagnosis:
    def node_status(self, node: int) -> api.Status | None:
        return None

    def preemption_may_help(self) -> Mask:
        return np.zeros(0, dtype=bool)


class Broken:
    """A Filter plugin that cannot do its work."""

    name = "Broken"

    def filter(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        raise framework.PluginError("backing store unreachable")

    def filter_node(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, node: int
    ) -> api.Status:
        raise framework.PluginError("backing store unreachable")


class FakeBinder:
    def __init__(self, name: str, rec: Recorder, status: api.Status) -> None:
        self.name = name
        self.rec = rec
        self.status = status

    def bind(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        self.rec.calls.append((self.name, "bind", node_name))
        return self.status


def _constant(plugin: object) -> framework.Factory:
    def factory(args: Any, handle: framework.Handle) -> object:
        return plugin

    return factory


def make(plugins: Mapping[str, object], points: dict[str, list[Any]]) -> framework.Framework:
    reg = dict(registry.in_tree_registry())
    for name, plugin in plugins.items():
        reg[name] = framework.PluginSpec(_constant(plugin))
    doc = {
        "apiVersion": config.API_VERSION,
        "kind": config.KIND,
        "profiles": [
            {
                "plugins": {
                    "multiPoint": {"disabled": [{"name": "*"}]},
                    "queueSort": {"enabled": [{"name": "PrioritySort"}]},
                    "bind": {"enabled": [{"name": "DefaultBinder"}]},
                    **{point: {"enabled": refs} for point, refs in points.items()},
                }
            }
        ],
    }
    profile = config.parse_configuration(doc, reg).profiles[0]
    return framework.Framework(profile, reg, framework.Handle())


SNAP_NODES = [b.node(n) for n in ("n1", "n2", "n3")]


def run(fw: framework.Framework, pod: api.Pod | None = None) -> scheduling.CycleResult:
    snap = b.snapshot(SNAP_NODES)
    sched = scheduling.Scheduler({fw.scheduler_name: fw}, snap)
    return sched.schedule_one(pod or b.pod())


def test_filters_run_in_order_and_a_node_stops_at_its_first_rejection() -> None:
    rec = Recorder()
    first = FakeFilter("First", rec, {"n1"}, api.Code.UNSCHEDULABLE)
    second = FakeFilter("Second", rec, {"n1", "n2"}, api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
    fw = make(
        {"First": first, "Second": second}, {"filter": [{"name": "First"}, {"name": "Second"}]}
    )
    result = run(fw)
    assert rec.calls == [
        ("First", "filter", ["n1", "n2", "n3"]),
        ("Second", "filter", ["n2", "n3"]),
    ]
    assert result.node == "n3"  # the only feasible node: taken without scoring
    assert result.node_status(0) == api.Status(api.Code.UNSCHEDULABLE, ("First says no",), "First")
    second_status = result.node_status(1)
    assert second_status is not None and second_status.plugin == "Second"


def test_all_rejected_gives_kube_scheduler_fit_error() -> None:
    rec = Recorder()
    fw = make(
        {"No": FakeFilter("No", rec, {"n1", "n2", "n3"}, api.Code.UNSCHEDULABLE)},
        {"filter": [{"name": "No"}]},
    )
    result = run(fw)
    assert result.node is None
    assert result.status.message == "0/3 nodes are available: 3 No says no."


def test_pre_filter_skip_skips_that_plugins_filter() -> None:
    rec = Recorder()
    both = FakeFilter("Both", rec, {"n1", "n2", "n3"}, api.Code.UNSCHEDULABLE)
    both.pre_filter = FakePreFilter("Both", None, api.SKIP).pre_filter  # type: ignore[attr-defined]
    fw = make({"Both": both}, {"preFilter": [{"name": "Both"}], "filter": [{"name": "Both"}]})
    result = run(fw)
    assert result.node is not None
    assert rec.calls == []


def test_pre_filter_rejection_applies_to_every_node() -> None:
    pre = FakePreFilter("Pre", None, api.unschedulable("nope", unresolvable=True))
    fw = make({"Pre": pre}, {"preFilter": [{"name": "Pre"}]})
    result = run(fw)
    assert result.node is None
    assert result.status.code is api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert result.status.message == "0/3 nodes are available: nope."
    assert result.node_status(2) == api.Status(
        api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("nope",), "Pre"
    )


def test_pre_filter_result_restricts_nodes_and_explains_the_rest() -> None:
    rec = Recorder()
    pre = FakePreFilter("Pre", PreFilterResult(frozenset({"n2", "ghost"})), api.SUCCESS)
    never = FakeFilter("Never", rec, {"n2"}, api.Code.UNSCHEDULABLE)
    fw = make(
        {"Pre": pre, "Never": never},
        {"preFilter": [{"name": "Pre"}], "filter": [{"name": "Never"}]},
    )
    result = run(fw)
    assert rec.calls == [("Never", "filter", ["n2"])]
    assert result.status.message == (
        "0/3 nodes are available: 1 Never says no, 2 node(s) didn't satisfy plugin(s) [Pre]."
    )


def test_disjoint_pre_filter_results_are_unresolvable() -> None:
    a = FakePreFilter("A", PreFilterResult(frozenset({"n1"})), api.SUCCESS)
    c = FakePreFilter("C", PreFilterResult(frozenset({"n2"})), api.SUCCESS)
    fw = make({"A": a, "C": c}, {"preFilter": [{"name": "A"}, {"name": "C"}]})
    result = run(fw)
    assert result.prefilter_status.reasons == (
        "node(s) didn't satisfy plugin(s) [A C] simultaneously",
    )


def test_scores_are_normalized_weighted_and_summed() -> None:
    low = FakeScore("Low", {"n1": 10, "n2": 40, "n3": 20})
    high = FakeScore("High", {"n1": 30, "n2": 0, "n3": 5}, normalize=True)
    fw = make(
        {"Low": low, "High": high},
        {"score": [{"name": "Low", "weight": 1}, {"name": "High", "weight": 2}]},
    )
    result = run(fw)
    assert result.scores is not None
    assert result.scored is not None
    names = (result.snapshot.names[i] for i in result.scored)
    by_node = dict(zip(names, result.scores.totals, strict=True))
    assert by_node == {"n1": 10 + 60 * 2, "n2": 40, "n3": 20 + 10 * 2}
    assert result.node == "n1"


def test_pre_score_skip_skips_score() -> None:
    skipped = FakeScore("Skipped", {"n1": 100}, pre=api.SKIP)
    other = FakeScore("Other", {"n3": 1})
    fw = make(
        {"Skipped": skipped, "Other": other},
        {"preScore": [{"name": "Skipped"}], "score": [{"name": "Skipped"}, {"name": "Other"}]},
    )
    result = run(fw)
    assert result.node == "n3"
    assert result.scores is not None
    assert [s.plugin for s in result.scores.plugins] == ["Other"]


def test_score_outside_range_is_an_error() -> None:
    fw = make({"Big": FakeScore("Big", {"n1": 101})}, {"score": [{"name": "Big"}]})
    result = run(fw)
    assert result.node is None
    assert result.status.code is api.Code.ERROR
    assert "invalid score 101" in result.status.message


class RaisingScore(FakeScore):
    def score(
        self, state: CycleState, pod: api.Pod, snap: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        raise RuntimeError("score bug")


class TestScoreRunFailsAtTheFirstFailingPlugin:
    """The score run checks and weighs all plugins' scores at once; what it reports must
    be what checking each plugin in turn reports: the first failing plugin's error, the
    totals and details of the plugins before it, an exception counted only if it was
    the first failure."""

    @staticmethod
    def _scores(fw: framework.Framework) -> framework.ScoreOutcome:
        snap = b.snapshot(SNAP_NODES)
        state = CycleState()
        return fw.run_score(state, b.pod(), snap, snap.all_nodes)

    @staticmethod
    def _make(*plugins: FakeScore) -> framework.Framework:
        return make(
            {p.name: p for p in plugins},
            {"score": [{"name": p.name, "weight": i + 1} for i, p in enumerate(plugins)]},
        )

    @pytest.mark.parametrize("bad", [101, -1])
    def test_out_of_range_before_a_raising_plugin(self, bad: int) -> None:
        fine = FakeScore("Fine", {"n1": 7})
        fw = self._make(fine, FakeScore("Bad", {"n2": bad}), RaisingScore("Raises", {}))
        outcome = self._scores(fw)
        assert outcome.status.code is api.Code.ERROR
        assert f"plugin 'Bad' returns an invalid score {bad}" in outcome.status.message
        assert [s.plugin for s in outcome.plugins] == ["Fine"]
        assert (
            outcome.totals.tolist()
            == fine.score(
                CycleState(), b.pod(), b.snapshot(SNAP_NODES), np.arange(len(SNAP_NODES))
            ).tolist()
        )
        assert not fw.handle.failures.counts

    def test_raising_before_an_out_of_range_plugin(self) -> None:
        fine = FakeScore("Fine", {"n1": 7}, normalize=True)
        fw = self._make(fine, RaisingScore("Raises", {}), FakeScore("Bad", {"n2": 101}))
        outcome = self._scores(fw)
        assert outcome.status.code is api.Code.ERROR
        assert "score bug" in outcome.status.message
        assert [s.plugin for s in outcome.plugins] == ["Fine"]
        assert sorted(outcome.totals.tolist()) == [0, 0, 14]
        assert fw.handle.failures.counts == {("Raises", "Score"): 1}

    def test_details_are_each_stage_of_each_plugin(self) -> None:
        low = FakeScore("Low", {"n1": 10, "n2": 40})
        high = FakeScore("High", {"n3": 30}, normalize=True)
        outcome = self._scores(self._make(low, high))
        assert outcome.status.is_success
        (first, second) = outcome.plugins
        assert (first.plugin, first.raw.tolist(), first.weighted.tolist()) == (
            "Low",
            [10, 40, 0],
            [10, 40, 0],
        )
        assert (second.raw.tolist(), second.normalized.tolist(), second.weighted.tolist()) == (
            [0, 0, 30],
            [0, 0, 60],
            [0, 0, 120],
        )
        assert outcome.totals.tolist() == [10, 40, 120]


def test_permit_rejection_unreserves_in_reverse_and_forgets_the_pod() -> None:
    rec = Recorder()
    r1, r2 = FakeReserve("R1", rec), FakeReserve("R2", rec)
    deny = FakePermit("Deny", api.unschedulable("denied"))
    fw = make(
        {"R1": r1, "R2": r2, "Deny": deny},
        {"reserve": [{"name": "R1"}, {"name": "R2"}], "permit": [{"name": "Deny"}]},
    )
    snap = b.snapshot(SNAP_NODES)
    sched = scheduling.Scheduler({fw.scheduler_name: fw}, snap)
    result = sched.schedule_one(b.pod(requests={"cpu": "1"}))
    assert result.node is None
    assert result.status.reasons == ("denied",)
    chosen = rec.calls[0][2]
    assert rec.calls == [
        ("R1", "reserve", chosen),
        ("R2", "reserve", chosen),
        ("R2", "unreserve", chosen),
        ("R1", "unreserve", chosen),
    ]
    assert int(snap.requested[0].sum()) == 0 and int(snap.pod_count.sum()) == 0


def test_bind_plugins_run_until_one_does_not_skip() -> None:
    rec = Recorder()
    skip = FakeBinder("Skipper", rec, api.SKIP)
    bind = FakeBinder("Binder", rec, api.SUCCESS)
    reg_plugins = {"Skipper": skip, "Binder": bind}
    fw = make(reg_plugins, {"bind": [{"name": "Skipper"}, {"name": "Binder"}]})
    assert [p.name for p in fw.bind] == ["Skipper", "Binder"]
    result = run(fw)
    assert [c[0] for c in rec.calls] == ["Skipper", "Binder"]
    assert result.node is not None


def test_gated_pods_are_not_attempted() -> None:
    fw = b.default_framework()
    result = run(fw, b.pod(schedulingGates=[{"name": "a"}, {"name": "b"}]))
    assert result.gated
    assert result.status.reasons == ("waiting for scheduling gates: [a b]",)


def test_a_profile_needs_a_binder() -> None:
    reg = registry.in_tree_registry()
    doc = {
        "apiVersion": config.API_VERSION,
        "kind": config.KIND,
        "profiles": [{"plugins": {"multiPoint": {"disabled": [{"name": "DefaultBinder"}]}}}],
    }
    with pytest.raises(ConfigError, match="at least one bind plugin"):
        framework.Framework(config.parse_configuration(doc, reg).profiles[0], reg)


def test_a_plugin_error_fails_the_cycle_not_the_plan() -> None:
    fw = make({"Broken": Broken()}, {"filter": [{"name": "Broken"}]})
    result = run(fw)
    assert result.node is None
    assert result.status == api.error("backing store unreachable")


def post_filter_run(*plugins: FakePostFilter) -> scheduling.CycleResult:
    rec = plugins[0].rec
    no = FakeFilter("No", rec, {"n1", "n2", "n3"}, api.Code.UNSCHEDULABLE)
    fw = make(
        {"No": no, **{p.name: p for p in plugins}},
        {"filter": [{"name": "No"}], "postFilter": [{"name": p.name} for p in plugins]},
    )
    return run(fw)


def test_post_filter_runs_without_feasible_nodes_and_collects_rejections() -> None:
    rec = Recorder()
    first = FakePostFilter("P1", rec, api.unschedulable("p1 found nothing"))
    second = FakePostFilter("P2", rec, api.unschedulable("p2 neither"), nominate="n2")
    result = post_filter_run(first, second)
    assert [c[:2] for c in rec.calls] == [
        ("No", "filter"),
        ("P1", "post_filter"),
        ("P2", "post_filter"),
    ]
    assert rec.calls[1][2] == ["n1", "n2", "n3"]  # every rejected node's status is handed over
    assert result.nominated_node == "n2"
    assert result.status.message == (
        "0/3 nodes are available: 3 No says no. p1 found nothing, p2 neither"
    )


def test_post_filter_does_not_run_when_a_node_fits() -> None:
    rec = Recorder()
    fw = make(
        {"P1": FakePostFilter("P1", rec, api.unschedulable("p1"))},
        {"postFilter": [{"name": "P1"}]},
    )
    assert run(fw).node is not None
    assert rec.calls == []


@pytest.mark.parametrize(
    ("first", "code"),
    [
        pytest.param(
            api.unschedulable("never", unresolvable=True),
            api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            id="unresolvable",
        ),
        pytest.param(api.error("boom"), api.Code.ERROR, id="error"),
        pytest.param(api.SUCCESS, api.Code.SUCCESS, id="success"),
    ],
)
def test_post_filter_stops_at_success_unresolvable_or_error(
    first: api.Status, code: api.Code
) -> None:
    rec = Recorder()
    fw = make(
        {
            "P1": FakePostFilter("P1", rec, first, nominate="n1"),
            "P2": FakePostFilter("P2", rec, api.unschedulable("p2")),
        },
        {"postFilter": [{"name": "P1"}, {"name": "P2"}]},
    )
    snap = b.snapshot(SNAP_NODES)
    offer, status = fw.run_post_filter(CycleState(), b.pod(), snap, NoDiagnosis())
    assert [c[0] for c in rec.calls] == ["P1"]
    assert status.code is code
    nominated = None if offer is None else offer.nominated_node
    assert nominated == (None if code is api.Code.ERROR else "n1")
