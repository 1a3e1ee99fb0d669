"""An in-memory Kubernetes API with kube-apiserver's semantics, and a client over it.

:class:`FakeCluster` is the object store: nodes, pods and events with a cluster-wide
resourceVersion bumped on every write, strategic merge / JSON merge / JSON patches as
the server applies them (:mod:`tests.doubles.merge`), ``/status`` and main-resource
separation, resourceVersion preconditions (409), field and label selectors, watches
with bookmarks and 410 expiry, the Eviction subresource with PodDisruptionBudgets
(429), and pods that terminate after a configurable delay.

Two front doors use the same store, so they cannot disagree:

* :class:`FakeKubeClient` implements :class:`nodeagent.kube.client.KubeClient` in
  process, records every call and injects errors (unit tests, standalone runs);
* the HTTP fake in ``tests/fakeapi`` serves it to the real ``kubernetes`` client.

Deliberately *not* modelled: admission, RBAC, defaulting, validation beyond what the
agent's requests can trip, and any kind the agent does not touch.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from nodeagent.base import errors
from nodeagent.kube import client, selectors
from nodeagent.kube import errors as kube_errors
from tests.doubles import merge
from tests.doubles import reviews as fakereviews

Key = tuple[str, str]
"""``(namespace, name)``; the namespace is ``""`` for cluster-scoped kinds."""

CLUSTER_SCOPED = frozenset(
    {
        "nodes",
        *(k.value for k in client.StorageKind if not k.namespaced),
        *(k.value for k in client.ResourceKind if not k.namespaced),
    }
)
KIND_NAMES: Mapping[str, tuple[str, str]] = {
    "nodes": ("v1", "Node"),
    "pods": ("v1", "Pod"),
    "events": ("v1", "Event"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
    "leases": ("coordination.k8s.io/v1", "Lease"),
    **{k.value: (k.api_version, k.kind) for k in client.StorageKind},
    **{k.value: (k.api_version, k.kind) for k in client.ResourceKind},
}


class PatchType(StrEnum):
    STRATEGIC = "application/strategic-merge-patch+json"
    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"


T = TypeVar("T")


def _copy(value: T) -> T:
    """A deep copy of a JSON value (dicts, lists, scalars), which is what the store
    holds: several times faster than ``copy.deepcopy``, which must handle any object,
    and the store copies every object it takes in and hands out. Anything else goes to
    ``copy.deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}  # type: ignore[attr-defined,return-value]
    if kind is list:
        return [_copy(v) for v in value]  # type: ignore[attr-defined,return-value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


_SCALARS = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True, slots=True)
class EvictionRecord:
    namespace: str
    name: str
    grace_period_seconds: int | None
    uid: str | None
    dry_run: bool
    outcome: int
    """HTTP status answered: 201, 404, 409, 429..."""


@dataclass(frozen=True, slots=True)
class DeletionRecord:
    namespace: str
    name: str
    grace_period_seconds: int | None


