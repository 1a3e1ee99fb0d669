"""The decision core, cycle by cycle: grace periods, transition period, min reclaim,
stale samples, kill grace, conditions and taints, node-level reclaim, PSI and strategies
(the kubelet's ``synchronize``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from nodeagent.eviction import engine
from nodeagent.eviction import layout as fs_layout
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.k8s.pressure import Pressure
from nodeagent.model import (
    Decision,
    FsLayout,
    NodeObservations,
    PodInfo,
    PsiLine,
    PsiStats,
    Signal,
    Unavailable,
)

from .builders import Gi, Mi, memory, observations, pod, policy, usage

PODS = (
    pod("best-effort", priority=0),
    pod("burstable", priority=0, requests={"memory": 100 * Mi}),
    pod("critical", namespace="kube-system", priority=2_000_000_000),
)
USAGE = {
    "best-effort": usage("best-effort", memory=500 * Mi),
    "burstable": usage("burstable", memory=300 * Mi),
    "critical": usage("critical", memory=3 * Gi),
}


def run(
    resolved: EvictionPolicy,
    steps: Sequence[NodeObservations],
    pods: Sequence[PodInfo] = PODS,
) -> list[Decision]:
    """Evaluate each step at its own time, carrying the state."""
    state = engine.EngineState()
    decisions = []
    for step in steps:
        decision, state = engine.evaluate(resolved, state, step, pods, step.time)
        decisions.append(decision)
    return decisions


def evicted(decision: Decision) -> list[tuple[str, int]]:
    return [(e.pod.name, e.grace_period_seconds) for e in decision.evictions]


def test_the_kubelets_memory_pressure_timeline() -> None:
    # TestMemoryPressure: hard 1Gi, soft 2Gi/2m, max pod grace 5 s, transition 5m.
    resolved = policy(
        eviction_hard="memory.available<1Gi",
        eviction_soft="memory.available<2Gi",
        eviction_soft_grace_period="memory.available=2m",
        eviction_max_pod_grace_period="5",
    )
    timeline = [
        # time, available, memory pressure, evictions
        (0, 3 * Gi, False, []),
        (60, 1500 * Mi, True, []),  # soft met: condition at once, no eviction
        (179, 1500 * Mi, True, []),  # 119 s into the 2 minute grace period
        (180, 1500 * Mi, True, [("best-effort", 5)]),  # grace over: soft eviction
        (240, 500 * Mi, True, [("best-effort", 1)]),  # hard: immediate, 1 s grace
        (250, 3 * Gi, True, []),  # recovered, but the condition holds
        (539, 3 * Gi, True, []),  # 299 s after the last met sample
        (540, 3 * Gi, False, []),  # exactly the transition period: off
    ]
    decisions = run(resolved, [memory(a, 10 * Gi, time=t, pods=USAGE) for t, a, _, _ in timeline])
    for (time, _, pressure, evictions), decision in zip(timeline, decisions, strict=True):
        assert decision.pressure[Pressure.MEMORY] is pressure, time
        assert evicted(decision) == evictions, time


def test_one_good_sample_restarts_the_grace_period() -> None:
    resolved = policy(
        eviction_hard="",
        eviction_soft="memory.available<1Gi",
        eviction_soft_grace_period="memory.available=60s",
    )
    steps = [(0, 900), (30, 1100), (40, 900), (90, 900), (100, 900)]
    decisions = run(resolved, [memory(a * Mi, time=t, pods=USAGE) for t, a in steps])
    assert [bool(d.evictions) for d in decisions] == [False, False, False, False, True]
    assert [m.grace_satisfied for m in decisions[3].thresholds_met] == [False]


def test_soft_threshold_sets_the_condition_before_its_grace_period() -> None:
    resolved = policy(
        eviction_soft="memory.available<1Gi", eviction_soft_grace_period="memory.available=1h"
    )
    (decision,) = run(resolved, [memory(900 * Mi, pods=USAGE)])
    assert decision.pressure[Pressure.MEMORY]
    assert not decision.evictions
    assert [(m.signal, m.hard, m.grace_satisfied) for m in decision.thresholds_met] == [
        (Signal.MEMORY_AVAILABLE, False, False)
    ]


def test_min_reclaim_keeps_an_acted_threshold_active_until_threshold_plus_reclaim() -> None:
    resolved = policy(
        eviction_hard="memory.available<1Gi", eviction_minimum_reclaim="memory.available=500Mi"
    )
    steps = [(0, 900 * Mi), (10, 1200 * Mi), (20, 1524 * Mi - 1), (30, 1524 * Mi), (40, 1200 * Mi)]
    decisions = run(resolved, [memory(a, time=t, pods=USAGE) for t, a in steps])
    assert [bool(d.evictions) for d in decisions] == [True, True, True, False, False]
    still = decisions[1].thresholds_met[0]
    assert (still.available, still.threshold_quantity) == (1200 * Mi, Gi)


def test_min_reclaim_does_not_hold_a_soft_threshold_that_never_acted() -> None:
    resolved = policy(
        eviction_hard="",
        eviction_soft="memory.available<1Gi",
        eviction_soft_grace_period="memory.available=30s",
        eviction_minimum_reclaim="memory.available=500Mi",
    )
    # Met at 0, within threshold + reclaim at 10 (not yet acted on: dropped), met again.
    steps = [(0, 900), (10, 1200), (20, 900), (40, 900), (50, 900)]
    decisions = run(resolved, [memory(a * Mi, time=t, pods=USAGE) for t, a in steps])
    assert [bool(d.evictions) for d in decisions] == [False, False, False, False, True]
    assert decisions[1].thresholds_met == ()


def test_no_second_eviction_on_a_stale_sample() -> None:
    resolved = policy(eviction_hard="memory.available<1Gi")
    same_sample = memory(500 * Mi, time=10, pods=USAGE)
    state = engine.EngineState()
    first, state = engine.evaluate(resolved, state, same_sample, PODS, 10)
    again, state = engine.evaluate(resolved, state, same_sample, PODS, 11)
    fresh, _ = engine.evaluate(resolved, state, memory(500 * Mi, time=12, pods=USAGE), PODS, 12)
    assert (bool(first.evictions), bool(again.evictions), bool(fresh.evictions)) == (
        True,
        False,
        True,
    )
    assert again.pressure[Pressure.MEMORY]
    assert again.thresholds_met[0].grace_satisfied


def test_a_signal_carried_over_from_an_earlier_read_is_judged_by_its_own_time() -> None:
    """A filesystem-only poll carries memory over from its last read; the kubelet compares
    each signal's own observation time, so the carried value is not acted on twice, and
    one signal's staleness does not hold back a fresh one."""
    resolved = policy(eviction_hard="memory.available<1Gi,nodefs.available<10%")
    read = memory(500 * Mi, time=10, pods=USAGE)
    state = engine.EngineState()
    first, state = engine.evaluate(resolved, state, read, PODS, 10)
    carried = NodeObservations(
        time=10.5,
        signals=read.signals,
        pods=read.pods,
        sampled_at={Signal.MEMORY_AVAILABLE: 10.0},
    )
    again, state = engine.evaluate(resolved, state, carried, PODS, 10.5)
    fresh, _ = engine.evaluate(resolved, state, memory(500 * Mi, time=11, pods=USAGE), PODS, 11)
    assert [bool(d.evictions) for d in (first, again, fresh)] == [True, False, True]
    assert again.pressure[Pressure.MEMORY] and again.thresholds_met[0].grace_satisfied
    assert state.observed_at[Signal.MEMORY_AVAILABLE] == 10.0


