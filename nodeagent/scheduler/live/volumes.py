"""The live scheduler's storage: six informers feeding the volume catalog, the cluster
events they raise, and the writer VolumeBinding's PreBind binds through.

kube-scheduler's volume plugins read PVs, PVCs, StorageClasses, CSINodes, CSIDrivers and
CSIStorageCapacities from shared informers; here one informer per kind keeps the
:class:`~nodeagent.scheduler.storage.VolumeCatalog` current (an object the scheduler
cannot read is logged and skipped, as for pods and nodes). Each add or update is a
cluster event (:class:`~nodeagent.scheduler.live.events.ClusterEvent`), handed with the
old object (the catalog's copy, before the update) and the new one to the volume
plugins' QueueingHints, which move back only the pods it may help; deletions only update
the catalog (a volume that disappears never makes a pod fit).

:class:`APIVolumeWriter` is the binder's API side (``bindAPIUpdate``): a ``PUT`` of the
PV with its new claimRef, a ``PUT`` of the claim with its selected node, each with the
resourceVersion it was read at (a stale one is a 409: the binding fails and the pod is
tried again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.base import errors
from nodeagent.kube import client, informer
from nodeagent.scheduler import objects, storage
from nodeagent.scheduler.live.events import ClusterEvent

log = logging.getLogger("nodeagent.scheduler")

Kind = client.StorageKind


@dataclass(frozen=True, slots=True)
class _Wiring:
    parse: Callable[[Mapping[str, Any]], Any]
    store: Callable[[storage.VolumeCatalog, Any, bool], None]
    stored: Callable[[storage.VolumeCatalog, Any], Any]
    """The catalog's copy of the object, as the API last said: an update's old object."""
    added: ClusterEvent | None
    updated: ClusterEvent | None


_WIRING: Mapping[client.StorageKind, _Wiring] = {
    Kind.PERSISTENT_VOLUMES: _Wiring(
        objects.parse_persistent_volume,
        lambda c, o, present: c.set_volume(o, present=present),
        lambda c, o: c.api_volume(o.name),
        ClusterEvent.PV_ADD,
        ClusterEvent.PV_UPDATE,
    ),
    Kind.PERSISTENT_VOLUME_CLAIMS: _Wiring(
        objects.parse_persistent_volume_claim,
        lambda c, o, present: c.set_claim(o, present=present),
        lambda c, o: c.api_claim(o.namespace, o.name),
        ClusterEvent.PVC_ADD,
        ClusterEvent.PVC_UPDATE,
    ),
    Kind.STORAGE_CLASSES: _Wiring(
        objects.parse_storage_class,
        lambda c, o, present: c.set_class(o, present=present),
        lambda c, o: c.storage_class(o.name),
        ClusterEvent.STORAGE_CLASS_ADD,
        ClusterEvent.STORAGE_CLASS_UPDATE,
    ),
    Kind.CSI_NODES: _Wiring(
        objects.parse_csi_node,
        lambda c, o, present: c.set_csi_node(o, present=present),
        lambda c, o: c.csi_node(o.name),
        ClusterEvent.CSI_NODE_ADD,
        ClusterEvent.CSI_NODE_UPDATE,
    ),
    Kind.CSI_DRIVERS: _Wiring(
        objects.parse_csi_driver,
        lambda c, o, present: c.set_csi_driver(o, present=present),
        lambda c, o: c.csi_driver(o.name),
        None,  # a new CSIDriver alone never makes a pod fit (upstream registers Update)
        ClusterEvent.CSI_DRIVER_UPDATE,
    ),
    Kind.CSI_STORAGE_CAPACITIES: _Wiring(
        objects.parse_csi_storage_capacity,
        lambda c, o, present: c.set_capacity(o, present=present),
        lambda c, o: c.capacity(o.namespace, o.name),
        ClusterEvent.CSI_STORAGE_CAPACITY_ADD,
        ClusterEvent.CSI_STORAGE_CAPACITY_UPDATE,
    ),
}


def _read(kind: client.StorageKind, obj: client.KubeObject) -> Any:
    try:
        return _WIRING[kind].parse(obj)
    except errors.ConfigError as exc:
        log.warning("ignoring a %s the scheduler cannot read: %s", kind.value, exc)
        return None


class StorageInformers(informer.InformerGroup):
    """One informer per storage kind, each writing to ``catalog`` and reporting its adds
    and updates to ``on_event``."""

    def __init__(
        self,
        kube: client.ClusterClient,
        catalog: storage.VolumeCatalog,
        on_event: Callable[[ClusterEvent, Any, Any], None],
        *,
        watch_timeout: int = 300,
    ) -> None:
        self._catalog = catalog
        self._on_event = on_event
        super().__init__(
            [
                informer.Informer(
                    _list_watch(kube, kind),
                    self._handlers(kind),
                    watch_timeout=watch_timeout,
                    name=f"{kind.value}-informer",
                )
                for kind in client.StorageKind
            ]
        )

    def _handlers(self, kind: client.StorageKind) -> informer.Handlers:
        def added(obj: client.KubeObject) -> None:
            self._changed(kind, obj, added=True)

        def updated(_old: client.KubeObject, new: client.KubeObject) -> None:
            self._changed(kind, new, added=False)

        def deleted(obj: client.KubeObject) -> None:
            self._deleted(kind, obj)

        return informer.Handlers(added, updated, deleted)

    def _changed(self, kind: client.StorageKind, obj: client.KubeObject, *, added: bool) -> None:
        value = _read(kind, obj)
        if value is None:
            return
        wiring = _WIRING[kind]
        old = None if added else wiring.stored(self._catalog, value)
        wiring.store(self._catalog, value, True)
        event = wiring.added if added else wiring.updated
        if event is not None:
            self._on_event(event, old, value)

    def _deleted(self, kind: client.StorageKind, obj: client.KubeObject) -> None:
        value = _read(kind, obj)
        if value is not None:
            _WIRING[kind].store(self._catalog, value, False)


def _list_watch(kube: client.ClusterClient, kind: client.StorageKind) -> informer.ListWatch:
    return informer.ListWatch(
        kind.value,
        lambda: kube.list_storage(kind),
        lambda rv, timeout: kube.watch_storage(kind, resource_version=rv, timeout_seconds=timeout),
    )


class APIVolumeWriter:
    """:class:`~nodeagent.scheduler.storage.VolumeWriter` over the API."""

    def __init__(self, kube: client.ClusterClient) -> None:
        self._kube = kube

    def update_volume(self, pv: storage.PersistentVolume) -> storage.PersistentVolume:
        stored = self._kube.replace_storage(
            Kind.PERSISTENT_VOLUMES, "", pv.name, storage.volume_body(pv)
        )
        return objects.parse_persistent_volume(stored)

    def update_claim(self, claim: storage.PersistentVolumeClaim) -> storage.PersistentVolumeClaim:
        stored = self._kube.replace_storage(
            Kind.PERSISTENT_VOLUME_CLAIMS, claim.namespace, claim.name, storage.claim_body(claim)
        )
        return objects.parse_persistent_volume_claim(stored)
