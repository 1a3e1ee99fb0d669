"""The orderings of tests/scheduler/live/test_orderings.py as the real apiserver produces
them, with ``nodeagent scheduler`` running as deployed (tests/controlplane/test_scheduler):
nothing is held at the server here, so each test makes the race by acting during a burst
the scheduler is binding: pods patched (updates before, during and after their binding),
pods deleted, their node deleted.

What must hold after each: every pod bound at most once (no binding refused but a
deleted pod's, one Scheduled event per pod and per 201 among the scheduler's
``pods/binding`` requests), no node given more than its allocatable, and a follow-up pod
that needs exactly the capacity left on a node is bound there (no phantom usage).

Unlike the fake, whose immediate delete is atomic, the real apiserver's
``gracePeriodSeconds: 0`` delete first sets deletionTimestamp, and a binding in between
gets 409 ("is being deleted, cannot be assigned to a host"): a 409 alone does not mean a
second binding, so the scheduler's log names the refused pods."""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.controlplane import objects as o
from tests.controlplane import processes, scrape
from tests.controlplane.cluster import ApiError, ControlPlane, Nodes
from tests.controlplane.test_scheduler import leads, scheduler_kubeconfig, shipped_config, start
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

__all__ = ["scheduler_kubeconfig"]  # the fixture, shared with test_scheduler

BURST = 20
MILLICORES = 100
"""Each burst pod's request; burst nodes have 2000m, so a burst fills all but 500m of one."""


@pytest.fixture
def scheduler(
    control_plane: ControlPlane, scheduler_kubeconfig: Path, metrics_token: str, tmp_path: Path
) -> Iterator[processes.Process]:
    process = start(
        control_plane, "scheduler-orderings", scheduler_kubeconfig, shipped_config(tmp_path)
    )
    with processes.stopped_after(process):
        eventually(lambda: leads(process, metrics_token), what="the scheduler leads")
        yield process
    assert process.popen.returncode == 0, process.tail()


def binding_codes(process: processes.Process, token: str) -> collections.Counter[str]:
    """The scheduler's ``pods/binding`` requests by HTTP status code, from its /metrics."""
    codes: collections.Counter[str] = collections.Counter()
    for family in text_string_to_metric_families(scrape.metrics(process, token)):
        if family.name != "nodeagent_scheduler_api_requests":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels["resource"] == "pods/binding":
                codes[sample.labels["code"]] += int(sample.value)
    return codes


def refused(process: processes.Process, namespace: str) -> set[str]:
    """The pods of ``namespace`` whose binding the apiserver refused, from the scheduler's
    log (its metrics count codes, not pods)."""
    pattern = re.compile(rf"binding {namespace}/(\S+) to \S+ refused")
    return set(pattern.findall(process.log.read_text(errors="replace")))


def placements(plane: ControlPlane, namespace: str) -> dict[str, str]:
    """Pod name to its node ("" while pending), as the apiserver holds them."""
    pods = plane.admin.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in pods}


def create_burst(
    plane: ControlPlane, namespace: str, prefix: str, during: Callable[[int], None]
) -> list[str]:
    """``BURST`` pods created one after the other, ``during(i)`` called after the i-th:
    the scheduler binds the first ones while the next are created."""
    names = [f"{prefix}-{i}" for i in range(BURST)]
    for i, name in enumerate(names):
        plane.admin.create(
            f"/api/v1/namespaces/{namespace}/pods", o.pod(name, namespace, cpu=f"{MILLICORES}m")
        )
        during(i)
    return names


def warm_up(plane: ControlPlane, namespace: str) -> str:
    """One pod (of the burst's size) bound first: the scheduler then binds a burst while
    it is created, rather than all at once after its first pods."""
    plane.admin.create(
        f"/api/v1/namespaces/{namespace}/pods", o.pod("warm", namespace, cpu=f"{MILLICORES}m")
    )
    eventually(lambda: placements(plane, namespace)["warm"], what="the warm-up pod bound")
    return "warm"


def all_bound(plane: ControlPlane, namespace: str, names: list[str]) -> dict[str, str] | None:
    placed = placements(plane, namespace)
    return placed if all(placed.get(name) for name in names) else None


