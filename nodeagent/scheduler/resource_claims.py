"""Dynamic resource allocation's objects as the DynamicResources plugin reads them, and
the catalog that holds them with the allocations in flight.

Three kinds decide where a pod with ``spec.resourceClaims`` may go: its
ResourceClaims, the ResourceSlices drivers publish (the devices of a node, of a set of
nodes or of every node) and the DeviceClasses the claims' requests name. Each is kept as
the API served it (``raw``, what the allocator in :mod:`nodeagent.scheduler.dra` reads)
with the few facts the plugin itself needs read out once: a claim's requests' classes,
its allocation (the node selector and the devices it holds), its consumers, its owner.

:class:`ResourceCatalog` is what kube-scheduler's DRA manager is
(``pkg/scheduler/framework/plugins/dynamicresources/dra_manager.go``): the listers, the
claims' assume cache (``pkg/scheduler/util/assumecache``: a claim PreBind wrote is read
in its written version until the informer delivers one at least as new) and the
allocations in flight (``inFlightAllocations``: made at Reserve, not written yet).
:meth:`ResourceCatalog.devices_in_use` is ``allocatedDevices`` (kept current on every
change), those in flight included, so two pods scheduled back to back never get the same
device.
The catalog is shared by the scheduling loop and the binding threads, hence its lock.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api, claim_templates
from nodeagent.scheduler.dra import model

GROUP = "resource.k8s.io"
VERSION = "resource.k8s.io/v1"
FINALIZER = "resource.kubernetes.io/delete-protection"
"""The finalizer PreBind puts on a claim it allocates (``resourceapi.Finalizer``)."""
RESERVED_FOR_MAX = 256
"""``ResourceClaimReservedForMaxSize``: the API refuses more consumers than this."""

Consumer = model.ConsumerRef
DeviceClass = model.DeviceClass
ResourceSlice = model.ResourceSlice
parse_device_class = model.parse_device_class
parse_resource_slice = model.parse_resource_slice


def pod_consumer(pod: api.Pod) -> Consumer:
    return Consumer("pods", pod.name, pod.uid)


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    """A claim: the allocator's parsed value (``parsed``), the object as served (what a
    PUT sends back), and what the plugin reads out of it once."""

    parsed: model.ResourceClaim
    controller_uid: str = ""
    """The UID of the ``ownerReferences`` entry with ``controller: true``."""
    finalizers: tuple[str, ...] = ()
    devices: frozenset[model.DeviceID] = frozenset()
    """The devices the allocation holds exclusively (admin access and shared devices
    are not, ``foreachAllocatedDevice``)."""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def namespace(self) -> str:
        return self.parsed.namespace

    @property
    def name(self) -> str:
        return self.parsed.name

    @property
    def uid(self) -> str:
        return self.parsed.uid

    @property
    def resource_version(self) -> str:
        return self.parsed.resource_version

    @property
    def key(self) -> str:
        return f"{self.parsed.namespace}/{self.parsed.name}"

    @property
    def deleting(self) -> bool:
        return self.parsed.deletion_timestamp is not None

    @property
    def allocation(self) -> model.AllocationResult | None:
        return self.parsed.allocation

    @property
    def allocated(self) -> bool:
        return self.parsed.allocation is not None

    @property
    def node_selector(self) -> tuple[api.SelectorTerm, ...] | None:
        """The allocation's node selector terms; ``None``: any node (or unallocated)."""
        allocation = self.parsed.allocation
        if allocation is None or allocation.node_selector is None:
            return None
        return allocation.node_selector.terms

    @property
    def reserved_for(self) -> tuple[Consumer, ...]:
        return self.parsed.reserved_for

    def reserved_for_pod(self, pod: api.Pod) -> bool:
        """``IsReservedForPod``."""
        return any(c.resource == "pods" and c.uid == pod.uid for c in self.parsed.reserved_for)

    def can_be_reserved(self) -> bool:
        """``CanBeReserved`` (v1.36: no limit on sharing)."""
        return True


