"""``activePageCache``: the kubelet's accounting by default; with ``reclaimable`` the clean
active page cache counts as available and comes out of the pod usage eviction ranks by.

Tables for the cases an operator meets (a pod keeping a file hot beside a threshold that
the kubelet's accounting crosses; genuine pressure with that pod beside a memory hog;
a pod whose cache, not its anonymous memory, is above its request), and properties for
what must hold whatever the figures: the view only ever adds available memory, never
past capacity, applies once, and the reclaimable policy meets no threshold the kubelet's
does not.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.base.errors import ConfigError
from nodeagent.cli import main
from nodeagent.eviction import engine, replay
from nodeagent.eviction.page_cache import ActivePageCache, pod_usage, view
from nodeagent.eviction.policy import EvictionPolicy, policy_record
from nodeagent.eviction.trace import TraceError, parse_trace
from nodeagent.k8s.pressure import Pressure
from nodeagent.model import NodeObservations, PodInfo, PodUID, PodUsage, Signal, SignalValue

from .builders import Gi, Mi, observations, pod, policy, usage

ALLOCATABLE = Signal.ALLOCATABLE_MEMORY_AVAILABLE
RECLAIMABLE = {"active_page_cache": "reclaimable"}
STALL_GUARD = {
    "eviction_soft": "memory.pressure.some.avg10>20",
    "eviction_soft_grace_period": "memory.pressure.some.avg10=10s",
}


def node(
    available: int, active: int, pods: dict[str, PodUsage], capacity: int = 2 * Gi
) -> NodeObservations:
    """The kubepods signal (``available`` as the kubelet counts it, ``active`` clean
    active page cache in kubepods) and the pods' usage."""
    return dataclasses.replace(
        observations(0.0, {ALLOCATABLE: (available, capacity)}, pods=pods),
        active_file={ALLOCATABLE: active},
    )


def decide(page_cache: str, observed: NodeObservations, *pods: str) -> list[str]:
    """The pods evicted at ``allocatableMemory.available<500Mi``, first cycle."""
    chosen = policy(eviction_hard="allocatableMemory.available<500Mi", active_page_cache=page_cache)
    decision, _ = engine.evaluate(
        chosen, engine.EngineState(), observed, [pod(name) for name in pods], 1.0
    )
    return [eviction.pod.name for eviction in decision.evictions]


# --- the view -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("available", "active", "capacity", "seen"),
    [
        pytest.param(300 * Mi, 1500 * Mi, 2 * Gi, 1800 * Mi, id="cache-counted"),
        pytest.param(300 * Mi, 0, 2 * Gi, 300 * Mi, id="no-cache"),
        pytest.param(1 * Gi, 3 * Gi, 2 * Gi, 2 * Gi, id="never-past-capacity"),
    ],
)
def test_memory_signals_count_the_clean_active_file(
    available: int, active: int, capacity: int, seen: int
) -> None:
    raw = node(available, active, {}, capacity)
    counted = view(raw, ActivePageCache.RECLAIMABLE).value(ALLOCATABLE)
    assert counted is not None
    assert (counted.available, counted.capacity) == (seen, capacity)
    assert "clean active_file" in counted.source
    assert view(raw, ActivePageCache.WORKING_SET) is raw


@pytest.mark.parametrize(
    ("memory", "active", "ranked_by"),
    [
        pytest.param(1700 * Mi, 1436 * Mi, 264 * Mi, id="cache-out"),
        pytest.param(700 * Mi, 0, 700 * Mi, id="anonymous-only"),
        pytest.param(100 * Mi, 300 * Mi, 0, id="never-below-zero"),
        pytest.param(100 * Mi, None, 100 * Mi, id="not-read"),
        pytest.param(None, 300 * Mi, None, id="no-stats-stay-no-stats"),
    ],
)
def test_pod_usage(memory: int | None, active: int | None, ranked_by: int | None) -> None:
    assert pod_usage(usage("a", memory=memory, active_file=active)).memory == ranked_by


def test_a_signal_without_active_file_stays_as_read() -> None:
    raw = observations(0.0, {Signal.MEMORY_AVAILABLE: (1 * Gi, 8 * Gi), ALLOCATABLE: (5, 10)})
    raw = dataclasses.replace(raw, active_file={Signal.MEMORY_AVAILABLE: 1 * Gi})
    counted = view(raw, ActivePageCache.RECLAIMABLE)
    assert counted.value(ALLOCATABLE) == raw.value(ALLOCATABLE)
    assert counted.value(Signal.MEMORY_AVAILABLE) == SignalValue(
        2 * Gi, 8 * Gi, "; plus clean active_file as available"
    )


# --- decisions ----------------------------------------------------------------------------


def test_a_hot_cache_is_evicted_by_the_kubelets_accounting_and_not_when_reclaimable() -> None:
    # kubepods 2 GiB: the cache pod's 1.5 GiB of hot file pages put the kubelet's
    # available at 300 MiB, under 500Mi; all but 200 MiB of the pod is clean cache.
    observed = node(
        300 * Mi,
        1500 * Mi,
        {
            "cache": usage("cache", memory=1700 * Mi, active_file=1500 * Mi),
            "app": usage("app", memory=40 * Mi, active_file=0),
        },
    )
    assert decide("workingSet", observed, "cache", "app") == ["cache"]
    assert decide("reclaimable", observed, "cache", "app") == []


