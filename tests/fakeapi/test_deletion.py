"""A pod's deletion in the fake, as kube-apiserver performs it (the control-plane test
``deletion_marks_the_pod_before_it_removes_it`` holds the same table against the real
one): the pod is first marked, ``deletionTimestamp`` and ``deletionGracePeriodSeconds``
written as one MODIFIED event, and removed afterwards once its grace period is 0. The
grace is what was asked, else the pod's own; a pod that never ran on a node, or has
finished, gets 0 whatever was asked; a deletion may shorten a running grace, never
lengthen it. A binding between the mark and the removal is refused 409."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeagent.base import errors
from tests.doubles import kube as fake
from tests.fakeapi import objects

NO_KUBELET = 3600.0
"""Seconds a gracefully deleted pod stays terminating: no kubelet ever finishes it."""


def _events_after(cluster: fake.FakeCluster, since: int) -> list[tuple[str, Any]]:
    """(type, deletionGracePeriodSeconds) of the pod events after ``since``."""
    return [
        (str(e.type), e.object["metadata"].get("deletionGracePeriodSeconds"))
        for e in cluster.watch("pods", resource_version=str(since), timeout_seconds=0.05)
        if e.type != "BOOKMARK"
    ]


@pytest.mark.parametrize(
    ("shape", "asked", "events", "stays"),
    [
        ("unbound", 30, [("MODIFIED", 0), ("DELETED", 0)], False),
        ("unbound", None, [("MODIFIED", 0), ("DELETED", 0)], False),
        ("running", 0, [("MODIFIED", 0), ("DELETED", 0)], False),
        ("running", None, [("MODIFIED", 45)], True),
        ("running", 10, [("MODIFIED", 10)], True),
        ("failed", 30, [("MODIFIED", 0), ("DELETED", 0)], False),
        ("terminating", 0, [("MODIFIED", 0), ("DELETED", 0)], False),
        ("terminating", 5, [("MODIFIED", 5)], True),
        ("terminating", 60, [], True),
    ],
)
def test_a_deletion_marks_the_pod_then_removes_it_once_its_grace_is_zero(
    shape: str, asked: int | None, events: list[tuple[str, Any]], stays: bool
) -> None:
    cluster = fake.FakeCluster(termination_delay=NO_KUBELET)
    pod = objects.pod(
        "p",
        node_name="" if shape == "unbound" else "node-a",
        phase={"unbound": "Pending", "failed": "Failed"}.get(shape, "Running"),
        grace=45,
    )
    cluster.create("pods", pod)
    if shape == "terminating":
        cluster.delete("pods", "default", "p", grace_period_seconds=30)
    since = cluster.resource_version
    answer = cluster.delete("pods", "default", "p", grace_period_seconds=asked)
    try:
        assert _events_after(cluster, since) == events
        remaining = {p["metadata"]["name"] for p in cluster.list("pods").items}
        assert ("p" in remaining) == stays
        # the answer is the pod as marked, as kube-apiserver returns it
        assert answer["metadata"].get("deletionTimestamp")
    finally:
        cluster.close()


def test_the_deadline_is_now_plus_the_grace_and_a_shorter_grace_moves_it_earlier() -> None:
    wall = [1_800_000_000.0]
    cluster = fake.FakeCluster(termination_delay=NO_KUBELET, wall=lambda: wall[0])
    cluster.create("pods", objects.pod("p", grace=45))
    try:
        marked = cluster.delete("pods", "default", "p", grace_period_seconds=30)
        assert marked["metadata"]["deletionTimestamp"] == "2027-01-15T08:00:30Z"
        wall[0] += 7
        shortened = cluster.delete("pods", "default", "p", grace_period_seconds=10)
        assert shortened["metadata"]["deletionTimestamp"] == "2027-01-15T08:00:10Z"
    finally:
        cluster.close()


def test_a_binding_of_a_pod_being_deleted_is_refused_409() -> None:
    cluster = fake.FakeCluster(termination_delay=NO_KUBELET)
    cluster.create("nodes", objects.node("node-a"))
    pod = objects.pod("p", node_name="", phase="Pending", uid="uid-p")
    cluster.create("pods", pod)
    try:
        # a marked, unbound pod: the instant between the mark and the removal, held open
        marked = copy.deepcopy(cluster.get("pods", "default", "p"))
        marked["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z"
        marked["metadata"]["deletionGracePeriodSeconds"] = 0
        cluster.replace("pods", "default", "p", marked)
        with pytest.raises(errors.Conflict, match="is being deleted"):
            cluster.bind("default", "p", uid="uid-p", node_name="node-a")
    finally:
        cluster.close()
