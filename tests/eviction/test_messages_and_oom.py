"""The words the agent publishes (eviction messages, condition reasons) and the
oom_score_adj table (the kubelet's ``evictionMessage``, ``nodestatus/setters.go``,
``GetContainerOOMScoreAdjust``)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.eviction import engine, messages, oom
from nodeagent.k8s.pods import QOSClass
from nodeagent.k8s.pressure import Pressure
from nodeagent.model import FsLayout, PodInfo, PodUsage, Signal

from .builders import Gi, Mi, observations, pod, policy, usage


@pytest.mark.parametrize(
    ("hard", "signal", "observed", "victim", "use", "message"),
    [
        pytest.param(
            "memory.available<1Gi",
            Signal.MEMORY_AVAILABLE,
            (500 * Mi, 8 * Gi),
            pod("web", requests={"memory": 100 * Mi}),
            usage("web", memory=600 * Mi),
            "The node was low on resource: memory. Threshold quantity: 1Gi, available: 500Mi. "
            "Pod web was using 600Mi, request is 100Mi, has larger consumption of memory. ",
            id="memory-over-request",
        ),
        pytest.param(
            "memory.available<1.5Gi",
            Signal.MEMORY_AVAILABLE,
            (Gi + 1, 8 * Gi),
            pod("db", requests={"memory": 2 * Gi}),
            usage("db", memory=Gi),
            "The node was low on resource: memory. Threshold quantity: 1536Mi, available: "
            "1073741825. ",
            id="within-request-no-pod-sentence-canonical-quantities",
        ),
        pytest.param(
            "memory.available<1G",
            Signal.MEMORY_AVAILABLE,
            (500 * Mi, 8 * Gi),
            pod("be"),
            usage("be", memory=0),
            "The node was low on resource: memory. Threshold quantity: 1G, available: 500Mi. ",
            id="decimal-threshold-prints-decimal-zero-usage-is-within",
        ),
        pytest.param(
            "nodefs.available<10%",
            Signal.NODEFS_AVAILABLE,
            (Gi, 10 * Gi),
            pod("logger", requests={"ephemeral-storage": Gi}),
            usage("logger", logs=3 * Gi),
            "The node was low on resource: ephemeral-storage. Threshold quantity: 1073741840, "
            "available: 1Gi. Pod logger was using 3Gi, request is 1Gi, has larger consumption "
            "of ephemeral-storage. ",
            id="percentage-resolves-with-float32-artefact",
        ),
        pytest.param(
            "nodefs.inodesFree<5%",
            Signal.NODEFS_INODES_FREE,
            (40_000, 1_000_000),
            pod("tiny"),
            usage("tiny", rootfs_inodes=900_000),
            "The node was low on resource: inodes. Threshold quantity: 50000, available: 40000. ",
            id="inodes-no-pod-sentence",
        ),
        pytest.param(
            "pid.available<100",
            Signal.PID_AVAILABLE,
            (50, 4_194_304),
            pod("forker"),
            usage("forker", processes=4000),
            "The node was low on resource: pids. Threshold quantity: 100, available: 50. ",
            id="pids",
        ),
        pytest.param(
            "io.pressure.full.avg10>30",
            Signal.IO_PRESSURE_FULL_AVG10,
            (10000 - 4550, 10000),
            pod("writer"),
            usage("writer", logs=9 * Gi),
            "The node was under io pressure. Threshold: io.pressure.full.avg10 > 30%, observed: "
            "45.5%. Pod writer was using 9Gi, request is 0, has larger consumption of "
            "ephemeral-storage. ",
            id="io-psi",
        ),
    ],
)
def test_eviction_messages(  # noqa: PLR0917 - one parameter per table column
    hard: str,
    signal: Signal,
    observed: tuple[int, int],
    victim: PodInfo,
    use: PodUsage,
    message: str,
) -> None:
    step = observations(signals={signal: observed}, pods={victim.name: use})
    decision, _ = engine.evaluate(
        policy(eviction_hard=hard), engine.EngineState(), step, [victim], 0
    )
    assert [e.message for e in decision.evictions] == [message]


@pytest.mark.parametrize(
    ("pressure", "met", "held", "reason"),
    [
        (Pressure.MEMORY, True, True, "MemoryThresholdMet"),
        (Pressure.MEMORY, False, True, "MemoryPressureTransition"),
        (Pressure.MEMORY, False, False, "SufficientMemory"),
        (Pressure.DISK, True, True, "DiskThresholdMet"),
        (Pressure.DISK, False, True, "DiskPressureTransition"),
        (Pressure.DISK, False, False, "NoDiskPressure"),
        (Pressure.PID, True, True, "PIDThresholdMet"),
        (Pressure.PID, False, True, "PIDPressureTransition"),
        (Pressure.PID, False, False, "SufficientPID"),
    ],
)
def test_condition_reasons(pressure: Pressure, met: bool, held: bool, reason: str) -> None:
    assert messages.condition_reason(pressure, met=met, held=held) == reason


def test_condition_message_for_a_threshold_held_by_min_reclaim() -> None:
    resolved = policy(
        eviction_hard="nodefs.available<1Gi", eviction_minimum_reclaim="nodefs.available=500Mi"
    )
    state = engine.EngineState()
    steps = [(0, 900 * Mi), (10, 1200 * Mi)]
    for time, available in steps:
        step = observations(
            time,
            {Signal.NODEFS_AVAILABLE: (available, 100 * Gi)},
            layout=FsLayout.DEDICATED_IMAGEFS,
        )
        decision, state = engine.evaluate(resolved, state, step, [], time)
    assert decision.conditions[1].message == (
        "nodefs.available 1200Mi has not yet recovered to 1Gi plus the minimum reclaim 500Mi "
        "(hard threshold)"
    )


CAPACITY = 8_000_000_000


@pytest.mark.parametrize(
    ("qos", "memory_request", "expected"),
    [
        pytest.param(QOSClass.GUARANTEED, 4_000_000_000, -997, id="guaranteed"),
        pytest.param(QOSClass.BEST_EFFORT, 0, 1000, id="best-effort"),
        pytest.param(QOSClass.BURSTABLE, 4_000_000_000, 500, id="burstable-half"),
        pytest.param(QOSClass.BURSTABLE, 1_000_000_000, 875, id="burstable-eighth"),
        pytest.param(QOSClass.BURSTABLE, 0, 999, id="burstable-no-request-stays-below-best-effort"),
        pytest.param(QOSClass.BURSTABLE, 1, 999, id="burstable-tiny-request-floor-division"),
        pytest.param(
            QOSClass.BURSTABLE, CAPACITY, 3, id="burstable-whole-node-stays-above-guaranteed"
        ),
        pytest.param(QOSClass.BURSTABLE, 7_976_000_000, 3, id="burstable-exactly-3"),
        pytest.param(QOSClass.BURSTABLE, 7_984_000_000, 3, id="burstable-2-clamped-to-3"),
        pytest.param(QOSClass.BURSTABLE, 2 * CAPACITY, 3, id="burstable-over-capacity"),
    ],
)
def test_oom_score_adj_by_qos(qos: QOSClass, memory_request: int, expected: int) -> None:
    score = oom.container_oom_score_adj(
        qos=qos, memory_request=memory_request, memory_capacity=CAPACITY
    )
    assert score == expected


def test_node_critical_pods_get_the_guaranteed_score_whatever_their_class() -> None:
    score = oom.container_oom_score_adj(
        qos=QOSClass.BEST_EFFORT, memory_request=0, memory_capacity=CAPACITY, node_critical=True
    )
    assert score == oom.GUARANTEED_OOM_SCORE_ADJ


@pytest.mark.parametrize(
    ("own", "smallest_regular", "expected"),
    [
        pytest.param(100 * Mi, 4 * Gi, 750, id="capped-at-smallest-regular"),
        pytest.param(8 * Gi, 4 * Gi, 500, id="already-below-the-cap"),
        pytest.param(100 * Mi, 0, 994, id="no-regular-request-no-cap"),
    ],
)
def test_sidecar_never_scores_above_its_pods_regular_containers(
    own: int, smallest_regular: int, expected: int
) -> None:
    score = oom.container_oom_score_adj(
        qos=QOSClass.BURSTABLE,
        memory_request=own,
        memory_capacity=16 * Gi,
        sidecar=True,
        smallest_regular_request=smallest_regular,
    )
    assert score == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"critical": True, "priority": 2_000_001_000}, -997, id="system-node-critical"
        ),
        pytest.param(
            {"priority": 2_000_001_000}, -997, id="node-critical-priority-alone-is-critical"
        ),
        pytest.param({"static": True, "priority": 2_000_001_000}, -997, id="static-node-critical"),
        pytest.param(
            {"critical": True, "priority": 2_000_000_000}, 1000, id="cluster-critical-best-effort"
        ),
        pytest.param({"static": True}, 1000, id="static-best-effort"),
        pytest.param(
            {"qos": QOSClass.BURSTABLE, "requests": {"memory": 2 * Gi}}, 750, id="burstable"
        ),
    ],
)
def test_pod_oom_score_adj(fields: dict[str, Any], expected: int) -> None:
    assert oom.pod_oom_score_adj(pod("p", **fields), 8 * Gi) == expected


def test_memory_capacity_must_be_known() -> None:
    with pytest.raises(ValueError, match="memory capacity must be positive"):
        oom.container_oom_score_adj(qos=QOSClass.BURSTABLE, memory_request=1, memory_capacity=0)
