"""Preemption's extender step (kube-scheduler's ``callExtenders`` and ``ProcessPreemption``).

After the dry run, each interested extender with a ``preemptVerb`` receives the candidate
nodes and their victims - whole pods, or only their UIDs when it is node-cache capable -
and answers the candidates it accepts (``NodeNameToMetaVictims``), possibly with fewer
victims; the next extender sees that answer. Every returned node must keep at least one
victim (else the step fails, or the node is dropped when the extender is ignorable), and
the victims are resolved by UID among the node's pods in the snapshot. A failing call
fails the step unless the extender is ignorable (then it is skipped).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nodeagent.scheduler import api
from nodeagent.scheduler.extenders import wire
from nodeagent.scheduler.extenders.chain import Extenders, is_interested, pod_object
from nodeagent.scheduler.extenders.client import ExtenderError, HTTPExtender
from nodeagent.scheduler.framework import Victims
from nodeagent.scheduler.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)


def process_preemption(
    extenders: Extenders,
    pod: api.Pod,
    snapshot: ClusterSnapshot,
    candidates: Mapping[str, Victims],
) -> dict[str, Victims]:
    """The candidates (node -> victims) every interested preempting extender accepted;
    :class:`ExtenderError` when a non-ignorable one fails."""
    current = dict(candidates)
    for extender in extenders.items:
        if not current:
            break
        if not extender.supports_preemption or not is_interested(extender, pod):
            continue
        try:
            answer = _preempt_one(extender, pod, snapshot, current)
        except (ExtenderError, wire.ProtocolError) as exc:
            if extender.ignorable:
                log.info("skipping ignorable preempt extender %s: %s", extender.name, exc)
                continue
            raise ExtenderError(str(exc)) from exc
        for name, victims in list(answer.items()):
            if not victims.pods:
                if extender.ignorable:
                    del answer[name]
                    continue
                raise ExtenderError(f"expected at least one victim pod on node {name!r}")
        current = answer
    return current


def _preempt_one(
    extender: HTTPExtender,
    pod: api.Pod,
    snapshot: ClusterSnapshot,
    candidates: Mapping[str, Victims],
) -> dict[str, Victims]:
    args: dict[str, Any] = {wire.POD: pod_object(pod)}
    if extender.node_cache_capable:
        args[wire.NODE_NAME_TO_VICTIMS] = None
        args[wire.NODE_NAME_TO_META_VICTIMS] = {
            name: {
                wire.PODS: [{wire.UID: victim.uid} for victim in victims.pods],
                wire.NUM_PDB_VIOLATIONS: victims.num_pdb_violations,
            }
            for name, victims in candidates.items()
        }
    else:
        args[wire.NODE_NAME_TO_VICTIMS] = {
            name: {
                wire.PODS: [pod_object(victim) for victim in victims.pods],
                wire.NUM_PDB_VIOLATIONS: victims.num_pdb_violations,
            }
            for name, victims in candidates.items()
        }
        args[wire.NODE_NAME_TO_META_VICTIMS] = None
    where = f"preempt answer from extender {extender.name}"
    answer = wire.object_at(
        extender.send(extender.config.preempt_verb, args), wire.PREEMPTION_RESULT_FIELDS, where
    )
    by_node = answer.get(wire.NODE_NAME_TO_META_VICTIMS) or {}
    if not isinstance(by_node, dict):
        raise ExtenderError(f"{where}: NodeNameToMetaVictims: expected a JSON object")
    result: dict[str, Victims] = {}
    for name, meta_victims in by_node.items():
        node = snapshot.index.get(name)
        if node is None:
            raise ExtenderError(f"{where}: node {name!r} is not in the scheduler's cache")
        fields = wire.object_at(meta_victims or {}, wire.META_VICTIMS_FIELDS, f"{where}.{name}")
        on_node = {p.uid: p for p in snapshot.pods_on_node[node]}
        pods = []
        for k, meta_pod in enumerate(fields.get(wire.PODS) or ()):
            meta = wire.object_at(meta_pod, wire.META_POD_FIELDS, f"{where}.{name}.Pods[{k}]")
            uid = str(meta.get(wire.UID, ""))
            if uid not in on_node:
                raise ExtenderError(
                    f"extender: {extender.name} claims to preempt pod (UID: {uid}) on node:"
                    f" {name}, but the pod is not found on that node"
                )
            pods.append(on_node[uid])
        violations = fields.get(wire.NUM_PDB_VIOLATIONS, 0)
        if isinstance(violations, bool) or not isinstance(violations, int):
            raise ExtenderError(f"{where}.{name}.NumPDBViolations: expected an integer")
        result[name] = Victims(tuple(pods), violations)
    return result
