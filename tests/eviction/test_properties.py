"""Invariants over generated nodes: protected pods are never chosen, memory evictions
respect requests, and ``relief`` never evicts more than ``kubelet`` while ending the
pressure in fewer cycles."""

from __future__ import annotations

import functools
from dataclasses import dataclass

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


@given(nodes())
@settings(max_examples=200, deadline=None)
def test_memory_never_takes_a_pod_within_its_request_while_one_above_it_is_left(node: Node) -> None:
    observations = NodeObservations(
        0.0,
        {Signal.MEMORY_AVAILABLE: SignalValue(100 * Mi, 64 * Gi)},
        node.observations.pods,
    )
    decision, _ = engine.evaluate(POLICY, engine.EngineState(), observations, node.pods, 0)

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


@st.composite
def pressured_nodes(draw: st.DrawFn) -> tuple[int, int, list[tuple[int, int]]]:
    """(available, min reclaim, [(memory usage, priority)]) under memory pressure."""
    available = draw(st.integers(min_value=0, max_value=Gi - 1))
    reclaim = draw(st.sampled_from([0, 64 * Mi, 512 * Mi]))
    usage = st.one_of(st.sampled_from([0, 100 * Mi, 300 * Mi, 700 * Mi]), st.integers(0, Gi))
    pods = draw(st.lists(st.tuples(usage, st.integers(-5, 5)), min_size=1, max_size=12))
    return available, reclaim, pods


@functools.cache
def memory_policy(strategy: str, reclaim: int) -> EvictionPolicy:
    return policy(
        eviction_hard="memory.available<1Gi",
        eviction_minimum_reclaim=f"memory.available={reclaim}",
        eviction_strategy=strategy,
    )


def run_to_rest(
    strategy: str, available: int, reclaim: int, pods: list[tuple[int, int]]
) -> list[int]:
    """Evictions per cycle over a node whose pods free what they use when evicted."""
    resolved = memory_policy(strategy, reclaim)
    infos = tuple(
        PodInfo("default", f"p{i}", PodUID(f"p{i}"), priority=priority)
        for i, (_, priority) in enumerate(pods)
    )
    usage = {
        PodUID(f"p{i}"): PodUsage(PodUID(f"p{i}"), memory=used) for i, (used, _) in enumerate(pods)
    }
    samples = [
        TraceSample(
            line=n,
            observations=NodeObservations(
                float(n * 10),
                {Signal.MEMORY_AVAILABLE: SignalValue(available, 16 * Gi)},
                usage,
            ),
            pods=infos,
        )
        for n in range(len(pods) + 2)
    ]
    return [len(c.decision.evictions) for c in replay.replay(resolved, samples, model_reclaim=True)]


@given(pressured_nodes())
@settings(max_examples=300, deadline=None)
def test_relief_evicts_no_more_than_kubelet_and_ends_pressure_sooner(
    node: tuple[int, int, list[tuple[int, int]]],
) -> None:
    available, reclaim, pods = node
    kubelet = run_to_rest("kubelet", available, reclaim, pods)
    relief = run_to_rest("relief", available, reclaim, pods)
    assert sum(relief) <= sum(kubelet)
    cycles_kubelet = sum(1 for n in kubelet if n)
    cycles_relief = sum(1 for n in relief if n)
    assert cycles_relief <= cycles_kubelet
    need = Gi + reclaim - available
    reachable = sum(used for used, _ in pods) >= need
    if reachable and sum(kubelet) >= 2:
        assert cycles_relief < cycles_kubelet
        assert cycles_relief == 1
    assert kubelet[-1] == relief[-1] == 0  # both come to rest
