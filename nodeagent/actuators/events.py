"""The agent's Kubernetes Events, with the kubelet's reasons so existing dashboards and
``kubectl get events --field-selector reason=Evicted`` keep working:

* ``EvictionThresholdMet`` (Warning) on the Node: ``Attempting to reclaim <resource>``;
* ``Evicted`` (Warning) on the pod, with the kubelet-style eviction message; in dry-run
  its reason is ``EvictedDryRun``, so alerts on ``Evicted`` do not fire for evictions that
  did not happen.

They are recorded through the shared :class:`~nodeagent.kube.events.EventRecorder`, which
aggregates repeats. No write may delay an eviction: the evictor records into an
:class:`EventQueue`, which only appends, and the agent's node-status thread writes what it
holds (:meth:`EventQueue.drain`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Protocol

from nodeagent.kube.events import EventRecorder, InvolvedObject
from nodeagent.model import PodInfo

REASON_THRESHOLD_MET = "EvictionThresholdMet"
REASON_EVICTED = "Evicted"
REASON_EVICTED_DRY_RUN = "EvictedDryRun"


class AgentEventRecorder(EventRecorder):
    """The shared recorder, with the agent's two events."""

    @staticmethod
    def pod(pod: PodInfo) -> InvolvedObject:
        return InvolvedObject("Pod", pod.name, pod.namespace, str(pod.uid))

    def threshold_met(self, resource: str) -> None:
        self.record(self.node(), REASON_THRESHOLD_MET, f"Attempting to reclaim {resource}")

    def evicted(self, pod: PodInfo, message: str) -> None:
        reason = REASON_EVICTED_DRY_RUN if self.dry_run else REASON_EVICTED
        self.record(self.pod(pod), reason, message)


class EventSink(Protocol):
    """What the evictor records: :class:`AgentEventRecorder` (written at once) or
    :class:`EventQueue` (written later, by another thread)."""

    def threshold_met(self, resource: str) -> None: ...

    def evicted(self, pod: PodInfo, message: str) -> None: ...


@dataclass(frozen=True, slots=True)
class _Deferred:
    pod: PodInfo | None
    """None: the node's ``EvictionThresholdMet``."""
    text: str
    """The resource reclaimed, or the eviction message."""


class EventQueue:
    """Events recorded now and written later by the thread that calls :meth:`drain`.

    Recording only appends to a bounded deque (atomic, no lock, no I/O), so the caller,
    the thread sending Evictions, never waits on the events API. When more than
    ``capacity`` events wait (the API down for long), the oldest are dropped and counted:
    events are best effort, and a held pressure repeats its event every cycle anyway.
    """

    def __init__(self, recorder: AgentEventRecorder, *, capacity: int = 1000) -> None:
        self.recorder = recorder
        self._pending: collections.deque[_Deferred] = collections.deque(maxlen=capacity)
        self.dropped = 0
        """Events recorded but never written: the queue was full (one thread records)."""

    def threshold_met(self, resource: str) -> None:
        self._append(_Deferred(None, resource))

    def evicted(self, pod: PodInfo, message: str) -> None:
        self._append(_Deferred(pod, message))

    def _append(self, deferred: _Deferred) -> None:
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
        self._pending.append(deferred)

    def drain(self) -> int:
        """Write every waiting event through the recorder, in order; how many."""
        written = 0
        while True:
            try:
                deferred = self._pending.popleft()
            except IndexError:
                break
            if deferred.pod is None:
                self.recorder.threshold_met(deferred.text)
            else:
                self.recorder.evicted(deferred.pod, deferred.text)
            written += 1
        return written
