"""The live scheduler's dynamic resource allocation: three informers feeding the
resource catalog, the cluster events they raise, and the writer DynamicResources writes
claims through.

kube-scheduler reads ResourceSlices, DeviceClasses and ResourceClaims from shared
informers (claims through its assume cache); here one informer per kind keeps the
:class:`~nodeagent.scheduler.resource_claims.ResourceCatalog` current (an object the
scheduler cannot read is logged and skipped, as for pods and nodes). Adds and updates
are cluster events, delivered with the old and new objects for the plugin's queueing
hints. A claim's deletion is no event (upstream registers Add and Update only), nor is
a slice's or a class's.

ResourceClaimTemplates are not watched: kube-scheduler does not (its ClusterRole cannot
read them); a pod's claim made from a template is found by the name the resourceclaim
controller writes to ``status.resourceClaimStatuses``.

:class:`APIClaimWriter` is the API side of PreBind, PostFilter and Unreserve.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.base import errors
from nodeagent.kube import client, events, informer
from nodeagent.scheduler import api, resource_claims
from nodeagent.scheduler.framework import ClusterEvent
from nodeagent.scheduler.resource_claims import ResourceCatalog, ResourceClaim

log = logging.getLogger("nodeagent.scheduler")

Kind = client.ResourceKind
OnEvent = Callable[[ClusterEvent, object, object], None]


@dataclass(frozen=True, slots=True)
class _Wiring:
    parse: Callable[[Mapping[str, Any]], Any]
    store: Callable[[ResourceCatalog, Any, bool], None]
    added: ClusterEvent
    updated: ClusterEvent


_WIRING: Mapping[client.ResourceKind, _Wiring] = {
    Kind.RESOURCE_SLICES: _Wiring(
        resource_claims.parse_resource_slice,
        lambda c, o, present: c.set_slice(o, present=present),
        ClusterEvent.RESOURCE_SLICE_ADD,
        ClusterEvent.RESOURCE_SLICE_UPDATE,
    ),
    Kind.DEVICE_CLASSES: _Wiring(
        resource_claims.parse_device_class,
        lambda c, o, present: c.set_class(o, present=present),
        ClusterEvent.DEVICE_CLASS_ADD,
        ClusterEvent.DEVICE_CLASS_UPDATE,
    ),
    Kind.RESOURCE_CLAIMS: _Wiring(
        resource_claims.parse_resource_claim,
        lambda c, o, present: c.set_claim(o, present=present),
        ClusterEvent.RESOURCE_CLAIM_ADD,
        ClusterEvent.RESOURCE_CLAIM_UPDATE,
    ),
}


def _read(kind: client.ResourceKind, obj: client.KubeObject) -> Any:
    try:
        return _WIRING[kind].parse(obj)
    except errors.ConfigError as exc:
        log.warning("ignoring a %s the scheduler cannot read: %s", kind.value, exc)
        return None


class ResourceInformers(informer.InformerGroup):
    """One informer per kind, each writing to ``catalog`` and reporting its adds and
    updates to ``on_event`` (with the old and new parsed objects)."""

    def __init__(
        self,
        kube: client.ClusterClient,
        catalog: ResourceCatalog,
        on_event: OnEvent,
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
                for kind in client.ResourceKind
            ]
        )

    def _handlers(self, kind: client.ResourceKind) -> informer.Handlers:
        def added(obj: client.KubeObject) -> None:
            self._changed(kind, None, obj)

        def updated(old: client.KubeObject, new: client.KubeObject) -> None:
            self._changed(kind, old, new)

        def deleted(obj: client.KubeObject) -> None:
            value = _read(kind, obj)
            if value is not None:
                _WIRING[kind].store(self._catalog, value, False)

        return informer.Handlers(added, updated, deleted)

    def _changed(
        self, kind: client.ResourceKind, old: client.KubeObject | None, obj: client.KubeObject
    ) -> None:
        value = _read(kind, obj)
        if value is None:
            return
        wiring = _WIRING[kind]
        wiring.store(self._catalog, value, True)
        before = None if old is None else _read(kind, old)
        self._on_event(wiring.added if old is None else wiring.updated, before, value)


def _list_watch(kube: client.ClusterClient, kind: client.ResourceKind) -> informer.ListWatch:
    return informer.ListWatch(
        kind.value,
        lambda: kube.list_resources(kind),
        lambda rv, timeout: kube.watch_resources(
            kind, resource_version=rv, timeout_seconds=timeout
        ),
    )


class APIClaimWriter:
    """:class:`~nodeagent.scheduler.resource_claims.ClaimWriter` over the API."""

    def __init__(
        self, kube: client.ClusterClient, recorder: events.EventRecorder | None = None
    ) -> None:
        self._kube = kube
        self._recorder = recorder

    def get_claim(self, namespace: str, name: str) -> ResourceClaim:
        return resource_claims.parse_resource_claim(self._kube.get_resource_claim(namespace, name))

    def update_claim(self, claim: ResourceClaim) -> ResourceClaim:
        stored = self._kube.replace_resource_claim(claim.namespace, claim.name, claim.raw)
        return resource_claims.parse_resource_claim(stored)

    def update_claim_status(self, claim: ResourceClaim) -> ResourceClaim:
        stored = self._kube.replace_resource_claim(
            claim.namespace, claim.name, claim.raw, status=True
        )
        return resource_claims.parse_resource_claim(stored)

    def create_claim(self, body: Mapping[str, Any]) -> ResourceClaim:
        namespace = str(body["metadata"]["namespace"])
        return resource_claims.parse_resource_claim(
            self._kube.create_resource_claim(namespace, body)
        )

    def delete_claim(self, claim: ResourceClaim) -> None:
        self._kube.delete_resource_claim(claim.namespace, claim.name, uid=claim.uid)

    def patch_pod_status(self, pod: api.Pod, patch: Mapping[str, Any]) -> None:
        self._kube.patch_pod_status(pod.namespace, pod.name, patch)

    def record_event(self, pod: api.Pod, reason: str, message: str) -> None:
        if self._recorder is not None:
            involved = events.InvolvedObject("Pod", pod.name, pod.namespace, pod.uid)
            self._recorder.record(involved, reason, message, events.NORMAL)

    def unreserve(self, claim: ResourceClaim, uid: str) -> None:
        patch = {
            "metadata": {"uid": claim.uid},
            "status": {"reservedFor": [{"$patch": "delete", "uid": uid}]},
        }
        self._kube.patch_resource_claim_status(claim.namespace, claim.name, patch)