@dataclass(frozen=True, slots=True)
class ResourceObjects:
    """The three kinds as read from a cluster file."""

    claims: tuple[ResourceClaim, ...] = ()
    classes: tuple[DeviceClass, ...] = ()
    slices: tuple[ResourceSlice, ...] = ()
    templates: tuple[claim_templates.ClaimTemplate, ...] = ()
    """ResourceClaimTemplates (:mod:`~nodeagent.scheduler.claim_templates`)."""


def _exclusive(allocation: model.AllocationResult | None) -> frozenset[model.DeviceID]:
    if allocation is None:
        return frozenset()
    return frozenset(
        r.device_id for r in allocation.results if not r.admin_access and r.share_id is None
    )


def _shares(allocation: model.AllocationResult) -> bool:
    return any(r.share_id is not None and not r.admin_access for r in allocation.results)


def parse_resource_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    parsed = model.parse_resource_claim(obj)
    meta = obj.get("metadata") or {}
    controller = ""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            controller = str(ref.get("uid", ""))
    return ResourceClaim(
        parsed,
        controller,
        tuple(str(f) for f in meta.get("finalizers") or ()),
        _exclusive(parsed.allocation),
        obj,
    )


KINDS: Mapping[str, Callable[[Mapping[str, Any]], Any]] = {
    "ResourceClaim": parse_resource_claim,
    "DeviceClass": parse_device_class,
    "ResourceSlice": parse_resource_slice,
    "ResourceClaimTemplate": claim_templates.parse_claim_template,
}
"""The kinds a cluster file may carry for the plugin, and their readers."""


def read_objects(found: Mapping[str, Sequence[Any]]) -> ResourceObjects:
    """The parsed kinds of :data:`KINDS` (``found``: kind -> parsed objects)."""
    claims = tuple(found.get("ResourceClaim", ()))
    keys = [c.key for c in claims]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ConfigError(f"ResourceClaim {duplicates[0]}: listed twice", field="ResourceClaim")
    templates = tuple(found.get("ResourceClaimTemplate", ()))
    keys = [t.key for t in templates]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ConfigError(
            f"ResourceClaimTemplate {duplicates[0]}: listed twice", field="ResourceClaimTemplate"
        )
    return ResourceObjects(
        claims,
        tuple(found.get("DeviceClass", ())),
        tuple(found.get("ResourceSlice", ())),
        templates,
    )


# --- writing -------------------------------------------------------------------------------


def with_allocation(
    claim: ResourceClaim,
    allocation: model.AllocationResult | None,
    consumers: Iterable[Consumer] = (),
) -> ResourceClaim:
    """``claim`` as it reads once ``allocation`` (``None``: as is) and ``consumers`` are
    in its status (and, when allocated here, the finalizer on it)."""
    body = copy.deepcopy(dict(claim.raw))
    meta = body.setdefault("metadata", {})
    status = body.setdefault("status", {})
    if allocation is not None:
        status["allocation"] = model.allocation_to_api(allocation)
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            meta["finalizers"] = [*finalizers, FINALIZER]
    reserved = list(status.get("reservedFor") or [])
    for consumer in consumers:
        if all(r.get("uid") != consumer.uid for r in reserved):
            reserved.append(consumer.to_api())
    if reserved:
        status["reservedFor"] = reserved
    return parse_resource_claim(body)


def with_finalizer(claim: ResourceClaim) -> ResourceClaim:
    """``claim`` with the delete-protection finalizer (a normal update, before the status)."""
    body = copy.deepcopy(dict(claim.raw))
    meta = body.setdefault("metadata", {})
    meta["finalizers"] = [*(meta.get("finalizers") or []), FINALIZER]
    return parse_resource_claim(body)


def deallocated(claim: ResourceClaim) -> ResourceClaim:
    """PostFilter's deallocation: no allocation, no consumers, no device status."""
    body = copy.deepcopy(dict(claim.raw))
    status = body.setdefault("status", {})
    for key in ("allocation", "reservedFor", "devices"):
        status.pop(key, None)
    return parse_resource_claim(body)


