"""VolumeBinding (PreFilter, Filter, PreScore, Score, Reserve, Unreserve, PreBind): claims
and the volumes behind them.

kube-scheduler's ``volumebinding`` plugin and its binder (``binder.go``):

* **PreFilter** reads the pod's claims (``persistentVolumeClaim`` volumes, and the
  ``<pod>-<volume>`` claims of generic ephemeral volumes, which must be controlled by the
  pod). A missing, lost or terminating claim, or an unbound claim whose class binds
  ``Immediate``, rejects the pod everywhere (UnschedulableAndUnresolvable, with
  kube-scheduler's messages): the PV controller, not the scheduler, binds those.
* **Filter**, per node (``FindPodVolumes``): a bound claim's PV must accept the node
  (its ``nodeAffinity``); an unbound ``WaitForFirstConsumer`` claim needs either an
  available PV there - of its class, access modes, volume mode, selector, at least its
  size, the smallest such (``FindMatchingVolume``) - or dynamic provisioning: a
  provisioner, the class's ``allowedTopologies``, and, when the CSIDriver asks for it, a
  CSIStorageCapacity reachable from the node with room for the claim. A claim already
  annotated ``volume.kubernetes.io/selected-node`` goes to that node only.
* **Reserve** assumes the choice in the :class:`~nodeagent.scheduler.storage.VolumeCatalog`
  (the PV's claimRef set, the claim's selected-node set), so the next pod's cycle sees
  those PVs taken; **Unreserve** drops the assumptions.
* **PreBind** writes them through the API as the binder does (``bindAPIUpdate``: PUT
  the PV, PUT the claim) and waits, up to ``bindTimeoutSeconds``, for the PV controller
  to complete the binding (``checkBindings``, read from the informers). Offline (the
  planner) nothing confirms a binding, so the assumptions become the plan's truth.
* **Score** (feature gate StorageCapacityScoring) prefers nodes by how full the chosen
  volumes or the node's storage capacity would be, along ``shape``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api, config, storage
from nodeagent.scheduler.framework import (
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.plugins import helpers, node_affinity, resource_allocation
from nodeagent.scheduler.plugins.node_resources_fit import (
    MAX_CUSTOM_PRIORITY_SCORE,
    UtilizationShapePoint,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices

NAME = "VolumeBinding"
log = logging.getLogger(__name__)

REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
REASON_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
_STATE = "VolumeBinding"
DEFAULT_BIND_TIMEOUT = 600


class Args(config.ConfigModel):
    """``VolumeBindingArgs``."""

    bind_timeout_seconds: int = Field(default=DEFAULT_BIND_TIMEOUT, ge=0)
    """How long PreBind waits for the PV controller; 0 means do not wait."""
    shape: tuple[UtilizationShapePoint, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> Args:
        points = [p.utilization for p in self.shape]
        for i in range(1, len(points)):
            if points[i - 1] >= points[i]:
                raise ValueError(
                    f"shape[{i}].utilization {points[i]}: values must be sorted in increasing order"
                )
        return self


DEFAULT_SHAPE = ((0, MAX_CUSTOM_PRIORITY_SCORE), (100, 0))
"""With StorageCapacityScoring on and no shape: the emptiest volume scores highest."""


class BindingFailed(Exception):
    """The binding of the pod's volumes failed (PreBind's error)."""


@dataclass(frozen=True, slots=True)
class StaticBinding:
    pv: storage.PersistentVolume
    claim: storage.PersistentVolumeClaim


@dataclass(frozen=True, slots=True)
class DynamicProvision:
    claim: storage.PersistentVolumeClaim
    capacity: storage.CSIStorageCapacity | None = None


@dataclass(slots=True)
class PodVolumes:
    """What the pod's unbound claims get on one node."""

    static: list[StaticBinding] = field(default_factory=list)
    dynamic: list[DynamicProvision] = field(default_factory=list)


@dataclass(slots=True)
class _Candidates:
    """One delayed claim's possible PVs, node-independent checks done, smallest first,
    indexed by the single ``key In [values]`` requirement most local PVs carry."""

    prebound: storage.PersistentVolume | None
    ordered: list[storage.PersistentVolume]
    by_label: dict[tuple[str, str], list[int]]
    keys: tuple[str, ...]
    general: list[int]
    """Candidates whose affinity the index cannot answer: checked one by one."""