@dataclass(slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget reduced to what an Eviction consults."""

    namespace: str
    name: str
    selector: selectors.LabelSelector
    disruptions_allowed: int


@dataclass(frozen=True, slots=True)
class _Change:
    resource_version: int
    kind: str
    old: client.KubeObject | None
    new: client.KubeObject | None


class AlreadyExists(errors.Conflict):
    """A create of a name that exists: 409 with reason ``AlreadyExists`` (kube-apiserver's
    reason; an update conflict is ``Conflict``)."""


class _Expired(Exception):
    """Raised inside a running watch when the test expires all watches."""


class FakeCluster:
    """The store. Thread-safe; every read returns a deep copy."""

    def __init__(
        self,
        *,
        history_limit: int = 10_000,
        wall: Callable[[], float] = time.time,
        termination_delay: float = 0.0,
        bookmark_interval: float | None = None,
    ) -> None:
        self._lock = threading.Condition()
        self._objects: dict[str, dict[Key, client.KubeObject]] = {k: {} for k in KIND_NAMES}
        self._rv = 1000
        self._history: deque[_Change] = deque(maxlen=history_limit)
        self._compacted_rv = self._rv
        self._expiry_epoch = 0
        self._bookmark_epoch = 0
        self._wall = wall
        self.termination_delay = termination_delay
        self.reviews = fakereviews.Reviews()
        """Tokens and grants behind TokenReviews and SubjectAccessReviews."""
        """Seconds a pod stays terminating (deletionTimestamp set) after a graceful delete
        or eviction before it disappears; 0 removes it at once."""
        self.bookmark_interval = bookmark_interval
        """Seconds between BOOKMARK events on watches that asked for them (None: only
        when :meth:`send_bookmarks` is called)."""
        self.initial_events_end_delay = 0.0
        """Seconds from a streamed list's last initial event to its initial-events-end
        bookmark: kube-apiserver sends that bookmark at its next bookmark tick, so the
        changes made meanwhile come before it. 0: right after the initial events."""
        self.disruption_budgets: list[DisruptionBudget] = []
        self.eviction_status: dict[Key, int] = {}
        """Injected answer per pod for the next evictions (e.g. 500), consulted first."""
        self.evictions: list[EvictionRecord] = []
        self.deletions: list[DeletionRecord] = []
        self.bindings: list[tuple[str, str, str]] = []
        """Every successful binding, ``(namespace, pod, node)``, in order."""
        self._timers: list[threading.Timer] = []

    # --- setup helpers ------------------------------------------------------------------
    def add_pdb(
        self, namespace: str, name: str, *, selector: str, disruptions_allowed: int = 0
    ) -> DisruptionBudget:
        """A budget that Evictions consult, also stored as a policy/v1 object (so it can
        be listed and watched); ``selector`` is a label selector string."""
        budget = DisruptionBudget(
            namespace, name, selectors.parse_label_selector(selector), disruptions_allowed
        )
        operators = {
            selectors.Operator.IN: "In",
            selectors.Operator.EQUALS: "In",
            selectors.Operator.NOT_IN: "NotIn",
            selectors.Operator.NOT_EQUALS: "NotIn",
            selectors.Operator.EXISTS: "Exists",
            selectors.Operator.DOES_NOT_EXIST: "DoesNotExist",
        }
        expressions = [
            {"key": r.key, "operator": operators[r.operator], "values": sorted(r.values)}
            for r in budget.selector.requirements
        ]
        with self._lock:
            self.disruption_budgets.append(budget)
            self.create(
                "poddisruptionbudgets",
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"selector": {"matchExpressions": expressions}},
                    "status": {"disruptionsAllowed": disruptions_allowed},
                },
                namespace,
            )
        return budget

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    # --- reads --------------------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> client.KubeObject:
        with self._lock:
            obj = self._objects[kind].get((namespace, name))
            if obj is None:
                raise errors.NotFound(f'{kind} "{name}" not found', status=404)
            return _copy(obj)

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        field_selector: str = "",
        label_selector: str = "",
    ) -> client.ObjectList:
        matches = _matcher(field_selector, label_selector, kind)
        with self._lock:
            items = tuple(
                _copy(obj)
                for (ns, _), obj in sorted(self._objects[kind].items())
                if (namespace is None or ns == namespace) and matches(obj)
            )
            return client.ObjectList(items, str(self._rv))

    # --- writes -------------------------------------------------------------------------
    def create(self, kind: str, obj: Mapping[str, Any], namespace: str = "") -> client.KubeObject:
        new = _copy(dict(obj))
        meta = new.setdefault("metadata", {})
        if kind in CLUSTER_SCOPED:
            namespace = ""
        else:
            namespace = namespace or meta.get("namespace") or "default"
            meta["namespace"] = namespace
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise kube_errors.Invalid(f"{kind}: metadata.name is required", status=422)
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        api_version, kind_name = KIND_NAMES[kind]
        new.setdefault("apiVersion", api_version)
        new.setdefault("kind", kind_name)
        if kind == "events":
            _validate_event_namespace(new)
        with self._lock:
            key = (namespace, meta["name"])
            if key in self._objects[kind]:
                raise AlreadyExists(f'{kind} "{meta["name"]}" already exists', status=409)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta["creationTimestamp"] = client.api_time(self._wall())
            self._write(kind, key, None, new)
            return _copy(new)

    def patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        body: Any,
        *,
        patch_type: PatchType = PatchType.STRATEGIC,
        subresource: str = "",
        dry_run: bool = False,
    ) -> client.KubeObject:
        with self._lock:
            current = self._objects[kind].get((namespace, name))
            if current is None:
                raise errors.NotFound(f'{kind} "{name}" not found', status=404)
            patched = _apply_patch(kind, current, body, patch_type)
            requested_rv = (patched.get("metadata") or {}).get("resourceVersion")
            current_rv = current["metadata"]["resourceVersion"]
            if requested_rv not in (None, "", current_rv):
                raise errors.Conflict(
                    f'Operation cannot be fulfilled on {kind} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    status=409,
                )
            if subresource == "status":
                result = _copy(current)
                if "status" in patched:
                    result["status"] = patched["status"]
                else:
                    result.pop("status", None)
            elif subresource:
                raise errors.NotFound(f"{kind}/{subresource}: no such subresource", status=404)
            else:
                result = patched
                result.setdefault("metadata", {})
                if "status" in current:
                    result["status"] = _copy(current["status"])
                else:
                    result.pop("status", None)
            # identity is immutable whatever the patch said
            for immutable in ("name", "namespace", "uid", "creationTimestamp"):
                if immutable in current["metadata"]:
                    result["metadata"][immutable] = current["metadata"][immutable]
            result["metadata"]["resourceVersion"] = current_rv
            if result == current or dry_run:
                return _copy(result)
            self._write(kind, (namespace, name), current, result)
            return _copy(result)

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        dry_run: bool = False,
    ) -> client.KubeObject:
        with self._lock:
            current = self._objects[kind].get((namespace, name))
            if current is None:
                raise errors.NotFound(f'{kind} "{name}" not found', status=404)
            if uid is not None and current["metadata"].get("uid") != uid:
                raise errors.Conflict(
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{current['metadata'].get('uid')}",
                    status=409,
                )
            if dry_run:
                return _copy(current)
            if kind != "pods":
                self._write(kind, (namespace, name), current, None)
                return _copy(current)
            self.deletions.append(DeletionRecord(namespace, name, grace_period_seconds))
            grace = _deletion_grace(current, grace_period_seconds)
            meta = current["metadata"]
            pending = meta.get("deletionGracePeriodSeconds")
            if meta.get("deletionTimestamp") and pending is not None and grace >= pending:
                return _copy(current)  # terminating already, no sooner than this asks
            # as kube-apiserver: the pod is marked first (a MODIFIED event; a binding in
            # between is refused 409 "is being deleted"), and removed once its grace is 0
            # the instant the grace runs out; a shortened grace moves it earlier
            since = self._wall()
            if pending is not None:
                since = (client.parse_api_time(meta.get("deletionTimestamp")) or since) - pending
            marked = _copy(current)
            marked["metadata"]["deletionTimestamp"] = client.api_time(since + grace)
            marked["metadata"]["deletionGracePeriodSeconds"] = grace
            self._write(kind, (namespace, name), current, marked)
            if grace > 0 and self.termination_delay > 0:
                timer = threading.Timer(
                    self.termination_delay, self._finish_termination, (namespace, name)
                )
                timer.daemon = True
                self._timers.append(timer)
                timer.start()
                return _copy(marked)
        # a pod whose grace is 0, or whose kubelet (none here) would finish at once: gone
        # after a window other requests can fall into, as on a real apiserver
        self._finish_termination(namespace, name)
        return _copy(marked)

    def _finish_termination(self, namespace: str, name: str) -> None:
        with self._lock:
            current = self._objects["pods"].get((namespace, name))
            if current is not None and current["metadata"].get("deletionTimestamp"):
                self._write("pods", (namespace, name), current, None)

    def bind(self, namespace: str, name: str, *, uid: str | None, node_name: str) -> None:
        """POST pods/NAME/binding: set ``spec.nodeName`` and ``PodScheduled=True``, as the
        API server does; 409 for a pod already assigned (or being deleted, or a uid that
        no longer matches), 404 for a missing pod."""
        with self._lock:
            pod = self._objects["pods"].get((namespace, name))
            if pod is None:
                raise errors.NotFound(f'pods "{name}" not found', status=404)
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if uid and meta.get("uid") != uid:
                raise errors.Conflict(
                    f"Precondition failed: UID in precondition: {uid}, "
                    f"UID in object meta: {meta.get('uid')}",
                    status=409,
                )
            if spec.get("nodeName"):
                raise errors.Conflict(
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                    f'already assigned to node "{spec["nodeName"]}"',
                    status=409,
                )
            if meta.get("deletionTimestamp"):
                raise errors.Conflict(
                    f"pod {name} is being deleted, cannot be assigned to a host", status=409
                )
            bound = _copy(pod)
            bound.setdefault("spec", {})["nodeName"] = node_name
            status = bound.setdefault("status", {})
            conditions = [
                c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"
            ]
            conditions.append(
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": client.api_time(self._wall()),
                }
            )
            status["conditions"] = conditions
            self.bindings.append((namespace, name, node_name))
            self._write("pods", (namespace, name), pod, bound)

    def replace(
        self, kind: str, namespace: str, name: str, obj: Mapping[str, Any]
    ) -> client.KubeObject:
        """PUT: replace the object; a ``metadata.resourceVersion`` in it must be current
        (409 otherwise), as kube-apiserver's optimistic concurrency."""
        with self._lock:
            current = self._objects[kind].get((namespace, name))
            if current is None:
                raise errors.NotFound(f'{kind} "{name}" not found', status=404)
            new = _copy(dict(obj))
            meta = new.setdefault("metadata", {})
            requested_rv = meta.get("resourceVersion")
            if requested_rv not in (None, "", current["metadata"]["resourceVersion"]):
                raise errors.Conflict(
                    f'Operation cannot be fulfilled on {kind} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    status=409,
                )
            for immutable in ("name", "namespace", "uid", "creationTimestamp"):
                if immutable in current["metadata"]:
                    meta[immutable] = current["metadata"][immutable]
            api_version, kind_name = KIND_NAMES[kind]
            new.setdefault("apiVersion", api_version)
            new.setdefault("kind", kind_name)
            self._write(kind, (namespace, name), current, new)
            return _copy(new)

    def evict(
        self,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        dry_run: bool = False,
    ) -> None:
        """POST pods/NAME/eviction with a policy/v1 Eviction ``body``."""
        if (body.get("metadata") or {}).get("name") != name:
            raise kube_errors.from_status(
                400, "name in URL does not match name in Eviction object", what="evict"
            )
        options = body.get("deleteOptions") or {}
        grace = options.get("gracePeriodSeconds")
        uid = (options.get("preconditions") or {}).get("uid")

        def record(outcome: int) -> None:
            self.evictions.append(EvictionRecord(namespace, name, grace, uid, dry_run, outcome))

        with self._lock:
            injected = self.eviction_status.get((namespace, name))
            if injected is not None:
                record(injected)
                message = "injected eviction failure"
                if injected == 429:
                    message = kube_errors.PDB_REFUSAL_MESSAGE
                raise kube_errors.from_status(
                    injected,
                    message,
                    what=f"evict {namespace}/{name}",
                    eviction=True,
                )
            pod = self._objects["pods"].get((namespace, name))
            if pod is None:
                record(404)
                raise errors.NotFound(f'pods "{name}" not found', status=404)
            if uid is not None and pod["metadata"].get("uid") != uid:
                record(409)
                raise errors.Conflict(
                    f"Precondition failed: UID in precondition: {uid}, "
                    f"UID in object meta: {pod['metadata'].get('uid')}",
                    status=409,
                )
            # kube-apiserver evicts these without consulting budgets: a terminating pod,
            # and one that is not running (Pending, Succeeded, Failed) disrupts nothing
            terminating = bool(pod["metadata"].get("deletionTimestamp"))
            phase = (pod.get("status") or {}).get("phase")
            labels = pod["metadata"].get("labels") or {}
            if not terminating and phase not in ("Pending", "Succeeded", "Failed"):
                budgets = [
                    b
                    for b in self.disruption_budgets
                    if b.namespace == namespace and b.selector.matches(labels)
                ]
                if any(b.disruptions_allowed <= 0 for b in budgets):
                    record(429)
                    raise kube_errors.EvictionBlocked(
                        f"evict {namespace}/{name}: 429 TooManyRequests: "
                        f"{kube_errors.PDB_REFUSAL_MESSAGE}",
                        status=429,
                    )
                if not dry_run:
                    for budget in budgets:
                        budget.disruptions_allowed -= 1
            record(201)
            if not dry_run:
                # as kube-apiserver: the pod learns why it goes before it goes
                marked = _copy(pod)
                status = marked.setdefault("status", {})
                status["conditions"] = [
                    c for c in status.get("conditions") or () if c.get("type") != "DisruptionTarget"
                ] + [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "EvictionByEvictionAPI",
                        "message": "Eviction API: evicting",
                        "lastTransitionTime": client.api_time(self._wall()),
                    }
                ]
                self._write("pods", (namespace, name), pod, marked)
                self.delete("pods", namespace, name, grace_period_seconds=grace, uid=uid)

    # --- watch --------------------------------------------------------------------------
    def watch(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        field_selector: str = "",
        label_selector: str = "",
        timeout_seconds: float | None = None,
        allow_bookmarks: bool = False,
        stop: threading.Event | None = None,
        send_initial_events: bool | None = None,
    ) -> Iterator[client.WatchEvent]:
        """Events after ``resource_version`` as kube-apiserver's watch cache sends them.

        Raises :class:`nodeagent.kube.errors.Gone` at once when the version has been
        compacted, or mid-stream after :meth:`expire_watches`. An object that stops
        matching the selectors is reported DELETED, one that starts matching ADDED.

        ``send_initial_events`` (WatchList): True begins with an ADDED event per object
        there is now and, with ``allow_bookmarks``, a BOOKMARK annotated
        ``k8s.io/initial-events-end`` at that state's resourceVersion; False starts from
        ``resource_version`` (now, if none) without them. None is a watch without the
        option, which the real server defaults as WatchList does
        (``SetListOptionsDefaults``): from ""/"0" it is True, else False.
        """
        if send_initial_events is None:
            send_initial_events = resource_version in ("", "0")
        matches = _matcher(field_selector, label_selector, kind)
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        stop = stop or threading.Event()
        with self._lock:
            expiry_epoch, bookmark_epoch = self._expiry_epoch, self._bookmark_epoch
            if resource_version in ("", "0") or send_initial_events:
                position = self._rv
                initial = [
                    client.WatchEvent(client.WatchEventType.ADDED, _copy(obj))
                    for (ns, _), obj in sorted(self._objects[kind].items())
                    if (namespace is None or ns == namespace) and matches(obj)
                ]
                end_due = None
                if not send_initial_events:
                    initial = []
                elif allow_bookmarks and self.initial_events_end_delay > 0:
                    end_due = time.monotonic() + self.initial_events_end_delay
                elif allow_bookmarks:
                    api_version, kind_name = KIND_NAMES[kind]
                    meta = {
                        "resourceVersion": str(position),
                        "annotations": {client.INITIAL_EVENTS_END: "true"},
                    }
                    initial.append(
                        client.WatchEvent(
                            client.WatchEventType.BOOKMARK,
                            {"apiVersion": api_version, "kind": kind_name, "metadata": meta},
                        )
                    )
            else:
                try:
                    position = int(resource_version)
                except ValueError as exc:
                    raise kube_errors.Invalid(
                        f"invalid resourceVersion {resource_version!r}", status=400
                    ) from exc
                if position < self._compacted_rv:
                    raise kube_errors.Gone(
                        f"too old resource version: {position} ({self._compacted_rv})",
                        status=410,
                    )
                initial = []
                end_due = None
        yield from initial
        last_bookmark = time.monotonic()
        while not stop.is_set():
            with self._lock:
                if self._expiry_epoch != expiry_epoch or position < self._compacted_rv:
                    raise kube_errors.Gone(
                        f"too old resource version: {position} ({self._compacted_rv})",
                        status=410,
                    )
                pending = self._changes_after(position)
                send_bookmark = allow_bookmarks and (
                    self._bookmark_epoch != bookmark_epoch
                    or (
                        self.bookmark_interval is not None
                        and time.monotonic() - last_bookmark >= self.bookmark_interval
                    )
                )
                bookmark_epoch = self._bookmark_epoch
                if not pending and not send_bookmark:
                    wait = 0.05
                    if deadline is not None:
                        wait = min(wait, max(0.0, deadline - time.monotonic()))
                    self._lock.wait(wait)
                    pending = self._changes_after(position)
                current_rv = self._rv
            for change in pending:
                if change.kind != kind:
                    position = change.resource_version
                    continue
                event = _watch_event(change, namespace, matches)
                position = change.resource_version
                if event is not None:
                    yield event
            if end_due is not None and time.monotonic() >= end_due:
                end_due = None
                position = max(position, current_rv)
                api_version, kind_name = KIND_NAMES[kind]
                meta = {
                    "resourceVersion": str(position),
                    "annotations": {client.INITIAL_EVENTS_END: "true"},
                }
                yield client.WatchEvent(
                    client.WatchEventType.BOOKMARK,
                    {"apiVersion": api_version, "kind": kind_name, "metadata": meta},
                )
            if send_bookmark:
                position = max(position, current_rv)
                last_bookmark = time.monotonic()
                api_version, kind_name = KIND_NAMES[kind]
                yield client.WatchEvent(
                    client.WatchEventType.BOOKMARK,
                    {
                        "apiVersion": api_version,
                        "kind": kind_name,
                        "metadata": {"resourceVersion": str(position)},
                    },
                )
            if deadline is not None and time.monotonic() >= deadline:
                return

    def _changes_after(self, position: int) -> Sequence[_Change]:
        """History entries newer than ``position``; lock held. Versions in the history are
        consecutive, so this indexes from the end instead of scanning it all (a watch cache
        answers in time proportional to what is new, however long the history)."""
        history = self._history
        if not history:
            return []
        start = max(0, position - history[0].resource_version + 1)
        return [history[i] for i in range(start, len(history))]

    def check_watch_version(self, resource_version: str) -> None:
        """Raise :class:`~nodeagent.kube.errors.Gone` (or Invalid) if a watch from
        ``resource_version`` cannot start; lets a server answer before the first event."""
        if resource_version in ("", "0"):
            return
        try:
            position = int(resource_version)
        except ValueError as exc:
            raise kube_errors.Invalid(
                f"invalid resourceVersion {resource_version!r}", status=400
            ) from exc
        with self._lock:
            if position < self._compacted_rv:
                raise kube_errors.Gone(
                    f"too old resource version: {position} ({self._compacted_rv})", status=410
                )

    def send_bookmarks(self) -> None:
        """Make every watch that allows bookmarks send one now."""
        with self._lock:
            self._bookmark_epoch += 1
            self._lock.notify_all()

    def compact(self) -> None:
        """Forget all history: watching from any earlier resourceVersion answers 410."""
        with self._lock:
            self._history.clear()
            self._compacted_rv = self._rv

    def expire_watches(self) -> None:
        """Compact and end every open watch with an ERROR event of code 410."""
        with self._lock:
            self._history.clear()
            self._compacted_rv = self._rv
            self._expiry_epoch += 1
            self._lock.notify_all()

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()

    # --- internals ----------------------------------------------------------------------
    def _write(
        self,
        kind: str,
        key: Key,
        old: client.KubeObject | None,
        new: client.KubeObject | None,
    ) -> None:
        """Store ``new`` (None deletes) under a fresh resourceVersion; lock held."""
        self._rv += 1
        if new is None:
            self._objects[kind].pop(key, None)
            deleted = _copy(old) if old is not None else None
            if deleted is not None:
                deleted["metadata"]["resourceVersion"] = str(self._rv)
            change = _Change(self._rv, kind, deleted, None)
        else:
            new["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[kind][key] = new
            change = _Change(self._rv, kind, _copy(old), _copy(new))
        if len(self._history) == self._history.maxlen and self._history:
            self._compacted_rv = self._history[0].resource_version
        self._history.append(change)
        self._lock.notify_all()


def _validate_event_namespace(event: Mapping[str, Any]) -> None:
    """kube-apiserver's rule: an event lives in its object's namespace, and an event about
    a cluster-scoped object (a Node) in ``default``; otherwise 422."""
    namespace = event["metadata"]["namespace"]
    involved = (event.get("involvedObject") or {}).get("namespace") or ""
    if involved != namespace and not (involved == "" and namespace == "default"):
        raise kube_errors.Invalid(
            f'Event "{event["metadata"]["name"]}" is invalid: involvedObject.namespace:'
            f' Invalid value: "{involved}": does not match event.namespace',
            status=422,
        )


def _deletion_grace(pod: client.KubeObject, asked: int | None) -> int:
    """The grace period kube-apiserver gives a pod's deletion: what was asked, else the
    pod's ``terminationGracePeriodSeconds`` (30 when unset); 0 for a pod that was never
    scheduled or has already finished, since no kubelet has anything to stop."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    if asked is not None:
        return max(0, asked)
    return int(spec.get("terminationGracePeriodSeconds", 30))


INDEXED_FIELDS: Mapping[str, frozenset[str]] = {
    "pods": frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        }
    ),
    "nodes": frozenset({"spec.unschedulable"}),
    "events": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
}
"""Field labels kube-apiserver accepts in a field selector, per kind, besides
``metadata.name`` and ``metadata.namespace``; any other is a 400."""


def _matcher(
    field_selector: str, label_selector: str, kind: str
) -> Callable[[Mapping[str, Any]], bool]:
    try:
        fields = selectors.parse_field_selector(field_selector)
        allowed = INDEXED_FIELDS.get(kind, frozenset()) | {"metadata.name", "metadata.namespace"}
        for requirement in fields.requirements:
            label = ".".join(requirement.path)
            if label not in allowed:
                raise selectors.SelectorError(f"field label not supported: {label}")
        return selectors.matcher(field_selector=field_selector, label_selector=label_selector)
    except selectors.SelectorError as exc:
        raise kube_errors.Invalid(str(exc), status=400) from exc


def _watch_event(
    change: _Change, namespace: str | None, matches: Callable[[Mapping[str, Any]], bool]
) -> client.WatchEvent | None:
    def visible(obj: client.KubeObject | None) -> bool:
        if obj is None:
            return False
        in_namespace = namespace is None or obj["metadata"].get("namespace", "") == namespace
        return in_namespace and matches(obj)

    was, now = visible(change.old), visible(change.new)
    if change.new is None and was and change.old is not None:
        return client.WatchEvent(client.WatchEventType.DELETED, _copy(change.old))
    if change.new is None:
        return None
    if now and not was:
        return client.WatchEvent(client.WatchEventType.ADDED, _copy(change.new))
    if now and was:
        return client.WatchEvent(client.WatchEventType.MODIFIED, _copy(change.new))
    if was and not now and change.old is not None:
        # the state it last matched in, at the new resourceVersion, as kube-apiserver's
        # watch cache sends it (cacheWatcher.convertToWatchEvent)
        gone = _copy(change.old)
        gone["metadata"]["resourceVersion"] = str(change.resource_version)
        return client.WatchEvent(client.WatchEventType.DELETED, gone)
    return None


def _apply_patch(kind: str, current: client.KubeObject, body: Any, patch_type: PatchType) -> Any:
    try:
        if patch_type is PatchType.STRATEGIC:
            return merge.strategic_merge_patch(kind, current, body)
        if patch_type is PatchType.MERGE:
            return merge.json_merge_patch(current, body)
        return _json_patch(current, body)
    except merge.PatchError as exc:
        raise kube_errors.Invalid(str(exc), status=422) from exc


def _json_patch(current: client.KubeObject, operations: Any) -> Any:
    try:
        # the fake's only optional dependency: the agent itself never sends a JSON patch
        import jsonpatch
    except ImportError as exc:  # pragma: no cover - jsonpatch ships with the test extra
        raise kube_errors.Invalid("JSON patch needs the jsonpatch package", status=415) from exc
    if not isinstance(operations, list):
        raise kube_errors.Invalid("a JSON patch must be a list of operations", status=400)
    try:
        return jsonpatch.JsonPatch(operations).apply(current)
    except jsonpatch.JsonPatchTestFailed as exc:
        # kube-apiserver answers a failed "test" operation with 422 Invalid
        raise kube_errors.Invalid(
            f"the server rejected our request due to an error in our request: {exc}", status=422
        ) from exc
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise kube_errors.Invalid(f"invalid JSON patch: {exc}", status=422) from exc


def status_body(exc: errors.KubeAPIError) -> dict[str, Any]:
    """The ``Status`` object kube-apiserver would send for ``exc``."""
    code = exc.status or 500
    reasons = {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Expired",
        415: "UnsupportedMediaType",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
    }
    reason = "AlreadyExists" if isinstance(exc, AlreadyExists) else reasons.get(code, "Unknown")
    body = kube_errors.failure_status(code, reason, str(exc))
    if isinstance(exc, kube_errors.EvictionBlocked):
        body["message"] = kube_errors.PDB_REFUSAL_MESSAGE
        body["details"] = {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget needs more healthy pods than are running",
                }
            ]
        }
    return body


# --- the in-process client --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """One recorded client call."""

    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


class _FakeWatch:
    def __init__(self, events: Callable[[threading.Event], Iterator[client.WatchEvent]]) -> None:
        self._stop = threading.Event()
        self._events = events

    def __iter__(self) -> Iterator[client.WatchEvent]:
        return self._events(self._stop)

    def close(self) -> None:
        self._stop.set()


class FakeKubeClient:
    """:class:`~nodeagent.kube.client.KubeClient` over a :class:`FakeCluster`, in process.

    ``calls`` records every call in order; :meth:`fail_next` makes the next ``times``
    calls of a method raise a given error (before touching the store), which is how tests
    simulate outages, conflicts and throttling without a network.
    """

    def __init__(self, cluster: FakeCluster | None = None) -> None:
        self.cluster = cluster or FakeCluster()
        self.calls: list[Call] = []
        self._failures: dict[str, deque[errors.KubeAPIError]] = {}
        self._lock = threading.Lock()

    def fail_next(self, method: str, error: errors.KubeAPIError, times: int = 1) -> None:
        with self._lock:
            self._failures.setdefault(method, deque()).extend(itertools.repeat(error, times))

    def calls_to(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    def _enter(self, method: str, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            self.calls.append(Call(method, args, dict(kwargs)))
            queue = self._failures.get(method)
            error = queue.popleft() if queue else None
        if error is not None:
            raise error

    def get_node(self, name: str) -> client.KubeObject:
        self._enter("get_node", name)
        return self.cluster.get("nodes", "", name)

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        self._enter("patch_node", name, _copy(dict(patch)))
        return self.cluster.patch("nodes", "", name, patch)

    def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        self._enter("patch_node_status", name, _copy(dict(patch)))
        return self.cluster.patch("nodes", "", name, patch, subresource="status")

    def list_pods(self, *, field_selector: str = "", label_selector: str = "") -> client.ObjectList:
        self._enter("list_pods", field_selector=field_selector, label_selector=label_selector)
        return self.cluster.list(
            "pods", field_selector=field_selector, label_selector=label_selector
        )

    def watch_pods(
        self,
        *,
        resource_version: str,
        field_selector: str = "",
        label_selector: str = "",
        timeout_seconds: int = 1800,
    ) -> client.WatchStream:
        self._enter(
            "watch_pods",
            resource_version=resource_version,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
        )
        cluster = self.cluster

        def events(stop: threading.Event) -> Iterator[client.WatchEvent]:
            return cluster.watch(
                "pods",
                resource_version=resource_version,
                field_selector=field_selector,
                label_selector=label_selector,
                timeout_seconds=timeout_seconds,
                allow_bookmarks=True,
                stop=stop,
            )

        return _FakeWatch(events)

    def evict_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None,
        uid: str | None = None,
    ) -> None:
        self._enter("evict_pod", namespace, name, grace_period_seconds=grace_period_seconds)
        body = eviction_body(namespace, name, grace_period_seconds, uid)
        self.cluster.evict(namespace, name, body)

    def delete_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None,
        uid: str | None = None,
    ) -> None:
        self._enter("delete_pod", namespace, name, grace_period_seconds=grace_period_seconds)
        self.cluster.delete(
            "pods", namespace, name, grace_period_seconds=grace_period_seconds, uid=uid
        )

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> client.KubeObject:
        self._enter("create_event", namespace, _copy(dict(event)))
        return self.cluster.create("events", event, namespace)

    def post_event(self, namespace: str, body: bytes) -> None:
        self.create_event(namespace, json.loads(body))

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        self._enter("patch_event", namespace, name, _copy(dict(patch)))
        return self.cluster.patch("events", namespace, name, patch)

    # --- ClusterClient -------------------------------------------------------------------
    def _watch_kind(
        self, kind: str, method: str, resource_version: str, timeout_seconds: int
    ) -> client.WatchStream:
        self._enter(method, resource_version=resource_version, timeout_seconds=timeout_seconds)
        cluster = self.cluster

        def events(stop: threading.Event) -> Iterator[client.WatchEvent]:
            return cluster.watch(
                kind,
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                allow_bookmarks=True,
                stop=stop,
            )

        return _FakeWatch(events)

    def list_nodes(self) -> client.ObjectList:
        self._enter("list_nodes")
        return self.cluster.list("nodes")

    def watch_nodes(
        self, *, resource_version: str, timeout_seconds: int = 1800
    ) -> client.WatchStream:
        return self._watch_kind("nodes", "watch_nodes", resource_version, timeout_seconds)

    def list_disruption_budgets(self) -> client.ObjectList:
        self._enter("list_disruption_budgets")
        return self.cluster.list("poddisruptionbudgets")

    def watch_disruption_budgets(
        self, *, resource_version: str, timeout_seconds: int = 1800
    ) -> client.WatchStream:
        return self._watch_kind(
            "poddisruptionbudgets", "watch_disruption_budgets", resource_version, timeout_seconds
        )

    def list_storage(self, kind: client.StorageKind) -> client.ObjectList:
        self._enter("list_storage", kind.value)
        return self.cluster.list(kind.value)

    def watch_storage(
        self, kind: client.StorageKind, *, resource_version: str, timeout_seconds: int = 1800
    ) -> client.WatchStream:
        return self._watch_kind(kind.value, "watch_storage", resource_version, timeout_seconds)

    def replace_storage(
        self, kind: client.StorageKind, namespace: str, name: str, body: Mapping[str, Any]
    ) -> client.KubeObject:
        self._enter("replace_storage", kind.value, namespace, name, _copy(dict(body)))
        return self.cluster.replace(kind.value, namespace, name, body)

    def list_resources(self, kind: client.ResourceKind) -> client.ObjectList:
        self._enter("list_resources", kind.value)
        return self.cluster.list(kind.value)

    def watch_resources(
        self, kind: client.ResourceKind, *, resource_version: str, timeout_seconds: int = 1800
    ) -> client.WatchStream:
        return self._watch_kind(kind.value, "watch_resources", resource_version, timeout_seconds)

    def get_resource_claim(self, namespace: str, name: str) -> client.KubeObject:
        self._enter("get_resource_claim", namespace, name)
        return self.cluster.get("resourceclaims", namespace, name)

    def replace_resource_claim(
        self, namespace: str, name: str, body: Mapping[str, Any], *, status: bool = False
    ) -> client.KubeObject:
        self._enter("replace_resource_claim", namespace, name, _copy(dict(body)), status=status)
        return self.cluster.replace("resourceclaims", namespace, name, body)

    def patch_resource_claim_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> client.KubeObject:
        self._enter("patch_resource_claim_status", namespace, name, _copy(dict(patch)))
        return self.cluster.patch("resourceclaims", namespace, name, patch)

    def create_resource_claim(self, namespace: str, body: Mapping[str, Any]) -> client.KubeObject:
        self._enter("create_resource_claim", namespace, _copy(dict(body)))
        return self.cluster.create("resourceclaims", body, namespace)

    def delete_resource_claim(self, namespace: str, name: str, *, uid: str) -> None:
        self._enter("delete_resource_claim", namespace, name, uid=uid)
        self.cluster.delete("resourceclaims", namespace, name, uid=uid)

    def bind_pod(self, namespace: str, name: str, *, uid: str, node_name: str) -> None:
        self._enter("bind_pod", namespace, name, uid=uid, node_name=node_name)
        self.cluster.bind(namespace, name, uid=uid, node_name=node_name)

    def patch_pod_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> client.KubeObject:
        self._enter("patch_pod_status", namespace, name, _copy(dict(patch)))
        return self.cluster.patch("pods", namespace, name, patch, subresource="status")

    def get_lease(self, namespace: str, name: str) -> client.KubeObject:
        self._enter("get_lease", namespace, name)
        return self.cluster.get("leases", namespace, name)

    def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> client.KubeObject:
        self._enter("create_lease", namespace, _copy(dict(lease)))
        return self.cluster.create("leases", lease, namespace)

    def replace_lease(
        self, namespace: str, name: str, lease: Mapping[str, Any]
    ) -> client.KubeObject:
        self._enter("replace_lease", namespace, name, _copy(dict(lease)))
        return self.cluster.replace("leases", namespace, name, lease)

    # --- AccessReviewClient ------------------------------------------------------------------
    def create_token_review(self, token: str) -> client.KubeObject:
        self._enter("create_token_review")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        return self._review(fakereviews.TOKEN_REVIEWS, body)

    def create_subject_access_review(self, spec: Mapping[str, Any]) -> client.KubeObject:
        self._enter("create_subject_access_review", _copy(dict(spec)))
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": _copy(dict(spec)),
        }
        return self._review(fakereviews.ACCESS_REVIEWS, body)

    def _review(self, path: str, body: dict[str, Any]) -> client.KubeObject:
        answer = self.cluster.reviews.answer("POST", path, body)
        assert answer is not None
        status, document = answer
        if status >= 400:
            raise kube_errors.from_status(status, json.dumps(document), what=f"POST {path}")
        result: client.KubeObject = document
        return result


def eviction_body(
    namespace: str, name: str, grace_period_seconds: int | None, uid: str | None
) -> dict[str, Any]:
    """A policy/v1 Eviction as the agent posts it."""
    options: dict[str, Any] = {}
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    if uid is not None:
        options["preconditions"] = {"uid": uid}
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if options:
        body["deleteOptions"] = options
    return body
