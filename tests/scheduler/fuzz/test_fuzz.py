"""The bounded differential fuzz CI runs (issue 19); ``python -m
benchmarks.fuzz_scheduler --examples 100000`` runs the same checks for long."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from nodeagent import cli
from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import objects, planner
from tests.scheduler import builders
from tests.scheduler import dra_builders as dra
from tests.scheduler.fuzz import checks, strategies

CI = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


@CI
@given(strategies.cluster())
def test_the_product_agrees_with_the_oracle(objs: list[dict[str, Any]]) -> None:
    checks.differential(objs)


@CI
@given(strategies.cluster())
def test_the_plan_keeps_its_invariants(objs: list[dict[str, Any]]) -> None:
    checks.plan_invariants(objs)


def test_the_oracle_sees_a_claim_postfilter_deallocated_for_a_later_pod() -> None:
    """An idle claim allocated on a tainted node blocks ``first`` (the other node's
    Filter finds it not available there); PostFilter deallocates it, and ``second``,
    sharing the claim, gets it allocated anew on the other node: the invariants must
    judge ``second`` with the claim as its cycle found it, not as it was before the
    plan (benchmarks.fuzz_scheduler's examples 897, 7075, 7225 and 8179, seed 1)."""
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    claim = {"name": "r", "resourceClaimName": "my-pod-my-resource"}
    model = {"model": {"string": "a"}}  # the oracle knows the fuzz's devices by model
    objs = [
        builders.node_dict("tainted", taints=[taint]),
        builders.node_dict("other"),
        dra.device_class(),
        dra.node_slice("tainted", attributes=model),
        dra.node_slice("other", attributes=model),
        dra.claim_dict(owner=None, allocated=[("tainted", "instance-0")], node="tainted"),
        builders.pod_dict("first", priority=100, resourceClaims=[claim]),
        builders.pod_dict("second", priority=0, resourceClaims=[claim]),
    ]
    plan = checks.plan_invariants(objs)
    assert [(p.pod, p.status, p.node) for p in plan.placements] == [
        ("default/first", planner.Outcome.UNSCHEDULABLE, None),
        ("default/second", planner.Outcome.SCHEDULED, "other"),
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.invalid_cluster())
def test_invalid_objects_are_refused_naming_object_and_field(
    case: tuple[list[dict[str, Any]], str, str],
) -> None:
    objs, what, path = case
    with pytest.raises(ConfigError) as caught:
        objects.read_cluster(objs)
    assert what in str(caught.value) and path in str(caught.value)


@pytest.mark.parametrize("mutation", sorted(strategies.INVALID_POD_MUTATIONS))
def test_schedule_exits_2_for_each_invalid_shape(
    mutation: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, mutate = strategies.INVALID_POD_MUTATIONS[mutation]
    pod: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    mutate(pod)
    node = {"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"pods": "1"}}}
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"kind": "List", "items": [node, pod]}))
    assert cli.main(["schedule", "--cluster", str(cluster)]) == 2
    err = capsys.readouterr().err
    assert "Pod default/web-1" in err and path in err
