"""Leader election: the pure decision (client-go's rules), and two replicas over HTTP that
never both bind, with handover within leaseDuration + retryPeriod."""

from __future__ import annotations

import time
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import given

from nodeagent.scheduler.live.leader import Action, LeaderElectionSettings, LeaseRecord, decide
from nodeagent.scheduler.live.queue import Where
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler.live import harness as h
from tests.scheduler.live.harness import node_of
from tests.waiting import eventually

FAST = LeaderElectionSettings(
    leader_elect=True,
    lease_duration=4.0,
    renew_deadline=3.0,
    retry_period=0.5,
    resource_name="nodeagent-scheduler",
    resource_namespace="kube-system",
)


def test_no_lease_or_no_holder_is_taken() -> None:
    assert decide(None, 0.0, "me", 100.0, 15) is Action.TAKE
    assert decide(LeaseRecord(""), 99.0, "me", 100.0, 15) is Action.TAKE


def test_own_lease_is_renewed() -> None:
    assert decide(LeaseRecord("me", 15), 0.0, "me", 1000.0, 15) is Action.RENEW


@given(st.integers(0, 10**6), st.integers(0, 100_000), st.integers(1, 60_000))
def test_another_holders_lease_is_taken_only_after_its_duration_unobserved(
    observed_ms: int, elapsed_ms: int, duration_ms: int
) -> None:
    observed_at, elapsed, duration = observed_ms / 8, elapsed_ms / 8, duration_ms / 8
    action = decide(LeaseRecord("other", duration), observed_at, "me", observed_at + elapsed, 15)
    assert action is (Action.TAKE if elapsed > duration else Action.WAIT)


def test_two_replicas_bind_each_pod_once_and_hand_over_when_the_leader_dies(
    fake_api: FakeAPIServer, bind_process_kubeconfig: Path | None
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1", cpu="64"))
    live = h.settings(lease=FAST)
    kubeconfig = bind_process_kubeconfig
    first = h.start(fake_api, live=live, identity="replica-a", bind_process_kubeconfig=kubeconfig)
    eventually(lambda: first.elector is not None and first.elector.is_leader())
    second = h.start(fake_api, live=live, identity="replica-b", bind_process_kubeconfig=kubeconfig)
    try:
        for i in range(20):
            cluster.create("pods", h.pod(f"p{i}"))
        eventually(lambda: all(node_of(fake_api, f"p{i}") for i in range(20)))
        # the API shows a pod bound before its binding's answer has been handled
        eventually(lambda: first.bound_count == 20, what="the leader counted its 20 bindings")
        assert second.elector is not None and not second.elector.is_leader()
        assert second.bound_count == 0
        assert second.readiness().ok, "a healthy standby is ready"
        lease = cluster.get("leases", "kube-system", "nodeagent-scheduler")
        assert lease["spec"]["holderIdentity"] == "replica-a"

        # the leader dies without releasing (kill -9): the standby waits out the lease
        assert first.elector is not None
        first.elector._stop.set()
        first.stop(bind_timeout=1)
        killed = time.monotonic()
        eventually(lambda: second.elector is not None and second.elector.is_leader(), timeout=10)
        handover = time.monotonic() - killed
        assert handover <= FAST.lease_duration + FAST.retry_period + 3.0  # 3 s: a loaded CI
        for i in range(20, 30):
            cluster.create("pods", h.pod(f"p{i}"))
        eventually(lambda: all(node_of(fake_api, f"p{i}") for i in range(20, 30)))
        holders = [b[1] for b in cluster.bindings]
        assert len(holders) == len(set(holders)) == 30, "every pod bound exactly once"
        lease = cluster.get("leases", "kube-system", "nodeagent-scheduler")
        assert lease["spec"]["holderIdentity"] == "replica-b"
        assert lease["spec"]["leaseTransitions"] == 1
    finally:
        second.stop(bind_timeout=1)
    released = cluster.get("leases", "kube-system", "nodeagent-scheduler")["spec"]
    assert released["holderIdentity"] == "", "a clean stop releases the lease"


def test_a_leader_that_cannot_renew_stops_at_once(
    fake_api: FakeAPIServer, bind_process_kubeconfig: Path | None
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1"))
    scheduler = h.start(
        fake_api,
        live=h.settings(lease=FAST),
        identity="lonely",
        bind_process_kubeconfig=bind_process_kubeconfig,
    )
    try:
        eventually(lambda: scheduler.elector is not None and scheduler.elector.is_leader())
        fake_api.fail_next(1000, status=503, path="/leases")
        cut = time.monotonic()
        eventually(lambda: scheduler.lost, timeout=FAST.renew_deadline + 3)
        assert time.monotonic() - cut <= FAST.renew_deadline + FAST.retry_period + 3.0
        assert not scheduler.may_bind() and not scheduler.readiness().ok
        binder = scheduler.process_binder
        if binder is not None:  # killed: nothing it held may go out now
            eventually(lambda: binder.pid is None, timeout=5, what="binding process killed")
        fake_api.clear_faults()
        cluster.create("pods", h.pod("late"))
        eventually(lambda: scheduler.pending_pods.get(("default", "late")) is not None, what="seen")
        uid = str(cluster.get("pods", "default", "late")["metadata"]["uid"])
        # seen and queued, never popped: the scheduling loop does not pop without the
        # lease, and the binder refuses without it
        assert scheduler.queue.where(uid) is Where.ACTIVE and not scheduler.may_bind()
        assert node_of(fake_api, "late") == "", "a replica that lost the lease never binds"
        assert not fake_api.requests_to("POST", "/pods/late/binding$")
    finally:
        scheduler.stop(bind_timeout=1)
