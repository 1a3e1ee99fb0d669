"""The offline planner behind ``nodeagent schedule``: where would the pending pods go?

Given a cluster snapshot (Nodes and Pods as listed by ``kubectl``) and a scheduler
configuration, the planner schedules every pending pod - no ``spec.nodeName``, not
finished, not being deleted, and a ``schedulerName`` that has a profile - in queue
order (the profile's QueueSort: PrioritySort by default; creation time, then input
order, among equals), one at a time, each placement consuming resources in the
snapshot like kube-scheduler's assume. Gated pods are reported as such and never
attempted; a pending pod whose ``schedulerName`` no profile serves is reported
``NotServed`` (first), never silently left out.

The storage kinds in the snapshot (PVs, PVCs, StorageClasses, CSI objects) feed the
volume plugins; a pod's volumes bound by VolumeBinding's PreBind stay bound for the
pods planned after it (nothing else would confirm the binding offline). Likewise the
dynamic resource allocation kinds (ResourceClaims, ResourceSlices, DeviceClasses) feed
DynamicResources: a claim it allocates is allocated (and reserved) for the pods planned
after it. A claim made from a template is found by the name in the pod's
``status.resourceClaimStatuses``, as the resourceclaim controller writes it.

A pod that fits nowhere may preempt (DefaultPreemption): it is reported ``Nominated``
with the node and the victims; the plan removes the victims from the snapshot and keeps
the pod's requests reserved on that node (the shared nominator) against later pods of
lower or equal priority, and the PodDisruptionBudgets covering a victim lose one allowed
disruption. The plan is a single pass in queue order: a pod that did not fit earlier is
not retried when a later preemption frees room (a live kube-scheduler would retry it on
the victims' deletion).

With ``explain``, every placement carries the per-node verdicts: rejected nodes with
kube-scheduler's reasons, feasible nodes with each score plugin's raw, normalized and
weighted score; a preempting pod also lists every candidate of the dry run.

:func:`placements` yields each placement as soon as it is decided, so a caller can write
it out and drop it: memory stays bounded by the snapshot, not by pods x nodes.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from nodeagent.scheduler import (
    api,
    claim_templates,
    config,
    framework,
    objects,
    registry,
    resource_claims,
    scheduling,
    storage,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    SCHEDULED = "Scheduled"
    NOMINATED = "Nominated"
    """Preemption chose a node; the victims must go before the pod can bind there."""
    UNSCHEDULABLE = "Unschedulable"
    GATED = "Gated"
    ERROR = "Error"
    """A plugin failed (not a verdict on the pod)."""
    NOT_SERVED = "NotServed"
    """Pending, but its ``schedulerName`` is none of the configuration's profiles: another
    scheduler's pod, reported rather than silently left out of the plan."""


@dataclass(frozen=True, slots=True)
class PluginScore:
    score: int
    normalized: int
    weighted: int


@dataclass(frozen=True, slots=True)
class ExtenderScore:
    score: int
    """The extender's 0..10 answer."""
    weighted: int
    """``score x weight x MaxNodeScore / 10``, added to the node's total."""


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    evaluated: bool
    feasible: bool
    score: int | None = None
    plugins: Mapping[str, PluginScore] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    extenders: Mapping[str, ExtenderScore] = field(default_factory=dict)
    """Prioritize extenders' scores, by ``urlPrefix``."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"evaluated": self.evaluated, "feasible": self.feasible}
        if self.score is not None:
            out["score"] = self.score
            out["plugins"] = {
                name: {"score": s.score, "normalized": s.normalized, "weighted": s.weighted}
                for name, s in self.plugins.items()
            }
        if self.extenders:
            out["extenders"] = {
                name: {"score": e.score, "weighted": e.weighted}
                for name, e in self.extenders.items()
            }
        if self.reasons:
            out["reasons"] = list(self.reasons)
        return out


@dataclass(frozen=True, slots=True)
class Placement:
    pod: str
    node: str | None
    status: Outcome
    message: str = ""
    nodes: Mapping[str, NodeVerdict] | None = None
    nominated_node: str | None = None
    victims: tuple[str, ...] = ()
    candidates: Mapping[str, framework.Victims] | None = None
    """Every candidate of the preemption dry run (with explain)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pod": self.pod, "node": self.node, "status": self.status.value}
        if self.status is Outcome.NOMINATED:
            out["nominatedNode"] = self.nominated_node
            out["victims"] = list(self.victims)
        if self.message:
            out["message"] = self.message
        if self.candidates is not None:
            out["preemption"] = {
                "candidates": {
                    name: {
                        "victims": [pod.key for pod in victims.pods],
                        "numPDBViolations": victims.num_pdb_violations,
                    }
                    for name, victims in self.candidates.items()
                }
            }
        if self.nodes is not None:
            out["nodes"] = {name: verdict.to_dict() for name, verdict in self.nodes.items()}
        return out


