"""PodTopologySpread: table-driven from ``plugins/podtopologyspread`` and the Kubernetes docs'
"Pod Topology Spread Constraints" worked examples."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from nodeagent.scheduler import api, objects
from nodeagent.scheduler.framework import CycleState, Handle
from nodeagent.scheduler.plugins import pod_topology_spread as pts
from nodeagent.scheduler.snapshot import ClusterSnapshot
from tests.scheduler import builders as b

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def constraint(
    key: str = ZONE,
    *,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    labels: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": labels or {"app": "foo"}},
        **extra,
    }


def spread_pod(name: str, *constraints: dict[str, Any], **kwargs: Any) -> api.Pod:
    data = b.pod_dict(name, topologySpreadConstraints=list(constraints), **kwargs)
    data["metadata"]["labels"] = {"app": "foo"}
    return objects.parse_pod(data)


def app_pod(name: str, node: str, labels: dict[str, str] | None = None) -> api.Pod:
    data = b.pod_dict(name, node_name=node)
    data["metadata"]["labels"] = labels or {"app": "foo"}
    return objects.parse_pod(data)


def cluster(
    zones: dict[str, list[str]], pods_per_node: dict[str, int], **node_kwargs: Any
) -> ClusterSnapshot:
    nodes = [
        b.node(name, labels={ZONE: zone}, **node_kwargs.get(name, {}))
        for zone, names in zones.items()
        for name in names
    ]
    pods = [
        app_pod(f"{node}-{i}", node) for node, count in pods_per_node.items() for i in range(count)
    ]
    return ClusterSnapshot(nodes, pods)


def run_filter(
    plugin: pts.PodTopologySpread, pod: api.Pod, snapshot: ClusterSnapshot
) -> dict[str, api.Status]:
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    assert status.is_success
    mask = plugin.filter(state, pod, snapshot, snapshot.all_nodes)
    verdicts = {
        snapshot.names[i]: plugin.filter_node(state, pod, snapshot, i) for i in snapshot.all_nodes
    }
    for i, passed in enumerate(mask):  # the vectorized and per-node forms agree
        assert passed == verdicts[snapshot.names[i]].is_success
    return verdicts


def plugin(**args: Any) -> pts.PodTopologySpread:
    return pts.new(pts.Args.model_validate(args), Handle())


@pytest.mark.parametrize(
    ("zones", "pods", "constraints", "feasible"),
    [
        pytest.param(
            {"zoneA": ["node1", "node2"], "zoneB": ["node3", "node4"]},
            {"node1": 1, "node2": 1, "node3": 1, "node4": 0},
            [constraint()],
            {"node3", "node4"},
            id="docs-3-0-zone-maxskew1-goes-to-zoneB",
        ),
        pytest.param(
            {"zoneA": ["n1"], "zoneB": ["n2"], "zoneC": ["n3"]},
            {"n1": 2, "n2": 2, "n3": 1},
            [constraint()],
            {"n3"},
            id="2-2-1-zones-only-the-emptiest",
        ),
        pytest.param(
            {"zoneA": ["n1"], "zoneB": ["n2"], "zoneC": ["n3"]},
            {"n1": 2, "n2": 2, "n3": 1},
            [constraint(max_skew=2)],
            {"n1", "n2", "n3"},
            id="2-2-1-zones-maxskew2-all",
        ),
        pytest.param(
            {"zoneA": ["node1", "node2"], "zoneB": ["node3", "node4"]},
            {"node1": 1, "node2": 1, "node3": 1},
            [constraint(), constraint(HOST)],
            {"node4"},
            id="docs-two-constraints-zone-and-host",
        ),
        pytest.param(
            {"zoneA": ["node1", "node2"], "zoneB": ["node3"]},
            {"node1": 2, "node3": 1},
            [constraint(), constraint(HOST)],
            set(),
            id="docs-conflicting-constraints-nothing-fits",
        ),
        pytest.param(
            {"zoneA": ["n1"], "zoneB": ["n2"]},
            {"n1": 1, "n2": 1},
            [constraint(minDomains=3)],
            set(),
            id="minDomains-3-with-2-domains-global-min-0",
        ),
        pytest.param(
            {"zoneA": ["n1"], "zoneB": ["n2"]},
            {"n1": 0, "n2": 0},
            [constraint(minDomains=3)],
            {"n1", "n2"},
            id="minDomains-empty-domains-still-fit",
        ),
        pytest.param(
            {"zoneA": ["n1"], "zoneB": ["n2"]},
            {"n1": 3, "n2": 0},
            [constraint(labels={"app": "other"})],
            {"n1", "n2"},
            id="selector-matches-nothing-no-self-match",
        ),
    ],
)
def test_filter_table(
    zones: dict[str, list[str]],
    pods: dict[str, int],
    constraints: list[dict[str, Any]],
    feasible: set[str],
) -> None:
    snapshot = cluster(zones, pods)
    verdicts = run_filter(plugin(), spread_pod("new", *constraints), snapshot)
    assert {name for name, status in verdicts.items() if status.is_success} == feasible
    for status in verdicts.values():
        if not status.is_success:
            assert status.reasons == (pts.REASON_CONSTRAINTS,)
            assert status.code is api.Code.UNSCHEDULABLE


def test_domains_follow_a_node_moving_zone() -> None:
    """The domains holding eligible nodes are kept with the static node data: a node
    that changes zone (the live scheduler's node update) changes them at once. Once
    zone b has no node, the global minimum is zone a's count, so a second pod fits."""
    snapshot = cluster({"a": ["n1"], "b": ["n2"]}, {"n1": 1})
    spread = plugin()
    pod = spread_pod("new", constraint())
    assert {n for n, s in run_filter(spread, pod, snapshot).items() if s.is_success} == {"n2"}
    snapshot.update_node(snapshot.index["n2"], b.node("n2", labels={ZONE: "a"}))
    assert {n for n, s in run_filter(spread, pod, snapshot).items() if s.is_success} == {
        "n1",
        "n2",
    }


def test_node_without_the_key_is_unresolvable_with_the_missing_label_message() -> None:
    nodes = [b.node("n1", labels={ZONE: "a"}), b.node("bare")]
    snapshot = ClusterSnapshot(nodes, [])
    verdicts = run_filter(plugin(), spread_pod("new", constraint()), snapshot)
    assert verdicts["n1"].is_success
    assert verdicts["bare"].reasons == (pts.REASON_MISSING_LABEL,)
    assert verdicts["bare"].code is api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_node_affinity_policy_honor_excludes_domains_the_pod_cannot_reach() -> None:
    # zoneC only holds nodes the pod's nodeSelector excludes: with Honor its empty
    # domain does not pull the minimum to 0; with Ignore it does.
    nodes = [
        b.node("a1", labels={ZONE: "a", "pool": "x"}),
        b.node("b1", labels={ZONE: "b", "pool": "x"}),
        b.node("c1", labels={ZONE: "c", "pool": "y"}),
    ]
    pods = [app_pod("p1", "a1"), app_pod("p2", "b1")]
    snapshot = ClusterSnapshot(nodes, pods)
    honor = spread_pod("new", constraint(), nodeSelector={"pool": "x"})
    assert {n for n, s in run_filter(plugin(), honor, snapshot).items() if s.is_success} == {
        "a1",
        "b1",
        "c1",
    }
    ignore = spread_pod("new", constraint(nodeAffinityPolicy="Ignore"), nodeSelector={"pool": "x"})
    assert {n for n, s in run_filter(plugin(), ignore, snapshot).items() if s.is_success} == {"c1"}


def test_node_taints_policy_honor_excludes_untolerated_nodes() -> None:
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    nodes = [
        b.node("a1", labels={ZONE: "a"}),
        b.node("b1", labels={ZONE: "b"}),
        b.node("c1", labels={ZONE: "c"}, taints=[taint]),
    ]
    snapshot = ClusterSnapshot(nodes, [app_pod("p1", "a1"), app_pod("p2", "b1")])
    ignored = {
        n
        for n, s in run_filter(plugin(), spread_pod("x", constraint()), snapshot).items()
        if s.is_success
    }
    assert ignored == {"c1"}  # default Ignore: the tainted empty zone sets the minimum 0
    honored = spread_pod("x", constraint(nodeTaintsPolicy="Honor"))
    assert {n for n, s in run_filter(plugin(), honored, snapshot).items() if s.is_success} == {
        "a1",
        "b1",
        "c1",
    }


def test_terminating_and_other_namespace_pods_are_not_counted() -> None:
    nodes = [b.node("a1", labels={ZONE: "a"}), b.node("b1", labels={ZONE: "b"})]
    other = objects.parse_pod(
        {
            **b.pod_dict("o", namespace="other", node_name="a1"),
            "metadata": {"name": "o", "namespace": "other", "labels": {"app": "foo"}},
        }
    )
    leaving_data = b.pod_dict("t", node_name="a1")
    leaving_data["metadata"].update(labels={"app": "foo"}, deletionTimestamp="2024-01-01T00:00:00Z")
    snapshot = ClusterSnapshot(nodes, [other, objects.parse_pod(leaving_data)])
    verdicts = run_filter(plugin(), spread_pod("x", constraint()), snapshot)
    assert all(s.is_success for s in verdicts.values())


def test_match_label_keys_narrow_the_selector_to_the_pods_revision() -> None:
    nodes = [b.node("a1", labels={ZONE: "a"}), b.node("b1", labels={ZONE: "b"})]
    old = app_pod("old", "a1", {"app": "foo", "rev": "1"})
    snapshot = ClusterSnapshot(nodes, [old, app_pod("old2", "a1", {"app": "foo", "rev": "1"})])
    data = b.pod_dict("new", topologySpreadConstraints=[constraint(matchLabelKeys=["rev"])])
    data["metadata"]["labels"] = {"app": "foo", "rev": "2"}
    verdicts = run_filter(plugin(), objects.parse_pod(data), snapshot)
    assert all(s.is_success for s in verdicts.values())  # revision 1 pods do not count


def score(
    plugin_: pts.PodTopologySpread, pod: api.Pod, snapshot: ClusterSnapshot, nodes: list[str]
) -> dict[str, int]:
    state = CycleState()
    indices = np.array([snapshot.index[n] for n in nodes], dtype=np.intp)
    status = plugin_.pre_score(state, pod, snapshot, indices)
    assert status.is_success
    raw = plugin_.score(state, pod, snapshot, indices)
    normalized = plugin_.normalize_score(state, pod, raw.copy())
    return dict(zip(nodes, (int(v) for v in normalized), strict=True))


def test_score_follows_the_reference_formula() -> None:
    # zone a: 3 matching pods, zone b: 1, zone c: 0; ScheduleAnyway maxSkew 1:
    # raw(n) = round(count * ln(3 + 2)); normalized 100 * (max + min - raw) / max.
    snapshot = cluster({"a": ["a1"], "b": ["b1"], "c": ["c1"]}, {"a1": 3, "b1": 1})
    pod = spread_pod("new", constraint(when="ScheduleAnyway"))
    got = score(plugin(), pod, snapshot, ["a1", "b1", "c1"])
    raw = {"a1": round(3 * math.log(5)), "b1": round(1 * math.log(5)), "c1": 0}
    top, low = max(raw.values()), min(raw.values())
    assert got == {n: 100 * (top + low - r) // top for n, r in raw.items()}
    assert got["c1"] == 100 and got["a1"] < got["b1"]


def test_score_ignores_nodes_without_the_key() -> None:
    nodes = [b.node("a1", labels={ZONE: "a"}), b.node("bare")]
    snapshot = ClusterSnapshot(nodes, [app_pod("p", "a1")])
    got = score(
        plugin(), spread_pod("x", constraint(when="ScheduleAnyway")), snapshot, ["a1", "bare"]
    )
    assert got == {"a1": 100, "bare": 0}


def test_system_default_constraints_apply_to_pods_a_service_selects() -> None:
    nodes = [b.node("a1", labels={ZONE: "a"}), b.node("a2", labels={ZONE: "a"}), b.node("bare")]
    pods = [app_pod("p1", "a1"), app_pod("p2", "a1")]
    service = api.Workload(
        api.WorkloadKind.SERVICE, "default", "web", api.LabelSelector((("app", "foo"),))
    )
    snapshot = ClusterSnapshot(nodes, pods, workloads=[service])
    new = app_pod("new", "")
    got = score(plugin(), new, snapshot, ["a1", "a2", "bare"])
    # hostname maxSkew 3 over 3 nodes: the node holding 2 replicas scores lowest; with
    # system defaulting the node lacking the zone label is not ignored.
    assert got["a1"] < got["a2"] and got["bare"] > 0
    unselected = ClusterSnapshot(nodes, pods)
    state = CycleState()
    assert plugin().pre_score(state, new, unselected, unselected.all_nodes).is_skip


def test_args_validation() -> None:
    with pytest.raises(ValueError, match="must be empty when defaultingType is System"):
        pts.Args.model_validate({"defaultConstraints": [constraint()]})
    listed = pts.Args.model_validate(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
            ],
        }
    )
    assert listed.parsed()[0].max_skew == 1
    with pytest.raises(ValueError, match="labelSelector"):
        pts.Args.model_validate({"defaultingType": "List", "defaultConstraints": [constraint()]})
