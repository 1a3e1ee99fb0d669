"""The security the manifests ship, enforced by the real apiserver:

* ``nodeagent scheduler`` (``--metrics-auth kubernetes``, its ServiceAccount's token,
  manifests/scheduler with its system:auth-delegator binding) asks the apiserver about
  every ``/metrics`` caller: no token is a 401, a ServiceAccount without the shipped
  metrics-reader grant a 403, a Prometheus-like one bound to it a 200; the probes are
  open.
* The node-confinement ValidatingAdmissionPolicy (manifests/components/node-confinement,
  on in the base) with the agent's shipped RBAC: a token bound to the agent's pod on node
  A may set the agent's condition and taint on A, and nothing else: not node B, not a
  kubelet condition, not a label; an admin is not matched. Each refusal is the policy's
  (its name is in the message), not RBAC's."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.controlplane import objects as o
from tests.controlplane import processes, scrape
from tests.controlplane.cluster import ControlPlane, Nodes, Rest
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

POLICY = "nodeagent-node-confinement"
OWN_CONDITION = "NodeAgentDiskPressure"
OWN_TAINT = "nodeagent.io/disk-pressure"
PROBES = ("/healthz", "/readyz", "/livez")
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def scheduler(control_plane: ControlPlane) -> Iterator[processes.Process]:
    """``nodeagent scheduler`` as manifests/scheduler deploys it: its RBAC, its config,
    its ServiceAccount's token, the default ``--metrics-auth kubernetes``."""
    control_plane.apply(o.kustomize(o.MANIFESTS / "scheduler"))
    kubeconfig = control_plane.service_account_kubeconfig(
        "nodeagent-scheduler", "nodeagent-scheduler"
    )
    process = processes.nodeagent_scheduler(
        control_plane,
        "scheduler-security",
        kubeconfig=kubeconfig,
        config=o.MANIFESTS / "scheduler" / "config.yaml",
    )
    with processes.stopped_after(process):
        eventually(lambda: not process.alive() or scrape.ready(process), timeout=60, what="ready")
        assert process.alive(), process.tail()
        yield process


class TestMetricsAreReviewedByTheApiserver:
    def test_no_token_is_401(self, scheduler: processes.Process) -> None:
        answer = scrape.get(scheduler, "/metrics")
        assert answer.status == 401, answer

    def test_a_token_the_apiserver_rejects_is_401(self, scheduler: processes.Process) -> None:
        answer = scrape.get(scheduler, "/metrics", token="not-a-token")
        assert answer.status == 401, answer

    def test_an_account_without_the_grant_is_403(
        self, control_plane: ControlPlane, namespace: str, scheduler: processes.Process
    ) -> None:
        token = control_plane.service_account_token(namespace, "not-prometheus")
        answer = scrape.get(scheduler, "/metrics", token=token)
        assert answer.status == 403, answer

    def test_the_metrics_reader_reads(
        self, scheduler: processes.Process, metrics_token: str
    ) -> None:
        answer = scrape.get(scheduler, "/metrics", token=metrics_token)
        assert answer.status == 200, answer
        assert "nodeagent_scheduler_api_requests_total" in answer.body

    @pytest.mark.parametrize("probe", PROBES)
    def test_probes_are_open(self, scheduler: processes.Process, probe: str) -> None:
        assert scrape.get(scheduler, probe).status == 200


def patch(client: Rest, path: str, body: dict[str, Any], kind: str = MERGE) -> tuple[int, Any]:
    return client.request("PATCH", path, body, content_type=kind)


def condition(kind: str, status: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "type": kind,
        "status": status,
        "reason": "Test",
        "message": "set by the test",
        "lastTransitionTime": now,
        "lastHeartbeatTime": now,
    }


