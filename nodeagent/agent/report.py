"""What a decision line says, and when one is worth writing. Pure.

A decision line names, for each threshold met: the signal, the observed value, the
threshold, hard or soft, and whether its grace period is satisfied; then the pressure
held, the taints wanted, the pods chosen (with their grace period) and the ranked
candidates they were chosen from. ``message`` reads as a sentence for people;
``fields`` carries the same facts as data.

The loop evaluates several times a second, so it does not write a line per cycle: it
writes one whenever the decision's *shape* changes (:class:`DecisionShape`: which
thresholds are met and in which grace state, the pressure, the taints, whether pods are
chosen) and otherwise at most every ``decisionLogInterval`` while a threshold stays
met. Observed values alone move every cycle and do not count as a change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodeagent.eviction import thresholds
from nodeagent.k8s import quantities as units
from nodeagent.k8s.pressure import Pressure
from nodeagent.model import (
    Decision,
    Eviction,
    LocalStorageLimit,
    NodeReclaimResult,
    Signal,
    ThresholdMet,
)

MAX_CANDIDATES_LOGGED = 10
"""Candidates beyond this many are counted, not named."""


@dataclass(frozen=True, slots=True)
class DecisionShape:
    """The parts of a decision whose change deserves a log line."""

    met: frozenset[tuple[Signal, bool, bool]] = frozenset()
    """(signal, hard, grace satisfied) of every threshold met."""
    pressure: frozenset[Pressure] = frozenset()
    taints: frozenset[tuple[str, str]] = frozenset()
    evicting: tuple[str, ...] = ()
    reclaimed: bool | None = None
    """Whether node-level reclaim ran this cycle and was enough (None: it did not run)."""

    @property
    def quiet(self) -> bool:
        """Nothing met, no pressure held: nothing to report."""
        return not self.met and not self.pressure and not self.evicting


def shape_of(decision: Decision) -> DecisionShape:
    return DecisionShape(
        met=frozenset((t.signal, t.hard, t.grace_satisfied) for t in decision.thresholds_met),
        pressure=frozenset(p for p, on in decision.pressure.items() if on),
        taints=frozenset((t.key, t.effect) for t in decision.taints),
        evicting=tuple(e.pod.key for e in decision.evictions),
        reclaimed=(
            None if decision.node_reclaim_result is None else decision.node_reclaim_result.enough
        ),
    )


def _amounts(met: ThresholdMet) -> tuple[str, str, str]:
    """(observed, comparison, threshold) as people read them."""
    if met.signal in thresholds.PSI_SIGNALS:
        capacity = thresholds.PSI_CAPACITY
        stalled = (capacity - met.available) / 100
        limit = (capacity - met.threshold_quantity) / 100
        return f"{stalled:g}%", ">" if stalled > limit else "<=", f"{limit:g}%"
    observed = units.format_quantity(met.available)
    comparison = "<" if met.available < met.threshold_quantity else ">="
    return observed, comparison, units.format_quantity(met.threshold_quantity)


def _threshold_clause(met: ThresholdMet) -> str:
    observed, comparison, limit = _amounts(met)
    kind = "hard" if met.hard else "soft"
    state = "acting" if met.grace_satisfied else "grace pending"
    return f"{met.signal} {observed} {comparison} {limit} {kind} ({state})"


def decision_message(decision: Decision) -> str:
    """One sentence: ``memory.available 80Mi < 100Mi hard (acting); pressure memory;
    evict default/hog (grace 1s)``; ``no threshold met`` on a quiet node."""
    clauses = [_threshold_clause(met) for met in decision.thresholds_met]
    if not clauses:
        clauses.append("no threshold met")
    held = [str(p) for p, on in decision.pressure.items() if on]
    if held:
        clauses.append("pressure " + ", ".join(held))
    if decision.evictions:
        clauses.append("evict " + ", ".join(_eviction_clause(e) for e in decision.evictions))
    elif (
        any(t.grace_satisfied for t in decision.thresholds_met)
        and not decision.candidates
        and not (decision.node_reclaim_result and decision.node_reclaim_result.enough)
    ):
        clauses.append("no pod to evict")
    result = decision.node_reclaim_result
    if result is not None:
        clauses.append(_reclaim_clause(result))
    elif decision.node_reclaim:
        clauses.append("node-level reclaim " + ", ".join(decision.node_reclaim))
    return "; ".join(clauses)


def _eviction_clause(eviction: Eviction) -> str:
    """``default/hog (grace 1s)``; a local-storage eviction, which no threshold explains,
    names its limit: ``default/scratch (emptydirfs.limit, grace 1s)``."""
    why = f"{eviction.signal}, " if isinstance(eviction.signal, LocalStorageLimit) else ""
    return f"{eviction.pod.key} ({why}grace {eviction.grace_period_seconds}s)"


def _reclaim_clause(result: NodeReclaimResult) -> str:
    """``node-level reclaim removed 3 dead containers, 2 unused images, freed 120Mi in
    0.045s: enough, no pod evicted`` (or ``: not enough``, the eviction clause saying what
    follows), with ``, 2 CRI errors`` before the colon when calls failed."""
    verb = "would remove" if result.dry_run else "removed"
    outcome = "enough, no pod evicted" if result.enough else "not enough"
    errors = f", {len(result.errors)} CRI errors" if result.errors else ""
    return (
        f"node-level reclaim {verb} {result.containers_removed} dead containers, "
        f"{result.images_removed} unused images, freed "
        f"{units.format_quantity(result.bytes_reclaimed)} in {result.seconds:.3f}s{errors}: "
        f"{outcome}"
    )


def decision_fields(decision: Decision, *, trigger: str, decided_at: float) -> dict[str, Any]:
    """The decision as data, for the log record's fields. ``monotonic`` is the instant
    of the sample decided on, ``decidedMonotonic`` when the decision was made (both on
    the agent's clock: CLOCK_MONOTONIC, comparable with other processes' readings)."""
    fields: dict[str, Any] = {
        "monotonic": round(decision.time, 6),
        "decidedMonotonic": round(decided_at, 6),
        "trigger": trigger,
        "thresholds": [
            {
                "signal": str(met.signal),
                "observed": observed,
                "threshold": limit,
                "available": met.available,
                "thresholdQuantity": met.threshold_quantity,
                "hard": met.hard,
                "graceSatisfied": met.grace_satisfied,
            }
            for met in decision.thresholds_met
            for observed, _, limit in (_amounts(met),)
        ],
        "pressure": sorted(str(p) for p, on in decision.pressure.items() if on),
        "taints": sorted(f"{t.key}:{t.effect}" for t in decision.taints),
    }
    if decision.evictions:
        fields["evict"] = [
            {
                "pod": e.pod.key,
                "uid": str(e.pod.uid),
                "signal": str(e.signal),
                "gracePeriodSeconds": e.grace_period_seconds,
                "reclaimEstimate": e.reclaim_estimate,
            }
            for e in decision.evictions
        ]
    if decision.ranked:
        fields["candidates"] = list(decision.ranked[:MAX_CANDIDATES_LOGGED])
        fields["candidateCount"] = len(decision.ranked)
    if decision.node_reclaim:
        fields["nodeReclaim"] = list(decision.node_reclaim)
    result = decision.node_reclaim_result
    if result is not None:
        fields["nodeReclaimResult"] = {
            "containersRemoved": result.containers_removed,
            "imagesRemoved": result.images_removed,
            "bytesReclaimed": result.bytes_reclaimed,
            "seconds": round(result.seconds, 6),
            "enough": result.enough,
            "evictionSkipped": result.enough,
            "dryRun": result.dry_run,
            **({"errors": list(result.errors)} if result.errors else {}),
        }
    return fields