def test_a_ramp_beside_the_cache_takes_the_hog_not_the_cache() -> None:
    # kubepods 2 GiB. A hog at 400 MiB beside the cache pod's 1.5 GiB of hot cache: the
    # kubelet's accounting crosses 500Mi here and evicts the cache pod (the largest
    # working set), which frees nothing the kernel would not have given the hog anyway.
    early = node(
        98 * Mi,
        1500 * Mi,
        {
            "cache": usage("cache", memory=1550 * Mi, active_file=1500 * Mi),
            "hog": usage("hog", memory=400 * Mi, active_file=0),
        },
    )
    assert decide("workingSet", early, "cache", "hog") == ["cache"]
    assert decide("reclaimable", early, "cache", "hog") == []
    # Later the kernel has given the hog all but 200 MiB of the cache: now the
    # reclaimable count crosses too, 500 MiB before the limit, and the hog goes.
    late = node(
        198 * Mi,
        200 * Mi,
        {
            "cache": usage("cache", memory=250 * Mi, active_file=200 * Mi),
            "hog": usage("hog", memory=1600 * Mi, active_file=0),
        },
    )
    assert decide("reclaimable", late, "cache", "hog") == ["hog"]


def test_cache_above_a_request_is_not_usage_above_it() -> None:
    # "db" requests 512 MiB and holds 300 MiB anonymous plus 1 GiB of hot cache: by the
    # kubelet's count it exceeds its request and goes before the BestEffort pod; counting
    # the cache as reclaimable it is within its request, and the BestEffort pod goes.
    observed = node(
        100 * Mi,
        1 * Gi,
        {
            "db": usage("db", memory=1324 * Mi, active_file=1 * Gi),
            "batch": usage("batch", memory=200 * Mi, active_file=0),
        },
    )
    pods = [pod("db", requests={"memory": 512 * Mi}), pod("batch")]
    for page_cache, first in (("workingSet", "db"), ("reclaimable", "batch")):
        chosen = policy(
            eviction_hard="allocatableMemory.available<2Gi", active_page_cache=page_cache
        )
        decision, _ = engine.evaluate(chosen, engine.EngineState(), observed, pods, 1.0)
        assert [c.pod.name for c in decision.candidates][:2] == [
            first,
            {"db": "batch", "batch": "db"}[first],
        ], page_cache


def test_the_kubelets_accounting_is_the_default() -> None:
    observed = node(
        300 * Mi, 1500 * Mi, {"cache": usage("cache", memory=1700 * Mi, active_file=1500 * Mi)}
    )
    default = policy(eviction_hard="allocatableMemory.available<500Mi")
    assert default.active_page_cache is ActivePageCache.WORKING_SET
    decision, _ = engine.evaluate(default, engine.EngineState(), observed, [pod("cache")], 1.0)
    assert decision.pressure[Pressure.MEMORY]
    assert policy_record(default)["activePageCache"] == "workingSet"


# --- configuration ------------------------------------------------------------------------


def test_an_unknown_value_names_the_field_and_the_values() -> None:
    with pytest.raises(ConfigError) as caught:
        policy(active_page_cache="inactive")
    message = str(caught.value)
    assert "activePageCache" in message
    assert "'inactive'" in message
    assert "workingSet" in message and "reclaimable" in message


def test_the_cli_exits_2_on_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("activePageCache: Reclaimable\n")
    assert main(["config", "check", "--config", str(config)]) == 2
    assert "activePageCache" in capsys.readouterr().err


def test_reclaimable_without_a_memory_stall_threshold_is_warned_about() -> None:
    alone = policy(**RECLAIMABLE)
    assert any("memory.pressure" in note for note in alone.warnings)
    guarded = policy(**RECLAIMABLE, **STALL_GUARD)
    assert not any("activePageCache" in note for note in guarded.warnings)
    assert policy_record(guarded)["activePageCache"] == "reclaimable"


def test_a_trace_carries_active_file_and_replays_with_it() -> None:
    line = {
        "time": 10,
        "signals": {
            "allocatableMemory.available": {
                "available": 300 * Mi,
                "capacity": 2 * Gi,
                "activeFile": 1500 * Mi,
            }
        },
        "pods": [
            {"name": "cache", "usage": {"memory": 1700 * Mi, "activeFile": 1500 * Mi}},
        ],
    }
    samples = list(parse_trace([json.dumps(line)]))
    assert samples[0].observations.active_file == {ALLOCATABLE: 1500 * Mi}
    assert samples[0].observations.pods[PodUID("default/cache")].active_file == 1500 * Mi
    for page_cache, evicted in (("workingSet", ["cache"]), ("reclaimable", [])):
        chosen = policy(
            eviction_hard="allocatableMemory.available<500Mi", active_page_cache=page_cache
        )
        cycles = list(replay.replay(chosen, samples))
        assert [e.pod.name for e in cycles[0].decision.evictions] == evicted


