"""The live scheduler's dynamic resource allocation: the informers feeding the
resource catalog, the cluster events they raise, and the writer DynamicResources writes
claims through.

kube-scheduler reads ResourceSlices, DeviceClasses and ResourceClaims from shared
informers (claims through its assume cache); here one informer per kind keeps the
:class:`~nodeagent.scheduler.resource_claims.ResourceCatalog` current (an object the
scheduler cannot read is logged and skipped, as for pods and nodes). Adds and updates
are cluster events, delivered with the old and new objects for the plugin's queueing
hints. A claim's deletion is no event (upstream registers Add and Update only), nor is
a slice's or a class's.

A pod's claim made from a template is found by the name the resourceclaim controller
writes to ``status.resourceClaimStatuses``, as kube-scheduler finds it. ResourceClaimTemplates
are watched as well, which kube-scheduler does not do (its ClusterRole cannot read them):
only to say why a pod waits for its claim (:mod:`nodeagent.scheduler.claim_templates`).
That informer is an addition the scheduler never waits for: until it has listed (a role
without ``list``/``watch`` on them keeps it retrying, slowly), the reason is
kube-scheduler's own.

:class:`APIClaimWriter` is the API side of PreBind, PostFilter and Unreserve. Beside a
binding process its PUTs and POSTs of claims go out from there (:class:`ClaimWrites`):
PreBind writes each claim twice per pod, and over TLS from the scheduler's interpreter
those writes were a quarter of its CPU in scheduler_perf's claim-template shapes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from nodeagent.base import errors
from nodeagent.kube import client, events, informer, retry, writes
from nodeagent.scheduler import api, claim_templates, resource_claims
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


TEMPLATE_BACKOFF = retry.RetryPolicy(initial_delay=5.0, max_delay=300.0)
"""The template informer's waits between failed lists: a role without the permission
is an expected setup (kube-scheduler's), not worth a warning every 30 s."""


class ResourceInformers(informer.InformerGroup):
    """One informer per kind the plugin reads, each writing to ``catalog`` and reporting
    its adds and updates to ``on_event`` (with the old and new parsed objects); and the
    ResourceClaimTemplates' (:attr:`templates`), outside the group's sync."""

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
                for kind in _WIRING
            ]
        )
        self.templates = informer.Informer(
            _list_watch(kube, Kind.RESOURCE_CLAIM_TEMPLATES),
            self._template_handlers(),
            watch_timeout=watch_timeout,
            backoff=TEMPLATE_BACKOFF,
            name=f"{Kind.RESOURCE_CLAIM_TEMPLATES.value}-informer",
        )

    def start(self) -> None:
        super().start()
        self.templates.start()

    def stop(self, timeout: float) -> None:
        super().stop(timeout)
        self.templates.stop(timeout)

    def _template_handlers(self) -> informer.Handlers:
        store = self._catalog.templates

        def read(obj: client.KubeObject) -> claim_templates.ClaimTemplate | None:
            try:
                return claim_templates.parse_claim_template(obj)
            except errors.ConfigError as exc:
                log.warning("ignoring a resourceclaimtemplate the scheduler cannot read: %s", exc)
                return None

        def added(obj: client.KubeObject) -> None:
            if (template := read(obj)) is not None:
                store.set(template)
            else:  # an unreadable version is no template (nor is the one before it)
                deleted(obj)

        def updated(old: client.KubeObject, new: client.KubeObject) -> None:
            added(new)

        def deleted(obj: client.KubeObject) -> None:
            meta = obj.get("metadata") or {}
            store.discard(str(meta.get("namespace") or ""), str(meta.get("name") or ""))

        def synced() -> None:
            store.tracked = True

        return informer.Handlers(added, updated, deleted, synced)

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
        value = self._written(obj) if kind is Kind.RESOURCE_CLAIMS else None
        if value is None:
            value = _read(kind, obj)
        if value is None:
            return
        wiring = _WIRING[kind]
        before = None if old is None else self._parsed(kind, old, value)
        wiring.store(self._catalog, value, True)
        self._on_event(wiring.added if old is None else wiring.updated, before, value)

    def _written(self, obj: client.KubeObject) -> ResourceClaim | None:
        """The claim ``obj`` is, when the catalog already read that very version: the
        one PreBind wrote and assumed (its PUT's answer, parsed then), which the watch
        now echoes. Same resourceVersion and UID, same object: not parsed again."""
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            return None
        known = self._catalog.claim(str(meta.get("namespace", "")), str(meta.get("name", "")))
        version = meta.get("resourceVersion")
        if (
            known is None
            or not version
            or known.resource_version != version
            or known.uid != meta.get("uid")
        ):
            return None
        return dataclasses.replace(known, raw=obj)

    def _parsed(self, kind: client.ResourceKind, old: client.KubeObject, new: Any) -> Any:
        """``old`` parsed: for a claim, the catalog's reading of that very object when it
        holds it (each claim the scheduler writes comes back twice a pod: the parse
        was paid when ``old`` arrived)."""
        if isinstance(new, ResourceClaim):
            known = self._catalog.api_claim(new.namespace, new.name)
            if known is not None and known.raw is old:
                return known
        return _read(kind, old)