def bound_at_most_once(
    plane: ControlPlane,
    namespace: str,
    process: processes.Process,
    token: str,
    survivors: set[str],
    *,
    doomed: frozenset[str] = frozenset(),
) -> None:
    """No second binding of any pod (it would be a 409: only a ``doomed`` pod, deleted
    during the burst, may have a binding refused), one Scheduled event per pod and one
    for every pod still bound. The events are written asynchronously, and a binding's
    answer is counted in the scheduler's metrics after the API shows the pod bound (the
    binding process reports it back): both are waited for."""

    def scheduled() -> collections.Counter[str]:
        counts: collections.Counter[str] = collections.Counter()
        for event in o.events(plane.admin, namespace, reason="Scheduled"):
            counts[event["involvedObject"]["name"]] += event.get("count") or 1
        return counts

    assert refused(process, namespace) <= doomed, process.tail()

    def settled() -> tuple[collections.Counter[str], collections.Counter[str]] | None:
        counts, codes = scheduled(), binding_codes(process, token)
        if survivors <= set(counts) and sum(counts.values()) == codes["201"]:
            return counts, codes
        return None

    counts, codes = eventually(settled, what="a Scheduled event per binding counted")
    if not doomed:
        assert codes["409"] == 0, f"a binding of a bound pod: {codes}"
    assert all(n == 1 for n in counts.values()), f"a pod reported bound twice: {counts}"


def fits(placed: dict[str, str], node: str, allocatable: int) -> None:
    used = MILLICORES * sum(1 for where in placed.values() if where == node)
    assert used <= allocatable, f"{node}: {used}m bound on {allocatable}m allocatable"


def follow_up(plane: ControlPlane, namespace: str, name: str, millicores: int, node: str) -> None:
    """A pod needing exactly ``millicores`` (what is left on ``node``) is bound there."""
    plane.admin.create(
        f"/api/v1/namespaces/{namespace}/pods", o.pod(name, namespace, cpu=f"{millicores}m")
    )
    eventually(
        lambda: placements(plane, namespace).get(name) == node,
        timeout=20,
        what=f"{name} ({millicores}m, all that is left) bound on {node}",
    )


