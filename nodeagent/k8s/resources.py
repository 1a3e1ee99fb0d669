"""A pod's effective requests and limits: Kubernetes' one rule, for the kubelet's view and
kube-scheduler's alike.

This is component-helpers' ``resource.PodRequests`` and ``resource.PodLimits``
(``k8s.io/component-helpers/resource/helpers.go``), which both the kubelet's eviction
manager and kube-scheduler call:

* app containers and sidecars (init containers with ``restartPolicy: Always``) run
  together, so they add up;
* each ordinary init container runs alone beside the sidecars started before it;
  the pod needs the larger of the two;
* pod-level ``spec.resources`` (KEP-2837) replace the container aggregate for the
  resources a pod may set there (cpu, memory, hugepages);
* the RuntimeClass ``spec.overhead`` is added to every request, and to the non-zero
  limits (an absent limit stays unlimited);
* **in-place resize** (GA in 1.35; ``UseStatusResources`` and, for pod-level resources,
  ``InPlacePodLevelResourcesVerticalScaling``, both on in v1.36): while spec and status
  differ, a container (or sidecar; never an ordinary init container) with reported
  ``status.containerStatuses[].resources`` counts the larger of its spec, its actual
  (``resources``) and its allocated (``allocatedResources``) requests, and the larger of
  its spec and actual limits; when the ``PodResizePending`` condition says
  ``Infeasible`` the spec is left out (it will never be granted). ``Deferred`` and
  ``PodResizeInProgress`` change nothing in this rule (``determineEffectiveRequests``).

The kubelet reads a pod differently: its eviction manager sees the *allocated* pod
(``getAllocatedPods``: the spec with what it admitted, ``allocatedResources`` in the
status) through ``GetResourceRequestQuantity``: :func:`kubelet_requests` and
:func:`kubelet_limits`.

kube-scheduler's scoring counts a container that omits cpu or memory as asking for
100m and 200Mi (``NonMissingContainerRequests``): :func:`pod_requests` applies those
defaults when given ``non_zero_defaults``.

:func:`read_pod_resources` reads a pod spec once into :class:`PodResources`, through a
:class:`FieldReader` that decides what a malformed field means: the planner refuses it
with the field's path, the agent (whose pods the API server admitted) counts it as 0.
Amounts are integers in base units: bytes, counts, and millicores for cpu.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, Self, TypeVar

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"

DEFAULT_MILLI_CPU_REQUEST = 100
"""Milli-CPU kube-scheduler's scoring assumes for a container without a cpu request."""
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
"""Bytes kube-scheduler's scoring assumes for a container without a memory request."""
NON_ZERO_DEFAULTS: Mapping[str, int] = {
    CPU: DEFAULT_MILLI_CPU_REQUEST,
    MEMORY: DEFAULT_MEMORY_REQUEST,
}


HUGEPAGES_PREFIX = "hugepages-"


def is_pod_level_resource(name: str) -> bool:
    """``IsSupportedPodLevelResource``: what ``spec.resources`` may set."""
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


def _any_pod_level(amounts: Mapping[str, int]) -> bool:
    return any(map(is_pod_level_resource, amounts))


class ResizePending(StrEnum):
    """The reason of a pod's ``PodResizePending`` condition (the kubelet's verdict on a
    resize it has not granted)."""

    NONE = ""
    DEFERRED = "Deferred"
    """Not now: the node may have room later."""
    INFEASIBLE = "Infeasible"
    """Never on this node: the spec is left out of the accounting."""
    OTHER = "Other"
    """A reason this version does not know: treated as Deferred, as upstream does."""


T = TypeVar("T")
"""A per-resource amount the container walk adds and compares: an int, or an int with
the format it prints in."""


