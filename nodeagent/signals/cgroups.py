"""Where the node's cgroups are, and which cgroup belongs to which pod.

Three layouts exist in the wild and nodeagent reads all of them:

* **cgroup v2** (unified): one hierarchy at ``/sys/fs/cgroup`` with ``cgroup.controllers``
  at its root. The root cgroup has no ``memory.current``.
* **cgroup v1**: one hierarchy per controller (``/sys/fs/cgroup/memory``,
  ``/sys/fs/cgroup/pids``...), the same relative path in each.
* **hybrid**: v1 controllers plus a cgroup2 mount at ``/sys/fs/cgroup/unified`` that
  carries no controllers but does carry the ``*.pressure`` files.

The kubelet creates one cgroup per pod under the node-allocatable cgroup ("kubepods"),
named after the pod's UID, under a parent per QoS class (Guaranteed pods sit directly
under kubepods)::

    cgroupfs driver:  /kubepods/burstable/pod<uid>
    systemd driver:   /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice

(the systemd driver spells the UID with ``_`` for ``-``). Reading those names is how
usage is tied to pods without asking the API server.

Directory modification times are not maintained by cgroupfs, so pod discovery lists
the three parent directories on every collection (about 80 µs for 250 pods on a real
kernel) and rebuilds the per-pod paths only for the parents whose listing changed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from nodeagent.k8s.pods import QOSClass
from nodeagent.model import PodUID


class CgroupVersion(StrEnum):
    V1 = "v1"
    V2 = "v2"


class CgroupDriver(StrEnum):
    """How the kubelet names its cgroups (its ``cgroupDriver`` setting)."""

    SYSTEMD = "systemd"
    CGROUPFS = "cgroupfs"


def normalize_cgroup(path: str) -> str:
    """A cgroup path relative to the cgroup mount, spelled ``/`` or ``/a/b``.

    Raises :class:`ValueError` for paths that would escape the mount.
    """
    parts = [part for part in path.strip().split("/") if part and part != "."]
    if ".." in parts:
        raise ValueError(f"cgroup path {path!r} must not contain '..'")
    return "/" + "/".join(parts)


def _join(root: str, cgroup: str) -> str:
    return root if cgroup == "/" else root + cgroup


@dataclass(frozen=True, slots=True)
class CgroupPaths:
    """The resolved cgroup directories the readers (and the kernel triggers) use.

    Directories are absolute paths as this process sees them (below the host root).
    ``node_cgroup`` and ``kubepods_cgroup`` are relative to the cgroup mount.
    """

    version: CgroupVersion | None
    """``None`` when no memory controller was found (cgroup signals are unavailable)."""
    mount: str
    """Where the cgroup filesystems are mounted (``<host root>/sys/fs/cgroup``)."""
    memory_root: str | None
    """Root of the hierarchy carrying the memory controller (v1 ``<mount>/memory``, v2
    ``<mount>``)."""
    unified_root: str | None
    """Root of the cgroup2 hierarchy, if any (v2 ``<mount>``, hybrid ``<mount>/unified``):
    where the ``*.pressure`` files live."""
    pids_root: str | None
    """Root of the hierarchy carrying the pids controller, if any."""
    node_cgroup: str = "/"
    kubepods_cgroup: str | None = None
    """``None`` when no kubepods cgroup was found (no per-pod usage, no allocatable)."""

    @property
    def driver(self) -> CgroupDriver | None:
        if self.kubepods_cgroup is None:
            return None
        if self.kubepods_cgroup.endswith(".slice"):
            return CgroupDriver.SYSTEMD
        return CgroupDriver.CGROUPFS

    def memory_dir(self, cgroup: str) -> str | None:
        """The directory of ``cgroup`` in the memory hierarchy."""
        return None if self.memory_root is None else _join(self.memory_root, cgroup)

    def unified_dir(self, cgroup: str) -> str | None:
        """The directory of ``cgroup`` in the cgroup2 hierarchy."""
        return None if self.unified_root is None else _join(self.unified_root, cgroup)

    def pids_dir(self, cgroup: str) -> str | None:
        return None if self.pids_root is None else _join(self.pids_root, cgroup)

    @property
    def node_memory_dir(self) -> str | None:
        """The node cgroup's memory directory: v1 ``memory.usage_in_bytes`` and
        ``cgroup.event_control`` live here; on v2 it is the cgroup2 directory."""
        return self.memory_dir(self.node_cgroup)

    @property
    def node_unified_dir(self) -> str | None:
        """The node cgroup's cgroup2 directory (``memory.pressure``, ``memory.events``)."""
        return self.unified_dir(self.node_cgroup)

    @property
    def kubepods_memory_dir(self) -> str | None:
        if self.kubepods_cgroup is None:
            return None
        return self.memory_dir(self.kubepods_cgroup)

    @property
    def kubepods_unified_dir(self) -> str | None:
        if self.kubepods_cgroup is None:
            return None
        return self.unified_dir(self.kubepods_cgroup)


