"""Decisions and pods for actuator tests, built the way the engine builds them."""

from __future__ import annotations

from nodeagent.k8s.pods import QOSClass
from nodeagent.k8s.pressure import Pressure, Taint
from nodeagent.model import Decision, Eviction, NodeCondition, PodInfo, PodUID, Signal, ThresholdMet

MEMORY_CONDITION = "NodeAgentMemoryPressure"
DISK_CONDITION = "NodeAgentDiskPressure"
MEMORY_TAINT = "nodeagent.io/memory-pressure"
DISK_TAINT = "nodeagent.io/disk-pressure"


def pod_info(name: str, **fields: object) -> PodInfo:
    values: dict[str, object] = {
        "namespace": "default",
        "name": name,
        "uid": PodUID(f"uid-{name}"),
        "qos": QOSClass.BEST_EFFORT,
    }
    values.update(fields)
    return PodInfo(**values)  # type: ignore[arg-type]


def decision(
    *,
    memory: bool = False,
    disk: bool = False,
    evict: tuple[PodInfo, ...] = (),
    candidates: tuple[PodInfo, ...] = (),
    hard: bool = True,
    signal: Signal = Signal.MEMORY_AVAILABLE,
    message: str = "The node was low on resource: memory. ",
    taints: tuple[Taint, ...] | None = None,
    time: float = 0.0,
) -> Decision:
    grace = 1 if hard else 30
    evictions = tuple(Eviction(p, signal, grace, message) for p in evict)
    ranked = evictions + tuple(Eviction(p, signal, grace, message) for p in candidates)
    met = (ThresholdMet(signal, hard, True, 100 << 20, 50 << 20),) if memory or evict else ()
    conditions = (
        NodeCondition(
            MEMORY_CONDITION,
            memory,
            "NodeAgentHasInsufficientMemory" if memory else "NodeAgentHasSufficientMemory",
            "memory.available below threshold" if memory else "memory is fine",
        ),
        NodeCondition(
            DISK_CONDITION,
            disk,
            "NodeAgentHasDiskPressure" if disk else "NodeAgentHasNoDiskPressure",
            "disk" if disk else "no disk pressure",
        ),
    )
    if taints is None:
        taints = ((Taint(MEMORY_TAINT, "NoSchedule"),) if memory else ()) + (
            (Taint(DISK_TAINT, "NoSchedule"),) if disk else ()
        )
    return Decision(
        time=time,
        thresholds_met=met,
        pressure={Pressure.MEMORY: memory, Pressure.DISK: disk, Pressure.PID: False},
        conditions=conditions,
        taints=taints,
        evictions=evictions,
        candidates=ranked,
        ranked=tuple(e.pod.key for e in ranked),
    )
