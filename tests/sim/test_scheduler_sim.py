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

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from nodeagent.scheduler.live.queue import Where
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
        sim.SchedulerSimulation(rng, label="[hypothesis]").run()


class TestRegressions:
    """Seeds that found a defect: each fails if its fix is taken out."""

    @pytest.mark.parametrize("seed", [573])
    def test_a_late_update_of_a_bound_pod_does_not_bind_it_again(self, seed: int) -> None:
        sim.run_seed(seed)

    @pytest.mark.parametrize("seed", [24])
    def test_a_binding_refused_because_its_node_is_gone_places_the_pod_again(
        self, seed: int
    ) -> None:
        sim.run_seed(seed)

    @pytest.mark.parametrize("seed", [2])
    def test_a_status_patch_lost_in_an_outage_is_written_later(self, seed: int) -> None:
        sim.run_seed(seed)

    @pytest.mark.parametrize("seed", [1143])
    def test_a_retried_status_patch_never_overwrites_a_newer_one(self, seed: int) -> None:
        sim.run_seed(seed)

    @pytest.mark.parametrize("seed", [3313])
    def test_capacity_freed_by_a_failed_binding_moves_the_pods_it_kept_out(self, seed: int) -> None:
        sim.run_seed(seed)

    @pytest.mark.parametrize("seed", [334])
    def test_a_resize_seen_with_our_own_binding_is_accounted(self, seed: int) -> None:
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
        assert s.deliver(replica, "pods") and s.schedule(replica)
        s.api.update("pods", "default", "a", sim._annotate("late"))  # before the bind
        assert s.bind(replica)  # 201; the watch still shows the pod unbound
        uid = s.api.objects["pods"][("default", "a")]["metadata"]["uid"]
        assert s.deliver(replica, "pods")  # the late annotation
        assert scheduler.queue.where(uid) is None, "an assumed pod's update must not queue it"
        assert not s.schedule(replica)
        assert s.deliver(replica, "pods")  # now bound
        _pod(s, "b", "1000m")  # exactly what is left
        assert s.deliver(replica, "pods") and s.schedule(replica) and s.bind(replica)
        sent = [(b.pod, b.outcome) for b in s.api.bindings]
        assert sent == [("default/a", BindOutcome.CREATED), ("default/b", BindOutcome.CREATED)]
        s.settle()
        s.check_quiescent()

    def test_our_own_status_patch_replayed_by_a_relist_does_not_requeue(self) -> None:
        s, replica = _stepped()
        scheduler = replica.scheduler
        _pod(s, "a", "3000m")
        assert s.deliver(replica, "pods") and s.schedule(replica)
        s.faults.lost_response = 1.0  # applied, the answer lost; the retries run out
        s.faults.rng = _Always(0.0)
        assert s.bind(replica)
        uid = s.api.objects["pods"][("default", "a")]["metadata"]["uid"]
        assert scheduler.queue.where(uid) is Where.ERROR_BACKOFF
        assert s.report(replica)  # "Binding rejected" written onto the bound pod
        s.faults.heal()
        replica.needs_list["pods"] = True  # 410: the relist shows it bound and patched
        assert s.relist(replica, "pods")
        assert scheduler.queue.where(uid) is None
        s.clock.advance(20)
        s.timers()
        assert not s.schedule(replica), "a bound pod is never scheduled again"
        _pod(s, "b", "1000m")
        assert s.deliver(replica, "pods") and s.schedule(replica) and s.bind(replica)
        assert [b.outcome for b in s.api.bindings] == [BindOutcome.LOST, BindOutcome.CREATED]


class _Always(random.Random):
    """A Random whose ``random()`` is fixed (to force one fault's branch)."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value
