"""NodeResourcesFit (PreFilter, Filter, PreScore, Score).

Filter (``fitsRequest`` in ``noderesources/fit.go``): the node must have room for one more
pod and, for every resource the pod requests (effective request: containers, init
containers, sidecars, overhead), ``request <= allocatable - requested``; all shortfalls are
reported, and the rejection is unresolvable when a request exceeds even the empty node.

Extended resources backed by DRA (``DRAExtendedResource``, beta, on): a request of an
extended resource that a DeviceClass maps (its ``extendedResourceName``, or the implicit
``deviceclass.resource.kubernetes.io/<class>``) is not checked on a node without that
resource in its allocatable: DynamicResources allocates devices for it there
(``shouldDelegateResourceToDRA``). When the scoring strategy names such a resource, a
node without it in its allocatable is scored by the devices of its class there: how many,
and how many are allocated (``calculateDRAExtendedResourceAllocatableRequest``).

Score (``noderesources/resource_allocation.go``): LeastAllocated (default), MostAllocated or
RequestedToCapacityRatio over the configured resources, using "non-zero" cpu/memory
requests (100m / 200 MiB for a container that omits them). The arithmetic lives in
:mod:`.resource_allocation`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from nodeagent.k8s.resources import CPU, EPHEMERAL_STORAGE, MEMORY
from nodeagent.scheduler import api, config, resource_claims
from nodeagent.scheduler.dra import allocator, cel, model
from nodeagent.scheduler.framework import (
    POD_DELETE_EVENTS,
    POD_SCALE_DOWN_EVENTS,
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.plugins import resource_allocation as ra
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices

NAME = "NodeResourcesFit"
REASON_TOO_MANY_PODS = "Too many pods"
_PRE_FILTER_KEY = f"PreFilter{NAME}"
_PRE_SCORE_KEY = f"PreScore{NAME}"

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
MAX_CUSTOM_PRIORITY_SCORE = 10
_SHAPES_KEPT = 1024
"""Distinct request shapes whose checks are remembered (then forgotten all at once)."""


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


class ResourceSpec(config.ConfigModel):
    name: str = Field(min_length=1)
    weight: int = 0
    """0 means 1 (kube-scheduler's defaulting); otherwise 1..100."""


class UtilizationShapePoint(config.ConfigModel):
    utilization: int = Field(ge=0, le=100)
    score: int = Field(ge=0, le=MAX_CUSTOM_PRIORITY_SCORE)


class RequestedToCapacityRatioParam(config.ConfigModel):
    shape: tuple[UtilizationShapePoint, ...] = ()


class ScoringStrategy(config.ConfigModel):
    type: Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]
    resources: tuple[ResourceSpec, ...] = ()
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = None


DEFAULT_RESOURCES = (ResourceSpec(name=CPU, weight=1), ResourceSpec(name=MEMORY, weight=1))


class Args(config.ConfigModel):
    """``NodeResourcesFitArgs``."""

    ignored_resources: tuple[str, ...] = ()
    """Extended resources the Filter does not check."""
    ignored_resource_groups: tuple[str, ...] = ()
    """Extended-resource domains (the part before ``/``) the Filter does not check."""
    scoring_strategy: ScoringStrategy = ScoringStrategy(
        type="LeastAllocated", resources=DEFAULT_RESOURCES
    )

    @model_validator(mode="after")
    def _check(self) -> Args:
        for i, group in enumerate(self.ignored_resource_groups):
            if "/" in group:
                raise ValueError(f"ignoredResourceGroups[{i}] {group!r}: can't contain '/'")
        strategy = self.scoring_strategy
        for i, resource in enumerate(strategy.resources):
            if not 0 <= resource.weight <= 100:
                raise ValueError(
                    f"scoringStrategy.resources[{i}].weight {resource.weight}: resource weight"
                    f" of {resource.name} not in valid range (0, 100]"
                )
        # kube-scheduler validates a shape whenever one is given (and ignores it unless
        # the type is RequestedToCapacityRatio); that type cannot work without one.
        ratio = strategy.requested_to_capacity_ratio
        shape = "scoringStrategy.requestedToCapacityRatio.shape"
        if (ratio is None and strategy.type == REQUESTED_TO_CAPACITY_RATIO) or (
            ratio is not None and not ratio.shape
        ):
            raise ValueError(
                f"{shape}: at least one point must be specified (required when type is"
                " RequestedToCapacityRatio)"
            )
        points = [p.utilization for p in ratio.shape] if ratio is not None else []
        for i in range(1, len(points)):
            if points[i - 1] >= points[i]:
                raise ValueError(
                    f"{shape}[{i}].utilization {points[i]}: values must be sorted in"
                    " increasing order"
                )
        return self

    def scoring_resources(self) -> list[tuple[str, int]]:
        specs = self.scoring_strategy.resources or DEFAULT_RESOURCES
        return [(spec.name, spec.weight or 1) for spec in specs]


