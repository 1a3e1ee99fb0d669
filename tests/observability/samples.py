"""Realistic values to feed :class:`AgentMetrics` with, shared by the observability and
deployment tests (the dashboard and alert tests check names against a fed registry)."""

from __future__ import annotations

from nodeagent import model
from nodeagent.agent import metrics
from nodeagent.k8s.pods import QOSClass
from nodeagent.k8s.pressure import Pressure, Taint

GIB = 1024**3
MIB = 1024**2


def observations(time: float = 100.0) -> model.NodeObservations:
    """A node with 16 GiB, under memory pressure, whose PID signal is unreadable."""
    return model.NodeObservations(
        time=time,
        signals={
            model.Signal.MEMORY_AVAILABLE: model.SignalValue(
                80 * MIB, 16 * GIB, "/sys/fs/cgroup/memory"
            ),
            model.Signal.ALLOCATABLE_MEMORY_AVAILABLE: model.SignalValue(1 * GIB, 15 * GIB),
            model.Signal.NODEFS_AVAILABLE: model.SignalValue(40 * GIB, 100 * GIB),
            model.Signal.NODEFS_INODES_FREE: model.SignalValue(6_000_000, 6_553_600),
            model.Signal.IMAGEFS_AVAILABLE: model.SignalValue(40 * GIB, 100 * GIB),
            model.Signal.IMAGEFS_INODES_FREE: model.SignalValue(6_000_000, 6_553_600),
            model.Signal.PID_AVAILABLE: model.Unavailable(
                "cannot read /proc/sys/kernel/pid_max: [Errno 2] No such file or directory"
            ),
        },
        pods={
            model.PodUID("uid-a"): model.PodUsage(uid=model.PodUID("uid-a"), memory=3 * GIB),
            model.PodUID("uid-b"): model.PodUsage(uid=model.PodUID("uid-b"), memory=GIB),
        },
        psi={
            "memory": model.PsiStats(
                some=model.PsiLine(12.5, 4.0, 1.0, 9_000_000),
                full=model.PsiLine(3.0, 1.0, 0.2, 2_000_000),
            ),
            "io": model.PsiStats(some=model.PsiLine(0.0, 0.1, 0.0, 10_000)),
            "node/memory": model.PsiStats(
                some=model.PsiLine(11.0, 3.5, 0.9, 8_000_000),
                full=model.PsiLine(2.5, 0.8, 0.1, 1_500_000),
            ),
        },
        swap=model.SignalValue(0, 0),
    )


THRESHOLDS = {
    model.Signal.MEMORY_AVAILABLE: 100 * MIB,
    model.Signal.NODEFS_AVAILABLE: 10 * GIB,
    model.Signal.NODEFS_INODES_FREE: 327_680,
    model.Signal.IMAGEFS_AVAILABLE: 15 * GIB,
    model.Signal.IMAGEFS_INODES_FREE: 327_680,
    # memory.pressure.some.avg10>20, resolved as the engine does: 80 % not stalled.
    model.Signal.MEMORY_PRESSURE_SOME_AVG10: 8_000,
}


def pod(name: str, qos: QOSClass = QOSClass.BURSTABLE) -> model.PodInfo:
    return model.PodInfo(namespace="default", name=name, uid=model.PodUID(f"uid-{name}"), qos=qos)


def decision(time: float = 100.0) -> model.Decision:
    """The memory threshold met hard: pressure, a condition, a taint, one eviction."""
    eviction = model.Eviction(
        pod=pod("a"),
        signal=model.Signal.MEMORY_AVAILABLE,
        grace_period_seconds=1,
        message="The node was low on resource: memory.",
        reclaim_estimate=3 * GIB,
    )
    return model.Decision(
        time=time,
        thresholds_met=(
            model.ThresholdMet(
                signal=model.Signal.MEMORY_AVAILABLE,
                hard=True,
                grace_satisfied=True,
                threshold_quantity=100 * MIB,
                available=80 * MIB,
            ),
        ),
        pressure={Pressure.MEMORY: True, Pressure.DISK: False},
        conditions=(
            model.NodeCondition("NodeAgentMemoryPressure", True, "ThresholdMet", "low memory"),
            model.NodeCondition("NodeAgentDiskPressure", False, "NoPressure", "enough disk"),
        ),
        taints=(Taint("nodeagent.io/memory-pressure", "NoSchedule"),),
        evictions=(eviction,),
        candidates=(eviction,),
        ranked=("default/a",),
    )


def fed_metrics() -> metrics.AgentMetrics:
    """An AgentMetrics in which every family has at least one sample."""
    agent = metrics.AgentMetrics()
    agent.observe_collection(observations(), THRESHOLDS)
    agent.observe_detection_latency(0.004, trigger="psi")
    agent.observe_detection_latency(0.6, trigger="poll")
    agent.observe_decision_latency(0.0007)
    agent.observe_decision(decision(), cycle_seconds=0.012)
    agent.record_eviction(
        model.Signal.MEMORY_AVAILABLE,
        metrics.EvictionOutcome.EVICTED,
        QOSClass.BURSTABLE,
        reclaimed=3 * GIB,
    )
    agent.record_eviction(
        model.Signal.MEMORY_AVAILABLE,
        metrics.EvictionOutcome.BLOCKED_BY_PDB,
        QOSClass.GUARANTEED,
    )
    agent.record_eviction(
        model.Signal.NODEFS_INODES_FREE,
        metrics.EvictionOutcome.DRY_RUN,
        QOSClass.BEST_EFFORT,
        reclaimed=40_000,
    )
    agent.api_request("patch", "nodes/status", 200)
    agent.api_request("create", "pods/eviction", 429)
    agent.api_request("get", "nodes", "error")
    agent.api_retry("get", "nodes", "Unavailable")
    agent.set_degraded("trigger/psi-memory", "EINVAL for a 1 s window: using 2 s")
    agent.record_node_reclaim(
        model.NodeReclaimResult(
            kinds=("containers", "images"),
            containers_removed=2,
            images_removed=1,
            bytes_reclaimed=300 * MIB,
            seconds=0.04,
            enough=True,
            dry_run=False,
        )
    )
    return agent
