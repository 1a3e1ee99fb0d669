"""The structured-parameters allocator: devices for a pod's claims on one node.

A port of kube-scheduler v1.36's allocator as its default feature gates select it: the
"incubating" variant of ``k8s.io/dynamic-resource-allocation/structured``
(``internal/incubating/allocator_incubating.go``, ``pools_incubating.go``,
``constraint.go``, ``consumable_capacity.go``), which ``structured.NewAllocator`` picks
because consumable capacity and binding conditions are on. The search is upstream's,
step for step, so for the same input both schedulers pick the same devices:

- pools are gathered for the node (``GatherPools``): node-local slices, slices whose
  node selector or ``allNodes`` matches, per-device node selection, and every slice
  that carries shared counters; a pool whose slices are of an older generation than
  another slice is dropped, one with fewer slices than ``resourceSliceCount`` is
  *incomplete* (never allocated from; fatal for an ``All`` request), one with duplicate
  device names or broken counter references *invalid*. Pools are searched ordered by
  driver then pool name, those with binding conditions last; slices by name; devices
  in slice order;
- claims, then requests, then devices are filled depth-first (``allocateOne``); a
  candidate must be free (not allocated, not in flight, not taken earlier in this
  search; admin access may reuse a device), match the class's and the request's CEL
  selectors, fit the request's capacity, have its shared counters available, have its
  ``NoSchedule``/``NoExecute`` taints tolerated and keep the claim's ``matchAttribute``
  / ``distinctAttribute`` constraints; on a dead end the search backtracks, trying
  combinations in device order (never permutations), and the first full solution wins;
- ``firstAvailable`` subrequests are tried in order, the first that completes wins;
  a claim is capped at 32 devices (``AllocationResultsMaxSize``).

Fidelity is tested, not assumed: tests/scheduler/dra runs upstream's allocator table
(including its counts of search steps) and feeds generated clusters to both this module
and upstream's own allocator built from the pinned Go module, requiring the same devices.

Speed: what does not depend on the pod is computed once, the pools a node sees per
:class:`Inventory`, each selector's verdict on each device per compiler (shared by
inventories), so filtering thousands of nodes repeats no CEL evaluation and no pool
gathering; only the search itself runs per node (tests/scheduler/dra/bench_allocator.py).
Deliberate difference: available counters are kept per pool ID, where upstream keys
them by pool name alone (two drivers publishing partitionable devices under one pool
name would share counters there).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from enum import StrEnum

from nodeagent.scheduler import api
from nodeagent.scheduler.dra.cel import CelError, DeviceInput, SelectorCompiler, shared_compiler
from nodeagent.scheduler.dra.model import (
    RESULTS_MAX_SIZE,
    AllocationConfig,
    AllocationMode,
    AllocationResult,
    ConfigSource,
    CounterSet,
    Device,
    DeviceCapacity,
    DeviceClass,
    DeviceID,
    DeviceResult,
    NodeSelector,
    PoolID,
    Quantity,
    RequestSpec,
    ResourceClaim,
    ResourceSlice,
    SemVer,
    TaintEffect,
)
from nodeagent.scheduler.plugins.node_affinity import term_error, term_matches

__all__ = [
    "Allocator",
    "InUse",
    "Inventory",
    "Outcome",
    "Verdict",
    "in_use_from_allocations",
    "node_selector_matches",
]

MSG_CANNOT_ALLOCATE = "cannot allocate all claims"
"""The plugin's Filter message when the allocator finds no solution on the node."""
MSG_INVALID_POOLS = "invalid resource pools were encountered"
MSG_NOT_ON_NODE = "resourceclaim not available on the node"


class Verdict(StrEnum):
    ALLOCATED = "Allocated"
    UNSCHEDULABLE = "Unschedulable"
    """No solution on this node (another node may have one)."""
    ERROR = "Error"
    """Bad input (a CEL error, an unknown class, a malformed request): upstream aborts the
    scheduling attempt instead of trying other nodes."""


class Outcome:
    """What :meth:`Allocator.allocate` found on a node. The allocation results are built
    when first read: Filter asks every node and needs only the verdict, Reserve reads
    the results of the one node chosen (building them was a sixth of the scheduler's
    time in scheduler_perf's claim-template shapes, 5000pods_500nodes)."""

    __slots__ = ("_allocations", "_build", "count", "reason", "verdict")

    def __init__(
        self,
        verdict: Verdict,
        allocations: tuple[AllocationResult, ...] = (),
        reason: str = "",
        *,
        build: Callable[[], tuple[AllocationResult, ...]] | None = None,
        count: int = 0,
    ) -> None:
        """``build`` (with the ``count`` of results it makes): what builds the
        allocations, instead of ``allocations``."""
        self.verdict = verdict
        self.reason = reason
        self._allocations = allocations if build is None else None
        self._build = build
        self.count = len(allocations) if build is None else count
        """How many allocations there are (without building them)."""

    @property
    def allocations(self) -> tuple[AllocationResult, ...]:
        """One per claim passed in, in order (a claim already allocated keeps its
        allocation)."""
        found = self._allocations
        if found is None:
            assert self._build is not None
            found = self._allocations = self._build()
            self._build = None
        return found

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.ALLOCATED

    def __repr__(self) -> str:
        return f"Outcome({self.verdict!r}, count={self.count}, reason={self.reason!r})"


