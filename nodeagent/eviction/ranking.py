"""Which pods go first: the kubelet's comparator chains, as sort keys.

The kubelet sorts pods with a chain of comparators where the first non-tie decides
(``rankMemoryPressure``, ``rankDiskPressureFunc``, ``rankPIDPressure``). Each chain here
is one key tuple, which sorts identically and costs one key computation per pod instead of
a chain of calls per comparison:

========================  ==========================================================
memory signals            (no stats first) > usage above request first > lower priority
                          first > larger ``usage - request`` first
disk (bytes and inodes)   the same with the signal's disk usage (per layout); "above
                          request" compares with the ephemeral-storage request for bytes
                          and 0 for inodes, while the last key subtracts the
                          ephemeral-storage request in bytes even for inodes (the
                          kubelet's quirk, kept)
pid.available             lower priority first > (no stats first) > more processes first
========================  ==========================================================

A pod without stats sorts ahead of every pod with stats at the first usage comparator,
so for memory and disk missing stats dominate priority. Python's sort is stable, so pods
that tie on the whole chain keep their input order (the kubelet's order is unspecified).

A pod's memory usage is its working set as the observations give it: the kubelet's
(``usage - inactive_file``) by default; with ``activePageCache: reclaimable`` less the
pod's clean active page cache (:func:`nodeagent.eviction.page_cache.view`), so under
genuine pressure the pod that cannot give memory back goes before the one holding the
most cache, and "above request" compares with what the pod could not give back.

Critical pods (priority >= 2e9, or flagged critical), static pods and mirror pods are
never candidates (the kubelet's ``IsCriticalPod``; ``evictPod`` refuses them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodeagent.eviction import layout as fs_layout
from nodeagent.model import SIGNAL_RESOURCE, FsLayout, PodInfo, PodUID, PodUsage, Resource, Signal

__all__ = ["CRITICAL_PRIORITY", "RankedPod", "is_evictable", "rank"]

CRITICAL_PRIORITY = 2_000_000_000
"""``system-cluster-critical``; pods at or above it are critical."""

RankedPod = tuple[PodInfo, int | None]
"""A candidate and its usage for the ranked signal (``None``: no stats)."""

_RankKey = tuple[int, int, int, int]


def is_evictable(pod: PodInfo) -> bool:
    """Not critical (flagged, or by priority), static or mirror: the kubelet refuses the
    rest (``IsCriticalPod``)."""
    return not (pod.critical or pod.static or pod.mirror or pod.priority >= CRITICAL_PRIORITY)


def rank(
    signal: Signal,
    layout: FsLayout,
    pods: Sequence[PodInfo],
    usage: Mapping[PodUID, PodUsage],
) -> list[RankedPod]:
    """Evictable ``pods`` in the order the kubelet would evict them for ``signal``."""
    fields = fs_layout.usage_fields(signal, layout)
    resource = SIGNAL_RESOURCE[signal]
    keyed: list[tuple[_RankKey, RankedPod]] = []
    append = keyed.append
    for pod in filter(is_evictable, pods):
        record = usage.get(pod.uid)
        if len(fields) == 1:  # memory, processes: one figure, no summing
            used = None if record is None else getattr(record, fields[0])
        else:
            used = fs_layout.pod_usage(record, fields)
        append((_key(resource, pod, used), (pod, used)))
    keyed.sort(key=_first)
    return [ranked for _, ranked in keyed]


def _first(item: tuple[_RankKey, RankedPod]) -> _RankKey:
    return item[0]


def _key(resource: Resource, pod: PodInfo, used: int | None) -> _RankKey:
    priority = pod.priority
    if resource is Resource.PIDS:
        return (priority, 0, 0, 0) if used is None else (priority, 1, -used, 0)
    if used is None:
        return (0, 0, priority, 0)
    if resource is Resource.MEMORY:
        request = pod.requests.get("memory", 0)
        return (1, 0 if used > request else 1, priority, request - used)
    storage_request = pod.requests.get("ephemeral-storage", 0)
    exceeds_over = storage_request if resource is Resource.EPHEMERAL_STORAGE else 0
    return (1, 0 if used > exceeds_over else 1, priority, storage_request - used)
