"""From a Pod object (JSON, as the API sends it) to :class:`nodeagent.model.PodInfo`.

Pure functions with the kubelet's rules, so the engine ranks and protects pods exactly
as the kubelet would:

* **QoS**: ``status.qosClass`` when the API server has set it, else derived from the
  containers' (and init containers') cpu/memory requests and limits like the kubelet's
  ``GetPodQOS``: no request or limit anywhere is BestEffort; limits for cpu and memory on
  every container with requests equal to limits is Guaranteed; anything else Burstable.
* **critical**: a static or mirror pod, or priority >= 2 000 000 000
  (``system-cluster-critical``); a pod naming one of the two system priority classes
  counts even if admission has not filled ``spec.priority`` in.
* **static / mirror**: the ``kubernetes.io/config.mirror`` annotation marks the mirror
  of a static pod; ``kubernetes.io/config.source`` other than ``api`` a static pod.
* **effective requests and limits**, as ``resourcehelper.PodRequests`` counts them:
  app containers and restartable init containers (sidecars) add up; each regular init
  container needs its own request plus the sidecars started before it; the pod needs
  the larger of the two; pod-level ``spec.resources`` replace the container sums for the
  resources they set; ``spec.overhead`` (RuntimeClass) is added. Values in base units:
  bytes, and millicores for cpu. The ``ephemeral-storage`` limit so computed is the
  pod-level limit the kubelet's local-storage check enforces (a zero one
  included: :func:`pod_limits`).
* **local-storage limits**: each app container's ``ephemeral-storage`` limit, and each
  emptyDir volume's ``medium`` and ``sizeLimit``, each with the format it was written in
  so that the eviction message prints it as the kubelet does (``1G`` stays ``1G``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from decimal import InvalidOperation
from typing import Any, TypeVar

from nodeagent.eviction import units
from nodeagent.model import (
    ContainerInfo,
    EmptyDirVolume,
    PodInfo,
    PodUID,
    QOSClass,
    QuantityFormat,
    Resource,
)

CRITICAL_PRIORITY = 2_000_000_000
"""``scheduling.SystemCriticalPriority``: system-cluster-critical and above."""
SYSTEM_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
SOURCE_ANNOTATION = "kubernetes.io/config.source"
QOS_RESOURCES = ("cpu", "memory")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
T = TypeVar("T")
"""A per-resource amount the container walk adds and compares."""
EPHEMERAL_STORAGE = Resource.EPHEMERAL_STORAGE.value


def quantity(value: Any, resource: str = "") -> int:
    """A resource quantity in base units (millicores for ``cpu``), rounded up.
    Unparseable values count as 0: a pod the API server admitted cannot have them."""
    try:
        amount = units.quantity_value(value)
    except (ValueError, TypeError, InvalidOperation):
        return 0
    if resource == "cpu":
        amount = amount * 1000
    return math.ceil(amount)


def _resources(container: Mapping[str, Any], which: str) -> dict[str, int]:
    values = ((container.get("resources") or {}).get(which)) or {}
    return {name: quantity(value, name) for name, value in values.items()}


def _add(total: dict[str, T], extra: Mapping[str, T], plus: Callable[[T, T], T]) -> None:
    """``addResourceList``: a missing entry becomes the addend, a present one the sum."""
    for name, value in extra.items():
        total[name] = plus(total[name], value) if name in total else value


def _max(total: dict[str, T], other: Mapping[str, T], larger: Callable[[T, T], T]) -> None:
    """``maxResourceList``: each entry the larger of the two."""
    for name, value in other.items():
        total[name] = larger(total[name], value) if name in total else value


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def _containers_aggregate(
    spec: Mapping[str, Any],
    own: Callable[[Mapping[str, Any]], Mapping[str, T]],
    plus: Callable[[T, T], T],
    larger: Callable[[T, T], T],
) -> dict[str, T]:
    """The containers' part of ``PodRequests`` / ``PodLimits``, over any value that adds
    and compares (bytes, or bytes with the format they print in): app containers and
    sidecars add up; each regular init container needs its own plus the sidecars
    started before it; the larger of the two wins."""
    total: dict[str, T] = {}
    for container in spec.get("containers") or ():
        _add(total, own(container), plus)
    sidecars: dict[str, T] = {}
    init_peak: dict[str, T] = {}
    for init in spec.get("initContainers") or ():
        mine = own(init)
        if _is_sidecar(init):
            _add(total, mine, plus)
            _add(sidecars, mine, plus)
            _max(init_peak, sidecars, larger)
        else:
            need = dict(mine)
            _add(need, sidecars, plus)
            _max(init_peak, need, larger)
    _max(total, init_peak, larger)
    return total


def effective_resources(spec: Mapping[str, Any], which: str) -> dict[str, int]:
    """Pod-level ``requests`` or ``limits`` (``which``) as the scheduler and kubelet count
    them; see the module docstring."""
    total = _containers_aggregate(spec, lambda c: _resources(c, which), operator.add, max)
    pod_level = ((spec.get("resources") or {}).get(which)) or {}
    for name in QOS_RESOURCES:
        if name in pod_level:
            total[name] = quantity(pod_level[name], name)
    overhead = {name: quantity(v, name) for name, v in (spec.get("overhead") or {}).items()}
    if which == "limits":
        # overhead only raises limits that exist; an absent limit stays unlimited
        overhead = {name: v for name, v in overhead.items() if name in total}
    _add(total, overhead, operator.add)
    return {name: value for name, value in total.items() if value}


def quantity_format(value: Any) -> QuantityFormat:
    """How a quantity from the API prints (``Quantity.String()`` keeps the format it was
    parsed with: ``1G`` stays ``1G``); binary when it is not a quantity string."""
    try:
        return units.parse_exact_quantity(str(value))[1]
    except units.UnitError:
        return QuantityFormat.BINARY_SI


def _storage_limit(container: Mapping[str, Any]) -> Any:
    return ((container.get("resources") or {}).get("limits") or {}).get(EPHEMERAL_STORAGE)


def pod_limits(spec: Mapping[str, Any]) -> dict[str, int]:
    """:func:`effective_resources` of the limits, where a pod whose containers set an
    ``ephemeral-storage`` limit of 0 keeps it: the kubelet's ``PodLimits`` keeps every
    limit a container names, so its local-storage check takes any usage as over it."""
    limits = effective_resources(spec, "limits")
    containers = (*(spec.get("containers") or ()), *(spec.get("initContainers") or ()))
    if EPHEMERAL_STORAGE not in limits and any(
        _storage_limit(container) is not None for container in containers
    ):
        limits[EPHEMERAL_STORAGE] = 0
    return limits


def storage_limited_containers(spec: Mapping[str, Any]) -> tuple[ContainerInfo, ...]:
    """The app containers that set an ``ephemeral-storage`` limit, with it (init
    containers count only towards the pod-level limit, as in the kubelet)."""
    containers = []
    for container in spec.get("containers") or ():
        written = _storage_limit(container)
        limit = quantity(written or 0)
        if limit:
            containers.append(
                ContainerInfo(str(container.get("name", "")), limit, quantity_format(written))
            )
    return tuple(containers)


_Written = tuple[int, QuantityFormat]
"""A quantity's value and the format ``resource.Quantity`` keeps with it."""


