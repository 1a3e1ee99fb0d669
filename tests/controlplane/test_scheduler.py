"""``nodeagent scheduler`` against the real apiserver, as deployed: the shipped
configuration and RBAC (manifests/scheduler), the ServiceAccount's own token, two
replicas electing a leader on a real Lease. Pods are bound through the real binding
subresource, PodScheduled conditions and events pass the real validation, preemption
honours a PodDisruptionBudget whose status the real disruption controller computes.
A verb the shipped ClusterRole lacks shows as a 403 in the scheduler's own request
metrics, and fails the test."""

from __future__ import annotations

import functools
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane import objects as o
from tests.controlplane import processes, scrape
from tests.controlplane.cluster import ControlPlane, Nodes
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

SCHEDULER_NAMESPACE = "nodeagent-scheduler"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{SCHEDULER_NAMESPACE}/leases/nodeagent-scheduler"


@pytest.fixture(scope="module")
def scheduler_kubeconfig(control_plane: ControlPlane) -> Path:
    """The shipped objects of manifests/scheduler applied, and a kubeconfig holding the
    scheduler ServiceAccount's token (what its pod would mount)."""
    control_plane.apply(o.kustomize(o.MANIFESTS / "scheduler"))
    return control_plane.service_account_kubeconfig(SCHEDULER_NAMESPACE, "nodeagent-scheduler")


@pytest.fixture(scope="module")
def priority_classes(control_plane: ControlPlane) -> Iterator[dict[str, str]]:
    """A low and a high class: the Priority admission plugin refuses a pod that sets
    spec.priority itself, so pods name a class."""
    classes = {"low": "t-low", "high": "t-high"}
    for value, name in ((100, "t-low"), (1000, "t-high")):
        control_plane.admin.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"metadata": {"name": name}, "value": value},
        )
    yield classes
    for name in classes.values():
        control_plane.admin.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def shipped_config(tmp_path: Path, *, lease_seconds: int | None = None) -> Path:
    """manifests/scheduler/config.yaml; with ``lease_seconds``, a shorter lease so a
    failover fits a test (leaseDuration, renewDeadline 3/4 of it, retryPeriod 1 s)."""
    document = yaml.safe_load((o.MANIFESTS / "scheduler" / "config.yaml").read_text())
    if lease_seconds is not None:
        document["leaderElection"].update(
            leaseDuration=f"{lease_seconds}s",
            renewDeadline=f"{lease_seconds * 3 // 4}s",
            retryPeriod="1s",
        )
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def leads(process: processes.Process, token: str) -> bool:
    try:
        return 'leader_election_master_status{name="nodeagent-scheduler"} 1.0' in scrape.metrics(
            process, token
        )
    except OSError:
        return False


def refused_requests(process: processes.Process, token: str) -> list[str]:
    """The scheduler's API requests answered 401/403/422: a missing RBAC verb or a field
    the real API rejects."""
    pattern = re.compile(
        r'^nodeagent_scheduler_api_requests_total\{([^}]*code="(?:401|403|422)"[^}]*)\} '
    )
    text = scrape.metrics(process, token)
    return [m.group(1) for line in text.splitlines() if (m := pattern.match(line))]


def bindings_in_flight(process: processes.Process, token: str) -> float:
    """The scheduler's binding cycles started and not ended."""
    pattern = re.compile(r"^nodeagent_scheduler_bindings_in_flight (\S+)$", re.MULTILINE)
    found = pattern.search(scrape.metrics(process, token))
    assert found is not None, "nodeagent_scheduler_bindings_in_flight is not exposed"
    return float(found.group(1))


def start(plane: ControlPlane, name: str, kubeconfig: Path, config: Path) -> processes.Process:
    process = processes.nodeagent_scheduler(plane, name, kubeconfig=kubeconfig, config=config)
    eventually(
        lambda: not process.alive() or scrape.ready(process), timeout=60, what=f"{name} ready"
    )
    assert process.alive(), process.tail()
    return process


