"""The live scheduler under deterministic simulation (:mod:`tests.sim.scheduler_sim`).

* a fast set of seeds (``FAST_SEEDS``) in chunks, each failure naming its seed;
* hypothesis drawing the simulation's every choice (``st.randoms``), so a failure
  shrinks to a short sequence of choices;
* every defect the simulation found, as the seed that found it (each fails with its fix
  taken out), and the ordering itself, spelled out step by step.

Replay one seed: ``python -m benchmarks.sim_scheduler --replay SEED`` (prints the steps).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from nodeagent.scheduler.framework import EventHint
from nodeagent.scheduler.live import scheduler as live_scheduler
from nodeagent.scheduler.live.queue import Where
from nodeagent.scheduler.plugins import (
    node_volume_limits,
    volume_binding,
    volume_restrictions,
    volume_zone,
)
from tests.sim import pv_controller as pvc
from tests.sim import scheduler_sim as sim
from tests.sim.api import BindOutcome

FAST_SEEDS = 500
CHUNK = 50


class TestSeeds:
    @pytest.mark.parametrize("first", range(0, FAST_SEEDS, CHUNK))
    def test_every_invariant_holds_for_the_fast_seeds(self, first: int) -> None:
        for seed in range(first, first + CHUNK):
            sim.run_seed(seed)

    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.randoms(use_true_random=False))
    def test_every_invariant_holds_for_drawn_choices(self, rng: random.Random) -> None:
        storage = random.Random(rng.random())
        sim.SchedulerSimulation(rng, label="[hypothesis]", storage=storage).run()


class TestRegressions:
    """Seeds that found a defect: each fails if its fix is taken out (replayed as they
    ran then, without storage)."""

    @pytest.mark.parametrize("seed", [573])
    def test_a_late_update_of_a_bound_pod_does_not_bind_it_again(self, seed: int) -> None:
        sim.run_seed(seed, storage=False)

    @pytest.mark.parametrize("seed", [24])
    def test_a_binding_refused_because_its_node_is_gone_places_the_pod_again(
        self, seed: int
    ) -> None:
        sim.run_seed(seed, storage=False)

    @pytest.mark.parametrize("seed", [2])
    def test_a_status_patch_lost_in_an_outage_is_written_later(self, seed: int) -> None:
        sim.run_seed(seed, storage=False)

    @pytest.mark.parametrize("seed", [1143])
    def test_a_retried_status_patch_never_overwrites_a_newer_one(self, seed: int) -> None:
        sim.run_seed(seed, storage=False)

    @pytest.mark.parametrize("seed", [3313])
    def test_capacity_freed_by_a_failed_binding_moves_the_pods_it_kept_out(self, seed: int) -> None:
        sim.run_seed(seed, storage=False)

    @pytest.mark.parametrize("seed", [334])
    def test_a_resize_seen_with_our_own_binding_is_accounted(self, seed: int) -> None:
        sim.run_seed(seed, storage=False)

    @pytest.mark.parametrize("seed", [7214])
    def test_a_resize_is_written_onto_the_status_the_kubelet_reported(self, seed: int) -> None:
        """The simulation's own defect: a resize onto a pod with no kubelet status let a
        cycle read the new spec alone (invariant 2, once kept from the binding cycle)."""
        sim.run_seed(seed)


def _stepped(rng_seed: int = 0) -> tuple[sim.SchedulerSimulation, sim.Replica]:
    """A simulation without faults: one 4-cpu node, one replica synced, nothing else."""
    s = sim.SchedulerSimulation(random.Random(rng_seed))
    s.faults.heal()
    s.api.create(
        "nodes",
        {
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "4000m", "memory": "4096Mi", "pods": "10"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    s.api.while_answering = lambda: None  # the tests below order every step themselves
    replica = s.add_replica()
    for kind in list(replica.informers):
        assert s.relist(replica, kind)
    return s, replica


def _pod(s: sim.SchedulerSimulation, name: str, cpu: str) -> None:
    s.api.create(
        "pods",
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "schedulerName": sim.PROFILE,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            },
            "status": {"phase": "Pending"},
        },
    )


class TestOrderings:
    """The orderings of the issue, step by step, on the simulated API."""

    def test_an_update_seen_after_the_binding_succeeded_neither_requeues_nor_leaks(
        self,
    ) -> None:
        s, replica = _stepped()
        scheduler = replica.scheduler
        _pod(s, "a", "3000m")
        assert s.deliver(replica, sim.PENDING_PODS) and s.schedule(replica)
        s.api.update("pods", "default", "a", sim._annotate("late"))  # before the bind
        assert s.bind(replica)  # 201; the watches still show the pod unbound
        uid = s.api.objects["pods"][("default", "a")]["metadata"]["uid"]
        assert s.deliver(replica, sim.PENDING_PODS)  # the late annotation
        assert scheduler.queue.where(uid) is None, "an assumed pod's update must not queue it"
        assert not s.schedule(replica)
        assert s.deliver(replica, "pods")  # now bound
        assert s.deliver(replica, sim.PENDING_PODS)  # and no longer pending
        _pod(s, "b", "1000m")  # exactly what is left
        assert s.deliver(replica, sim.PENDING_PODS) and s.schedule(replica) and s.bind(replica)
        sent = [(b.pod, b.outcome) for b in s.api.bindings]
        assert sent == [("default/a", BindOutcome.CREATED), ("default/b", BindOutcome.CREATED)]
        s.settle()
        s.check_quiescent()

    def test_our_own_status_patch_replayed_by_a_relist_does_not_requeue(self) -> None:
        s, replica = _stepped()
        scheduler = replica.scheduler
        _pod(s, "a", "3000m")
        assert s.deliver(replica, sim.PENDING_PODS) and s.schedule(replica)
        s.faults.lost_response = 1.0  # applied, the answer lost; the retries run out
        s.faults.rng = _Always(0.0)
        assert s.bind(replica)
        uid = s.api.objects["pods"][("default", "a")]["metadata"]["uid"]
        assert scheduler.queue.where(uid) is Where.ERROR_BACKOFF
        assert s.report(replica)  # "Binding rejected" written onto the bound pod
        s.faults.heal()
        for kind in ("pods", sim.PENDING_PODS):  # 410: the relists show it bound and patched
            replica.needs_list[kind] = True
            assert s.relist(replica, kind)
        assert scheduler.queue.where(uid) is None
        s.clock.advance(20)
        s.timers()
        assert not s.schedule(replica), "a bound pod is never scheduled again"
        _pod(s, "b", "1000m")
        assert s.deliver(replica, sim.PENDING_PODS) and s.schedule(replica) and s.bind(replica)
        assert [b.outcome for b in s.api.bindings] == [BindOutcome.LOST, BindOutcome.CREATED]

    def test_a_pod_bound_and_deleted_while_the_bound_watch_relists_leaves_no_usage(
        self,
    ) -> None:
        """The binding shows on the pending watch (the pod leaves it), the bound watch
        re-lists after the pod is gone and never shows it: a flush later the API server
        is asked, and the assumption goes."""
        s, replica = _stepped()
        scheduler = replica.scheduler
        _pod(s, "a", "3000m")
        assert s.deliver(replica, sim.PENDING_PODS) and s.schedule(replica) and s.bind(replica)
        uid = s.api.objects["pods"][("default", "a")]["metadata"]["uid"]
        s.api.delete("pods", "default", "a")
        assert s.deliver(replica, sim.PENDING_PODS)  # a leaves the pending pods: bound
        replica.needs_list["pods"] = True  # 410: the relist shows no pod a
        assert s.relist(replica, "pods")
        assert scheduler.cache.accounts(uid), "still assumed: its binding succeeded"
        s.clock.advance(2)
        s.timers()
        assert not scheduler.cache.accounts(uid), "gone from the API: the assumption too"
        _pod(s, "b", "4000m")  # the whole node
        while s.deliver(replica, sim.PENDING_PODS):
            pass
        assert s.schedule(replica) and s.bind(replica)
        assert s.api.bindings[-1].outcome is BindOutcome.CREATED

    def test_a_flush_asks_about_a_few_pods_and_the_bound_watch_settles_the_rest(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Pods bound faster than the bound watch shows them: each flush asks the API
        server about ``SETTLE_LOOKUPS`` of them at most, and once the watch shows them
        nothing is asked."""
        monkeypatch.setattr(live_scheduler, "SETTLE_LOOKUPS", 3)
        s, replica = _stepped()
        scheduler = replica.scheduler
        asked: list[str] = []
        list_pods = scheduler._kube.list_pods

        def counted(**kwargs: str) -> Any:
            asked.append(kwargs.get("field_selector", ""))
            return list_pods(**kwargs)

        monkeypatch.setattr(scheduler._kube, "list_pods", counted)
        for i in range(8):
            _pod(s, f"p{i}", "100m")
        while s.deliver(replica, sim.PENDING_PODS):
            pass
        while s.schedule(replica):
            pass
        while s.bind(replica):
            pass
        while s.deliver(replica, sim.PENDING_PODS):  # each pod leaves the pending pods
            pass
        s.clock.advance(2)
        scheduler.flush_once()
        assert len(asked) == 3, asked
        while s.deliver(replica, "pods"):  # the bound watch catches up
            pass
        s.clock.advance(2)
        scheduler.flush_once()
        assert len(asked) == 3, "nothing asked once the bound watch shows them"
        assert all(scheduler.cache.is_bound(str(p["metadata"]["uid"])) for p in s.api.items("pods"))