@pytest.mark.parametrize(
    ("hard", "max_grace", "pod_grace", "expected"),
    [
        pytest.param(True, 30, 60, 1, id="hard-1s"),
        pytest.param(False, 5, 30, 5, id="soft-capped-by-max"),
        pytest.param(False, 30, 2, 2, id="soft-capped-by-pod"),
        pytest.param(False, 0, 30, 0, id="soft-default-max-0"),
        pytest.param(False, -1, 45, 45, id="negative-max-defers-to-pod"),
    ],
)
def test_kill_grace_period(hard: bool, max_grace: int, pod_grace: int, expected: int) -> None:
    threshold = "memory.available<1Gi"
    resolved = policy(
        eviction_hard=threshold if hard else "",
        eviction_soft="" if hard else threshold,
        eviction_soft_grace_period="memory.available=10s",
        eviction_max_pod_grace_period=str(max_grace),
    )
    victim = pod("victim", termination_grace_period_seconds=pod_grace)
    steps = [memory(500 * Mi, time=t, pods={"victim": usage("victim", memory=Gi)}) for t in (0, 10)]
    decisions = run(resolved, steps, [victim])
    assert evicted(decisions[-1]) == [("victim", expected)]


@pytest.mark.parametrize(
    "protected",
    [
        pytest.param({"critical": True}, id="critical-flag"),
        pytest.param({"priority": 2_000_000_000}, id="system-cluster-critical"),
        pytest.param({"priority": 2_000_001_000}, id="system-node-critical"),
        pytest.param({"static": True}, id="static"),
        pytest.param({"mirror": True}, id="mirror"),
    ],
)
def test_critical_static_and_mirror_pods_are_never_candidates(protected: dict[str, Any]) -> None:
    resolved = policy(eviction_hard="memory.available<1Gi")
    pods = [
        pod("protected", **protected),
        pod("ordinary", priority=1000, requests={"memory": 4 * Gi}),
    ]
    use = {"protected": usage("protected", memory=6 * Gi), "ordinary": usage("ordinary", memory=Gi)}
    (decision,) = run(resolved, [memory(100 * Mi, pods=use)], pods)
    assert decision.ranked == ("default/ordinary",)
    assert evicted(decision) == [("ordinary", 1)]