@dataclass(slots=True)
class _State:
    bound: list[storage.PersistentVolumeClaim]
    delayed: list[storage.PersistentVolumeClaim]
    candidates: dict[str, _Candidates]
    """By claim key."""
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    has_static: bool = False
    all_bound: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def _unresolvable(*reasons: str) -> api.Status:
    return api.unschedulable(*reasons, unresolvable=True)


def pv_allows(pv: storage.PersistentVolume, labels: Mapping[str, str]) -> bool:
    """``CheckNodeAffinity``: the node, as its labels alone, matches a required term."""
    if pv.node_affinity is None:
        return True
    return node_affinity.required_matches(pv.node_affinity, api.Node("", labels))


def _node_independent(pv: storage.PersistentVolume, claim: storage.PersistentVolumeClaim) -> bool:
    """``FindMatchingVolume``'s checks that do not depend on the node, in its order,
    for a PV not bound to the claim."""
    if pv.claim_ref is not None:
        return False
    if pv.capacity < (claim.request or 0) or pv.volume_mode is not claim.volume_mode:
        return False
    if pv.attributes_class != claim.attributes_class or pv.deleting:
        return False
    if pv.phase is not storage.VolumePhase.AVAILABLE:
        return False
    if claim.selector is not None and not claim.selector.matches(pv.labels):
        return False
    if pv.storage_class != claim.class_name:
        return False
    return claim.access_modes <= pv.access_modes


def _index_key(pv: storage.PersistentVolume) -> tuple[str, tuple[str, ...]] | None:
    terms = pv.node_affinity
    if terms is None or len(terms) != 1:
        return None
    term = terms[0]
    if term.match_fields or len(term.match_expressions) != 1:
        return None
    requirement = term.match_expressions[0]
    if requirement.operator != "In" or node_affinity.term_error(term) is not None:
        return None
    return requirement.key, requirement.values


def candidates_for(
    claim: storage.PersistentVolumeClaim, volumes: list[storage.PersistentVolume]
) -> _Candidates:
    prebound = None
    fitting = []
    for pv in volumes:
        if pv.claim_ref is not None and storage.volume_bound_to_claim(pv, claim):
            if (
                pv.capacity >= (claim.request or 0)
                and pv.volume_mode is claim.volume_mode
                and pv.attributes_class == claim.attributes_class
                and not pv.deleting
            ):
                prebound = pv
            continue
        if _node_independent(pv, claim):
            fitting.append(pv)
    fitting.sort(key=lambda pv: (pv.capacity, pv.name))
    by_label: dict[tuple[str, str], list[int]] = {}
    keys: set[str] = set()
    general: list[int] = []
    for i, pv in enumerate(fitting):
        if pv.node_affinity is None:
            general.append(i)
            continue
        indexed = _index_key(pv)
        if indexed is None:
            general.append(i)
            continue
        key, values = indexed
        keys.add(key)
        for value in values:
            by_label.setdefault((key, value), []).append(i)
    return _Candidates(prebound, fitting, by_label, tuple(sorted(keys)), general)


def smallest_on_node(
    found: _Candidates, labels: Mapping[str, str], chosen: set[str]
) -> storage.PersistentVolume | None:
    """``FindMatchingVolume`` on one node (the pre-bound PV, else the smallest fitting)."""
    if found.prebound is not None:
        return found.prebound if pv_allows(found.prebound, labels) else None
    best: int | None = None
    for key in found.keys:
        value = labels.get(key)
        if value is None:
            continue
        for i in found.by_label.get((key, value), ()):
            if found.ordered[i].name not in chosen:
                if best is None or i < best:
                    best = i
                break
    for i in found.general:
        if best is not None and i >= best:
            break
        pv = found.ordered[i]
        if pv.name not in chosen and pv_allows(pv, labels):
            best = i
            break
    return None if best is None else found.ordered[best]