class _Always(random.Random):
    """A Random whose ``random()`` is fixed (to force one fault's branch)."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def _with_storage(s: sim.SchedulerSimulation, replica: sim.Replica) -> None:
    """The two classes and the storage informers listed (a simulation without faults)."""
    s.storage_on = True
    s.api.create(pvc.CLASSES, pvc.storage_class(pvc.LOCAL, "WaitForFirstConsumer"))
    s.api.create(pvc.CLASSES, pvc.storage_class(pvc.FAST, "Immediate"))
    for kind in list(replica.storage):
        assert s.relist(replica, kind)


def _pod_with_claim(s: sim.SchedulerSimulation, name: str, *, claim: bool = True) -> str:
    _pod(s, name, "100m")
    claim_name = f"data-{name}"
    s.api.update(
        "pods",
        "default",
        name,
        lambda p: p["spec"].update(
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
        ),
    )
    if claim:
        s.api.create(pvc.CLAIMS, pvc.claim(claim_name, pvc.LOCAL, "1Gi"))
    return str(s.api.objects["pods"][("default", name)]["metadata"]["uid"])


def _deliver_all(s: sim.SchedulerSimulation, replica: sim.Replica) -> None:
    for kind in (*replica.informers, *replica.storage):
        while s.deliver(replica, kind):
            pass


class TestVolumeOrderings:
    """Claims and PVs on the simulated API, step by step: the PV controller completes
    what PreBind starts, the assume cache, the QueueingHints."""

    def test_a_pod_waiting_for_its_claim_is_moved_by_that_claim_only(self) -> None:
        s, replica = _stepped()
        _with_storage(s, replica)
        s.api.create(pvc.PVS, pvc.local_volume("pv1", "n1", pvc.LOCAL, "1Gi"))
        uid = _pod_with_claim(s, "a", claim=False)
        _deliver_all(s, replica)
        assert s.schedule(replica)
        queue = replica.scheduler.queue
        assert queue.where(uid) is Where.UNSCHEDULABLE
        s.api.create(pvc.CLAIMS, pvc.claim("data-other", pvc.LOCAL, "1Gi"))
        _deliver_all(s, replica)
        assert queue.where(uid) is Where.UNSCHEDULABLE, "another pod's claim does not help"
        s.api.create(pvc.CLAIMS, pvc.claim("data-a", pvc.LOCAL, "1Gi"))
        _deliver_all(s, replica)
        assert queue.where(uid) in (Where.BACKOFF, Where.ACTIVE)
        s.clock.advance(2)
        s.timers()
        assert s.schedule(replica) and s.bind(replica)  # PreBind waits for the controller
        pod = s.api.objects["pods"][("default", "a")]
        claim = s.api.objects[pvc.CLAIMS][("default", "data-a")]
        assert pod["spec"]["nodeName"] == "n1"
        assert claim["spec"]["volumeName"] == "pv1"
        s.settle()
        s.check_quiescent()

    def test_two_pods_never_get_the_same_volume_and_a_new_one_moves_the_second(self) -> None:
        s, replica = _stepped()
        _with_storage(s, replica)
        s.api.create(pvc.PVS, pvc.local_volume("pv1", "n1", pvc.LOCAL, "1Gi"))
        first, second = _pod_with_claim(s, "a"), _pod_with_claim(s, "b")
        _deliver_all(s, replica)
        assert s.schedule(replica) and s.schedule(replica)  # a reserves pv1, before binding
        queue = replica.scheduler.queue
        assert queue.where(first) is Where.ASSUMED
        assert queue.where(second) is Where.UNSCHEDULABLE, "pv1 is assumed for a"
        assert s.bind(replica)
        _deliver_all(s, replica)
        assert queue.where(second) is Where.UNSCHEDULABLE, "a's volume bound: nothing new"
        s.api.create(pvc.PVS, pvc.local_volume("pv2", "n1", pvc.LOCAL, "2Gi"))
        _deliver_all(s, replica)
        assert queue.where(second) in (Where.BACKOFF, Where.ACTIVE)
        s.settle()
        s.check_quiescent()
        claims = s.api.objects[pvc.CLAIMS]
        assert claims[("default", "data-a")]["spec"]["volumeName"] == "pv1"
        assert claims[("default", "data-b")]["spec"]["volumeName"] == "pv2"
        assert not pvc.binding_errors(s.api)

    def test_a_binding_waits_until_the_controller_bound_the_claim(self) -> None:
        """The pod's binding POST comes after the claim is Bound, whatever the order of
        the controller's two writes and the informers' deliveries."""
        s, replica = _stepped()
        _with_storage(s, replica)
        s.api.create(pvc.PVS, pvc.local_volume("pv1", "n1", pvc.LOCAL, "1Gi"))
        _pod_with_claim(s, "a")
        _deliver_all(s, replica)
        seen: list[str] = []

        def applied(sender: str, pod: dict[str, object], node: str) -> None:
            claim = s.api.objects[pvc.CLAIMS][("default", "data-a")]
            seen.append(str(claim.get("status", {}).get("phase")))

        s.api.on_bind_applied = applied
        assert s.schedule(replica) and s.bind(replica)
        assert seen == ["Bound"]


def _metric(replica: sim.Replica, family: str, **labels: str) -> float:
    return sum(
        sample.value
        for found in replica.scheduler.metrics.registry.collect()
        if found.name == family
        for sample in found.samples
        if sample.name.endswith("_total") and labels.items() <= sample.labels.items()
    )


def _without_hints(monkeypatch: pytest.MonkeyPatch) -> None:
    """The four volume plugins registered as before their hints: every event Queues."""
    for plugin in (
        volume_binding.VolumeBinding,
        volume_zone.VolumeZone,
        node_volume_limits.NodeVolumeLimits,
        volume_restrictions.VolumeRestrictions,
    ):
        registered = plugin.events_to_register

        def bare(self: object, registered: Any = registered) -> Sequence[EventHint]:
            return [EventHint(entry.events) for entry in registered(self)]

        monkeypatch.setattr(plugin, "events_to_register", bare)


def _labelled(value: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["metadata"]["labels"] = {"round": value}

    return change


def _volume_blocked_churn(rounds: int) -> tuple[sim.SchedulerSimulation, sim.Replica, list[str]]:
    """Eight pods blocked on volumes (five whose WaitForFirstConsumer claim has no PV, three
    whose claim does not exist yet), then ``rounds`` rounds of storage events that cannot
    help them: another claim created and changed, the class relabelled (its topologies
    unchanged), the node's CSINode rewritten with the same limits; after each, the backoff
    runs out and the queue is flushed and drained."""
    s, replica = _stepped()
    _with_storage(s, replica)
    s.api.create("csinodes", {"metadata": {"name": "n1"}, "spec": {"drivers": []}})
    uids = [_pod_with_claim(s, f"w{i}") for i in range(5)]
    uids += [_pod_with_claim(s, f"m{i}", claim=False) for i in range(3)]
    _deliver_all(s, replica)
    while s.schedule(replica):
        pass
    for n in range(rounds):
        s.api.create(pvc.CLAIMS, pvc.claim(f"other-{n}", pvc.LOCAL, "1Gi"))
        s.api.update(pvc.CLAIMS, "default", f"other-{n}", sim._annotate(str(n)))
        s.api.update(pvc.CLASSES, "", pvc.LOCAL, _labelled(str(n)))
        s.api.update("csinodes", "", "n1", sim._annotate(str(n)))
        _deliver_all(s, replica)
        s.clock.advance(11.0)
        s.timers()
        while s.schedule(replica):
            pass
    return s, replica, uids


class TestVolumeQueueingHints:
    """nodeagent_scheduler_wasted_retries_total for volume-blocked pods: the hints keep
    them where they are through events that cannot help, and move them for one that can."""

    ROUNDS = 10

    def test_volume_blocked_pods_are_not_retried_for_nothing(self) -> None:
        s, replica, uids = _volume_blocked_churn(self.ROUNDS)
        unschedulable = _metric(replica, "scheduler_schedule_attempts", result="unschedulable")
        assert unschedulable == len(uids), "one attempt each, none after the churn"
        assert _metric(replica, "nodeagent_scheduler_wasted_retries") == 0
        queue = replica.scheduler.queue
        assert all(queue.where(uid) is Where.UNSCHEDULABLE for uid in uids)
        # what can help moves them: the missing claims, then a PV for every claim
        for i in range(3):
            s.api.create(pvc.CLAIMS, pvc.claim(f"data-m{i}", pvc.LOCAL, "1Gi"))
        for i in range(8):
            s.api.create(pvc.PVS, pvc.local_volume(f"pv{i}", "n1", pvc.LOCAL, "1Gi"))
        s.settle()
        s.check_quiescent()
        assert all(p["spec"].get("nodeName") == "n1" for p in s.api.items("pods"))

    def test_without_the_hints_the_same_churn_retries_them_every_round(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The metric counts what the hints save: registered without them (every event
        Queues, as before they existed), each round retries every pod for nothing."""
        _without_hints(monkeypatch)
        _, replica, uids = _volume_blocked_churn(self.ROUNDS)
        wasted = _metric(replica, "nodeagent_scheduler_wasted_retries")
        assert wasted == len(uids) * self.ROUNDS
