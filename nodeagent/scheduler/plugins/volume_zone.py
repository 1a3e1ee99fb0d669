"""VolumeZone (PreFilter, Filter): a bound volume's zone and region labels.

kube-scheduler's ``volumezone`` plugin. A PV labelled with a zone or region (the GA
``topology.kubernetes.io/*`` keys or the legacy ``failure-domain.beta.kubernetes.io/*``
ones; several zones joined by ``__``) can only be used on nodes of that zone or region.
A node with none of the four labels is not constrained. A node label under the
other spelling of the key counts (a legacy PV label matches a GA node label).

PreFilter reads the pod's claims: unbound claims of a ``WaitForFirstConsumer`` class are
left to VolumeBinding; other problems (no claim, no class, an unbound Immediate claim,
a missing PV) reject the pod everywhere, UnschedulableAndUnresolvable, with
kube-scheduler's messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nodeagent.scheduler import api, storage
from nodeagent.scheduler.framework import (
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.snapshot import (
    BETA_REGION_LABEL,
    BETA_ZONE_LABEL,
    REGION_LABEL,
    ZONE_LABEL,
    ClusterSnapshot,
    Mask,
    NodeIndices,
)

NAME = "VolumeZone"
REASON_CONFLICT = "node(s) had no available volume zone"
_STATE = "PreFilterVolumeZone"
TOPOLOGY_LABELS = (BETA_ZONE_LABEL, BETA_REGION_LABEL, ZONE_LABEL, REGION_LABEL)
_GA = {BETA_ZONE_LABEL: ZONE_LABEL, BETA_REGION_LABEL: REGION_LABEL}


@dataclass(frozen=True, slots=True)
class Topology:
    """One PV label the node must satisfy: its key and the values allowed."""

    volume: str
    key: str
    values: frozenset[str]


def volume_topologies(pv: storage.PersistentVolume) -> list[Topology]:
    """``getPVTopologies``: each of the four labels the PV carries, its value split on
    ``__`` (``LabelZonesToSet``; a value with an empty part is ignored)."""
    found = []
    for key in TOPOLOGY_LABELS:
        value = pv.labels.get(key)
        if value is None:
            continue
        zones = value.split("__")
        if any(not zone.strip() for zone in zones):
            continue
        found.append(Topology(pv.name, key, frozenset(z.strip() for z in zones)))
    return found


def node_allows(labels: dict[str, str] | Any, topologies: list[Topology]) -> bool:
    if not any(key in labels for key in TOPOLOGY_LABELS):
        return True
    for topology in topologies:
        value = labels.get(topology.key)
        if value is None:
            value = labels.get(_GA.get(topology.key, topology.key))
        if value is None or value not in topology.values:
            return False
    return True


def is_schedulable_after_claim_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPersistentVolumeClaimChange``: a claim the pod names (not an
    ephemeral volume's: upstream's VolumeZone reads ``persistentVolumeClaim`` only)."""
    claim: storage.PersistentVolumeClaim = new
    if storage.uses_claim(pod, claim, ephemeral=False):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def is_schedulable_after_class_added(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterStorageClassAdded``: only a WaitForFirstConsumer class (the
    plugin leaves such claims to VolumeBinding)."""
    added: storage.StorageClass = new
    if added.binding_mode is storage.BindingMode.WAIT_FOR_FIRST_CONSUMER:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def is_schedulable_after_volume_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPersistentVolumeChange``: a new PV, or its zone/region labels
    changed (node affinity is immutable)."""
    if old is None:
        return QueueingHint.QUEUE
    before: storage.PersistentVolume = old
    after: storage.PersistentVolume = new
    if volume_topologies(before) != volume_topologies(after):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


class VolumeZone:
    name = NAME

    def events_to_register(self) -> Sequence[EventHint]:
        """kube-scheduler's EventsToRegister with QueueingHints on: a new
        WaitForFirstConsumer class, the pod's claim created or changed, a PV created or
        its zone labels changed, a node added or relabelled (no taint changes: those
        never change a zone verdict)."""
        e = ClusterEvent
        return (
            EventHint(frozenset({e.STORAGE_CLASS_ADD}), is_schedulable_after_class_added),
            EventHint(frozenset({e.NODE_ADD, e.NODE_LABEL_CHANGE})),
            EventHint(frozenset({e.PVC_ADD, e.PVC_UPDATE}), is_schedulable_after_claim_change),
            EventHint(frozenset({e.PV_ADD, e.PV_UPDATE}), is_schedulable_after_volume_change),
        )

    def __init__(self, catalog: storage.VolumeCatalog) -> None:
        self._catalog = catalog

    def topologies(self, pod: api.Pod) -> tuple[list[Topology], api.Status]:
        catalog = self._catalog
        found: list[Topology] = []
        for volume in pod.volumes:
            if volume.kind is not api.VolumeKind.CLAIM:
                continue
            if not volume.claim_name:
                return [], _unresolvable("PersistentVolumeClaim had no name")
            claim = catalog.claim(pod.namespace, volume.claim_name)
            if claim is None:
                return [], _unresolvable(f'persistentvolumeclaim "{volume.claim_name}" not found')
            if not claim.volume_name:
                class_name = claim.class_name
                if not class_name:
                    return [], _unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name"
                    )
                sc = catalog.storage_class(class_name)
                if sc is None:
                    return [], _unresolvable(
                        f'storageclass.storage.k8s.io "{class_name}" not found'
                    )
                if sc.binding_mode is None:
                    return [], _unresolvable(
                        f'VolumeBindingMode not set for StorageClass "{class_name}"'
                    )
                if sc.binding_mode is storage.BindingMode.WAIT_FOR_FIRST_CONSUMER:
                    continue  # VolumeBinding picks a volume for the node
                return [], _unresolvable("PersistentVolume had no name")
            pv = catalog.volume(claim.volume_name)
            if pv is None:
                return [], _unresolvable(f'persistentvolume "{claim.volume_name}" not found')
            found.extend(volume_topologies(pv))
        return found, api.SUCCESS

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        found, status = self.topologies(pod)
        if not status.is_success:
            return None, status
        if not found:
            return None, api.SKIP
        state.write(_STATE, found)
        return None, api.SUCCESS

    def _state(self, state: CycleState, pod: api.Pod) -> list[Topology]:
        found = state.read(_STATE, list)
        return found if found is not None else self.topologies(pod)[0]

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        topologies = self._state(state, pod)
        if not topologies:
            return np.ones(len(nodes), dtype=bool)
        by_node = snapshot.nodes
        return np.fromiter(
            (node_allows(by_node[n].labels, topologies) for n in nodes.tolist()),
            dtype=bool,
            count=len(nodes),
        )

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        if node_allows(snapshot.nodes[node].labels, self._state(state, pod)):
            return api.SUCCESS
        return _unresolvable(REASON_CONFLICT)

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Every rejection of this plugin is UnschedulableAndUnresolvable."""
        return np.zeros(len(nodes), dtype=bool)


def _unresolvable(reason: str) -> api.Status:
    return api.unschedulable(reason, unresolvable=True)


def new(args: Any, handle: Handle) -> VolumeZone:
    return VolumeZone(handle.volumes)