def conditions(node: str, *entries: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    return f"/api/v1/nodes/{node}/status", {"status": {"conditions": list(entries)}}, STRATEGIC


def taints(node: str, key: str) -> tuple[str, dict[str, Any], str]:
    return (
        f"/api/v1/nodes/{node}",
        {"spec": {"taints": [{"key": key, "effect": "NoSchedule"}]}},
        MERGE,
    )


def label(node: str) -> tuple[str, dict[str, Any], str]:
    return f"/api/v1/nodes/{node}", {"metadata": {"labels": {"example.com/role": "x"}}}, MERGE


def refused_by_policy(answer: tuple[int, Any]) -> str:
    """The policy's message, asserting the refusal is the policy's (403 Forbidden)."""
    status, body = answer
    assert status == 403, answer
    message = str(body["message"])
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in message, message
    return message


@pytest.fixture(scope="module")
def shipped(control_plane: ControlPlane) -> list[dict[str, Any]]:
    """The base manifests applied: the agent's RBAC and the node-confinement policy."""
    documents = o.kustomize(o.MANIFESTS)
    control_plane.apply(documents)
    return documents


class TestNodeConfinement:
    @pytest.fixture
    def agent(
        self, control_plane: ControlPlane, nodes: Nodes, shipped: list[dict[str, Any]]
    ) -> Iterator[Rest]:
        """The agent's client with the token bound to its pod on ``confine-a``, once the
        apiserver enforces the policy (a new policy takes effect when it has loaded it)."""
        nodes.create(o.node("confine-a"))
        nodes.create(o.node("confine-b"))
        pod = f"nodeagent-{uuid.uuid4().hex[:8]}"
        token = o.agent_pod_token(control_plane, shipped, pod, "confine-a")
        client = Rest(control_plane.url, control_plane.ca.certificate, token=token)
        eventually(lambda: patch(client, *label("confine-b"))[0] == 403, what="the policy enforced")
        yield client
        control_plane.admin.request(
            "DELETE", f"/api/v1/namespaces/nodeagent-system/pods/{pod}", {"gracePeriodSeconds": 0}
        )

    def test_the_agent_sets_its_own_condition_and_taint_on_its_node(
        self, control_plane: ControlPlane, agent: Rest
    ) -> None:
        status, body = patch(agent, *conditions("confine-a", condition(OWN_CONDITION, "True")))
        assert status == 200, body
        status, body = patch(agent, *taints("confine-a", OWN_TAINT))
        assert status == 200, body
        node = control_plane.admin.get("/api/v1/nodes/confine-a")
        assert OWN_CONDITION in {c["type"] for c in node["status"]["conditions"]}
        assert [t["key"] for t in node["spec"]["taints"]] == [OWN_TAINT]

    @pytest.mark.parametrize(
        "change",
        [
            conditions("confine-b", condition(OWN_CONDITION, "True")),
            taints("confine-b", OWN_TAINT),
        ],
        ids=["condition", "taint"],
    )
    def test_another_node_is_refused(self, agent: Rest, change: tuple[str, Any, str]) -> None:
        message = refused_by_policy(patch(agent, *change))
        assert "only the Node its pod runs on (confine-a), not confine-b" in message

    @pytest.mark.parametrize(
        ("change", "says"),
        [
            (conditions("confine-a", condition("Ready", "False")), "own conditions"),
            (conditions("confine-a", condition("MemoryPressure", "True")), "own conditions"),
            (taints("confine-a", "node.kubernetes.io/not-ready"), "own taints"),
            (label("confine-a"), "labels"),
        ],
        ids=["Ready", "MemoryPressure", "foreign-taint", "label"],
    )
    def test_on_its_own_node_only_its_own_keys(
        self, agent: Rest, change: tuple[str, Any, str], says: str
    ) -> None:
        assert says in refused_by_policy(patch(agent, *change))

    def test_a_token_bound_to_no_pod_changes_no_node(
        self, control_plane: ControlPlane, agent: Rest
    ) -> None:
        token = control_plane.service_account_token("nodeagent-system", "nodeagent", create=False)
        unbound = Rest(control_plane.url, control_plane.ca.certificate, token=token)
        message = refused_by_policy(patch(unbound, *taints("confine-a", OWN_TAINT)))
        assert "its token is bound to no node" in message

    def test_an_admin_is_not_matched(self, control_plane: ControlPlane, agent: Rest) -> None:
        for change in (label("confine-b"), conditions("confine-b", condition("Ready", "False"))):
            status, body = patch(control_plane.admin, *change)
            assert status == 200, body
