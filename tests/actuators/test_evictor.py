"""Evictions through the real HTTP client against the fake API server: grace period and
uid precondition on the wire, PodDisruptionBudget refusal -> next candidate, the hard
threshold bypass, once-only, the cap, dry-run, safety refusals, retries through 5xx and
an outage without repeating an eviction, and aggregated events."""

from __future__ import annotations

import dataclasses

import pytest

from nodeagent.actuators import events, evictor, safety
from nodeagent.actuators.evictor import Outcome
from nodeagent.base.clock import FakeClock
from nodeagent.eviction import engine
from nodeagent.kube import events as kube_events
from nodeagent.kube import http, selectors
from nodeagent.model import Eviction, LocalStorageLimit, PodInfo, PodUID, Signal
from tests.actuators.builders import decision, pod_info
from tests.eviction import builders as eviction_builders
from tests.fakeapi import objects
from tests.fakeapi.server import FakeAPIServer

NAMES = ("p1", "p2", "p3", "p4", "p5", "p6", "p7")


@pytest.fixture
def cluster(fake_api: FakeAPIServer) -> FakeAPIServer:
    fake_api.cluster.create("nodes", objects.node("node-a"))
    for name in NAMES:
        fake_api.cluster.create("pods", objects.pod(name, uid=f"uid-{name}", labels={"app": name}))
    return fake_api


def pods(*names: str) -> tuple[PodInfo, ...]:
    return tuple(pod_info(name) for name in names)


def make(
    kube: http.HTTPKubeClient,
    clock: FakeClock,
    *,
    dry_run: bool = False,
    policy: safety.SafetyPolicy | None = None,
    **options: object,
) -> tuple[evictor.Evictor, events.AgentEventRecorder]:
    recorder = events.AgentEventRecorder(kube, node_name="node-a", clock=clock, dry_run=dry_run)
    return (
        evictor.Evictor(
            kube,
            clock=clock,
            recorder=recorder,
            policy=policy or safety.SafetyPolicy(),
            dry_run=dry_run,
            **options,  # type: ignore[arg-type]
        ),
        recorder,
    )


def outcomes(results: tuple[evictor.EvictionResult, ...]) -> list[tuple[str, Outcome]]:
    return [(r.pod, r.outcome) for r in results]


def present(api: FakeAPIServer) -> set[PodUID]:
    return {PodUID(p["metadata"]["uid"]) for p in api.cluster.list("pods").items}


