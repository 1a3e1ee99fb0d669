"""What lives on which filesystem, per layout: the one table the engine consults for disk.

The kubelet knows three arrangements (``HasDedicatedImageFs``,
``IsContainerFsSeparateFromImageFs``):

============  =====================  ======================  =====================
layout        nodefs                 imagefs                 containerfs
============  =====================  ======================  =====================
single        everything             = nodefs                = nodefs
dedicated     logs, volumes          images, writable layers = imagefs
split         logs, volumes, layers  images only             = nodefs
============  =====================  ======================  =====================

From it follow three things the engine needs: which of a pod's usage figures count for a
disk signal (``rankDiskPressureFunc``, and the usage an eviction frees), which node-level
reclaim can relieve a signal (dead containers free the writable-layer filesystem, unused
images the image filesystem: ``buildSignalToNodeReclaimFuncs``), and which observation
stands in for a filesystem signal the collector did not report (imagefs on a single-fs
node is nodefs).

PSI signals ride along: memory stalls count memory usage; io stalls count what the pod
holds on nodefs (there is no per-pod I/O accounting to rank by, and the pod writing the
most data is the likeliest source of the stall).
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent.model import SIGNAL_RESOURCE, FsLayout, PodUsage, Resource, Signal

__all__ = [
    "RECLAIM_CONTAINERS",
    "RECLAIM_IMAGES",
    "fallback_signal",
    "filesystem_of",
    "pod_usage",
    "reclaim_kinds",
    "reclaimable_amount",
    "usage_fields",
]

RECLAIM_CONTAINERS = "containers"
"""Delete dead containers (frees their writable layers and logs)."""
RECLAIM_IMAGES = "images"
"""Delete unused images."""

_BYTES = ("rootfs", "logs", "local_volumes")
_INODES = ("rootfs_inodes", "logs_inodes", "local_volumes_inodes")
_NODEFS_PARTS = (1, 2)  # logs, local volumes
_LAYER_PARTS = (0,)  # writable layers

# Which filesystem ("node" or "image") each fs signal's numbers come from.
_FILESYSTEM: Mapping[FsLayout, Mapping[str, str]] = {
    FsLayout.SINGLE: {"nodefs": "node", "imagefs": "node", "containerfs": "node"},
    FsLayout.DEDICATED_IMAGEFS: {"nodefs": "node", "imagefs": "image", "containerfs": "image"},
    FsLayout.SPLIT: {"nodefs": "node", "imagefs": "image", "containerfs": "node"},
}
# Which pod usage parts sit on each filesystem.
_PARTS_ON: Mapping[FsLayout, Mapping[str, tuple[int, ...]]] = {
    FsLayout.SINGLE: {"node": (0, 1, 2)},
    FsLayout.DEDICATED_IMAGEFS: {"node": _NODEFS_PARTS, "image": _LAYER_PARTS},
    FsLayout.SPLIT: {"node": (0, 1, 2), "image": ()},
}
# Which filesystem each kind of node-level reclaim frees: dead containers free the
# writable-layer filesystem (containerfs), unused images the image filesystem.
_RECLAIM_FREES: Mapping[str, str] = {RECLAIM_CONTAINERS: "containerfs", RECLAIM_IMAGES: "imagefs"}


def _fs_signal(signal: Signal) -> tuple[str, bool] | None:
    """(filesystem prefix, counts inodes) for a filesystem signal, or None."""
    prefix, _, kind = signal.partition(".")
    if prefix not in ("nodefs", "imagefs", "containerfs"):
        return None
    return prefix, kind == "inodesFree"


def usage_fields(signal: Signal, layout: FsLayout) -> tuple[str, ...]:
    """The :class:`PodUsage` attributes whose sum is a pod's usage for ``signal``."""
    resource = SIGNAL_RESOURCE[signal]
    if resource is Resource.MEMORY:
        return ("memory",)
    if resource is Resource.PIDS:
        return ("processes",)
    fs = _fs_signal(signal)
    prefix, inodes = fs if fs is not None else ("nodefs", False)  # io PSI: as nodefs
    parts = _PARTS_ON[layout][_FILESYSTEM[layout][prefix]]
    names = _INODES if inodes else _BYTES
    return tuple(names[i] for i in parts)


def pod_usage(usage: PodUsage | None, fields: tuple[str, ...]) -> int | None:
    """A pod's usage summed over ``fields``; ``None`` ("no stats") when the pod has no
    usage record or every field is missing. Missing parts of a partial record count 0,
    as the kubelet counts a container without rootfs or logs stats."""
    if usage is None:
        return None
    total = 0
    found = not fields
    for name in fields:
        value = getattr(usage, name)
        if value is not None:
            total += value
            found = True
    return total if found else None


def filesystem_of(signal: Signal, layout: FsLayout) -> str | None:
    """Which filesystem (``"node"`` or ``"image"``) a filesystem signal measures under
    ``layout``; None for other signals."""
    fs = _fs_signal(signal)
    return None if fs is None else _FILESYSTEM[layout][fs[0]]


def reclaim_kinds(signal: Signal, layout: FsLayout) -> tuple[str, ...]:
    """Node-level reclaim that can relieve ``signal``, in the order the kubelet tries it."""
    fs = _fs_signal(signal)
    if fs is None:
        return ()
    filesystems = _FILESYSTEM[layout]
    on = filesystems[fs[0]]
    return tuple(kind for kind, target in _RECLAIM_FREES.items() if filesystems[target] == on)


def reclaimable_amount(
    signal: Signal, layout: FsLayout, reclaimable: Mapping[str, int]
) -> int | None:
    """What node-level reclaim would free for ``signal`` by the observation's figures, or
    ``None`` when reclaim applies but the observation does not say how much it frees."""
    fs = _fs_signal(signal)
    kinds = reclaim_kinds(signal, layout)
    if fs is None or not kinds:
        return 0
    suffix = "Inodes" if fs[1] else ""
    amounts = [reclaimable.get(kind + suffix) for kind in kinds]
    if all(amount is None for amount in amounts):
        return None
    return sum(amount or 0 for amount in amounts)


def fallback_signal(signal: Signal, layout: FsLayout) -> Signal | None:
    """The signal whose observation stands in when ``signal`` itself was not reported:
    imagefs is nodefs on a single filesystem; containerfs is nodefs or imagefs."""
    fs = _fs_signal(signal)
    if fs is None or fs[0] == "nodefs":
        return None
    same_as = next(
        prefix
        for prefix in ("nodefs", "imagefs")
        if _FILESYSTEM[layout][prefix] == _FILESYSTEM[layout][fs[0]]
    )
    if same_as == fs[0]:
        return None
    return Signal(f"{same_as}.{'inodesFree' if fs[1] else 'available'}")
