"""DynamicResources (PreEnqueue, PreFilter, Filter, PostFilter, Score, Reserve, Unreserve,
PreBind): a pod's ResourceClaims and the devices allocated to them.

kube-scheduler's ``dynamicresources`` plugin with structured parameters:

* **PreEnqueue** holds back a pod whose claims are not all there: a claim named by the
  pod that does not exist, one made from a template that the resourceclaim controller
  has not created yet (its name is not in ``status.resourceClaimStatuses``), one being
  deleted, or a generated one the pod does not own.
* **PreFilter** reads the claims (the same checks), refuses a pod whose claim is being
  allocated for another pod right now, or whose requests name a DeviceClass that does
  not exist; with claims to allocate it builds the allocator (:mod:`nodeagent.scheduler.dra`)
  over the slices, the classes and every device in use: allocated or in flight.
* **Filter**, per node: an allocated claim's node selector must accept the node; the
  claims to allocate must all get devices there (the allocation is remembered for
  Reserve). Every rejection is UnschedulableAndUnresolvable, as upstream.
* **PostFilter**, when no node fits: an allocated claim that blocked the pod and that no
  other pod uses is deallocated (its status cleared through the API), so the next
  attempt may allocate it anew; it never nominates.
* **Score** (``DRAPrioritizedList``, GA): nodes where a ``firstAvailable`` request got an
  earlier subrequest score higher.
* **Reserve** puts the node's allocations in flight in the
  :class:`~nodeagent.scheduler.resource_claims.ResourceCatalog`, so the next pod's cycle
  sees those devices taken; **Unreserve** takes them back, and removes the pod from the
  ``reservedFor`` of a claim PreBind had already reserved.
* **PreBind**, before the Binding: each claim not reserved for the pod yet gets the
  finalizer, then its allocation and the pod in ``status.reservedFor``, in one status
  update (retried on conflict with the latest claim, as ``bindClaim``). The written claim
  is assumed until the informer delivers it. Offline (the planner) the claim is
  committed to the catalog.

Every message is kube-scheduler's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from pydantic import field_validator

from nodeagent.base import durations, errors
from nodeagent.k8s import quantities
from nodeagent.scheduler import api, claim_templates, config, resource_claims
from nodeagent.scheduler.dra import allocator, model
from nodeagent.scheduler.framework import (
    ClusterEvent,
    CycleState,
    Diagnosis,
    EventHint,
    Framework,
    Handle,
    PluginError,
    PostFilterResult,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.plugins import helpers, node_affinity
from nodeagent.scheduler.resource_claims import BindingOutcome, ResourceCatalog, ResourceClaim
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices

NAME = "DynamicResources"
log = logging.getLogger(__name__)

REASON_NOT_AVAILABLE = "resourceclaim not available on the node"
REASON_IN_USE = "resourceclaim in use"
REASON_CANNOT_ALLOCATE = "cannot allocate all claims"
FIRST_AVAILABLE_MAX = 8
"""``FirstAvailableDeviceRequestMaxSize``: Score counts down from it."""
CONFLICT_RETRIES = 5
"""``retry.DefaultRetry``'s steps: PreBind's status update retried on a conflict."""
_STATE = "DynamicResources"


class Args(config.ConfigModel):
    """``DynamicResourcesArgs``: Go durations (``10s``)."""

    filter_timeout: str = "10s"
    """How long one node's allocation may take (``0s``: no limit)."""
    binding_timeout: str = "10m0s"
    """How long PreBind waits for the devices' binding conditions (and after which
    Filter gives up on a claim still waiting for them); at least one second."""

    @field_validator("filter_timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        seconds = durations.parse_go_duration(value)
        if seconds < 0:
            raise ValueError(f"{value!r}: must not be negative")
        return value

    @field_validator("binding_timeout")
    @classmethod
    def _binding(cls, value: str) -> str:
        if durations.parse_go_duration(value) < 1:
            raise ValueError(f"{value!r}: must be at least 1 second")
        return value

    @property
    def filter_seconds(self) -> float:
        return durations.parse_go_duration(self.filter_timeout)

    @property
    def binding_seconds(self) -> float:
        return durations.parse_go_duration(self.binding_timeout)


class NodeAllocator(Protocol):
    """What Filter asks on each node (:class:`nodeagent.scheduler.dra.allocator.Allocator`)."""

    def allocate(
        self,
        node: api.Node,
        claims: Sequence[model.ResourceClaim],
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> allocator.Outcome: ...


AllocatorFactory = Callable[[ResourceCatalog], NodeAllocator]


class _Inputs:
    """The allocator's inputs built from the catalog, rebuilt only when it changed: the
    inventory (pools and selector verdicts, shared by every pod until a slice or class
    changes) and the devices in use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inventory: tuple[int, allocator.Inventory] | None = None
        self._in_use: tuple[int, allocator.InUse] | None = None

    def allocator(self, catalog: ResourceCatalog) -> NodeAllocator:
        with self._lock:
            generation = catalog.slice_generation
            if self._inventory is None:
                self._inventory = (generation, allocator.Inventory(catalog.slices()))
            elif self._inventory[0] != generation:  # unchanged nodes keep their pools
                self._inventory = (generation, self._inventory[1].updated(catalog.slices()))
            generation = catalog.generation
            if self._in_use is None or self._in_use[0] != generation:
                dedicated = catalog.devices_in_use()
                used = allocator.InUse(dedicated)
                shared = catalog.shared_allocations()
                if shared:  # consumable capacity: the shares and what they consume
                    found = allocator.in_use_from_allocations(shared)
                    used = dataclasses.replace(found, devices=found.devices | dedicated)
                self._in_use = (generation, used)
            return allocator.Allocator(
                {c.name: c for c in catalog.classes()}, self._inventory[1], self._in_use[1]
            )


def _unresolvable(*reasons: str) -> api.Status:
    return api.unschedulable(*reasons, unresolvable=True)


@dataclass(frozen=True, slots=True)
class _Variant:
    """The extended-resource claim as one node needs it: its requests (for the resources
    that node leaves to DRA) and the pod status's container -> request mappings."""

    claim: ResourceClaim
    mappings: tuple[Mapping[str, str], ...]


@dataclass(slots=True)
class _Extended:
    """A pod's extended resources backed by DRA (``DRAExtendedResource``)."""

    index: int
    """Of its claim in ``_State.claims``: the in-memory one, or one a former attempt
    created."""
    resources: dict[str, int]
    """The pod's requests of DRA-nameable extended resources."""
    pod: api.Pod
    pending_uid: str
    """The in-memory claim's UID: its allocation in flight is filed under it."""
    variants: dict[frozenset[str], _Variant] = field(default_factory=dict)
    """By the set of resources a node leaves to DRA (nodes share a few)."""
    by_node: dict[str, _Variant] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Found:
    """What the allocator found on one node. The results are built when read (Reserve
    reads the chosen node's, Score each node's only for ``firstAvailable`` requests)."""

    outcome: allocator.Outcome | None
    """None: only the extended-resource claim, which this node does not need."""
    skipped: int = -1
    """The index in ``to_allocate``'s claims left out of the allocation (the
    extended-resource claim, not needed on this node), or -1."""

    def allocations(self, to_allocate: Sequence[int]) -> list[model.AllocationResult | None]:
        """Aligned with ``to_allocate`` (``None``: the extended-resource claim, not
        needed there: the node's device plugin has those resources)."""
        if self.outcome is None:
            return [None]
        results = iter(self.outcome.allocations)
        return [None if i == self.skipped else next(results) for i in to_allocate]


def _wanted(found: _State, variant: _Variant | None) -> tuple[list[model.ResourceClaim], int]:
    """The claims the allocator is asked for on a node (the extended-resource claim in
    the node's ``variant``, or left out when the node needs none), and the index in
    ``to_allocate``'s claims left out (-1: none)."""
    extended = found.extended
    skipped = -1 if extended is None or variant is not None else extended.index
    wanted = [
        variant.claim.parsed
        if variant is not None and extended is not None and i == extended.index
        else found.seen[i].parsed
        for i in found.to_allocate
        if i != skipped
    ]
    return wanted, skipped


@dataclass(slots=True)
class _State:
    claims: list[ResourceClaim]
    """The pod's claims (PreBind puts the versions it wrote in their place)."""
    seen: tuple[ResourceClaim, ...] = ()
    """The claims as PreFilter read them: what Filter judges (``--explain`` asks Filter
    about the other nodes after PreBind wrote)."""
    to_allocate: list[int] = field(default_factory=list)
    """Indices into ``claims`` of those the scheduler allocates."""
    allocator: NodeAllocator | None = None
    passed: dict[str, api.Node] = field(default_factory=dict)
    """The nodes on which the allocator found the claims' devices (by name)."""
    by_node: dict[str, _Found] = field(default_factory=dict)
    """What the allocator found on each of :attr:`passed`, kept only when Score reads it
    (``firstAvailable`` requests, :attr:`prioritized`). Reserve asks the allocator
    again for the one node chosen otherwise: the same search on the same inputs (the
    cycle's allocator, its devices in use as PreFilter read them) finds the same
    devices, and Filter keeps nothing per node but the node (scheduler_perf's
    claim-template shapes: what Filter kept alive per node until the cycle ended made
    the collector's work a sixth of the plugin's)."""
    constrained: tuple[int, ...] = ()
    """The claims Filter checks on each node before any allocation: allocated ones
    (their node selector) and those whose binding conditions failed."""
    wanted: tuple[list[model.ResourceClaim], int] = ([], -1)
    """What the allocator is asked for on a node that needs no extended-resource
    variant (:func:`_wanted`): the same for every such node, made once."""
    prioritized: bool = False
    """Some request of the claims is a ``firstAvailable`` list (Score reads the
    subrequest each node's allocation chose)."""
    unavailable: set[int] = field(default_factory=set)
    binding_blocked: frozenset[int] = frozenset()
    """Allocated claims whose binding conditions failed or timed out: unavailable on
    every node, for PostFilter to deallocate."""
    extended: _Extended | None = None
    allocations: dict[int, model.AllocationResult] = field(default_factory=dict)
    """Set by Reserve: what PreBind writes."""
    verdict: api.Status | None = None
    """What PreFilter answered (a preemption dry run answers the same)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def claim_name(pod: api.Pod, entry: api.PodResourceClaim) -> tuple[str | None, bool, str]:
    """``resourceclaim.Name``: (the claim's name, ``None`` when none is needed; whether
    the pod must own it; the error)."""
    if entry.claim_name:
        return entry.claim_name, False, ""
    if entry.template_name:
        if entry.name in pod.claim_statuses:
            return pod.claim_statuses[entry.name], True, ""
        return None, False, f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet'
    return (
        None,
        False,
        f'pod "{pod.namespace}/{pod.name}", spec.resourceClaim "{entry.name}": none of the'
        " supported fields are set",
    )


def pod_claims(pod: api.Pod, catalog: ResourceCatalog) -> tuple[list[ResourceClaim], str]:
    """``foreachPodResourceClaim``: the pod's claims, or why they are not all usable."""
    found: list[ResourceClaim] = []
    for entry in pod.resource_claims:
        name, must_own, error = claim_name(pod, entry)
        if error and entry.template_name:  # what the template says about the wait
            return [], claim_templates.not_created_reason(pod, entry, catalog.templates)
        if error:
            return [], error
        if name is None:
            continue
        claim = catalog.claim(pod.namespace, name)
        if claim is None:
            return [], f'could not find ResourceClaim "{pod.namespace}/{name}"'
        if claim.deleting:
            return [], f'resourceclaim "{claim.name}" is being deleted'
        if must_own and claim.controller_uid != pod.uid:
            return [], (
                f"ResourceClaim {claim.namespace}/{claim.name} was not created for Pod"
                f" {pod.namespace}/{pod.name} (Pod is not owner)"
            )
        found.append(claim)
    return found, ""


class DynamicResources:
    name = NAME

    def __init__(
        self, args: Args, handle: Handle, allocator_factory: AllocatorFactory | None = None
    ) -> None:
        self._filter_timeout = args.filter_seconds
        self._binding_timeout = args.binding_seconds
        self._catalog = handle.resources
        self._new_allocator = allocator_factory or _Inputs().allocator
        self._rng = handle.rng

    # --- queueing --------------------------------------------------------------------------
    def events_to_register(self) -> Sequence[EventHint]:
        """kube-scheduler's EventsToRegister with QueueingHints on: node add, label and
        allocatable changes; claim add/update (hinted); the pod's generated claims
        appearing in its status (hinted); class and slice add/update."""
        e = ClusterEvent
        return (
            EventHint(frozenset({e.NODE_ADD, e.NODE_LABEL_CHANGE, e.NODE_ALLOCATABLE_CHANGE})),
            EventHint(
                frozenset({e.RESOURCE_CLAIM_ADD, e.RESOURCE_CLAIM_UPDATE}),
                self.after_claim_change,
            ),
            EventHint(
                frozenset({e.UNSCHEDULED_POD_GENERATED_RESOURCE_CLAIM}), self.after_pod_change
            ),
            EventHint(
                frozenset(
                    {
                        e.DEVICE_CLASS_ADD,
                        e.DEVICE_CLASS_UPDATE,
                        e.RESOURCE_SLICE_ADD,
                        e.RESOURCE_SLICE_UPDATE,
                    }
                )
            ),
        )

    def after_claim_change(self, pod: api.Pod, old: object, new: object) -> QueueingHint:
        """``isSchedulableAfterClaimChange``."""
        if new is None:
            return QueueingHint.QUEUE_SKIP  # a deletion frees nothing (not registered)
        if not isinstance(new, ResourceClaim) or not isinstance(old, ResourceClaim | None):
            raise TypeError("unexpected object in isSchedulableAfterClaimChange")
        claims, error = pod_claims(pod, self._catalog)
        if error:
            return QueueingHint.QUEUE_SKIP
        if old is not None and old.allocated and not new.allocated:
            return QueueingHint.QUEUE  # deallocated: its devices are free
        if all(claim.uid != new.uid for claim in claims):
            return QueueingHint.QUEUE_SKIP
        if old is None:
            return QueueingHint.QUEUE
        if old.raw.get("status") == new.raw.get("status"):
            return QueueingHint.QUEUE_SKIP  # a finalizer or label: not what the pod waits for
        return QueueingHint.QUEUE

    def after_pod_change(self, pod: api.Pod, old: object, new: object) -> QueueingHint:
        """``isSchedulableAfterPodChange``."""
        if not isinstance(new, api.Pod) or new.uid != pod.uid:
            return QueueingHint.QUEUE_SKIP
        _, error = pod_claims(new, self._catalog)
        return QueueingHint.QUEUE_SKIP if error else QueueingHint.QUEUE

    # --- PreEnqueue, PreFilter ---------------------------------------------------------------
    def pre_enqueue(self, pod: api.Pod) -> api.Status:
        if not pod.resource_claims:
            return api.SUCCESS
        _, error = pod_claims(pod, self._catalog)
        return _unresolvable(error) if error else api.SUCCESS

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        earlier = None if state.cycle is None else state.cycle.read(_STATE, _State)
        if earlier is not None and earlier.verdict is not None:
            # a preemption dry run judges the claims as the failed cycle read them, as
            # upstream's dry run shares the cycle's stateData: PostFilter may have just
            # deallocated one (the next cycle, not this one, sees it free)
            state.write(_STATE, earlier)
            return None, earlier.verdict
        status = self._read_claims(state, pod)
        self._state(state).verdict = status
        return None, status

    def _read_claims(self, state: CycleState, pod: api.Pod) -> api.Status:
        # the claims are recorded only once PreFilter passes (PostFilter reads them)
        found = _State([])
        state.write(_STATE, found)
        claims, error = pod_claims(pod, self._catalog) if pod.resource_claims else ([], "")
        if error:
            return _unresolvable(error)
        extended = self._extended_resources(pod)
        if extended is not None:
            claim = self._catalog.extended_claim(pod) or resource_claims.parse_resource_claim(
                resource_claims.extended_claim_body(pod)
            )
            found.extended = _Extended(len(claims), extended, pod, claim.uid)
            claims.append(claim)
        if not claims:
            return api.SKIP
        to_allocate = []
        blocked = set()
        now = self._catalog.now()
        for index, claim in enumerate(claims):
            if claim.allocated:
                if not claim.can_be_reserved() and not claim.reserved_for_pod(pod):
                    return _unresolvable(REASON_IN_USE)
                ready, failure = resource_claims.binding_readiness(claim)
                if failure or (
                    not ready
                    and resource_claims.binding_timed_out(claim, self._binding_timeout, now)
                ):
                    blocked.add(index)  # Filter's binding-condition check, done once
                continue
            to_allocate.append(index)
            if self._catalog.pending(claim.uid) is not None:
                return _unresolvable(
                    f"resource claim {claim.key} is in the process of being allocated"
                )
            if found.extended is not None and index == found.extended.index:
                continue  # its requests are a node's, made by Filter
            status = self._check_classes(claim)
            if not status.is_success:
                return status
        if to_allocate:
            found.allocator = self._new_allocator(self._catalog)
        found.claims, found.to_allocate, found.seen = claims, to_allocate, tuple(claims)
        found.prioritized = self._prioritized(found)
        found.binding_blocked = frozenset(blocked)
        found.constrained = tuple(
            i for i, claim in enumerate(claims) if i in blocked or claim.node_selector is not None
        )
        found.wanted = _wanted(found, None)
        return api.SUCCESS

    def _extended_resources(self, pod: api.Pod) -> dict[str, int] | None:
        """``preFilterExtendedResources``: the pod's DRA-nameable extended resources,
        when a DeviceClass maps any of them (else ``None``: NodeResourcesFit has them)."""
        mapped = self._catalog.extended_resources()
        if not mapped or not any(mapped.get(n) for n, a in pod.requests.items() if a > 0):
            return None
        return {
            name: amount
            for name, amount in pod.requests.items()
            if amount > 0 and resource_claims.is_dra_extended_resource_name(name)
        }

    def _check_classes(self, claim: ResourceClaim) -> api.Status:
        """``validateDeviceClass`` for each request (and each subrequest)."""
        for request in claim.parsed.spec.requests:
            if request.exactly is not None:
                specs: Sequence[model.RequestSpec] = (request.exactly,)
                names = [request.name]
            elif request.first_available:
                specs = request.first_available
                names = [f"{request.name}/{sub.name}" for sub in specs]
            else:
                return _unresolvable(
                    f"resource claim {claim.key}, request {request.name}: unknown request type"
                )
            for spec, name in zip(specs, names, strict=True):
                if not spec.device_class_name:
                    return api.error(f"request {name}: unsupported request type")
                if self._catalog.device_class(spec.device_class_name) is None:
                    return _unresolvable(
                        f"request {name}: device class {spec.device_class_name} does not exist"
                    )
        return api.SUCCESS

    # --- Filter ------------------------------------------------------------------------------
    def _state(self, state: CycleState) -> _State:
        found = state.read(_STATE, _State)
        if found is None:
            raise PluginError("DynamicResources: no PreFilter state")
        return found

    def check(self, found: _State, node: api.Node) -> api.Status:
        """Filter on one node (the allocation, if any, is remembered for Reserve)."""
        extended = found.extended
        variant: _Variant | None = None
        if extended is not None:
            status, variant = self._extended_on(found, extended, node)
            if not status.is_success:
                return status
            if variant is None and len(found.seen) == 1:
                return api.SUCCESS  # no claim of its own; the device plugin has the rest
        unavailable = found.constrained and [
            index
            for index in found.constrained
            if index in found.binding_blocked
            or (
                (selector := found.seen[index].node_selector) is not None
                and not node_affinity.required_matches(selector, node)
            )
        ]
        if unavailable:
            with found.lock:
                found.unavailable.update(unavailable)
            return _unresolvable(REASON_NOT_AVAILABLE)
        if found.allocator is None:
            return api.SUCCESS
        wanted, skipped = found.wanted if variant is None else _wanted(found, variant)
        if not wanted:  # only the extended-resource claim, not needed on this node
            with found.lock:
                found.passed[node.name] = node
                if extended is not None and variant is not None:
                    extended.by_node[node.name] = variant
            return api.SUCCESS
        should_stop = None
        if self._filter_timeout:
            deadline = time.monotonic() + self._filter_timeout
            should_stop = lambda: time.monotonic() > deadline  # noqa: E731
        outcome = found.allocator.allocate(node, wanted, should_stop=should_stop)
        if outcome.verdict is allocator.Verdict.ERROR:
            # a broken claim or class, or the filter timeout: an Error backs the pod off
            # (upstream: "node X: timed out trying to allocate devices" for the latter)
            if should_stop is not None and should_stop():
                return api.error(f"node {node.name}: timed out trying to allocate devices")
            return api.error(outcome.reason)
        if not outcome.ok:
            return _unresolvable(outcome.reason or REASON_CANNOT_ALLOCATE)
        if outcome.count != len(wanted):
            return _unresolvable(REASON_CANNOT_ALLOCATE)
        with found.lock:
            found.passed[node.name] = node
            if found.prioritized:
                found.by_node[node.name] = _Found(outcome, skipped)
            if extended is not None and variant is not None:
                extended.by_node[node.name] = variant
        return api.SUCCESS

    @staticmethod
    def _found_on(found: _State, node_name: str) -> _Found | None:
        """What the allocator found on a node that passed Filter: kept, or asked for
        again (:attr:`_State.by_node`); ``None`` if the node did not pass."""
        kept = found.by_node.get(node_name)
        if kept is not None:
            return kept
        node = found.passed.get(node_name)
        if node is None or found.allocator is None:
            return None
        extended = found.extended
        variant = None if extended is None else extended.by_node.get(node_name)
        wanted, skipped = _wanted(found, variant)
        if not wanted:
            return _Found(None)
        outcome = found.allocator.allocate(node, wanted)
        if not outcome.ok or outcome.count != len(wanted):
            return None  # not what Filter found: Reserve fails, the pod is tried again
        return _Found(outcome, skipped)

    def _extended_on(
        self, found: _State, extended: _Extended, node: api.Node
    ) -> tuple[api.Status, _Variant | None]:
        """``filterExtendedResources``: the claim this node needs for the pod's extended
        resources it does not have in its allocatable (``None``: none, its device plugin
        has them all)."""
        claim = found.seen[extended.index]
        if claim.parsed.spec.requests:
            # made by a former attempt that did not bind: PostFilter deletes it
            return _unresolvable("cannot schedule extended resource claim"), None
        needed = []
        for name in sorted(extended.resources):
            allocatable = node.allocatable.get(name)
            if not allocatable and self._catalog.extended_resource_class(name) is not None:
                needed.append(name)
            elif allocatable is None:
                return _unresolvable("cannot fit resource"), None
        if not needed or claim.allocated:
            return api.SUCCESS, None
        key = frozenset(needed)
        with found.lock:
            variant = extended.variants.get(key)
        if variant is None:
            requests, mappings = extended_requests(
                extended.pod, {n: extended.resources[n] for n in needed}, self._class_name
            )
            variant = _Variant(resource_claims.with_requests(claim, requests), tuple(mappings))
            with found.lock:
                extended.variants[key] = variant
        return api.SUCCESS, variant

    def _class_name(self, resource: str) -> str | None:
        device_class = self._catalog.extended_resource_class(resource)
        return None if device_class is None else device_class.name

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        found = self._state(state)
        out = np.empty(len(nodes), dtype=bool)
        for i, index in enumerate(nodes.tolist()):
            out[i] = self.check(found, snapshot.nodes[index]).is_success
        return out

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        return self.check(self._state(state), snapshot.nodes[node])

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Every rejection of this plugin is UnschedulableAndUnresolvable."""
        return np.zeros(len(nodes), dtype=bool)

    # --- PostFilter ----------------------------------------------------------------------------
    def post_filter(
        self,
        state: CycleState,
        pod: api.Pod,
        snapshot: ClusterSnapshot,
        diagnosis: Diagnosis,
        framework: Framework,
    ) -> tuple[PostFilterResult | None, api.Status]:
        found = state.read(_STATE, _State)
        if found is None or not found.claims:
            return None, api.unschedulable("no new claims to deallocate")
        candidates = sorted(found.unavailable)
        self._rng.shuffle(candidates)  # upstream picks one at random: no better heuristic
        extended = found.extended
        for index in candidates:
            if extended is not None and index == extended.index:
                continue  # deleted below, not deallocated
            claim = found.claims[index]
            consumers = claim.reserved_for
            if not consumers or (len(consumers) == 1 and consumers[0].uid == pod.uid):
                status = self._deallocate(claim)
                if not status.is_success:
                    return None, status
                return None, api.unschedulable("deallocation of ResourceClaim completed")
        if extended is not None:
            claim = found.claims[extended.index]
            if claim.name != resource_claims.SPECIAL_CLAIM_NAME:
                # a former attempt's claim: delete it, the next attempt starts anew
                try:
                    self._delete_claim(claim)
                except errors.KubeAPIError as exc:
                    return None, api.error(str(exc))
                return None, api.unschedulable("deletion of ResourceClaim completed")
        return None, api.unschedulable("still not schedulable")

    def _delete_claim(self, claim: ResourceClaim) -> None:
        """``deleteClaim``: drop the finalizer (retried on a conflict with the latest
        claim), then delete."""
        writer = self._catalog.writer
        if writer is None:
            self._catalog.set_claim(claim, present=False)
            return
        # the latest version known (PreBind's own write, assumed), not the cycle's
        current = self._catalog.claim(claim.namespace, claim.name) or claim
        for attempt in range(CONFLICT_RETRIES):
            if attempt:
                current = writer.get_claim(claim.namespace, claim.name)
            if resource_claims.FINALIZER not in current.finalizers:
                break
            try:
                writer.update_claim(resource_claims.without_finalizer(current))
                break
            except errors.Conflict:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
        writer.delete_claim(current)

    def _deallocate(self, claim: ResourceClaim) -> api.Status:
        cleared = resource_claims.deallocated(claim)
        writer = self._catalog.writer
        if writer is None:
            self._catalog.commit(cleared)
            return api.SUCCESS
        try:
            self._catalog.assume(writer.update_claim_status(cleared))
        except errors.KubeAPIError as exc:
            return api.error(str(exc))
        return api.SUCCESS

    # --- Score ---------------------------------------------------------------------------------
    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        found = state.read(_STATE, _State)
        if found is None or not found.claims or not self._prioritized(found):
            return api.SKIP
        return api.SUCCESS

    @staticmethod
    def _prioritized(found: _State) -> bool:
        return any(r.first_available for c in found.claims for r in c.parsed.spec.requests)

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        found = self._state(state)
        return np.fromiter(
            (self._node_score(found, snapshot.names[n]) for n in nodes.tolist()),
            dtype=np.int64,
            count=len(nodes),
        )

    @staticmethod
    def _node_score(found: _State, node_name: str) -> int:
        """``computeScore``: per ``firstAvailable`` request, the max size less the index
        of the subrequest allocated."""
        on_node = found.by_node.get(node_name)
        if on_node is None:
            return 0
        pending = iter(on_node.allocations(found.to_allocate))
        score = 0
        for index, claim in enumerate(found.claims):
            allocation = claim.allocation
            if index in found.to_allocate:
                allocation = next(pending, None)
            if allocation is None:
                continue
            chosen = {r.request for r in allocation.results if "/" in r.request}
            for request in claim.parsed.spec.requests:
                for i, sub in enumerate(request.first_available):
                    if f"{request.name}/{sub.name}" in chosen:
                        score += FIRST_AVAILABLE_MAX - i
        return score

    def normalize_score(self, state: CycleState, pod: api.Pod, scores: Int64s) -> Int64s:
        """``DefaultNormalizeScore`` (highest becomes 100)."""
        highest = int(scores.max()) if len(scores) else 0
        if highest == 0:
            return scores
        return np.asarray(scores * api.MAX_NODE_SCORE // highest, dtype=np.int64)

    # --- Reserve, Unreserve --------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        found = state.read(_STATE, _State)
        if found is None or not found.to_allocate:
            return api.SUCCESS
        on_node = self._found_on(found, node_name)
        extended = found.extended
        if on_node is None:
            if extended is not None and found.to_allocate == [extended.index]:
                return api.SUCCESS  # the node's device plugin has the pod's resources
            return api.error("claim allocation not found for node")
        allocations = on_node.allocations(found.to_allocate)
        # what Filter found on the other nodes is not read again (the state lives on with
        # the binding, which may wait behind others)
        found.passed, found.by_node = {}, {}
        if len(allocations) != len(found.to_allocate):
            return api.error(
                f"internal error, have {len(allocations)} allocations,"
                f" {len(found.to_allocate)} claims to allocate,"
                f" want {len(found.to_allocate)} claims"
            )
        for index, allocation in zip(found.to_allocate, allocations, strict=True):
            if allocation is None:
                continue  # the extended-resource claim, not needed on this node
            claim = found.claims[index]
            if extended is not None and index == extended.index:
                claim = extended.by_node[node_name].claim
            found.allocations[index] = allocation
            pending = resource_claims.with_allocation(claim, allocation)
            if not self._catalog.signal_pending(pending):
                return api.error(
                    f"internal error, couldn't signal allocation for claim {claim.name}"
                )
        return api.SUCCESS

    def unreserve(self, state: CycleState, pod: api.Pod, node_name: str) -> None:
        found = state.read(_STATE, _State)
        if found is None:
            return
        catalog = self._catalog
        extended = found.extended
        for index, claim in enumerate(found.claims):
            if extended is not None and index == extended.index:
                self._unreserve_extended(found, extended, claim, pod)
                continue
            if index in found.allocations and catalog.remove_pending(claim.uid):
                catalog.restore(claim.key)
            current = catalog.claim(claim.namespace, claim.name) or claim
            if current.allocated and current.reserved_for_pod(pod):
                writer = catalog.writer
                if writer is None:
                    continue
                try:
                    writer.unreserve(current, pod.uid)
                except errors.KubeAPIError as exc:  # retried with the pod's next attempt
                    log.error("unreserve %s for %s: %s", claim.key, pod.key, exc)

    def _unreserve_extended(
        self, found: _State, extended: _Extended, claim: ResourceClaim, pod: api.Pod
    ) -> None:
        """``unreserveExtendedResourceClaim``: out of flight; deleted if PreBind (or a
        former attempt) created it."""
        catalog = self._catalog
        if extended.index in found.allocations and catalog.remove_pending(extended.pending_uid):
            catalog.restore(claim.key)
        if claim.name == resource_claims.SPECIAL_CLAIM_NAME:
            return
        try:
            self._delete_claim(claim)
        except errors.KubeAPIError as exc:  # the pod's next attempt deletes it (PostFilter)
            log.error("delete %s of %s: %s", claim.key, pod.key, exc)

    # --- PreBind -------------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        found = state.read(_STATE, _State)
        if found is None or not found.claims:
            return api.SKIP
        return api.SUCCESS

    def pre_bind(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        found = state.read(_STATE, _State)
        if found is None or not found.claims:
            return api.SUCCESS
        extended = found.extended
        for index, claim in enumerate(found.claims):
            if claim.reserved_for_pod(pod):
                continue
            if (
                extended is not None
                and index == extended.index
                and index not in found.allocations
                and not claim.parsed.spec.requests
            ):
                continue  # the node's device plugin has the pod's extended resources
            try:
                found.claims[index] = self._bind_claim(found, index, pod, node_name)
            except (errors.KubeAPIError, _BindFailed) as exc:
                return api.error(str(exc))
        if self._catalog.writer is None or not any(
            resource_claims.has_binding_conditions(c) for c in found.claims
        ):
            return api.SUCCESS  # offline there is no driver to wait for
        return self._wait_for_binding_conditions(found, pod, node_name)

    def _wait_for_binding_conditions(
        self, found: _State, pod: api.Pod, node_name: str
    ) -> api.Status:
        """Wait, up to ``bindingTimeout``, until the drivers report every binding
        condition of the allocated devices True (``isPodReadyForBinding``), on this
        binding thread; a binding failure condition, or the timeout, fails the binding
        (the next attempt's Filter finds the claim unavailable and PostFilter
        deallocates it)."""
        catalog = self._catalog
        writer = catalog.writer
        if writer is not None:
            writer.record_event(
                pod,
                "BindingConditionsPending",
                f"waiting for binding conditions for device on node {node_name}",
            )

        def ready() -> bool:
            for index, claim in enumerate(found.claims):
                current = catalog.claim(claim.namespace, claim.name)
                if current is None:
                    raise _BindFailed(f"resourceclaim {claim.key} not found")
                found.claims[index] = current
                is_ready, failure = resource_claims.binding_readiness(current)
                if failure:
                    raise _BindFailed(failure, BindingOutcome.FAILURE)
                if not is_ready:
                    timeout, now = self._binding_timeout, catalog.now()
                    if resource_claims.binding_timed_out(current, timeout, now):
                        raise _BindFailed(
                            f"device binding timeout: claim={current.name}", BindingOutcome.TIMEOUT
                        )
                    return False
            return True

        started = catalog.monotonic()
        status, outcome = api.SUCCESS, BindingOutcome.SUCCESS
        try:
            if not helpers.wait_until(
                ready,
                timeout=self._binding_timeout,
                wait_changed=catalog.wait_changed,
                monotonic=catalog.monotonic,
            ):
                status = api.error("device binding timeout: context deadline exceeded")
                outcome = BindingOutcome.TIMEOUT
        except _BindFailed as exc:
            status, outcome = api.error(str(exc)), exc.outcome
        if catalog.observer is not None:
            allocated = [c.allocation for c in found.claims if c.allocation is not None]
            catalog.observer.binding_conditions_ended(
                pod.scheduler_name,
                outcome,
                catalog.monotonic() - started,
                [r.driver for a in allocated for r in a.results],
                [r.driver for a in allocated for r in a.results if r.binding_conditions],
            )
        return status

    def _bind_claim(self, found: _State, index: int, pod: api.Pod, node_name: str) -> ResourceClaim:
        """``bindClaim``: allocation (with the finalizer first) and reservation; the
        extended-resource claim is created first, and named in the pod's status after."""
        claim = found.claims[index]
        allocation = found.allocations.get(index)
        consumer = resource_claims.pod_consumer(pod)
        catalog = self._catalog
        writer = catalog.writer
        extended = found.extended if found.extended and found.extended.index == index else None
        pending_uid = claim.uid if extended is None else extended.pending_uid
        if extended is not None and claim.name == resource_claims.SPECIAL_CLAIM_NAME:
            variant = extended.by_node.get(node_name)
            if variant is None:
                catalog.remove_pending(pending_uid)
                raise _BindFailed(f"extended resource claim not found for node {node_name}")
            claim = self._create_extended_claim(variant.claim, pod)
            found.claims[index] = claim  # Unreserve deletes it should binding fail now
        if writer is None:  # offline: what the API would store
            bound = resource_claims.with_allocation(claim, allocation, (consumer,))
            catalog.commit(bound)
            catalog.remove_pending(pending_uid)
            return bound
        written: ResourceClaim | None = None
        try:
            for attempt in range(CONFLICT_RETRIES):
                if attempt:
                    claim = writer.get_claim(claim.namespace, claim.name)
                if claim.deleting:
                    raise _BindFailed(f"claim {claim.key} got deleted in the meantime")
                if allocation is not None:
                    if claim.allocated:
                        raise _BindFailed(
                            f"claim {claim.key} got allocated elsewhere in the meantime"
                        )
                    if resource_claims.FINALIZER not in claim.finalizers:
                        try:
                            claim = writer.update_claim(resource_claims.with_finalizer(claim))
                        except errors.Conflict:
                            continue
                        except errors.KubeAPIError as exc:
                            raise _BindFailed(f"add finalizer to claim {claim.key}: {exc}") from exc
                elif not claim.allocated:
                    raise _BindFailed(
                        f"claim {claim.key} got deallocated elsewhere in the meantime"
                    )
                try:
                    written = writer.update_claim_status(
                        resource_claims.with_allocation(
                            claim,
                            allocation,
                            (consumer,),
                            allocated_at=resource_claims.rfc3339(catalog.now()),
                        )
                    )
                except errors.Conflict:
                    continue
                except errors.KubeAPIError as exc:
                    what = (
                        "add allocation and reservation to" if allocation else "add reservation to"
                    )
                    raise _BindFailed(f"{what} claim {claim.key}: {exc}") from exc
                break
            else:
                raise _BindFailed(f"add reservation to claim {claim.key}: conflict after retries")
        finally:
            if written is not None:
                catalog.assume(written)
            if allocation is not None:
                catalog.remove_pending(pending_uid)
        assert written is not None  # the loop either wrote it or raised
        if extended is not None:
            self._name_in_pod_status(pod, written, extended, node_name)
        return written

    def _create_extended_claim(self, claim: ResourceClaim, pod: api.Pod) -> ResourceClaim:
        """``createExtendedResourceClaimInAPI`` (offline: named as the API would, from
        ``generateName`` and a suffix drawn from the pod's UID)."""
        body = resource_claims.creatable(claim)
        writer = self._catalog.writer
        if writer is None:
            meta = body["metadata"]
            digest = hashlib.sha256(pod.uid.encode()).hexdigest()
            meta["name"] = meta["generateName"] + digest[:5]
            meta["uid"] = f"planned-{digest[:32]}"
            return resource_claims.parse_resource_claim(body)
        observer = self._catalog.observer
        try:
            created = writer.create_claim(body)
        except errors.KubeAPIError as exc:
            if observer is not None:
                observer.claim_created(False)
            raise _BindFailed(
                f"create claim for extended resources {claim.namespace}/{claim.name}: {exc}"
            ) from exc
        if observer is not None:
            observer.claim_created(True)
        return created

    def _name_in_pod_status(
        self, pod: api.Pod, claim: ResourceClaim, extended: _Extended, node_name: str
    ) -> None:
        """``patchPodExtendedResourceClaimStatus``: the claim's name and which request
        serves which container's resource, in ``status.extendedResourceClaimStatus``."""
        writer = self._catalog.writer
        variant = extended.by_node.get(node_name)
        if variant is None or not variant.mappings:
            raise _BindFailed(
                "nil or empty request mappings, no update of pod"
                f" {pod.namespace}/{pod.name} ExtendedResourceClaimStatus"
            )
        if writer is None:
            return
        status = {
            "extendedResourceClaimStatus": {
                "requestMappings": [dict(m) for m in variant.mappings],
                "resourceClaimName": claim.name,
            }
        }
        try:
            writer.patch_pod_status(pod, {"status": status})
        except errors.KubeAPIError as exc:
            raise _BindFailed(
                f"update pod {pod.namespace}/{pod.name} ExtendedResourceClaimStatus: {exc}"
            ) from exc


# --- the extended-resource claim's requests (createRequestsAndMappings) --------------------


@dataclass(frozen=True, slots=True)
class _Container:
    index: int
    """In init containers followed by containers (the request names count in it)."""
    name: str
    requests: Mapping[str, Any]
    long_lived: bool
    """A container or a sidecar (an init container restarted ``Always``): it holds its
    devices while the pod runs; an init container's are free once it finished."""


def _containers(pod: api.Pod) -> list[_Container]:
    spec = (pod.raw or {}).get("spec") or {}
    init = list(spec.get("initContainers") or ())
    found = []
    for index, container in enumerate([*init, *(spec.get("containers") or ())]):
        requests = (container.get("resources") or {}).get("requests") or {}
        sidecar = container.get("restartPolicy") == "Always"
        found.append(
            _Container(
                index, str(container.get("name", "")), requests, index >= len(init) or sidecar
            )
        )
    return found


def _count(quantity: Any) -> int:
    """``Quantity.AsInt64``: a whole count, else 0 (not a device count: ignored)."""
    try:
        exact, _ = quantities.parse_exact_quantity(str(quantity))
    except ValueError:
        return 0
    return int(exact) if exact == exact.to_integral_value() else 0


def _container_request(
    container: _Container,
    resource: str,
    class_name: str,
    reusable: Sequence[dict[str, Any] | None],
) -> tuple[dict[str, Any] | None, list[dict[str, str]]]:
    """One container's request for ``resource`` (``None``: none needed, either it asks
    none or the requests in ``reusable`` - of containers that start after this init
    container finished... or run beside it - cover it) and its mappings."""
    wanted = _count(container.requests.get(resource, 0))
    if not wanted:
        return None, []
    mappings = []
    covered = 0
    for request in reusable:
        if request is None:
            continue
        covered += request["exactly"]["count"]
        mappings.append(_mapping(container, resource, request["name"]))
        if covered >= wanted:
            return None, mappings
    # named by the container's index and the resource's among its sorted request names
    name = f"container-{container.index}-request-{sorted(container.requests).index(resource)}"
    request = {
        "name": name,
        "exactly": {
            "deviceClassName": class_name,
            "allocationMode": "ExactCount",
            "count": wanted - covered,
        },
    }
    mappings.append(_mapping(container, resource, name))
    return request, mappings


def _mapping(container: _Container, resource: str, request: str) -> dict[str, str]:
    return {"containerName": container.name, "resourceName": resource, "requestName": request}


def extended_requests(
    pod: api.Pod, resources: Mapping[str, int], class_name: Callable[[str], str | None]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The device requests of a pod's extended-resource claim and the pod status's
    container -> request mappings, for ``resources`` (those a node leaves to DRA)."""
    containers = _containers(pod)
    requests: list[dict[str, Any]] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(resources):
        device_class = class_name(resource)
        if device_class is None:
            continue
        long_requests: list[dict[str, Any] | None] = [None] * len(containers)
        long_mappings: list[dict[str, str]] = []
        for c in containers:
            if c.long_lived:
                request, found = _container_request(c, resource, device_class, ())
                long_requests[c.index] = request
                long_mappings.extend(found)
        # init containers run one after another: the largest of their requests serves
        # them all, after reusing what the containers that start later ask anyway
        short: dict[str, Any] | None = None
        short_names: set[str] = set()
        short_mappings: list[dict[str, str]] = []
        for c in containers:
            if c.long_lived:
                continue
            request, found = _container_request(c, resource, device_class, long_requests[c.index :])
            if request is not None:
                short_names.add(request["name"])
                if short is None or short["exactly"]["count"] < request["exactly"]["count"]:
                    short = request
            short_mappings.extend(found)
        if short is not None and len(short_names) > 1:
            short_names.discard(short["name"])
            for m in short_mappings:
                if m["requestName"] in short_names:
                    m["requestName"] = short["name"]
        if short is not None:
            requests.append(short)
        requests.extend(r for r in long_requests if r is not None)
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    requests.sort(key=lambda r: str(r["name"]))
    return requests, mappings


class _BindFailed(Exception):
    """PreBind could not record a claim's allocation or reservation, or its wait for
    binding conditions ended in ``outcome``."""

    def __init__(
        self,
        message: str,
        outcome: resource_claims.BindingOutcome = resource_claims.BindingOutcome.ERROR,
    ) -> None:
        super().__init__(message)
        self.outcome = outcome


def new(args: Args | None, handle: Handle) -> DynamicResources:
    return DynamicResources(args or Args(), handle)