@dataclass(frozen=True, slots=True)
class Reported:
    """What the kubelet reports in a status about resources it manages (a container's
    ``containerStatuses[]`` entry, or the pod's own status)."""

    requests: Mapping[str, int] = field(default_factory=dict)
    """``resources.requests``: what the runtime actually applies (actuated)."""
    limits: Mapping[str, int] = field(default_factory=dict)
    """``resources.limits``, actuated."""
    allocated: Mapping[str, int] | None = None
    """``allocatedResources``: the requests the kubelet admitted; ``None`` when absent."""


@dataclass(frozen=True, slots=True)
class ContainerResources:
    """One container's ``resources``, requests defaulted to limits as the API server
    defaults them, with its status when the kubelet reported resources for it."""

    requests: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    sidecar: bool = False
    """An init container with ``restartPolicy: Always``: it keeps running."""
    name: str = ""
    status: Reported | None = None
    """Its status entry when that has ``resources`` (upstream reads the status only then;
    ``allocatedResources`` alone is kept for the kubelet's view)."""
    allocated: Mapping[str, int] | None = None
    """``allocatedResources`` from its status entry, ``resources`` reported or not."""


@dataclass(frozen=True, slots=True)
class PodResources:
    """What a pod spec says about resources, read once."""

    containers: tuple[ContainerResources, ...] = ()
    init_containers: tuple[ContainerResources, ...] = ()
    pod_requests: Mapping[str, int] = field(default_factory=dict)
    """``spec.resources.requests`` (pod-level resources)."""
    pod_limits: Mapping[str, int] = field(default_factory=dict)
    overhead: Mapping[str, int] = field(default_factory=dict)
    """``spec.overhead``, set by the RuntimeClass admission plugin."""
    status: Reported | None = None
    """The pod-level ``status.resources`` (with ``status.allocatedResources``) when
    reported."""
    resize_pending: ResizePending = ResizePending.NONE
    resize_in_progress: bool = False
    """A ``PodResizeInProgress`` condition: allocated, not yet all actuated."""

    @property
    def has_containers(self) -> bool:
        return bool(self.containers or self.init_containers)

    @property
    def infeasible(self) -> bool:
        """``IsPodResizeInfeasible``."""
        return self.resize_pending is ResizePending.INFEASIBLE

    @property
    def resizing(self) -> bool:
        """A resize is pending or in progress: spec and actual may differ."""
        return self.resize_pending is not ResizePending.NONE or self.resize_in_progress


def add_into(total: dict[str, T], extra: Mapping[str, T], plus: Callable[[T, T], T]) -> None:
    """``addResourceList``: a missing entry becomes the addend, a present one the sum."""
    for name, value in extra.items():
        total[name] = plus(total[name], value) if name in total else value


def max_into(total: dict[str, T], other: Mapping[str, T], larger: Callable[[T, T], T]) -> None:
    """``maxResourceList``: each entry the larger of the two."""
    for name, value in other.items():
        total[name] = larger(total[name], value) if name in total else value


def aggregate(
    containers: Iterable[Mapping[str, T]],
    init_containers: Iterable[tuple[Mapping[str, T], bool]],
    plus: Callable[[T, T], T],
    larger: Callable[[T, T], T],
) -> dict[str, T]:
    """The containers' part of ``PodRequests``/``PodLimits`` over any amount that adds and
    compares. ``init_containers`` pairs each init container's amounts with whether it is
    a sidecar."""
    total: dict[str, T] = {}
    for amounts in containers:
        add_into(total, amounts, plus)
    sidecars: dict[str, T] = {}
    init_peak: dict[str, T] = {}
    for amounts, sidecar in init_containers:
        if sidecar:
            add_into(total, amounts, plus)
            add_into(sidecars, amounts, plus)
            max_into(init_peak, sidecars, larger)
        else:
            running = dict(amounts)
            add_into(running, sidecars, plus)
            max_into(init_peak, running, larger)
    max_into(total, init_peak, larger)
    return total


def _with_defaults(requests: Mapping[str, int], defaults: Mapping[str, int]) -> Mapping[str, int]:
    missing = {name: value for name, value in defaults.items() if name not in requests}
    return {**requests, **missing} if missing else requests


