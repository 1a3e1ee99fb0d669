"""Isolation of failure (issue 19): an exception escaping one plugin on one pod fails
that pod's cycle with an Error status naming the plugin and the pod, is logged and
counted, and every other pod of the plan is placed as if nothing happened."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from nodeagent.scheduler import api, config, framework, objects, planner, registry, scheduling
from nodeagent.scheduler.framework import CycleState, PreFilterResult
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices
from tests.scheduler import builders as b

POINTS = ("PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit", "PostBind")


class Faulty:
    """Every extension point; raises a ZeroDivisionError at ``point`` for pod ``bad``."""

    name = "Faulty"

    def __init__(self, point: str) -> None:
        self.point = point

    def _maybe_fail(self, point: str, pod: api.Pod) -> None:
        if point == self.point and pod.name == "bad":
            _ = 1 // 0

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        self._maybe_fail("PreFilter", pod)
        return None, api.SUCCESS

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        self._maybe_fail("Filter", pod)
        return np.ones(len(nodes), dtype=bool)

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        self._maybe_fail("Filter", pod)
        return api.SUCCESS

    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        self._maybe_fail("PreScore", pod)
        return api.SUCCESS

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        self._maybe_fail("Score", pod)
        return np.zeros(len(nodes), dtype=np.int64)

    def reserve(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        self._maybe_fail("Reserve", pod)
        return api.SUCCESS

    def unreserve(self, state: CycleState, pod: api.Pod, node_name: str) -> None:
        return None

    def permit(self, state: CycleState, pod: api.Pod, node_name: str) -> tuple[api.Status, float]:
        self._maybe_fail("Permit", pod)
        return api.SUCCESS, 0.0

    def post_bind(self, state: CycleState, pod: api.Pod, node_name: str) -> None:
        self._maybe_fail("PostBind", pod)


def plan_with(plugin: object, *pods: dict[str, Any]) -> tuple[planner.Plan, framework.Handle]:
    plugins = dict(registry.in_tree_registry())
    plugins["Faulty"] = framework.PluginSpec(lambda args, handle: plugin)
    document = {"profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "Faulty"}]}}}]}
    configuration = config.parse_configuration(document, plugins)
    cluster = objects.read_cluster([b.node_dict("n1"), b.node_dict("n2"), *pods])
    handle = framework.Handle(now=0.0)
    frameworks = framework.build_frameworks(configuration, plugins, handle)
    snapshot = ClusterSnapshot(cluster.nodes, cluster.bound_pods())
    scheduler = scheduling.Scheduler(frameworks, snapshot)
    placements = []
    for pod in cluster.pods:
        placements.append(planner._placement(scheduler.schedule_one(pod), True))
    return planner.Plan(tuple(placements)), handle


@pytest.mark.parametrize("point", POINTS)
def test_an_exception_in_one_plugin_fails_only_that_pod(
    point: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="nodeagent.scheduler.framework")
    plan, handle = plan_with(
        Faulty(point), b.pod_dict("before"), b.pod_dict("bad"), b.pod_dict("after")
    )
    by_pod = {p.pod: p for p in plan.placements}
    assert by_pod["default/before"].status is planner.Outcome.SCHEDULED
    assert by_pod["default/after"].status is planner.Outcome.SCHEDULED
    bad = by_pod["default/bad"]
    if point == "PostBind":  # informational: the pod is bound whatever it does
        assert bad.status is planner.Outcome.SCHEDULED
    else:
        assert bad.status is planner.Outcome.ERROR
        assert bad.node is None
        assert "'Faulty'" in bad.message and "default/bad" in bad.message
        assert "ZeroDivisionError" in bad.message
        assert bad.to_dict()["status"] == "Error"
    assert handle.failures.counts == {("Faulty", point): 1}
    logged = [r.getMessage() for r in caplog.records]
    assert any("'Faulty'" in m and "default/bad" in m for m in logged)


def test_a_failing_pod_leaves_the_snapshot_as_it_was() -> None:
    """The bad pod, failing at Permit after its assume, is forgotten: the two good pods
    still get the room (one 3-CPU pod per 4-CPU node)."""
    pods = [b.pod_dict(n, requests={"cpu": "3"}) for n in ("bad", "a", "c")]
    plan, _ = plan_with(Faulty("Permit"), *pods)
    placed = [str(p.node) for p in plan.placements if p.status is planner.Outcome.SCHEDULED]
    assert sorted(placed) == ["n1", "n2"]


def test_plugin_errors_are_a_prometheus_counter() -> None:
    _, handle = plan_with(Faulty("Score"), b.pod_dict("bad"))
    metrics = CollectorRegistry()
    metrics.register(handle.failures)
    labels = {"plugin": "Faulty", "extension_point": "Score"}
    assert metrics.get_sample_value("nodeagent_scheduler_plugin_errors_total", labels) == 1.0


def test_an_internal_error_outside_the_plugins_fails_one_placement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever breaks in a cycle, the plan goes on with the next pod."""
    original = scheduling.Scheduler.schedule_one

    def breaking(self: scheduling.Scheduler, pod: api.Pod) -> Any:
        if pod.name == "bad":
            raise RuntimeError("snapshot out of step")
        return original(self, pod)

    monkeypatch.setattr(scheduling.Scheduler, "schedule_one", breaking)
    cluster = objects.read_cluster([b.node_dict("n1"), b.pod_dict("bad"), b.pod_dict("good")])
    plugins = registry.in_tree_registry()
    configuration = config.parse_configuration(None, plugins)
    plan = planner.plan(cluster, configuration, plugins=plugins, seed=1, now=0.0)
    statuses = {p.pod: (p.status, p.message) for p in plan.placements}
    assert statuses["default/good"][0] is planner.Outcome.SCHEDULED
    assert statuses["default/bad"][0] is planner.Outcome.ERROR
    assert "snapshot out of step" in statuses["default/bad"][1]