def test_a_trace_refuses_active_file_on_other_signals() -> None:
    line = {
        "time": 0,
        "signals": {"nodefs.available": {"available": 1, "capacity": 2, "activeFile": 1}},
    }
    with pytest.raises(TraceError, match="activeFile"):
        list(parse_trace([json.dumps(line)]))


# --- properties ---------------------------------------------------------------------------

SIZES = st.integers(min_value=0, max_value=64 * Gi)


@st.composite
def collections(draw: st.DrawFn) -> NodeObservations:
    signals = {}
    active = {}
    for signal in (Signal.MEMORY_AVAILABLE, ALLOCATABLE):
        capacity = draw(st.integers(min_value=1, max_value=64 * Gi))
        signals[signal] = (draw(st.integers(min_value=0, max_value=capacity)), capacity)
        if draw(st.booleans()):
            active[signal] = draw(SIZES)
    pods = {
        f"p{n}": usage(
            f"p{n}",
            memory=draw(st.none() | SIZES),
            active_file=draw(st.none() | SIZES),
        )
        for n in range(draw(st.integers(min_value=0, max_value=8)))
    }
    return dataclasses.replace(observations(0.0, signals, pods=pods), active_file=active)


@given(collections())
@settings(max_examples=300, deadline=None)
def test_the_view_adds_only_available_memory_within_capacity_once(raw: NodeObservations) -> None:
    counted = view(raw, ActivePageCache.RECLAIMABLE)
    assert view(counted, ActivePageCache.RECLAIMABLE) is counted  # applied once
    for signal in (Signal.MEMORY_AVAILABLE, ALLOCATABLE):
        before, after = raw.value(signal), counted.value(signal)
        assert before is not None and after is not None
        assert before.available <= after.available <= after.capacity == before.capacity
        assert after.available - before.available <= raw.active_file.get(signal, 0)
    for uid, before_usage in raw.pods.items():
        after_usage = counted.pods[uid]
        if before_usage.memory is None:
            assert after_usage.memory is None
        else:
            assert after_usage.memory is not None
            assert 0 <= after_usage.memory <= before_usage.memory
        assert dataclasses.replace(after_usage, memory=before_usage.memory) == before_usage


@given(collections(), st.sampled_from(["100Mi", "500Mi", "1Gi", "10%", "50%"]))
@settings(max_examples=300, deadline=None)
def test_reclaimable_meets_no_threshold_the_kubelets_accounting_does_not(
    raw: NodeObservations, threshold: str
) -> None:
    pods = [pod(str(uid)) for uid in raw.pods]
    met = {}
    for page_cache in ActivePageCache:
        chosen: EvictionPolicy = policy(
            eviction_hard=f"memory.available<{threshold}", active_page_cache=str(page_cache)
        )
        decision, _ = engine.evaluate(chosen, engine.EngineState(), raw, pods, 1.0)
        met[page_cache] = {(t.signal, t.hard) for t in decision.thresholds_met}
        if not met[page_cache]:
            assert not decision.evictions
    assert met[ActivePageCache.RECLAIMABLE] <= met[ActivePageCache.WORKING_SET]


@st.composite
def cached_pods(draw: st.DrawFn) -> tuple[NodeObservations, list[PodInfo]]:
    """Up to 12 pods, each with a working set, part of it clean active page cache, a
    memory request and a priority, under allocatable memory pressure."""
    infos, usages = [], {}
    for n in range(draw(st.integers(min_value=1, max_value=12))):
        memory = draw(st.integers(min_value=0, max_value=4 * Gi))
        active = draw(st.integers(min_value=0, max_value=memory))
        infos.append(
            pod(
                f"p{n}",
                priority=draw(st.sampled_from([0, 0, 100, 1000])),
                requests={"memory": draw(st.integers(min_value=0, max_value=2 * Gi))},
            )
        )
        usages[f"p{n}"] = usage(f"p{n}", memory=memory, active_file=active)
    return node(10 * Mi, 0, usages, capacity=64 * Gi), infos


@given(cached_pods())
@settings(max_examples=300, deadline=None)
def test_reclaimable_ranks_by_what_a_pod_cannot_give_back(
    case: tuple[NodeObservations, list[PodInfo]],
) -> None:
    observed, infos = case
    chosen = policy(
        eviction_hard="allocatableMemory.available<500Mi", active_page_cache="reclaimable"
    )
    decision, _ = engine.evaluate(chosen, engine.EngineState(), observed, infos, 1.0)
    assert {c.pod.name for c in decision.candidates} == {p.name for p in infos}
    keys = []
    for candidate in decision.candidates:
        figures = observed.pods[candidate.pod.uid]
        assert figures.memory is not None and figures.active_file is not None
        kept = figures.memory - figures.active_file  # what it cannot give back
        request = candidate.pod.requests["memory"]
        assert candidate.reclaim_estimate == kept
        keys.append((kept <= request, candidate.pod.priority, request - kept))
    # above its request first, then lower priority, then the larger excess: sorted
    assert keys == sorted(keys)