def _largest(*lists: Mapping[str, int] | None) -> dict[str, int]:
    """``max``: each resource named in any list, at its largest."""
    total: dict[str, int] = {}
    for amounts in lists:
        if amounts:
            max_into(total, amounts, max)
    return total


def effective_requests(
    spec: Mapping[str, int], status: Reported | None, infeasible: bool
) -> Mapping[str, int]:
    """``determineEffectiveRequests``: while a resize is pending or under way, the
    larger of spec, actual and allocated; the spec left out when it is infeasible."""
    if status is None:
        return spec
    if infeasible:
        return _largest(status.requests, status.allocated)
    return _largest(spec, status.requests, status.allocated)


def effective_limits(
    spec: Mapping[str, int], status: Reported | None, infeasible: bool
) -> Mapping[str, int]:
    """``determineEffectiveLimits``: the larger of spec and actual; the actual alone
    when the resize is infeasible."""
    if status is None:
        return spec
    if infeasible:
        return dict(status.limits)
    return _largest(spec, status.limits)


def pod_requests(
    pod: PodResources,
    *,
    non_zero_defaults: Mapping[str, int] | None = None,
    use_status: bool = True,
    exclude_overhead: bool = False,
) -> dict[str, int]:
    """The pod's request per resource, as kube-scheduler v1.36 counts it (status
    resources included; ``use_status=False`` reads the spec alone).
    ``non_zero_defaults`` (kube-scheduler's scoring: :data:`NON_ZERO_DEFAULTS`) stand in
    for what a container omits."""
    defaults = non_zero_defaults if non_zero_defaults and pod.has_containers else None
    infeasible = pod.infeasible

    def own(container: ContainerResources, status: bool = True) -> Mapping[str, int]:
        amounts = container.requests
        if status and use_status and container.status is not None:
            amounts = effective_requests(amounts, container.status, infeasible)
        return _with_defaults(amounts, defaults) if defaults else amounts

    total = aggregate(
        map(own, pod.containers),
        ((own(c, c.sidecar), c.sidecar) for c in pod.init_containers),
        operator.add,
        max,
    )
    if pod.pod_requests and _any_pod_level(pod.pod_requests):
        effective = (
            effective_requests(pod.pod_requests, pod.status, infeasible)
            if use_status and pod.status is not None
            else None
        )
        for name, value in pod.pod_requests.items():
            if is_pod_level_resource(name):
                total[name] = value if effective is None else effective.get(name, 0)
    if not exclude_overhead:
        add_into(total, pod.overhead, operator.add)
    return total


def pod_limits(pod: PodResources, *, use_status: bool = True) -> dict[str, int]:
    """The pod's limit per resource, as kube-scheduler v1.36 counts it; a resource no
    container limits is absent (unlimited), a limit of 0 a container names is kept, as
    ``PodLimits`` keeps it (and adds no overhead to it)."""
    infeasible = pod.infeasible

    def own(container: ContainerResources, status: bool) -> Mapping[str, int]:
        if status and use_status:
            return effective_limits(container.limits, container.status, infeasible)
        return container.limits

    total = aggregate(
        (own(c, True) for c in pod.containers),
        ((own(c, c.sidecar), c.sidecar) for c in pod.init_containers),
        operator.add,
        max,
    )
    if _any_pod_level(pod.pod_requests) or _any_pod_level(pod.pod_limits):
        effective = (
            effective_limits(pod.pod_limits, pod.status, infeasible)
            if use_status and pod.status is not None
            else None
        )
        for name, value in pod.pod_limits.items():
            if is_pod_level_resource(name):
                total[name] = value if effective is None else effective.get(name, 0)
    for name, value in pod.overhead.items():
        if total.get(name):
            total[name] += value
    return total