@dataclass(frozen=True, slots=True)
class Plan:
    placements: tuple[Placement, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"placements": [p.to_dict() for p in self.placements]}


def explain(result: scheduling.CycleResult) -> dict[str, NodeVerdict]:
    """Per-node verdicts of one cycle, in node-tree order (rejections explained in bulk
    per rejecting plugin, the same statuses :meth:`CycleResult.node_status` gives)."""
    snapshot = result.snapshot
    if not result.prefilter_status.is_success:
        everywhere = NodeVerdict(False, False, reasons=result.prefilter_status.reasons)
        return dict.fromkeys(snapshot.names, everywhere)
    scored: dict[int, int] = {}
    if result.scored is not None:
        scored = {node: i for i, node in enumerate(result.scored.tolist())}
    feasible = set() if result.outcome is None else set(result.outcome.feasible.tolist())
    dropped: Mapping[int, str] = {}
    if result.extender_verdicts is not None:
        dropped = result.extender_verdicts.dropped
        feasible = set(result.extender_verdicts.feasible.tolist())
    rejected = {
        node: NodeVerdict(True, False, reasons=status.reasons)
        for node, status in result.rejection_statuses().items()
    }
    candidates: set[int] | None = None
    if result.absent_status is not None and result.candidates is not None:
        candidates = set(result.candidates.tolist())
    left_out = NodeVerdict(
        False, False, reasons=() if result.absent_status is None else result.absent_status.reasons
    )
    not_evaluated = NodeVerdict(False, False)
    verdicts: dict[str, NodeVerdict] = {}
    for index, name in enumerate(snapshot.names):
        found = rejected.get(index)
        if found is not None:
            verdicts[name] = found
        elif candidates is not None and index not in candidates:
            verdicts[name] = left_out
        elif index in dropped:
            reason = f"extender {dropped[index]} did not keep the node (no reason given)"
            verdicts[name] = NodeVerdict(True, False, reasons=(reason,))
        elif index in scored and result.scores is not None:
            i = scored[index]
            plugins = {
                s.plugin: PluginScore(int(s.raw[i]), int(s.normalized[i]), int(s.weighted[i]))
                for s in result.scores.plugins
            }
            extenders = {
                e.extender: ExtenderScore(int(e.scores[i]), int(e.weighted[i]))
                for e in result.extender_scores
                if e.returned[i]
            }
            total = int(result.scores.totals[i])
            verdicts[name] = NodeVerdict(True, True, total, plugins, extenders=extenders)
        elif index in feasible:
            verdicts[name] = NodeVerdict(True, True)
        else:
            verdicts[name] = not_evaluated
    return verdicts


def _queue_order(fw: framework.Framework, pods: list[api.Pod]) -> list[api.Pod]:
    queued = [framework.QueuedPod(pod, pod.created, i) for i, pod in enumerate(pods)]

    def compare(a: framework.QueuedPod, b: framework.QueuedPod) -> int:
        return -1 if fw.less(a, b) else (1 if fw.less(b, a) else 0)

    return [q.pod for q in sorted(queued, key=functools.cmp_to_key(compare))]


