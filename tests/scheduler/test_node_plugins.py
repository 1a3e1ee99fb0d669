"""TaintToleration, NodeAffinity, NodeUnschedulable, NodeName, NodePorts, PrioritySort,
SchedulingGates: table-driven from kube-scheduler's plugins of those names."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.base.errors import ConfigError
from nodeagent.k8s.pressure import Taint
from nodeagent.scheduler import api, config
from nodeagent.scheduler.framework import CycleState, Handle, PreFilterResult, QueuedPod
from nodeagent.scheduler.plugins import (
    node_affinity,
    node_name,
    node_ports,
    node_unschedulable,
    priority_sort,
    scheduling_gates,
    taint_toleration,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot
from tests.scheduler import builders as b

T = Taint
Tol = api.Toleration


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        pytest.param(
            Tol("k", "Equal", "v", "NoSchedule"), T("k", "NoSchedule", "v"), True, id="equal"
        ),
        pytest.param(
            Tol("k", "", "v", "NoSchedule"), T("k", "NoSchedule", "v"), True, id="empty-op-is-equal"
        ),
        pytest.param(
            Tol("k", "Equal", "w", "NoSchedule"),
            T("k", "NoSchedule", "v"),
            False,
            id="value-differs",
        ),
        pytest.param(
            Tol("k", "Equal", "", "NoSchedule"),
            T("k", "NoSchedule", ""),
            True,
            id="empty-equals-empty",
        ),
        pytest.param(
            Tol("k", "Exists", "", ""), T("k", "NoExecute", "v"), True, id="exists-any-effect"
        ),
        pytest.param(
            Tol("", "Exists", "", ""), T("any", "NoSchedule", "x"), True, id="empty-key-exists-all"
        ),
        pytest.param(
            Tol("k", "Exists", "", "PreferNoSchedule"),
            T("k", "NoSchedule"),
            False,
            id="effect-differs",
        ),
        pytest.param(Tol("other", "Exists"), T("k", "NoSchedule"), False, id="key-differs"),
        pytest.param(
            Tol("k", "Gt", "5", "NoSchedule"), T("k", "NoSchedule", "9"), False, id="gt-gate-off"
        ),
    ],
)
def test_toleration_matching(toleration: api.Toleration, taint: Taint, tolerated: bool) -> None:
    assert toleration.tolerates(taint) is tolerated


def taint(key: str, effect: str, value: str = "") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def run_filter(plugin: Any, pod: api.Pod, snap: ClusterSnapshot) -> list[api.Status]:
    state = CycleState()
    if hasattr(plugin, "pre_filter"):
        plugin.pre_filter(state, pod, snap)
    mask = plugin.filter(state, pod, snap, snap.all_nodes)
    statuses = [plugin.filter_node(state, pod, snap, i) for i in range(snap.size)]
    assert [bool(m) for m in mask] == [s.is_success for s in statuses]
    return statuses


def test_taint_toleration_filter_reports_first_untolerated_hard_taint() -> None:
    snap = b.snapshot(
        [
            b.node(
                "n1",
                taints=[taint("soft", "PreferNoSchedule"), taint("key1", "NoSchedule", "value1")],
            ),
            b.node("n2", taints=[taint("gone", "NoExecute")]),
            b.node("n3", taints=[taint("soft", "PreferNoSchedule")]),
        ]
    )
    plugin = taint_toleration.new(None, Handle())
    pod = b.pod(tolerations=[{"key": "gone", "operator": "Exists", "effect": "NoExecute"}])
    statuses = run_filter(plugin, pod, snap)
    assert statuses[0] == api.unschedulable(
        "node(s) had untolerated taint {key1: value1}", unresolvable=True
    )
    assert statuses[1].is_success and statuses[2].is_success


def test_taint_toleration_score_counts_prefer_no_schedule_reversed() -> None:
    snap = b.snapshot(
        [
            b.node("n1", taints=[taint("a", "PreferNoSchedule"), taint("b", "PreferNoSchedule")]),
            b.node("n2", taints=[taint("a", "PreferNoSchedule")]),
            b.node("n3"),
        ]
    )
    plugin = taint_toleration.new(None, Handle())
    # a NoSchedule-effect toleration does not help the score
    pod = b.pod(tolerations=[{"key": "b", "operator": "Exists", "effect": "NoSchedule"}])
    state = CycleState()
    plugin.pre_score(state, pod, snap, snap.all_nodes)
    raw = plugin.score(state, pod, snap, snap.all_nodes)
    assert raw.tolist() == [2, 1, 0]
    assert plugin.normalize_score(state, pod, raw).tolist() == [0, 50, 100]
    tolerant = b.pod(tolerations=[{"key": "b", "operator": "Exists", "effect": "PreferNoSchedule"}])
    state = CycleState()
    plugin.pre_score(state, tolerant, snap, snap.all_nodes)
    assert plugin.score(state, tolerant, snap, snap.all_nodes).tolist() == [1, 1, 0]


def test_normalize_all_zero_reverse_gives_100() -> None:
    plugin = taint_toleration.new(None, Handle())
    zeros = b.snapshot([b.node("n1"), b.node("n2")])
    state = CycleState()
    pod = b.pod()
    plugin.pre_score(state, pod, zeros, zeros.all_nodes)
    assert plugin.normalize_score(
        state, pod, plugin.score(state, pod, zeros, zeros.all_nodes)
    ).tolist() == [100, 100]


LABELLED = [
    b.node("n1", labels={"zone": "a", "gen": "0206", "disk": "ssd"}),
    b.node("n2", labels={"zone": "b", "gen": "0204"}),
    b.node("n3", labels={"zone": "c", "gen": "x12"}),
]


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


@pytest.mark.parametrize(
    ("spec", "matching"),
    [
        pytest.param({"nodeSelector": {"zone": "a"}}, ["n1"], id="node-selector"),
        pytest.param(
            {"nodeSelector": {"zone": "a", "disk": "hdd"}}, [], id="node-selector-all-keys"
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expr("zone", "In", "a", "b")]})},
            ["n1", "n2"],
            id="in",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expr("disk", "NotIn", "ssd")]})},
            ["n2", "n3"],
            id="notin-absent-matches",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expr("disk", "Exists")]})},
            ["n1"],
            id="exists",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expr("disk", "DoesNotExist")]})},
            ["n2", "n3"],
            id="does-not-exist",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expr("gen", "Gt", "0204")]})},
            ["n1"],
            id="gt-leading-zeros",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expr("gen", "Lt", "206")]})},
            ["n2"],
            id="lt-unparsable-label-fails",
        ),
        pytest.param(
            {
                "affinity": required(
                    {"matchExpressions": [expr("zone", "In", "a")]},
                    {"matchExpressions": [expr("zone", "In", "c")]},
                )
            },
            ["n1", "n3"],
            id="terms-ored",
        ),
        pytest.param(
            {
                "affinity": required(
                    {"matchExpressions": [expr("zone", "In", "a", "b"), expr("disk", "Exists")]}
                )
            },
            ["n1"],
            id="expressions-anded",
        ),
        pytest.param({"affinity": required()}, [], id="no-terms-match-nothing"),
        pytest.param({"affinity": required({})}, [], id="empty-term-matches-nothing"),
        pytest.param(
            {
                "affinity": required(
                    {"matchExpressions": [expr("zone", "Near", "a")]},
                    {"matchExpressions": [expr("zone", "In", "b")]},
                )
            },
            ["n2"],
            id="bad-term-fails-others-match",
        ),
        pytest.param(
            {"affinity": required({"matchExpressions": [expr("gen", "Gt", "1", "2")]})},
            [],
            id="gt-needs-one-value",
        ),
        pytest.param(
            {"affinity": required({"matchFields": [expr("metadata.name", "NotIn", "n2")]})},
            ["n1", "n3"],
            id="match-fields-notin",
        ),
        pytest.param(
            {
                "nodeSelector": {"zone": "a"},
                "affinity": required({"matchExpressions": [expr("zone", "In", "b")]}),
            },
            [],
            id="selector-and-affinity",
        ),
    ],
)
def test_node_affinity_filter(spec: dict[str, Any], matching: list[str]) -> None:
    snap = b.snapshot(LABELLED)
    statuses = run_filter(node_affinity.new(None, Handle()), b.pod(**spec), snap)
    assert [snap.names[i] for i, s in enumerate(statuses) if s.is_success] == matching
    for status in statuses:
        if not status.is_success:
            assert status == api.unschedulable(node_affinity.REASON_POD, unresolvable=True)


def test_node_affinity_pre_filter_node_names() -> None:
    plugin = node_affinity.new(None, Handle())
    snap = b.snapshot(LABELLED)

    def fields(*names: str) -> dict[str, Any]:
        return {"matchFields": [expr("metadata.name", "In", *names)]}

    cases: list[tuple[dict[str, Any], tuple[frozenset[str] | None, api.Code]]] = [
        ({}, (None, api.Code.SKIP)),
        ({"nodeSelector": {"zone": "a"}}, (None, api.Code.SUCCESS)),
        (
            {"affinity": required(fields("n1", "n2"), fields("n3"))},
            (frozenset({"n1", "n2", "n3"}), api.Code.SUCCESS),
        ),
        (
            {
                "affinity": required(
                    fields("n1", "n2"), {"matchExpressions": [expr("zone", "Exists")]}
                )
            },
            (None, api.Code.SUCCESS),
        ),
        (
            {
                "affinity": required(
                    {
                        "matchFields": [
                            expr("metadata.name", "In", "n1"),
                            expr("metadata.name", "In", "n2"),
                        ]
                    }
                )
            },
            (None, api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
        ),
    ]
    for spec, (names, code) in cases:
        result, status = plugin.pre_filter(CycleState(), b.pod("p", **spec), snap)
        assert status.code is code, spec
        assert (result.node_names if isinstance(result, PreFilterResult) else None) == names, spec


def test_node_affinity_preferred_score_and_normalize() -> None:
    snap = b.snapshot(LABELLED)
    plugin = node_affinity.new(None, Handle())
    pod = b.pod(
        affinity={
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [expr("zone", "In", "a")]}},
                    {
                        "weight": 30,
                        "preference": {"matchExpressions": [expr("disk", "DoesNotExist")]},
                    },
                    {"weight": 5, "preference": {}},
                ]
            }
        }
    )
    state = CycleState()
    assert plugin.pre_score(state, pod, snap, snap.all_nodes).is_success
    raw = plugin.score(state, pod, snap, snap.all_nodes)
    # Weight 0 and the empty preference are dropped, as kube-scheduler's
    # NewPreferredSchedulingTerms drops them (an empty term would match every node).
    assert raw.tolist() == [10, 30, 30]
    assert raw.tolist() == [plugin.score_node(pod, snap, i) for i in range(3)]
    assert plugin.normalize_score(state, pod, raw).tolist() == [33, 100, 100]
    assert plugin.pre_score(CycleState(), b.pod(), snap, snap.all_nodes).is_skip


def test_added_affinity_is_enforced_first_and_scored() -> None:
    args = node_affinity.Args.model_validate(
        {
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr("zone", "NotIn", "c")]}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 3, "preference": {"matchExpressions": [expr("zone", "In", "b")]}}
                ],
            }
        }
    )
    plugin = node_affinity.new(args, Handle())
    snap = b.snapshot(LABELLED)
    statuses = run_filter(plugin, b.pod(nodeSelector={"zone": "c"}), snap)
    assert statuses[2] == api.unschedulable(node_affinity.REASON_ENFORCED, unresolvable=True)
    assert statuses[0] == api.unschedulable(node_affinity.REASON_POD, unresolvable=True)
    assert plugin.pre_filter(CycleState(), b.pod(), snap)[1].is_success  # not Skip: added affinity
    state = CycleState()
    assert plugin.score(state, b.pod(), snap, snap.all_nodes).tolist() == [0, 3, 0]


def test_node_unschedulable() -> None:
    snap = b.snapshot([b.node("n1", unschedulable=True), b.node("n2")])
    plugin = node_unschedulable.new(None, Handle())
    statuses = run_filter(plugin, b.pod(), snap)
    assert statuses[0] == api.unschedulable("node(s) were unschedulable", unresolvable=True)
    assert statuses[1].is_success
    tolerant = b.pod(
        tolerations=[
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoSchedule",
            }
        ]
    )
    assert all(s.is_success for s in run_filter(plugin, tolerant, snap))


def test_node_name() -> None:
    snap = b.snapshot([b.node("n1"), b.node("n2")])
    plugin = node_name.new(None, Handle())
    statuses = run_filter(plugin, b.pod(node_name="n2"), snap)
    assert statuses[0] == api.unschedulable(
        "node(s) didn't match the requested node name", unresolvable=True
    )
    assert statuses[1].is_success
    assert all(s.is_success for s in run_filter(plugin, b.pod(), snap))


def port(number: int, ip: str = "", protocol: str = "TCP") -> dict[str, Any]:
    return {"containerPort": number, "hostPort": number, "hostIP": ip, "protocol": protocol}


@pytest.mark.parametrize(
    ("used", "wanted", "fits"),
    [
        pytest.param([port(80)], [port(8080)], True, id="other-port"),
        pytest.param([port(80)], [port(80)], False, id="same-port"),
        pytest.param([port(80, protocol="UDP")], [port(80)], True, id="other-protocol"),
        pytest.param([port(80, "10.0.0.1")], [port(80, "10.0.0.2")], True, id="other-ip"),
        pytest.param([port(80, "10.0.0.1")], [port(80)], False, id="wildcard-wants-all-ips"),
        pytest.param([port(80)], [port(80, "10.0.0.1")], False, id="wildcard-used-blocks-ip"),
        pytest.param([port(80, "10.0.0.1")], [port(80, "10.0.0.1")], False, id="same-ip"),
    ],
)
def test_node_ports(used: list[dict[str, Any]], wanted: list[dict[str, Any]], fits: bool) -> None:
    existing = b.pod("old", containers=[{"name": "c", "image": "i", "ports": used}], node_name="n1")
    snap = b.snapshot([b.node("n1"), b.node("n2")], [existing])
    plugin = node_ports.new(None, Handle())
    pod = b.pod(containers=[{"name": "c", "image": "i", "ports": wanted}])
    statuses = run_filter(plugin, pod, snap)
    assert statuses[0].is_success is fits
    assert statuses[1].is_success
    if not fits:
        assert statuses[0] == api.unschedulable(
            "node(s) didn't have free ports for the requested pod ports"
        )


def test_node_ports_skips_pods_without_host_ports() -> None:
    plugin = node_ports.new(None, Handle())
    assert plugin.pre_filter(CycleState(), b.pod(), b.snapshot([]))[1].is_skip


def test_priority_sort() -> None:
    plugin = priority_sort.new(None, Handle())
    high = QueuedPod(b.pod("h", priority=10), timestamp=5.0)
    low_early = QueuedPod(b.pod("l1"), timestamp=1.0)
    low_late = QueuedPod(b.pod("l2"), timestamp=2.0)
    assert plugin.less(high, low_early)
    assert plugin.less(low_early, low_late)
    assert not plugin.less(low_late, low_early)


def test_scheduling_gates() -> None:
    plugin = scheduling_gates.new(None, Handle())
    assert plugin.pre_enqueue(b.pod()).is_success
    status = plugin.pre_enqueue(b.pod(schedulingGates=[{"name": "example.com/a"}, {"name": "b"}]))
    assert status == api.unschedulable(
        "waiting for scheduling gates: [example.com/a b]", unresolvable=True
    )


@pytest.mark.parametrize(
    ("operator", "toleration_value", "taint_value", "gate", "tolerated"),
    [
        pytest.param("Gt", "5", "10", True, True, id="gt-taint-greater"),
        pytest.param("Gt", "10", "10", True, False, id="gt-equal-is-not-greater"),
        pytest.param("Lt", "10", "5", True, True, id="lt-taint-less"),
        pytest.param("Lt", "5", "10", True, False, id="lt-taint-greater"),
        pytest.param("Gt", "-3", "0007", True, True, id="signs-and-leading-zeros"),
        pytest.param("Gt", "5", "high", True, False, id="unparsable-taint-value"),
        pytest.param("Lt", "1e3", "5", True, False, id="unparsable-toleration-value"),
        pytest.param("Gt", "5", "10", False, False, id="gate-off-never-matches"),
    ],
)
def test_comparison_operators_behind_the_feature_gate(
    operator: str, toleration_value: str, taint_value: str, gate: bool, tolerated: bool
) -> None:
    toleration = Tol("sla", operator, toleration_value, "NoSchedule")
    taint = T("sla", "NoSchedule", taint_value)
    assert toleration.tolerates(taint, comparison_operators=gate) is tolerated
    gates = config.parse_feature_gates(f"TaintTolerationComparisonOperators={str(gate).lower()}")
    plugin = taint_toleration.new(None, Handle(features=gates))
    node = b.node("n1", taints=[{"key": "sla", "value": taint_value, "effect": "NoSchedule"}])
    pod = b.pod(tolerations=[{"key": "sla", "operator": operator, "value": toleration_value}])
    snapshot = ClusterSnapshot([node], [])
    assert plugin.filter(CycleState(), pod, snapshot, snapshot.all_nodes)[0] == tolerated
    assert plugin.filter_node(CycleState(), pod, snapshot, 0).is_success is tolerated


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("NoSuchGate=true", "unrecognized feature gate 'NoSuchGate'"),
        ("TaintTolerationComparisonOperators", "expected Name=true or Name=false"),
        ("TaintTolerationComparisonOperators=yes", "expected Name=true or Name=false"),
    ],
)
def test_bad_feature_gates_are_config_errors(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        config.parse_feature_gates(text)