def requests_scaled_down(old: Mapping[str, int], new: Mapping[str, int]) -> bool:
    """``extractPodScaleDown``: some request of ``old`` (a bound pod's
    :func:`pod_requests` before an update) is gone or smaller in ``new``; what such an
    update frees may let a waiting pod fit."""
    return any(name not in new or new[name] < amount for name, amount in old.items())


def allocated(pod: PodResources) -> PodResources:
    """The pod as the kubelet allocated it (``UpdatePodFromAllocation``), as far as the
    API shows it: each container's requests are its ``allocatedResources`` when
    reported. The allocated limits are not in the API: they are the spec's when the
    allocated requests are the spec's (the resize was granted), else the actual limits
    (what the kubelet last applied); the pod level likewise (its
    ``status.allocatedResources`` is ``PodRequests`` of the allocated pod, overhead
    included)."""

    def one(c: ContainerResources) -> ContainerResources:
        if c.allocated is None or c.allocated == c.requests:
            return c
        # only cpu and memory are resizable: the rest is the spec's
        limits = dict(c.limits)
        if c.status is not None:
            limits.update((n, v) for n, v in c.status.limits.items() if n in (CPU, MEMORY))
        fixed = {n: v for n, v in c.requests.items() if n not in (CPU, MEMORY)}
        return ContainerResources({**fixed, **c.allocated}, limits, c.sidecar, c.name)

    pod_requests_ = pod.pod_requests
    pod_limits_ = pod.pod_limits
    if pod.status is not None and pod.status.allocated is not None and pod_requests_:
        granted = {
            name: pod.status.allocated.get(name, 0) - pod.overhead.get(name, 0)
            for name in pod_requests_
            if is_pod_level_resource(name)
        }
        if any(pod_requests_.get(name) != value for name, value in granted.items()):
            pod_requests_ = {**pod_requests_, **granted}
            pod_limits_ = {
                name: pod.status.limits.get(name, value) if is_pod_level_resource(name) else value
                for name, value in pod_limits_.items()
            }
    return PodResources(
        containers=tuple(map(one, pod.containers)),
        init_containers=tuple(map(one, pod.init_containers)),
        pod_requests=pod_requests_,
        pod_limits=pod_limits_,
        overhead=pod.overhead,
    )


def kubelet_requests(pod: PodResources) -> dict[str, int]:
    """The requests the kubelet's eviction manager ranks a pod by, per resource:
    ``GetResourceRequestQuantity`` over the allocated pod. With pod-level resources set,
    the containers are skipped (a resource the pod level does not name requests 0); the
    overhead is added only to a non-zero request."""
    alloc = allocated(pod)
    if _any_pod_level(alloc.pod_requests) or _any_pod_level(alloc.pod_limits):
        total = {n: v for n, v in alloc.pod_requests.items() if is_pod_level_resource(n)}
    else:
        total = pod_requests(alloc, use_status=False, exclude_overhead=True)
    for name, value in alloc.overhead.items():
        if total.get(name):
            total[name] += value
    return total


def kubelet_limits(pod: PodResources) -> dict[str, int]:
    """``PodLimits`` over the allocated pod (the kubelet's local-storage check)."""
    return pod_limits(allocated(pod), use_status=False)


class FieldPath(Protocol):
    """Where a field is, for an error message; ``/`` descends."""

    def __truediv__(self, part: str | int) -> Self: ...


P = TypeVar("P", bound=FieldPath)
P_contra = TypeVar("P_contra", bound=FieldPath, contravariant=True)


class FieldReader(Protocol[P_contra]):
    """How a reader treats the fields of an object: strictly (an error naming the path) or
    leniently (a malformed field reads as empty or 0)."""

    def mapping(self, value: Any, where: P_contra) -> Mapping[str, Any]: ...

    def sequence(self, value: Any, where: P_contra) -> Sequence[Any]: ...

    def quantity(self, resource: str, value: Any, where: P_contra) -> int:
        """``resource``'s amount in base units (millicores for cpu), rounded up; ``where``
        is the path of the list holding it (an error adds the resource's name)."""
        ...


