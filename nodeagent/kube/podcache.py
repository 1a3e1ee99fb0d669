"""The pods bound to this node, kept current by list + watch.

One :class:`PodCache` per agent, like a client-go informer restricted to
``spec.nodeName=<node>``:

* it **lists** once (the full set and a resourceVersion), then **watches** from that
  version, applying ADDED / MODIFIED / DELETED and remembering the version of every
  event and BOOKMARK, so a watch that ends (server ``timeoutSeconds``, a dropped
  connection) resumes exactly where it stopped, without a re-list;
* a **410 Gone** (the version was compacted away, as an HTTP status or an ERROR event)
  triggers a re-list that replaces the whole set, dropping pods deleted in the gap;
* failures **back off** exponentially with jitter, up to ``max_backoff``; the last good
  state stays readable meanwhile, so the agent keeps deciding while the API is away;
* :meth:`snapshot` is cheap and thread-safe: an immutable :class:`PodSnapshot`, rebuilt
  only after a change.

Terminal pods (Succeeded, Failed) are dropped: they hold nothing and cannot be evicted.
Terminating pods (deletionTimestamp set) are kept, flagged, so their usage still counts
but nobody evicts them twice.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nodeagent import errors
from nodeagent.kube import client, pods
from nodeagent.kube import errors as kube_errors
from nodeagent.model import PodInfo, PodUID

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    pods: Mapping[PodUID, PodInfo] = field(default_factory=dict)
    terminating: frozenset[PodUID] = frozenset()
    resource_version: str = ""
    synced: bool = False
    """True once a list has succeeded: before that, an empty set means "unknown"."""

    def active(self) -> tuple[PodInfo, ...]:
        """Pods that are neither terminal nor terminating."""
        return tuple(p for uid, p in self.pods.items() if uid not in self.terminating)


@dataclass(slots=True)
class CacheStats:
    lists: int = 0
    watches: int = 0
    relists_after_gone: int = 0
    failures: int = 0
    events: int = 0


class PodCache:
    def __init__(
        self,
        kube: client.KubeClient,
        node_name: str,
        *,
        watch_timeout: int = 1800,
        initial_backoff: float = 0.5,
        max_backoff: float = 30.0,
        on_change: Callable[[PodSnapshot], None] | None = None,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._kube = kube
        self.node_name = node_name
        self.field_selector = f"spec.nodeName={node_name}"
        self._watch_timeout = watch_timeout
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._on_change = on_change
        self._draw = draw
        self._lock = threading.Lock()
        self._pods: dict[PodUID, PodInfo] = {}
        self._terminating: set[PodUID] = set()
        self._resource_version = ""
        self._synced = threading.Event()
        self._snapshot: PodSnapshot | None = PodSnapshot()
        self._stream: client.WatchStream | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = CacheStats()

    # --- reading ------------------------------------------------------------------------
    def snapshot(self) -> PodSnapshot:
        with self._lock:
            if self._snapshot is None:
                self._snapshot = PodSnapshot(
                    MappingProxyType(dict(self._pods)),
                    frozenset(self._terminating),
                    self._resource_version,
                    self._synced.is_set(),
                )
            return self._snapshot

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="pod-cache", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and interrupt an open watch; returns within ``timeout``."""
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        """List, then watch forever (until :meth:`stop`). Blocking."""
        failures = 0
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self.sync_once()
                    need_list = False
                self._watch_once()
                failures = 0
            except kube_errors.Gone as exc:
                log.info("pod watch expired (%s); re-listing", exc)
                self.stats.relists_after_gone += 1
                need_list = True
            except errors.KubeAPIError as exc:
                if self._stop.is_set():
                    return
                failures += 1
                self.stats.failures += 1
                delay = self._backoff(failures)
                log.warning("pod list/watch failed (%s); retrying in %.1fs", exc, delay)
                self._stop.wait(delay)

    def _backoff(self, failures: int) -> float:
        bound = min(self._max_backoff, self._initial_backoff * 2 ** (failures - 1))
        return float(bound / 2 + self._draw() * bound / 2)

    # --- list and watch -----------------------------------------------------------------
    def sync_once(self) -> None:
        """List the node's pods and replace the cache with them."""
        listed = self._kube.list_pods(field_selector=self.field_selector)
        self.stats.lists += 1
        with self._lock:
            self._pods.clear()
            self._terminating.clear()
            for obj in listed.items:
                self._store(obj)
            self._resource_version = listed.resource_version
            self._synced.set()
            self._snapshot = None
        self._notify()

    def _watch_once(self) -> None:
        with self._lock:
            resource_version = self._resource_version
        # jitter spreads the reconnects of every node's agent
        timeout = int(self._watch_timeout * (1 + self._draw()))
        stream = self._kube.watch_pods(
            resource_version=resource_version,
            field_selector=self.field_selector,
            timeout_seconds=timeout,
        )
        self.stats.watches += 1
        with self._lock:
            self._stream = stream
        try:
            if self._stop.is_set():
                return
            for event in stream:
                self._apply(event)
                if self._stop.is_set():
                    return
        finally:
            with self._lock:
                self._stream = None
            stream.close()

    def _apply(self, event: client.WatchEvent) -> None:
        self.stats.events += 1
        changed = event.type is not client.WatchEventType.BOOKMARK
        with self._lock:
            if event.type is client.WatchEventType.DELETED:
                self._forget(event.object)
            elif changed:
                self._store(event.object)
            if event.resource_version:
                self._resource_version = event.resource_version
            self._snapshot = None
        if changed:
            self._notify()

    def _store(self, obj: client.KubeObject) -> None:
        """Add or replace one pod; lock held."""
        if pods.is_terminal(obj):
            self._forget(obj)
            return
        info = pods.pod_info(obj)
        self._pods[info.uid] = info
        if pods.is_terminating(obj):
            self._terminating.add(info.uid)
        else:
            self._terminating.discard(info.uid)

    def _forget(self, obj: client.KubeObject) -> None:
        uid = PodUID(str((obj.get("metadata") or {}).get("uid", "")))
        self._pods.pop(uid, None)
        self._terminating.discard(uid)

    def _notify(self) -> None:
        if self._on_change is not None:
            self._on_change(self.snapshot())