def is_schedulable_after_claim_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPersistentVolumeClaimChange``: a claim the pod uses, directly
    or as a generic ephemeral volume (almost any change to it may help)."""
    claim: storage.PersistentVolumeClaim = new
    return QueueingHint.QUEUE if storage.uses_claim(pod, claim) else QueueingHint.QUEUE_SKIP


def is_schedulable_after_class_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterStorageClassChange``: a new class, or changed allowed
    topologies (the binding mode is immutable)."""
    if old is None:
        return QueueingHint.QUEUE
    before: storage.StorageClass = old
    after: storage.StorageClass = new
    if before.allowed_topologies != after.allowed_topologies:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def is_schedulable_after_csi_node_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterCSINodeChange``: a new CSINode, or its migrated plugins
    changed (compared as the set the annotation lists)."""
    if old is None:
        return QueueingHint.QUEUE
    before: storage.CSINode = old
    after: storage.CSINode = new
    if before.migrated_plugins != after.migrated_plugins:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def is_schedulable_after_csi_driver_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterCSIDriverChange``: a driver of one of the pod's inline CSI
    volumes stopped asking for capacity tracking (upstream looks at inline volumes only)."""
    before: storage.CSIDriver = old
    after: storage.CSIDriver = new
    for volume in pod.volumes:
        if volume.kind is not api.VolumeKind.CSI or volume.driver != after.name:
            continue
        if before.storage_capacity and not after.storage_capacity:
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def volume_limit(capacity: storage.CSIStorageCapacity) -> int | None:
    """``volumeLimit``: the largest volume the capacity allows (``maximumVolumeSize``
    when set, it is the more precise)."""
    if capacity.maximum_volume_size is not None:
        return capacity.maximum_volume_size
    return capacity.capacity


def is_schedulable_after_capacity_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterCSIStorageCapacityChange``: a new capacity, or its volume limit
    raised (topology and class are immutable)."""
    if old is None:
        return QueueingHint.QUEUE
    before, after = volume_limit(old), volume_limit(new)
    if after is not None and (before is None or after > before):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _may_match(
    screens: list[tuple[tuple[str, ...], set[tuple[str, str]]]],
    snapshot: ClusterSnapshot,
    nodes: NodeIndices,
) -> Mask:
    """The nodes carrying, for every screened claim, one of the (key, value) pairs its
    PVs need: over the snapshot's label columns, all nodes at once."""
    mask = np.ones(len(nodes), dtype=bool)
    for keys, pairs in screens:
        claim_mask = np.zeros(len(nodes), dtype=bool)
        for key in keys:
            column = snapshot.labels.column(key)
            codes = [column.code_of[v] for k, v in pairs if k == key and v in column.code_of]
            if codes:
                claim_mask |= np.isin(column.codes[nodes], codes)
        mask &= claim_mask
    return mask


