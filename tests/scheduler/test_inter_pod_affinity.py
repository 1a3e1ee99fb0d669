"""InterPodAffinity: table-driven from ``plugins/interpodaffinity`` and the Kubernetes docs'
"Assigning Pods to Nodes" examples (a redis cache spread one per node, web servers
co-located with it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from nodeagent.scheduler import api, objects
from nodeagent.scheduler.framework import CycleState, Handle
from nodeagent.scheduler.plugins import inter_pod_affinity as ipa
from nodeagent.scheduler.snapshot import ClusterSnapshot
from tests.scheduler import builders as b

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def term(labels: dict[str, str], key: str = HOST, **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **extra}


def pod(
    name: str,
    labels: dict[str, str],
    *,
    node: str = "",
    namespace: str = "default",
    affinity: Sequence[dict[str, Any]] = (),
    anti: Sequence[dict[str, Any]] = (),
    preferred: Sequence[tuple[int, dict[str, Any]]] = (),
    preferred_anti: Sequence[tuple[int, dict[str, Any]]] = (),
) -> api.Pod:
    data = b.pod_dict(name, namespace=namespace, node_name=node)
    data["metadata"]["labels"] = labels
    spec_affinity: dict[str, Any] = {}
    if affinity or preferred:
        spec_affinity["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": list(affinity),
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred
            ],
        }
    if anti or preferred_anti:
        spec_affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": list(anti),
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred_anti
            ],
        }
    if spec_affinity:
        data["spec"]["affinity"] = spec_affinity
    return objects.parse_pod(data)


def nodes(*zones: str) -> list[api.Node]:
    return [b.node(f"n{i}", labels={ZONE: zone}) for i, zone in enumerate(zones, 1)]


def run_filter(incoming: api.Pod, snapshot: ClusterSnapshot) -> dict[str, api.Status] | None:
    plugin = ipa.new(None, Handle())
    state = CycleState()
    _, status = plugin.pre_filter(state, incoming, snapshot)
    if status.is_skip:
        return None
    mask = plugin.filter(state, incoming, snapshot, snapshot.all_nodes)
    verdicts = {
        snapshot.names[i]: plugin.filter_node(state, incoming, snapshot, i)
        for i in snapshot.all_nodes
    }
    for i, passed in enumerate(mask):
        assert passed == verdicts[snapshot.names[i]].is_success
    return verdicts


REDIS = {"app": "store"}
WEB = {"app": "web-store"}


@pytest.mark.parametrize(
    ("existing", "incoming", "feasible", "reason"),
    [
        pytest.param(
            [pod("r1", REDIS, node="n1", anti=[term(REDIS)])],
            pod("r2", REDIS, anti=[term(REDIS)]),
            {"n2", "n3"},
            ipa.REASON_ANTI_AFFINITY,
            id="docs-redis-one-per-node",
        ),
        pytest.param(
            [pod("r1", REDIS, node="n1"), pod("r2", REDIS, node="n2")],
            pod("w1", WEB, affinity=[term(REDIS)], anti=[term(WEB)]),
            {"n1", "n2"},
            ipa.REASON_AFFINITY,
            id="docs-web-next-to-redis",
        ),
        pytest.param(
            [pod("r1", REDIS, node="n1"), pod("w0", WEB, node="n1")],
            pod("w1", WEB, affinity=[term(REDIS)], anti=[term(WEB)]),
            set(),
            None,
            id="docs-web-next-to-redis-but-not-to-web",
        ),
        pytest.param(
            [pod("r1", REDIS, node="n1")],
            pod("w1", WEB, affinity=[term(REDIS, ZONE)]),
            {"n1", "n2"},
            ipa.REASON_AFFINITY,
            id="zone-affinity-whole-domain",
        ),
        pytest.param(
            [],
            pod("s1", REDIS, affinity=[term(REDIS)]),
            {"n1", "n2", "n3"},
            None,
            id="first-pod-of-self-affine-group",
        ),
        pytest.param(
            [],
            pod("w1", WEB, affinity=[term(REDIS)]),
            set(),
            ipa.REASON_AFFINITY,
            id="affinity-to-nothing-not-self-matching",
        ),
        pytest.param(
            [pod("r1", REDIS, node="n3", anti=[term(WEB, ZONE)])],
            pod("w1", WEB),
            {"n1", "n2"},
            ipa.REASON_EXISTING_ANTI_AFFINITY,
            id="symmetry-existing-anti-affinity",
        ),
        pytest.param(
            [pod("r1", REDIS, node="n1", namespace="other")],
            pod("w1", WEB, affinity=[term(REDIS)]),
            set(),
            ipa.REASON_AFFINITY,
            id="own-namespace-by-default",
        ),
        pytest.param(
            [pod("r1", REDIS, node="n1", namespace="other")],
            pod("w1", WEB, affinity=[term(REDIS, namespaces=["other"])]),
            {"n1"},
            ipa.REASON_AFFINITY,
            id="explicit-namespaces",
        ),
        pytest.param(
            [pod("r1", REDIS, node="n1", namespace="other")],
            pod("w1", WEB, affinity=[term(REDIS, namespaceSelector={})]),
            {"n1"},
            ipa.REASON_AFFINITY,
            id="empty-namespace-selector-is-all",
        ),
        pytest.param(
            [pod("r1", REDIS, node="n1", namespace="team-a")],
            pod(
                "w1", WEB, affinity=[term(REDIS, namespaceSelector={"matchLabels": {"team": "a"}})]
            ),
            {"n1"},
            ipa.REASON_AFFINITY,
            id="namespace-selector-by-labels",
        ),
    ],
)
def test_filter_table(
    existing: list[api.Pod], incoming: api.Pod, feasible: set[str], reason: str | None
) -> None:
    snapshot = ClusterSnapshot(
        nodes("a", "a", "b"), existing, namespaces={"team-a": {"team": "a"}, "other": {}}
    )
    verdicts = run_filter(incoming, snapshot)
    assert verdicts is not None
    assert {n for n, s in verdicts.items() if s.is_success} == feasible
    if reason is not None:
        assert any(s.reasons == (reason,) for s in verdicts.values())
    for status in verdicts.values():
        if status.reasons == (ipa.REASON_AFFINITY,):
            assert status.code is api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        elif not status.is_success:
            assert status.code is api.Code.UNSCHEDULABLE


def test_node_missing_the_affinity_topology_key_is_rejected() -> None:
    snapshot = ClusterSnapshot([*nodes("a"), b.node("bare")], [pod("r1", REDIS, node="n1")])
    verdicts = run_filter(pod("w", WEB, affinity=[term(REDIS, ZONE)]), snapshot)
    assert verdicts is not None
    assert verdicts["n1"].is_success and not verdicts["bare"].is_success


def test_match_label_keys_and_mismatch_label_keys() -> None:
    existing = [
        pod("old", {"app": "web", "rev": "1"}, node="n1"),
        pod("new", {"app": "web", "rev": "2"}, node="n2"),
    ]
    snapshot = ClusterSnapshot(nodes("a", "b", "c"), existing)
    incoming = pod(
        "x", {"app": "web", "rev": "2"}, anti=[term({"app": "web"}, matchLabelKeys=["rev"])]
    )
    verdicts = run_filter(incoming, snapshot)
    assert verdicts is not None
    assert {n for n, s in verdicts.items() if s.is_success} == {"n1", "n3"}
    mismatched = pod(
        "y", {"app": "web", "rev": "2"}, anti=[term({"app": "web"}, mismatchLabelKeys=["rev"])]
    )
    verdicts = run_filter(mismatched, snapshot)
    assert verdicts is not None
    assert {n for n, s in verdicts.items() if s.is_success} == {"n2", "n3"}


def test_a_pod_without_terms_and_no_matching_anti_affinity_skips() -> None:
    snapshot = ClusterSnapshot(nodes("a"), [pod("r", REDIS, node="n1", anti=[term(REDIS)])])
    assert run_filter(pod("w", WEB), snapshot) is None


def scores(incoming: api.Pod, snapshot: ClusterSnapshot, **args: Any) -> dict[str, int] | None:
    plugin = ipa.new(ipa.Args.model_validate(args), Handle())
    state = CycleState()
    if plugin.pre_score(state, incoming, snapshot, snapshot.all_nodes).is_skip:
        return None
    raw = plugin.score(state, incoming, snapshot, snapshot.all_nodes)
    normalized = plugin.normalize_score(state, incoming, raw.copy())
    return {snapshot.names[i]: int(v) for i, v in enumerate(normalized)}


def test_preferred_affinity_and_anti_affinity_scores() -> None:
    existing = [pod("r1", REDIS, node="n1"), pod("w1", WEB, node="n3")]
    snapshot = ClusterSnapshot(nodes("a", "a", "b"), existing)
    incoming = pod("x", WEB, preferred=[(10, term(REDIS, ZONE))], preferred_anti=[(5, term(WEB))])
    # zone a: +10 (redis); n3: -5 (web on it). Min -5, max 10: n1,n2 -> 100; n3 -> 0.
    assert scores(incoming, snapshot) == {"n1": 100, "n2": 100, "n3": 0}


def test_existing_pods_required_affinity_adds_hard_pod_affinity_weight() -> None:
    existing = [pod("r1", REDIS, node="n1", affinity=[term(WEB)])]
    snapshot = ClusterSnapshot(nodes("a", "b"), existing)
    assert scores(pod("w", WEB), snapshot) == {"n1": 100, "n2": 0}
    assert scores(pod("w", WEB), snapshot, hardPodAffinityWeight=0) is None


def test_existing_pods_preferred_terms_and_ignore_flag() -> None:
    existing = [pod("r1", REDIS, node="n1", preferred_anti=[(50, term(WEB))])]
    snapshot = ClusterSnapshot(nodes("a", "b"), existing)
    assert scores(pod("w", WEB), snapshot) == {"n1": 0, "n2": 100}
    assert scores(pod("w", WEB), snapshot, ignorePreferredTermsOfExistingPods=True) is None


def test_normalization_truncates_a_float_ratio() -> None:
    existing = [
        pod(f"r{i}", REDIS, node=n) for i, n in enumerate(["n1", "n2", "n2", "n3", "n3", "n3"])
    ]
    snapshot = ClusterSnapshot(nodes("a", "b", "c"), existing)
    got = scores(pod("x", WEB, preferred=[(1, term(REDIS))]), snapshot)
    # raw 1, 2, 3: 100 * (s - 1) / 2 -> 0, 50, 100
    assert got == {"n1": 0, "n2": 50, "n3": 100}
    assert np.array_equal(np.array([0, 50, 100]), np.array(list(got.values())))