@dataclass(frozen=True, slots=True)
class _Check:
    name: str
    row: int | None
    amount: int


@dataclass(frozen=True, slots=True)
class _Checks:
    """What PreFilter computes once per pod: the checks in report order, and for the
    vectorized Filter their rows and amounts as arrays (``rows`` None: some requested
    resource is on no node, so no node fits)."""

    checks: tuple[_Check, ...]
    rows: slice | NodeIndices | None
    amounts: Int64s
    """The requests, as a column: one per check."""
    delegated: tuple[bool, ...] = ()
    """Per check, whether a DeviceClass maps the resource, so that a node without it
    in its allocatable leaves it to DynamicResources; empty: none does."""

    @classmethod
    def of(cls, checks: tuple[_Check, ...]) -> _Checks:
        amounts = np.array([check.amount for check in checks], dtype=np.int64)[:, None]
        amounts.setflags(write=False)  # shared by every pod of the same requests
        rows = [check.row for check in checks if check.row is not None]
        if len(rows) < len(checks):
            return cls(checks, None, amounts)
        first = rows[0] if rows else 0
        if rows == list(range(first, first + len(rows))):  # cpu, memory: a view
            return cls(checks, slice(first, first + len(rows)), amounts)
        return cls(checks, np.array(rows, dtype=np.intp), amounts)


def _reaches(
    node: api.Node, name: str | None, all_nodes: bool, selector: model.NodeSelector | None
) -> bool:
    """``NodeMatches`` (a selector that does not parse matches nothing)."""
    if name:
        return node.name == name
    return all_nodes or (selector is not None and allocator.node_selector_matches(selector, node))


class DeviceCounts:
    """Per DeviceClass and node: how many devices of the class the node reaches, and
    how many of them are allocated (``calculateDRAResourceTotals``), remembered until
    the catalog changes."""

    def __init__(self, catalog: resource_claims.ResourceCatalog) -> None:
        self._catalog = catalog
        self._generation = -1
        self._found: dict[tuple[str, str], tuple[int, int]] = {}
        self._in_use: AbstractSet[model.DeviceID] = frozenset()
        self._compiler = cel.shared_compiler()

    def __call__(self, device_class: model.DeviceClass, node: api.Node) -> tuple[int, int]:
        catalog = self._catalog
        if catalog.generation != self._generation:
            self._generation = catalog.generation
            self._found = {}
            shared = {r.device_id for a in catalog.shared_allocations() for r in a.results}
            self._in_use = catalog.devices_in_use() | shared
        key = (device_class.name, node.name)
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = self._count(device_class, node)
        return found

    def scoring_inputs(
        self,
        inputs: ra.Inputs,
        resources: Sequence[str],
        pod_requests: Sequence[int],
        snapshot: ClusterSnapshot,
        nodes: NodeIndices,
    ) -> ra.Inputs:
        """:func:`~.resource_allocation.scoring_inputs`' ``inputs`` with the extended
        resources backed by DRA that the pod asks counted in devices on the nodes
        without them in their allocatable (``calculateResourceAllocatableRequest``)."""
        requested, allocatable, included = inputs
        if included is None:  # cpu and memory only
            return inputs
        for i, (name, amount) in enumerate(zip(resources, pod_requests, strict=True)):
            if amount == 0 or not resource_claims.is_dra_extended_resource_name(name):
                continue
            device_class = self._catalog.extended_resource_class(name)
            if device_class is None:
                continue
            for j, index in enumerate(nodes.tolist()):
                if allocatable[i, j] != 0:
                    continue
                capacity, used = self(device_class, snapshot.nodes[index])
                if capacity > 0:
                    allocatable[i, j] = capacity
                    requested[i, j] = used + amount
        return requested, allocatable, included

    def _count(self, device_class: model.DeviceClass, node: api.Node) -> tuple[int, int]:
        capacity = allocated = 0
        for resource_slice in self._catalog.slices():
            if resource_slice.per_device_node_selection:
                devices = [
                    (d, i)
                    for d, i in zip(resource_slice.devices, resource_slice.device_ids, strict=True)
                    if _reaches(node, d.node_name, d.all_nodes, d.node_selector)
                ]
            elif _reaches(
                node,
                resource_slice.node_name,
                resource_slice.all_nodes,
                resource_slice.node_selector,
            ):
                devices = list(zip(resource_slice.devices, resource_slice.device_ids, strict=True))
            else:
                continue
            for device, device_id in devices:
                try:
                    matches = all(
                        self._compiler.matches(e, cel.DeviceInput(resource_slice.driver, device))
                        for e in device_class.selectors
                        if e is not None
                    )
                except cel.CelError:
                    return 0, 0  # upstream gives up on the node: as without devices
                if matches:
                    capacity += 1
                    allocated += device_id in self._in_use
        return capacity, allocated