def test_nothing_evictable_means_no_eviction_but_pressure() -> None:
    resolved = policy(eviction_hard="memory.available<1Gi")
    (decision,) = run(resolved, [memory(100 * Mi, pods=USAGE)], [PODS[2]])
    assert decision.pressure[Pressure.MEMORY]
    assert decision.evictions == decision.candidates == ()


def test_candidates_are_every_evictable_pod_in_order_with_messages() -> None:
    resolved = policy(eviction_hard="memory.available<1Gi")
    (decision,) = run(resolved, [memory(100 * Mi, pods=USAGE)])
    assert decision.ranked == ("default/best-effort", "default/burstable")
    assert decision.evictions == decision.candidates[:1]
    assert [c.reclaim_estimate for c in decision.candidates] == [500 * Mi, 300 * Mi]
    assert all(
        c.message.startswith("The node was low on resource: memory.") for c in decision.candidates
    )


def test_conditions_name_the_signal_the_figures_and_the_state() -> None:
    resolved = policy(
        eviction_hard="memory.available<1Gi",
        eviction_pressure_transition_period="1m",
        condition_types="memory=MemoryPressureByAgent",
    )
    steps = [memory(900 * Mi, time=0, pods=USAGE), memory(3 * Gi, time=10), memory(3 * Gi, time=60)]
    met, held, clear = (d.conditions[0] for d in run(resolved, steps))
    assert met.type == "MemoryPressureByAgent"
    assert (met.status, met.reason) == (True, "MemoryThresholdMet")
    assert met.message == "memory.available 900Mi is below the hard threshold 1Gi"
    assert (held.status, held.reason) == (True, "MemoryPressureTransition")
    assert "transition period (1m0s)" in held.message
    assert (clear.status, clear.reason) == (False, "SufficientMemory")
    assert [c.reason for c in run(resolved, steps)[0].conditions[1:]] == [
        "NoDiskPressure",
        "SufficientPID",
    ]


@pytest.mark.parametrize("soft_taint", [False, True])
def test_taints_follow_conditions_and_soften_before_grace_when_asked(soft_taint: bool) -> None:
    resolved = policy(
        eviction_hard="",
        eviction_soft="memory.available<1Gi",
        eviction_soft_grace_period="memory.available=30s",
        eviction_pressure_transition_period="1m",
        soft_pressure_taint=str(soft_taint).lower(),
        taint_keys="memory=example.com/mem",
    )
    times = [(0, 900), (10, 900), (30, 900), (40, 2048), (89, 2048), (90, 2048)]
    decisions = run(resolved, [memory(a * Mi, time=t, pods=USAGE) for t, a in times])
    effects = [[(t.key, t.effect) for t in d.taints] for d in decisions]
    early = "PreferNoSchedule" if soft_taint else "NoSchedule"
    mem = "example.com/mem"
    assert effects == [
        [(mem, early)],
        [(mem, early)],
        [(mem, "NoSchedule")],  # grace satisfied: acted on
        [(mem, "NoSchedule")],  # held through the transition period
        [(mem, "NoSchedule")],
        [],
    ]


