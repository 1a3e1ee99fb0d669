"""Local ephemeral-storage limits: the evictions the kubelet makes apart from thresholds.

With ``localStorageCapacityIsolation`` (on by default) the kubelet's eviction manager
checks every active pod on every cycle, whatever the thresholds say
(``localStorageEviction``), and evicts a pod at the first of these that it breaks:

1. an emptyDir volume with a positive ``sizeLimit`` uses more than it; memory-backed
   volumes are checked too (their tmpfs usage counts against the limit);
2. the pod's ephemeral usage (its containers' writable layers and logs and its local
   volumes, memory-backed emptyDirs left out) exceeds its pod-level
   ``ephemeral-storage`` limit, which the kubelet computes as the sum of its
   containers' limits, init containers by maximum, plus overhead, and only when one of
   them sets it (:attr:`~nodeagent.model.PodInfo.limits`);
3. one of its app containers uses more than its own ``ephemeral-storage`` limit, its
   usage being its logs plus its writable layer, except that the writable layer is left
   out when the kubelet's "dedicated image filesystem" flag is set: whenever the image
   filesystem is not the node's, so on both the dedicated and the split layouts.

Every violating pod goes in the same cycle, with the hard-eviction grace (1 s) and the
kubelet's message; critical, static and mirror pods are exempt, as from any eviction.
A pod without usage stats is skipped (the kubelet skips a pod its stats do not list).
The engine then evicts for no threshold in that cycle.

Pure: a function of the pods and their usage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodeagent.eviction import messages
from nodeagent.eviction.ranking import is_evictable
from nodeagent.k8s.quantities import QuantityFormat
from nodeagent.model import (
    Eviction,
    FsLayout,
    LocalStorageLimit,
    PodInfo,
    PodUID,
    PodUsage,
    Resource,
)

EPHEMERAL_STORAGE = Resource.EPHEMERAL_STORAGE.value

__all__ = ["LOCAL_STORAGE_GRACE_PERIOD_SECONDS", "dedicated_image_fs", "limit_evictions"]

LOCAL_STORAGE_GRACE_PERIOD_SECONDS = 1
"""Kill grace for a local-storage eviction (the kubelet's immediate-eviction grace)."""


def dedicated_image_fs(layout: FsLayout) -> bool:
    """The kubelet's "dedicated image filesystem" flag: images live on another
    filesystem than the kubelet's root (dedicated and split layouts alike)."""
    return layout is not FsLayout.SINGLE


def limit_evictions(
    pods: Sequence[PodInfo], usage: Mapping[PodUID, PodUsage], layout: FsLayout
) -> tuple[Eviction, ...]:
    """Every pod over one of its local-storage limits, in ``pods`` order, each with the
    first limit it breaks (emptyDir, then pod, then container)."""
    dedicated = dedicated_image_fs(layout)
    evictions = []
    for pod in pods:
        if not (pod.volumes or pod.containers or EPHEMERAL_STORAGE in pod.limits):
            continue  # nothing limited: the common case, decided without a lookup
        record = usage.get(pod.uid)
        if record is None:
            continue
        violation = (
            _empty_dir_violation(pod, record)
            or _pod_violation(pod, record)
            or _container_violation(pod, record, dedicated)
        )
        if violation is not None and is_evictable(pod):
            signal, message = violation
            evictions.append(
                Eviction(
                    pod,
                    signal,
                    LOCAL_STORAGE_GRACE_PERIOD_SECONDS,
                    message,
                    reclaim_estimate=pod_ephemeral_usage(record),
                )
            )
    return tuple(evictions)


def pod_ephemeral_usage(record: PodUsage) -> int:
    """The pod's ephemeral-storage usage as the kubelet's summary totals it: writable
    layers, logs and local volumes (disk-backed), missing figures counting 0."""
    return (record.rootfs or 0) + (record.logs or 0) + (record.local_volumes or 0)


_Violation = tuple[LocalStorageLimit, str] | None


def _empty_dir_violation(pod: PodInfo, record: PodUsage) -> _Violation:
    for volume in pod.volumes:
        limit = volume.size_limit
        if not limit or limit <= 0:
            continue
        used = record.volumes.get(volume.name)
        if used is not None and used > limit:
            return LocalStorageLimit.EMPTY_DIR, messages.empty_dir_limit_message(
                volume.name, limit, volume.size_limit_format
            )
    return None


def _pod_violation(pod: PodInfo, record: PodUsage) -> _Violation:
    limit = pod.limits.get(EPHEMERAL_STORAGE)
    if limit is None or pod_ephemeral_usage(record) <= limit:
        return None
    return LocalStorageLimit.POD, messages.pod_storage_limit_message(
        limit, pod.limit_formats.get(EPHEMERAL_STORAGE, QuantityFormat.BINARY_SI)
    )


def _container_violation(pod: PodInfo, record: PodUsage, dedicated: bool) -> _Violation:
    for container in pod.containers:
        limit = container.ephemeral_storage_limit
        stats = record.containers.get(container.name)
        if not limit or stats is None:
            continue
        used = (stats.logs or 0) + (0 if dedicated else (stats.rootfs or 0))
        if used > limit:
            return LocalStorageLimit.CONTAINER, messages.container_storage_limit_message(
                container.name, limit, container.limit_format
            )
    return None
