"""Reclaim, re-read, re-check: the kubelet's step between a disk decision and an eviction.

When the engine acts on a disk signal it names the node-level reclaim that can relieve
it (``Decision.node_reclaim``). The loop then, in the same cycle, as the kubelet's
eviction manager does (``reclaimNodeLevelResources``):

1. removes dead containers and unused images (:class:`NodeReclaimer`), the images only
   up to what the image filesystem still needs after the containers are gone;
2. re-reads the filesystems;
3. drops the cycle's evictions if no configured threshold, of any signal and ignoring
   grace periods, is met any more counting its minimum reclaim; otherwise, with the
   ``relief`` strategy, shortens its prefix of pods to the gap left after reclaim.

It runs in the loop because the eviction must wait for its outcome; each CRI call is
bounded by ``containerRuntimeRequestTimeout``, and memory signals are acted on before
disk ones, so a memory threshold never waits behind a reclaim. After a reclaim that was
not enough, the next waits ``nodeReclaimInterval``: while the pod evicted after it
terminates, the runtime is not listed again every cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from nodeagent.eviction import engine
from nodeagent.eviction import thresholds as thr
from nodeagent.eviction.observations import observe
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.eviction.settings import EvictionStrategy
from nodeagent.model import Decision, Eviction, NodeObservations, NodeReclaimResult, Signal
from nodeagent.reclaim import plan
from nodeagent.reclaim.reclaimer import NodeReclaimer, reclaimed_bytes

__all__ = ["reclaim_before_evicting"]


def reclaim_before_evicting(
    reclaimer: NodeReclaimer,
    policy: EvictionPolicy,
    decision: Decision,
    before: NodeObservations,
    reread: Callable[[], NodeObservations],
) -> tuple[Decision, NodeObservations]:
    """Reclaim what ``decision.node_reclaim`` allows, then re-read with ``reread`` and
    keep the decision's evictions only if a threshold is still met counting its minimum
    reclaim. Returns the decision (with ``node_reclaim_result``) and the re-read
    observations."""
    report = reclaimer.reclaim(
        decision.node_reclaim,
        image_need=lambda: plan.image_bytes_needed(policy, reread()),
    )
    after = reread()
    enough = engine.thresholds_clear(policy, after)
    result = NodeReclaimResult(
        kinds=decision.node_reclaim,
        containers_removed=len(report.containers),
        images_removed=len(report.images),
        bytes_reclaimed=reclaimed_bytes(before, after, decision.node_reclaim),
        seconds=report.seconds,
        enough=enough,
        dry_run=report.dry_run,
        errors=report.errors,
    )
    if enough:
        decision = replace(decision, evictions=(), candidates=(), ranked=())
    elif policy.strategy is EvictionStrategy.RELIEF and len(decision.evictions) > 1:
        decision = replace(decision, evictions=_relief_after(policy, decision, after))
    return replace(decision, node_reclaim_result=result), after


def _relief_after(
    policy: EvictionPolicy, decision: Decision, after: NodeObservations
) -> tuple[Eviction, ...]:
    """The ``relief`` strategy chose its prefix of pods for the gap before reclaim; what
    reclaim freed shortens the gap, and so perhaps the prefix."""
    signal = decision.evictions[0].signal
    if not isinstance(signal, Signal):
        return decision.evictions  # a local-storage limit: no reclaim precedes those
    value = observe(after, (signal,)).get(signal)
    if value is None:
        return decision.evictions
    target = max(
        thr.threshold_quantity(t, value.capacity) + thr.reclaim_quantity(t, value.capacity)
        for t in policy.thresholds_for(after.fs_layout)
        if t.signal is signal
    )
    count = engine.relief_count(decision.candidates, target - value.available)
    return decision.candidates[: min(count, len(decision.evictions))]