def may_wait_for(claim: object) -> Callable[[api.Pod], bool] | None:
    """Which pods held at PreEnqueue may be waiting for ``claim`` (added): its owner (a
    claim made from a template) and those naming it (``None``, every pod: not a claim)."""
    if not isinstance(claim, ResourceClaim):
        return None
    namespace, name, owner = claim.namespace, claim.name, claim.controller_uid

    def waits(pod: api.Pod) -> bool:
        if pod.namespace != namespace:
            return False
        if pod.uid == owner:
            return True
        return any(e.claim_name == name for e in pod.resource_claims) or (
            name in pod.claim_statuses.values()
        )

    return waits


def _list_watch(kube: client.ClusterClient, kind: client.ResourceKind) -> informer.ListWatch:
    return informer.ListWatch(
        kind.value,
        lambda: kube.list_resources(kind),
        lambda rv, timeout: kube.watch_resources(
            kind, resource_version=rv, timeout_seconds=timeout
        ),
    )


class ClaimWrites(Protocol):
    """Where the claims' PUTs and POSTs go instead of the client
    (:class:`~nodeagent.scheduler.live.bind_process.ProcessBinder` is one): the stored
    object's JSON, or the client's error for the answer."""

    def write(
        self, method: str, path: str, body: bytes, *, verb: str, resource: str, what: str
    ) -> bytes: ...


class APIClaimWriter:
    """:class:`~nodeagent.scheduler.resource_claims.ClaimWriter` over the API; with
    ``writes``, its claim replacements and creations go through that."""

    def __init__(
        self,
        kube: client.ClusterClient,
        recorder: events.EventRecorder | None = None,
        writes: ClaimWrites | None = None,
    ) -> None:
        self._kube = kube
        self._recorder = recorder
        self._writes = writes

    def get_claim(self, namespace: str, name: str) -> ResourceClaim:
        return resource_claims.parse_resource_claim(self._kube.get_resource_claim(namespace, name))

    def update_claim(self, claim: ResourceClaim) -> ResourceClaim:
        return self._replace(claim, status=False)

    def update_claim_status(self, claim: ResourceClaim) -> ResourceClaim:
        return self._replace(claim, status=True)

    def _replace(self, claim: ResourceClaim, *, status: bool) -> ResourceClaim:
        namespace, name = claim.namespace, claim.name
        if self._writes is None:
            stored = self._kube.replace_resource_claim(namespace, name, claim.raw, status=status)
            return resource_claims.parse_resource_claim(stored)
        # the same request, verb and resource names as the client's replace_resource_claim
        resource = "resourceclaims/status" if status else "resourceclaims"
        return _stored(
            self._writes.write(
                "PUT",
                writes.resource_claim_path(namespace, name, status=status),
                msgspec.json.encode(claim.raw),
                verb="update",
                resource=resource,
                what=f"replace {resource} {namespace}/{name}",
            )
        )

    def create_claim(self, body: Mapping[str, Any]) -> ResourceClaim:
        namespace = str(body["metadata"]["namespace"])
        if self._writes is None:
            return resource_claims.parse_resource_claim(
                self._kube.create_resource_claim(namespace, body)
            )
        return _stored(
            self._writes.write(
                "POST",
                writes.resource_claims_path(namespace),
                msgspec.json.encode(body),
                verb="create",
                resource="resourceclaims",
                what=f"create resourceclaim in {namespace}",
            )
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


def _stored(answer: bytes) -> ResourceClaim:
    """The claim the API server answered a write with."""
    document = msgspec.json.decode(answer)
    if not isinstance(document, dict):
        raise errors.KubeAPIError(f"a claim write was answered with a {type(document).__name__}")
    return resource_claims.parse_resource_claim(document)