def test_memory_is_reclaimed_before_disk() -> None:
    resolved = policy(eviction_hard="memory.available<1Gi,nodefs.available<10%")
    pods = [pod("writer"), pod("eater")]
    use = {
        "writer": usage("writer", memory=0, rootfs=50 * Gi),
        "eater": usage("eater", memory=2 * Gi, rootfs=0),
    }
    step = observations(
        signals={
            Signal.MEMORY_AVAILABLE: (500 * Mi, 8 * Gi),
            Signal.NODEFS_AVAILABLE: (Gi, 100 * Gi),
        },
        pods=use,
    )
    (decision,) = run(resolved, [step], pods)
    assert decision.pressure[Pressure.MEMORY] and decision.pressure[Pressure.DISK]
    assert [(e.pod.name, e.signal) for e in decision.evictions] == [
        ("eater", Signal.MEMORY_AVAILABLE)
    ]


def test_hard_threshold_wins_over_soft_for_the_same_signal() -> None:
    resolved = policy(
        eviction_hard="memory.available<1Gi",
        eviction_soft="memory.available<2Gi",
        eviction_soft_grace_period="memory.available=0s",
        eviction_max_pod_grace_period="30",
    )
    (decision,) = run(resolved, [memory(500 * Mi, pods=USAGE)])
    assert evicted(decision) == [("best-effort", 1)]
    assert "Threshold quantity: 1Gi, available: 500Mi." in decision.evictions[0].message


def test_unavailable_signals_are_never_met() -> None:
    resolved = policy(eviction_hard="memory.available<1Gi")
    step = observations(signals={Signal.MEMORY_AVAILABLE: Unavailable("memory.stat unreadable")})
    (decision,) = run(resolved, [step])
    assert decision.thresholds_met == () and not decision.pressure[Pressure.MEMORY]


def test_allocatable_threshold_acts_on_the_kubepods_observation() -> None:
    resolved = policy(eviction_hard="memory.available<500Mi")
    step = observations(
        signals={
            Signal.MEMORY_AVAILABLE: (4 * Gi, 8 * Gi),
            Signal.ALLOCATABLE_MEMORY_AVAILABLE: (400 * Mi, 6 * Gi),
        },
        pods=USAGE,
    )
    (decision,) = run(resolved, [step])
    assert [m.signal for m in decision.thresholds_met] == [Signal.ALLOCATABLE_MEMORY_AVAILABLE]
    assert decision.evictions[0].signal is Signal.ALLOCATABLE_MEMORY_AVAILABLE


@pytest.mark.parametrize(
    ("layout", "configured", "signal", "observed", "expected"),
    [
        pytest.param(
            FsLayout.SINGLE,
            Signal.IMAGEFS_AVAILABLE,
            Signal.IMAGEFS_AVAILABLE,
            Signal.NODEFS_AVAILABLE,
            True,
            id="single-imagefs-is-nodefs",
        ),
        pytest.param(
            FsLayout.SINGLE,
            Signal.NODEFS_AVAILABLE,
            Signal.CONTAINERFS_AVAILABLE,
            Signal.NODEFS_AVAILABLE,
            True,
            id="single-containerfs-is-nodefs",
        ),
        pytest.param(
            FsLayout.SPLIT,
            Signal.NODEFS_AVAILABLE,
            Signal.CONTAINERFS_AVAILABLE,
            Signal.NODEFS_AVAILABLE,
            True,
            id="split-containerfs-is-nodefs",
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS,
            Signal.IMAGEFS_AVAILABLE,
            Signal.CONTAINERFS_AVAILABLE,
            Signal.IMAGEFS_AVAILABLE,
            True,
            id="dedicated-containerfs-is-imagefs",
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS,
            Signal.IMAGEFS_AVAILABLE,
            Signal.IMAGEFS_AVAILABLE,
            Signal.NODEFS_AVAILABLE,
            False,
            id="dedicated-imagefs-is-its-own",
        ),
        pytest.param(
            FsLayout.SPLIT,
            Signal.IMAGEFS_AVAILABLE,
            Signal.IMAGEFS_AVAILABLE,
            Signal.NODEFS_AVAILABLE,
            False,
            id="split-imagefs-is-its-own",
        ),
    ],
)
def test_unreported_filesystems_are_read_from_the_one_they_share(
    layout: FsLayout, configured: Signal, signal: Signal, observed: Signal, expected: bool
) -> None:
    resolved = policy(eviction_hard=f"{configured}<10Gi")
    step = observations(signals={observed: (Gi, 100 * Gi)}, layout=layout)
    (decision,) = run(resolved, [step], [])
    assert (signal in {m.signal for m in decision.thresholds_met}) is expected


