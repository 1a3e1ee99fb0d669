"""NodePressure: filtering on pressure taints, scoring by published headroom, and how
it degrades (stale or unreadable annotation, conditions only, nothing at all)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.k8s.pressure import (
    DEFAULT_TAINT_KEYS,
    KUBELET_TAINT_KEYS,
    PRESSURE_ANNOTATION,
    Taint,
)
from nodeagent.scheduler import api
from nodeagent.scheduler.framework import CycleState, Handle
from nodeagent.scheduler.plugins import node_pressure
from tests.scheduler import builders as b

NOW = 1_714_557_600.0  # 2024-05-01T10:00:00Z
GI = 1024**3


def annotation(
    *signals: tuple[int, int, int], time: str | None = "2024-05-01T10:00:00Z"
) -> dict[str, str]:
    document: dict[str, Any] = {
        "signals": {
            f"s{i}": {"available": a, "capacity": c, "threshold": t}
            for i, (a, c, t) in enumerate(signals)
        }
    }
    if time is not None:
        document["time"] = time
    return {PRESSURE_ANNOTATION: json.dumps(document)}


def plugin(**args: Any) -> node_pressure.NodePressure:
    return node_pressure.new(node_pressure.Args.model_validate(args), Handle(now=NOW + 30))


@pytest.mark.parametrize(
    ("taints", "tolerations", "reason"),
    [
        pytest.param(
            [("nodeagent.io/memory-pressure", "NoSchedule")],
            [],
            "node(s) had memory pressure",
            id="agent-memory",
        ),
        pytest.param(
            [("nodeagent.io/pid-pressure", "NoExecute")],
            [],
            "node(s) had pid pressure",
            id="agent-pid-noexecute",
        ),
        pytest.param(
            [("node.kubernetes.io/disk-pressure", "NoSchedule")],
            [],
            "node(s) had disk pressure",
            id="kubelet-disk",
        ),
        pytest.param(
            [("nodeagent.io/memory-pressure", "PreferNoSchedule")],
            [],
            None,
            id="soft-taint-not-filtered",
        ),
        pytest.param(
            [("dedicated", "NoSchedule")], [], None, id="other-taints-left-to-TaintToleration"
        ),
        pytest.param(
            [("nodeagent.io/memory-pressure", "NoSchedule")],
            [{"key": "nodeagent.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}],
            None,
            id="tolerated",
        ),
    ],
)
def test_filter(
    taints: list[tuple[str, str]], tolerations: list[dict[str, str]], reason: str | None
) -> None:
    snap = b.snapshot([b.node("n1", taints=[{"key": k, "effect": e} for k, e in taints])])
    pod = b.pod(tolerations=tolerations)
    p = plugin()
    state = CycleState()
    status = p.filter_node(state, pod, snap, 0)
    assert bool(p.filter(state, pod, snap, snap.all_nodes)[0]) == status.is_success
    if reason is None:
        assert status.is_success
    else:
        assert status == api.unschedulable(reason, unresolvable=True)


TAINT_KEYS = [*DEFAULT_TAINT_KEYS.values(), *KUBELET_TAINT_KEYS.values()]
TAINTS = st.builds(
    Taint,
    st.sampled_from([*TAINT_KEYS, "dedicated", "ToBeDeletedByClusterAutoscaler"]),
    st.sampled_from(list(api.TaintEffect)),
    st.sampled_from(["", "1", "x"]),
)
TOLERATIONS = st.builds(
    api.Toleration,
    key=st.sampled_from(["", *TAINT_KEYS, "dedicated"]),
    operator=st.sampled_from(["Exists", "Equal"]),
    value=st.sampled_from(["", "1"]),
    effect=st.sampled_from(["", *api.TaintEffect]),
)


@given(st.lists(TAINTS, max_size=6).map(tuple), st.lists(TOLERATIONS, max_size=3).map(tuple))
def test_the_filtered_taints_decide_as_all_taints_do(
    taints: tuple[Taint, ...], tolerations: tuple[api.Toleration, ...]
) -> None:
    p = plugin()
    filtered = p.filtered_taints(taints)
    assert set(filtered) <= set(taints)
    assert p.first_pressure(filtered, tolerations) == p.first_pressure(taints, tolerations)
    assert p.filtered_taints(filtered) == filtered


@pytest.mark.parametrize(
    ("available", "threshold", "expected"),
    [
        pytest.param(50, 10, 100, id="40pct-headroom-full"),
        pytest.param(30, 10, 100, id="exactly-full-score-headroom"),
        pytest.param(20, 10, 50, id="10pct-half"),
        pytest.param(18, 10, 40, id="8pct"),
        pytest.param(10, 10, 0, id="at-threshold"),
        pytest.param(5, 10, 0, id="below-threshold"),
    ],
)
def test_signal_score(available: int, threshold: int, expected: int) -> None:
    assert node_pressure.signal_score(available * GI, 100 * GI, threshold * GI, 20) == expected


@pytest.mark.parametrize(
    ("node_kwargs", "expected", "note"),
    [
        pytest.param(
            {"annotations": annotation((50, 100, 10), (18, 100, 10))},
            40,
            "headroom",
            id="lowest-signal-wins",
        ),
        pytest.param(
            {"annotations": annotation((50, 100, 10), (0, 0, 0))},
            100,
            "headroom",
            id="zero-capacity-ignored",
        ),
        pytest.param({}, 50, "no pressure annotation", id="no-annotation-neutral"),
        pytest.param(
            {"annotations": annotation((50, 100, 10), time="2024-05-01T09:00:00Z")},
            50,
            "stale",
            id="stale-neutral",
        ),
        pytest.param(
            {"annotations": annotation((50, 100, 10), time=None)},
            50,
            "no valid time",
            id="no-time-neutral",
        ),
        pytest.param(
            {"annotations": {PRESSURE_ANNOTATION: "{oops"}},
            50,
            "not JSON",
            id="bad-json-neutral",
        ),
        pytest.param(
            {"annotations": {PRESSURE_ANNOTATION: '{"signals": []}'}},
            50,
            "no signals",
            id="bad-shape",
        ),
        pytest.param(
            {
                "annotations": annotation((50, 100, 10)),
                "conditions": {"NodeAgentMemoryPressure": "True"},
            },
            0,
            "condition",
            id="agent-condition-zero",
        ),
        pytest.param(
            {"conditions": {"DiskPressure": "True"}}, 0, "condition", id="stock-kubelet-condition"
        ),
        pytest.param(
            {"conditions": {"MemoryPressure": "False"}},
            50,
            "no pressure annotation",
            id="stock-healthy",
        ),
    ],
)
def test_node_score(node_kwargs: dict[str, Any], expected: int, note: str) -> None:
    score, why = plugin().node_score(b.node("n1", **node_kwargs))
    assert score == expected
    assert note in why


def test_args_change_neutral_staleness_and_saturation() -> None:
    stale = b.node("n1", annotations=annotation((20, 100, 10), time="2020-01-01T00:00:00Z"))
    assert plugin(staleAfterSeconds=0).node_score(stale)[0] == 50  # never stale: 10% of 20%
    assert plugin(staleAfterSeconds=0, fullScoreHeadroomPercent=10).node_score(stale)[0] == 100
    assert plugin(neutralScore=70).node_score(b.node("n2"))[0] == 70
    custom = plugin(taintKeys={"memory": ["example.com/oom-risk"]})
    snap = b.snapshot(
        [b.node("n1", taints=[{"key": "example.com/oom-risk", "effect": "NoSchedule"}])]
    )
    assert custom.filter_node(CycleState(), b.pod(), snap, 0).reasons == (
        "node(s) had memory pressure",
    )


def test_score_is_per_node_and_absolute() -> None:
    snap = b.snapshot(
        [
            b.node("calm", annotations=annotation((60, 100, 10))),
            b.node("warm", annotations=annotation((14, 100, 10))),
            b.node("unknown"),
        ]
    )
    p = plugin()
    assert p.score(CycleState(), b.pod(), snap, snap.all_nodes).tolist() == [100, 20, 50]
    assert not hasattr(p, "normalize_score")