@dataclass(frozen=True, slots=True)
class InUse:
    """Devices already taken (``structured.AllocatedState``): from claims' allocations
    and allocations in flight. Admin-access results never count."""

    devices: AbstractSet[DeviceID] = frozenset()
    """Dedicated devices (a result without a share ID)."""
    shared: frozenset[tuple[DeviceID, str]] = frozenset()
    """Shares of devices that allow multiple allocations: (device, share ID)."""
    consumed_capacity: Mapping[DeviceID, Mapping[str, Decimal]] = field(default_factory=dict)
    """Capacity consumed by the shares of each such device, summed."""

    shared_devices: frozenset[DeviceID] = field(init=False, repr=False, compare=False)
    """The devices of :attr:`shared` (derived)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shared_devices", frozenset(d for d, _ in self.shared))

    def is_allocated(self, device: DeviceID) -> bool:
        """``IsDeviceAllocated``: taken whole, or by any share."""
        return (
            device in self.devices
            or device in self.consumed_capacity
            or device in self.shared_devices
        )


def in_use_from_allocations(allocations: Iterable[AllocationResult]) -> InUse:
    """``GatherAllocatedState`` over allocations (``foreachAllocatedDevice``)."""
    devices: set[DeviceID] = set()
    shared: set[tuple[DeviceID, str]] = set()
    consumed: dict[DeviceID, dict[str, Decimal]] = {}
    for allocation in allocations:
        for result in allocation.results:
            if result.admin_access:
                continue
            device = result.device_id
            if result.share_id is not None:
                shared.add((device, result.share_id))
                if result.consumed_capacity is not None:
                    total = consumed.setdefault(device, {})
                    for name, amount in result.consumed_capacity.items():
                        total[name] = total.get(name, Decimal(0)) + amount.value
                continue
            devices.add(device)
    return InUse(frozenset(devices), frozenset(shared), consumed)


def node_selector_matches(selector: NodeSelector | None, node: api.Node) -> bool:
    """Whether an allocation's node selector admits ``node`` (``None``: every node).
    Terms kube-scheduler cannot parse, and empty terms, match nothing."""
    if selector is None:
        return True
    return any(
        not term.is_empty and term_error(term) is None and term_matches(term, node)
        for term in selector.terms
    )


class _Fatal(Exception):
    """An error that aborts the whole allocation (upstream returns it from Allocate)."""


class _MaxSizeExceeded(Exception):
    """``errAllocationResultMaxSizeExceeded``: backtrack further."""


def _node_matches(
    node: api.Node, node_name: str | None, all_nodes: bool, selector: NodeSelector | None
) -> bool:
    """``NodeMatches``."""
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if selector is not None:
        for term in selector.terms:
            if (problem := term_error(term)) is not None:
                raise _Fatal(f"failed to parse node selector: {problem}")
        return node_selector_matches(selector, node)
    return False


# --- pools ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pool:
    id: PoolID
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: tuple[ResourceSlice, ...] = ()
    """``DeviceSlicesTargetingNode``, sorted by name."""
    other_slices: tuple[ResourceSlice, ...] = ()
    """``DeviceSlicesNotTargetingNode``: their allocated devices consume counters too."""
    counter_sets: Mapping[str, CounterSet] = field(default_factory=dict)
    has_binding_conditions: bool = False
    plain: bool = False
    """No device consumes counters or allows multiple allocations: taking one of them
    touches nothing but the device itself (what :meth:`_Search._greedy` relies on)."""


def _build_pool(
    pool_id: PoolID, slices: list[ResourceSlice], all_for_pool: list[ResourceSlice] | None
) -> _Pool:
    """``buildPool``."""
    slices.sort(key=lambda s: s.name)
    counter_slices = [s for s in slices if s.shared_counters]
    device_slices = tuple(s for s in slices if not s.shared_counters)
    names: set[str] = set()
    for s in device_slices:
        for device in s.devices:
            if device.name in names:
                return _Pool(
                    pool_id, invalid=True, invalid_reason=f"duplicate device name {device.name}"
                )
            names.add(device.name)
    counter_sets: dict[str, CounterSet] = {}
    for s in counter_slices:
        for counter_set in s.shared_counters:
            if counter_set.name in counter_sets:
                reason = f"duplicate counter set name {counter_set.name}"
                return _Pool(pool_id, invalid=True, invalid_reason=reason)
            counter_sets[counter_set.name] = counter_set
    if (problem := _counter_problem(counter_sets, slices)) is not None:
        return _Pool(pool_id, invalid=True, invalid_reason=problem)
    other: tuple[ResourceSlice, ...] = ()
    if all_for_pool is not None and len(slices) != len(all_for_pool):
        here = {s.name for s in slices}
        other = tuple(s for s in all_for_pool if s.name not in here)
        if (problem := _counter_problem(counter_sets, other)) is not None:
            return _Pool(pool_id, invalid=True, invalid_reason=problem)
    binding = any(d.binding_conditions for s in device_slices for d in s.devices)
    plain = not any(
        d.consumes_counters or d.allow_multiple_allocations
        for s in device_slices
        for d in s.devices
    )
    return _Pool(
        pool_id,
        slices=device_slices,
        other_slices=other,
        counter_sets=counter_sets,
        has_binding_conditions=binding,
        plain=plain,
    )


def _counter_problem(
    counter_sets: Mapping[str, CounterSet], slices: Iterable[ResourceSlice]
) -> str | None:
    """``validateDeviceCounterConsumption``."""
    for s in slices:
        for device in s.devices:
            for consumption in device.consumes_counters:
                counter_set = counter_sets.get(consumption.counter_set)
                if counter_set is None:
                    return f"counter set {consumption.counter_set} not found"
                for name in consumption.counters:
                    if name not in counter_set.counters:
                        return f"counter {name} not found in counter set {counter_set.name}"
    return None


class Inventory:
    """The published devices (all ResourceSlices) and what is derived from them alone: the
    pools each node sees and each selector's verdict on each device. Share one across
    pods and nodes; when slices change, :meth:`updated` makes the next one, keeping what
    the change cannot have affected. Thread-safe."""

    def __init__(
        self, slices: Iterable[ResourceSlice], compiler: SelectorCompiler | None = None
    ) -> None:
        self.slices: tuple[ResourceSlice, ...] = tuple(slices)
        self.compiler = compiler if compiler is not None else shared_compiler()
        devices = sum(len(s.devices) for s in self.slices)
        if self.compiler.remembered > 8 * devices + 4096:
            # Slices were replaced often enough that most cached devices are gone.
            self.compiler.retain(d for s in self.slices for d in s.devices)
        self._on_node: dict[str, list[ResourceSlice]] = {}
        shared: list[ResourceSlice] = []
        self._by_pool: dict[PoolID, list[ResourceSlice]] = {}
        for s in self.slices:
            if not s.node_name or s.shared_counters:
                shared.append(s)
            else:
                self._on_node.setdefault(s.node_name, []).append(s)
            self._by_pool.setdefault(s.pool_id, []).append(s)
        self._shared = tuple(shared)
        self._label_sensitive = any(
            s.node_selector is not None or s.per_device_node_selection for s in self._shared
        )
        self._pools: dict[object, _NodePools] = {}
        self._lock = threading.Lock()

    def updated(self, slices: Iterable[ResourceSlice]) -> Inventory:
        """The inventory for ``slices`` (parsed objects; unchanged slices the same objects as
        here). Selector verdicts of unchanged devices are kept by the shared compiler; this
        also keeps the pools of every node whose own slices, and the cluster-wide ones, are
        the same objects."""
        fresh = Inventory(slices, self.compiler)
        with self._lock:
            pools = dict(self._pools)
        same_shared = _same_objects(fresh._shared, self._shared)
        for key, entry in pools.items():
            name = key[0] if isinstance(key, tuple) else key
            if (
                same_shared
                and not entry.consulted_all
                and fresh._label_sensitive == self._label_sensitive
                and _same_objects(fresh._on_node.get(str(name), ()), entry.own)
            ):
                fresh._pools[key] = entry
        return fresh

    def pools(self, node: api.Node) -> tuple[_Pool, ...]:
        """``GatherPools`` for ``node``, cached (by name, and labels if a selector reads them)."""
        return self.node_pools(node).pools

    def node_pools(self, node: api.Node) -> _NodePools:
        """What :meth:`pools` returns, with the caches kept beside it."""
        key: object = (
            (node.name, frozenset(node.labels.items())) if self._label_sensitive else node.name
        )
        cached = self._pools.get(key)
        if cached is None:
            cached = self._gather(node)
            with self._lock:
                self._pools[key] = cached
        if cached.error is not None:
            raise cached.error
        return cached

    def plain_candidates(
        self, found: _NodePools, device_class: DeviceClass, spec: RequestSpec
    ) -> tuple[_Candidate, ...] | None:
        """The devices of ``found``'s usable pools that the class's and the request's
        selectors select, in search order, computed once per node and pair of selector
        lists; ``None`` when a selector is empty or fails on a device, or a slice selects
        nodes per device (the search then meets those where upstream does)."""
        key = (device_class.selectors, spec.selectors)
        cache = found.candidates
        if key in cache:
            return cache[key]
        expressions = (*device_class.selectors, *spec.selectors)
        chosen: list[_Candidate] = []
        result: tuple[_Candidate, ...] | None = None
        try:
            if any(e is None for e in expressions):
                raise CelError("empty selector")
            for pool in found.pools:
                if pool.incomplete or pool.invalid:
                    continue
                for s in pool.slices:
                    if s.per_device_node_selection:
                        raise CelError("per-device node selection")
                    for device, device_id in zip(s.devices, s.device_ids, strict=True):
                        if all(
                            self.selector_verdict(str(e), s.driver, device) for e in expressions
                        ):
                            chosen.append((pool, s, device, device_id))
            result = tuple(chosen)
        except CelError:
            result = None
        with self._lock:
            cache[key] = result
        return result

    def _gather(self, node: api.Node) -> _NodePools:
        own = tuple(self._on_node.get(node.name, ()))
        by_pool: dict[PoolID, list[ResourceSlice]] = {}
        try:
            for s in (*own, *self._shared):
                if self._relevant(node, s):
                    # addSlice: only the newest generation seen for the node counts.
                    current = by_pool.get(s.pool_id)
                    if current is None or s.generation > current[0].generation:
                        by_pool[s.pool_id] = [s]
                    elif s.generation == current[0].generation:
                        current.append(s)
        except _Fatal as exc:
            return _NodePools((), own, consulted_all=False, error=exc)
        ready: list[_Pool] = []
        consulted_all = False
        for pool_id, pool_slices in by_pool.items():
            first = pool_slices[0]
            if len(pool_slices) == first.resource_slice_count:
                ready.append(_build_pool(pool_id, pool_slices, None))
                continue
            # checkSlicesInPool: a newer generation anywhere makes these obsolete.
            consulted_all = True
            everywhere = self._by_pool.get(pool_id, [])
            if any(s.generation > first.generation for s in everywhere):
                continue
            same = [s for s in everywhere if s.generation == first.generation]
            if len(same) != first.resource_slice_count:
                ready.append(_Pool(pool_id, incomplete=True))
                continue
            ready.append(_build_pool(pool_id, pool_slices, same))
        ready.sort(key=lambda p: (p.has_binding_conditions, p.id.driver, p.id.pool))
        return _NodePools(tuple(ready), own, consulted_all=consulted_all)

    @staticmethod
    def _relevant(node: api.Node, s: ResourceSlice) -> bool:
        if s.shared_counters:
            return True
        if s.node_name or s.all_nodes or s.node_selector is not None:
            try:
                return _node_matches(node, s.node_name, s.all_nodes, s.node_selector)
            except _Fatal as exc:
                raise _Fatal(
                    f"failed to perform node selection for slice {s.name}: {exc}"
                ) from None
        if s.per_device_node_selection:
            for d in s.devices:
                try:
                    if _node_matches(node, d.node_name, d.all_nodes, d.node_selector):
                        return True
                except _Fatal as exc:
                    raise _Fatal(
                        f"failed to perform node selection for device {d.name} "
                        f"in slice {s.name}: {exc}"
                    ) from None
        return False

    def selector_verdict(self, expression: str, driver: str, device: Device) -> bool:
        """Whether ``device`` matches ``expression``; raises :class:`CelError` (remembered)."""
        return self.compiler.matches(expression, DeviceInput(driver, device))


@dataclass(frozen=True, slots=True)
class _NodePools:
    """What ``GatherPools`` found for one node, and what it read to find it."""

    pools: tuple[_Pool, ...]
    own: tuple[ResourceSlice, ...]
    """The node-local slices read."""
    consulted_all: bool
    """Whether an incomplete pool made it read every slice of that pool, anywhere."""
    error: _Fatal | None = None
    candidates: dict[tuple[tuple[str | None, ...], ...], tuple[_Candidate, ...] | None] = field(
        default_factory=dict, compare=False, repr=False
    )
    plain: bool = field(init=False, compare=False, repr=False)
    """Every usable pool is plain (:attr:`_Pool.plain`)."""

    def __post_init__(self) -> None:
        usable = (p for p in self.pools if not p.incomplete and not p.invalid)
        object.__setattr__(self, "plain", all(p.plain for p in usable))

    """:meth:`Inventory.plain_candidates`, by the class's and the request's selectors."""


def _same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


# --- the allocator ----------------------------------------------------------------------


_Candidate = tuple[_Pool, ResourceSlice, Device, DeviceID]
"""A device where the search found it."""


@dataclass(slots=True)
class _RequestData:
    """``requestData``: a request, or one subrequest, ready for the search."""

    spec: RequestSpec
    parent: str | None
    """The parent request's name for a subrequest."""
    device_class: DeviceClass
    num_devices: int
    all_devices: list[_Candidate] | None = None
    selected_sub: int = 0

    @property
    def name(self) -> str:
        return f"{self.parent}/{self.spec.name}" if self.parent else self.spec.name


