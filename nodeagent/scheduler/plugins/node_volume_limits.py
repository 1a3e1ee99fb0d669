"""NodeVolumeLimits (PreFilter, Filter): a node's CSI attach limits.

kube-scheduler's ``nodevolumelimits`` CSI plugin. A node's CSINode publishes, per CSI
driver, how many volumes it can attach (``allocatable.count``). The pod's attachable
volumes - its claims' PVs (or, for an unbound claim, the driver its StorageClass
provisions with), generic ephemeral volumes' claims, and inline in-tree disks that
migrate to CSI - are counted per driver with the unique volumes the node's pods
already use; a volume already on the node costs nothing more. Over the limit: "node(s)
exceed max volume count" (Unschedulable: preemption may free attachments).

An in-tree source (a GCE PD, an EBS volume...) counts against the CSI driver it migrates
to only on a node with a CSINode (``isCSIMigrationOn``), under the driver's name.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from nodeagent.scheduler import api, storage
from nodeagent.scheduler.framework import (
    POD_DELETE_EVENTS,
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    PluginError,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot, Mask, NodeIndices

NAME = "NodeVolumeLimits"
REASON_MAX_VOLUME_COUNT = "node(s) exceed max volume count"
_ATTACHABLE_INLINE = frozenset(storage.IN_TREE_PLUGIN)


_Usage = tuple[dict[str, int], dict[str, int], frozenset[str]]
"""A node's CSI limits per driver, its volumes in use per driver, its unique volumes."""


_ANY_CSI_NODE = storage.CSINode("")
"""Stands for every node with a CSINode when only its presence matters."""


class _NotFound(Exception):
    """A claim of the pod to schedule is missing: UnschedulableAndUnresolvable."""


def _attachable(volume: api.PodVolume) -> bool:
    return volume.kind in (api.VolumeKind.CLAIM, api.VolumeKind.EPHEMERAL) or (
        volume.kind in _ATTACHABLE_INLINE
    )


