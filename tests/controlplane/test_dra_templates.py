"""ResourceClaimTemplates on the real control plane: a pod whose template does not exist
yet, with nodeagent's scheduler and kube-scheduler side by side (the fixtures and
helpers of test_dra.py).

The real resourceclaim controller cannot make the pod's claim until its template is
created; neither scheduler binds it meanwhile. A snapshot of the cluster at that point,
planned by ``nodeagent schedule``'s planner, names the missing template; the same
snapshot with the template added plans the pod from it (as the controller would make the
claim), and once the template is created for real, the live schedulers put the pod
where the plan said, on the device it said. nodeagent's scheduler watches the templates
with the shipped role, and none of its requests is refused.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from nodeagent.scheduler import config, objects, planner, registry
from nodeagent.scheduler.resource_claims import ResourceCatalog
from tests.controlplane import processes, scrape, test_dra
from tests.controlplane.cluster import ControlPlane, Nodes, Rest
from tests.controlplane.test_dra import (
    API,
    Run,
    bound_node,
    claim,
    claim_of,
    devices,
    make_nodes,
    pod,
    publish,
    requests,
    template,
    verdict,
    wait_bound,
)
from tests.controlplane.test_scheduler import refused_requests

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

# test_dra.py's fixtures: both schedulers for the module, and a run per scheduler
schedulers = test_dra.schedulers
run = test_dra.run


def snapshot(admin: Rest, run: Run, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """This run's part of the cluster as ``kubectl get -o json`` would list it, its pods
    as the planner's default profile's."""
    items: list[dict[str, Any]] = []
    for node in admin.get("/api/v1/nodes")["items"]:
        if node["metadata"]["name"].startswith(f"{run.prefix}-"):
            items.append({"apiVersion": "v1", "kind": "Node", **node})
    for listed in admin.get(f"/api/v1/namespaces/{run.namespace}/pods")["items"]:
        listed["spec"]["schedulerName"] = "default-scheduler"
        items.append({"apiVersion": "v1", "kind": "Pod", **listed})
    kinds = (
        ("resourceslices", "ResourceSlice"),
        ("deviceclasses", "DeviceClass"),
        (f"namespaces/{run.namespace}/resourceclaims", "ResourceClaim"),
        (f"namespaces/{run.namespace}/resourceclaimtemplates", "ResourceClaimTemplate"),
    )
    for path, kind in kinds:
        for item in admin.get(f"{API}/{path}")["items"]:
            mine = item.get("spec", {}).get("driver") in (None, run.driver)
            if kind == "DeviceClass":
                mine = item["metadata"]["name"] == run.device_class
            if mine:
                items.append({"apiVersion": "resource.k8s.io/v1", "kind": kind, **item})
    return [*items, *extra]


def plan(items: list[dict[str, Any]]) -> tuple[dict[str, planner.Placement], ResourceCatalog]:
    cluster = objects.read_cluster(items)
    catalog = ResourceCatalog(cluster.resources)
    configuration = config.parse_configuration(None, registry.in_tree_registry())
    placed = planner.plan(cluster, configuration, seed=1, now=time.time(), resources=catalog)
    return {p.pod.split("/", 1)[1]: p for p in placed.placements}, catalog


def test_a_pod_waits_for_its_template_then_goes_where_the_plan_said(
    control_plane: ControlPlane, nodes: Nodes, run: Run
) -> None:
    admin = control_plane.admin
    make_nodes(nodes, run, "a", "b")
    publish(admin, run, "b", ["a100", "a100"])
    template(admin, run, "one-gpu")
    pod(admin, run, "waiter", template="later")
    pod(admin, run, "sentinel", template="one-gpu")
    # the controller made the sentinel's claim after it tried the waiter's
    assert wait_bound(admin, run, "sentinel") == "b"
    assert claim_of(admin, run, "waiter") == ""
    assert bound_node(admin, run, "waiter") == ""

    placed, _ = plan(snapshot(admin, run))
    assert "sentinel" not in placed  # bound: its claim's device is taken in the plan
    assert placed["waiter"].status is planner.Outcome.GATED
    assert placed["waiter"].message == (
        f'pod "{run.namespace}/waiter": ResourceClaim not created yet: ResourceClaimTemplate'
        f' "{run.namespace}/later" not found, the resourceclaim controller cannot create it'
    )

    later = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "later", "namespace": run.namespace},
        "spec": {"spec": requests(run)},
    }
    placed, catalog = plan(snapshot(admin, run, later))
    assert placed["waiter"].status is planner.Outcome.SCHEDULED
    assert placed["waiter"].node == run.node("b")
    planned = next(c for c in catalog.claims() if c.raw["metadata"]["name"].startswith("waiter-"))
    predicted = devices(dict(planned.raw), run)

    admin.create(f"{API}/namespaces/{run.namespace}/resourceclaimtemplates", later)
    node = wait_bound(admin, run, "waiter")
    found = claim(admin, run, claim_of(admin, run, "waiter"))
    assert node == "b"
    assert devices(found, run) == predicted
    assert re.fullmatch(r"waiter-gpu-[a-z0-9]{5}", found["metadata"]["name"])
    verdict("template-later", run, {"node": node, "devices": predicted})


def test_templates_watched_with_the_shipped_role(
    schedulers: processes.Process, metrics_token: str
) -> None:
    """nodeagent's scheduler listed and watched the templates (the role allows it), and no
    request of its was refused (401/403/422)."""
    text = scrape.metrics(schedulers, metrics_token)
    listed = [
        line
        for line in text.splitlines()
        if line.startswith("nodeagent_scheduler_api_requests_total{")
        and "resourceclaimtemplates" in line
        and 'code="200"' in line
    ]
    assert listed, "no successful request for resourceclaimtemplates"
    assert refused_requests(schedulers, metrics_token) == []
    assert schedulers.alive(), schedulers.tail()
