"""The contract between the agent and the scheduler: what the agent publishes on its Node.

The kubelet rewrites the standard ``MemoryPressure``/``DiskPressure``/``PIDPressure``
conditions on every status update, and the node lifecycle controller owns the
``node.kubernetes.io/*-pressure`` taints, so the agent writes under its own names
(configurable) and never fights them. The scheduler's NodePressure plugin and the
extender read the same names, which is why they live here, below both programs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Pressure(StrEnum):
    """The node pressures the kubelet reports as conditions."""

    MEMORY = "memory"
    DISK = "disk"
    PID = "pid"


DEFAULT_CONDITION_TYPES: Mapping[Pressure, str] = {
    Pressure.MEMORY: "NodeAgentMemoryPressure",
    Pressure.DISK: "NodeAgentDiskPressure",
    Pressure.PID: "NodeAgentPIDPressure",
}
"""Node condition type per pressure."""


DEFAULT_TAINT_KEYS: Mapping[Pressure, str] = {
    Pressure.MEMORY: "nodeagent.io/memory-pressure",
    Pressure.DISK: "nodeagent.io/disk-pressure",
    Pressure.PID: "nodeagent.io/pid-pressure",
}
"""Taint key per pressure: ``NoSchedule`` while pressure holds, ``PreferNoSchedule`` from
the onset of a soft threshold (an early warning) when enabled."""


PRESSURE_ANNOTATION = "nodeagent.io/pressure"
"""Node annotation carrying the agent's headroom per signal, as compact JSON:
``{"time": "<RFC 3339>", "signals": {"memory.available": {"available": N, "capacity": N,
"threshold": N}, ...}}``, where ``threshold`` is the lowest (most lenient) threshold the
agent enforces for that signal, resolved to an amount. The scheduler's NodePressure
plugin scores nodes by headroom ``(available - threshold) / capacity``. The agent
refreshes it with its condition heartbeat and at once when headroom changes materially."""


KUBELET_TAINT_KEYS: Mapping[Pressure, str] = {
    Pressure.MEMORY: "node.kubernetes.io/memory-pressure",
    Pressure.DISK: "node.kubernetes.io/disk-pressure",
    Pressure.PID: "node.kubernetes.io/pid-pressure",
}
"""The node lifecycle controller's taints for the kubelet's conditions (never the agent's)."""
KUBELET_CONDITION_TYPES: Mapping[Pressure, str] = {
    Pressure.MEMORY: "MemoryPressure",
    Pressure.DISK: "DiskPressure",
    Pressure.PID: "PIDPressure",
}
"""The kubelet's own condition types, rewritten on every status update (never the agent's)."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""