def is_schedulable_after_pod_deleted(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPodDeleted``: the deleted pod was on a node (or nominated to
    one) and had a volume that may count against a limit."""
    deleted: api.Pod = old
    if not deleted.node_name and not deleted.nominated_node_name:
        return QueueingHint.QUEUE_SKIP
    if any(_attachable(volume) for volume in deleted.volumes):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def is_schedulable_after_claim_added(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPVCAdded``: the pod's claim (ephemeral ones included)."""
    claim: storage.PersistentVolumeClaim = new
    return QueueingHint.QUEUE if storage.uses_claim(pod, claim) else QueueingHint.QUEUE_SKIP


def is_schedulable_after_csi_node_updated(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterCSINodeUpdated``: some driver's allocatable count went up (a
    driver newly listed counts as 0 before). A count dropped altogether lifts the limit
    (Filter reads no count as no limit): Queue, where upstream reads it as 0 and skips."""
    before: storage.CSINode = old
    after: storage.CSINode = new
    for driver, count in after.drivers.items():
        previous = before.drivers.get(driver, 0)
        if count is None:
            if previous is not None:
                return QueueingHint.QUEUE
        elif count > (previous or 0):
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


class NodeVolumeLimits:
    name = NAME

    def events_to_register(self) -> Sequence[EventHint]:
        """kube-scheduler's EventsToRegister: any new CSINode (no hint), a limit raised,
        a pod with attachable volumes gone from a node, the pod's missing claim created.
        (VolumeAttachment deletions are not watched: see docs/scheduler.md.)"""
        e = ClusterEvent
        return (
            EventHint(frozenset({e.CSI_NODE_ADD})),
            EventHint(frozenset({e.CSI_NODE_UPDATE}), is_schedulable_after_csi_node_updated),
            EventHint(POD_DELETE_EVENTS, is_schedulable_after_pod_deleted),
            EventHint(frozenset({e.PVC_ADD}), is_schedulable_after_claim_added),
        )

    def __init__(self, catalog: storage.VolumeCatalog) -> None:
        self._catalog = catalog
        # unbound claims get a made-up handle unique to this scheduler, as upstream's
        # randomVolumeIDPrefix: never equal to a real volume's
        self._prefix = secrets.token_hex(16)
        self._wanted_key: tuple[object, ...] | None = None
        self._wanted_cache: dict[str, str] = {}
        self._usage_cache: dict[str, tuple[tuple[object, ...], _Usage]] = {}
        """Node name -> (what the entry was computed from, the node's usage)."""

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        for volume in pod.volumes:
            if volume.kind in (api.VolumeKind.CLAIM, api.VolumeKind.EPHEMERAL):
                return None, api.SUCCESS
            if volume.kind in _ATTACHABLE_INLINE:
                return None, api.SUCCESS
        return None, api.SKIP

    # --- counting --------------------------------------------------------------------------
    def attachable(
        self, pod: api.Pod, csi_node: storage.CSINode | None, *, new_pod: bool
    ) -> dict[str, str]:
        """``filterAttachableVolumes``: unique volume name -> driver. Raises
        :class:`_NotFound` (the pod to schedule only) or :class:`PluginError`."""
        found: dict[str, str] = {}
        catalog = self._catalog
        for volume in pod.volumes:
            if volume.kind in _ATTACHABLE_INLINE:
                if csi_node is None:
                    continue  # migration is off without a CSINode
                plugin = storage.IN_TREE_PLUGIN[volume.kind]
                driver = storage.IN_TREE_TO_CSI[plugin]
                found[f"{driver}/{volume.disk}"] = driver
                continue
            name = storage.claim_name(pod, volume)
            if volume.kind not in (api.VolumeKind.CLAIM, api.VolumeKind.EPHEMERAL):
                continue
            if not name:
                raise PluginError("PersistentVolumeClaim had no name")
            claim = catalog.claim(pod.namespace, name)
            if claim is None:
                if new_pod:
                    raise _NotFound(
                        f"looking up PVC {pod.namespace}/{name}:"
                        f' persistentvolumeclaim "{name}" not found'
                    )
                continue
            if volume.kind is api.VolumeKind.EPHEMERAL:
                error = storage.claim_is_for_pod(pod, claim)
                if error is not None:
                    raise PluginError(error)
            driver, handle = self._driver_of(claim, csi_node)
            if driver and handle:
                found[f"{driver}/{handle}"] = driver
        return found

    def _driver_of(
        self, claim: storage.PersistentVolumeClaim, csi_node: storage.CSINode | None
    ) -> tuple[str, str]:
        """``getCSIDriverInfo``: the claim's PV's driver and handle, or (unbound, or its
        PV not found) the driver its class provisions with and a made-up handle."""
        pv = self._catalog.volume(claim.volume_name) if claim.volume_name else None
        if pv is None:
            return self._driver_from_class(claim, csi_node)
        source = pv.source
        if source is None:
            return "", ""
        if source.in_tree and csi_node is None:
            return "", ""
        return source.driver, source.handle

    def _driver_from_class(
        self, claim: storage.PersistentVolumeClaim, csi_node: storage.CSINode | None
    ) -> tuple[str, str]:
        if not claim.class_name:
            return "", ""
        sc = self._catalog.storage_class(claim.class_name)
        if sc is None:
            return "", ""
        handle = f"{self._prefix}-{claim.namespace}/{claim.name}"
        migrated = storage.IN_TREE_TO_CSI.get(sc.provisioner)
        if migrated is not None:
            return ("", "") if csi_node is None else (migrated, handle)
        return sc.provisioner, handle

    def node_status(self, pod: api.Pod, snapshot: ClusterSnapshot, node: int) -> api.Status:
        csi_node = self._catalog.csi_node(snapshot.names[node])
        try:
            wanted = self._wanted(pod, csi_node)
        except _NotFound as exc:
            return api.unschedulable(str(exc), unresolvable=True)
        if not wanted or csi_node is None:
            return api.SUCCESS
        if self._over_limit(wanted, self._usage(snapshot, node, csi_node)):
            return api.unschedulable(REASON_MAX_VOLUME_COUNT)
        return api.SUCCESS

    @staticmethod
    def _over_limit(wanted: dict[str, str], usage: _Usage) -> bool:
        """Whether the pod's volumes not on the node yet take a driver past its limit."""
        limits, in_use, attached = usage
        if not limits:
            return False
        adding: dict[str, int] = {}
        for unique, driver in wanted.items():
            if unique not in attached:
                adding[driver] = adding.get(driver, 0) + 1
        for driver, count in adding.items():
            limit = limits.get(driver)
            if limit is not None and in_use.get(driver, 0) + count > limit:
                return True
        return False

    def _wanted(self, pod: api.Pod, csi_node: storage.CSINode | None) -> dict[str, str]:
        """The pod's attachable volumes: they depend on the node only through whether it
        has a CSINode (in-tree migration), so a cycle computes them at most twice."""
        key = (pod.key, pod.uid, pod.volumes, csi_node is None, self._catalog.generation)
        if self._wanted_key != key:
            self._wanted_cache = self.attachable(pod, csi_node, new_pod=True)  # may raise
            self._wanted_key = key
        return self._wanted_cache

    def _usage(self, snapshot: ClusterSnapshot, node: int, csi_node: storage.CSINode) -> _Usage:
        """The node's limits, volumes in use per driver and unique volumes, kept per node
        until its pods, its CSINode or the storage objects change."""
        pods = [p for p in snapshot.pods_on_node[node] if p.volumes]
        key = (
            self._catalog.generation,
            csi_node,
            tuple((id(p), p.uid) for p in pods),
        )
        cached = self._usage_cache.get(snapshot.names[node])
        if cached is not None and cached[0] == key:
            return cached[1]
        attached: dict[str, str] = {}
        for other in pods:
            attached.update(self.attachable(other, csi_node, new_pod=False))
        in_use: dict[str, int] = {}
        for driver in attached.values():
            in_use[driver] = in_use.get(driver, 0) + 1
        limits = {d: n for d, n in csi_node.drivers.items() if n is not None}
        usage = (limits, in_use, frozenset(attached))
        self._usage_cache[snapshot.names[node]] = (key, usage)
        return usage

    # --- the Filter ----------------------------------------------------------------------
    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """:meth:`node_status` for every node, its parts hoisted: the pod's volumes are
        worked out once for nodes with a CSINode and once for those without, each node's
        usage comes from the per-node cache."""
        if not pod.volumes:
            return np.ones(len(nodes), dtype=bool)
        try:
            # with a CSINode, the pod's volumes are those without one and the migrated
            # inline disks: none means every node passes (those without a CSINode always)
            if not self._wanted(pod, _ANY_CSI_NODE):
                return np.ones(len(nodes), dtype=bool)
        except _NotFound:
            return np.zeros(len(nodes), dtype=bool)  # the claim is missing: no node
        if not self._catalog.csi_node_count():
            return np.ones(len(nodes), dtype=bool)  # no node has limits
        csi_node_of, names = self._catalog.csi_node, snapshot.names
        without: bool | None = None  # the verdict on nodes without a CSINode: all alike
        wanted: dict[str, str] | None = None
        missing = False
        out = np.empty(len(nodes), dtype=bool)
        for i, node in enumerate(nodes.tolist()):
            csi_node = csi_node_of(names[node])
            if csi_node is None:
                if without is None:
                    without = self.node_status(pod, snapshot, node).is_success
                out[i] = without
                continue
            if wanted is None:
                try:
                    wanted = self._wanted(pod, csi_node)
                except _NotFound:
                    wanted, missing = {}, True  # every node with a CSINode refuses it
            if missing or not wanted:
                out[i] = not missing
            else:
                out[i] = not self._over_limit(wanted, self._usage(snapshot, node, csi_node))
        return out

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        if not pod.volumes:
            return api.SUCCESS
        return self.node_status(pod, snapshot, node)


def new(args: Any, handle: Handle) -> NodeVolumeLimits:
    return NodeVolumeLimits(handle.volumes)
