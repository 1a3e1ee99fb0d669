"""Kubernetes Events, de-duplicated like client-go's recorder; shared by the agent and the
scheduler.

A condition that holds repeats the same event every cycle; sending each would flood the
API (one agent per node). Like client-go's event correlator (``EventCorrelator`` in
``tools/record/events_cache.go``), a repeat of the same object, reason, type and message
within the aggregation window bumps the existing Event's ``count`` and ``lastTimestamp``
instead of creating another, and such patches are sent at most every refresh interval
(repeats in between are counted locally and carried by the next write or
:meth:`EventRecorder.flush`).

In dry-run, events are still recorded, marked: the message starts with ``[dry-run]`` and
the Event carries the annotation ``nodeagent.io/dry-run: "true"``.

Events that can never repeat (the scheduler's ``Scheduled``, one per pod) skip the
correlation: :class:`UniqueEvents` serialises their shared fields once.

Events are best effort: a failure is logged and never raised.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from nodeagent.base import errors
from nodeagent.base.clock import Clock
from nodeagent.kube import client

log = logging.getLogger(__name__)

COMPONENT = "nodeagent"
NODE_EVENT_NAMESPACE = "default"
"""Where Node events go, as the kubelet records them."""
DRY_RUN_ANNOTATION = "nodeagent.io/dry-run"
WARNING = "Warning"
NORMAL = "Normal"
MAX_SERIES = 4096
"""Event series remembered for aggregation at most, as client-go's correlator's LRU
cache (``maxLruCacheEntries``): without a bound, a scheduler's distinct ``Scheduled``
events (one per pod, each its own series) would all be kept for the aggregation window."""


@dataclass(frozen=True, slots=True)
class InvolvedObject:
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""

    def to_api(self) -> dict[str, Any]:
        ref: dict[str, Any] = {"apiVersion": "v1", "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


@dataclass(slots=True)
class _Series:
    namespace: str
    name: str
    count: int
    first_seen: float
    last_seen: float
    last_written: float
    written_count: int


_Key = tuple[InvolvedObject, str, str, str]


class EventRecorder:
    """Events on any object, aggregated as the module docstring says."""

    def __init__(
        self,
        kube: client.KubeClient,
        *,
        node_name: str,
        clock: Clock,
        aggregation_window: float = 600.0,
        refresh_interval: float = 60.0,
        dry_run: bool = False,
        component: str = COMPONENT,
        max_series: int = MAX_SERIES,
    ) -> None:
        """``node_name`` is the reporting host; ``component`` the reporting controller
        (the scheduler reports as its profile's scheduler name, as kube-scheduler does);
        ``max_series``: the series remembered at most (the oldest is forgotten first)."""
        self._max_series = max_series
        self._kube = kube
        self.node_name = node_name
        self.component = component
        self._clock = clock
        self._window = aggregation_window
        self._refresh = refresh_interval
        self.dry_run = dry_run
        self._series: dict[_Key, _Series] = {}
        self._lock = threading.Lock()
        self._expired_at = float("-inf")
        self.node_uid = ""

    def node(self) -> InvolvedObject:
        return InvolvedObject("Node", self.node_name, uid=self.node_uid)

    def record(
        self, involved: InvolvedObject, reason: str, message: str, event_type: str = WARNING
    ) -> None:
        """Record one occurrence; creates, bumps or defers as the module docstring says."""
        if self.dry_run:
            message = f"[dry-run] {message}"
        now = self._clock.now()
        key = (involved, reason, event_type, message)
        with self._lock:
            self._expire(now)
            series = self._series.get(key)
            if series is not None and now - series.first_seen <= self._window:
                series.count += 1
                series.last_seen = now
                if now - series.last_written < self._refresh:
                    return
                self._write_count(key, series)
                return
        self._create(key, now)

    def flush(self) -> None:
        """Write the counts of repeats not yet sent (call once per cycle, and on exit)."""
        now = self._clock.now()
        with self._lock:
            due = [
                (key, s)
                for key, s in self._series.items()
                if s.count > s.written_count and now - s.last_written >= self._refresh
            ]
            for key, series in due:
                self._write_count(key, series)

    def _expire(self, now: float) -> None:
        if now - self._expired_at < 1.0:
            return  # a scan per second is enough: series live for minutes
        self._expired_at = now
        for key in [k for k, s in self._series.items() if now - s.first_seen > self._window]:
            series = self._series.pop(key)
            if series.count > series.written_count:
                self._write_count(key, series)

    def _create(self, key: _Key, now: float) -> None:
        involved, reason, event_type, message = key
        namespace = involved.namespace or NODE_EVENT_NAMESPACE
        stamp = client.api_time(self._clock.wall())
        metadata: dict[str, Any] = {
            "name": f"{involved.name}.{uuid.uuid4().hex[:16]}",
            "namespace": namespace,
        }
        if self.dry_run:
            metadata["annotations"] = {DRY_RUN_ANNOTATION: "true"}
        event = {
            "metadata": metadata,
            "involvedObject": involved.to_api(),
            "message": message,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            **_fixed_fields(reason, event_type, self.component, self.node_name),
        }
        try:
            created = self._kube.create_event(namespace, event)
        except errors.KubeAPIError as exc:
            log.warning("could not record event %s on %s: %s", reason, involved.name, exc)
            return
        name = str((created.get("metadata") or {}).get("name") or metadata["name"])
        with self._lock:
            self._series[key] = _Series(namespace, name, 1, now, now, now, 1)
            while len(self._series) > self._max_series:
                # the oldest series is forgotten (its repeats not yet sent, sent now): a
                # scheduler records a distinct event per pod, hundreds a second
                oldest = next(iter(self._series))
                forgotten = self._series.pop(oldest)
                if forgotten.count > forgotten.written_count:
                    self._write_count(oldest, forgotten)

    def _write_count(self, key: _Key, series: _Series) -> None:
        """Patch count and lastTimestamp; lock held (one small request)."""
        series.last_written = self._clock.now()
        patch = {"count": series.count, "lastTimestamp": client.api_time(self._clock.wall())}
        try:
            self._kube.patch_event(series.namespace, series.name, patch)
        except errors.NotFound:
            # the Event expired (the API server's event TTL): start a new series next time
            self._series.pop(key, None)
            return
        except errors.KubeAPIError as exc:
            log.warning("could not update event %s: %s", series.name, exc)
            return
        series.written_count = series.count


def _fixed_fields(reason: str, event_type: str, component: str, host: str) -> dict[str, Any]:
    """What a new Event of one source, reason and type says whatever its object."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "reason": reason,
        "type": event_type,
        "count": 1,
        "source": {"component": component, "host": host},
        "reportingComponent": component,
        "reportingInstance": host,
    }


