"""The project's one list + watch loop: an informer for any resource.

Like client-go's reflector + store, for one resource and one selector:

* it **lists** once (the full set and a resourceVersion): from the HTTP client by
  streaming, as client-go's reflector does (WatchList: one watch that begins with the
  current state, the first list's handlers running on each object as it arrives, the
  same stream then followed as the watch; :meth:`Informer._sync_streamed`), or in pages
  read ahead where the API server does not stream (:meth:`Informer.sync_once`); then
  it **watches** from that
  version, applying ADDED / MODIFIED / DELETED and remembering the version of every
  event and BOOKMARK, so a watch that ends (server ``timeoutSeconds``, a dropped
  connection) resumes exactly where it stopped, without a re-list;
* a **410 Gone** (the version was compacted away, as an HTTP status or an ERROR event)
  triggers a re-list that *replaces* the store: objects missing from the new list are
  reported deleted, changed ones updated, new ones added, so handlers never miss a
  deletion that happened in the gap;
* failures **back off** exponentially with full jitter (the policy of
  :mod:`nodeagent.kube.retry`, Retry-After honoured); the last good state stays
  readable meanwhile;
* handlers (:class:`Handlers`) run on the informer's thread, in event order, after the
  store has changed; :meth:`Informer.wait_synced` tells when the first list is in.

Who uses it: the agent's :class:`~nodeagent.agent.podcache.PodCache` (its node's pods)
and the live scheduler (all pods, nodes, PodDisruptionBudgets). What to list and watch
is a :class:`ListWatch`; :func:`pods`, :func:`nodes` and :func:`disruption_budgets`
build the usual ones from a client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from nodeagent.base import errors
from nodeagent.kube import client, retry
from nodeagent.kube import errors as kube_errors

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""``(namespace, name)``; the namespace is ``""`` for cluster-scoped kinds."""