def placements(
    cluster: objects.ClusterObjects,
    configuration: config.SchedulerConfiguration,
    *,
    plugins: framework.Registry | None = None,
    seed: int | None = None,
    explain_nodes: bool = False,
    now: float,
    features: config.FeatureGates | None = None,
    volumes: storage.VolumeCatalog | None = None,
    resources: resource_claims.ResourceCatalog | None = None,
) -> Iterator[Placement]:
    """Place ``cluster``'s pending pods as of ``now`` (Unix seconds), which decides
    whether the pressure the nodes publish is fresh enough to use; one placement at a
    time, as decided. ``volumes``: the catalog to plan in (default: one of the cluster's
    storage objects), which holds the plan's volume bindings afterwards; ``resources``
    likewise for the claims' allocations."""
    handle = framework.Handle(
        now=now,
        rng=random.Random(seed),
        features=features or config.FeatureGates(),
        volumes=storage.VolumeCatalog(cluster.storage) if volumes is None else volumes,
        resources=resource_claims.ResourceCatalog(cluster.resources)
        if resources is None
        else resources,
    )
    frameworks = framework.build_frameworks(
        configuration, plugins or registry.in_tree_registry(), handle
    )
    snapshot = ClusterSnapshot(
        cluster.nodes,
        cluster.bound_pods(),
        namespaces=cluster.namespaces,
        workloads=cluster.workloads,
        disruption_budgets=cluster.disruption_budgets,
    )
    scheduler = scheduling.Scheduler(
        frameworks,
        snapshot,
        percentage_of_nodes_to_score=configuration.percentage_of_nodes_to_score,
        rng=random.Random(seed),
    )
    waiting = [p for p in cluster.pods if not p.node_name and not p.deleting]
    profiles = ", ".join(sorted(frameworks))
    for pod in waiting:
        if pod.scheduler_name not in frameworks:
            message = (
                f"schedulerName {pod.scheduler_name!r} is not a profile of this configuration"
                f" (profiles: {profiles}): another scheduler's pod, not planned"
            )
            yield Placement(pod.key, None, Outcome.NOT_SERVED, message)
    pending = claims_from_templates(
        [p for p in waiting if p.scheduler_name in frameworks], handle.resources
    )
    ordered = _queue_order(next(iter(frameworks.values())), pending)
    for pod in ordered:
        try:
            result = scheduler.schedule_one(pod)
        except Exception as exc:  # a bug outside the plugins: this pod, not the plan
            log.exception("scheduling %s failed", pod.key)
            message = f"internal error scheduling the pod: {type(exc).__name__}: {exc}"
            yield Placement(pod.key, None, Outcome.ERROR, message)
            continue
        if result.preemption is not None and result.preemption.nominated_node is not None:
            apply_preemption(snapshot, handle.nominator, pod, result.preemption)
        yield _placement(result, explain_nodes)


def claims_from_templates(
    pods: list[api.Pod], catalog: resource_claims.ResourceCatalog
) -> list[api.Pod]:
    """What the resourceclaim controller does before the scheduler sees the pods: the
    claims of their template entries, made in ``catalog``, named in the pods' status
    (:func:`nodeagent.scheduler.claim_templates.materialize`)."""
    planned, made = claim_templates.materialize(
        pods, catalog.templates, (c.key for c in catalog.claims())
    )
    for obj in made:
        catalog.commit(resource_claims.parse_resource_claim(obj))
    return planned


def apply_preemption(
    snapshot: ClusterSnapshot,
    nominator: framework.Nominator,
    pod: api.Pod,
    offer: framework.PostFilterResult,
) -> None:
    """What the victims' deletion and the nomination do to the cluster."""
    assert offer.nominated_node is not None
    node = snapshot.index[offer.nominated_node]
    for victim in offer.victims:
        snapshot.remove_pod(victim, node)
        snapshot.disruption_budgets = [
            replace(budget, disruptions_allowed=budget.disruptions_allowed - 1)
            if budget.covers(victim)
            else budget
            for budget in snapshot.disruption_budgets
        ]
    for cleared in offer.cleared_nominations:
        nominator.remove(cleared)
    nominator.add(pod, offer.nominated_node)


def plan(
    cluster: objects.ClusterObjects,
    configuration: config.SchedulerConfiguration,
    *,
    plugins: framework.Registry | None = None,
    seed: int | None = None,
    explain_nodes: bool = False,
    now: float,
    features: config.FeatureGates | None = None,
    volumes: storage.VolumeCatalog | None = None,
    resources: resource_claims.ResourceCatalog | None = None,
) -> Plan:
    """Every placement at once (see :func:`placements`)."""
    return Plan(
        tuple(
            placements(
                cluster,
                configuration,
                plugins=plugins,
                seed=seed,
                explain_nodes=explain_nodes,
                now=now,
                features=features,
                volumes=volumes,
                resources=resources,
            )
        )
    )


