"""The fuzz's generated clusters through the live scheduler (in-process, against the fake
API server over HTTP) and the extender's handlers: each pending pod gets an answer, none
is bound twice or beyond what its node can hold, and an object the API server would
have refused is skipped with one warning naming it, never a crash."""

from __future__ import annotations

import copy
import json
import logging
import random
from typing import Any

import pytest

from nodeagent.base.errors import NotFound
from nodeagent.extender import server as extender_server
from nodeagent.extender.nodeview import NodeView
from nodeagent.k8s.pressure import Taint
from nodeagent.scheduler import api, objects
from nodeagent.scheduler.extenders import wire
from nodeagent.scheduler.plugins import node_pressure
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler.fuzz import strategies
from tests.scheduler.live import harness as h
from tests.waiting import eventually

SEEDS = range(4)
SHAPES = range(len(strategies.INVALID_POD_MUTATIONS))
"""One live cluster per invalid shape (the seed picks the shape)."""


KINDS = {
    "Node": "nodes",
    "Pod": "pods",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "ResourceClaim": "resourceclaims",
    "DeviceClass": "deviceclasses",
    "ResourceSlice": "resourceslices",
}
"""The kinds of a generated cluster the live scheduler reads (storage aside)."""


def live_cluster(seed: int) -> tuple[list[dict[str, Any]], str]:
    """A generated cluster for the live profile, with one pending pod made invalid."""
    rng = random.Random(f"live-{seed}")
    objs = strategies.random_cluster(rng)
    pending = [o for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName")]
    for obj in pending:
        obj["spec"]["schedulerName"] = h.PROFILE
    bad = copy.deepcopy(pending[0])
    bad["metadata"]["name"] = "invalid"
    bad["metadata"]["uid"] = "uid-invalid"
    mutation = sorted(strategies.INVALID_POD_MUTATIONS)[
        seed % len(strategies.INVALID_POD_MUTATIONS)
    ]
    strategies.INVALID_POD_MUTATIONS[mutation][1](bad)
    return [*objs, bad], f"{bad['metadata']['namespace']}/invalid"


def _requests(obj: dict[str, Any]) -> dict[str, int]:
    return dict(objects.parse_pod(obj).requests)


@pytest.mark.parametrize("seed", SHAPES)
def test_the_live_scheduler_answers_every_generated_pod(
    seed: int, fake_api: FakeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    objs, invalid = live_cluster(seed)
    cluster = fake_api.cluster
    for obj in objs:
        if obj["kind"] in KINDS:
            cluster.create(KINDS[obj["kind"]], obj, obj["metadata"].get("namespace", ""))
    claims = {
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in objs
        if o["kind"] == "ResourceClaim"
    }
    valid = [
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in objs
        if o["kind"] == "Pod"
        and not o["spec"].get("nodeName")
        and o["metadata"]["name"] != "invalid"
        # a pod waiting for a claim that does not exist is held back at PreEnqueue, with
        # no answer (as by kube-scheduler) until the claim appears
        and all(
            (o["metadata"]["namespace"], c["resourceClaimName"]) in claims
            for c in o["spec"].get("resourceClaims") or ()
        )
    ]

    def answered(namespace: str, name: str) -> bool:
        try:
            pod = cluster.get("pods", namespace, name)
        except NotFound:  # a lower-priority pending pod may be preempted (deleted)
            return True
        conditions = (pod.get("status") or {}).get("conditions") or ()
        return bool(pod["spec"].get("nodeName")) or any(
            c.get("type") == "PodScheduled" for c in conditions
        )

    scheduler = h.start(fake_api)
    try:
        eventually(lambda: all(answered(ns, n) for ns, n in valid), what="every pod answered")
    finally:
        scheduler.stop(bind_timeout=2)

    bound = [(ns, pod) for ns, pod, _ in cluster.bindings]
    assert len(bound) == len(set(bound)), f"a pod bound twice: {cluster.bindings}"
    namespace, name = invalid.split("/")
    untouched = cluster.get("pods", namespace, name)
    assert not untouched["spec"].get("nodeName") and not (untouched.get("status") or {}).get(
        "conditions"
    )
    warnings = [r.getMessage() for r in caplog.records if f"Pod {invalid}" in r.getMessage()]
    assert len(warnings) == 1, f"one warning naming the invalid pod: {warnings}"

    initial: dict[str, dict[str, int]] = {}
    final: dict[str, dict[str, int]] = {}
    for obj in objs:
        if obj["kind"] != "Pod" or obj["metadata"]["name"] == "invalid":
            continue
        try:
            listed = cluster.get("pods", obj["metadata"]["namespace"], obj["metadata"]["name"])
        except NotFound:  # a preemption victim
            listed = {"spec": {}}
        for totals, node_name in (
            (initial, obj["spec"].get("nodeName")),
            (final, listed["spec"].get("nodeName")),
        ):
            if node_name:
                used = totals.setdefault(node_name, {})
                for resource, amount in _requests(obj).items():
                    used[resource] = used.get(resource, 0) + amount
    for node in (objects.parse_node(o) for o in objs if o["kind"] == "Node"):
        for resource, amount in final.get(node.name, {}).items():
            before = initial.get(node.name, {}).get(resource, 0)
            limit = max(node.allocatable.get(resource, 0), before)
            assert amount <= limit, f"{node.name}: {resource} {amount} > {limit}"


@pytest.mark.parametrize("seed", SEEDS)
def test_the_extender_judges_generated_nodes_one_by_one(
    seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    """/filter and /prioritize over generated nodes and pods answer for every node; a
    node whose judging raises passes unjudged, named in the log, the others judged."""
    objs = strategies.random_cluster(random.Random(f"extender-{seed}"))
    nodes = [o for o in objs if o["kind"] == "Node"]
    pod = next(o for o in objs if o["kind"] == "Pod" and not o["spec"].get("nodeName"))
    for i, node in enumerate(nodes):  # some nodes under the agent's pressure
        if i % 2:
            node["spec"].setdefault("taints", []).append(
                {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}
            )
    judge = extender_server.PressureJudge(node_pressure.Args())
    service = extender_server.ExtenderService(
        NodeView(), judge, extender_server.ExtenderMetrics(NodeView())
    )
    body = json.dumps({"Pod": pod, "Nodes": {"items": nodes}}).encode()
    answer = json.loads(service.filter(wire.read_filter_args(body)))
    kept = {n["metadata"]["name"] for n in answer["Nodes"]["items"]}
    failed = set(answer.get("FailedAndUnresolvableNodes") or {})
    assert kept | failed == {n["metadata"]["name"] for n in nodes} and not kept & failed
    scores = json.loads(service.prioritize(wire.read_prioritize_args(body)))
    assert [s["Host"] for s in scores] == [n["metadata"]["name"] for n in nodes]

    broken = nodes[-1]["metadata"]["name"]
    original = judge.rejection

    def rejection(taints: tuple[Taint, ...], tolerations: tuple[api.Toleration, ...]) -> Any:
        if any(t.key == "example.com/broken" for t in taints):
            raise RuntimeError("judging bug")
        return original(taints, tolerations)

    nodes[-1]["spec"].setdefault("taints", []).append(
        {"key": "example.com/broken", "effect": "NoSchedule"}
    )
    judge.rejection = rejection  # type: ignore[method-assign]
    caplog.set_level(logging.ERROR)
    body = json.dumps({"Pod": pod, "Nodes": {"items": nodes}}).encode()
    answer = json.loads(service.filter(wire.read_filter_args(body)))
    assert broken in {n["metadata"]["name"] for n in answer["Nodes"]["items"]}
    assert any(broken in r.getMessage() for r in caplog.records)

    original_score = judge.score

    def score(node: api.Node, now: float) -> int:
        if node.name == broken:
            raise RuntimeError("scoring bug")
        return original_score(node, now)

    judge.score = score  # type: ignore[method-assign]
    scores = json.loads(service.prioritize(wire.read_prioritize_args(body)))
    by_host = {s["Host"]: s["Score"] for s in scores}
    assert set(by_host) == {n["metadata"]["name"] for n in nodes}
    assert by_host[broken] == extender_server.extender_score(judge.neutral)
    assert any(broken in r.getMessage() and "scoring" in r.getMessage() for r in caplog.records)