def resource_list(fields: FieldReader[P], value: Any, where: P) -> dict[str, int]:
    if value is None:
        return {}
    return {
        str(name): fields.quantity(str(name), amount, where)
        for name, amount in fields.mapping(value, where).items()
    }


def _reported(fields: FieldReader[P], entry: Mapping[str, Any], where: P) -> Reported | None:
    """A status's ``resources`` and ``allocatedResources``; ``None`` without ``resources``."""
    raw = entry.get("resources")
    if raw is None:
        return None
    res = fields.mapping(raw, where / "resources")
    return Reported(
        resource_list(fields, res.get("requests"), where / "resources" / "requests"),
        resource_list(fields, res.get("limits"), where / "resources" / "limits"),
        _allocated(fields, entry, where),
    )


def _allocated(fields: FieldReader[P], entry: Mapping[str, Any], where: P) -> dict[str, int] | None:
    raw = entry.get("allocatedResources")
    return None if raw is None else resource_list(fields, raw, where / "allocatedResources")


@dataclass(frozen=True, slots=True)
class _ContainerStatus:
    reported: Reported | None
    allocated: dict[str, int] | None


def _container_statuses(
    fields: FieldReader[P], status: Mapping[str, Any], where: P
) -> dict[str, _ContainerStatus]:
    """The status entries by container name (init containers' after, as upstream's map
    is filled)."""
    found: dict[str, _ContainerStatus] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        entries = status.get(key)
        if not entries:  # (a path only where there is a field)
            continue
        for i, raw in enumerate(fields.sequence(entries, where / key)):
            entry = fields.mapping(raw, where / key / i)
            if "resources" in entry or "allocatedResources" in entry:
                here = where / key / i
                found[str(entry.get("name", ""))] = _ContainerStatus(
                    _reported(fields, entry, here), _allocated(fields, entry, here)
                )
    return found


STATUS_FIELDS = (
    "containerStatuses",
    "initContainerStatuses",
    "resources",
    "allocatedResources",
    "conditions",
)
"""The fields of a pod's status the rule reads: a status without any is not read."""


def reads_status(status: Mapping[str, Any]) -> bool:
    return not status.keys().isdisjoint(STATUS_FIELDS)


def resize_conditions(
    fields: FieldReader[P], status: Mapping[str, Any], where: P
) -> tuple[ResizePending, bool]:
    """``PodResizePending``'s reason (the first such condition, as
    ``IsPodResizeInfeasible`` reads it) and whether ``PodResizeInProgress`` is there."""
    pending: ResizePending | None = None
    in_progress = False
    conditions = status.get("conditions")
    if not conditions:
        return ResizePending.NONE, False
    for i, raw in enumerate(fields.sequence(conditions, where / "conditions")):
        condition = fields.mapping(raw, where / "conditions" / i)
        kind = condition.get("type")
        if kind == "PodResizePending" and pending is None:
            reason = condition.get("reason")
            pending = (
                ResizePending(reason)
                if reason in (ResizePending.DEFERRED, ResizePending.INFEASIBLE)
                else ResizePending.OTHER
            )
        elif kind == "PodResizeInProgress":
            in_progress = True
    return pending or ResizePending.NONE, in_progress


def read_container(
    fields: FieldReader[P],
    container: Mapping[str, Any],
    where: P,
    *,
    init: bool,
    statuses: Mapping[str, _ContainerStatus] | None = None,
) -> ContainerResources:
    sidecar = init and container.get("restartPolicy") == "Always"
    name = str(container.get("name", ""))
    status = statuses.get(name) if statuses else None
    reported = None if status is None else status.reported
    allocated = None if status is None else status.allocated
    raw = container.get("resources")
    if raw is None:
        return ContainerResources(sidecar=sidecar, name=name, status=reported, allocated=allocated)
    rwhere = where / "resources"
    res = fields.mapping(raw, rwhere)
    raw_requests, raw_limits = res.get("requests"), res.get("limits")
    requests = resource_list(fields, raw_requests, rwhere / "requests") if raw_requests else {}
    limits = resource_list(fields, raw_limits, rwhere / "limits") if raw_limits else {}
    for amount_name, amount in limits.items():  # API defaulting: a missing request takes the limit
        requests.setdefault(amount_name, amount)
    return ContainerResources(requests, limits, sidecar, name, reported, allocated)


