"""``--explain`` and the FitError say what the filters saw when pods nominated by an
earlier preemption reserved room (the long fuzz run's finding): before, the reasons
were recomputed without the nominated pods, so a node rejected only because of them was
listed rejected with no reason, a node the second pass (without them) rejected was
listed feasible, and the FitError counted fewer nodes than there are."""

from __future__ import annotations

from nodeagent.scheduler import config, objects, planner, registry
from tests.scheduler import builders as b


def test_a_node_full_of_a_nominated_pod_is_explained_as_full() -> None:
    victim = b.pod_dict("victim", requests={"cpu": "1"}, node_name="n1")
    high = b.pod_dict("high", requests={"cpu": "1"})
    high["spec"]["priority"] = 100
    low = b.pod_dict("low", requests={"cpu": "1"})
    low["spec"]["priority"] = 50
    cluster = objects.read_cluster([b.node_dict("n1", cpu="1"), victim, high, low])
    plugins = registry.in_tree_registry()
    configuration = config.parse_configuration(None, plugins)
    plan = planner.plan(
        cluster, configuration, plugins=plugins, seed=1, now=0.0, explain_nodes=True
    )
    by_pod = {p.pod: p for p in plan.placements}
    assert by_pod["default/high"].status is planner.Outcome.NOMINATED
    low_placement = by_pod["default/low"]
    assert low_placement.status is planner.Outcome.UNSCHEDULABLE
    assert low_placement.message.startswith("0/1 nodes are available: 1 Insufficient cpu.")
    assert low_placement.nodes is not None
    verdict = low_placement.nodes["n1"]
    assert not verdict.feasible and verdict.reasons == ("Insufficient cpu",)


def test_a_pod_nominated_elsewhere_satisfies_no_affinity_on_other_nodes() -> None:
    """kube-scheduler adds the pods nominated to a node when filtering that node only:
    a pod nominated to n1 (not bound yet) does not make n2, in the same zone, satisfy a
    required affinity to it. Before, every nominated pod was in the snapshot for the
    whole pass, and the follower was placed on n2 (the long fuzz run's example 99940)."""
    zone = {"topology.kubernetes.io/zone": "a"}
    filler = b.pod_dict("filler", requests={"cpu": "1"}, node_name="n1")
    web = b.pod_dict("web", requests={"cpu": "1"}, nodeSelector={"kubernetes.io/hostname": "n1"})
    web["metadata"]["labels"] = {"app": "web"}
    web["spec"]["priority"] = 100
    follower = b.pod_dict("follower")
    follower["spec"]["priority"] = 100
    follower["metadata"]["creationTimestamp"] = "2024-05-01T10:00:01Z"
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": next(iter(zone))}
    follower["spec"]["affinity"] = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    nodes = [b.node_dict("n1", cpu="1", labels=zone), b.node_dict("n2", labels=zone)]
    cluster = objects.read_cluster([*nodes, filler, web, follower])
    plugins = registry.in_tree_registry()
    configuration = config.parse_configuration(None, plugins)
    plan = planner.plan(cluster, configuration, plugins=plugins, seed=1, now=0.0)
    by_pod = {p.pod: p for p in plan.placements}
    assert by_pod["default/web"].status is planner.Outcome.NOMINATED
    assert by_pod["default/follower"].status is planner.Outcome.UNSCHEDULABLE