def test_evicts_with_the_decisions_grace_and_uid(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, _ = make(kube, clock)
    results = ev.apply(decision(evict=pods("p1"), hard=False))
    assert outcomes(results) == [("default/p1", Outcome.EVICTED)]
    body = cluster.requests_to("POST", "/pods/p1/eviction$")[0].body
    assert body["deleteOptions"] == {"gracePeriodSeconds": 30, "preconditions": {"uid": "uid-p1"}}
    reasons = [e["reason"] for e in cluster.cluster.list("events").items]
    assert sorted(reasons) == ["Evicted", "EvictionThresholdMet"]
    evicted = next(e for e in cluster.cluster.list("events").items if e["reason"] == "Evicted")
    assert evicted["involvedObject"]["name"] == "p1"
    assert evicted["message"].startswith("The node was low on resource: memory.")


def test_a_zero_grace_is_sent_as_one_second_never_as_a_force_delete(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, _ = make(kube, clock)
    soft = decision(evict=pods("p1"), hard=False)
    zero = dataclasses.replace(soft.evictions[0], grace_period_seconds=0)
    results = ev.apply(dataclasses.replace(soft, evictions=(zero,), candidates=(zero,)))
    assert [(r.outcome, r.grace_period_seconds) for r in results] == [(Outcome.EVICTED, 1)]
    body = cluster.requests_to("POST", "/pods/p1/eviction$")[0].body
    assert body["deleteOptions"]["gracePeriodSeconds"] == 1


def test_pdb_refusal_moves_to_the_next_candidate_without_retrying(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    cluster.cluster.add_pdb("default", "pdb", selector="app in (p1,p2)")
    ev, _ = make(kube, clock)
    results = ev.apply(decision(evict=pods("p1"), candidates=pods("p2", "p3"), hard=False))
    assert outcomes(results) == [
        ("default/p1", Outcome.BLOCKED_BY_PDB),
        ("default/p2", Outcome.BLOCKED_BY_PDB),
        ("default/p3", Outcome.EVICTED),
    ]
    assert [r.name for r in cluster.cluster.evictions] == ["p1", "p2", "p3"]


def test_hard_threshold_bypass_deletes_with_one_second_grace(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    cluster.cluster.add_pdb("default", "pdb", selector="app=p1")
    ev, _ = make(kube, clock, hard_bypasses_pdb=True)
    results = ev.apply(decision(evict=pods("p1"), candidates=pods("p2"), hard=True))
    assert outcomes(results) == [("default/p1", Outcome.DELETED)]
    assert cluster.cluster.deletions[-1].grace_period_seconds == 1
    soft = ev.apply(decision(evict=pods("p3"), hard=False))
    assert outcomes(soft) == [("default/p3", Outcome.EVICTED)]
    cluster.cluster.add_pdb("default", "pdb4", selector="app=p4")
    blocked = ev.apply(decision(evict=pods("p4"), hard=False))
    assert outcomes(blocked) == [("default/p4", Outcome.BLOCKED_BY_PDB)], "soft: never bypass"


def test_a_local_storage_eviction_is_immediate_like_a_hard_one(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    """The kubelet kills a pod over its local-storage limit at once (grace override 0),
    as for a hard threshold: it is reported hard, and with the hard-eviction bypass a
    PodDisruptionBudget does not keep it, though no threshold of its signal is met."""
    cluster.cluster.add_pdb("default", "pdb", selector="app in (p1,p2)")
    over = dataclasses.replace(
        decision(evict=pods("p1"), hard=False),
        thresholds_met=(),
        evictions=(
            Eviction(
                pod_info("p1"),
                LocalStorageLimit.POD,
                1,
                "Pod ephemeral local storage usage exceeds the total limit of containers 1Gi. ",
            ),
        ),
    )
    over = dataclasses.replace(over, candidates=over.evictions)
    ev, _ = make(kube, clock, hard_bypasses_pdb=True)
    (result,) = ev.apply(over)
    assert (result.outcome, result.hard, result.grace_period_seconds) == (
        Outcome.DELETED,
        True,
        1,
    )
    without_bypass, _ = make(kube, clock)
    other = dataclasses.replace(
        over,
        evictions=(dataclasses.replace(over.evictions[0], pod=pod_info("p2")),),
    )
    (blocked,) = without_bypass.apply(dataclasses.replace(other, candidates=other.evictions))
    assert (blocked.outcome, blocked.hard) == (Outcome.BLOCKED_BY_PDB, True)


def test_an_over_limit_pod_the_safety_policy_keeps_does_not_stall_the_threshold(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    """The kubelet ends a cycle at the local-storage checks only when it evicted a pod
    there. A pod over its limit that the agent's safety policy keeps (a DaemonSet pod,
    by default) must not keep the disk threshold from evicting, cycle after cycle: the
    threshold's candidates follow the over-limit pods, and a refusal moves on to them."""
    shipper = pod_info("p1", daemonset=True, limits={"ephemeral-storage": 1 << 20})
    hog = pod_info("p2")
    observed = eviction_builders.observations(
        1.0,
        {Signal.NODEFS_AVAILABLE: (1 << 30, 100 << 30)},
        pods={
            "uid-p1": eviction_builders.usage("uid-p1", logs=2 << 20),
            "uid-p2": eviction_builders.usage("uid-p2", logs=50 << 30),
        },
    )
    resolved = eviction_builders.policy(eviction_hard="nodefs.available<10%")
    chosen, _ = engine.evaluate(resolved, engine.EngineState(), observed, [shipper, hog], 1.0)
    ev, recorder = make(kube, clock)
    results = ev.apply(chosen)
    assert [(r.pod, r.outcome, str(r.signal)) for r in results] == [
        ("default/p1", Outcome.REFUSED, "ephemeralpodfs.limit"),
        ("default/p2", Outcome.EVICTED, "nodefs.available"),
    ]
    recorder.flush()
    reasons = sorted(e["reason"] for e in cluster.cluster.list("events").items)
    assert reasons == ["Evicted", "EvictionThresholdMet"]  # as the threshold's eviction has


def test_never_twice_the_same_pod(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    cluster.cluster.termination_delay = 60  # the pod lingers while terminating
    ev, _ = make(kube, clock, deadline_margin=30.0)
    first = ev.apply(decision(evict=pods("p1"), hard=False), present=present(cluster))
    assert outcomes(first)[0][1] is Outcome.EVICTED
    for _ in range(5):
        clock.advance(10)
        again = ev.apply(decision(evict=pods("p1"), hard=False), present=present(cluster))
        assert outcomes(again) == [("default/p1", Outcome.SKIPPED_IN_FLIGHT)]
    assert len(cluster.cluster.evictions) == 1
    clock.advance(20)  # 30 s grace + 30 s margin have passed: the engine may retry
    retried = ev.apply(decision(evict=pods("p1"), hard=False), present=present(cluster))
    assert outcomes(retried) == [("default/p1", Outcome.EVICTED)]


def test_in_flight_ends_when_the_pod_is_gone(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, _ = make(kube, clock)
    ev.apply(decision(evict=pods("p1")))
    assert PodUID("uid-p1") in ev.in_flight
    ev.forget_gone(present(cluster))
    assert ev.in_flight == {}


def test_terminating_pods_count_as_in_flight(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, _ = make(kube, clock)
    results = ev.apply(decision(evict=pods("p1")), terminating={PodUID("uid-p1")})
    assert outcomes(results) == [("default/p1", Outcome.SKIPPED_IN_FLIGHT)]
    assert cluster.cluster.evictions == []


def test_cap_per_interval(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, _ = make(kube, clock, max_evictions=3, cap_interval=10.0)
    results = ev.apply(decision(evict=pods(*NAMES[:5])))
    assert [o for _, o in outcomes(results)] == [Outcome.EVICTED] * 3 + [Outcome.CAPPED] * 2
    clock.advance(5)
    assert [o for _, o in outcomes(ev.apply(decision(evict=pods("p4"))))] == [Outcome.CAPPED]
    clock.advance(5)
    assert [o for _, o in outcomes(ev.apply(decision(evict=pods("p4"))))] == [Outcome.EVICTED]
    assert len(cluster.cluster.evictions) == 4


def test_dry_run_mutates_nothing_but_records_marked_events(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, _ = make(kube, clock, dry_run=True)
    results = ev.apply(decision(evict=pods("p1", "p2")))
    assert [o for _, o in outcomes(results)] == [Outcome.DRY_RUN] * 2
    assert cluster.requests_to("POST", "/eviction$") == []
    assert cluster.requests_to("DELETE", ".") == []
    assert len(cluster.cluster.list("pods").items) == len(NAMES)
    recorded = cluster.cluster.list("events").items
    assert {e["reason"] for e in recorded} == {"EvictedDryRun", "EvictionThresholdMet"}
    assert all(e["message"].startswith("[dry-run] ") for e in recorded)
    assert all(e["metadata"]["annotations"]["nodeagent.io/dry-run"] == "true" for e in recorded)


@pytest.mark.parametrize(
    ("pod", "policy", "reason"),
    [
        pytest.param(
            pod_info("c", critical=True, priority=2_000_000_000), None, "critical", id="critical"
        ),
        pytest.param(pod_info("s", static=True), None, "static", id="static"),
        pytest.param(pod_info("m", mirror=True, static=True), None, "mirror", id="mirror"),
        pytest.param(pod_info("d", daemonset=True), None, "DaemonSet", id="daemonset"),
        pytest.param(pod_info("k", namespace="kube-system"), None, "namespace", id="namespace"),
        pytest.param(
            pod_info("l", labels={"app": "db"}),
            safety.SafetyPolicy(protected_labels=(selectors.parse_label_selector("app=db"),)),
            "label",
            id="label",
        ),
        pytest.param(
            pod_info("h", priority=1000),
            safety.SafetyPolicy(priority_threshold=1000),
            "evictionPriorityThreshold",
            id="priority",
        ),
    ],
)
def test_safety_refuses_protected_pods(
    pod: PodInfo, policy: safety.SafetyPolicy | None, reason: str
) -> None:
    refusal = safety.evictable(pod, policy or safety.SafetyPolicy())
    assert refusal is not None and reason in refusal


def test_safety_allows_ordinary_and_opted_in_pods() -> None:
    assert safety.evictable(pod_info("ok"), safety.SafetyPolicy()) is None
    daemon = pod_info("d", daemonset=True)
    assert safety.evictable(daemon, safety.SafetyPolicy(evict_daemon_set_pods=True)) is None
    low = pod_info("low", priority=999)
    assert safety.evictable(low, safety.SafetyPolicy(priority_threshold=1000)) is None


def test_refused_pod_is_replaced_by_the_next_allowed_candidate(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, _ = make(kube, clock)
    protected = pod_info("p1", daemonset=True)
    results = ev.apply(decision(evict=(protected,), candidates=pods("p2")))
    assert outcomes(results) == [("default/p1", Outcome.REFUSED), ("default/p2", Outcome.EVICTED)]


def test_server_errors_are_retried_and_an_outage_repeats_nothing(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, _ = make(kube, clock)
    cluster.fail_next(2, status=500, path="/pods/p1/eviction$")
    assert outcomes(ev.apply(decision(evict=pods("p1")))) == [("default/p1", Outcome.EVICTED)]
    with cluster.outage(status=503):
        down = ev.apply(decision(evict=pods("p2")))
    assert outcomes(down) == [("default/p2", Outcome.FAILED)]
    assert PodUID("uid-p2") not in ev.in_flight, "a failed eviction is retried next cycle"
    back = ev.apply(decision(evict=pods("p2")), present=present(cluster))
    assert outcomes(back) == [("default/p2", Outcome.EVICTED)]
    evicted = [r.name for r in cluster.cluster.evictions if r.outcome == 201]
    assert evicted == ["p1", "p2"]


def test_held_pressure_events_are_aggregated(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, recorder = make(kube, clock)
    for _ in range(60):  # ten minutes of pressure at 10 s, nothing left to evict
        ev.apply(decision(memory=True))
        recorder.flush()
        clock.advance(10)
    creates = cluster.requests_to("POST", "/events$")
    patches = cluster.requests_to("PATCH", "/events/")
    assert len(creates) == 1
    assert len(patches) <= 10, "at most one count update per eventRefreshInterval"
    stored = cluster.cluster.list("events").items[0]
    assert stored["reason"] == "EvictionThresholdMet"
    assert stored["message"] == "Attempting to reclaim memory"
    assert stored["count"] >= 55


def test_every_eviction_goes_out_before_any_event(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    """The events come after the Evictions even when written at once (the agent queues
    them besides): three pods evicted in one decision (the relief strategy), then the
    node's EvictionThresholdMet, then each pod's Evicted."""
    ev, _ = make(kube, clock)
    ev.apply(decision(evict=pods("p1", "p2", "p3")))
    sent = [
        r.path.split("/")[-2] if r.path.endswith("/eviction") else r.body["reason"]
        for r in cluster.requests
        if r.method == "POST"
    ]
    assert sent == ["p1", "p2", "p3", "EvictionThresholdMet", "Evicted", "Evicted", "Evicted"]


def test_an_events_api_that_always_fails_costs_no_eviction(
    cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
) -> None:
    ev, _ = make(kube, clock)
    cluster.fail_next(1000, status=503, method="POST", path="/events$")
    results = ev.apply(decision(evict=pods("p1", "p2")))
    assert outcomes(results) == [("default/p1", Outcome.EVICTED), ("default/p2", Outcome.EVICTED)]
    assert not cluster.cluster.list("events").items


class TestEventQueue:
    """What the evictor records in the agent: appended now, written by another thread."""

    def test_drain_writes_in_order_through_the_recorder(
        self, cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
    ) -> None:
        recorder = events.AgentEventRecorder(kube, node_name="node-a", clock=clock)
        queue = events.EventQueue(recorder)
        ev = evictor.Evictor(kube, clock=clock, recorder=queue, policy=safety.SafetyPolicy())
        ev.apply(decision(evict=pods("p1")))
        assert cluster.requests_to("POST", "/events$") == [], "nothing written yet"
        assert queue.drain() == 2
        reasons = [r.body["reason"] for r in cluster.requests_to("POST", "/events$")]
        assert reasons == ["EvictionThresholdMet", "Evicted"]
        assert queue.drain() == 0

    def test_a_full_queue_drops_the_oldest_and_counts_them(
        self, kube: http.HTTPKubeClient, clock: FakeClock
    ) -> None:
        queue = events.EventQueue(
            events.AgentEventRecorder(kube, node_name="node-a", clock=clock), capacity=2
        )
        for resource in ("memory", "ephemeral-storage", "pids"):
            queue.threshold_met(resource)
        assert queue.dropped == 1
        recorded: list[str] = []
        queue.recorder.threshold_met = recorded.append  # type: ignore[method-assign,assignment]
        assert queue.drain() == 2
        assert recorded == ["ephemeral-storage", "pids"]


class TestRecorderRemembersABoundedNumberOfSeries:
    """Like client-go's correlator cache: at most ``max_series`` series are kept for
    aggregation (a scheduler's events are one series per pod); the oldest is forgotten
    first, its repeats not yet sent are sent then, and a repeat after that starts a new
    Event."""

    def test_the_oldest_series_is_forgotten_and_its_pending_count_written(
        self, cluster: FakeAPIServer, kube: http.HTTPKubeClient, clock: FakeClock
    ) -> None:
        recorder = events.AgentEventRecorder(kube, node_name="node-a", clock=clock, max_series=2)
        pod = {
            name: kube_events.InvolvedObject("Pod", name, "default", f"uid-{name}")
            for name in NAMES
        }
        recorder.record(pod["p1"], "Scheduled", "to n1", kube_events.NORMAL)
        recorder.record(pod["p1"], "Scheduled", "to n1", kube_events.NORMAL)  # counted, not sent
        assert cluster.requests_to("PATCH", "/events/") == []
        recorder.record(pod["p2"], "Scheduled", "to n1", kube_events.NORMAL)
        recorder.record(pod["p3"], "Scheduled", "to n1", kube_events.NORMAL)  # p1 forgotten
        [patch] = cluster.requests_to("PATCH", "/events/")
        assert patch.body["count"] == 2
        recorder.record(pod["p3"], "Scheduled", "to n1", kube_events.NORMAL)  # still a series
        recorder.record(pod["p1"], "Scheduled", "to n1", kube_events.NORMAL)  # a new Event
        created = [
            r.body["involvedObject"]["name"] for r in cluster.requests_to("POST", "/events$")
        ]
        assert created == ["p1", "p2", "p3", "p1"]