@pytest.mark.parametrize(
    ("layout", "signal", "reclaim"),
    [
        pytest.param(
            FsLayout.SINGLE, Signal.NODEFS_AVAILABLE, ("containers", "images"), id="single-nodefs"
        ),
        pytest.param(
            FsLayout.SINGLE, Signal.IMAGEFS_AVAILABLE, ("containers", "images"), id="single-imagefs"
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS, Signal.NODEFS_AVAILABLE, (), id="dedicated-nodefs-nothing"
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS,
            Signal.IMAGEFS_AVAILABLE,
            ("containers", "images"),
            id="dedicated-imagefs",
        ),
        pytest.param(FsLayout.SPLIT, Signal.NODEFS_AVAILABLE, ("containers",), id="split-nodefs"),
        pytest.param(FsLayout.SPLIT, Signal.IMAGEFS_AVAILABLE, ("images",), id="split-imagefs"),
        pytest.param(
            FsLayout.SINGLE, Signal.NODEFS_INODES_FREE, ("containers", "images"), id="inodes"
        ),
        pytest.param(FsLayout.SINGLE, Signal.PID_AVAILABLE, (), id="pids-nothing"),
        pytest.param(FsLayout.SINGLE, Signal.MEMORY_AVAILABLE, (), id="memory-nothing"),
    ],
)
def test_node_level_reclaim_by_layout(
    layout: FsLayout, signal: Signal, reclaim: tuple[str, ...]
) -> None:
    resolved = policy(eviction_hard=f"{signal}<10Gi")
    step = observations(
        signals={signal: (Gi, 100 * Gi)}, layout=layout, pods={"p": usage("p", rootfs=Gi)}
    )
    (decision,) = run(resolved, [step], [pod("p")])
    assert decision.node_reclaim == reclaim
    assert evicted(decision) == [("p", 1)]  # nothing says reclaim would be enough


_CONTAINERS_THEN_IMAGES = ("containers", "images")


@pytest.mark.parametrize(
    ("layout", "reclaims"),
    [
        pytest.param(
            FsLayout.SINGLE,
            {"nodefs": _CONTAINERS_THEN_IMAGES, "imagefs": _CONTAINERS_THEN_IMAGES},
            id="single",
        ),
        pytest.param(
            FsLayout.DEDICATED_IMAGEFS,
            {"nodefs": (), "imagefs": _CONTAINERS_THEN_IMAGES},
            id="dedicated",
        ),
        pytest.param(
            FsLayout.SPLIT, {"nodefs": ("containers",), "imagefs": ("images",)}, id="split"
        ),
    ],
)
def test_reclaim_kinds_are_the_reference_table(
    layout: FsLayout, reclaims: dict[str, tuple[str, ...]]
) -> None:
    """``buildSignalToNodeReclaimFuncs``, every cell: containerfs reclaims as nodefs on a
    single and a split node, as imagefs on a dedicated one; bytes and inodes alike."""
    containerfs = reclaims["imagefs" if layout is FsLayout.DEDICATED_IMAGEFS else "nodefs"]
    expected = {**reclaims, "containerfs": containerfs}
    for prefix, kinds in expected.items():
        for resource in ("available", "inodesFree"):
            assert fs_layout.reclaim_kinds(Signal(f"{prefix}.{resource}"), layout) == kinds


def test_containerfs_on_a_split_node_reclaims_dead_containers() -> None:
    # containerfs thresholds are nodefs's here; observed alone, containerfs is acted on.
    resolved = policy(eviction_hard="nodefs.available<10Gi")
    step = observations(
        signals={Signal.CONTAINERFS_AVAILABLE: (Gi, 100 * Gi)},
        layout=FsLayout.SPLIT,
        pods={"p": usage("p", rootfs=Gi)},
    )
    (decision,) = run(resolved, [step], [pod("p")])
    assert decision.evictions[0].signal is Signal.CONTAINERFS_AVAILABLE
    assert decision.node_reclaim == ("containers",)


