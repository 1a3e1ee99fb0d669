"""From a Pod object (JSON, as the API sends it) to the agent's :class:`~nodeagent.model.PodInfo`.

A thin view over Kubernetes' pod rules (:mod:`nodeagent.k8s.pods`,
:mod:`nodeagent.k8s.resources`), which kube-scheduler's view in
:mod:`nodeagent.scheduler.objects` shares. What only the agent reads is here:

* **requests and limits** as the kubelet's eviction manager reads them
  (``GetResourceRequestQuantity`` and ``PodLimits`` over the *allocated* pod, so a
  granted resize counts at once and a deferred one not yet), zeros dropped except
  a zero ``ephemeral-storage`` limit, which the kubelet's local-storage check enforces (any
  usage is over it);
* **local-storage limits**: each app container's ``ephemeral-storage`` limit, and each
  emptyDir volume's ``medium`` and ``sizeLimit``, each with the format it was written in
  so that the eviction message prints it as the kubelet does (``1G`` stays ``1G``).

The pods come from the API server, which admitted them, so a malformed field cannot
occur; were one to, it reads as absent (:data:`LENIENT`) rather than losing the pod.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import InvalidOperation
from typing import Any

from nodeagent.k8s import pods as rules
from nodeagent.k8s import quantities
from nodeagent.k8s.pods import QOSClass
from nodeagent.k8s.quantities import QuantityFormat
from nodeagent.k8s.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    PodResources,
    aggregate,
    kubelet_limits,
    kubelet_requests,
    read_pod_resources,
)
from nodeagent.model import ContainerInfo, EmptyDirVolume, PodInfo, PodUID


def quantity(value: Any, resource: str = "") -> int:
    """A resource quantity in base units (millicores for ``cpu``), rounded up.
    Unparseable values count as 0: a pod the API server admitted cannot have them."""
    try:
        amount = quantities.quantity_value(value)
    except (ValueError, TypeError, InvalidOperation):
        return 0
    if resource == CPU:
        amount = amount * 1000
    return math.ceil(amount)


class _Nowhere:
    """No field path: the lenient reader never reports one."""

    def __truediv__(self, part: str | int) -> _Nowhere:
        return self


class _LenientFields:
    """Malformed fields read as empty (a mapping or list) or 0 (a quantity)."""

    def mapping(self, value: Any, where: _Nowhere) -> Mapping[str, Any]:
        return value if isinstance(value, Mapping) else {}

    def sequence(self, value: Any, where: _Nowhere) -> Sequence[Any]:
        return value if isinstance(value, list) else ()

    def quantity(self, resource: str, value: Any, where: _Nowhere) -> int:
        return quantity(value, resource)


LENIENT = _LenientFields()
_NOWHERE = _Nowhere()


def quantity_format(value: Any) -> QuantityFormat:
    """How a quantity from the API prints (``Quantity.String()`` keeps the format it was
    parsed with: ``1G`` stays ``1G``); binary when it is not a quantity string."""
    try:
        return quantities.parse_exact_quantity(str(value))[1]
    except quantities.UnitError:
        return QuantityFormat.BINARY_SI


def _storage_limit(container: Mapping[str, Any]) -> Any:
    return ((container.get("resources") or {}).get("limits") or {}).get(EPHEMERAL_STORAGE)


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
    :func:`~nodeagent.k8s.resources.aggregate`) on values that carry their format."""
    limit = aggregate(
        map(_storage_limit_written, spec.get("containers") or ()),
        (
            (_storage_limit_written(init), init.get("restartPolicy") == "Always")
            for init in spec.get("initContainers") or ()
        ),
        _add_written,
        _larger_written,
    )
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


def read_resources(
    spec: Mapping[str, Any], status: Mapping[str, Any] | None = None
) -> PodResources:
    return read_pod_resources(LENIENT, spec, _NOWHERE, status=status, status_where=_NOWHERE)


def requests_and_limits(resources: PodResources) -> tuple[dict[str, int], dict[str, int]]:
    """The pod's requests and limits as the kubelet's eviction manager counts them (the
    allocated pod: a resize it granted counts, one it deferred does not), without zeros
    but for a zero ``ephemeral-storage`` limit (see the module docstring)."""
    requests = {name: value for name, value in kubelet_requests(resources).items() if value}
    limits = {
        name: value
        for name, value in kubelet_limits(resources).items()
        if value or name == EPHEMERAL_STORAGE
    }
    return requests, limits


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """The engine's view of one pod."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    priority = spec.get("priority")
    priority = int(priority) if isinstance(priority, int) else 0
    daemonset = any(
        ref.get("kind") == "DaemonSet" and ref.get("controller", False)
        for ref in meta.get("ownerReferences") or ()
    )
    resources = read_resources(spec, status)
    try:
        qos = QOSClass(status["qosClass"])
    except (KeyError, ValueError):
        qos = rules.qos_class(resources)
    requests, limits = requests_and_limits(resources)
    grace = spec.get("terminationGracePeriodSeconds")
    return PodInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=PodUID(str(meta.get("uid", ""))),
        priority=priority,
        qos=qos,
        critical=rules.is_critical(annotations, priority, spec.get("priorityClassName")),
        static=rules.is_static(annotations),
        mirror=rules.is_mirror(annotations),
        daemonset=daemonset,
        termination_grace_period_seconds=int(grace) if isinstance(grace, int) else 30,
        requests=requests,
        limits=limits,
        labels=dict(meta.get("labels") or {}),
        limit_formats=storage_limit_formats(spec),
        containers=storage_limited_containers(spec),
        volumes=empty_dir_volumes(spec),
    )


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: the pod holds no resources and cannot be evicted."""
    return rules.is_terminal((pod.get("status") or {}).get("phase"))


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))
