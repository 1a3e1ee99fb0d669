"""Where the loop learns which pods are on the node.

With a cluster, from the API (:class:`CachedPods` over the list + watch
:class:`~nodeagent.agent.podcache.PodCache`): full specs, priorities, owners and the
terminating flag. Standalone, from the kubelet's cgroups (:class:`CgroupPods`): the UID
and the QoS class the cgroup's parent names, nothing else, which is enough to rank by
usage and to say which pod the agent would evict.

Either way the loop gets a :class:`PodView`: the pods the engine may rank (neither
terminal nor terminating), and the UIDs the evictor needs to tell finished evictions
from pending ones. Both sources rebuild their view only when their input changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from nodeagent.agent.podcache import PodCache, PodSnapshot
from nodeagent.model import PodInfo, PodUID
from nodeagent.signals.cgroups import PodCgroup


@dataclass(frozen=True, slots=True)
class PodView:
    pods: tuple[PodInfo, ...] = ()
    """Running pods, the engine's candidates (terminating pods are not)."""
    present: frozenset[PodUID] = frozenset()
    """Every pod on the node, terminating ones included."""
    terminating: frozenset[PodUID] = frozenset()
    synced: bool = False
    """False until the source has listed the node's pods once: an empty view then means
    "not known yet", not "no pods"."""


class PodSource(Protocol):
    def view(self) -> PodView:
        """The pods as last known; cheap, thread-safe, never blocks on the API."""
        ...


def view_of_snapshot(snapshot: PodSnapshot) -> PodView:
    return PodView(
        pods=snapshot.active(),
        present=frozenset(snapshot.pods),
        terminating=snapshot.terminating,
        synced=snapshot.synced,
    )


class CachedPods:
    """The API's view of the node's pods, from a running :class:`PodCache`."""

    def __init__(self, cache: PodCache) -> None:
        self.cache = cache
        self._snapshot: PodSnapshot | None = None
        self._view = PodView()

    def view(self) -> PodView:
        snapshot = self.cache.snapshot()
        if snapshot is not self._snapshot:
            self._snapshot = snapshot
            self._view = view_of_snapshot(snapshot)
        return self._view


def pod_from_cgroup(cgroup: PodCgroup) -> PodInfo:
    """What a pod cgroup says about its pod: the UID (also used as its name, having no
    other) and the QoS class of its parent cgroup."""
    return PodInfo(namespace="", name=str(cgroup.uid), uid=cgroup.uid, qos=cgroup.qos)


class _HasPodCgroups(Protocol):
    @property
    def pod_cgroups(self) -> Mapping[PodUID, PodCgroup]: ...


class CgroupPods:
    """Pods as found in the kubelet's cgroups by the signals collector (standalone)."""

    def __init__(self, collector: _HasPodCgroups) -> None:
        self._collector = collector
        self._cgroups: Mapping[PodUID, PodCgroup] | None = None
        self._view = PodView(synced=True)

    def view(self) -> PodView:
        cgroups = self._collector.pod_cgroups
        if cgroups is not self._cgroups:
            self._cgroups = cgroups
            pods = tuple(pod_from_cgroup(c) for c in cgroups.values())
            self._view = PodView(pods=pods, present=frozenset(cgroups), synced=True)
        return self._view