class TestOrderingsOnTheRealServer:
    def test_pods_updated_while_they_are_bound_are_bound_once(
        self,
        *,
        control_plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        scheduler: processes.Process,
        metrics_token: str,
    ) -> None:
        nodes.create(o.node("order-update", cpu="2500m"))
        created: list[str] = []
        stop = threading.Event()
        before: collections.Counter[str] = collections.Counter()
        after: collections.Counter[str] = collections.Counter()

        def touch() -> None:
            # annotation patches, as a controller or `kubectl annotate` sends, from each
            # pod's creation on: some reach the server before its binding (the pods are
            # held by a scheduling gate until each has had one: a fast binding would
            # otherwise win the race every time), some during it, some after
            while not stop.is_set():
                for name in list(created):
                    answer = control_plane.admin.merge_patch(
                        f"/api/v1/namespaces/{namespace}/pods/{name}",
                        {"metadata": {"annotations": {"touched": str(before[name] + after[name])}}},
                    )
                    (after if answer["spec"].get("nodeName") else before)[name] += 1

        toucher = threading.Thread(target=touch, daemon=True)
        toucher.start()
        try:
            names = [f"upd-{i}" for i in range(BURST)]
            for name in names:
                held = o.pod(name, namespace, cpu=f"{MILLICORES}m")
                held["spec"]["schedulingGates"] = [{"name": "nodeagent.io/test-hold"}]
                control_plane.admin.create(f"/api/v1/namespaces/{namespace}/pods", held)
                created.append(name)
            eventually(
                lambda: all(before[name] >= 1 for name in names), what="updates before binding"
            )
            for name in names:
                control_plane.admin.merge_patch(
                    f"/api/v1/namespaces/{namespace}/pods/{name}",
                    {"spec": {"schedulingGates": None}},
                )
            placed = eventually(
                lambda: all_bound(control_plane, namespace, names), what="the burst bound"
            )
            eventually(
                lambda: all(after[name] >= 2 for name in names), what="updates after the bindings"
            )
        finally:
            stop.set()
            toucher.join(timeout=30)
        assert any(before[name] and after[name] for name in names), (before, after)
        fits(placed, "order-update", 2500)
        bound_at_most_once(control_plane, namespace, scheduler, metrics_token, set(names))
        # one pod more than is left is refused, one of exactly what is left is bound
        control_plane.admin.create(
            f"/api/v1/namespaces/{namespace}/pods", o.pod("too-big", namespace, cpu="501m")
        )
        follow_up(control_plane, namespace, "rest", 500, "order-update")
        assert placements(control_plane, namespace)["too-big"] == ""

    def test_pods_deleted_while_the_burst_is_bound_leave_no_usage(
        self,
        *,
        control_plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        scheduler: processes.Process,
        metrics_token: str,
    ) -> None:
        nodes.create(o.node("order-delete", cpu="2"))
        # each fourth pod deleted once the next is created: a few ms after it, when its
        # binding may be done, in flight or not yet sent
        doomed = [f"del-{i}" for i in range(2, BURST, 4)]

        def delete(i: int) -> None:
            if f"del-{i - 1}" in doomed:
                control_plane.admin.delete(
                    f"/api/v1/namespaces/{namespace}/pods/del-{i - 1}", {"gracePeriodSeconds": 0}
                )

        warm = warm_up(control_plane, namespace)
        names = [warm, *create_burst(control_plane, namespace, "del", delete)]
        survivors = [n for n in names if n not in doomed]
        placed = eventually(
            lambda: all_bound(control_plane, namespace, survivors), what="the survivors bound"
        )
        assert set(placed) == set(survivors)
        fits(placed, "order-delete", 2000)
        # the real apiserver answers a binding of a pod being deleted 409 ("is being
        # deleted, cannot be assigned to a host") and of one gone 404: only a doomed pod
        # may get either (bound_at_most_once reads which), and no pod more than one
        # binding request
        codes = binding_codes(scheduler, metrics_token)
        assert set(codes) <= {"201", "404", "409"}, codes
        assert sum(codes.values()) <= len(names), codes
        left = 2000 - MILLICORES * len(survivors)
        follow_up(control_plane, namespace, "rest", left, "order-delete")
        bound_at_most_once(
            control_plane,
            namespace,
            scheduler,
            metrics_token,
            {*survivors, "rest"},
            doomed=frozenset(doomed),
        )

    def test_a_node_deleted_during_the_burst(
        self,
        *,
        control_plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        scheduler: processes.Process,
        metrics_token: str,
    ) -> None:
        admin = control_plane.admin
        nodes.create(o.node("order-gone", cpu="2"))

        def delete_mid_burst() -> None:
            # polled without pause: the node goes once a few of the burst are bound to it,
            # while the next are created, scheduled and bound
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if sum(1 for where in placements(control_plane, namespace).values() if where) > 4:
                    admin.delete("/api/v1/nodes/order-gone")
                    return

        warm = warm_up(control_plane, namespace)
        deleter = threading.Thread(target=delete_mid_burst, daemon=True)
        deleter.start()
        names = [warm, *create_burst(control_plane, namespace, "node", lambda i: None)]
        deleter.join(timeout=30)
        assert not deleter.is_alive()
        nodes.create(o.node("order-other", cpu="2"))
        # bindings in flight to the deleted node succeed (the binding does not check the
        # node, as on the fake); the rest go to the new node
        placed = eventually(
            lambda: all_bound(control_plane, namespace, names), what="the burst bound"
        )
        assert set(placed.values()) <= {"order-gone", "order-other"}, placed
        fits(placed, "order-other", 2000)
        bound_at_most_once(control_plane, namespace, scheduler, metrics_token, set(names))
        on_other = sum(1 for where in placed.values() if where == "order-other")
        follow_up(control_plane, namespace, "rest", 2000 - MILLICORES * on_other, "order-other")
        # the pod GC (not run here) removes the orphans; the node comes back empty
        for name, where in placed.items():
            if where == "order-gone":
                try:
                    admin.delete(
                        f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0}
                    )
                except ApiError as error:
                    assert error.status == 404, error
        nodes.create(o.node("order-gone", cpu="2"))
        follow_up(control_plane, namespace, "whole", 2000, "order-gone")
        assert binding_codes(scheduler, metrics_token)["409"] == 0