@pytest.mark.parametrize(
    ("images", "evicts"),
    [
        pytest.param(9 * Gi + 500 * Mi, False, id="reclaim-reaches-threshold-plus-reclaim"),
        pytest.param(9 * Gi + 499 * Mi, True, id="short-by-a-mebibyte"),
        pytest.param(0, True, id="nothing-to-reclaim"),
    ],
)
def test_pods_are_spared_when_node_reclaim_is_enough(images: int, evicts: bool) -> None:
    # Docs/test-derived: GC that restores enough skips eviction; short of
    # threshold + min reclaim it still evicts.
    resolved = policy(
        eviction_hard="nodefs.available<10Gi", eviction_minimum_reclaim="nodefs.available=500Mi"
    )
    step = observations(
        signals={Signal.NODEFS_AVAILABLE: (Gi, 100 * Gi)},
        reclaimable={"images": images, "containers": 0},
        pods={"p": usage("p", logs=Gi)},
    )
    (decision,) = run(resolved, [step], [pod("p")])
    assert decision.node_reclaim == ("containers", "images")
    assert bool(decision.evictions) is evicts


def test_after_reclaim_any_threshold_still_met_forces_eviction() -> None:
    # The kubelet's global check: an unrelated soft threshold (not past its grace period)
    # still met after reclaim means pods are evicted anyway.
    resolved = policy(
        eviction_hard="nodefs.available<10Gi",
        eviction_soft="memory.available<1Gi",
        eviction_soft_grace_period="memory.available=1h",
    )
    step = observations(
        signals={
            Signal.NODEFS_AVAILABLE: (Gi, 100 * Gi),
            Signal.MEMORY_AVAILABLE: (500 * Mi, 8 * Gi),
        },
        reclaimable={"images": 50 * Gi},
        pods={"p": usage("p", logs=Gi, memory=Mi)},
    )
    (decision,) = run(resolved, [step], [pod("p")])
    assert evicted(decision) == [("p", 1)]


def psi(some10: float, full10: float | None = None) -> PsiStats:
    full = None if full10 is None else PsiLine(full10, 0, 0, 0)
    return PsiStats(some=PsiLine(some10, 0, 0, 0), full=full)


@pytest.mark.parametrize(
    ("scopes", "stall"),
    [
        pytest.param({"memory": psi(30), "node/memory": psi(10)}, 10, id="node-cgroup-first"),
        pytest.param({"memory": psi(30)}, 30, id="system-otherwise"),
        pytest.param({"io": psi(90)}, None, id="other-resource-unobserved"),
    ],
)
def test_psi_signals_read_the_node_cgroup_before_the_system(
    scopes: dict[str, PsiStats], stall: float | None
) -> None:
    resolved = policy(eviction_hard="memory.pressure.some.avg10>0")
    (decision,) = run(resolved, [observations(psi=scopes)], [])
    observed = [(10000 - m.available) / 100 for m in decision.thresholds_met]
    assert observed == ([] if stall is None else [stall])


def test_psi_full_line_missing_is_no_observation() -> None:
    resolved = policy(eviction_hard="memory.pressure.full.avg10>1")
    (decision,) = run(resolved, [observations(psi={"memory": psi(99)})], [])
    assert decision.thresholds_met == ()


def test_psi_pressure_evicts_by_memory_rank_then_waits_for_the_average_to_follow() -> None:
    resolved = policy(eviction_hard="memory.pressure.some.avg10>20")
    steps = [
        observations(t, psi={"memory": psi(stall)}, pods=USAGE)
        for t, stall in ((0, 40), (5, 35), (9.9, 30), (10, 25), (20, 19))
    ]
    decisions = run(resolved, steps)
    assert [evicted(d) for d in decisions] == [
        [("best-effort", 1)],
        [],  # within avg10's window since the eviction: the average still shows it
        [],
        [("best-effort", 1)],  # a window later and still stalled: act again
        [],
    ]
    assert (
        decisions[0]
        .evictions[0]
        .message.startswith(
            "The node was under memory pressure. Threshold: memory.pressure.some.avg10 > 20%, "
            "observed: 40%. "
        )
    )
    assert all(d.pressure[Pressure.MEMORY] for d in decisions)


