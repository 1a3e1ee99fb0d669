"""Invariants over generated nodes: protected pods are never chosen, memory evictions
respect requests, and ``relief`` never evicts more than ``kubelet`` while ending the
pressure in fewer cycles."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.eviction import engine, replay
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.eviction.trace import TraceSample
from nodeagent.model import (
    FsLayout,
    NodeObservations,
    PodInfo,
    PodUID,
    PodUsage,
    Signal,
    SignalValue,
)

from .builders import Gi, Mi, policy

SIGNALS = (
    Signal.MEMORY_AVAILABLE,
    Signal.NODEFS_AVAILABLE,
    Signal.NODEFS_INODES_FREE,
    Signal.IMAGEFS_AVAILABLE,
    Signal.PID_AVAILABLE,
)
POLICY = policy(
    eviction_hard="memory.available<1Gi,nodefs.available<10%,nodefs.inodesFree<5%,"
    "imagefs.available<15%,pid.available<1000"
)


@dataclass(frozen=True)
class Node:
    observations: NodeObservations
    pods: tuple[PodInfo, ...]


maybe_amount = st.one_of(st.none(), st.integers(min_value=0, max_value=4 * Gi))
pod_specs = st.tuples(
    st.sampled_from([-10, 0, 0, 100, 1000, 2_000_000_000, 2_000_001_000]),
    st.sampled_from(["", "", "", "", "", "critical", "static", "mirror"]),
    st.integers(min_value=0, max_value=2 * Gi),
    st.integers(min_value=0, max_value=2 * Gi),
    st.one_of(
        st.none(),  # no stats at all
        st.tuples(
            maybe_amount, maybe_amount, maybe_amount, st.one_of(st.none(), st.integers(0, 5000))
        ),
    ),
)


@st.composite
def nodes(draw: st.DrawFn, max_pods: int = 20) -> Node:
    pods = []
    usage = {}
    for i, (priority, protection, memory, storage, used) in enumerate(
        draw(st.lists(pod_specs, max_size=max_pods))
    ):
        uid = PodUID(f"p{i}")
        pods.append(
            PodInfo(
                namespace="default",
                name=f"p{i}",
                uid=uid,
                priority=priority,
                critical=protection == "critical",
                static=protection == "static",
                mirror=protection == "mirror",
                requests={"memory": memory, "ephemeral-storage": storage},
            )
        )
        if used is not None:
            usage[uid] = PodUsage(
                uid=uid, memory=used[0], rootfs=used[1], logs=used[2], processes=used[3]
            )
    capacity = 64 * Gi
    signals = {
        signal: SignalValue(draw(st.integers(min_value=0, max_value=capacity)), capacity)
        for signal in draw(st.sets(st.sampled_from(SIGNALS), min_size=1))
    }
    layout = draw(st.sampled_from(list(FsLayout)))
    return Node(NodeObservations(0.0, signals, usage, fs_layout=layout), tuple(pods))


RELIEF = policy(
    eviction_hard="memory.available<1Gi,nodefs.available<10%,pid.available<1000",
    eviction_strategy="relief",
)


@given(nodes())
@settings(max_examples=200, deadline=None)
def test_protected_pods_are_never_candidates(node: Node) -> None:
    for resolved in (POLICY, RELIEF):
        decision, _ = engine.evaluate(
            resolved, engine.EngineState(), node.observations, node.pods, 0
        )
        for candidate in decision.candidates:
            pod = candidate.pod
            assert not (pod.critical or pod.static or pod.mirror or pod.priority >= 2_000_000_000)
        assert decision.evictions == decision.candidates[: len(decision.evictions)]


@given(
    nodes(),
    st.sampled_from([Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE]),
    st.sampled_from([POLICY, RELIEF]),
)
@settings(max_examples=200, deadline=None)
def test_memory_never_takes_a_pod_within_its_request_while_one_above_it_is_left(
    node: Node, signal: Signal, resolved: EvictionPolicy
) -> None:
    observations = NodeObservations(
        0.0, {signal: SignalValue(100 * Mi, 64 * Gi)}, node.observations.pods
    )
    decision, _ = engine.evaluate(resolved, engine.EngineState(), observations, node.pods, 0)
    assert all(e.signal is signal for e in decision.candidates)

    def exceeds(pod: PodInfo) -> bool | None:
        usage = observations.pods.get(pod.uid)
        if usage is None or usage.memory is None:
            return None
        return usage.memory > pod.requests.get("memory", 0)

    seen_within = False
    for candidate in decision.candidates:
        state = exceeds(candidate.pod)
        if state is False:
            seen_within = True
        elif state is True:
            assert not seen_within, "a pod above its request ranked after one within it"


PRESSURES = (
    # (signal, layout, the usage figure that counts for it there)
    (Signal.MEMORY_AVAILABLE, FsLayout.SINGLE, "memory"),
    (Signal.NODEFS_AVAILABLE, FsLayout.SINGLE, "rootfs"),
    (Signal.NODEFS_AVAILABLE, FsLayout.DEDICATED_IMAGEFS, "logs"),
    (Signal.IMAGEFS_AVAILABLE, FsLayout.DEDICATED_IMAGEFS, "rootfs"),
    (Signal.NODEFS_AVAILABLE, FsLayout.SPLIT, "local_volumes"),
)


@dataclass(frozen=True)
class Pressured:
    signal: Signal
    layout: FsLayout
    figure: str
    available: int
    reclaim: int
    pods: list[tuple[int | None, int]]
    """(usage of ``figure``, or None for no stats; priority) per pod."""


@st.composite
def pressured_nodes(draw: st.DrawFn) -> Pressured:
    """A node under pressure on one signal, its pods using what that signal counts."""
    signal, layout, figure = draw(st.sampled_from(PRESSURES))
    available = draw(st.integers(min_value=0, max_value=Gi - 1))
    reclaim = draw(st.sampled_from([0, 64 * Mi, 512 * Mi]))
    usage = st.one_of(st.sampled_from([None, 0, 100 * Mi, 300 * Mi, 700 * Mi]), st.integers(0, Gi))
    pods = draw(st.lists(st.tuples(usage, st.integers(-5, 5)), min_size=1, max_size=12))
    return Pressured(signal, layout, figure, available, reclaim, pods)


@functools.cache
def pressure_policy(strategy: str, signal: Signal, reclaim: int) -> EvictionPolicy:
    return policy(
        eviction_hard=f"{signal}<1Gi",
        eviction_minimum_reclaim=f"{signal}={reclaim}",
        eviction_strategy=strategy,
    )


def _figure(name: str, used: int) -> dict[str, Any]:
    return {name: used}


def run_to_rest(strategy: str, node: Pressured) -> list[int]:
    """Evictions per cycle over a node whose pods free what they use when evicted."""
    resolved = pressure_policy(strategy, node.signal, node.reclaim)
    infos = tuple(
        PodInfo("default", f"p{i}", PodUID(f"p{i}"), priority=priority)
        for i, (_, priority) in enumerate(node.pods)
    )
    usage = {
        PodUID(f"p{i}"): PodUsage(PodUID(f"p{i}"), **_figure(node.figure, used))
        for i, (used, _) in enumerate(node.pods)
        if used is not None
    }
    samples = [
        TraceSample(
            line=n,
            observations=NodeObservations(
                float(n * 10),
                {node.signal: SignalValue(node.available, 16 * Gi)},
                usage,
                fs_layout=node.layout,
            ),
            pods=infos,
        )
        for n in range(len(node.pods) + 2)
    ]
    return [len(c.decision.evictions) for c in replay.replay(resolved, samples, model_reclaim=True)]


@given(pressured_nodes())
@settings(max_examples=300, deadline=None)
def test_relief_evicts_no_more_than_kubelet_and_ends_pressure_sooner(node: Pressured) -> None:
    kubelet = run_to_rest("kubelet", node)
    relief = run_to_rest("relief", node)
    assert sum(relief) <= sum(kubelet)
    cycles_kubelet = sum(1 for n in kubelet if n)
    cycles_relief = sum(1 for n in relief if n)
    assert cycles_relief <= cycles_kubelet
    need = Gi + node.reclaim - node.available
    reachable = sum(used or 0 for used, _ in node.pods) >= need
    if reachable and sum(kubelet) >= 2:
        assert cycles_relief < cycles_kubelet
        assert cycles_relief == 1
    assert kubelet[-1] == relief[-1] == 0  # both come to rest