def bound_node(plane: ControlPlane, namespace: str, name: str) -> str:
    return str(o.get_pod(plane.admin, namespace, name)["spec"].get("nodeName") or "")


class TestBinding:
    def test_pods_are_bound_with_conditions_and_events_and_the_misfit_is_reported(
        self,
        *,
        control_plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        scheduler_kubeconfig: Path,
        metrics_token: str,
        tmp_path: Path,
    ) -> None:
        admin = control_plane.admin
        for name in ("bind-a", "bind-b"):
            nodes.create(o.node(name, cpu="2"))
        fitting = [f"fit-{i}" for i in range(5)]
        for name in [*fitting, "too-big"]:
            cpu = "3" if name == "too-big" else "500m"
            admin.create(f"/api/v1/namespaces/{namespace}/pods", o.pod(name, namespace, cpu=cpu))
        scheduler = start(
            control_plane, "scheduler-binding", scheduler_kubeconfig, shipped_config(tmp_path)
        )
        with processes.stopped_after(scheduler):
            for name in fitting:
                eventually(functools.partial(bound_node, control_plane, namespace, name), what=name)
            placed = {bound_node(control_plane, namespace, name) for name in fitting}
            assert placed == {"bind-a", "bind-b"}
            for name in fitting:
                scheduled = o.pod_condition(o.get_pod(admin, namespace, name), "PodScheduled")
                assert scheduled is not None and scheduled["status"] == "True"
            misfit = eventually(
                lambda: o.pod_condition(o.get_pod(admin, namespace, "too-big"), "PodScheduled"),
                what="too-big's PodScheduled condition",
            )
            assert misfit["status"] == "False"
            assert misfit["reason"] == "Unschedulable"
            assert "Insufficient cpu" in misfit["message"]

            def reasons() -> dict[str, set[str]]:
                seen: dict[str, set[str]] = {}
                for event in o.events(admin, namespace):
                    seen.setdefault(event["reason"], set()).add(event["involvedObject"]["name"])
                return seen

            eventually(
                lambda: (
                    reasons().get("Scheduled") == set(fitting)
                    and reasons().get("FailedScheduling") == {"too-big"}
                ),
                what="Scheduled and FailedScheduling events",
            )
            assert refused_requests(scheduler, metrics_token) == []
        assert scheduler.popen.returncode == 0, scheduler.tail()


class TestLeaderElection:
    def test_two_replicas_bind_each_pod_once_and_the_standby_takes_over_a_dead_leader(
        self,
        *,
        control_plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        scheduler_kubeconfig: Path,
        metrics_token: str,
        tmp_path: Path,
    ) -> None:
        admin = control_plane.admin
        nodes.create(o.node("lease-a", cpu="8"))
        config = shipped_config(tmp_path, lease_seconds=4)
        first = start(control_plane, "scheduler-replica-1", scheduler_kubeconfig, config)
        second = start(control_plane, "scheduler-replica-2", scheduler_kubeconfig, config)
        with processes.stopped_after(first, second):
            leader = eventually(
                lambda: next((p for p in (first, second) if leads(p, metrics_token)), None),
                what="a leader",
            )
            standby = second if leader is first else first
            assert not leads(standby, metrics_token)
            lease = admin.get(LEASE)
            transitions = lease["spec"].get("leaseTransitions", 0)

            def create(names: list[str]) -> None:
                for name in names:
                    admin.create(f"/api/v1/namespaces/{namespace}/pods", o.pod(name, namespace))
                for name in names:
                    eventually(
                        functools.partial(bound_node, control_plane, namespace, name), what=name
                    )

            before = [f"before-{i}" for i in range(6)]
            create(before)
            leader.signal(signal.SIGKILL)
            leader.popen.wait(timeout=10)
            eventually(lambda: leads(standby, metrics_token), timeout=20, what="the standby leads")
            after = [f"after-{i}" for i in range(6)]
            create(after)

            taken = admin.get(LEASE)["spec"]
            assert taken["holderIdentity"] != lease["spec"]["holderIdentity"]
            assert taken["leaseTransitions"] == transitions + 1

            def scheduled() -> list[str]:
                events = o.events(admin, namespace, reason="Scheduled")
                assert all(e.get("count", 1) == 1 for e in events)
                return [e["involvedObject"]["name"] for e in events]

            # the new leader's events all arrive; the killed one's last few may not have
            # left it (as with kube-scheduler), but no pod is reported bound twice
            eventually(lambda: set(after) <= set(scheduled()), what="the new leader's events")
            assert len(scheduled()) == len(set(scheduled()))
            assert set(scheduled()) <= set(before + after)
            # the new leader bound nothing twice: a second binding would be a 409
            assert not re.search(
                r'nodeagent_scheduler_api_requests_total\{code="409",resource="pods/binding"',
                scrape.metrics(standby, metrics_token),
            )
            assert refused_requests(standby, metrics_token) == []