def object_key(obj: client.KubeObject) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def resource_version_of(obj: client.KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


@dataclass(frozen=True, slots=True)
class ListWatch:
    """How to list and watch one resource (selectors already bound)."""

    resource: str
    """For logs: ``pods``, ``nodes``, ``poddisruptionbudgets``."""
    list: Callable[[], client.ObjectList]
    watch: Callable[[str, int], client.WatchStream]
    """``(resource_version, timeout_seconds) -> stream``."""
    pages: Callable[[], Iterator[client.ObjectList]] | None = None
    """The same list page by page, when the client can (:class:`client.PagedLister`):
    the first list's handlers then run on each page as it arrives."""
    watch_list: Callable[[int], client.WatchStream] | None = None
    """``timeout_seconds -> stream``: the list streamed as a watch from the current
    state, when the client can (:class:`client.StreamingLister`); preferred to
    ``pages`` while the API server accepts it."""


def _pages(
    kube: object, collection: client.Collection, field_selector: str = ""
) -> Callable[[], Iterator[client.ObjectList]] | None:
    if not isinstance(kube, client.PagedLister):
        return None
    return lambda: kube.list_pages(collection, field_selector=field_selector)


def _streamed(
    kube: object, collection: client.Collection, field_selector: str = ""
) -> Callable[[int], client.WatchStream] | None:
    if not isinstance(kube, client.StreamingLister):
        return None
    return lambda timeout: kube.watch_list(
        collection, field_selector=field_selector, timeout_seconds=timeout
    )


def pods(kube: client.KubeClient, *, field_selector: str = "", streamed: bool = True) -> ListWatch:
    """``streamed=False``: listed in pages even where the API server streams lists."""
    return ListWatch(
        "pods",
        lambda: kube.list_pods(field_selector=field_selector),
        lambda rv, timeout: kube.watch_pods(
            resource_version=rv, field_selector=field_selector, timeout_seconds=timeout
        ),
        _pages(kube, client.Collection.PODS, field_selector),
        _streamed(kube, client.Collection.PODS, field_selector) if streamed else None,
    )


def nodes(kube: client.ClusterClient) -> ListWatch:
    return ListWatch(
        "nodes",
        kube.list_nodes,
        lambda rv, timeout: kube.watch_nodes(resource_version=rv, timeout_seconds=timeout),
        _pages(kube, client.Collection.NODES),
        _streamed(kube, client.Collection.NODES),
    )


def disruption_budgets(kube: client.ClusterClient) -> ListWatch:
    return ListWatch(
        "poddisruptionbudgets",
        kube.list_disruption_budgets,
        lambda rv, timeout: kube.watch_disruption_budgets(
            resource_version=rv, timeout_seconds=timeout
        ),
        _pages(kube, client.Collection.DISRUPTION_BUDGETS),
        _streamed(kube, client.Collection.DISRUPTION_BUDGETS),
    )


@dataclass(frozen=True, slots=True)
class Handlers:
    """Callbacks, each optional; they run on the informer thread and must not block."""

    on_add: Callable[[client.KubeObject], None] | None = None
    on_update: Callable[[client.KubeObject, client.KubeObject], None] | None = None
    """``(old, new)``."""
    on_delete: Callable[[client.KubeObject], None] | None = None
    on_change: Callable[[], None] | None = None
    """After every list and every watch event (bookmarks included): the store or the
    resourceVersion moved."""


@dataclass(slots=True)
class InformerStats:
    lists: int = 0
    watches: int = 0
    relists_after_gone: int = 0
    failures: int = 0
    events: int = 0
    first_list: tuple[float, float] | None = None
    """The first list that succeeded: when it was asked for and when its last object
    was handled (:func:`time.monotonic`), for a process's start-up timeline."""


BACKOFF = retry.RetryPolicy(initial_delay=0.5, max_delay=30.0)
"""Waits between failed list/watch attempts (``attempts`` is not used: never give up)."""


class Informer:
    def __init__(
        self,
        list_watch: ListWatch,
        handlers: Handlers | None = None,
        *,
        watch_timeout: int = 1800,
        backoff: retry.RetryPolicy = BACKOFF,
        draw: Callable[[], float] = retry.JITTER.random,
        name: str | None = None,
    ) -> None:
        self.list_watch = list_watch
        self._handlers = handlers or Handlers()
        self.watch_timeout = watch_timeout
        self._backoff = backoff
        self._draw = draw
        self._name = name or f"{list_watch.resource}-informer"
        self._lock = threading.Lock()
        self._store: dict[Key, client.KubeObject] = {}
        self._resource_version = ""
        self._synced = threading.Event()
        self._stream: client.WatchStream | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._streaming = list_watch.watch_list is not None
        """Whether lists are streamed (:meth:`_sync_streamed`); off for good once the
        API server refuses it."""
        self.stats = InformerStats()

    # --- reading ------------------------------------------------------------------------
    @property
    def resource_version(self) -> str:
        with self._lock:
            return self._resource_version

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def get(self, key: Key) -> client.KubeObject | None:
        with self._lock:
            return self._store.get(key)

    def items(self) -> list[client.KubeObject]:
        """The stored objects (shared, not copies: do not mutate them)."""
        with self._lock:
            return list(self._store.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._store)

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name=self._name, daemon=True)
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

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self) -> None:
        """List, then watch until :meth:`stop`. Blocking."""
        failures = 0
        need_list = True
        resource = self.list_watch.resource
        while not self._stop.is_set():
            try:
                if need_list and self._streaming:
                    # the list and the watch after it are one stream: once the list is
                    # in, the watch goes on from its last resourceVersion however the
                    # stream ends
                    listed = self._sync_streamed()
                    if listed is None:
                        continue  # refused: paged from now on
                    need_list = False
                    self._follow(*listed)
                    failures = 0
                    continue
                if need_list:
                    self.sync_once()
                    need_list = False
                self._watch_once()
                failures = 0
            except kube_errors.Gone as exc:
                log.info("%s watch expired (%s); re-listing", resource, exc)
                self.stats.relists_after_gone += 1
                need_list = True
            except errors.KubeAPIError as exc:
                if self._stop.is_set():
                    return
                failures += 1
                self.stats.failures += 1
                delay = self._backoff.wait_seconds(min(failures, 32), exc, self._draw())
                log.warning("%s list/watch failed (%s); retrying in %.1fs", resource, exc, delay)
                self._stop.wait(delay)

    # --- list and watch -----------------------------------------------------------------
    def sync_once(self) -> None:
        """List and replace the store, reporting the differences to the handlers.

        Into an empty store (the first list) a paged list is handled page by page as
        the pages arrive: each page's objects are stored and reported added while the
        next page is on its way. A list that fails half-way leaves the store with what
        was reported, and the next list reports the differences from there."""
        pages = self.list_watch.pages
        with self._lock:
            empty = not self._store
        asked = time.monotonic()
        if pages is not None and empty:
            self._sync_into_empty(pages())
        else:
            self._sync_replacing(self.list_watch.list())
        self.stats.lists += 1
        if self.stats.first_list is None:
            self.stats.first_list = (asked, time.monotonic())
        self._synced.set()
        if self._handlers.on_change is not None:
            self._handlers.on_change()

    def _sync_streamed(
        self,
    ) -> tuple[client.WatchStream, Iterator[client.WatchEvent]] | None:
        """List by a watch that begins with the current state (client-go's reflector
        ``watchList``); the stream is handed back open, to be followed as the watch
        after the list (:meth:`_follow`). The initial ADDED events go to an empty
        store (the first list) and its handlers as they arrive; into a store that has
        objects (a list again after a 410), they are collected and the store is
        replaced at the end, reporting the differences (:meth:`sync_once`). The state
        is complete, and its resourceVersion known, only at the bookmark annotated
        :data:`client.INITIAL_EVENTS_END`: a stream that ends before it is a failure
        (the next list reports the differences from what was reported). None if the
        API server refused to stream (it is not asked again: lists are paged)."""
        list_watch = self.list_watch
        assert list_watch.watch_list is not None
        asked = time.monotonic()
        try:
            stream = list_watch.watch_list(int(self.watch_timeout * (1 + self._draw())))
        except kube_errors.Invalid as exc:
            log.info("%s: the API server does not stream lists (%s); paging", self._name, exc)
            self._streaming = False
            return None
        self.stats.watches += 1
        with self._lock:
            self._stream = stream
            empty = not self._store
        try:
            events = iter(stream)
            listed = self._initial_events(events, empty)
        except BaseException:
            self._closed(stream)
            raise
        if listed is None:  # stopped
            return stream, iter(())
        if not empty:
            self._sync_replacing(listed)
        else:
            with self._lock:
                self._resource_version = listed.resource_version
        self.stats.lists += 1
        if self.stats.first_list is None:
            self.stats.first_list = (asked, time.monotonic())
        self._synced.set()
        if self._handlers.on_change is not None:
            self._handlers.on_change()
        return stream, events

    def _initial_events(
        self, events: Iterator[client.WatchEvent], empty: bool
    ) -> client.ObjectList | None:
        """A streamed list's objects up to its closing bookmark, reported as they come
        into an ``empty`` store (else collected), and the bookmark's resourceVersion;
        None if the informer was stopped meanwhile. Changes made after the list's
        snapshot may come before that bookmark (kube-apiserver sends it at its next
        bookmark tick, up to a second later, and a scheduler binding the pods it lists
        changes them meanwhile): they are applied in order, as client-go's reflector
        applies them to its temporary store (``watchList``)."""
        on_add = self._handlers.on_add
        collected: dict[Key, client.KubeObject] = {}
        for event in events:
            if self._stop.is_set():
                return None
            obj = event.object
            if event.type is client.WatchEventType.BOOKMARK:
                annotations = (obj.get("metadata") or {}).get("annotations") or {}
                if annotations.get(client.INITIAL_EVENTS_END) == "true":
                    return client.ObjectList(tuple(collected.values()), event.resource_version)
                continue
            if not empty:
                if event.type is client.WatchEventType.DELETED:
                    collected.pop(object_key(obj), None)
                else:
                    collected[object_key(obj)] = obj
                continue
            if event.type is not client.WatchEventType.ADDED:
                self.apply(event)  # a change since the snapshot, in order
                continue
            with self._lock:
                self._store[object_key(obj)] = obj
            if on_add is not None:
                on_add(obj)
        raise kube_errors.Unavailable(
            f"{self._name}: the stream ended before the initial state was complete"
        )

    def _sync_into_empty(self, pages: Iterator[client.ObjectList]) -> None:
        on_add = self._handlers.on_add
        for page in pages:
            fresh = {object_key(obj): obj for obj in page.items}
            with self._lock:
                self._store.update(fresh)
            if on_add is not None:
                for obj in fresh.values():
                    on_add(obj)
            with self._lock:
                self._resource_version = page.resource_version

    def _sync_replacing(self, listed: client.ObjectList) -> None:
        fresh = {object_key(obj): obj for obj in listed.items}
        with self._lock:
            old = self._store
            self._store = fresh
            self._resource_version = listed.resource_version
        handlers = self._handlers
        for key, gone in old.items():
            if key not in fresh and handlers.on_delete is not None:
                handlers.on_delete(gone)
        for key, obj in fresh.items():
            previous = old.get(key)
            if previous is None:
                if handlers.on_add is not None:
                    handlers.on_add(obj)
            elif handlers.on_update is not None and resource_version_of(
                previous
            ) != resource_version_of(obj):
                handlers.on_update(previous, obj)

    def _watch_once(self) -> None:
        resource_version = self.resource_version
        # jitter spreads the reconnects of many watchers
        timeout = int(self.watch_timeout * (1 + self._draw()))
        stream = self.list_watch.watch(resource_version, timeout)
        self.stats.watches += 1
        with self._lock:
            self._stream = stream
        self._follow(stream, iter(stream))

    def _follow(self, stream: client.WatchStream, events: Iterator[client.WatchEvent]) -> None:
        """Apply a watch's events until it ends or the informer stops; then close it."""
        try:
            if self._stop.is_set():
                return
            for event in events:
                self.apply(event)
                if self._stop.is_set():
                    return
        finally:
            self._closed(stream)

    def _closed(self, stream: client.WatchStream) -> None:
        with self._lock:
            self._stream = None
        stream.close()

    def apply(self, event: client.WatchEvent) -> None:
        """One watch event: the store, then the handlers. The watch loop's step; a
        driver that delivers events itself (the simulation) calls it directly."""
        self.stats.events += 1
        obj = event.object
        key = object_key(obj)
        with self._lock:
            previous = self._store.get(key)
            if event.type is client.WatchEventType.DELETED:
                self._store.pop(key, None)
            elif event.type is not client.WatchEventType.BOOKMARK:
                self._store[key] = obj
            if event.resource_version:
                self._resource_version = event.resource_version
        handlers = self._handlers
        if event.type is client.WatchEventType.DELETED:
            if handlers.on_delete is not None:
                handlers.on_delete(obj)  # its last state, as the event carries it
        elif event.type is not client.WatchEventType.BOOKMARK:
            if previous is None:
                if handlers.on_add is not None:
                    handlers.on_add(obj)
            elif handlers.on_update is not None:
                handlers.on_update(previous, obj)
        if handlers.on_change is not None:
            handlers.on_change()


class InformerGroup:
    """Informers started, stopped and waited on together: one per kind a plugin reads
    (the scheduler's storage kinds, its DRA kinds)."""

    def __init__(self, informers: list[Informer]) -> None:
        self.informers = informers

    def start(self) -> None:
        for inf in self.informers:
            inf.start()

    def stop(self, timeout: float) -> None:
        for inf in self.informers:
            inf.stop(timeout)

    @property
    def synced(self) -> bool:
        return all(inf.synced for inf in self.informers)