class VolumeBinding:
    name = NAME

    def events_to_register(self) -> Sequence[EventHint]:
        """kube-scheduler's EventsToRegister with QueueingHints on: the pod's claims, any
        PV, a class added or its allowed topologies changed, a node added or relabelled
        (PV node affinity, class topologies), CSINodes' migrated plugins, a CSIDriver
        dropping capacity tracking, more CSIStorageCapacity."""
        e = ClusterEvent
        return (
            EventHint(
                frozenset({e.STORAGE_CLASS_ADD, e.STORAGE_CLASS_UPDATE}),
                is_schedulable_after_class_change,
            ),
            EventHint(frozenset({e.PVC_ADD, e.PVC_UPDATE}), is_schedulable_after_claim_change),
            EventHint(frozenset({e.PV_ADD, e.PV_UPDATE})),
            EventHint(frozenset({e.NODE_ADD, e.NODE_LABEL_CHANGE})),
            EventHint(
                frozenset({e.CSI_NODE_ADD, e.CSI_NODE_UPDATE}), is_schedulable_after_csi_node_change
            ),
            EventHint(frozenset({e.CSI_DRIVER_UPDATE}), is_schedulable_after_csi_driver_change),
            EventHint(
                frozenset({e.CSI_STORAGE_CAPACITY_ADD, e.CSI_STORAGE_CAPACITY_UPDATE}),
                is_schedulable_after_capacity_change,
            ),
        )

    def __init__(self, args: Args, handle: Handle) -> None:
        self._catalog = handle.volumes
        self.bind_timeout = float(args.bind_timeout_seconds)
        self._scoring = handle.features.storage_capacity_scoring
        if args.shape and not self._scoring:
            raise ConfigError(
                "VolumeBindingArgs.shape: unexpected field `shape`, remove it or turn on the"
                " feature gate StorageCapacityScoring",
                field="shape",
            )
        points = [(p.utilization, p.score) for p in args.shape] or list(DEFAULT_SHAPE)
        scale = api.MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
        self._shape = [(u, s * scale) for u, s in points]

    # --- PreFilter -------------------------------------------------------------------------
    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        catalog = self._catalog
        claims: list[storage.PersistentVolumeClaim] = []
        for volume in pod.volumes:
            name = storage.claim_name(pod, volume)
            if not name:
                continue
            claim = catalog.claim(pod.namespace, name)
            ephemeral = volume.kind is api.VolumeKind.EPHEMERAL
            if claim is None:
                if ephemeral:
                    return None, _unresolvable(
                        "waiting for ephemeral volume controller to create the"
                        f' persistentvolumeclaim "{name}"'
                    )
                return None, _unresolvable(f'persistentvolumeclaim "{name}" not found')
            if claim.phase is storage.ClaimPhase.LOST:
                return None, _unresolvable(
                    f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume'
                    f' "{claim.volume_name}"'
                )
            if claim.deleting:
                return None, _unresolvable(f'persistentvolumeclaim "{name}" is being deleted')
            if ephemeral:
                error = storage.claim_is_for_pod(pod, claim)
                if error is not None:
                    return None, _unresolvable(error)
            if all(c.key != claim.key for c in claims):
                # a claim mounted twice is one claim: matched (and bound) once
                claims.append(claim)
        if not claims:
            state.write(_STATE, _State([], [], {}, all_bound=True))
            return None, api.SKIP
        bound, delayed = [], []
        for claim in claims:
            if claim.fully_bound:
                bound.append(claim)
                continue
            delay, error = self._delayed(claim)
            if error:
                return None, api.error(error)
            if delay and not claim.volume_name:
                delayed.append(claim)
            else:
                return None, _unresolvable(REASON_UNBOUND_IMMEDIATE)
        by_class: dict[str, list[storage.PersistentVolume]] = {}
        candidates = {}
        for claim in delayed:
            if storage.ANN_SELECTED_NODE in claim.annotations:
                continue
            volumes = by_class.get(claim.class_name)
            if volumes is None:
                volumes = by_class[claim.class_name] = catalog.volumes_of_class(claim.class_name)
            candidates[claim.key] = candidates_for(claim, volumes)
        # upstream sorts the claims to match by requested size, smallest first
        delayed.sort(key=lambda c: c.request or 0)
        state.write(_STATE, _State(bound, delayed, candidates))
        return None, api.SUCCESS

    def _delayed(self, claim: storage.PersistentVolumeClaim) -> tuple[bool, str]:
        """``IsDelayBindingMode``: (WaitForFirstConsumer, error)."""
        if not claim.class_name:
            return False, ""
        sc = self._catalog.storage_class(claim.class_name)
        if sc is None:
            return False, ""
        if sc.binding_mode is None:
            return False, f'VolumeBindingMode not set for StorageClass "{claim.class_name}"'
        return sc.binding_mode is storage.BindingMode.WAIT_FOR_FIRST_CONSUMER, ""

    # --- Filter ---------------------------------------------------------------------------
    def find(self, found: _State, node: api.Node) -> tuple[PodVolumes | None, api.Status]:
        """``FindPodVolumes`` for one node: what the pod's unbound claims would get
        there, or the rejection."""
        catalog = self._catalog
        labels = node.labels
        node_ok = pv_found = unbound_ok = enough = True
        volumes = PodVolumes()
        for claim in found.bound:
            pv = catalog.volume(claim.volume_name)
            if pv is None:
                pv_found = False
                break
            if not pv_allows(pv, labels):
                node_ok = False
                break
        if node_ok and pv_found and found.delayed:
            unbound_ok, enough, error = self._find_unbound(found, node, volumes)
            if error:
                return None, api.error(error)
        reasons = []
        if not node_ok:
            reasons.append(REASON_NODE_CONFLICT)
        if not unbound_ok:
            reasons.append(REASON_BIND_CONFLICT)
        if not enough:
            reasons.append(REASON_NOT_ENOUGH_SPACE)
        if not pv_found:
            reasons.append(REASON_PV_NOT_EXIST)
        if reasons:
            return None, _unresolvable(*reasons)
        return volumes, api.SUCCESS

    def _find_unbound(
        self, found: _State, node: api.Node, volumes: PodVolumes
    ) -> tuple[bool, bool, str]:
        to_provision = []
        chosen: set[str] = set()
        matched = True
        for claim in found.delayed:
            selected = claim.annotations.get(storage.ANN_SELECTED_NODE)
            if selected is not None:
                if selected != node.name:
                    return False, True, ""
                to_provision.append(claim)
                continue
            pv = smallest_on_node(found.candidates[claim.key], node.labels, chosen)
            if pv is None:
                matched = False
                to_provision.append(claim)
                continue
            chosen.add(pv.name)
            volumes.static.append(StaticBinding(pv, claim))
        if not to_provision:
            return matched, True, ""
        return self._provisions(to_provision, node, volumes)

    def _provisions(
        self, claims: list[storage.PersistentVolumeClaim], node: api.Node, volumes: PodVolumes
    ) -> tuple[bool, bool, str]:
        """``checkVolumeProvisions``: (provisioning possible, enough capacity, error)."""
        catalog = self._catalog
        for claim in claims:
            if not claim.class_name:
                return False, False, f'no class for claim "{claim.key}"'
            sc = catalog.storage_class(claim.class_name)
            if sc is None:
                return False, False, f'failed to find storage class "{claim.class_name}"'
            if sc.provisioner in ("", storage.NOT_SUPPORTED_PROVISIONER):
                return False, True, ""
            if not sc.topology_allows(node.labels):
                return False, True, ""
            sufficient, capacity = self._capacity(claim, sc, node)
            if not sufficient:
                return True, False, ""
            volumes.dynamic.append(DynamicProvision(claim, capacity))
        return True, True, ""

    def _capacity(
        self, claim: storage.PersistentVolumeClaim, sc: storage.StorageClass, node: api.Node
    ) -> tuple[bool, storage.CSIStorageCapacity | None]:
        """``hasEnoughCapacity``: only when the claim has a size and its driver asks."""
        if claim.request is None:
            return True, None
        driver = self._catalog.csi_driver(sc.provisioner)
        if driver is None or not driver.storage_capacity:
            return True, None
        for capacity in self._catalog.capacities():
            limit = capacity.volume_limit
            if (
                capacity.storage_class == sc.name
                and limit is not None
                and limit >= claim.request
                and capacity.node_topology is not None
                and capacity.node_topology.matches(node.labels)
            ):
                return True, capacity
        return False, None

    def _state(self, state: CycleState) -> _State:
        found = state.read(_STATE, _State)
        if found is None:
            raise BindingFailed("VolumeBinding: no PreFilter state")
        return found

    def _record(self, found: _State, node: str, volumes: PodVolumes) -> None:
        with found.lock:
            found.by_node[node] = volumes
            found.has_static = found.has_static or bool(volumes.static)

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        found = self._state(state)
        if not found.delayed and self._bound_vectorizable(found):
            return self._bound_mask(found, snapshot, nodes)
        screens = self._screens(found)
        out = np.zeros(len(nodes), dtype=bool)
        candidates = _may_match(screens, snapshot, nodes) if screens else None
        for i, index in enumerate(nodes.tolist()):
            if candidates is not None and not candidates[i]:
                continue  # no PV of some claim can be there, nor be provisioned
            node = snapshot.nodes[index]
            volumes, status = self.find(found, node)
            if status.code is api.Code.ERROR:
                raise BindingFailed(status.message)
            if volumes is not None:
                self._record(found, node.name, volumes)
            out[i] = volumes is not None
        return out

    def _screens(self, found: _State) -> list[tuple[tuple[str, ...], set[tuple[str, str]]]]:
        """For a cycle whose unbound claims can each be met only by an indexed PV (no
        pre-bound or unindexed candidate, no selected node, a class that does not
        provision): each claim's label keys and the (key, value) pairs its PVs need. A
        node without one pair per claim is refused without :meth:`find` (at 5,000 nodes
        and one local PV per node, most of them: find cost 20 us a node). Empty: no
        screen, every node goes through :meth:`find`."""
        screens = []
        for claim in found.delayed:
            candidates = found.candidates.get(claim.key)
            if (
                candidates is None
                or storage.ANN_SELECTED_NODE in claim.annotations
                or candidates.prebound is not None
                or candidates.general
            ):
                return []
            sc = self._catalog.storage_class(claim.class_name) if claim.class_name else None
            if sc is None or sc.provisioner not in ("", storage.NOT_SUPPORTED_PROVISIONER):
                return []  # may provision (or find reports the class's error)
            screens.append((candidates.keys, set(candidates.by_label)))
        return screens

    def _bound_vectorizable(self, found: _State) -> bool:
        for claim in found.bound:
            pv = self._catalog.volume(claim.volume_name)
            if pv is None or (
                pv.node_affinity is not None and any(t.match_fields for t in pv.node_affinity)
            ):
                return False
        return True

    def _bound_mask(self, found: _State, snapshot: ClusterSnapshot, nodes: NodeIndices) -> Mask:
        """Bound claims only: each PV's affinity over all nodes at once."""
        mask = np.ones(len(nodes), dtype=bool)
        for claim in found.bound:
            pv = self._catalog.volume(claim.volume_name)
            if pv is not None and pv.node_affinity is not None:
                mask &= node_affinity.required_mask(pv.node_affinity, snapshot, nodes)
        empty = PodVolumes()
        with found.lock:
            for index in nodes[mask].tolist():
                found.by_node[snapshot.names[index]] = empty
        return mask

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        found = self._state(state)
        volumes, status = self.find(found, snapshot.nodes[node])
        if volumes is not None:
            self._record(found, snapshot.names[node], volumes)
        return status

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Every rejection of this plugin is UnschedulableAndUnresolvable."""
        return np.zeros(len(nodes), dtype=bool)

    # --- Score ----------------------------------------------------------------------------
    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        if not self._scoring:
            return api.SKIP
        found = state.read(_STATE, _State)
        if found is None or not found.by_node:
            return api.SKIP
        return api.SUCCESS

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        found = self._state(state)
        return np.fromiter(
            (self._node_score(found.by_node.get(snapshot.names[n])) for n in nodes.tolist()),
            dtype=np.int64,
            count=len(nodes),
        )

    def _node_score(self, volumes: PodVolumes | None) -> int:
        if volumes is None:
            return 0
        classes: dict[str, list[int]] = {}
        if volumes.static:
            for binding in volumes.static:
                entry = classes.setdefault(binding.pv.storage_class, [0, 0])
                entry[0] += binding.claim.request or 0
                entry[1] += binding.pv.capacity
        else:
            for provision in volumes.dynamic:
                if provision.capacity is None:
                    continue
                entry = classes.setdefault(provision.claim.class_name, [0, 0])
                entry[1] = provision.capacity.capacity or 0
                entry[0] += provision.claim.request or 0
        if not classes:
            return 0
        total = 0
        for requested, capacity in classes.values():
            if capacity == 0 or requested > capacity:
                utilization = resource_allocation.MAX_UTILIZATION
            else:
                utilization = requested * resource_allocation.MAX_UTILIZATION // capacity
            total += resource_allocation.broken_linear(self._shape, utilization)
        return helpers.go_round(float(total) / float(len(classes)))  # half away from zero

    # --- Reserve, Unreserve -----------------------------------------------------------------
    def reserve(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        found = state.read(_STATE, _State)
        if found is None:
            return api.error("VolumeBinding: no PreFilter state")
        volumes = found.by_node.get(node_name)
        if volumes is None or not found.delayed:
            found.all_bound = True
            return api.SUCCESS
        catalog = self._catalog
        assumed = PodVolumes()
        for binding in volumes.static:
            pv = storage.bind_volume_to_claim(binding.pv, binding.claim)
            catalog.assume_volume(pv)
            assumed.static.append(StaticBinding(pv, binding.claim))
        for provision in volumes.dynamic:
            annotations = {**provision.claim.annotations, storage.ANN_SELECTED_NODE: node_name}
            claim = replace(provision.claim, annotations=annotations)
            catalog.assume_claim(claim)
            assumed.dynamic.append(DynamicProvision(claim, provision.capacity))
        found.by_node[node_name] = assumed
        found.all_bound = False
        return api.SUCCESS

    def unreserve(self, state: CycleState, pod: api.Pod, node_name: str) -> None:
        found = state.read(_STATE, _State)
        if found is None:
            return
        volumes = found.by_node.get(node_name)
        if volumes is None:
            return
        for binding in volumes.static:
            self._catalog.restore_volume(binding.pv.name)
        for provision in volumes.dynamic:
            self._catalog.restore_claim(provision.claim.key)

    # --- PreBind -------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        """Skip when the pod's volumes are all bound: nothing to write or wait for."""
        found = state.read(_STATE, _State)
        if found is None or found.all_bound:
            return api.SKIP
        return api.SUCCESS

    def pre_bind(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        found = state.read(_STATE, _State)
        if found is None or found.all_bound:
            return api.SUCCESS
        volumes = found.by_node.get(node_name)
        if volumes is None:
            return api.error(f'no pod volume found for node "{node_name}"')
        writer = self._catalog.writer
        if writer is None:
            self._commit(volumes)
            return api.SUCCESS
        try:
            self._bind(pod, node_name, volumes, writer)
        except BindingFailed as exc:
            return api.error(str(exc))
        return api.SUCCESS

    def _commit(self, volumes: PodVolumes) -> None:
        """Offline: what the PV controller would do, done at once (the plan's truth)."""
        pvs, claims = [], []
        for binding in volumes.static:
            pvs.append(replace(binding.pv, phase=storage.VolumePhase.BOUND))
            annotations = {**binding.claim.annotations, storage.ANN_BIND_COMPLETED: "yes"}
            claims.append(
                replace(
                    binding.claim,
                    volume_name=binding.pv.name,
                    phase=storage.ClaimPhase.BOUND,
                    annotations=annotations,
                )
            )
        claims.extend(provision.claim for provision in volumes.dynamic)
        self._catalog.commit(pvs, claims)

    def _bind(
        self, pod: api.Pod, node_name: str, volumes: PodVolumes, writer: storage.VolumeWriter
    ) -> None:
        """``bindAPIUpdate`` then ``checkBindings`` until done or ``bindTimeout``."""
        written_pvs: list[storage.PersistentVolume] = []
        written_claims: list[storage.PersistentVolumeClaim] = []
        for binding in volumes.static:
            try:
                written_pvs.append(writer.update_volume(binding.pv))
            except Exception as exc:
                raise BindingFailed(f"binding volumes: updating {binding.pv.name}: {exc}") from exc
        for provision in volumes.dynamic:
            try:
                written_claims.append(writer.update_claim(provision.claim))
            except Exception as exc:
                raise BindingFailed(
                    f"binding volumes: updating {provision.claim.key}: {exc}"
                ) from exc

        def bound() -> bool:
            done, error = self.check_bindings(node_name, volumes, written_pvs, written_claims)
            if error:
                raise BindingFailed(f"binding volumes: {error}")
            return done

        catalog = self._catalog
        if not helpers.wait_until(
            bound,
            timeout=self.bind_timeout,
            wait_changed=catalog.wait_changed,
            monotonic=catalog.monotonic,
        ):
            raise BindingFailed("binding volumes: context deadline exceeded")

    def check_bindings(
        self,
        node_name: str,
        volumes: PodVolumes,
        written_pvs: list[storage.PersistentVolume],
        written_claims: list[storage.PersistentVolumeClaim],
    ) -> tuple[bool, str]:
        """``checkBindings``: (all bound, error)."""
        catalog = self._catalog
        for binding, written in zip(volumes.static, written_pvs, strict=True):
            pv = catalog.api_volume(binding.pv.name)
            claim = catalog.api_claim(binding.claim.namespace, binding.claim.name)
            if pv is None or claim is None:
                return False, f"failed to check binding: {binding.pv.name} or its claim is gone"
            if not storage.later_or_same(pv.resource_version, written.resource_version):
                return False, ""
            if pv.claim_ref is None or not pv.claim_ref.uid:
                return False, f'ClaimRef got reset for pv "{pv.name}"'
            if not claim.fully_bound:
                return False, ""
            if claim.volume_name != pv.name:
                # the PV controller bound the claim to another PV that named it (one a
                # scheduler before a leader change wrote): this node may not reach it
                return False, f'pvc "{claim.key}" was bound to pv "{claim.volume_name}"'
        for sent in written_claims:
            claim = catalog.api_claim(sent.namespace, sent.name)
            if claim is None:
                return False, f'failed to check provisioning pvc: "{sent.key}" is gone'
            if not storage.later_or_same(claim.resource_version, sent.resource_version):
                return False, ""
            if claim.annotations.get(storage.ANN_SELECTED_NODE) != node_name:
                return False, f'provisioning failed for PVC "{claim.name}"'
            if not claim.fully_bound:
                return False, ""
        return True, ""


def new(args: Args | None, handle: Handle) -> VolumeBinding:
    return VolumeBinding(args or Args(), handle)
