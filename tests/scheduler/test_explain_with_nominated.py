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