def _storage_limit_written(container: Mapping[str, Any]) -> dict[str, _Written]:
    written = _storage_limit(container)
    if written is None:
        return {}
    return {EPHEMERAL_STORAGE: (quantity(written), quantity_format(written))}


def _add_written(total: _Written, extra: _Written) -> _Written:
    """``Quantity.Add``: the sum keeps its format unless it was zero."""
    return total[0] + extra[0], extra[1] if total[0] == 0 else total[1]


def _larger_written(total: _Written, other: _Written) -> _Written:
    """``maxResourceList``'s choice: the larger quantity, copied with its format (a tie
    keeps the first)."""
    return other if other[0] > total[0] else total


def storage_limit_formats(spec: Mapping[str, Any]) -> dict[str, QuantityFormat]:
    """The format of the pod-level ``ephemeral-storage`` limit when not binary, which
    the kubelet's message prints it in: ``PodLimits`` (the walk of
    :func:`effective_resources`) on values that carry their format."""
    limit = _containers_aggregate(spec, _storage_limit_written, _add_written, _larger_written)
    total = limit.get(EPHEMERAL_STORAGE)
    if total is None:
        return {}
    overhead = (spec.get("overhead") or {}).get(EPHEMERAL_STORAGE)
    if overhead is not None:
        total = _add_written(total, (quantity(overhead), quantity_format(overhead)))
    return {} if total[1] is QuantityFormat.BINARY_SI else {EPHEMERAL_STORAGE: total[1]}


