"""Isolation of failure (issue 19): an exception escaping one plugin on one pod fails
that pod's cycle with an Error status naming the plugin and the pod, is logged and
counted, and every other pod of the plan is placed as if nothing happened."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from nodeagent.scheduler import api, config, framework, objects, planner, registry, scheduling
from nodeagent.scheduler.framework import CycleState, PreFilterResult
from nodeagent.scheduler.live import settings as live_settings
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices
from tests.fakeapi.fixtures import fake_api
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler import builders as b
from tests.scheduler.live import harness as h
from tests.waiting import eventually

__all__ = ["fake_api"]

POINTS = ("PreEnqueue", "PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit", "PostBind")


class Faulty:
    """Every extension point; raises a ZeroDivisionError at ``point`` for pod ``bad``."""

    name = "Faulty"

    def __init__(self, point: str) -> None:
        self.point = point

    def _maybe_fail(self, point: str, pod: api.Pod) -> None:
        if point == self.point and pod.name == "bad":
            _ = 1 // 0

    def pre_enqueue(self, pod: api.Pod) -> api.Status:
        self._maybe_fail("PreEnqueue", pod)
        return api.SUCCESS

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


def test_a_raising_post_filter_leaves_the_pod_unschedulable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kube-scheduler keeps the FitError when PostFilter fails (and logs the error):
    the pod is Unschedulable, the log and the metric name the plugin."""

    class FaultyPostFilter:
        name = "Faulty"

        def post_filter(self, *args: Any) -> Any:
            raise KeyError("victims")

    pods = [b.pod_dict("bad", requests={"cpu": "64"}), b.pod_dict("good")]
    plan, handle = plan_with(FaultyPostFilter(), *pods)
    by_pod = {p.pod: p for p in plan.placements}
    assert by_pod["default/good"].status is planner.Outcome.SCHEDULED
    bad = by_pod["default/bad"]
    assert bad.status is planner.Outcome.UNSCHEDULABLE
    assert "Insufficient cpu" in bad.message
    assert handle.failures.counts == {("Faulty", "PostFilter"): 1}
    assert any("'Faulty' on pod default/bad: KeyError" in r.getMessage() for r in caplog.records)


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


def test_the_live_cycle_fails_only_the_pod_a_plugin_raised_on(
    fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    """Live: the pod whose Filter raised gets the error path (a SchedulerError condition,
    a FailedScheduling event naming the plugin, a retry after backoff); the other pod
    is bound; the metric counts each failure."""
    plugins = dict(registry.in_tree_registry())
    plugins["Faulty"] = framework.PluginSpec(lambda args, handle: Faulty("Filter"))
    document = {
        "apiVersion": config.API_VERSION,
        "kind": config.KIND,
        "profiles": [
            {
                "schedulerName": h.PROFILE,
                "plugins": {"multiPoint": {"enabled": [{"name": "Faulty"}]}},
            }
        ],
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(document))
    live = dataclasses.replace(
        h.settings(initial_backoff=0.05, max_backoff=0.1),
        configuration=live_settings.load(path, plugins).configuration,
    )
    fake_api.cluster.create("nodes", h.node("n1"))
    fake_api.cluster.create("pods", h.pod("bad"))
    fake_api.cluster.create("pods", h.pod("good"))
    scheduler = h.start(fake_api, live=live, plugins=plugins)
    labels = {"plugin": "Faulty", "extension_point": "Filter"}
    try:
        eventually(lambda: h.node_of(fake_api, "good") == "n1", what="good bound")
        found = eventually(lambda: h.condition(fake_api, "bad"), what="bad's condition")
        assert found["reason"] == "SchedulerError" and "'Faulty'" in found["message"]
        events = eventually(lambda: h.events_for(fake_api, "bad", "FailedScheduling"))
        assert "default/bad" in events[0]["message"]
        metrics = scheduler.metrics.registry

        def failures() -> float:
            found = metrics.get_sample_value("nodeagent_scheduler_plugin_errors_total", labels)
            return found or 0.0

        eventually(lambda: failures() >= 2, what="retried after backoff")
    finally:
        scheduler.stop(bind_timeout=2)
    assert not h.node_of(fake_api, "bad")
