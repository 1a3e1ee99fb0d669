"""Small builders for engine inputs, so each test states only what it is about."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.agent.config import load_config
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.k8s.pods import QOSClass
from nodeagent.model import (
    FsLayout,
    NodeObservations,
    Observation,
    PodInfo,
    PodUID,
    PodUsage,
    PsiStats,
    Signal,
    SignalValue,
)

Ki, Mi, Gi = 1 << 10, 1 << 20, 1 << 30


def policy(**overrides: Any) -> EvictionPolicy:
    """A policy from flag-style overrides (snake_case field names, kubelet flag values);
    the environment is ignored."""
    return EvictionPolicy.from_settings(load_config(environ={}, overrides=overrides))


def pod(
    name: str,
    *,
    namespace: str = "default",
    priority: int = 0,
    requests: Mapping[str, int] | None = None,
    **fields: Any,
) -> PodInfo:
    return PodInfo(
        namespace=namespace,
        name=name,
        uid=PodUID(name),
        priority=priority,
        requests=dict(requests or {}),
        qos=fields.pop("qos", QOSClass.BURSTABLE if requests else QOSClass.BEST_EFFORT),
        **fields,
    )


def usage(name: str, **figures: Any) -> PodUsage:
    return PodUsage(uid=PodUID(name), **figures)


def observations(
    time: float = 0.0,
    signals: Mapping[Signal, Observation | tuple[int, int]] | None = None,
    *,
    pods: Mapping[str, PodUsage] | None = None,
    psi: Mapping[str, PsiStats] | None = None,
    layout: FsLayout = FsLayout.SINGLE,
    reclaimable: Mapping[str, int] | None = None,
) -> NodeObservations:
    """Signals may be given as ``(available, capacity)`` pairs."""
    return NodeObservations(
        time=time,
        signals={
            signal: SignalValue(*value) if isinstance(value, tuple) else value
            for signal, value in (signals or {}).items()
        },
        pods={PodUID(name): u for name, u in (pods or {}).items()},
        psi=dict(psi or {}),
        fs_layout=layout,
        reclaimable=dict(reclaimable or {}),
    )


def memory(
    available: int, capacity: int = 8 * Gi, time: float = 0.0, **kw: Any
) -> NodeObservations:
    return observations(time, {Signal.MEMORY_AVAILABLE: (available, capacity)}, **kw)