def _default_pod_level(
    requests: dict[str, int],
    limits: dict[str, int],
    containers: tuple[ContainerResources, ...],
    init_containers: tuple[ContainerResources, ...],
) -> None:
    """The API server's pod-level defaulting (``defaultHugePagePodLimits``, then
    ``defaultPodRequests``), when ``spec.resources`` is partly set."""
    if not requests and not limits:
        return
    inits = [(c.limits, c.sidecar) for c in init_containers]
    container_limits = aggregate((c.limits for c in containers), inits, operator.add, max)
    for name, amount in container_limits.items():
        if name.startswith(HUGEPAGES_PREFIX) and name not in requests:
            limits.setdefault(name, amount)
    if not limits:
        return
    container_requests = aggregate(
        (c.requests for c in containers),
        ((c.requests, c.sidecar) for c in init_containers),
        operator.add,
        max,
    )
    for name, amount in container_requests.items():
        # IsOvercommitAllowed: native resources but hugepages (of the pod-level ones:
        # cpu and memory)
        if name in (CPU, MEMORY):
            requests.setdefault(name, amount)
    for name, amount in limits.items():
        if is_pod_level_resource(name):
            requests.setdefault(name, amount)


Visit = Callable[[str, Mapping[str, Any], P], None]
"""Called with each container (``containers`` or ``initContainers``, the container, its
path) as the reader meets it, so a caller reading more of each container walks them once."""


def read_pod_resources(
    fields: FieldReader[P],
    spec: Mapping[str, Any],
    where: P,
    visit: Visit[P] | None = None,
    *,
    status: Mapping[str, Any] | None = None,
    status_where: P | None = None,
) -> PodResources:
    """A pod's resources, each container and its status entry read once. Without a
    ``status`` (or its path), the spec alone."""
    statuses: dict[str, _ContainerStatus] = {}
    pod_status: Reported | None = None
    pending, in_progress = ResizePending.NONE, False
    if status and status_where is not None:
        statuses = _container_statuses(fields, status, status_where)
        pod_status = _reported(fields, status, status_where)
        pending, in_progress = resize_conditions(fields, status, status_where)

    def containers(key: str, *, init: bool) -> tuple[ContainerResources, ...]:
        read = []
        kwhere = where / key
        for i, raw in enumerate(fields.sequence(spec.get(key), kwhere)):
            cwhere = kwhere / i
            container = fields.mapping(raw, cwhere)
            if visit is not None:
                visit(key, container, cwhere)
            read.append(read_container(fields, container, cwhere, init=init, statuses=statuses))
        return tuple(read)

    init_containers = containers("initContainers", init=True)
    app = containers("containers", init=False)
    pod_level = spec.get("resources")
    if pod_level is None:
        pod_requests: dict[str, int] = {}
        pod_limits: dict[str, int] = {}
    else:
        pwhere = where / "resources"
        pod_level = fields.mapping(pod_level, pwhere)
        pod_requests = resource_list(fields, pod_level.get("requests"), pwhere / "requests")
        pod_limits = resource_list(fields, pod_level.get("limits"), pwhere / "limits")
        _default_pod_level(pod_requests, pod_limits, app, init_containers)
    overhead = spec.get("overhead")
    return PodResources(
        containers=app,
        init_containers=init_containers,
        pod_requests=pod_requests,
        pod_limits=pod_limits,
        overhead=resource_list(fields, overhead, where / "overhead") if overhead else {},
        status=pod_status,
        resize_pending=pending,
        resize_in_progress=in_progress,
    )
