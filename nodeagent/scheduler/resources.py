"""A pod's effective resource request, computed the way kube-scheduler computes it.

One function serves both uses: the Filter's plain requests (missing means 0) and the
scoring strategies' "non-zero" requests (a container that omits cpu counts 100m, one
that omits memory counts 200 MiB), selected by ``non_missing``.

The rule (reference §5.1): regular containers and sidecars (init containers with
``restartPolicy: Always``) run together, so they add up; each ordinary init container
runs alone next to the sidecars started before it; the pod needs the larger of the two.
Pod-level ``spec.resources.requests`` (cpu, memory, hugepages) replaces the container
aggregate for that resource, and the RuntimeClass overhead is added last.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from nodeagent.scheduler import api

POD_LEVEL_RESOURCES = (api.CPU, api.MEMORY)
"""Resources a pod-level request may set (plus any ``hugepages-*``)."""

NON_ZERO_DEFAULTS: Mapping[str, int] = {
    api.CPU: api.DEFAULT_MILLI_CPU_REQUEST,
    api.MEMORY: api.DEFAULT_MEMORY_REQUEST,
}


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    requests: Mapping[str, int] = field(default_factory=dict)
    sidecar: bool = False
    """An init container with ``restartPolicy: Always``: it keeps running."""


def _with_defaults(
    requests: Mapping[str, int], non_missing: Mapping[str, int] | None
) -> Mapping[str, int]:
    if not non_missing:
        return requests
    missing = {name: value for name, value in non_missing.items() if name not in requests}
    return {**requests, **missing} if missing else requests


def _add(total: dict[str, int], extra: Mapping[str, int]) -> None:
    for name, value in extra.items():
        total[name] = total.get(name, 0) + value


def _max_into(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, value), value)


def pod_requests(
    containers: Iterable[ContainerRequests],
    init_containers: Iterable[ContainerRequests] = (),
    *,
    overhead: Mapping[str, int] | None = None,
    pod_level: Mapping[str, int] | None = None,
    non_missing: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """The pod's request per resource name (base units; milli-CPU for cpu)."""
    total: dict[str, int] = {}
    for container in containers:
        _add(total, _with_defaults(container.requests, non_missing))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in init_containers:
        requests = _with_defaults(container.requests, non_missing)
        if container.sidecar:
            _add(total, requests)
            _add(sidecars, requests)
            _max_into(init_peak, sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
            _max_into(init_peak, running)
    _max_into(total, init_peak)
    if pod_level:
        for name, value in pod_level.items():
            if name in POD_LEVEL_RESOURCES or name.startswith("hugepages-"):
                total[name] = value
    if overhead:
        _add(total, overhead)
    return total
