"""The loop's behaviour over many cycles, in virtual time (see :mod:`tests.agent.rig`):
when it looks, what it reads, what it decides and logs, what reaches the API, and how it
behaves across API failures and restarts."""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path

import pytest

from nodeagent.agent.actuation import ActuationJob
from nodeagent.base import errors
from nodeagent.k8s.pods import QOSClass
from nodeagent.kube import errors as kube_errors
from nodeagent.kube.client import api_time
from nodeagent.model import NodeObservations
from nodeagent.signals.collector import ALL_GROUPS, SignalGroup
from nodeagent.triggers.api import Mechanism
from tests.agent.rig import NODE, Rig, pod
from tests.doubles.host import GIB, MIB
from tests.fakeapi import objects

MEMORY_CONDITION = "NodeAgentMemoryPressure"
MEMORY_TAINT = ("nodeagent.io/memory-pressure", "NoSchedule")


def pressured_rig(tmp_path: Path, **settings: object) -> Rig:
    """Memory under the 1Gi hard threshold; a big BestEffort pod and a small Burstable one."""
    rig = Rig(tmp_path, settings=settings)
    hog, web = pod("hog", qos=QOSClass.BEST_EFFORT), pod("web")
    rig.add_pod(hog, 4 * GIB)
    rig.add_pod(web, 512 * MIB)
    rig.pods.set([hog, web])
    rig.set_node_usage(15 * GIB + 512 * MIB)
    return rig


# --- when the loop looks, and what it reads --------------------------------------------------


def test_polls_filesystems_every_half_second_and_pods_every_second(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    results = rig.run_for(2.9)
    times = [r.decision.time - 100.0 for r in results]
    assert times == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0])
    assert [r.trigger for r in results[:3]] == [
        "poll:filesystems+node",
        "poll:filesystems",
        "poll:filesystems+node",
    ]
    # every cycle is one sample: memory and filesystems read at the same instant
    for result in results:
        assert result.observations.time == result.decision.time