class NodeResourcesFit:
    name = NAME
    resource_local = True
    """Filter reads only the node and its resource columns (batched preemption)."""

    def __init__(
        self, args: Args, resources: resource_claims.ResourceCatalog | None = None
    ) -> None:
        self.args = args
        self._dra = resources
        """The DeviceClasses that map extended resources (``None``: none can)."""
        self._device_counts = DeviceCounts(resources) if resources is not None else None
        self._ignored = set(args.ignored_resources)
        self._ignored_groups = set(args.ignored_resource_groups)
        self._strategy = args.scoring_strategy.type
        self._resources = args.scoring_resources()
        self._weights = np.array([w for _, w in self._resources], dtype=np.int64)
        self._checked_by_requests: dict[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]
        self._checked_by_requests = {}
        self._checks_by_rows: dict[tuple[object, ...], _Checks] = {}
        ratio = args.scoring_strategy.requested_to_capacity_ratio
        self._shape: list[tuple[int, int]] = [
            (p.utilization, p.score * (api.MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE))
            for p in (ratio.shape if ratio else ())
        ]

    # --- Filter -------------------------------------------------------------------------

    def _ignored_resource(self, name: str) -> bool:
        if not api.is_extended_resource(name):
            return False
        return name in self._ignored or name.split("/", 1)[0] in self._ignored_groups

    def _checked(self, pod: api.Pod) -> tuple[tuple[str, int], ...]:
        """The requests Filter checks, in report order. Pods share a few request
        shapes, so this is remembered per shape (a pure function of the requests)."""
        key = tuple(pod.requests.items())
        found = self._checked_by_requests.get(key)
        if found is None:
            ordered = sorted(key, key=lambda item: (_report_order(item[0]), item[0]))
            found = tuple(
                (name, amount)
                for name, amount in ordered
                if amount > 0 and name != api.PODS and not self._ignored_resource(name)
            )
            if len(self._checked_by_requests) >= _SHAPES_KEPT:
                self._checked_by_requests.clear()
            self._checked_by_requests[key] = found
        return found

    def _checks(self, pod: api.Pod, snapshot: ClusterSnapshot) -> _Checks:
        """The checks against ``snapshot``'s rows (remembered per request shape and
        rows: a row appears when a node first lists a resource)."""
        checked = self._checked(pod)
        rows = tuple(snapshot.row.get(name) for name, _ in checked)
        found = self._checks_by_rows.get((checked, rows))
        if found is None:
            checks = tuple(
                _Check(name, row, amount) for (name, amount), row in zip(checked, rows, strict=True)
            )
            found = _Checks.of(checks)
            if len(self._checks_by_rows) >= _SHAPES_KEPT:
                self._checks_by_rows.clear()
            self._checks_by_rows[(checked, rows)] = found
        return found

    def _mapped(self, name: str) -> bool:
        """Whether a DeviceClass maps extended resource ``name``."""
        return (
            self._dra is not None
            and resource_claims.is_dra_extended_resource_name(name)
            and self._dra.extended_resource_class(name) is not None
        )

    def _delegating(self, checks: _Checks) -> _Checks:
        """``checks`` with the resources DeviceClasses map marked (classes change
        without the request shape changing, so this is not remembered per shape)."""
        mapped = self._dra.extended_resources() if self._dra is not None else None
        if not mapped or not any(c.name in mapped for c in checks.checks):
            return checks
        delegated = tuple(self._mapped(c.name) for c in checks.checks)
        return dataclasses.replace(checks, delegated=delegated)

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        state.write(_PRE_FILTER_KEY, self._delegating(self._checks(pod, snapshot)))
        return None, api.SUCCESS

    def _prepared(self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot) -> _Checks:
        found = state.read(_PRE_FILTER_KEY, _Checks)
        return found if found is not None else self._delegating(self._checks(pod, snapshot))

    def _state(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[tuple[_Check, bool], ...]:
        """The checks, each with whether a node without the resource delegates it."""
        prepared = self._prepared(state, pod, snapshot)
        delegated = prepared.delegated or (False,) * len(prepared.checks)
        return tuple(zip(prepared.checks, delegated, strict=True))

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        prepared = self._prepared(state, pod, snapshot)
        if prepared.delegated:
            return self._filter_delegating(prepared, snapshot, nodes)
        if prepared.rows is None:  # no node has some requested resource
            return np.zeros(len(nodes), dtype=bool)
        fits: Mask = snapshot.pod_count.take(nodes) < snapshot.allowed_pods.take(nodes)
        if prepared.checks:  # all the rows at once: free >= request for every one
            allocatable = snapshot.allocatable[prepared.rows].take(nodes, axis=1)
            free = allocatable - snapshot.requested[prepared.rows].take(nodes, axis=1)
            fits &= (free >= prepared.amounts).all(axis=0)
        return fits

    @staticmethod
    def _filter_delegating(
        prepared: _Checks, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """:meth:`filter` when DeviceClasses map some requested resources: check by
        check, a mapped one passing on the nodes without it in their allocatable."""
        fits: Mask = snapshot.pod_count.take(nodes) < snapshot.allowed_pods.take(nodes)
        for check, delegated in zip(prepared.checks, prepared.delegated, strict=True):
            if check.row is None:
                if not delegated:
                    fits[:] = False
                continue
            allocatable = snapshot.allocatable[check.row].take(nodes)
            ok = check.amount <= allocatable - snapshot.requested[check.row].take(nodes)
            fits &= ok | (allocatable <= 0) if delegated else ok
        return fits

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        reasons: list[str] = []
        unresolvable = False
        if int(snapshot.pod_count[node]) + 1 > int(snapshot.allowed_pods[node]):
            reasons.append(REASON_TOO_MANY_PODS)
        for check, delegated in self._state(state, pod, snapshot):
            allocatable = 0 if check.row is None else int(snapshot.allocatable[check.row, node])
            if delegated and allocatable <= 0:
                continue  # DynamicResources allocates devices for it here
            used = 0 if check.row is None else int(snapshot.requested[check.row, node])
            if check.amount > allocatable - used:
                reasons.append(insufficient(check.name))
                unresolvable = unresolvable or check.amount > allocatable
        if not reasons:
            return api.SUCCESS
        return api.unschedulable(*reasons, unresolvable=unresolvable)

    def filter_statuses(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> tuple[list[api.Status], npt.NDArray[np.intp]]:
        """:meth:`filter_node` for many nodes: nodes share a few shortfall patterns, so
        each distinct pattern's status is built once."""
        checks = self._state(state, pod, snapshot)
        rows = len(checks) + 1
        short = np.zeros((rows, len(nodes)), dtype=bool)
        beyond = np.zeros((rows, len(nodes)), dtype=bool)
        short[0] = snapshot.pod_count[nodes] + 1 > snapshot.allowed_pods[nodes]
        for i, (check, delegated) in enumerate(checks, 1):
            if check.row is None:
                short[i] = beyond[i] = check.amount > 0 and not delegated
                continue
            allocatable = snapshot.allocatable[check.row, nodes]
            short[i] = check.amount > allocatable - snapshot.requested[check.row, nodes]
            beyond[i] = check.amount > allocatable
            if delegated:
                short[i] &= allocatable > 0
                beyond[i] &= allocatable > 0
        names = [REASON_TOO_MANY_PODS, *(insufficient(c.name) for c, _ in checks)]
        bits = np.left_shift(1, np.arange(rows, dtype=np.int64))[:, None]
        code = (short * bits).sum(axis=0) | (beyond.any(axis=0).astype(np.int64) << rows)
        patterns, which = np.unique(code, return_inverse=True)
        statuses = []
        for pattern in patterns.tolist():
            reasons = [names[i] for i in range(rows) if pattern >> i & 1]
            unresolvable = bool(pattern >> rows & 1)
            statuses.append(
                api.unschedulable(*reasons, unresolvable=unresolvable) if reasons else api.SUCCESS
            )
        return statuses, np.ravel(which).astype(np.intp)

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """A shortfall is unresolvable when a request exceeds even the empty node."""
        helps = np.ones(len(nodes), dtype=bool)
        for check, delegated in self._state(state, pod, snapshot):
            if check.row is None:
                if delegated:
                    continue
                return np.zeros(len(nodes), dtype=bool)
            allocatable = snapshot.allocatable[check.row, nodes]
            helps &= (check.amount <= allocatable) | (delegated & (allocatable <= 0))
        return helps

    # --- Score --------------------------------------------------------------------------

    def _pod_scoring_requests(self, pod: api.Pod) -> list[int]:
        out = []
        for name, _ in self._resources:
            if name == CPU:
                out.append(pod.nonzero_cpu)
            elif name == MEMORY:
                out.append(pod.nonzero_memory)
            else:
                out.append(pod.requests.get(name, 0))
        return out

    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        state.write(_PRE_SCORE_KEY, self._pod_scoring_requests(pod))
        return api.SUCCESS

    def _inputs(
        self, pod_requests: list[int], snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> ra.Inputs:
        names = [name for name, _ in self._resources]
        inputs = ra.scoring_inputs(names, pod_requests, snapshot, nodes, nonzero=True)
        if self._device_counts is None:
            return inputs
        return self._device_counts.scoring_inputs(inputs, names, pod_requests, snapshot, nodes)

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s:
        pod_requests = state.read(_PRE_SCORE_KEY, list)
        if pod_requests is None:
            pod_requests = self._pod_scoring_requests(pod)
        requested, allocatable, included = self._inputs(pod_requests, snapshot, nodes)
        if self._strategy == LEAST_ALLOCATED:
            return ra.least_allocated_vector(requested, allocatable, self._weights, included)
        if self._strategy == MOST_ALLOCATED:
            return ra.most_allocated_vector(requested, allocatable, self._weights, included)
        return ra.requested_to_capacity_ratio_vector(
            self._shape, requested, allocatable, self._weights, included
        )

    def score_node(self, pod: api.Pod, snapshot: ClusterSnapshot, node: int) -> int:
        """The scalar formula for one node (the specification the vector form meets)."""
        single = np.array([node], dtype=np.intp)
        req, alloc, inc = ra.first_column(
            self._inputs(self._pod_scoring_requests(pod), snapshot, single)
        )
        weights = [int(w) for w in self._weights]
        if self._strategy == LEAST_ALLOCATED:
            return ra.least_allocated_score(req, alloc, weights, inc)
        if self._strategy == MOST_ALLOCATED:
            return ra.most_allocated_score(req, alloc, weights, inc)
        return ra.requested_to_capacity_ratio_score(self._shape, req, alloc, weights, inc)

    # --- QueueingHints ------------------------------------------------------------------

    def events_to_register(self) -> Sequence[EventHint]:
        hints = [
            EventHint(POD_DELETE_EVENTS | POD_SCALE_DOWN_EVENTS, is_schedulable_after_pod_event),
            EventHint(
                frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_ALLOCATABLE_CHANGE}),
                self.is_schedulable_after_node_change,
            ),
        ]
        if self._dra is not None:  # a class may come to map a resource the pod asks
            hints.append(
                EventHint(
                    frozenset({ClusterEvent.DEVICE_CLASS_ADD, ClusterEvent.DEVICE_CLASS_UPDATE}),
                    is_schedulable_after_device_class_event,
                )
            )
        return tuple(hints)

    def _delegated_on(self, name: str, node: api.Node) -> bool:
        """``shouldDelegateResourceToDRA`` for ``node``."""
        return node.allocatable.get(name, 0) <= 0 and self._mapped(name)

    def fits_empty(self, pod: api.Pod, node: api.Node) -> bool:
        """Whether ``pod`` fits ``node`` with nothing on it (``isFit``)."""
        if node.allocatable.get(api.PODS, 0) < 1:
            return False
        return all(
            amount <= node.allocatable.get(name, 0) or self._delegated_on(name, node)
            for name, amount in self._checked(pod)
        )

    def is_schedulable_after_node_change(self, pod: api.Pod, old: Any, new: Any) -> QueueingHint:
        """Queue when the pod fits the node when empty and the node is new or grew in a
        resource the pod requests (``isSchedulableAfterNodeChange``)."""
        if not self.fits_empty(pod, new):
            return QueueingHint.QUEUE_SKIP
        delegated = self._delegated_on if self._dra is not None else None
        if old is None or requested_resources_increased(pod, old, new, delegated):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP


def _report_order(name: str) -> int:
    """Report order: cpu, memory, ephemeral-storage, then other resources by name."""
    fixed = {CPU: 0, MEMORY: 1, EPHEMERAL_STORAGE: 2}
    return fixed.get(name, 3)


def requested_resources_increased(
    pod: api.Pod,
    old: api.Node,
    new: api.Node,
    delegated: Callable[[str, api.Node], bool] | None = None,
) -> bool:
    """``haveAnyRequestedResourcesIncreased``: more pods allowed, or more of a resource
    the pod requests (or one ``delegated`` to DRA on the new node)."""
    before, after = old.allocatable, new.allocatable
    if after.get(api.PODS, 0) > before.get(api.PODS, 0):
        return True
    return any(
        amount > 0
        and (
            after.get(name, 0) > before.get(name, 0)
            or (delegated is not None and delegated(name, new))
        )
        for name, amount in pod.requests.items()
        if name != api.PODS
    )


def is_schedulable_after_device_class_event(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterDeviceClassEvent``: a class added under the implicit name
    of a resource the pod asks, or naming one in ``extendedResourceName`` (an update
    only when that name changed)."""
    wanted = {name for name, amount in pod.requests.items() if amount > 0}
    if old is not None:
        if old.extended_resource_name == new.extended_resource_name:
            return QueueingHint.QUEUE_SKIP
    elif resource_claims.DEVICE_CLASS_PREFIX + new.name in wanted:
        return QueueingHint.QUEUE
    if new.extended_resource_name and new.extended_resource_name in wanted:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def is_schedulable_after_pod_event(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterPodEvent``: a bound (or nominated) pod deleted, or a pod
    scaled down in a resource the rejected pod requests (``isPodResourcesResizedDown``:
    the rejected pod itself, or a bound pod)."""
    if new is None:
        if not old.node_name and not old.nominated_node_name:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
    if new.uid == pod.uid:
        return QueueingHint.QUEUE
    if not new.node_name:
        return QueueingHint.QUEUE_SKIP
    before, after = old.requests, new.requests
    scaled_down = any(
        amount > 0 and before.get(name, 0) > after.get(name, 0)
        for name, amount in pod.requests.items()
    )
    return QueueingHint.QUEUE if scaled_down else QueueingHint.QUEUE_SKIP


def new(args: Args | None, handle: Handle) -> NodeResourcesFit:
    return NodeResourcesFit(args or Args(), handle.resources)
