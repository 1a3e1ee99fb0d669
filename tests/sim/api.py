"""A simulated API server for deterministic simulation: one thread, one clock, one seed.

:class:`SimAPI` keeps the truth (pods, nodes, PodDisruptionBudgets, the Lease, events)
with kube-apiserver's write semantics: every write gets the next resourceVersion and is
appended to its kind's history, which is what the watches deliver, in order, whenever
the simulation chooses to (any lag, any interleaving of kinds). Objects are copied on
write and never changed in place afterwards, so lists, history and informers can share
them safely.

:class:`SimClient` is one component's :class:`~nodeagent.kube.client.ClusterClient` over
it. Every call first asks the API's :class:`Faults` whether it fails (an outage refuses
everything; single calls fail with 500 or lose their response), so the fault pattern is
a function of the seed and the order of calls, nothing else. Bindings are recorded with
who sent them and what came back, for the invariants to judge.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar, cast

from nodeagent.base import errors
from nodeagent.base.clock import FakeClock
from nodeagent.kube import client, selectors
from nodeagent.kube import errors as kube_errors

Key = tuple[str, str]
T = TypeVar("T")
STORAGE = tuple(kind.value for kind in client.StorageKind)
"""The volume plugins' kinds (PVs, PVCs, StorageClasses, CSI objects)."""
KINDS = ("pods", "nodes", "poddisruptionbudgets", "leases", "events", *STORAGE)
WATCHED = ("pods", "nodes", "poddisruptionbudgets", *STORAGE)
KIND_NAMES = {
    "pods": ("v1", "Pod"),
    "nodes": ("v1", "Node"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
    "leases": ("coordination.k8s.io/v1", "Lease"),
    "events": ("v1", "Event"),
    **{kind.value: (kind.api_version, kind.kind) for kind in client.StorageKind},
}


def copy_json(value: T) -> T:
    """A deep copy of a JSON value (dicts, lists, scalars): faster than ``deepcopy``."""
    if isinstance(value, dict):
        return cast(T, {k: copy_json(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(T, [copy_json(v) for v in value])
    return value


class BindOutcome(StrEnum):
    CREATED = "201"
    """Applied, and the sender got the answer."""
    LOST = "lost"
    """Applied, but the answer was lost (the client timed out)."""
    CONFLICT = "409"
    NOT_FOUND = "404"
    SERVER_ERROR = "500"
    REFUSED = "refused"
    """The API was unreachable (an outage)."""


@dataclass(frozen=True, slots=True)
class BindRecord:
    at: float
    sender: str
    uid: str
    pod: str
    node: str
    outcome: BindOutcome


@dataclass(frozen=True, slots=True)
class EvictionRecord:
    at: float
    sender: str
    uid: str
    pod: str
    grace_period_seconds: int | None
    pending_before: bool
    """An earlier eviction of this pod was accepted and the pod is still there."""


@dataclass(slots=True)
class Faults:
    """What may go wrong, drawn from the simulation's ``rng`` at each call."""

    rng: random.Random
    clock: FakeClock
    call_failure: float = 0.0
    """Probability that one call (a write or a lease round) answers 500."""
    bind_failure: float = 0.0
    """Probability that a binding answers 500 before it is applied."""
    lost_response: float = 0.0
    """Probability that an applied binding's answer is lost."""
    lease_rejection: float = 0.0
    """Probability that a Lease write is rejected (409 or 500)."""
    outage_until: float = float("-inf")
    """The API refuses every connection until then (monotonic seconds)."""
    lease_cut: dict[str, float] = field(default_factory=dict)
    """Sender -> until when its Lease requests fail (a partial partition: its bindings
    still go through, the one case where a stale leader could bind beside a new one)."""

    @property
    def down(self) -> bool:
        return self.clock.now() < self.outage_until

    def check_up(self, what: str) -> None:
        if self.down:
            raise kube_errors.Unavailable(f"{what}: connection refused", status=None)

    def maybe_fail(self, what: str, probability: float | None = None) -> None:
        self.check_up(what)
        chance = self.call_failure if probability is None else probability
        if chance and self.rng.random() < chance:
            raise errors.ServerError(f"{what}: 500 InternalError (injected)", status=500)

    def heal(self) -> None:
        self.call_failure = self.bind_failure = self.lost_response = self.lease_rejection = 0.0
        self.outage_until = float("-inf")  # a Lease partition ends at its own time


@dataclass(slots=True)
class SimAPI:
    clock: FakeClock
    faults: Faults
    rv: int = 1000
    objects: dict[str, dict[Key, client.KubeObject]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    history: dict[str, list[client.WatchEvent]] = field(
        default_factory=lambda: {kind: [] for kind in WATCHED}
    )
    written_at: dict[str, list[float]] = field(
        default_factory=lambda: {kind: [] for kind in WATCHED}
    )
    """When each history entry was written (monotonic seconds), entry by entry."""
    bindings: list[BindRecord] = field(default_factory=list)
    evictions: list[EvictionRecord] = field(default_factory=list)
    on_evicted: Callable[[EvictionRecord], None] = lambda record: None
    """Called when an eviction is accepted, before the pod starts terminating."""
    on_bind_applied: Callable[[str, client.KubeObject, str], None] = lambda sender, pod, node: None
    """Called when a binding is applied, before the answer leaves (the invariants check
    capacity and leadership there)."""
    on_storage_replaced: Callable[[str, str, client.KubeObject, client.KubeObject], None] = (
        lambda sender, kind, old, new: None
    )
    """Called with a storage object's stored and new version before a ``PUT`` applies."""
    while_answering: Callable[[], None] = lambda: None
    """Called between applying a binding and answering it: the rest of the world may
    move meanwhile (the binding's watch event may arrive before its answer)."""
    uid_counter: int = 0

    # --- store --------------------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> client.KubeObject | None:
        return self.objects[kind].get((namespace, name))

    def items(self, kind: str) -> list[client.KubeObject]:
        return list(self.objects[kind].values())

    def write(self, kind: str, obj: client.KubeObject | None, key: Key | None = None) -> None:
        """Store ``obj`` (a fresh dict, never changed afterwards) or delete ``key``."""
        self.rv += 1
        rv = str(self.rv)
        store = self.objects[kind]
        if obj is None:
            assert key is not None
            old = store.pop(key)
            gone = dict(old)
            gone["metadata"] = {**old["metadata"], "resourceVersion": rv}
            event = client.WatchEvent(client.WatchEventType.DELETED, gone)
        else:
            meta = obj.setdefault("metadata", {})
            key = (str(meta.get("namespace") or ""), str(meta["name"]))
            meta["resourceVersion"] = rv
            api_version, kind_name = KIND_NAMES.get(kind, ("v1", kind))
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind_name)
            event_type = (
                client.WatchEventType.MODIFIED if key in store else client.WatchEventType.ADDED
            )
            store[key] = obj
            event = client.WatchEvent(event_type, obj)
        if kind in self.history:
            self.history[kind].append(event)
            self.written_at[kind].append(self.clock.now())

    def create(self, kind: str, obj: client.KubeObject) -> client.KubeObject:
        new = copy_json(obj)
        meta = new.setdefault("metadata", {})
        if kind in ("pods", "poddisruptionbudgets", "events", "leases", "persistentvolumeclaims"):
            meta.setdefault("namespace", "default")
        key = (str(meta.get("namespace") or ""), str(meta["name"]))
        if key in self.objects[kind]:
            raise errors.Conflict(f'{kind} "{key[1]}" already exists', status=409)
        if "uid" not in meta:
            self.uid_counter += 1
            meta["uid"] = f"uid-{self.uid_counter}"
        self.write(kind, new)
        return new

    def update(
        self, kind: str, namespace: str, name: str, change: Callable[[client.KubeObject], None]
    ) -> client.KubeObject:
        current = self.objects[kind].get((namespace, name))
        if current is None:
            raise errors.NotFound(f'{kind} "{name}" not found', status=404)
        new = copy_json(current)
        change(new)
        if new == current:
            return current
        self.write(kind, new)
        return new

    def delete(self, kind: str, namespace: str, name: str) -> None:
        if (namespace, name) not in self.objects[kind]:
            raise errors.NotFound(f'{kind} "{name}" not found', status=404)
        self.write(kind, None, (namespace, name))

    def listed(self, kind: str, keep: Callable[[client.KubeObject], bool] | None = None) -> Any:
        items = tuple(o for o in self.objects[kind].values() if keep is None or keep(o))
        return client.ObjectList(items, str(self.rv))

    # --- bindings -----------------------------------------------------------------------
    def bind(self, sender: str, namespace: str, name: str, uid: str, node_name: str) -> None:
        """POST pods/NAME/binding with its faults, as :class:`SimClient` sends it."""

        def record(outcome: BindOutcome) -> None:
            self.bindings.append(
                BindRecord(self.clock.now(), sender, uid, f"{namespace}/{name}", node_name, outcome)
            )

        if self.faults.down:
            record(BindOutcome.REFUSED)
            raise kube_errors.Unavailable("binding: connection refused", status=None)
        if self.faults.bind_failure and self.faults.rng.random() < self.faults.bind_failure:
            record(BindOutcome.SERVER_ERROR)
            raise errors.ServerError("binding: 500 InternalError (injected)", status=500)
        pod = self.objects["pods"].get((namespace, name))
        if pod is None:
            record(BindOutcome.NOT_FOUND)
            raise errors.NotFound(f'pods "{name}" not found', status=404)
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if meta.get("uid") != uid or spec.get("nodeName") or meta.get("deletionTimestamp"):
            record(BindOutcome.CONFLICT)
            raise errors.Conflict(f"pods/binding {name}: 409 Conflict", status=409)
        if ("", node_name) not in self.objects["nodes"]:
            record(BindOutcome.CONFLICT)
            raise errors.Conflict(f'pods/binding {name}: node "{node_name}" not found', status=409)
        self.on_bind_applied(sender, pod, node_name)

        def bound(new: client.KubeObject) -> None:
            new["spec"]["nodeName"] = node_name
            status = new.setdefault("status", {})
            status["conditions"] = [
                *(c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"),
                {"type": "PodScheduled", "status": "True"},
            ]

        self.update("pods", namespace, name, bound)
        lost = self.faults.lost_response and self.faults.rng.random() < self.faults.lost_response
        self.while_answering()
        if lost:
            record(BindOutcome.LOST)
            # the client timed out and retried: the retry finds the pod bound (409), or
            # the API went away meanwhile and the retries ran out
            if self.faults.down or self.faults.rng.random() < 0.3:
                raise errors.ServerError("binding: read timed out", status=None)
            raise errors.Conflict(f"pods/binding {name}: 409 already assigned", status=409)
        record(BindOutcome.CREATED)


def _merge_conditions(current: list[Any], patch: list[Any]) -> list[Any]:
    by_type = {c.get("type"): c for c in current}
    for condition in patch:
        by_type[condition.get("type")] = {**by_type.get(condition.get("type"), {}), **condition}
    return list(by_type.values())


def _merge_status(obj: client.KubeObject, status_patch: Mapping[str, Any]) -> None:
    status = obj.setdefault("status", {})
    for name, value in status_patch.items():
        if name == "conditions":
            status["conditions"] = _merge_conditions(status.get("conditions") or [], value)
        elif value is None:
            status.pop(name, None)
        else:
            status[name] = copy_json(value)


def _terminating(pod: client.KubeObject) -> None:
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"


class SimClient:
    """One component's client of the :class:`SimAPI` (``sender`` names it in records)."""

    def __init__(self, api: SimAPI, sender: str) -> None:
        self.api = api
        self.sender = sender
        self.faults = api.faults

    # --- reads --------------------------------------------------------------------------
    def list_pods(self, *, field_selector: str = "", label_selector: str = "") -> Any:
        self.faults.check_up("list pods")
        return self.api.listed(
            "pods", selectors.matcher(field_selector=field_selector, label_selector=label_selector)
        )

    def list_nodes(self) -> Any:
        self.faults.check_up("list nodes")
        return self.api.listed("nodes")

    def list_disruption_budgets(self) -> Any:
        self.faults.check_up("list poddisruptionbudgets")
        return self.api.listed("poddisruptionbudgets")

    def get_node(self, name: str) -> client.KubeObject:
        self.faults.check_up("get node")
        node = self.api.get("nodes", "", name)
        if node is None:
            raise errors.NotFound(f'nodes "{name}" not found', status=404)
        return copy_json(node)

    def _no_watch(self, *args: Any, **kwargs: Any) -> client.WatchStream:
        raise AssertionError("the simulation delivers watch events itself")

    watch_pods = watch_nodes = watch_disruption_budgets = watch_storage = _no_watch
    watch_resources = _no_watch

    def list_resources(self, kind: client.ResourceKind) -> client.ObjectList:
        """No dynamic resource allocation objects are simulated: every kind lists empty."""
        self.faults.check_up(f"list {kind.value}")
        return client.ObjectList((), str(self.api.rv))

    def get_resource_claim(self, namespace: str, name: str) -> client.KubeObject:
        raise AssertionError("the simulation has no resource claims")

    def replace_resource_claim(
        self, namespace: str, name: str, body: Mapping[str, Any], *, status: bool = False
    ) -> client.KubeObject:
        raise AssertionError("the simulation has no resource claims to write")

    def patch_resource_claim_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> client.KubeObject:
        raise AssertionError("the simulation has no resource claims to write")

    def create_resource_claim(self, namespace: str, body: Mapping[str, Any]) -> client.KubeObject:
        raise AssertionError("the simulation has no resource claims to write")

    def delete_resource_claim(self, namespace: str, name: str, *, uid: str) -> None:
        raise AssertionError("the simulation has no resource claims to write")

    def list_storage(self, kind: client.StorageKind) -> client.ObjectList:
        self.faults.check_up(f"list {kind.value}")
        return cast(client.ObjectList, self.api.listed(kind.value))

    def replace_storage(
        self, kind: client.StorageKind, namespace: str, name: str, body: Mapping[str, Any]
    ) -> client.KubeObject:
        """``PUT``: refused (409) unless ``body`` carries the stored resourceVersion."""
        self.faults.maybe_fail(f"replace {kind.value}")
        current = self.api.get(kind.value, namespace, name)
        if current is None:
            raise errors.NotFound(f'{kind.value} "{name}" not found', status=404)
        sent = (body.get("metadata") or {}).get("resourceVersion")
        if sent != current["metadata"]["resourceVersion"]:
            raise errors.Conflict(
                f'{kind.value} "{name}": the object has been modified', status=409
            )
        new = copy_json(dict(body))
        new["metadata"] = {**copy_json(current["metadata"]), **new.get("metadata", {})}
        new.pop("status", None)
        if "status" in current:
            new["status"] = copy_json(current["status"])  # the main resource keeps it
        self.api.on_storage_replaced(self.sender, kind.value, current, new)
        self.api.write(kind.value, new)
        return copy_json(new)

    # --- writes -------------------------------------------------------------------------
    def bind_pod(self, namespace: str, name: str, *, uid: str, node_name: str) -> None:
        self.api.bind(self.sender, namespace, name, uid, node_name)

    def patch_pod_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> client.KubeObject:
        self.faults.maybe_fail("patch pod status")
        return self.api.update(
            "pods", namespace, name, lambda pod: _merge_status(pod, patch.get("status") or {})
        )

    def delete_pod(
        self, namespace: str, name: str, *, grace_period_seconds: int | None, uid: str | None = None
    ) -> None:
        self.faults.maybe_fail("delete pod")
        pod = self.api.get("pods", namespace, name)
        if pod is None:
            raise errors.NotFound(f'pods "{name}" not found', status=404)
        if uid is not None and pod["metadata"].get("uid") != uid:
            raise errors.Conflict("Precondition failed: UID", status=409)
        self.api.delete("pods", namespace, name)

    def evict_pod(
        self, namespace: str, name: str, *, grace_period_seconds: int | None, uid: str | None = None
    ) -> None:
        """An Eviction: the pod starts terminating (it goes when the simulation says)."""
        self.faults.maybe_fail("evict pod")
        pod = self.api.get("pods", namespace, name)
        if pod is None:
            raise errors.NotFound(f'pods "{name}" not found', status=404)
        if uid is not None and pod["metadata"].get("uid") != uid:
            raise errors.Conflict("Precondition failed: UID", status=409)
        pod_uid = str(pod["metadata"]["uid"])
        record = EvictionRecord(
            self.api.clock.now(),
            self.sender,
            pod_uid,
            f"{namespace}/{name}",
            grace_period_seconds,
            any(e.uid == pod_uid for e in self.api.evictions),
        )
        self.api.evictions.append(record)
        self.api.on_evicted(record)
        if not pod["metadata"].get("deletionTimestamp"):
            self.api.update("pods", namespace, name, _terminating)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> client.KubeObject:
        self.faults.maybe_fail("create event")
        return self.api.create("events", dict(event))

    def post_event(self, namespace: str, body: bytes) -> None:
        self.create_event(namespace, json.loads(body))

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        self.faults.maybe_fail("patch event")
        return self.api.update("events", namespace, name, lambda e: e.update(copy_json(patch)))

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        self.faults.maybe_fail("patch node")
        current = self.api.get("nodes", "", name)
        if current is None:
            raise errors.NotFound(f'nodes "{name}" not found', status=404)
        wanted_rv = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise errors.Conflict(f'nodes "{name}": the object has been modified', status=409)

        def change(node: client.KubeObject) -> None:
            for section in ("metadata", "spec"):
                for k, v in (patch.get(section) or {}).items():
                    if k == "resourceVersion":
                        continue
                    target = node.setdefault(section, {})
                    if isinstance(v, dict) and isinstance(target.get(k), dict):
                        merged = {**target[k], **v}
                        target[k] = {kk: vv for kk, vv in merged.items() if vv is not None}
                    elif v is None:
                        target.pop(k, None)
                    else:
                        target[k] = copy_json(v)

        return copy_json(self.api.update("nodes", "", name, change))

    def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        self.faults.maybe_fail("patch node status")
        return copy_json(
            self.api.update(
                "nodes", "", name, lambda node: _merge_status(node, patch.get("status") or {})
            )
        )

    # --- leases -------------------------------------------------------------------------
    def _lease_fault(self, what: str) -> None:
        self.faults.maybe_fail(what)
        if self.faults.lease_cut.get(self.sender, float("-inf")) > self.faults.clock.now():
            raise kube_errors.Unavailable(f"{what}: connection timed out", status=None)
        if self.faults.lease_rejection and self.faults.rng.random() < self.faults.lease_rejection:
            if self.faults.rng.random() < 0.5:
                raise errors.Conflict(f"{what}: 409 (injected)", status=409)
            raise errors.ServerError(f"{what}: 500 (injected)", status=500)

    def get_lease(self, namespace: str, name: str) -> client.KubeObject:
        self.faults.maybe_fail("get lease")
        if self.faults.lease_cut.get(self.sender, float("-inf")) > self.faults.clock.now():
            raise kube_errors.Unavailable("get lease: connection timed out", status=None)
        lease = self.api.get("leases", namespace, name)
        if lease is None:
            raise errors.NotFound(f'leases "{name}" not found', status=404)
        return copy_json(lease)

    def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> client.KubeObject:
        self._lease_fault("create lease")
        return copy_json(self.api.create("leases", dict(lease)))

    def replace_lease(
        self, namespace: str, name: str, lease: Mapping[str, Any]
    ) -> client.KubeObject:
        self._lease_fault("replace lease")
        current = self.api.get("leases", namespace, name)
        if current is None:
            raise errors.NotFound(f'leases "{name}" not found', status=404)
        wanted = (lease.get("metadata") or {}).get("resourceVersion")
        if wanted not in (None, "", current["metadata"]["resourceVersion"]):
            raise errors.Conflict(f'leases "{name}": the object has been modified', status=409)
        new = copy_json(dict(lease))
        new["metadata"] = {**current["metadata"], **new.get("metadata", {})}
        self.api.write("leases", new)
        return copy_json(new)
