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
* the RuntimeClass ``spec.overhead`` is added to every request, and to the limits
  that exist (an absent limit stays unlimited).

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


def is_pod_level_resource(name: str) -> bool:
    """``IsSupportedPodLevelResource``: what ``spec.resources`` may set."""
    return name in (CPU, MEMORY) or name.startswith("hugepages-")


T = TypeVar("T")
"""A per-resource amount the container walk adds and compares: an int, or an int with
the format it prints in."""


@dataclass(frozen=True, slots=True)
class ContainerResources:
    """One container's ``resources``, requests defaulted to limits as the API server
    defaults them."""

    requests: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    sidecar: bool = False
    """An init container with ``restartPolicy: Always``: it keeps running."""


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

    @property
    def has_containers(self) -> bool:
        return bool(self.containers or self.init_containers)


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


def pod_requests(
    pod: PodResources, *, non_zero_defaults: Mapping[str, int] | None = None
) -> dict[str, int]:
    """The pod's request per resource. ``non_zero_defaults`` (kube-scheduler's scoring:
    :data:`NON_ZERO_DEFAULTS`) stand in for what a container omits."""
    defaults = non_zero_defaults if non_zero_defaults and pod.has_containers else None

    def own(container: ContainerResources) -> Mapping[str, int]:
        return _with_defaults(container.requests, defaults) if defaults else container.requests

    total = aggregate(
        map(own, pod.containers),
        ((own(c), c.sidecar) for c in pod.init_containers),
        operator.add,
        max,
    )
    for name, value in pod.pod_requests.items():
        if is_pod_level_resource(name):
            total[name] = value
    add_into(total, pod.overhead, operator.add)
    return total


def pod_limits(pod: PodResources) -> dict[str, int]:
    """The pod's limit per resource; a resource no container limits is absent (unlimited),
    a limit of 0 a container names is kept, as ``PodLimits`` keeps it."""
    total = aggregate(
        (c.limits for c in pod.containers),
        ((c.limits, c.sidecar) for c in pod.init_containers),
        operator.add,
        max,
    )
    for name, value in pod.pod_limits.items():
        if is_pod_level_resource(name):
            total[name] = value
    for name, value in pod.overhead.items():
        if name in total:
            total[name] += value
    return total


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


def read_container(
    fields: FieldReader[P], container: Mapping[str, Any], where: P, *, init: bool
) -> ContainerResources:
    sidecar = init and container.get("restartPolicy") == "Always"
    raw = container.get("resources")
    if raw is None:
        return ContainerResources(sidecar=sidecar)
    rwhere = where / "resources"
    res = fields.mapping(raw, rwhere)
    raw_requests, raw_limits = res.get("requests"), res.get("limits")
    requests = resource_list(fields, raw_requests, rwhere / "requests") if raw_requests else {}
    limits = resource_list(fields, raw_limits, rwhere / "limits") if raw_limits else {}
    for name, amount in limits.items():  # API defaulting: a missing request takes the limit
        requests.setdefault(name, amount)
    return ContainerResources(requests, limits, sidecar)


Visit = Callable[[str, Mapping[str, Any], P], None]
"""Called with each container (``containers`` or ``initContainers``, the container, its
path) as the reader meets it, so a caller reading more of each container walks them once."""


def read_pod_resources(
    fields: FieldReader[P], spec: Mapping[str, Any], where: P, visit: Visit[P] | None = None
) -> PodResources:
    """A pod spec's resources, each container read once."""

    def containers(key: str, *, init: bool) -> tuple[ContainerResources, ...]:
        read = []
        kwhere = where / key
        for i, raw in enumerate(fields.sequence(spec.get(key), kwhere)):
            cwhere = kwhere / i
            container = fields.mapping(raw, cwhere)
            if visit is not None:
                visit(key, container, cwhere)
            read.append(read_container(fields, container, cwhere, init=init))
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
    overhead = spec.get("overhead")
    return PodResources(
        containers=app,
        init_containers=init_containers,
        pod_requests=pod_requests,
        pod_limits=pod_limits,
        overhead=resource_list(fields, overhead, where / "overhead") if overhead else {},
    )
