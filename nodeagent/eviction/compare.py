"""Is the agent ahead of the kubelet? Comparing two policies threshold by threshold.

The agent only helps if it acts before the kubelet: when the kubelet's threshold on a
signal sits at or above the agent's (it is crossed first as the signal falls) and its
grace period is no longer, the kubelet evicts first and the agent's threshold never
fires. ``nodeagent config check --kubelet-config`` prints these findings.

A percentage and a quantity compare differently on different nodes; the finding then
names the capacity above (or below) which the kubelet is ahead.

With ``activePageCache: reclaimable`` the two do not even measure the same memory: the
kubelet counts the active page cache as used, so its memory threshold can be crossed by
a hot cache alone, far above where the agent's count would be, and it then evicts the
pod holding the cache itself; and with kubepods at its limit (a hog taking what the
cache gives back) the kubelet's count is about the inactive cache alone, under any
threshold. Each kubelet memory threshold is noted with that, and how to disable it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from nodeagent.base import durations
from nodeagent.eviction.page_cache import ActivePageCache
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.eviction.thresholds import PSI_SIGNALS, Percentage, Quantity, Threshold
from nodeagent.k8s import quantities as units
from nodeagent.model import FsLayout, Signal

__all__ = ["Finding", "Severity", "compare_with_kubelet"]


class Severity(StrEnum):
    WARNING = "warning"
    """The kubelet acts first: the agent's threshold would never fire."""
    NOTE = "note"
    """Worth knowing, not necessarily wrong."""


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    signal: Signal
    message: str


def compare_with_kubelet(
    agent: EvictionPolicy, kubelet: EvictionPolicy, layout: FsLayout = FsLayout.SINGLE
) -> tuple[Finding, ...]:
    """Findings for every configured agent threshold the kubelet pre-empts or ties, and
    every signal only the kubelet watches."""
    mine = [t for t in agent.thresholds_for(layout) if t.derived_from is None]
    theirs = [t for t in kubelet.thresholds_for(layout) if t.derived_from is None]
    findings: list[Finding] = []
    for threshold in mine:
        if threshold.signal in PSI_SIGNALS:
            continue
        for other in (t for t in theirs if t.signal is threshold.signal):
            finding = _compare(threshold, other)
            if finding is not None:
                findings.append(finding)
    if agent.active_page_cache is ActivePageCache.RECLAIMABLE:
        for other in theirs:
            if other.signal in _MEMORY_SIGNALS:
                findings.append(
                    Finding(
                        Severity.NOTE,
                        other.signal,
                        f"the kubelet's {_describe(other)} counts the active page cache as"
                        " used (the agent's activePageCache: reclaimable does not): a pod"
                        " keeping a file hot can cross it alone, and once kubepods is at its"
                        " limit the kubelet's count is little more than the inactive cache,"
                        " so a memory hog crosses it long before the agent's; the kubelet"
                        " then evicts the pod holding the cache itself. Disable it"
                        " (memory.available: 0%) to leave memory to the agent",
                    )
                )
    watched = {t.signal for t in mine}
    for other in theirs:
        if other.signal not in watched:
            findings.append(
                Finding(
                    Severity.NOTE,
                    other.signal,
                    f"the agent has no threshold on {other.signal}; the kubelet's "
                    f"{_describe(other)} acts alone",
                )
            )
    return tuple(findings)


_MEMORY_SIGNALS = frozenset({Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE})


def _describe(threshold: Threshold) -> str:
    kind = (
        "hard"
        if threshold.hard
        else f"soft, grace period {durations.format_go_duration(threshold.grace_period)}"
    )
    return f"{threshold.describe()} ({kind})"


def _compare(agent: Threshold, kubelet: Threshold) -> Finding | None:
    """How ``kubelet`` relates to ``agent`` on the same signal, if it matters."""
    sooner_or_same = kubelet.grace_period <= agent.grace_period
    pair = f"the kubelet's {_describe(kubelet)} vs the agent's {_describe(agent)}"
    if type(agent.value) is type(kubelet.value):
        mine, theirs = _comparable(agent), _comparable(kubelet)
        if theirs > mine and sooner_or_same:
            return Finding(Severity.WARNING, agent.signal, f"{pair}: the kubelet acts first")
        if theirs == mine and kubelet.grace_period < agent.grace_period:
            return Finding(Severity.WARNING, agent.signal, f"{pair}: the kubelet acts first")
        if theirs == mine:
            return Finding(
                Severity.NOTE,
                agent.signal,
                f"{pair}: a tie; the agent acts first only by detecting sooner",
            )
        if theirs > mine:
            return Finding(
                Severity.NOTE,
                agent.signal,
                f"{pair}: the kubelet's threshold is crossed first but its grace period is "
                f"longer; which acts first depends on how fast the signal falls",
            )
        return None
    # One percentage, one quantity: which is higher depends on the node's capacity.
    quantity, fraction = (
        (agent.value, kubelet.value)
        if isinstance(agent.value, Quantity)
        else (kubelet.value, agent.value)
    )
    assert isinstance(quantity, Quantity) and isinstance(fraction, Percentage)
    if fraction.fraction <= 0:
        return None
    crossover = int(quantity.value / fraction.fraction)
    side = "above" if isinstance(kubelet.value, Percentage) else "below"
    severity = Severity.WARNING if sooner_or_same else Severity.NOTE
    consequence = "the kubelet acts first" if sooner_or_same else "the kubelet is crossed first"
    return Finding(
        severity,
        agent.signal,
        f"{pair}: on nodes with a capacity {side} {units.readable_quantity(crossover)} "
        f"{consequence}",
    )


def _comparable(threshold: Threshold) -> float:
    value = threshold.value
    if isinstance(value, Quantity):
        return value.value
    if isinstance(value, Percentage):
        return value.fraction
    return -value.hundredths