@dataclass(slots=True)
class _Result:
    request: str
    parent: str | None
    spec: RequestSpec
    id: DeviceID
    device: Device
    slice: ResourceSlice
    share_id: str | None = None
    consumed: dict[str, Quantity] | None = None


class _Constraint:
    """``matchAttributeConstraint`` / ``distinctAttributeConstraint``."""

    __slots__ = ("attribute", "count", "distinct", "requests", "seen", "value")

    def __init__(self, requests: tuple[str, ...], attribute: str, distinct: bool) -> None:
        self.requests = frozenset(requests)
        self.attribute = attribute
        self.distinct = distinct
        self.value: object = None
        self.seen: dict[str, object] = {}
        self.count = 0

    def _applies(self, request: str, sub: str | None) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (sub is not None and f"{request}/{sub}" in self.requests)

    def add(self, request: str, sub: str | None, device: Device, device_id: DeviceID) -> bool:
        if not self._applies(request, sub):
            return True
        value = _lookup_attribute(device, device_id, self.attribute)
        if value is None:
            return False
        if self.distinct:
            if self.count and any(_same_attribute(value, seen) for seen in self.seen.values()):
                return False
            self.seen[request] = value
        elif self.count == 0:
            self.value = value
        elif not _same_attribute(value, self.value):
            return False
        self.count += 1
        return True

    def remove(self, request: str, sub: str | None) -> None:
        if not self._applies(request, sub):
            return
        if self.distinct:
            self.seen.pop(request, None)
        self.count -= 1


