"""Storage objects as the volume plugins read them, and the catalog that holds them.

Six kinds decide where a pod with volumes may go: PersistentVolumes and
PersistentVolumeClaims, StorageClasses, and the CSI driver's CSINodes, CSIDrivers and
CSIStorageCapacities. :mod:`nodeagent.scheduler.objects` parses them into the frozen
values below (quantities in bytes, selectors parsed, the legacy class annotation
resolved), so the plugins never touch raw objects.

:class:`VolumeCatalog` is what kube-scheduler's listers and its volume binder's assume
cache are together (``pkg/scheduler/framework/plugins/volumebinding/assume_cache.go``):
the objects as last read (from a cluster file, or kept current by the live
scheduler's informers), plus *assumed* versions of PVs and PVCs that a scheduling
cycle has promised to a pod but the API has not confirmed yet. Readers see the assumed
version, so two pods scheduled back to back never take the same PV. An assumption is
dropped by :meth:`VolumeCatalog.restore` (Unreserve), or when the informer delivers a
version at least as new as the one the assumption was made from (the API caught up).
The catalog is shared by the scheduling loop and the binding threads, hence its lock.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from nodeagent.scheduler import api

BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
"""Set on a claim by the scheduler: the node its volume must be provisioned for."""
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
MIGRATED_PLUGINS_ANNOTATION = "storage.alpha.kubernetes.io/migrated-plugins"

IN_TREE_TO_CSI: Mapping[str, str] = {
    "kubernetes.io/aws-ebs": "ebs.csi.aws.com",
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}
"""The in-tree plugins whose volumes count against their CSI driver's attach limit
(csi-translation-lib's names; nodevolumelimits' ``isCSIMigrationOn`` lists these five)."""


IN_TREE_PLUGIN: Mapping[api.VolumeKind, str] = {
    api.VolumeKind.GCE_PD: "kubernetes.io/gce-pd",
    api.VolumeKind.AWS_EBS: "kubernetes.io/aws-ebs",
    api.VolumeKind.AZURE_DISK: "kubernetes.io/azure-disk",
    api.VolumeKind.CINDER: "kubernetes.io/cinder",
    api.VolumeKind.PORTWORX: "kubernetes.io/portworx-volume",
}
"""Inline volume kinds that migrate to CSI, and their in-tree plugin names."""


class AccessMode(StrEnum):
    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_ONLY_MANY = "ReadOnlyMany"
    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"


class VolumeMode(StrEnum):
    FILESYSTEM = "Filesystem"
    BLOCK = "Block"


class BindingMode(StrEnum):
    IMMEDIATE = "Immediate"
    WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


class VolumePhase(StrEnum):
    PENDING = "Pending"
    AVAILABLE = "Available"
    BOUND = "Bound"
    RELEASED = "Released"
    FAILED = "Failed"


class ClaimPhase(StrEnum):
    PENDING = "Pending"
    BOUND = "Bound"
    LOST = "Lost"


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class CSISource:
    """The attachable volume behind a PV or an inline volume: its CSI driver and handle
    (an in-tree source already named by the driver it migrates to)."""

    driver: str
    handle: str
    in_tree: str = ""
    """The in-tree plugin name when the source was not CSI (``kubernetes.io/gce-pd``)."""

    @property
    def unique_name(self) -> str:
        return f"{self.driver}/{self.handle}"


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    storage_class: str = ""
    """The legacy annotation's value if present, else ``spec.storageClassName``."""
    capacity: int = 0
    """``spec.capacity.storage`` in bytes."""
    access_modes: frozenset[AccessMode] = frozenset()
    volume_mode: VolumeMode = VolumeMode.FILESYSTEM
    claim_ref: ClaimRef | None = None
    node_affinity: tuple[api.SelectorTerm, ...] | None = None
    """``spec.nodeAffinity.required.nodeSelectorTerms``; ``None``: no requirement."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    phase: VolumePhase = VolumePhase.PENDING
    deleting: bool = False
    attributes_class: str = ""
    """``spec.volumeAttributesClassName``."""
    source: CSISource | None = None
    resource_version: str = ""
    raw: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    uid: str = ""
    storage_class: str | None = None
    """The legacy annotation's value if present, else ``spec.storageClassName``;
    ``None``: the claim names no class."""
    request: int | None = None
    """``spec.resources.requests.storage`` in bytes; ``None`` when not requested."""
    access_modes: frozenset[AccessMode] = frozenset()
    volume_mode: VolumeMode = VolumeMode.FILESYSTEM
    selector: api.LabelSelector | None = None
    volume_name: str = ""
    phase: ClaimPhase = ClaimPhase.PENDING
    annotations: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False
    controller_uid: str = ""
    """The UID of the ``ownerReferences`` entry with ``controller: true``."""
    attributes_class: str = ""
    resource_version: str = ""
    raw: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def class_name(self) -> str:
        return self.storage_class or ""

    @property
    def fully_bound(self) -> bool:
        """Bound and confirmed by the PV controller (``isPVCFullyBound``)."""
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations


@dataclass(frozen=True, slots=True)
class TopologyTerm:
    """A StorageClass ``allowedTopologies`` term: each key's value must be one listed."""

    expressions: tuple[tuple[str, frozenset[str]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return bool(self.expressions) and all(
            key in labels and labels[key] in values for key, values in self.expressions
        )


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: BindingMode | None = BindingMode.IMMEDIATE
    """``None`` only for a class written without the API server's defaulting."""
    allowed_topologies: tuple[TopologyTerm, ...] = ()

    def topology_allows(self, labels: Mapping[str, str]) -> bool:
        """``MatchTopologySelectorTerms``: no terms allow every node."""
        return not self.allowed_topologies or any(
            t.matches(labels) for t in self.allowed_topologies
        )


@dataclass(frozen=True, slots=True)
class CSINode:
    name: str
    drivers: Mapping[str, int | None] = field(default_factory=dict)
    """Driver name -> ``allocatable.count`` (``None``: no limit published)."""
    migrated_plugins: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class CSIDriver:
    name: str
    storage_capacity: bool = False
    """``spec.storageCapacity``: the scheduler must check CSIStorageCapacity objects."""


@dataclass(frozen=True, slots=True)
class CSIStorageCapacity:
    namespace: str
    name: str
    storage_class: str
    capacity: int | None = None
    maximum_volume_size: int | None = None
    node_topology: api.LabelSelector | None = None

    @property
    def volume_limit(self) -> int | None:
        """The largest volume it can hold (``volumeLimit``)."""
        return self.capacity if self.maximum_volume_size is None else self.maximum_volume_size


@dataclass(frozen=True, slots=True)
class StorageObjects:
    """The six kinds as read from a cluster file."""

    volumes: tuple[PersistentVolume, ...] = ()
    claims: tuple[PersistentVolumeClaim, ...] = ()
    classes: tuple[StorageClass, ...] = ()
    csi_nodes: tuple[CSINode, ...] = ()
    csi_drivers: tuple[CSIDriver, ...] = ()
    capacities: tuple[CSIStorageCapacity, ...] = ()


def claim_name(pod: api.Pod, volume: api.PodVolume) -> str:
    """The claim a volume uses: its own, or ``<pod>-<volume>`` for a generic ephemeral
    volume (``ephemeral.VolumeClaimName``); ``""`` for other volumes."""
    if volume.kind is api.VolumeKind.CLAIM:
        return volume.claim_name
    if volume.kind is api.VolumeKind.EPHEMERAL:
        return f"{pod.name}-{volume.name}"
    return ""


def uses_claim(pod: api.Pod, claim: PersistentVolumeClaim, *, ephemeral: bool = True) -> bool:
    """Whether ``pod`` names ``claim`` in a volume (with ``ephemeral``, also as a generic
    ephemeral volume's ``<pod>-<volume>`` claim): the QueueingHints' test for a claim
    event concerning the pod."""
    if claim.namespace != pod.namespace:
        return False
    kinds = (
        (api.VolumeKind.CLAIM, api.VolumeKind.EPHEMERAL) if ephemeral else (api.VolumeKind.CLAIM,)
    )
    return any(v.kind in kinds and claim_name(pod, v) == claim.name for v in pod.volumes)


def claim_is_for_pod(pod: api.Pod, claim: PersistentVolumeClaim) -> str | None:
    """``ephemeral.VolumeIsForPod``: the error when an ephemeral volume's claim was not
    created for this pod (another owner: never use someone else's data)."""
    if claim.namespace != pod.namespace or not pod.uid or claim.controller_uid != pod.uid:
        return (
            f"PVC {claim.namespace}/{claim.name} was not created for pod"
            f" {pod.namespace}/{pod.name} (pod is not owner)"
        )
    return None


def _later(candidate: str, than: str) -> bool:
    """Whether resourceVersion ``candidate`` is later than ``than`` (integers as etcd
    hands them out; anything else compares as text)."""
    if candidate.isdigit() and than.isdigit():
        return int(candidate) > int(than)
    return candidate > than


def later_or_same(candidate: str, than: str) -> bool:
    """The informer's copy is at least as new as the one written (``checkBindings``
    waits until it is)."""
    return candidate == than or _later(candidate, than)


class VolumeWriter(Protocol):
    """How VolumeBinding's PreBind writes (the live scheduler: ``PUT`` through the API);
    each returns the object as the API server stored it."""

    def update_volume(self, pv: PersistentVolume) -> PersistentVolume: ...

    def update_claim(self, claim: PersistentVolumeClaim) -> PersistentVolumeClaim: ...


class VolumeCatalog:
    """The storage objects a scheduler knows, with assumed PVs and PVCs on top (see the
    module docstring). Reads return the assumed version where there is one."""

    def __init__(self, objects: StorageObjects | None = None) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._volumes: dict[str, PersistentVolume] = {}
        self._claims: dict[str, PersistentVolumeClaim] = {}
        self._classes: dict[str, StorageClass] = {}
        self._csi_nodes: dict[str, CSINode] = {}
        self._drivers: dict[str, CSIDriver] = {}
        self._capacities: dict[str, CSIStorageCapacity] = {}
        self._assumed_volumes: dict[str, PersistentVolume] = {}
        self._assumed_claims: dict[str, PersistentVolumeClaim] = {}
        self.generation = 0
        """Bumped by every change: what may have made a volume-blocked pod fit."""
        self.writer: VolumeWriter | None = None
        """Set by the live scheduler; ``None`` (the planner): PreBind commits its choices
        to the catalog, there being no API to write to."""
        self.monotonic: Callable[[], float] = time.monotonic
        """PreBind's clock for ``bindTimeoutSeconds`` (the simulation's in tests/sim)."""
        if objects is not None:
            for pv in objects.volumes:
                self._volumes[pv.name] = pv
            for pvc in objects.claims:
                self._claims[pvc.key] = pvc
            for sc in objects.classes:
                self._classes[sc.name] = sc
            for csi_node in objects.csi_nodes:
                self._csi_nodes[csi_node.name] = csi_node
            for driver in objects.csi_drivers:
                self._drivers[driver.name] = driver
            for capacity in objects.capacities:
                self._capacities[f"{capacity.namespace}/{capacity.name}"] = capacity

    # --- reading -------------------------------------------------------------------------
    def volume(self, name: str) -> PersistentVolume | None:
        with self._lock:
            return self._assumed_volumes.get(name) or self._volumes.get(name)

    def claim(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        key = f"{namespace}/{name}"
        with self._lock:
            return self._assumed_claims.get(key) or self._claims.get(key)

    def api_volume(self, name: str) -> PersistentVolume | None:
        """The PV as the API last said (no assumption)."""
        with self._lock:
            return self._volumes.get(name)

    def api_claim(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        with self._lock:
            return self._claims.get(f"{namespace}/{name}")

    def storage_class(self, name: str) -> StorageClass | None:
        with self._lock:
            return self._classes.get(name)

    def csi_node(self, name: str) -> CSINode | None:
        with self._lock:
            return self._csi_nodes.get(name)

    def csi_node_count(self) -> int:
        with self._lock:
            return len(self._csi_nodes)

    def csi_driver(self, name: str) -> CSIDriver | None:
        with self._lock:
            return self._drivers.get(name)

    def capacity(self, namespace: str, name: str) -> CSIStorageCapacity | None:
        with self._lock:
            return self._capacities.get(f"{namespace}/{name}")

    def capacities(self) -> list[CSIStorageCapacity]:
        with self._lock:
            return list(self._capacities.values())

    def volumes_of_class(self, class_name: str) -> list[PersistentVolume]:
        """Every PV of ``class_name``, assumed versions first (``pvCache.ListPVs``)."""
        with self._lock:
            found = [
                self._assumed_volumes.get(pv.name, pv)
                for pv in self._volumes.values()
                if pv.storage_class == class_name
            ]
        return found

    def all_volumes(self) -> Iterator[PersistentVolume]:
        with self._lock:
            names = list(self._volumes)
        for name in names:
            found = self.volume(name)
            if found is not None:
                yield found

    def all_claims(self) -> list[PersistentVolumeClaim]:
        with self._lock:
            return [self._assumed_claims.get(k, c) for k, c in self._claims.items()]

    def wait_changed(self, timeout: float) -> None:
        """Block until the next change (or ``timeout`` seconds): PreBind waiting for the
        PV controller's answer to reach the informers."""
        with self._changed:
            self._changed.wait(timeout)

    def _bump(self) -> None:
        self.generation += 1
        self._changed.notify_all()

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._volumes or self._claims or self._classes or self._csi_nodes)

    # --- assumptions (the binder's assume cache) -----------------------------------------
    def assumed(self) -> list[str]:
        """The PVs and claims assumed and not confirmed yet (none once the binder and the
        informers have caught up)."""
        with self._lock:
            return [*self._assumed_volumes, *self._assumed_claims]

    def assume_volume(self, pv: PersistentVolume) -> None:
        with self._lock:
            self._assumed_volumes[pv.name] = pv
            self._bump()

    def assume_claim(self, pvc: PersistentVolumeClaim) -> None:
        with self._lock:
            self._assumed_claims[pvc.key] = pvc
            self._bump()

    def restore_volume(self, name: str) -> None:
        with self._lock:
            if self._assumed_volumes.pop(name, None) is not None:
                self._bump()

    def restore_claim(self, key: str) -> None:
        with self._lock:
            if self._assumed_claims.pop(key, None) is not None:
                self._bump()

    def commit(
        self, volumes: Iterable[PersistentVolume], claims: Iterable[PersistentVolumeClaim]
    ) -> None:
        """Make assumptions the truth (the planner, where no API will confirm them)."""
        with self._lock:
            for pv in volumes:
                self._assumed_volumes.pop(pv.name, None)
                self._volumes[pv.name] = pv
            for pvc in claims:
                self._assumed_claims.pop(pvc.key, None)
                self._claims[pvc.key] = pvc
            self._bump()

    # --- informer updates ------------------------------------------------------------------
    def set_volume(self, pv: PersistentVolume, *, present: bool = True) -> None:
        with self._lock:
            if present:
                self._volumes[pv.name] = pv
                assumed = self._assumed_volumes.get(pv.name)
                if assumed is not None and _later(pv.resource_version, assumed.resource_version):
                    del self._assumed_volumes[pv.name]  # the API moved past the assumption
            else:
                self._volumes.pop(pv.name, None)
                self._assumed_volumes.pop(pv.name, None)
            self._bump()

    def set_claim(self, pvc: PersistentVolumeClaim, *, present: bool = True) -> None:
        with self._lock:
            if present:
                self._claims[pvc.key] = pvc
                assumed = self._assumed_claims.get(pvc.key)
                if assumed is not None and _later(pvc.resource_version, assumed.resource_version):
                    del self._assumed_claims[pvc.key]
            else:
                self._claims.pop(pvc.key, None)
                self._assumed_claims.pop(pvc.key, None)
            self._bump()

    def set_class(self, sc: StorageClass, *, present: bool = True) -> None:
        with self._lock:
            if present:
                self._classes[sc.name] = sc
            else:
                self._classes.pop(sc.name, None)
            self._bump()

    def set_csi_node(self, csi_node: CSINode, *, present: bool = True) -> None:
        with self._lock:
            if present:
                self._csi_nodes[csi_node.name] = csi_node
            else:
                self._csi_nodes.pop(csi_node.name, None)
            self._bump()

    def set_csi_driver(self, driver: CSIDriver, *, present: bool = True) -> None:
        with self._lock:
            if present:
                self._drivers[driver.name] = driver
            else:
                self._drivers.pop(driver.name, None)
            self._bump()

    def set_capacity(self, capacity: CSIStorageCapacity, *, present: bool = True) -> None:
        key = f"{capacity.namespace}/{capacity.name}"
        with self._lock:
            if present:
                self._capacities[key] = capacity
            else:
                self._capacities.pop(key, None)
            self._bump()


def bind_volume_to_claim(pv: PersistentVolume, pvc: PersistentVolumeClaim) -> PersistentVolume:
    """``GetBindVolumeToClaim``: the PV with its claimRef set to ``pvc`` (and the
    bound-by-controller annotation when the PV was not pre-bound to it)."""
    annotations = dict(pv.annotations)
    if not volume_bound_to_claim(pv, pvc):
        annotations.setdefault(ANN_BOUND_BY_CONTROLLER, "yes")
    return replace(
        pv, claim_ref=ClaimRef(pvc.namespace, pvc.name, pvc.uid), annotations=annotations
    )


def volume_bound_to_claim(pv: PersistentVolume, pvc: PersistentVolumeClaim) -> bool:
    """``IsVolumeBoundToClaim``: the claimRef names the claim (and its UID, if set)."""
    ref = pv.claim_ref
    if ref is None or ref.name != pvc.name or ref.namespace != pvc.namespace:
        return False
    return not ref.uid or ref.uid == pvc.uid


def volume_body(pv: PersistentVolume) -> dict[str, Any]:
    """The PersistentVolume to PUT: the object as read, with ``pv``'s claimRef and
    annotations (``GetBindVolumeToClaim``'s result)."""
    body = copy.deepcopy(dict(pv.raw or {}))
    body.setdefault("apiVersion", "v1")
    body.setdefault("kind", "PersistentVolume")
    meta = body.setdefault("metadata", {})
    meta["annotations"] = dict(pv.annotations)
    ref = pv.claim_ref
    spec = body.setdefault("spec", {})
    if ref is not None:
        spec["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
        }
    return body


def claim_body(claim: PersistentVolumeClaim) -> dict[str, Any]:
    """The claim to PUT: as read, with ``claim``'s annotations (the selected node)."""
    body = copy.deepcopy(dict(claim.raw or {}))
    body.setdefault("apiVersion", "v1")
    body.setdefault("kind", "PersistentVolumeClaim")
    body.setdefault("metadata", {})["annotations"] = dict(claim.annotations)
    return body