class ClaimWriter(Protocol):
    """How the plugin writes claims (the live scheduler: through the API); each returns
    the claim as the API server stored it. A stale resourceVersion raises
    :class:`nodeagent.base.errors.Conflict`."""

    def get_claim(self, namespace: str, name: str) -> ResourceClaim: ...

    def update_claim(self, claim: ResourceClaim) -> ResourceClaim:
        """PUT the claim (metadata: the finalizer)."""
        ...

    def update_claim_status(self, claim: ResourceClaim) -> ResourceClaim:
        """PUT ``/status`` (allocation and reservedFor)."""
        ...

    def unreserve(self, claim: ResourceClaim, uid: str) -> None:
        """Remove consumer ``uid`` from ``status.reservedFor`` (a strategic merge patch:
        no need for the latest version)."""
        ...


def _later(candidate: str, than: str) -> bool:
    if candidate.isdigit() and than.isdigit():
        return int(candidate) > int(than)
    return candidate > than


# --- the catalog --------------------------------------------------------------------------


class ResourceCatalog:
    """Claims (with assumed versions and allocations in flight), slices and classes; see
    the module docstring."""

    def __init__(self, found: ResourceObjects | None = None) -> None:
        self._lock = threading.RLock()
        self._claims: dict[str, ResourceClaim] = {}
        self._assumed: dict[str, ResourceClaim] = {}
        self._in_flight: dict[str, ResourceClaim] = {}
        """By claim UID: allocated at Reserve, not written yet."""
        self._classes: dict[str, DeviceClass] = {}
        self._slices: dict[str, ResourceSlice] = {}
        self._devices: Counter[model.DeviceID] = Counter()
        """How many claims (their latest versions) hold each device."""
        self._shared: dict[str, model.AllocationResult] = {}
        """By claim key: allocations holding device shares (consumable capacity)."""
        self.generation = 0
        """Bumped by every change (the allocator's inputs are rebuilt when it moved)."""
        self.slice_generation = 0
        """Bumped by slice and class changes only."""
        self.templates = claim_templates.TemplateStore(found.templates if found else ())
        """ResourceClaimTemplates (the messages of pods waiting for their claims, and the
        planner's claims made from them)."""
        self.writer: ClaimWriter | None = None
        """Set by the live scheduler; ``None`` (the planner): PreBind commits to the
        catalog, there being no API to write to."""
        if found is not None:
            for claim in found.claims:
                self.set_claim(claim)
            for device_class in found.classes:
                self.set_class(device_class)
            for resource_slice in found.slices:
                self.set_slice(resource_slice)

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._claims or self._slices or self._classes)

    # --- reading ---------------------------------------------------------------------------
    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        key = f"{namespace}/{name}"
        with self._lock:
            return self._assumed.get(key) or self._claims.get(key)

    def api_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        with self._lock:
            return self._claims.get(f"{namespace}/{name}")

    def device_class(self, name: str) -> DeviceClass | None:
        with self._lock:
            return self._classes.get(name)

    def classes(self) -> list[DeviceClass]:
        with self._lock:
            return list(self._classes.values())

    def slices(self) -> list[ResourceSlice]:
        with self._lock:
            return list(self._slices.values())

    def claims(self) -> list[ResourceClaim]:
        with self._lock:
            return [self._assumed.get(k, c) for k, c in self._claims.items()]

    def pending(self, uid: str) -> ResourceClaim | None:
        """The allocation in flight for claim ``uid`` (``GetPendingAllocation``)."""
        with self._lock:
            return self._in_flight.get(uid)

    def shared_allocations(self) -> list[model.AllocationResult]:
        """The allocations holding shares of devices (consumable capacity), allocated or
        in flight: few, if any (the dedicated devices are :meth:`devices_in_use`)."""
        with self._lock:
            found = list(self._shared.values())
            found.extend(
                c.allocation
                for c in self._in_flight.values()
                if c.allocation is not None and _shares(c.allocation)
            )
            return found

    def devices_in_use(self) -> frozenset[model.DeviceID]:
        """The devices held exclusively by a claim's allocation or one in flight (kept
        current on every change, as ``allocatedDevices`` is: no walk over the claims)."""
        with self._lock:
            found = set(self._devices)
            for claim in self._in_flight.values():
                found.update(claim.devices)
            return frozenset(found)

    # --- allocations in flight, assumptions -------------------------------------------------
    def signal_pending(self, claim: ResourceClaim) -> bool:
        """Reserve: ``claim`` (with its allocation) is in flight. False if another one
        already is (``SignalClaimPendingAllocation``)."""
        with self._lock:
            if claim.uid in self._in_flight:
                return False
            self._in_flight[claim.uid] = claim
            self.generation += 1
            return True

    def remove_pending(self, uid: str) -> bool:
        with self._lock:
            if self._in_flight.pop(uid, None) is None:
                return False
            self.generation += 1
            return True

    def assume(self, claim: ResourceClaim) -> None:
        """The claim as PreBind wrote it, until the informer catches up
        (``AssumeClaimAfterAPICall``); an older version than the informer's is ignored."""
        with self._lock:
            current = self._claims.get(claim.key)
            if current is not None and not _later(claim.resource_version, current.resource_version):
                return
            self._swap(claim.key, self._assumed.get(claim.key) or current, claim)
            self._assumed[claim.key] = claim

    def restore(self, key: str) -> None:
        """Drop the assumed version (``AssumedClaimRestore``)."""
        with self._lock:
            assumed = self._assumed.pop(key, None)
            if assumed is not None:
                self._swap(key, assumed, self._claims.get(key))

    def commit(self, claim: ResourceClaim) -> None:
        """Offline: make ``claim`` the truth (the planner has no API to confirm it)."""
        with self._lock:
            self._in_flight.pop(claim.uid, None)
            self._assumed.pop(claim.key, None)
            self._swap(claim.key, self._claims.get(claim.key), claim)
            self._claims[claim.key] = claim

    def _swap(self, key: str, old: ResourceClaim | None, new: ResourceClaim | None) -> None:
        """The claim ``key`` read as ``new`` instead of ``old``: the devices in use follow."""
        devices = self._devices
        if old is not None:
            for device in old.devices:
                left = devices[device] - 1
                if left > 0:
                    devices[device] = left
                else:
                    del devices[device]
            self._shared.pop(key, None)
        if new is not None:
            for device in new.devices:
                devices[device] += 1
            if new.allocation is not None and _shares(new.allocation):
                self._shared[key] = new.allocation
        self.generation += 1

    # --- informer updates ------------------------------------------------------------------
    def set_claim(self, claim: ResourceClaim, *, present: bool = True) -> None:
        with self._lock:
            key = claim.key
            before = self._assumed.get(key) or self._claims.get(key)
            assumed = self._assumed.get(key)
            if not present:
                self._claims.pop(key, None)
                self._assumed.pop(key, None)
                self._swap(key, before, None)
                return
            self._claims[key] = claim
            if assumed is not None and (
                assumed.uid != claim.uid
                or not _later(assumed.resource_version, claim.resource_version)
            ):
                del self._assumed[key]  # the API caught up with (or moved past) what we wrote
            self._swap(key, before, self._assumed.get(key) or claim)

    def set_class(self, device_class: DeviceClass, *, present: bool = True) -> None:
        with self._lock:
            if present:
                self._classes[device_class.name] = device_class
            else:
                self._classes.pop(device_class.name, None)
            self.generation += 1
            self.slice_generation += 1

    def set_slice(self, resource_slice: ResourceSlice, *, present: bool = True) -> None:
        with self._lock:
            if present:
                self._slices[resource_slice.name] = resource_slice
            else:
                self._slices.pop(resource_slice.name, None)
            self.generation += 1
            self.slice_generation += 1