KUBEPODS_NAMES = ("kubepods.slice", "kubepods")
"""The node-allocatable cgroup's name with the systemd and the cgroupfs driver."""


def kubepods_candidates(node_cgroup: str) -> tuple[str, ...]:
    """Where the kubelet puts kubepods, most specific first: under the node cgroup (a
    kubelet ``--cgroup-root``), then at the root of the hierarchy.

    Under a systemd slice the kubelet names the child after its parent, as systemd
    requires: ``--cgroup-root=/mynode.slice`` gives
    ``/mynode.slice/mynode-kubepods.slice``.
    """
    candidates: list[str] = []
    if node_cgroup != "/":
        name = node_cgroup.rsplit("/", 1)[-1]
        if name.endswith(".slice"):
            candidates.append(f"{node_cgroup}/{name[: -len('.slice')]}-kubepods.slice")
        candidates += [f"{node_cgroup}/{kubepods}" for kubepods in KUBEPODS_NAMES]
    candidates += [f"/{kubepods}" for kubepods in KUBEPODS_NAMES]
    return tuple(candidates)


def find_kubepods(memory_root: str, node_cgroup: str) -> str | None:
    """The first of :func:`kubepods_candidates` that exists in the memory hierarchy."""
    for candidate in kubepods_candidates(node_cgroup):
        if os.path.isdir(_join(memory_root, candidate)):
            return candidate
    return None


def missing_kubepods_reason(paths: CgroupPaths) -> str:
    """Why there is no kubepods cgroup, for the signals and pods that need one."""
    if paths.memory_root is None:
        return f"no cgroup memory controller under {paths.mount}"
    return (
        f"no kubepods cgroup under {paths.memory_root} (looked for "
        f"{', '.join(kubepods_candidates(paths.node_cgroup))}); set kubepodsCgroup"
    )


def detect_cgroups(
    mount: str, *, node_cgroup: str = "/", kubepods_cgroup: str | None = None
) -> CgroupPaths:
    """Find the hierarchies under ``mount`` and resolve the node and kubepods cgroups.

    ``kubepods_cgroup=None`` means auto-detect (see :func:`find_kubepods`).
    """
    node_cgroup = normalize_cgroup(node_cgroup)
    if os.path.isfile(os.path.join(mount, "cgroup.controllers")):
        version: CgroupVersion | None = CgroupVersion.V2
        memory_root: str | None = mount
        unified_root: str | None = mount
        pids_root: str | None = mount
    else:
        v1_memory = os.path.join(mount, "memory")
        unified = os.path.join(mount, "unified")
        v1_pids = os.path.join(mount, "pids")
        has_memory = os.path.isfile(os.path.join(v1_memory, "memory.usage_in_bytes"))
        version = CgroupVersion.V1 if has_memory else None
        memory_root = v1_memory if has_memory else None
        unified_root = (
            unified if os.path.isfile(os.path.join(unified, "cgroup.controllers")) else None
        )
        pids_root = v1_pids if os.path.isdir(v1_pids) else None
    if kubepods_cgroup is not None:
        kubepods: str | None = normalize_cgroup(kubepods_cgroup)
    elif memory_root is not None:
        kubepods = find_kubepods(memory_root, node_cgroup)
    else:
        kubepods = None
    return CgroupPaths(
        version=version,
        mount=mount,
        memory_root=memory_root,
        unified_root=unified_root,
        pids_root=pids_root,
        node_cgroup=node_cgroup,
        kubepods_cgroup=kubepods,
    )


# --- Pods ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodCgroup:
    """One pod's cgroup and the files the per-second collection reads for it."""

    uid: PodUID
    qos: QOSClass
    cgroup: str
    """Relative to the cgroup mount, e.g. ``/kubepods/burstable/pod<uid>``."""
    memory_dir: str
    usage_file: str
    """``memory.usage_in_bytes`` (v1) or ``memory.current`` (v2)."""
    stat_file: str
    pids_file: str | None
    """``pids.current``, or ``None`` without a pids hierarchy (tasks are then counted)."""

    @property
    def files(self) -> tuple[str, ...]:
        return (self.usage_file, self.stat_file) + ((self.pids_file,) if self.pids_file else ())


