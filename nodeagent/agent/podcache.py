"""The pods bound to this node, kept current by list + watch.

One :class:`PodCache` per agent: an :class:`~nodeagent.kube.informer.Informer` on
``spec.nodeName=<node>`` (resume from the last resourceVersion, re-list on 410, backoff
with the last good state readable) whose handlers keep the node's pods as
:class:`~nodeagent.model.PodInfo`. :meth:`PodCache.snapshot` is cheap and thread-safe:
an immutable :class:`PodSnapshot`, rebuilt only after a change.

Terminal pods (Succeeded, Failed) are dropped: they hold nothing and cannot be evicted.
Terminating pods (deletionTimestamp set) are kept, flagged, so their usage still counts
but nobody evicts them twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nodeagent.agent import podinfo as pods
from nodeagent.kube import client, informer, retry
from nodeagent.model import PodInfo, PodUID

CacheStats = informer.InformerStats


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
        draw: Callable[[], float] = retry.JITTER.random,
    ) -> None:
        self.node_name = node_name
        self.field_selector = f"spec.nodeName={node_name}"
        self._on_change = on_change
        self._lock = threading.Lock()
        self._pods: dict[PodUID, PodInfo] = {}
        self._terminating: set[PodUID] = set()
        self._snapshot: PodSnapshot | None = PodSnapshot()
        self._informer = informer.Informer(
            informer.pods(kube, field_selector=self.field_selector),
            informer.Handlers(
                on_add=self._store,
                on_update=lambda old, new: self._store(new, old),
                on_delete=self._forget,
                on_change=self._changed,
            ),
            watch_timeout=watch_timeout,
            backoff=retry.RetryPolicy(initial_delay=initial_backoff, max_delay=max_backoff),
            draw=draw,
            name="pod-cache",
        )
        self.stats = self._informer.stats

    # --- reading ------------------------------------------------------------------------
    def snapshot(self) -> PodSnapshot:
        resource_version = self._informer.resource_version
        with self._lock:
            if self._snapshot is None or self._snapshot.resource_version != resource_version:
                self._snapshot = PodSnapshot(
                    MappingProxyType(dict(self._pods)),
                    frozenset(self._terminating),
                    resource_version,
                    self._informer.synced,
                )
            return self._snapshot

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._informer.wait_synced(timeout)

    # --- lifecycle ----------------------------------------------------------------------
    @property
    def _thread(self) -> threading.Thread | None:
        return self._informer._thread

    def start(self) -> None:
        self._informer.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and interrupt an open watch; returns within ``timeout``."""
        self._informer.stop(timeout)

    def run(self) -> None:
        """List, then watch forever (until :meth:`stop`). Blocking."""
        self._informer.run()

    def sync_once(self) -> None:
        """List the node's pods and replace the cache with them."""
        self._informer.sync_once()

    # --- handlers (informer thread) -----------------------------------------------------
    def _store(self, obj: client.KubeObject, old: client.KubeObject | None = None) -> None:
        with self._lock:
            if old is not None:
                self._drop(old)
            if pods.is_terminal(obj):
                self._drop(obj)
            else:
                info = pods.pod_info(obj)
                self._pods[info.uid] = info
                if pods.is_terminating(obj):
                    self._terminating.add(info.uid)
                else:
                    self._terminating.discard(info.uid)
            self._snapshot = None

    def _forget(self, obj: client.KubeObject) -> None:
        with self._lock:
            self._drop(obj)
            self._snapshot = None

    def _drop(self, obj: client.KubeObject) -> None:
        uid = PodUID(str((obj.get("metadata") or {}).get("uid", "")))
        self._pods.pop(uid, None)
        self._terminating.discard(uid)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.snapshot())