def empty_dir_volumes(spec: Mapping[str, Any]) -> tuple[EmptyDirVolume, ...]:
    """The spec's emptyDir volumes with their medium and ``sizeLimit``."""
    volumes = []
    for volume in spec.get("volumes") or ():
        empty_dir = volume.get("emptyDir")
        if not isinstance(empty_dir, Mapping):
            continue
        size_limit = empty_dir.get("sizeLimit")
        volumes.append(
            EmptyDirVolume(
                name=str(volume.get("name", "")),
                medium=str(empty_dir.get("medium") or ""),
                size_limit=None if size_limit is None else quantity(size_limit),
                size_limit_format=quantity_format(size_limit),
            )
        )
    return tuple(volumes)


def derive_qos(spec: Mapping[str, Any]) -> QOSClass:
    """The kubelet's ``GetPodQOS`` over app and init containers (pod-level resources, when
    set, stand for the containers)."""
    pod_level = spec.get("resources") or {}
    if pod_level.get("requests") or pod_level.get("limits"):
        groups: list[Mapping[str, Any]] = [{"resources": pod_level}]
    else:
        groups = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for container in groups:
        container_limits = {
            name: value
            for name, value in _resources(container, "limits").items()
            if name in QOS_RESOURCES and value
        }
        # the API server defaults a missing request to the limit; raw specs may predate that
        container_requests = {**container_limits, **_resources(container, "requests")}
        for name, value in container_requests.items():
            if name in QOS_RESOURCES and value:
                requests[name] = requests.get(name, 0) + value
        _add(limits, container_limits, operator.add)
        if set(container_limits) != set(QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return QOSClass.BEST_EFFORT
    if guaranteed and all(limits.get(name) == value for name, value in requests.items()):
        return QOSClass.GUARANTEED if len(requests) == len(limits) else QOSClass.BURSTABLE
    return QOSClass.BURSTABLE


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """The engine's view of one pod."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    priority = spec.get("priority")
    priority = int(priority) if isinstance(priority, int) else 0
    mirror = MIRROR_ANNOTATION in annotations
    source = annotations.get(SOURCE_ANNOTATION)
    static = mirror or (source is not None and source != "api")
    critical = (
        static
        or priority >= CRITICAL_PRIORITY
        or spec.get("priorityClassName") in SYSTEM_PRIORITY_CLASSES
    )
    daemonset = any(
        ref.get("kind") == "DaemonSet" and ref.get("controller", False)
        for ref in meta.get("ownerReferences") or ()
    )
    try:
        qos = QOSClass(status["qosClass"])
    except (KeyError, ValueError):
        qos = derive_qos(spec)
    grace = spec.get("terminationGracePeriodSeconds")
    return PodInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=PodUID(str(meta.get("uid", ""))),
        priority=priority,
        qos=qos,
        critical=critical,
        static=static,
        mirror=mirror,
        daemonset=daemonset,
        termination_grace_period_seconds=int(grace) if isinstance(grace, int) else 30,
        requests=effective_resources(spec, "requests"),
        limits=pod_limits(spec),
        labels=dict(meta.get("labels") or {}),
        limit_formats=storage_limit_formats(spec),
        containers=storage_limited_containers(spec),
        volumes=empty_dir_volumes(spec),
    )


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: the pod holds no resources and cannot be evicted."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))
