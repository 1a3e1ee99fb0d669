"""Topology keys carried by no node, or by some nodes only (issue 19).

A term or constraint whose ``topologyKey`` no node carries is ordinary in a real cluster
(a typo, a zone label not applied yet to new nodes). Upstream counts such a term as
contributing nothing: InterPodAffinity's anti-affinity passes every node, its scores add
nothing; PodTopologySpread's DoNotSchedule rejects every node as missing the label. The
first two cases are kube-scheduler's own InterPodAffinity filter cases ("only when
labelSelector and topologyKey both match, it's counted as a single term match - case
when one term has invalid topologyKey"); the rest are the planner-crash regressions.
"""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.scheduler import api, config, objects, planner, registry
from nodeagent.scheduler.framework import CycleState, Handle
from nodeagent.scheduler.plugins import inter_pod_affinity as ipa
from nodeagent.scheduler.plugins import pod_topology_spread as pts
from nodeagent.scheduler.snapshot import ClusterSnapshot
from tests.scheduler import builders as b

INVALID_KEY = "invalid-node-label"


def exists(key: str, topology_key: str) -> dict[str, Any]:
    selector = {"matchExpressions": [{"key": key, "operator": "Exists"}]}
    return {"labelSelector": selector, "topologyKey": topology_key}


def pod(
    name: str, labels: dict[str, str], *, node: str = "", anti: list[dict[str, Any]] | None = None
) -> api.Pod:
    data = b.pod_dict(name, node_name=node)
    data["metadata"]["labels"] = labels
    if anti:
        required = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
        data["spec"]["affinity"] = {"podAntiAffinity": required}
    return objects.parse_pod(data)


def upstream_nodes() -> list[api.Node]:
    return [
        b.node("nodeA", labels={"region": "r1", "zone": "z1", "hostname": "nodeA"}),
        b.node("nodeB", labels={"region": "r1", "zone": "z2", "hostname": "nodeB"}),
    ]


def filter_verdicts(incoming: api.Pod, snapshot: ClusterSnapshot) -> dict[str, api.Status]:
    plugin = ipa.new(None, Handle())
    state = CycleState()
    plugin.pre_filter(state, incoming, snapshot)
    mask = plugin.filter(state, incoming, snapshot, snapshot.all_nodes)
    verdicts = {
        snapshot.names[i]: plugin.filter_node(state, incoming, snapshot, i)
        for i in snapshot.all_nodes
    }
    assert [v.is_success for v in verdicts.values()] == mask.tolist()
    return verdicts


@pytest.mark.parametrize(
    ("existing", "incoming", "reason"),
    [
        pytest.param(
            pod("podA", {}, node="nodeA", anti=[exists("foo", INVALID_KEY), exists("bar", "zone")]),
            pod("incoming", {"foo": "", "bar": ""}),
            ipa.REASON_EXISTING_ANTI_AFFINITY,
            id="existing-pods-anti-affinity-one-term-invalid-key",
        ),
        pytest.param(
            pod("podA", {"foo": "", "bar": ""}, node="nodeA"),
            pod("incoming", {}, anti=[exists("foo", INVALID_KEY), exists("bar", "zone")]),
            ipa.REASON_ANTI_AFFINITY,
            id="incoming-pods-anti-affinity-one-term-invalid-key",
        ),
    ],
)
def test_upstream_invalid_topology_key_counts_nothing(
    existing: api.Pod, incoming: api.Pod, reason: str
) -> None:
    verdicts = filter_verdicts(incoming, ClusterSnapshot(upstream_nodes(), [existing]))
    assert verdicts["nodeA"] == api.unschedulable(reason)
    assert verdicts["nodeB"].is_success


def test_anti_affinity_on_a_key_no_node_carries_passes_every_node() -> None:
    """Regression: IndexError in ``_domain_value`` (no domain at all for the key)."""
    snapshot = ClusterSnapshot(upstream_nodes(), [pod("podA", {"foo": ""}, node="nodeA")])
    verdicts = filter_verdicts(pod("incoming", {}, anti=[exists("foo", INVALID_KEY)]), snapshot)
    assert all(status.is_success for status in verdicts.values())


def test_preferred_terms_on_a_key_no_node_carries_skip_scoring() -> None:
    """Regression: the same IndexError in PreScore; upstream has no topology score then."""
    data = b.pod_dict("incoming")
    data["spec"]["affinity"] = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": exists("foo", INVALID_KEY)}
            ]
        }
    }
    incoming = objects.parse_pod(data)
    snapshot = ClusterSnapshot(upstream_nodes(), [pod("podA", {"foo": ""}, node="nodeA")])
    plugin = ipa.new(None, Handle())
    assert plugin.pre_score(CycleState(), incoming, snapshot, snapshot.all_nodes).is_skip


def test_spread_constraint_on_a_key_no_node_carries_rejects_as_missing_label() -> None:
    """Regression: IndexError in PodTopologySpread's Filter (no domain for the key)."""
    data = b.pod_dict("incoming")
    data["metadata"]["labels"] = {"app": "web"}
    data["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": INVALID_KEY,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    incoming = objects.parse_pod(data)
    snapshot = ClusterSnapshot(upstream_nodes())
    plugin = pts.new(None, Handle())
    state = CycleState()
    plugin.pre_filter(state, incoming, snapshot)
    assert not plugin.filter(state, incoming, snapshot, snapshot.all_nodes).any()
    status = plugin.filter_node(state, incoming, snapshot, 0)
    assert status.code is api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_the_plan_goes_on_for_every_pod() -> None:
    """The reported crash, end to end: one pod's term on an absent key took down the
    whole plan; now it and the pods after it are placed."""
    objs = [
        b.node_dict("n1"),
        {**b.pod_dict("web-0", node_name="n1"), "metadata": {"name": "web-0", "labels": {}}},
        {
            **b.pod_dict("web-1"),
            "spec": {
                **b.pod_dict("web-1")["spec"],
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {},
                                "topologyKey": "topology.kubernetes.io/zone",
                            }
                        ]
                    }
                },
            },
        },
        b.pod_dict("web-2"),
    ]
    cluster = objects.read_cluster(objs)
    plugins = registry.in_tree_registry()
    configuration = config.parse_configuration(None, plugins)
    plan = planner.plan(cluster, configuration, plugins=plugins, seed=1, now=0.0)
    assert [(p.pod, p.node, p.status) for p in plan.placements] == [
        ("default/web-1", "n1", planner.Outcome.SCHEDULED),
        ("default/web-2", "n1", planner.Outcome.SCHEDULED),
    ]


def test_a_matching_pod_on_a_node_without_the_key_does_not_end_the_first_pod_exemption() -> None:
    """Upstream counts affinity matches per topology pair: a pod on a node lacking the
    key is counted nowhere, so a self-affine pod still passes as the first of its group
    (the long fuzz run's finding, on the oracle's side; the product had it right)."""
    data = b.pod_dict("incoming")
    data["metadata"]["labels"] = {"app": "web"}
    data["spec"]["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
            ]
        }
    }
    incoming = objects.parse_pod(data)
    nodes = [*upstream_nodes(), b.node("bare")]
    snapshot = ClusterSnapshot(nodes, [pod("web-0", {"app": "web"}, node="bare")])
    verdicts = filter_verdicts(incoming, snapshot)
    assert verdicts["nodeA"].is_success and verdicts["nodeB"].is_success
    assert verdicts["bare"].code is api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