def test_io_pressure_maps_to_disk_and_ranks_by_disk_use() -> None:
    resolved = policy(eviction_hard="io.pressure.full.avg10>30")
    pods = [pod("reader"), pod("writer")]
    use = {
        "reader": usage("reader", memory=4 * Gi, logs=Mi),
        "writer": usage("writer", memory=Mi, logs=9 * Gi),
    }
    (decision,) = run(resolved, [observations(psi={"io": psi(50, 45)}, pods=use)], pods)
    assert decision.pressure == {Pressure.MEMORY: False, Pressure.DISK: True, Pressure.PID: False}
    assert decision.ranked == ("default/writer", "default/reader")


def test_relief_evicts_the_shortest_prefix_that_ends_the_pressure() -> None:
    pods = [pod(f"p{i}", priority=i) for i in range(5)]
    use = {f"p{i}": usage(f"p{i}", memory=300 * Mi) for i in range(5)}
    step = memory(500 * Mi, pods=use)
    common = {
        "eviction_hard": "memory.available<1Gi",
        "eviction_minimum_reclaim": "memory.available=200Mi",
    }
    (kubelet,) = run(policy(**common), [step], pods)
    (relief,) = run(policy(eviction_strategy="relief", **common), [step], pods)
    # need = 1Gi + 200Mi - 500Mi = 724Mi -> three pods of 300Mi
    assert [e.pod.name for e in kubelet.evictions] == ["p0"]
    assert [e.pod.name for e in relief.evictions] == ["p0", "p1", "p2"]
    assert relief.evictions == relief.candidates[:3]


def test_relief_counts_node_reclaim_and_skips_pods_that_free_nothing() -> None:
    pods = [pod("a"), pod("b"), pod("idle"), pod("c")]
    use = {
        "a": usage("a", logs=Gi),
        "b": usage("b", logs=Gi),
        "idle": usage("idle", logs=0),
        "c": usage("c", logs=0),
    }
    resolved = policy(eviction_hard="nodefs.available<10Gi", eviction_strategy="relief")
    step = observations(
        signals={Signal.NODEFS_AVAILABLE: (5 * Gi, 100 * Gi)},
        pods=use,
        reclaimable={"images": 2 * Gi},
    )
    (decision,) = run(resolved, [step], pods)
    # need 5Gi, images free 2Gi, a and b 1Gi each: not enough, and the rest free nothing.
    assert [e.pod.name for e in decision.evictions] == ["a", "b"]


def test_decision_is_stamped_with_now_and_pure() -> None:
    resolved = policy(eviction_hard="memory.available<1Gi")
    state = engine.EngineState()
    step = memory(500 * Mi, time=3, pods=USAGE)
    first = engine.evaluate(resolved, state, step, PODS, 7.5)
    second = engine.evaluate(resolved, state, step, PODS, 7.5)
    assert first == second
    assert first[0].time == 7.5


def test_enforced_thresholds_are_the_most_lenient_resolved_per_observed_signal() -> None:
    resolved = policy(
        eviction_hard="memory.available<1Gi,nodefs.available<10%,pid.available<100",
        eviction_soft="memory.available<2Gi,memory.pressure.some.avg10>20",
        eviction_soft_grace_period="memory.available=1m,memory.pressure.some.avg10=10s",
    )
    step = observations(
        signals={
            Signal.MEMORY_AVAILABLE: (4 * Gi, 8 * Gi),
            Signal.NODEFS_AVAILABLE: (5 * Gi, 10 * Gi),
        },
        psi={"memory": psi(1)},
    )
    assert resolved.enforced_thresholds(step) == {
        Signal.MEMORY_AVAILABLE: Gi,
        Signal.NODEFS_AVAILABLE: 1_073_741_840,
        Signal.CONTAINERFS_AVAILABLE: 1_073_741_840,  # the single filesystem's stand-in
        Signal.MEMORY_PRESSURE_SOME_AVG10: 8000,  # 20% stalled, in unstalled hundredths
    }


def test_a_soft_threshold_with_zero_grace_is_flagged() -> None:
    resolved = policy(
        eviction_soft="memory.available<1Gi", eviction_soft_grace_period="memory.available=0s"
    )
    assert any("acts as a hard threshold" in warning for warning in resolved.warnings)