class UniqueEvents:
    """Request bodies of Events that never repeat, of one source, reason and type: a
    scheduler's ``Scheduled`` event, one per bound pod (kube-scheduler's recorder never
    aggregates two pods' events, and a pod is bound once).

    :class:`EventRecorder` correlates every event with the series it remembers, names
    it with a random suffix and decodes the API's answer to remember the series; for an
    event that cannot repeat that is all overhead, paid hundreds of times a second. Here
    the fields an event shares with every other of its kind are serialised once, and an
    event is its object's fields, its message and the time spliced in: the same Event
    the recorder creates (count 1, first and last timestamp equal), named as
    client-go's recorder names it (``<object>.<unix nanoseconds, hex>``). The body is
    for :meth:`~nodeagent.kube.client.KubeClient.post_event`. Thread-safe."""

    def __init__(self, *, reason: str, event_type: str, component: str, host: str) -> None:
        fixed = msgspec.json.encode(_fixed_fields(reason, event_type, component, host))
        self._fixed = b"," + fixed[1:]  # '"apiVersion":...}' closes the spliced object
        self._stamp = (-1, "")

    def body(self, involved: InvolvedObject, message: str, wall: float | None = None) -> bytes:
        """The serialised Event for ``involved`` at ``wall`` (Unix seconds; now if None)."""
        nanoseconds = time.time_ns() if wall is None else int(wall * 1e9)
        second = nanoseconds // 1_000_000_000
        cached_second, stamp = self._stamp
        if second != cached_second:  # the stamp has second precision: one per second
            stamp = client.api_time(second)
            self._stamp = (second, stamp)
        variable = msgspec.json.encode(
            {
                "metadata": {
                    "name": f"{involved.name}.{nanoseconds:x}",
                    "namespace": involved.namespace or NODE_EVENT_NAMESPACE,
                },
                "involvedObject": involved.to_api(),
                "message": message,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
            }
        )
        return variable[:-1] + self._fixed
