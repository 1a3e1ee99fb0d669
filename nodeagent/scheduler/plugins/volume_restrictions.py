"""VolumeRestrictions (PreFilter, Filter): volumes that cannot be shared.

kube-scheduler's ``volumerestrictions`` plugin, two rules:

* a node already running a pod with the same GCE PD (unless both mount it read-only),
  the same AWS EBS volume, the same iSCSI IQN (unless both read-only) or the same RBD
  image on overlapping monitors (unless both read-only) cannot take the pod: "node(s)
  had no available disk";
* a ``ReadWriteOncePod`` claim used by any pod in the cluster makes every node
  unschedulable for a second user. The rejection is Unschedulable, not Unresolvable:
  preemption may evict the holder. Because PreFilter counts the users from the
  snapshot, preemption's dry run (which removes victims and runs PreFilter again)
  sees the claim freed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nodeagent.scheduler import api, storage
from nodeagent.scheduler.framework import (
    POD_DELETE_EVENTS,
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot, Mask, NodeIndices

NAME = "VolumeRestrictions"
REASON_DISK_CONFLICT = "node(s) had no available disk"
REASON_READ_WRITE_ONCE_POD = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode"
    " already in-use by another pod"
)
_STATE = "PreFilterVolumeRestrictions"
_CHECKED = frozenset(
    {api.VolumeKind.GCE_PD, api.VolumeKind.AWS_EBS, api.VolumeKind.RBD, api.VolumeKind.ISCSI}
)


@dataclass(frozen=True, slots=True)
class _State:
    disk_check: bool
    conflicting_claims: int


def volumes_conflict(volume: api.PodVolume, other: api.PodVolume) -> bool:
    """``isVolumeConflict`` for one pair of volumes."""
    if volume.kind is not other.kind or volume.kind not in _CHECKED:
        return False
    both_read_only = volume.read_only and other.read_only
    if volume.kind is api.VolumeKind.AWS_EBS:
        return volume.disk == other.disk
    if volume.kind is api.VolumeKind.RBD:
        overlap = bool(set(volume.monitors) & set(other.monitors))
        return overlap and volume.disk == other.disk and not both_read_only
    return volume.disk == other.disk and not both_read_only  # GCE PD, iSCSI


def disk_conflict(pod: api.Pod, existing: list[api.Pod]) -> bool:
    for volume in pod.volumes:
        if volume.kind not in _CHECKED:
            continue
        for other in existing:
            if any(volumes_conflict(volume, theirs) for theirs in other.volumes):
                return True
    return False


def is_schedulable_after_pod_deleted(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPodDeleted``: a pod of the same namespace whose disks
    conflicted with the pod's, or that used one of its claims (ReadWriteOncePod)."""
    deleted: api.Pod = old
    if deleted.namespace != pod.namespace:
        return QueueingHint.QUEUE_SKIP
    if disk_conflict(pod, [deleted]):
        return QueueingHint.QUEUE
    claims = {v.claim_name for v in pod.volumes if v.kind is api.VolumeKind.CLAIM}
    if any(v.kind is api.VolumeKind.CLAIM and v.claim_name in claims for v in deleted.volumes):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def is_schedulable_after_claim_added(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPersistentVolumeClaimAdded``: a claim the pod names (its
    ``persistentVolumeClaim`` volumes; PreFilter looks up only those)."""
    claim: storage.PersistentVolumeClaim = new
    if storage.uses_claim(pod, claim, ephemeral=False):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


class VolumeRestrictions:
    name = NAME

    def events_to_register(self) -> Sequence[EventHint]:
        """kube-scheduler's EventsToRegister with QueueingHints on: a deleted pod that
        held the pod's disk or ReadWriteOncePod claim, a new node, the missing claim
        created."""
        e = ClusterEvent
        return (
            EventHint(POD_DELETE_EVENTS, is_schedulable_after_pod_deleted),
            EventHint(frozenset({e.NODE_ADD})),
            EventHint(frozenset({e.PVC_ADD}), is_schedulable_after_claim_added),
        )

    def __init__(self, catalog: storage.VolumeCatalog) -> None:
        self._catalog = catalog

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        disk_check = any(v.kind in _CHECKED for v in pod.volumes)
        conflicting = 0
        for volume in pod.volumes:
            if volume.kind is not api.VolumeKind.CLAIM:
                continue
            claim = self._catalog.claim(pod.namespace, volume.claim_name)
            if claim is None:
                message = f'persistentvolumeclaim "{volume.claim_name}" not found'
                return None, api.unschedulable(message, unresolvable=True)
            if storage.AccessMode.READ_WRITE_ONCE_POD not in claim.access_modes:
                continue
            if snapshot.claim_users.get(claim.key, 0) > 0:
                conflicting += 1
        if not disk_check and not conflicting:
            return None, api.SKIP
        state.write(_STATE, _State(disk_check, conflicting))
        return None, api.SUCCESS

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        found = state.read(_STATE, _State)
        if found is not None and found.conflicting_claims:
            return np.zeros(len(nodes), dtype=bool)
        if found is None or not found.disk_check:
            return np.ones(len(nodes), dtype=bool)
        on_node = snapshot.pods_on_node
        return np.fromiter(
            (not disk_conflict(pod, on_node[n]) for n in nodes.tolist()),
            dtype=bool,
            count=len(nodes),
        )

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        found = state.read(_STATE, _State)
        if disk_conflict(pod, snapshot.pods_on_node[node]):
            return api.unschedulable(REASON_DISK_CONFLICT)
        if found is not None and found.conflicting_claims:
            return api.unschedulable(REASON_READ_WRITE_ONCE_POD)
        return api.SUCCESS


def new(args: Any, handle: Handle) -> VolumeRestrictions:
    return VolumeRestrictions(handle.volumes)
