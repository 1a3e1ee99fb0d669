"""The engine's view of one collection: one ``(available, capacity)`` per signal it needs.

Two signal families reach the engine differently:

* The kubelet's signals come straight from ``NodeObservations.signals``. A filesystem
  signal the collector did not report is read from the filesystem it shares under the
  node's layout (see :mod:`nodeagent.eviction.layout`); one that is ``Unavailable`` stays
  unobserved, so thresholds on it are never met.
* PSI signals (``memory.pressure.some.avg10`` ...) come from ``NodeObservations.psi``:
  the node cgroup's pressure file (scope ``node/memory``, ``node/io``) when the collector
  has it, because that is the cgroup the operator asked the agent to guard, and the
  system's /proc/pressure (scope ``memory``, ``io``) otherwise. An observation of the
  signal given directly in ``signals`` (as a trace may) takes precedence. A stall of
  ``s`` percent becomes ``available = 10000 - 100 s`` out of ``capacity = 10000``, so every
  threshold compares ``available < threshold`` (see :mod:`nodeagent.eviction.thresholds`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nodeagent.eviction import layout as fs_layout
from nodeagent.eviction.thresholds import PSI_CAPACITY, PSI_SIGNALS
from nodeagent.model import NodeObservations, PsiStats, Signal, SignalValue

__all__ = ["observe", "psi_observation", "psi_parts", "sampled_at", "stall_percent"]


def psi_parts(signal: Signal) -> tuple[str, str, str]:
    """``memory.pressure.some.avg10`` -> ``("memory", "some", "avg10")``."""
    resource, _, line, window = signal.split(".")
    return resource, line, window


_PSI_PARTS: Mapping[Signal, tuple[str, str, str]] = {s: psi_parts(s) for s in PSI_SIGNALS}


def psi_observation(stats: PsiStats, line: str, window: str, source: str) -> SignalValue | None:
    """A PSI line's average as an observation; ``None`` when the line is absent (the
    system cpu file has no ``full`` line on older kernels)."""
    psi_line = stats.some if line == "some" else stats.full
    if psi_line is None:
        return None
    stalled = round(float(getattr(psi_line, window)) * 100)
    stalled = min(max(stalled, 0), PSI_CAPACITY)
    return SignalValue(available=PSI_CAPACITY - stalled, capacity=PSI_CAPACITY, source=source)


def stall_percent(observed: SignalValue) -> float:
    """The stall share, in percent, of a PSI observation."""
    return (observed.capacity - observed.available) / 100


def observe(observations: NodeObservations, signals: Iterable[Signal]) -> dict[Signal, SignalValue]:
    """The observation of each of ``signals`` that has one this collection."""
    observed: dict[Signal, SignalValue] = {}
    for signal in signals:
        value = _observe_one(observations, signal)
        if value is not None:
            observed[signal] = value
    return observed


def sampled_at(observations: NodeObservations, signal: Signal) -> float:
    """When ``signal``'s observation was read: its own time when the collection carried
    it over from an earlier read, else the collection's."""
    if signal in _PSI_PARTS and signal not in observations.signals:
        sampled = observations.psi_sampled_at
    else:
        stand_in = signal
        while stand_in not in observations.signals:
            fallback = fs_layout.fallback_signal(stand_in, observations.fs_layout)
            if fallback is None:
                break
            stand_in = fallback
        sampled = observations.sampled_at.get(stand_in)
    return observations.time if sampled is None else sampled


def _observe_one(observations: NodeObservations, signal: Signal) -> SignalValue | None:
    if signal in observations.signals:
        return observations.value(signal)
    parts = _PSI_PARTS.get(signal)
    if parts is not None:
        resource, line, window = parts
        for scope in (f"node/{resource}", resource):
            stats = observations.psi.get(scope)
            if stats is not None:
                return psi_observation(stats, line, window, f"psi {scope} {line} {window}")
        return None
    stand_in = fs_layout.fallback_signal(signal, observations.fs_layout)
    return None if stand_in is None else _observe_one(observations, stand_in)