def _same_attribute(a: object, b: object) -> bool:
    """Equal values of the same attribute type (a bool is never an int here). Versions
    compare as written, build metadata included, as upstream compares their strings."""
    if isinstance(a, SemVer):
        return isinstance(b, SemVer) and str(a) == str(b)
    return type(a) is type(b) and a == b


def _lookup_attribute(device: Device, device_id: DeviceID, name: str) -> object:
    """``lookupAttribute``: the fully qualified name, or the bare ID in the driver's domain."""
    value = device.attributes.get(name)
    if value is not None:
        return value
    domain, sep, ident = name.partition("/")
    if not sep or domain != device_id.driver:
        return None
    return device.attributes.get(ident)


def _consumed(requested: Quantity | None, capacity: DeviceCapacity) -> Quantity:
    """``calculateConsumedCapacity``."""
    policy = capacity.request_policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return capacity.value
    if policy is None:
        return requested
    if policy.valid_range is not None:
        valid = policy.valid_range
        if requested.value < valid.min.value:
            return valid.min
        if valid.step is None:
            return requested
        # roundUpRange works on Quantity.Value(): whole units, rounded up.
        low, step = _whole(valid.min.value), _whole(valid.step.value)
        steps = -(-(_whole(requested.value) - low) // step)
        return Quantity.of(low + step * steps)
    if policy.valid_values:
        for value in policy.valid_values:
            if requested.value <= value.value:
                return value
    return requested


def _whole(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def _violates(consumed: Quantity, capacity: DeviceCapacity) -> bool:
    """``violatesPolicy``."""
    policy = capacity.request_policy
    if policy is None:
        return False
    if policy.default is not None and consumed.value == policy.default.value:
        return False
    if policy.valid_range is not None:
        valid = policy.valid_range
        if valid.max is not None and consumed.value > valid.max.value:
            return True
        if valid.step is not None:
            return (_whole(consumed.value) - _whole(valid.min.value)) % _whole(
                valid.step.value
            ) != 0
        return False
    if policy.valid_values:
        return all(consumed.value != v.value for v in policy.valid_values)
    return False


def _fits_capacity(
    spec: RequestSpec,
    device: Device,
    allocated: Mapping[str, Decimal] | None,
    allocating: Mapping[str, Decimal] | None,
) -> bool | None:
    """``CmpRequestOverCapacity``: ``None`` when the request names a capacity the device
    lacks (upstream's error, which skips the device), else whether it fits."""
    requests = spec.capacity_requests
    if requests:
        for name in requests:
            if name not in device.capacity:
                return None
    for name, capacity in device.capacity.items():
        consumed = _consumed(requests.get(name) if requests else None, capacity)
        if _violates(consumed, capacity):
            return False
        total = consumed.value
        if allocated is not None:
            total += allocated.get(name, 0)
        if allocating is not None:
            total += allocating.get(name, 0)
        if total > capacity.value.value:
            return False
    return True


def _tolerated(device: Device, spec: RequestSpec) -> bool:
    """Not ``taintPreventsAllocation``."""
    for taint in device.taints:
        if taint.effect in (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE) and not any(
            t.tolerates(taint) for t in spec.tolerations
        ):
            return False
    return True


class Allocator:
    """Allocates claims on a node against one cluster state (``structured.Allocator``).

    ``classes`` are all DeviceClasses by name, ``inventory`` the slices (an
    :class:`Inventory` to share its caches across pods, or the slices themselves),
    ``in_use`` what other claims hold. :meth:`allocate` may be called for many nodes.
    ``new_share_id`` makes the share IDs of devices that allow multiple allocations
    (random UUIDs, as upstream; tests pass a fixed one)."""

    def __init__(
        self,
        classes: Mapping[str, DeviceClass],
        inventory: Inventory | Iterable[ResourceSlice],
        in_use: InUse | None = None,
        *,
        new_share_id: Callable[[], str] | None = None,
    ) -> None:
        self.classes = classes
        self.inventory = inventory if isinstance(inventory, Inventory) else Inventory(inventory)
        self.in_use = in_use if in_use is not None else InUse()
        self.new_share_id = (
            new_share_id if new_share_id is not None else (lambda: str(uuid.uuid4()))
        )
        self._available: dict[PoolID, dict[str, dict[str, Decimal]]] = {}
        self._lock = threading.Lock()
        self.invocations = 0
        """How often the search took a step (``NumAllocateOneInvocations``), over all calls."""
        self._prepared: dict[
            tuple[int, ...],
            tuple[Sequence[ResourceClaim], dict[_RequestKey, _RequestData], int],
        ] = {}
        self._last: (
            tuple[Sequence[ResourceClaim], tuple[dict[_RequestKey, _RequestData], int]] | None
        ) = None
        """The claims :meth:`prepared` answered last (that very sequence), and its answer."""

    def prepared(
        self, claims: Sequence[ResourceClaim]
    ) -> tuple[dict[_RequestKey, _RequestData], int] | None:
        """The validated requests of plain ``claims`` and their step count, if a search
        on another node remembered them (:meth:`_Search._plain_steps`)."""
        last = self._last
        if last is not None and last[0] is claims:  # the plugin asks with one list a cycle
            return last[1]
        found = self._prepared.get(tuple(map(id, claims)))
        if found is None or any(a is not b for a, b in zip(found[0], claims, strict=True)):
            return None
        self._last = (claims, (found[1], found[2]))
        return found[1], found[2]

    def remember(
        self,
        claims: Sequence[ResourceClaim],
        requests: dict[_RequestKey, _RequestData],
        steps: int,
    ) -> None:
        with self._lock:
            self._prepared[tuple(map(id, claims))] = (tuple(claims), requests, steps)

    def allocate(
        self,
        node: api.Node,
        claims: Sequence[ResourceClaim],
        *,
        should_stop: Callable[[], bool] | None = None,
    ) -> Outcome:
        """Devices for ``claims`` on ``node``. A claim that is already allocated (a shared
        claim) is not allocated again: its node selector must admit the node, and its
        allocation is returned as it is. ``should_stop`` is polled during the search (the
        plugin's filter timeout); when it says so the outcome is an error."""
        pending = claims  # that very sequence while none is allocated (:meth:`prepared`)
        if any(c.allocation is not None for c in claims):
            for claim in claims:
                if claim.allocation is not None and not node_selector_matches(
                    claim.allocation.node_selector, node
                ):
                    return Outcome(Verdict.UNSCHEDULABLE, reason=MSG_NOT_ON_NODE)
            pending = [c for c in claims if c.allocation is None]
        if not pending:
            return Outcome(Verdict.ALLOCATED, tuple(c.allocation for c in claims if c.allocation))
        try:
            prepared = self.prepared(pending)
            search = None
            if prepared is not None:
                search = self._plain_search(node, pending, prepared, should_stop)
            if search is None:
                search = _Search(self, node, pending, should_stop)
                if not search.run(descend=prepared is None):
                    return Outcome(Verdict.UNSCHEDULABLE, reason=search.failure)
            if _node_local(search.results):  # building them cannot fail: later, if asked
                return Outcome(
                    Verdict.ALLOCATED,
                    build=lambda: _aligned(claims, search.solution()),
                    count=len(claims),
                )
            return Outcome(Verdict.ALLOCATED, _aligned(claims, search.solution()))
        except _Fatal as exc:
            return Outcome(Verdict.ERROR, reason=str(exc))

    def _plain_search(
        self,
        node: api.Node,
        claims: Sequence[ResourceClaim],
        prepared: tuple[dict[_RequestKey, _RequestData], int],
        should_stop: Callable[[], bool] | None,
    ) -> _Search | None:
        """The search's solution found by its first descent (:func:`_descend`), for
        claims validated as plain on an earlier node (``prepared``: their requests and
        the search's step count); ``None``: the full search runs."""
        requests, steps = prepared
        try:
            node_pools = self.inventory.node_pools(node)
        except _Fatal:
            return None  # the search reports it
        found = _descend(self, node_pools, claims, requests, should_stop)
        if found is None:
            return None
        self.invocations += steps
        return _Search(self, node, claims, None, solved=(requests, found))

    def available_counters(self, pool: _Pool) -> dict[str, dict[str, Decimal]]:
        """What the pool's counter sets have left after devices allocated elsewhere."""
        cached = self._available.get(pool.id)
        if cached is not None:
            return cached
        available = {
            name: {c: q.value for c, q in cs.counters.items()}
            for name, cs in pool.counter_sets.items()
        }
        for s in (*pool.slices, *pool.other_slices):
            for device, device_id in zip(s.devices, s.device_ids, strict=True):
                if not device.consumes_counters:
                    continue
                if not self.in_use.is_allocated(device_id):
                    continue
                for consumption in device.consumes_counters:
                    counters = available.get(consumption.counter_set)
                    if counters is None:
                        continue
                    for name, amount in consumption.counters.items():
                        if name in counters:
                            counters[name] -= amount.value
        with self._lock:
            self._available[pool.id] = available
        return available


def _aligned(
    claims: Sequence[ResourceClaim], found: list[AllocationResult]
) -> tuple[AllocationResult, ...]:
    """One allocation per claim: its own if it had one, else the next one ``found``."""
    fresh = iter(found)
    return tuple(c.allocation if c.allocation is not None else next(fresh) for c in claims)


_RequestKey = tuple[int, int, int]
"""(claim index, request index, subrequest index)."""


def _descend(
    owner: Allocator,
    node_pools: _NodePools,
    claims: Sequence[ResourceClaim],
    requests: Mapping[_RequestKey, _RequestData],
    should_stop: Callable[[], bool] | None,
) -> list[list[_Result]] | None:
    """The depth-first search's first descent, without its recursion, for plain claims
    (:meth:`_Search._plain_steps`) on pools of plain devices: per claim, the devices
    chosen, or ``None`` when it does not place them all. Nothing then couples one device
    to another, so a descent that places every device *is* the search's first solution
    (same devices, same errors on the way). When it fails, the search runs from
    scratch: another choice for an earlier request might leave room for a later one."""
    if not node_pools.plain:
        return None
    inventory = owner.inventory
    in_use = owner.in_use
    devices_in_use = in_use.devices
    consumed = in_use.consumed_capacity
    taken: set[DeviceID] = set()
    found: list[list[_Result]] = []
    for claim_index, claim in enumerate(claims):
        results: list[_Result] = []
        found.append(results)
        for request_index in range(len(claim.spec.requests)):
            data = requests[(claim_index, request_index, 0)]
            spec = data.spec
            needed = data.num_devices
            if should_stop is not None and should_stop():
                raise _Fatal("filter operation aborted: timed out trying to allocate devices")
            candidates = inventory.plain_candidates(node_pools, data.device_class, spec)
            if candidates is None:
                return None  # the search meets the error where upstream does
            for _, s, device, device_id in candidates:
                if device_id in taken or device_id in devices_in_use:
                    continue
                # _Search._fits with nothing being allocated yet
                if not (
                    device.plain_capacity
                    and not spec.capacity_requests
                    and (not consumed or device_id not in consumed)
                ) and not _fits_capacity(spec, device, consumed.get(device_id), None):
                    continue
                if device.taints and not _tolerated(device, spec):
                    continue
                taken.add(device_id)
                results.append(_Result(spec.name, None, spec, device_id, device, s))
                needed -= 1
                if not needed:
                    break
            if needed:
                return None
    return found


def _node_local(found: list[list[_Result]]) -> bool:
    """Whether every claim's first device is local to the node (or binds to it): its
    node selector is then the node itself, and building the results cannot fail
    (``createNodeSelector`` refuses only selectors it reaches before that)."""
    for results in found:
        if not results:
            continue
        first = results[0]
        node_name = (
            first.device.node_name
            if first.slice.per_device_node_selection
            else first.slice.node_name
        )
        if not (node_name or first.device.binds_to_node):
            return False
    return True


class _Search:
    """One ``Allocate`` call: the per-call state of upstream's ``allocator`` struct."""

    def __init__(
        self,
        owner: Allocator,
        node: api.Node,
        claims: Sequence[ResourceClaim],
        should_stop: Callable[[], bool] | None,
        *,
        solved: tuple[dict[_RequestKey, _RequestData], list[list[_Result]]] | None = None,
    ) -> None:
        """``solved``: the validated requests and the devices chosen for them (the
        search's solution found without it; what :meth:`solution` builds from)."""
        self.owner = owner
        self.inventory = owner.inventory
        self.in_use = owner.in_use
        self.node = node
        self.claims = claims
        self.should_stop = should_stop
        self.failure = MSG_CANNOT_ALLOCATE
        self.requests: dict[_RequestKey, _RequestData] = {}
        self.constraints: list[list[_Constraint]] = []
        self.results: list[list[_Result]] = []
        if solved is not None:
            self.requests, self.results = solved
            return
        self.results = [[] for _ in claims]
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Decimal]] = {}
        self.consumed_counters: dict[PoolID, dict[str, dict[str, Decimal]]] = {}
        self.matches: dict[tuple[DeviceID, _RequestKey], bool] = {}
        try:
            self.node_pools = self.inventory.node_pools(node)
            self.pools = self.node_pools.pools
        except _Fatal as exc:
            raise _Fatal(f"gather pool information: {exc}") from None

    # -- setup ----------------------------------------------------------------------

    def _claim_label(self, index: int) -> str:
        return self.claims[index].key

    def _validate(self, key: _RequestKey, spec: RequestSpec, parent: str | None) -> _RequestData:
        """``validateDeviceRequest``."""
        label = self._claim_label(key[0])
        for i, selector in enumerate(spec.selectors):
            if selector is None:
                raise _Fatal(
                    f"claim {label}, request {spec.name}, selector #{i}: CEL expression empty "
                    "(unsupported selector type?)"
                )
        if not spec.device_class_name:
            raise _Fatal(
                f"claim {label}, request {spec.name}: missing device class name "
                "(unsupported request type?)"
            )
        device_class = self.owner.classes.get(spec.device_class_name)
        if device_class is None:
            raise _Fatal(
                f"claim {label}, request {spec.name}: could not retrieve device class "
                f"{spec.device_class_name}: deviceclass.resource.k8s.io "
                f'"{spec.device_class_name}" not found'
            )
        data = _RequestData(spec, parent, device_class, 0)
        if spec.allocation_mode is AllocationMode.EXACT_COUNT:
            data.num_devices = spec.count
            return data
        devices: list[_Candidate] = []
        for pool in self.pools:
            if pool.incomplete:
                raise _Fatal(
                    f"claim {label}, request {spec.name}: asks for all devices, but resource pool "
                    f"{pool.id} is currently being updated"
                )
            if pool.invalid:
                raise _Fatal(
                    f"claim {label}, request {spec.name}: asks for all devices, but resource pool "
                    f"{pool.id} is currently invalid"
                )
            for s in pool.slices:
                for device, device_id in zip(s.devices, s.device_ids, strict=True):
                    if not self._selectable(key, data, s, device, device_id):
                        continue
                    if not self._fits(data.spec, device, device_id):
                        continue
                    devices.append((pool, s, device, device_id))
        data.all_devices = devices
        data.num_devices = len(devices)
        return data

    def _prepare(self) -> None:
        for claim_index, claim in enumerate(self.claims):
            minimum = 0
            for request_index, request in enumerate(claim.spec.requests):
                if request.first_available:
                    fewest = None
                    for sub_index, sub in enumerate(request.first_available):
                        key = (claim_index, request_index, sub_index)
                        data = self._validate(key, sub, request.name)
                        self.requests[key] = data
                        fewest = (
                            data.num_devices if fewest is None else min(fewest, data.num_devices)
                        )
                    minimum += fewest or 0
                elif request.exactly is not None:
                    key = (claim_index, request_index, 0)
                    data = self._validate(key, request.exactly, None)
                    self.requests[key] = data
                    minimum += data.num_devices
                else:
                    raise _Fatal(
                        f"claim {claim.key}, request {request.name}: missing device class name "
                        "(unsupported request type?)"
                    )
            if minimum > RESULTS_MAX_SIZE:
                raise _Fatal(
                    f"claim {claim.key}: number of requested devices {minimum} exceeds the claim "
                    f"limit of {RESULTS_MAX_SIZE}"
                )
            constraints = []
            for i, constraint in enumerate(claim.spec.constraints):
                if constraint.match_attribute is not None:
                    constraints.append(
                        _Constraint(constraint.requests, constraint.match_attribute, False)
                    )
                elif constraint.distinct_attribute is not None:
                    constraints.append(
                        _Constraint(constraint.requests, constraint.distinct_attribute, True)
                    )
                else:
                    raise _Fatal(
                        f"claim {claim.key}, constraint #{i}: empty constraint "
                        "(unsupported constraint type?)"
                    )
            self.constraints.append(constraints)

    # -- the search -----------------------------------------------------------------

    def run(self, *, descend: bool = True) -> bool:
        """Whether a solution was found (:meth:`solution` builds it). ``descend``:
        try the first descent (:func:`_descend`) first, unless it was tried already."""
        prepared = self.owner.prepared(self.claims)
        steps: int | None
        if prepared is not None:  # plain claims, validated on an earlier node
            self.requests, steps = prepared
            self.constraints = [[] for _ in self.claims]
        else:
            self._prepare()
            steps = self._plain_steps()
            if steps is not None:
                self.owner.remember(self.claims, self.requests, steps)
        if steps is not None and descend and self._greedy(steps):
            return True
        try:
            done = self._allocate_one(0, 0, 0, 0)
        except _MaxSizeExceeded:
            done = False
        if not done and any(p.invalid for p in self.pools):
            self.failure = MSG_INVALID_POOLS
        return done

    def solution(self) -> list[AllocationResult]:
        """The solution :meth:`run` found, one allocation result per claim."""
        return [self._result(i) for i in range(len(self.claims))]

    def _plain_steps(self) -> int | None:
        """For plain claims (``exactly`` requests for a count of devices, no constraints,
        no admin access, no capacity requests) the steps the search takes to place them
        without backtracking; ``None`` for others. Their prepared requests depend on
        nothing but the claims and the classes: validated once, shared by every node."""
        steps = 1  # the last step, past the last claim
        for claim in self.claims:
            if claim.spec.constraints:
                return None
            for request in claim.spec.requests:
                spec = request.exactly
                if (
                    spec is None
                    or spec.allocation_mode is not AllocationMode.EXACT_COUNT
                    or spec.admin_access
                    or spec.capacity_requests
                ):
                    return None
                steps += spec.count + 1
            steps += 1
        return steps

    def _greedy(self, steps: int) -> bool:
        """:func:`_descend` on this node: when it places every device, its results are
        the search's (and the step count is added as the search would count it)."""
        found = _descend(self.owner, self.node_pools, self.claims, self.requests, self.should_stop)
        if found is None:
            return False
        self.results = found
        self.owner.invocations += steps
        return True

    def _allocate_one(
        self,
        claim_index: int,
        request_index: int,
        sub_index: int,
        device_index: int,
        *,
        in_sub: bool = False,
        start: tuple[int, int, int] = (0, 0, 0),
    ) -> bool:
        """``allocateOne``: place device ``device_index`` of the (sub)request, then the rest."""
        self.owner.invocations += 1
        if self.should_stop is not None and self.should_stop():
            raise _Fatal("filter operation aborted: timed out trying to allocate devices")
        if claim_index >= len(self.claims):
            return True
        claim = self.claims[claim_index]
        if request_index >= len(claim.spec.requests):
            try:
                return self._allocate_one(claim_index + 1, 0, 0, 0)
            except _MaxSizeExceeded:
                return False

        key = (claim_index, request_index, sub_index)
        data = self.requests[key]
        if not in_sub and data.parent is not None:
            all_exceeded = True
            sub = 0
            while (claim_index, request_index, sub) in self.requests:
                try:
                    success = self._allocate_one(
                        claim_index, request_index, sub, device_index, in_sub=True
                    )
                except _MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if success:
                    data.selected_sub = sub
                    return True
                sub += 1
            if all_exceeded:
                raise _MaxSizeExceeded
            return False

        spec = data.spec
        everything = spec.allocation_mode is AllocationMode.ALL
        if everything and not data.all_devices:
            return False
        if device_index >= data.num_devices:
            return self._allocate_one(claim_index, request_index + 1, 0, 0)
        if len(self.results[claim_index]) + data.num_devices - device_index > RESULTS_MAX_SIZE:
            raise _MaxSizeExceeded

        if everything:
            assert data.all_devices is not None
            undo = self._allocate_device(key, data, data.all_devices[device_index], must=True)
            if undo is None:
                return False
            try:
                done = self._allocate_one(
                    claim_index, request_index, sub_index, device_index + 1, in_sub=in_sub
                )
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done

        admin = bool(spec.admin_access)
        pools = self.pools
        for pool_index in range(start[0], len(pools)):
            pool = pools[pool_index]
            if pool.incomplete or pool.invalid:
                continue
            slice_start = start[1] if pool_index == start[0] else 0
            for slice_index in range(slice_start, len(pool.slices)):
                s = pool.slices[slice_index]
                devices, device_ids = s.devices, s.device_ids
                first = start[2] if pool_index == start[0] and slice_index == start[1] else 0
                for index in range(first, len(devices)):
                    device = devices[index]
                    device_id = device_ids[index]
                    if admin:
                        if claim_index in self.allocating.get(device_id, ()):
                            continue
                    elif self._in_use(device_id):
                        continue
                    if not self._selectable(key, data, s, device, device_id):
                        continue
                    if not self._fits(spec, device, device_id):
                        continue
                    candidate = (pool, s, device, device_id)
                    undo = self._allocate_device(key, data, candidate, must=False)
                    if undo is None:
                        continue
                    try:
                        done = self._allocate_one(
                            claim_index,
                            request_index,
                            sub_index,
                            device_index + 1,
                            in_sub=in_sub,
                            start=(pool_index, slice_index, index + 1),
                        )
                    except BaseException:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    def _in_use(self, device_id: DeviceID) -> bool:
        return device_id in self.in_use.devices or bool(self.allocating.get(device_id))

    def _selectable(
        self,
        key: _RequestKey,
        data: _RequestData,
        s: ResourceSlice,
        device: Device,
        device_id: DeviceID,
    ) -> bool:
        """``isSelectable``: the class's selectors, the request's, per-device node selection."""
        match_key = (device_id, key)
        cached = self.matches.get(match_key)
        if cached is not None:
            return cached
        verdict = self._check_selectors(key, data, s, device)
        if verdict and s.per_device_node_selection:
            verdict = _node_matches(
                self.node, device.node_name, device.all_nodes, device.node_selector
            )
        self.matches[match_key] = verdict
        return verdict

    def _check_selectors(
        self, key: _RequestKey, data: _RequestData, s: ResourceSlice, device: Device
    ) -> bool:
        for of_class, selectors in (
            (True, data.device_class.selectors),
            (False, data.spec.selectors),
        ):
            for i, expression in enumerate(selectors):
                if expression is None:
                    raise _Fatal(
                        f"{self._owner(of_class, key, data)}: selector #{i}: CEL expression"
                        " empty (unsupported selector type?)"
                    )
                try:
                    if not self.inventory.selector_verdict(expression, s.driver, device):
                        return False
                except CelError as exc:
                    kind = "compile" if exc.at_compile else "runtime"
                    raise _Fatal(
                        f"{self._owner(of_class, key, data)}: selector #{i}: CEL {kind} error:"
                        f" {exc}"
                    ) from None
        return True

    def _owner(self, of_class: bool, key: _RequestKey, data: _RequestData) -> str:
        """Whose selector an error names (built only for the error)."""
        if of_class:
            return f"class {data.device_class.name}"
        return f"claim {self._claim_label(key[0])}"

    def _fits(self, spec: RequestSpec, device: Device, device_id: DeviceID) -> bool:
        allocated = self.in_use.consumed_capacity.get(device_id)
        allocating = self.allocating_capacity.get(device_id)
        if (
            not spec.capacity_requests
            and device.plain_capacity
            and allocated is None
            and allocating is None
        ):
            return True  # each capacity is consumed whole, and nothing else consumes it
        return bool(_fits_capacity(spec, device, allocated, allocating))

    def _allocate_device(
        self,
        key: _RequestKey,
        data: _RequestData,
        candidate: _Candidate,
        *,
        must: bool,
    ) -> Callable[[], None] | None:
        """``allocateDevice``: take the device if it is free and keeps the constraints;
        returns how to give it back, or ``None`` (nothing changed)."""
        pool, s, device, device_id = candidate
        claim_index = key[0]
        spec = data.spec
        admin = bool(spec.admin_access)
        multiple = device.allow_multiple_allocations
        if not multiple and admin and claim_index in self.allocating.get(device_id, ()):
            return None
        if not admin and self._in_use(device_id):
            return None
        skip_counters = multiple and (
            device_id in self.in_use.consumed_capacity or device_id in self.allocating_capacity
        )
        counters_taken = False
        if not skip_counters and device.consumes_counters:
            if not self._take_counters(pool, device):
                return None
            counters_taken = True

        base = data.parent if data.parent is not None else spec.name
        sub = spec.name if data.parent is not None else None
        added: list[_Constraint] = []

        def rollback() -> None:
            for constraint in reversed(added):
                constraint.remove(base, sub)
            if counters_taken:
                self._return_counters(pool, device)

        if not _tolerated(device, spec):
            rollback()
            return None
        for constraint in self.constraints[claim_index]:
            if not constraint.add(base, sub, device, device_id):
                rollback()
                if must:
                    raise _Fatal(
                        f"claim {self._claim_label(claim_index)}, request {spec.name}: cannot add "
                        f"device {device_id} because a claim constraint would not be satisfied"
                    )
                return None
            added.append(constraint)

        marked = False
        if not multiple:
            self.allocating.setdefault(device_id, set()).add(claim_index)
            marked = True
        if not self._fits(spec, device, device_id):
            if marked:
                self.allocating[device_id].discard(claim_index)
            rollback()
            return None
        share_id = None
        consumed: dict[str, Quantity] | None = None
        existed = False
        if multiple:
            requests = spec.capacity_requests or {}
            consumed = {
                name: _consumed(requests.get(name), cap) for name, cap in device.capacity.items()
            }
            share_id = self.owner.new_share_id()
            existed = device_id in self.allocating_capacity
            total = self.allocating_capacity.setdefault(device_id, {})
            for name, amount in consumed.items():
                total[name] = total.get(name, Decimal(0)) + amount.value

        results = self.results[claim_index]
        results.append(
            _Result(spec.name, data.parent, spec, device_id, device, s, share_id, consumed or None)
        )
        size = len(results)

        def undo() -> None:
            del results[size - 1 :]
            if consumed is not None:
                total = self.allocating_capacity[device_id]
                for name, amount in consumed.items():
                    total[name] -= amount.value
                # ConsumedCapacityCollection.Remove drops an entry once all zero; an
                # earlier share of the device keeps it (as an empty entry) as its marker.
                if all(v == 0 for v in total.values()):
                    if existed:
                        total.clear()
                    else:
                        del self.allocating_capacity[device_id]
            if marked:
                self.allocating[device_id].discard(claim_index)
            rollback()

        return undo

    def _take_counters(self, pool: _Pool, device: Device) -> bool:
        """``checkAvailableCounters``: consume the device's counters if they are left."""
        available = self.owner.available_counters(pool)
        consumed = self.consumed_counters.setdefault(pool.id, {})
        for consumption in device.consumes_counters:
            used = consumed.setdefault(consumption.counter_set, {})
            for name, amount in consumption.counters.items():
                used[name] = used.get(name, Decimal(0)) + amount.value
        for set_name, left in available.items():
            used = consumed.get(set_name, {})
            for name, value in left.items():
                if value < used.get(name, 0):
                    self._return_counters(pool, device)
                    return False
        return True

    def _return_counters(self, pool: _Pool, device: Device) -> None:
        consumed = self.consumed_counters[pool.id]
        for consumption in device.consumes_counters:
            counters = consumed[consumption.counter_set]
            for name, amount in consumption.counters.items():
                counters[name] -= amount.value

    # -- the result -----------------------------------------------------------------

    def _result(self, claim_index: int) -> AllocationResult:
        claim = self.claims[claim_index]
        results = tuple(
            DeviceResult(
                request=r.request if r.parent is None else f"{r.parent}/{r.request}",
                driver=r.id.driver,
                pool=r.id.pool,
                device=r.id.device,
                admin_access=True if r.spec.admin_access else None,
                tolerations=r.spec.tolerations,
                binding_conditions=r.device.binding_conditions,
                binding_failure_conditions=r.device.binding_failure_conditions,
                share_id=r.share_id,
                consumed_capacity=r.consumed,
            )
            for r in self.results[claim_index]
        )
        return AllocationResult(
            results=results,
            config=self._configs(claim_index),
            node_selector=self._node_selector(claim.name, self.results[claim_index]),
        )

    def _selected(self, claim_index: int, request_index: int) -> _RequestData:
        data = self.requests[(claim_index, request_index, 0)]
        if data.parent is not None:
            return self.requests[(claim_index, request_index, data.selected_sub)]
        return data

    def _configs(self, claim_index: int) -> tuple[AllocationConfig, ...]:
        """The class configs (once per class, naming every request that used it), then the
        claim's configs that apply to the chosen requests, as ``Allocate`` orders them."""
        claim = self.claims[claim_index]
        configs: list[AllocationConfig] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        for request_index in range(len(claim.spec.requests)):
            data = self._selected(claim_index, request_index)
            name = data.device_class.name
            if name in class_ranges:
                begin, end = class_ranges[name]
                for i in range(begin, end):
                    c = configs[i]
                    configs[i] = AllocationConfig(
                        c.source, (*c.requests, data.name), c.configuration
                    )
                continue
            begin = len(configs)
            for configuration in data.device_class.config:
                configs.append(
                    AllocationConfig(ConfigSource.FROM_CLASS, (data.name,), configuration)
                )
            class_ranges[name] = (begin, len(configs))
        for config in claim.spec.config:
            if not config.requests:
                configs.append(AllocationConfig(ConfigSource.FROM_CLAIM, (), config.configuration))
                continue
            for request_index, request in enumerate(claim.spec.requests):
                entry = AllocationConfig(
                    ConfigSource.FROM_CLAIM, config.requests, config.configuration
                )
                if request.name in config.requests:
                    configs.append(entry)
                    continue
                data = self._selected(claim_index, request_index)
                if data.parent is not None and data.name in config.requests:
                    configs.append(entry)
        return tuple(configs)

    def _node_selector(self, claim_name: str, results: list[_Result]) -> NodeSelector | None:
        """``createNodeSelector``: the node itself if any device is local to it (or binds
        to it); else the requirements of every device's selector, merged into one term."""
        fields: list[api.Requirement] = []
        expressions: list[api.Requirement] = []
        for r in results:
            if r.slice.per_device_node_selection:
                node_name, selector = r.device.node_name, r.device.node_selector
            else:
                node_name, selector = r.slice.node_name, r.slice.node_selector
            if node_name or r.device.binds_to_node:
                only = api.Requirement("metadata.name", "In", (self.node.name,))
                return NodeSelector((api.SelectorTerm(match_fields=(only,)),))
            if selector is None or not selector.terms:
                continue
            if len(selector.terms) > 1:
                raise _Fatal(
                    f"create NodeSelector for claim {claim_name}: unsupported "
                    f"ResourceSlice.NodeSelector with {len(selector.terms)} terms"
                )
            term = selector.terms[0]
            _merge(term.match_fields, fields)
            _merge(term.match_expressions, expressions)
        if fields or expressions:
            return NodeSelector((api.SelectorTerm(tuple(expressions), tuple(fields)),))
        return None


def _merge(source: Iterable[api.Requirement], into: list[api.Requirement]) -> None:
    """``addNewNodeSelectorRequirements``: a requirement is new unless one with the same
    key, operator and set of values is there."""
    for requirement in source:
        values = set(requirement.values)
        if not any(
            r.key == requirement.key
            and r.operator == requirement.operator
            and set(r.values) == values
            for r in into
        ):
            into.append(requirement)