@dataclass(frozen=True, slots=True)
class _QosParent:
    qos: QOSClass
    cgroup: str
    prefix: str
    suffix: str


def _qos_parents(kubepods: str) -> tuple[_QosParent, ...]:
    name = kubepods.rsplit("/", 1)[-1]
    if name.endswith(".slice"):
        # systemd: kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice
        stem = name[: -len(".slice")]
        return (
            _QosParent(QOSClass.GUARANTEED, kubepods, f"{stem}-pod", ".slice"),
            _QosParent(
                QOSClass.BURSTABLE,
                f"{kubepods}/{stem}-burstable.slice",
                f"{stem}-burstable-pod",
                ".slice",
            ),
            _QosParent(
                QOSClass.BEST_EFFORT,
                f"{kubepods}/{stem}-besteffort.slice",
                f"{stem}-besteffort-pod",
                ".slice",
            ),
        )
    return (
        _QosParent(QOSClass.GUARANTEED, kubepods, "pod", ""),
        _QosParent(QOSClass.BURSTABLE, f"{kubepods}/burstable", "pod", ""),
        _QosParent(QOSClass.BEST_EFFORT, f"{kubepods}/besteffort", "pod", ""),
    )


def pod_uid_from_cgroup_name(name: str, prefix: str, suffix: str) -> PodUID | None:
    """The pod UID in a pod cgroup's directory name, or ``None`` if it is not one.

    >>> pod_uid_from_cgroup_name("kubepods-burstable-pod12_ab.slice", "kubepods-burstable-pod",
    ...                          ".slice")
    '12-ab'
    """
    if not name.startswith(prefix) or not name.endswith(suffix):
        return None
    uid = name[len(prefix) : len(name) - len(suffix)]
    if not uid or "." in uid:
        return None
    return PodUID(uid.replace("_", "-"))


class PodCgroupIndex:
    """The pod cgroups under kubepods, kept current cheaply.

    :meth:`refresh` lists the three QoS parents and rebuilds the entries of a parent
    only when its listing changed; it returns the pods that disappeared so that their
    open files can be forgotten.
    """

    def __init__(self, paths: CgroupPaths) -> None:
        if paths.kubepods_cgroup is None or paths.memory_root is None:
            raise ValueError("no kubepods cgroup to index")
        self._paths = paths
        self._v2 = paths.version is CgroupVersion.V2
        self._parents = _qos_parents(paths.kubepods_cgroup)
        self._listings: dict[str, list[str]] = {}
        self._by_parent: dict[str, dict[PodUID, PodCgroup]] = {}
        self.pods: Mapping[PodUID, PodCgroup] = {}

    def _entry(self, parent: _QosParent, name: str, uid: PodUID) -> PodCgroup:
        cgroup = f"{parent.cgroup}/{name}"
        memory_dir = self._paths.memory_dir(cgroup)
        assert memory_dir is not None
        pids_dir = self._paths.pids_dir(cgroup)
        return PodCgroup(
            uid=uid,
            qos=parent.qos,
            cgroup=cgroup,
            memory_dir=memory_dir,
            usage_file=memory_dir + ("/memory.current" if self._v2 else "/memory.usage_in_bytes"),
            stat_file=memory_dir + "/memory.stat",
            pids_file=None if pids_dir is None else pids_dir + "/pids.current",
        )

    def refresh(self) -> list[PodCgroup]:
        """Re-list the QoS parents; returns the pods that are gone.

        Raises :class:`OSError` if the kubepods directory itself cannot be listed.
        """
        changed = False
        for parent in self._parents:
            directory = self._paths.memory_dir(parent.cgroup)
            assert directory is not None
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                if parent.cgroup == self._paths.kubepods_cgroup:
                    raise
                names = []  # no pod of this QoS class has been created yet
            if names == self._listings.get(parent.cgroup):
                continue
            changed = True
            self._listings[parent.cgroup] = names
            entries: dict[PodUID, PodCgroup] = {}
            for name in names:
                uid = pod_uid_from_cgroup_name(name, parent.prefix, parent.suffix)
                if uid is not None:
                    entries[uid] = self._entry(parent, name, uid)
            self._by_parent[parent.cgroup] = entries
        if not changed:
            return []
        previous = self.pods
        merged: dict[PodUID, PodCgroup] = {}
        for entries in self._by_parent.values():
            merged.update(entries)
        self.pods = merged
        return [pod for uid, pod in previous.items() if merged.get(uid) != pod]
