"""Active page cache: used memory, as the kubelet counts it, or reclaimable (opt-in).

The kubelet's working set is ``usage - inactive_file``: the *active* page cache counts as
used (``makeSignalObservations``; kubernetes#43916, open since 2017). A pod that keeps a
large file hot, re-reading it, therefore pushes ``memory.available`` (and the
allocatable signal) under a threshold and is evicted, the largest working set, though it
was never short of memory: before the kernel's OOM killer runs it reclaims every clean
file page, active ones included (the active list is aged onto the inactive one and
dropped). Operators who raise ``memory.available`` to lose fewer OOM races
(kubernetes#31362) hit this first.

``activePageCache: reclaimable`` counts the *clean* active page cache of the cgroup
behind each memory signal (``active_file`` less dirty and writeback pages, measured by
:mod:`nodeagent.signals.memory`) as available, and takes a pod's clean active page cache
out of the working set its eviction is ranked by:

    available = capacity - (usage - inactive_file - clean active_file)
    pod usage = working set - clean active_file

Why this and not the other ways to spare the cache:

* **The threshold still guards the OOM race.** What the OOM killer is short of is memory
  the kernel cannot reclaim; this signal measures exactly that, so a hard threshold on it
  crosses at the same margin before an OOM as the kubelet's does on a node without page
  cache, and the agent acts within milliseconds of the crossing, as before. A memory PSI
  *gate* (act only while the node stalls) would instead wait for stall that a fast ramp
  does not produce before the OOM killer fires, and PSI averages lag by seconds.
* **Reclaim-first** (``memory.reclaim`` on the pod's cgroup) is cgroup v2 only, and a
  cache that is re-read comes straight back: it buys seconds and costs I/O, then the same
  eviction follows. Counting the cache as reclaimable leaves it to the kernel, which
  drops it only when something needs the memory.
* **Ranking by working set minus active file** alone keeps the signal crossing (and the
  MemoryPressure condition, and BestEffort admission refused) for memory that was never
  short; it is part of this mode, so that under genuine pressure the pod that cannot
  give memory back goes first, not the one holding the most cache.

What the mode gives up: a working set of hot file pages larger than memory (a database's
cache that must stay resident) thrashes, refaulting what was dropped, long before any
OOM; the kubelet's accounting would have evicted something, this one does not. That
cost shows as memory stall, so the configuration that turns the mode on should also set
a memory PSI threshold (``memory.pressure.some.avg10>20`` soft, with a grace period);
:class:`~nodeagent.eviction.policy.EvictionPolicy` warns when it does not.

The kubelet beside the agent keeps its own accounting: once a hog fills kubepods to its
limit, the kubelet's count is about the inactive cache alone, under any threshold, and
its next eviction cycle takes the largest working set, the cache's (measured on the real
node: 4 of 20 ramps at its default 100Mi). So the node's kubelet should have its memory
threshold off (``memory.available: 0%``); ``config check --kubelet-config`` notes it
(:mod:`nodeagent.eviction.compare`).

The default, ``workingSet``, is the kubelet's accounting, unchanged. :func:`view` is a
pure function of one collection, applied once (the agent's loop applies it as soon as it
has collected, so the kernel triggers and metrics see what the engine sees; the engine
applies it again, which is a no-op, so a replayed trace decides the same).
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum

from nodeagent.model import CLEAN_ACTIVE_FILE, NodeObservations, PodUsage, SignalValue

__all__ = ["ActivePageCache", "pod_usage", "view"]


class ActivePageCache(StrEnum):
    """What the memory signals and the memory ranking make of the active page cache."""

    WORKING_SET = "workingSet"
    """Used memory, as the kubelet counts it (default)."""
    RECLAIMABLE = "reclaimable"
    """Available, where it is clean (not dirty, not under writeback)."""


def pod_usage(usage: PodUsage) -> PodUsage:
    """``usage`` with its clean active page cache out of its working set (as is, when
    either figure is missing)."""
    memory, active = usage.memory, usage.active_file
    if memory is None or not active:
        return usage
    return dataclasses.replace(usage, memory=memory - active if memory > active else 0)


def view(observations: NodeObservations, mode: ActivePageCache) -> NodeObservations:
    """``observations`` as the eviction policy sees them: unchanged for ``workingSet``
    (or when already applied); for ``reclaimable``, each memory signal with its cgroup's
    clean active page cache as available (never past its capacity) and each pod's memory
    without its own."""
    if mode is ActivePageCache.WORKING_SET or observations.active_file_counted:
        return observations
    signals = dict(observations.signals)
    for signal, active in observations.active_file.items():
        value = signals.get(signal)
        if isinstance(value, SignalValue):
            signals[signal] = value.counting_reclaimable(active, CLEAN_ACTIVE_FILE)
    pods = {uid: pod_usage(usage) for uid, usage in observations.pods.items()}
    return dataclasses.replace(observations, signals=signals, pods=pods, active_file_counted=True)