def _placement(result: scheduling.CycleResult, explain_nodes: bool) -> Placement:
    pod = result.pod
    try:
        verdicts = explain(result) if explain_nodes else None  # gated: none evaluated
    except framework.PluginError as exc:
        if result.node is not None:  # the placement stands; only its explanation failed
            return Placement(pod.key, result.node, Outcome.SCHEDULED, f"explaining: {exc}")
        return Placement(pod.key, None, Outcome.ERROR, f"explaining: {exc}")
    if result.gated:
        return Placement(pod.key, None, Outcome.GATED, result.status.message, verdicts)
    if result.node is not None:
        return Placement(pod.key, result.node, Outcome.SCHEDULED, nodes=verdicts)
    offer = result.preemption
    if offer is not None and offer.nominated_node is not None:
        return Placement(
            pod.key,
            None,
            Outcome.NOMINATED,
            result.status.message,
            verdicts,
            nominated_node=offer.nominated_node,
            victims=tuple(victim.key for victim in offer.victims),
            candidates=dict(offer.candidates) if explain_nodes else None,
        )
    outcome = Outcome.UNSCHEDULABLE if result.status.is_rejection else Outcome.ERROR
    return Placement(pod.key, None, outcome, result.status.message, verdicts)


@dataclass(frozen=True, slots=True)
class TableWidths:
    pod: int
    status: int
    node: int

    @classmethod
    def of(cls, cluster: objects.ClusterObjects) -> TableWidths:
        """Column widths known before planning (pending pods, statuses, node names), so
        each row can be written as soon as its pod is placed."""
        pods = (len(p.key) for p in cluster.pods if not p.node_name)
        nodes = (len(n.name) for n in cluster.nodes)
        return cls(
            max(len("POD"), *pods, 0),
            max(len(o.value) for o in Outcome),
            max(len("NODE"), *nodes, 0),
        )


def table_header(widths: TableWidths) -> str:
    return f"{'POD'.ljust(widths.pod)}  {'STATUS'.ljust(widths.status)}  " + (
        f"{'NODE'.ljust(widths.node)}  DETAIL"
    )


def table_rows(placement: Placement, widths: TableWidths) -> Iterator[str]:
    """One placement: its row, then (with explain) one line per node, best first."""
    detail = placement.message
    if placement.status is Outcome.NOMINATED:
        victims = ", ".join(placement.victims) or "none"
        detail = f"nominated to {placement.nominated_node}, preempting {victims}"
    cells = (
        f"{placement.pod.ljust(widths.pod)}  {placement.status.value.ljust(widths.status)}"
        f"  {(placement.node or '-').ljust(widths.node)}"
    )
    yield f"{cells}  {detail}".rstrip()
    if placement.nodes is None:
        return
    ranked = sorted(
        placement.nodes.items(),
        key=lambda item: (not item[1].feasible, -(item[1].score or 0), item[0]),
    )
    name_width = max((len(name) for name in placement.nodes), default=0)
    for name, verdict in ranked:
        marker = "*" if name == placement.node else " "
        if verdict.feasible:
            line = "feasible"
            if verdict.score is not None:
                weighted = [(p, s.weighted) for p, s in verdict.plugins.items()]
                weighted += [(e, s.weighted) for e, s in verdict.extenders.items()]
                parts = " ".join(f"{p}={w}" for p, w in weighted)
                line = f"score={verdict.score}  {parts}"
        elif verdict.reasons:
            line = "rejected: " + "; ".join(verdict.reasons)
        else:
            line = "not evaluated"
        yield f"  {marker} {name.ljust(name_width)}  {line}"


def render_table(result: Plan, widths: TableWidths) -> str:
    """Human-readable plan: one line per pod, then (with explain) one per node."""
    lines = [table_header(widths)]
    for placement in result.placements:
        lines.extend(table_rows(placement, widths))
    return "\n".join(lines)
