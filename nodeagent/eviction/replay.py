"""Replaying a trace through the engine: ``nodeagent simulate`` and the acceptance tests.

:func:`replay` runs :func:`~nodeagent.eviction.engine.evaluate` once per trace line, with
the line's time as ``now``, carrying the engine state from line to line exactly as the
agent's loop carries it from cycle to cycle. It is a pure function of the policy and the
lines.

By default the trace is authoritative: it recorded what the node looked like, so a pod
still listed after its eviction is still there (and may be chosen again). With
``model_reclaim`` the replay plays the counterfactual instead: evicted pods vanish from
later lines and what they used is credited back to every signal it counted against
(memory to the memory signals, disk usage to the filesystems that hold it under the
node's layout, processes to ``pid.available``), and node-level reclaim frees what the
line said was reclaimable. That is what makes two strategies comparable on one trace.

:func:`decision_record` is the JSON line ``simulate`` prints; :func:`table_lines` the
human-readable table.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nodeagent.eviction import engine, page_cache
from nodeagent.eviction import layout as fs_layout
from nodeagent.eviction.observations import observe
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.eviction.thresholds import PSI_CAPACITY, PSI_SIGNALS
from nodeagent.eviction.trace import TraceSample
from nodeagent.k8s import quantities as units
from nodeagent.k8s.pressure import Pressure
from nodeagent.model import (
    Decision,
    FsLayout,
    NodeObservations,
    PodInfo,
    PodUID,
    Signal,
    SignalValue,
)

__all__ = ["Cycle", "decision_record", "replay", "table_lines"]

_FS_SIGNALS = tuple(s for s in Signal if s.split(".")[0] in ("nodefs", "imagefs", "containerfs"))
_CREDITED_SIGNALS = tuple(s for s in Signal if s not in PSI_SIGNALS)


@dataclass(frozen=True, slots=True)
class Cycle:
    """One replayed line: what the engine saw and what it decided."""

    line: int
    observations: NodeObservations
    pods: tuple[PodInfo, ...]
    decision: Decision


def replay(
    policy: EvictionPolicy, samples: Iterable[TraceSample], *, model_reclaim: bool = False
) -> Iterator[Cycle]:
    """Evaluate each sample in order; lazily, so a long trace streams."""
    state = engine.EngineState()
    evicted: set[PodUID] = set()
    credit: dict[Signal, int] = {}
    reclaimed: dict[str, int] = {}
    for sample in samples:
        observations = page_cache.view(sample.observations, policy.active_page_cache)
        pods = sample.pods
        if model_reclaim:
            observations, pods = _counterfactual(observations, pods, evicted, credit, reclaimed)
        decision, state = engine.evaluate(policy, state, observations, pods, observations.time)
        if model_reclaim:
            _account(decision, observations, evicted, credit, reclaimed)
        yield Cycle(sample.line, observations, pods, decision)


def _counterfactual(
    observations: NodeObservations,
    pods: Sequence[PodInfo],
    evicted: set[PodUID],
    credit: Mapping[Signal, int],
    reclaimed: Mapping[str, int],
) -> tuple[NodeObservations, tuple[PodInfo, ...]]:
    signals = {
        signal: (
            replace(value, available=min(value.capacity, value.available + credit[signal]))
            if isinstance(value, SignalValue) and credit.get(signal)
            else value
        )
        for signal, value in observations.signals.items()
    }
    reclaimable = {
        kind: max(0, amount - reclaimed.get(kind, 0))
        for kind, amount in observations.reclaimable.items()
    }
    usage = {uid: u for uid, u in observations.pods.items() if uid not in evicted}
    remaining = tuple(pod for pod in pods if pod.uid not in evicted)
    return (
        replace(observations, signals=signals, pods=usage, reclaimable=reclaimable),
        remaining,
    )


def _account(
    decision: Decision,
    observations: NodeObservations,
    evicted: set[PodUID],
    credit: dict[Signal, int],
    reclaimed: dict[str, int],
) -> None:
    layout = observations.fs_layout
    for eviction in decision.evictions:
        evicted.add(eviction.pod.uid)
        usage = observations.pods.get(eviction.pod.uid)
        for signal in _CREDITED_SIGNALS:
            freed = fs_layout.pod_usage(usage, fs_layout.usage_fields(signal, layout))
            if freed:
                credit[signal] = credit.get(signal, 0) + freed
    for kind in decision.node_reclaim:
        for suffix in ("", "Inodes"):
            amount = observations.reclaimable.get(kind + suffix, 0)
            reclaimed[kind + suffix] = reclaimed.get(kind + suffix, 0) + amount
            for signal in _FS_SIGNALS:
                counts_inodes = signal.endswith("inodesFree")
                if counts_inodes == bool(suffix) and kind in fs_layout.reclaim_kinds(
                    signal, layout
                ):
                    credit[signal] = credit.get(signal, 0) + amount


# --- output -------------------------------------------------------------------------------


def decision_record(decision: Decision) -> dict[str, Any]:
    """The JSON object ``simulate --output jsonl`` prints for one cycle.

    Each met threshold gives ``available`` and ``threshold`` in the signal's units; for
    PSI signals ``stall`` and ``threshold`` in percent instead.
    """
    met = []
    for m in decision.thresholds_met:
        entry: dict[str, Any] = {
            "signal": str(m.signal),
            "hard": m.hard,
            "graceSatisfied": m.grace_satisfied,
        }
        if m.signal in PSI_SIGNALS:
            entry["stall"] = units.json_number((PSI_CAPACITY - m.available) / 100)
            entry["threshold"] = units.json_number((PSI_CAPACITY - m.threshold_quantity) / 100)
        else:
            entry["available"] = m.available
            entry["threshold"] = m.threshold_quantity
        met.append(entry)
    return {
        "time": units.json_number(decision.time),
        "thresholdsMet": met,
        "pressure": {str(p): decision.pressure.get(p, False) for p in Pressure},
        "conditions": [
            {
                "type": c.type,
                "status": "True" if c.status else "False",
                "reason": c.reason,
                "message": c.message,
            }
            for c in decision.conditions
        ],
        "taints": [{"key": t.key, "effect": t.effect} for t in decision.taints],
        "evictions": [
            {
                "pod": e.pod.key,
                "signal": str(e.signal),
                "gracePeriodSeconds": e.grace_period_seconds,
                "message": e.message,
                "reclaimEstimate": e.reclaim_estimate,
            }
            for e in decision.evictions
        ],
        "nodeReclaim": list(decision.node_reclaim),
    }


_SIGNAL_WIDTH = 34


def table_lines(policy: EvictionPolicy, cycles: Iterable[Cycle]) -> Iterator[str]:
    """A table, one row per cycle: each watched signal's value against its thresholds,
    the pressures on, and what was evicted (with the kill grace) or reclaimed.

    A signal cell reads ``1500Mi < 2Gi soft`` while a threshold is met (``soft*`` once
    its grace period has passed and it is acted on), ``1.2Gi ~ 1Gi hard`` while only min
    reclaim keeps it active, and just the value otherwise. The columns are the signals
    with thresholds that the first line reports (not those read as another filesystem's
    stand-in, such as containerfs on a single-filesystem node).
    """
    columns: tuple[Signal, ...] | None = None
    for cycle in cycles:
        observations, decision = cycle.observations, cycle.decision
        layout = observations.fs_layout
        observed = observe(observations, policy.signals_for(layout))
        if columns is None:
            columns = tuple(
                s
                for s in policy.signals_for(layout)
                if s in observations.signals or (s in PSI_SIGNALS and s in observed)
            )
            header = ["TIME".rjust(8)] + [str(s).ljust(_SIGNAL_WIDTH) for s in columns]
            yield "  ".join([*header, "PRESSURE".ljust(16), "ACTION"]).rstrip()
        cells = [f"{units.json_number(decision.time):>8}"]
        for signal in columns:
            cells.append(_signal_cell(policy, signal, observed.get(signal), decision, layout))
        pressures = ",".join(str(p) for p in Pressure if decision.pressure.get(p)) or "-"
        cells.append(pressures.ljust(16))
        cells.append(_action_cell(decision))
        yield "  ".join(cells).rstrip()


def _signal_cell(
    policy: EvictionPolicy,
    signal: Signal,
    value: SignalValue | None,
    decision: Decision,
    layout: FsLayout,
) -> str:
    if value is None:
        return "(no observation)".ljust(_SIGNAL_WIDTH)
    psi = signal in PSI_SIGNALS
    if psi:
        shown = f"{(value.capacity - value.available) / 100:g}%"
    else:
        shown = units.readable_quantity(value.available)
    mine = [m for m in decision.thresholds_met if m.signal is signal]
    if mine:
        m = next((m for m in mine if m.hard), mine[0])
        bar = (
            f"{(value.capacity - m.threshold_quantity) / 100:g}%"
            if psi
            else units.readable_quantity(m.threshold_quantity)
        )
        crossed = m.available < m.threshold_quantity
        operator = (">" if psi else "<") if crossed else "~"
        kind = "hard" if m.hard else "soft*" if m.grace_satisfied else "soft"
        shown = f"{shown} {operator} {bar} {kind}"
    elif not any(t.signal is signal for t in policy.thresholds_for(layout)):
        shown = f"{shown} (no threshold)"
    return shown.ljust(_SIGNAL_WIDTH)


def _action_cell(decision: Decision) -> str:
    actions = []
    if decision.node_reclaim:
        actions.append("reclaim " + "+".join(decision.node_reclaim))
    actions += [
        f"evict {e.pod.key} ({e.signal}, grace {e.grace_period_seconds}s)"
        for e in decision.evictions
    ]
    return "; ".join(actions) or "-"
