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
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from pydantic import field_validator

from nodeagent.base import durations, errors
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
from nodeagent.scheduler.plugins import node_affinity
from nodeagent.scheduler.resource_claims import ResourceCatalog, ResourceClaim
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
    """Accepted as kube-scheduler does; it bounds the wait for devices' binding
    conditions, which this scheduler does not wait for (see docs/scheduler.md)."""

    @field_validator("filter_timeout", "binding_timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        seconds = durations.parse_go_duration(value)
        if seconds < 0:
            raise ValueError(f"{value!r}: must not be negative")
        return value

    @property
    def filter_seconds(self) -> float:
        return durations.parse_go_duration(self.filter_timeout)


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


@dataclass(slots=True)
class _State:
    claims: list[ResourceClaim]
    to_allocate: list[int] = field(default_factory=list)
    """Indices into ``claims`` of those the scheduler allocates."""
    allocator: NodeAllocator | None = None
    by_node: dict[str, list[model.AllocationResult]] = field(default_factory=dict)
    unavailable: set[int] = field(default_factory=set)
    allocations: dict[int, model.AllocationResult] = field(default_factory=dict)
    """Set by Reserve: what PreBind writes."""
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
        # the claims are recorded only once PreFilter passes (PostFilter reads them)
        found = _State([])
        state.write(_STATE, found)
        claims, error = pod_claims(pod, self._catalog) if pod.resource_claims else ([], "")
        if error:
            return None, _unresolvable(error)
        if not claims:
            return None, api.SKIP
        to_allocate = []
        for index, claim in enumerate(claims):
            if claim.allocated:
                if not claim.can_be_reserved() and not claim.reserved_for_pod(pod):
                    return None, _unresolvable(REASON_IN_USE)
                continue
            to_allocate.append(index)
            if self._catalog.pending(claim.uid) is not None:
                return None, _unresolvable(
                    f"resource claim {claim.key} is in the process of being allocated"
                )
            status = self._check_classes(claim)
            if not status.is_success:
                return None, status
        if to_allocate:
            found.allocator = self._new_allocator(self._catalog)
        found.claims, found.to_allocate = claims, to_allocate
        return None, api.SUCCESS

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
        unavailable = [
            index
            for index, claim in enumerate(found.claims)
            if claim.node_selector is not None
            and not node_affinity.required_matches(claim.node_selector, node)
        ]
        if unavailable:
            with found.lock:
                found.unavailable.update(unavailable)
            return _unresolvable(REASON_NOT_AVAILABLE)
        if found.allocator is None:
            return api.SUCCESS
        wanted = [found.claims[i].parsed for i in found.to_allocate]
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
        if len(outcome.allocations) != len(wanted):
            return _unresolvable(REASON_CANNOT_ALLOCATE)
        with found.lock:
            found.by_node[node.name] = list(outcome.allocations)
        return api.SUCCESS

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
        for index in candidates:
            claim = found.claims[index]
            consumers = claim.reserved_for
            if not consumers or (len(consumers) == 1 and consumers[0].uid == pod.uid):
                status = self._deallocate(claim)
                if not status.is_success:
                    return None, status
                return None, api.unschedulable("deallocation of ResourceClaim completed")
        return None, api.unschedulable("still not schedulable")

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
        allocations = found.by_node.get(node_name)
        if allocations is None:
            return 0
        pending = iter(allocations)
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
        allocations = found.by_node.get(node_name)
        if allocations is None:
            return api.error("claim allocation not found for node")
        if len(allocations) != len(found.to_allocate):
            return api.error(
                f"internal error, have {len(allocations)} allocations,"
                f" {len(found.to_allocate)} claims to allocate,"
                f" want {len(found.to_allocate)} claims"
            )
        for index, allocation in zip(found.to_allocate, allocations, strict=True):
            claim = found.claims[index]
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
        for index, claim in enumerate(found.claims):
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
        for index, claim in enumerate(found.claims):
            if claim.reserved_for_pod(pod):
                continue
            try:
                found.claims[index] = self._bind_claim(found, index, pod)
            except (errors.KubeAPIError, _BindFailed) as exc:
                return api.error(str(exc))
        return api.SUCCESS

    def _bind_claim(self, found: _State, index: int, pod: api.Pod) -> ResourceClaim:
        """``bindClaim``: allocation (with the finalizer first) and reservation."""
        claim = found.claims[index]
        allocation = found.allocations.get(index)
        consumer = resource_claims.pod_consumer(pod)
        catalog = self._catalog
        writer = catalog.writer
        if writer is None:  # offline: what the API would store
            bound = resource_claims.with_allocation(claim, allocation, (consumer,))
            catalog.commit(bound)
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
                try:
                    written = writer.update_claim_status(
                        resource_claims.with_allocation(claim, allocation, (consumer,))
                    )
                except errors.Conflict:
                    continue
                except errors.KubeAPIError as exc:
                    what = (
                        "add allocation and reservation to" if allocation else "add reservation to"
                    )
                    raise _BindFailed(f"{what} claim {claim.key}: {exc}") from exc
                return written
            raise _BindFailed(f"add reservation to claim {claim.key}: conflict after retries")
        finally:
            if written is not None:
                catalog.assume(written)
            if allocation is not None:
                catalog.remove_pending(claim.uid)


class _BindFailed(Exception):
    """PreBind could not record a claim's allocation or reservation."""


def new(args: Args | None, handle: Handle) -> DynamicResources:
    return DynamicResources(args or Args(), handle)