def test_a_kernel_trigger_makes_the_cycle_at_once(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.cycle()
    [name] = [n for n in rig.triggers.armed if n.startswith("memcg:node:")]
    rig.clock.advance(0.1)
    rig.triggers.fire(name)
    result = rig.cycle()
    assert result is not None
    assert result.decision.time == pytest.approx(100.1)
    assert result.trigger == f"{Mechanism.MEMCG_THRESHOLD}:{name}"


def test_a_bare_wake_does_not_collect(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.cycle()
    rig.triggers.wake()
    assert rig.loop.step(rig.triggers.wait(0)) is None
    assert rig.loop.cycles == 1


def test_memcg_thresholds_are_armed_where_available_would_reach_them(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings={"eviction_hard": {"memory.available": "1Gi"}})
    rig.set_node_usage(4 * GIB)  # available 12Gi; usage = 4Gi + 256Mi of page cache
    rig.cycle()
    mechanism, path, usage = rig.triggers.armed["memcg:node:memory.available<1Gi hard"]
    assert mechanism is Mechanism.MEMCG_THRESHOLD
    assert path == str(rig.host.memory_dir("/"))
    # usage + available - threshold (the kubelet's capacity - threshold + inactive_file),
    # plus one byte: there available equals the threshold, which does not meet it
    assert usage == (4 * GIB + 256 * MIB) + 12 * GIB - 1 * GIB + 1
    allocatable = "memcg:kubepods:allocatableMemory.available<1Gi hard"
    assert rig.triggers.armed[allocatable][1] == str(rig.host.memory_dir("/kubepods"))


def test_memcg_thresholds_ignore_usage_that_moved_after_the_sample(tmp_path: Path) -> None:
    """A process freeing (or allocating) hundreds of MiB a second moves usage between the
    collection and any later read; the threshold must be placed from the sample."""
    rig = Rig(tmp_path, settings={"eviction_hard": {"memory.available": "1Gi"}})
    rig.set_node_usage(4 * GIB)
    collect = rig.collector.collect

    def collect_then_free(
        now: float, groups: Collection[SignalGroup] = ALL_GROUPS
    ) -> NodeObservations:
        observations = collect(now, groups)
        usage_file = rig.host.memory_dir("/") / "memory.usage_in_bytes"
        usage_file.write_text(f"{int(usage_file.read_text()) - 2 * GIB}\n")
        return observations

    rig.collector.collect = collect_then_free  # type: ignore[method-assign]
    rig.cycle()
    _, _, usage = rig.triggers.armed["memcg:node:memory.available<1Gi hard"]
    assert usage == 16 * GIB - 1 * GIB + 256 * MIB + 1  # capacity - threshold + inactive_file


def test_psi_triggers_are_armed_once(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.run_for(2.0)
    psi = [name for name in rig.triggers.arm_calls if name.startswith("psi:")]
    assert psi == ["psi:memory some 150ms 1s", "psi:io full 150ms 1s"]


# --- deciding and acting -------------------------------------------------------------------


def test_hard_memory_pressure_evicts_the_top_ranked_pod_with_the_hard_grace(
    tmp_path: Path,
) -> None:
    rig = pressured_rig(tmp_path)
    rig.cycle()  # adopts the node and evicts
    assert rig.evicted() == [("hog", 1)]
    rig.cycle()  # publishes what the engine decided after adoption
    condition = rig.condition(MEMORY_CONDITION)
    assert condition is not None and condition["status"] == "True"
    assert condition["reason"] == "MemoryThresholdMet"
    assert MEMORY_TAINT in rig.own_taints()
    events = [e["reason"] for e in rig.cluster.list("events").items]
    assert "EvictionThresholdMet" in events and "Evicted" in events


def test_the_next_pod_waits_until_the_first_is_gone(tmp_path: Path) -> None:
    rig = pressured_rig(tmp_path)
    hog, web = rig.pods.current.pods
    rig.run_for(1.0)
    assert rig.evicted() == [("hog", 1)]
    # the hog terminates slowly; the pressure holds; nobody else is evicted meanwhile
    rig.pods.set([hog, web], terminating=frozenset({str(hog.uid)}))
    rig.run_for(5.0)
    assert rig.evicted() == [("hog", 1)]
    assert rig.actuation.stats.waits_for_cleanup > 0
    # it is gone, the pressure still holds: the next pod goes
    rig.pods.set([web])
    rig.run_for(1.0)
    assert rig.evicted() == [("hog", 1), ("web", 1)]


def test_a_pod_is_never_evicted_twice(tmp_path: Path) -> None:
    rig = pressured_rig(tmp_path)
    hog, web = rig.pods.current.pods
    rig.run_for(1.0)
    # the API accepted the eviction but the pod is still listed (not yet terminating)
    rig.pods.set([hog, web])
    rig.run_for(10.0)
    requests = [c.args[1] for c in rig.kube.calls_to("evict_pod")]
    assert requests == ["hog"]


def test_evictions_of_a_stale_decision_are_dropped(tmp_path: Path) -> None:
    rig = pressured_rig(tmp_path)
    rig.loop.tick()  # decides to evict, not applied yet
    rig.clock.advance(5.0)  # the worker was stuck on a slow API
    rig.actuation.apply_pending()
    assert rig.evicted() == []
    assert rig.actuation.stats.stale_evictions == 1
    rig.cycle()  # decided afresh
    assert rig.evicted() == [("hog", 1)]


def test_the_node_state_of_a_stale_decision_is_not_published(tmp_path: Path) -> None:
    """A decision the worker gets to late may hold a condition the transition period no
    longer holds by then: its state is dropped, and the next decision's is written."""
    rig = pressured_rig(tmp_path)
    rig.run_for(1.0)  # adopted the node, pressure published
    written = rig.condition_writes(MEMORY_CONDITION)
    rig.set_node_usage(GIB)  # the pressure ends
    rig.loop.tick()
    rig.clock.advance(5.0)  # the worker was stuck on a slow API
    rig.actuation.apply_pending()
    assert rig.actuation.stats.stale_node_states == 1
    assert rig.condition_writes(MEMORY_CONDITION) == written
    rig.cycle()  # decided afresh, and applied
    assert rig.actuation.stats.stale_node_states == 1


def test_the_latest_submission_wins(tmp_path: Path) -> None:
    rig = pressured_rig(tmp_path)
    rig.cycle()
    rig.loop.tick()
    first = rig.loop.last
    rig.loop.tick()
    assert rig.actuation.apply_pending()
    assert not rig.actuation.apply_pending()
    assert rig.actuation.stats.replaced == 1
    assert first is not None and rig.loop.last is not None
    assert rig.loop.last.decision.time > first.decision.time


def test_soft_threshold_evicts_after_its_grace_with_the_pods_grace(tmp_path: Path) -> None:
    rig = pressured_rig(
        tmp_path,
        eviction_hard={"memory.available": "100Mi"},
        eviction_soft={"memory.available": "1Gi"},
        eviction_soft_grace_period={"memory.available": "5s"},
        eviction_max_pod_grace_period=20,
    )
    rig.run_for(4.5)
    assert rig.evicted() == []
    condition = rig.condition(MEMORY_CONDITION)
    assert condition is not None and condition["status"] == "True"  # soft: at once
    rig.run_for(1.0)
    assert rig.evicted() == [("hog", 20)]  # min(evictionMaxPodGracePeriod, pod's 30)


def test_condition_and_taint_clear_only_after_the_transition_period(tmp_path: Path) -> None:
    rig = pressured_rig(tmp_path)
    rig.run_for(1.0)
    rig.set_node_usage(4 * GIB)
    relieved = rig.clock.now()
    while rig.condition(MEMORY_CONDITION)["status"] == "True":  # type: ignore[index]
        rig.cycle()
    assert rig.clock.now() - relieved >= 30.0
    assert rig.clock.now() - relieved < 31.0
    assert MEMORY_TAINT not in rig.own_taints()
    writes = rig.condition_writes(MEMORY_CONDITION)
    assert writes[-1] == "False" and set(writes[:-1]) == {"True"}  # no flap on the way


def test_dry_run_decides_and_records_but_writes_nothing(tmp_path: Path) -> None:
    rig = pressured_rig(tmp_path, dry_run=True)
    rig.run_for(2.0)
    writes = {c.method for c in rig.kube.calls} - {"get_node", "create_event", "patch_event"}
    assert writes == set()
    events = rig.cluster.list("events").items
    assert {e["reason"] for e in events} == {"EvictionThresholdMet", "EvictedDryRun"}
    assert all(e["message"].startswith("[dry-run] ") for e in events)
    assert (
        rig.metrics.registry.get_sample_value(
            "nodeagent_evictions_total",
            {"signal": "memory.available", "outcome": "dry_run", "qos": "BestEffort"},
        )
        == 1.0
    )


# --- the API away, and restarts --------------------------------------------------------------


def test_an_api_outage_loses_no_condition_change_and_repeats_no_eviction(tmp_path: Path) -> None:
    rig = pressured_rig(tmp_path)
    rig.set_node_usage(4 * GIB)
    rig.run_for(1.0)  # adopted, published "no pressure"
    down = kube_errors.Unavailable("connection refused")
    for method in ("patch_node_status", "patch_node", "evict_pod", "create_event"):
        rig.kube.fail_next(method, down, times=1000)
    rig.set_node_usage(15 * GIB + 512 * MIB)
    while rig.loop.last is None or not any(rig.loop.last.decision.pressure.values()):
        rig.cycle()
    decided = rig.cluster._wall()
    rig.run_for(5.0)
    assert rig.loop.last is not None and any(rig.loop.last.decision.pressure.values())
    assert not rig.health.readiness().ok
    assert rig.evicted() == []
    rig.kube._failures.clear()
    rig.run_for(2.0)
    assert rig.health.readiness().ok
    condition = rig.condition(MEMORY_CONDITION)
    assert condition is not None and condition["status"] == "True"
    # the transition is dated when it was decided, not when the API came back
    assert condition["lastTransitionTime"] == api_time(decided)
    assert rig.evicted() == [("hog", 1)]


def test_a_restart_keeps_the_published_pressure_for_the_transition_period(
    tmp_path: Path,
) -> None:
    held = objects.node(NODE)
    held["status"]["conditions"].append(
        {
            "type": MEMORY_CONDITION,
            "status": "True",
            "reason": "MemoryThresholdMet",
            "message": "memory.available 512Mi is below the hard threshold 1Gi",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        }
    )
    held["spec"]["taints"] = [{"key": MEMORY_TAINT[0], "effect": MEMORY_TAINT[1]}]
    rig = Rig(tmp_path, node=held)  # no pressure now
    rig.run_for(29.0)
    condition = rig.condition(MEMORY_CONDITION)
    assert condition is not None and condition["status"] == "True"
    assert condition["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert MEMORY_TAINT in rig.own_taints()
    assert "False" not in rig.condition_writes(MEMORY_CONDITION)
    rig.run_for(2.0)
    assert rig.condition(MEMORY_CONDITION)["status"] == "False"  # type: ignore[index]
    assert MEMORY_TAINT not in rig.own_taints()


def test_nothing_is_written_before_the_node_is_read(tmp_path: Path) -> None:
    rig = pressured_rig(tmp_path)
    rig.kube.fail_next("get_node", kube_errors.Unavailable("down"), times=3)
    rig.run_for(1.5)
    assert rig.kube.calls_to("patch_node_status") == []
    rig.run_for(1.0)
    assert rig.condition(MEMORY_CONDITION) is not None


# --- decision lines --------------------------------------------------------------------------


def test_a_decision_line_when_the_decision_changes_and_otherwise_every_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(tmp_path, settings={"decision_log_interval": "5s"})
    caplog.set_level(logging.INFO, logger="nodeagent.decision")
    rig.run_for(3.0)
    quiet = [r.getMessage() for r in caplog.records if r.name == "nodeagent.decision"]
    assert quiet == ["no threshold met"]
    caplog.clear()
    rig.set_node_usage(15 * GIB + 512 * MIB)
    rig.run_for(12.0)
    lines = [r for r in caplog.records if r.name == "nodeagent.decision"]
    assert 3 <= len(lines) <= 4  # the crossing, then every 5 s while it holds
    first = lines[0]
    assert first.getMessage().startswith("memory.available 512Mi < 1Gi hard (acting)")
    fields = first.fields  # type: ignore[attr-defined]
    assert fields["thresholds"][0]["signal"] == "memory.available"
    assert fields["thresholds"][0]["graceSatisfied"] is True
    assert fields["pressure"] == ["memory"]


def test_degraded_sources_reach_the_metrics(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings={"psi_triggers": ["kubepods/memory some 150ms 1s"]})
    rig.cycle()
    text = rig.metrics.exposition().decode()
    assert 'component="trigger/psi:kubepods/memory some 150ms 1s"' in text


def test_api_errors_do_not_raise_out_of_the_worker(tmp_path: Path) -> None:
    rig = pressured_rig(tmp_path)
    rig.kube.fail_next("get_node", errors.KubeAPIError("odd"), times=1)
    job = ActuationJob(rig.loop.step([]).decision, {}, rig.pods.view(), rig.clock.now())  # type: ignore[union-attr]
    rig.actuation.submit(job)
    assert rig.actuation.apply_pending()