class TestPreemption:
    def test_the_victim_is_the_pod_its_budget_allows_to_go(
        self,
        *,
        control_plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        scheduler_kubeconfig: Path,
        metrics_token: str,
        priority_classes: dict[str, str],
        tmp_path: Path,
    ) -> None:
        admin = control_plane.admin
        nodes.create(o.node("preempt-a", cpu="1"))
        pods = f"/api/v1/namespaces/{namespace}/pods"
        for name, app in (("protected", "guarded"), ("free", "loose")):
            admin.create(
                pods,
                o.pod(
                    name,
                    namespace,
                    cpu="500m",
                    priority_class=priority_classes["low"],
                    labels={"app": app},
                    node_name="preempt-a",
                ),
            )
            o.running(admin, namespace, name)
        admin.create(
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
            {
                "metadata": {"name": "guarded"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
            },
        )
        budget_path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/guarded"

        def budget_settled() -> dict[str, Any] | None:
            status: dict[str, Any] = admin.get(budget_path).get("status") or {}
            return status if status.get("currentHealthy") == 1 else None

        status = eventually(budget_settled, what="the disruption controller's PDB status")
        assert status["disruptionsAllowed"] == 0

        scheduler = start(
            control_plane, "scheduler-preemption", scheduler_kubeconfig, shipped_config(tmp_path)
        )
        with processes.stopped_after(scheduler):
            admin.create(
                pods,
                o.pod("urgent", namespace, cpu="500m", priority_class=priority_classes["high"]),
            )

            def deleted(name: str) -> dict[str, Any] | None:
                pod = o.get_pod(admin, namespace, name)
                return pod if pod["metadata"].get("deletionTimestamp") else None

            victim = eventually(
                functools.partial(deleted, "free"), what="the unprotected pod is deleted"
            )
            target = o.pod_condition(victim, "DisruptionTarget")
            assert target is not None and target["reason"] == "PreemptionByScheduler"
            eventually(
                lambda: (
                    o.get_pod(admin, namespace, "urgent")["status"].get("nominatedNodeName")
                    == "preempt-a"
                ),
                what="the preemptor's nomination",
            )
            protected = o.get_pod(admin, namespace, "protected")
            assert "deletionTimestamp" not in protected["metadata"]
            # no kubelet here: finish the victim's termination as its kubelet would
            admin.delete(f"{pods}/free", {"gracePeriodSeconds": 0})
            eventually(
                lambda: bound_node(control_plane, namespace, "urgent") == "preempt-a",
                what="the preemptor is bound",
            )
            eventually(
                lambda: (
                    {
                        e["involvedObject"]["name"]
                        for e in o.events(admin, namespace, reason="Preempted")
                    }
                    == {"free"}
                ),
                what="a Preempted event for the victim",
            )
            assert refused_requests(scheduler, metrics_token) == []
