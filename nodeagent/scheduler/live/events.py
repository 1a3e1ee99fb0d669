"""Cluster events, and which plugins' rejections each one may undo (``EventsToRegister``).

A pod rejected by plugins waits in unschedulablePods until something happens that one
of its *rejecting* plugins registered for; anything else leaves it parked, so a busy
cluster does not retry every unschedulable pod on every change. The registrations are
kube-scheduler's ``EventsToRegister`` for the in-tree plugins (without QueueingHints:
a registered event always moves the pod, as kube-scheduler did before hints). A plugin
not in :data:`REGISTRATIONS` is assumed to care about everything, which is safe.

:func:`node_events` turns an observed Node change into these events; it is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from nodeagent.k8s.pressure import PRESSURE_ANNOTATION
from nodeagent.scheduler import api


class ClusterEvent(StrEnum):
    NODE_ADD = "NodeAdd"
    NODE_ALLOCATABLE_CHANGE = "NodeAllocatableChange"
    NODE_LABEL_CHANGE = "NodeLabelChange"
    NODE_TAINT_CHANGE = "NodeTaintChange"
    NODE_CONDITION_CHANGE = "NodeConditionChange"
    NODE_SPEC_UNSCHEDULABLE_CHANGE = "NodeSpecUnschedulableChange"
    NODE_ANNOTATION_CHANGE = "NodeAnnotationChange"
    ASSIGNED_POD_ADD = "AssignedPodAdd"
    ASSIGNED_POD_UPDATE = "AssignedPodUpdate"
    ASSIGNED_POD_DELETE = "AssignedPodDelete"
    UNSCHEDULED_POD_UPDATE = "UnscheduledPodUpdate"
    PDB_CHANGE = "PodDisruptionBudgetChange"
    PV_ADD = "PersistentVolumeAdd"
    PV_UPDATE = "PersistentVolumeUpdate"
    PVC_ADD = "PersistentVolumeClaimAdd"
    PVC_UPDATE = "PersistentVolumeClaimUpdate"
    STORAGE_CLASS_ADD = "StorageClassAdd"
    STORAGE_CLASS_UPDATE = "StorageClassUpdate"
    CSI_NODE_ADD = "CSINodeAdd"
    CSI_NODE_UPDATE = "CSINodeUpdate"
    CSI_DRIVER_UPDATE = "CSIDriverUpdate"
    CSI_STORAGE_CAPACITY_ADD = "CSIStorageCapacityAdd"
    CSI_STORAGE_CAPACITY_UPDATE = "CSIStorageCapacityUpdate"
    UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"
    """The 5-minute flush: moves every pod regardless of registrations."""


E = ClusterEvent
_ASSIGNED_POD = frozenset({E.ASSIGNED_POD_ADD, E.ASSIGNED_POD_UPDATE, E.ASSIGNED_POD_DELETE})

REGISTRATIONS: Mapping[str, frozenset[ClusterEvent]] = {
    "NodeResourcesFit": frozenset(
        {E.NODE_ADD, E.NODE_ALLOCATABLE_CHANGE, E.ASSIGNED_POD_DELETE, E.ASSIGNED_POD_UPDATE}
    ),
    "NodeResourcesBalancedAllocation": frozenset({E.NODE_ADD, E.NODE_ALLOCATABLE_CHANGE}),
    "TaintToleration": frozenset({E.NODE_ADD, E.NODE_TAINT_CHANGE}),
    "NodeUnschedulable": frozenset(
        {E.NODE_ADD, E.NODE_TAINT_CHANGE, E.NODE_SPEC_UNSCHEDULABLE_CHANGE}
    ),
    "NodeAffinity": frozenset({E.NODE_ADD, E.NODE_LABEL_CHANGE}),
    "NodeName": frozenset({E.NODE_ADD}),
    "NodePorts": frozenset({E.NODE_ADD, E.ASSIGNED_POD_DELETE}),
    "ImageLocality": frozenset(),
    "NodePressure": frozenset(
        {E.NODE_ADD, E.NODE_TAINT_CHANGE, E.NODE_CONDITION_CHANGE, E.NODE_ANNOTATION_CHANGE}
    ),
    "PodTopologySpread": frozenset({E.NODE_ADD, E.NODE_LABEL_CHANGE, *_ASSIGNED_POD}),
    "InterPodAffinity": frozenset({E.NODE_ADD, E.NODE_LABEL_CHANGE, *_ASSIGNED_POD}),
    "DefaultPreemption": frozenset({E.ASSIGNED_POD_DELETE, E.PDB_CHANGE}),
    # the volume plugins (their EventsToRegister); a deleted PV, claim or class never
    # makes a pod fit, so deletions are not registered
    "VolumeRestrictions": frozenset(
        {E.ASSIGNED_POD_DELETE, E.NODE_ADD, E.NODE_TAINT_CHANGE, E.NODE_LABEL_CHANGE, E.PVC_ADD}
    ),
    "VolumeZone": frozenset(
        {
            E.STORAGE_CLASS_ADD,
            E.NODE_ADD,
            E.NODE_LABEL_CHANGE,
            E.NODE_TAINT_CHANGE,
            E.PVC_ADD,
            E.PVC_UPDATE,
            E.PV_ADD,
            E.PV_UPDATE,
        }
    ),
    "NodeVolumeLimits": frozenset(
        {E.CSI_NODE_ADD, E.CSI_NODE_UPDATE, E.ASSIGNED_POD_DELETE, E.PVC_ADD}
    ),
    "VolumeBinding": frozenset(
        {
            E.STORAGE_CLASS_ADD,
            E.STORAGE_CLASS_UPDATE,
            E.PVC_ADD,
            E.PVC_UPDATE,
            E.PV_ADD,
            E.PV_UPDATE,
            E.NODE_ADD,
            E.NODE_LABEL_CHANGE,
            E.NODE_TAINT_CHANGE,
            E.CSI_NODE_ADD,
            E.CSI_NODE_UPDATE,
            E.CSI_DRIVER_UPDATE,
            E.CSI_STORAGE_CAPACITY_ADD,
            E.CSI_STORAGE_CAPACITY_UPDATE,
        }
    ),
}


def moves(rejectors: Iterable[str], event: ClusterEvent) -> bool:
    """Whether ``event`` may make a pod rejected by ``rejectors`` schedulable."""
    if event is ClusterEvent.UNSCHEDULABLE_TIMEOUT:
        return True
    plugins = list(rejectors)
    if not plugins:
        return True  # no rejector recorded: nothing says which event matters
    return any(event in REGISTRATIONS.get(plugin, frozenset(ClusterEvent)) for plugin in plugins)


def node_events(old: api.Node, new: api.Node) -> frozenset[ClusterEvent]:
    """What changed between two observations of a Node, as cluster events."""
    found: set[ClusterEvent] = set()
    if old.allocatable != new.allocatable:
        found.add(E.NODE_ALLOCATABLE_CHANGE)
    if old.labels != new.labels:
        found.add(E.NODE_LABEL_CHANGE)
    if old.taints != new.taints:
        found.add(E.NODE_TAINT_CHANGE)
    if old.unschedulable != new.unschedulable:
        found.add(E.NODE_SPEC_UNSCHEDULABLE_CHANGE)
    if old.conditions != new.conditions:
        found.add(E.NODE_CONDITION_CHANGE)
    if old.annotations.get(PRESSURE_ANNOTATION) != new.annotations.get(PRESSURE_ANNOTATION):
        found.add(E.NODE_ANNOTATION_CHANGE)
    return frozenset(found)
