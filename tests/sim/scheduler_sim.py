"""Deterministic simulation of the live scheduler: the real components, one seed.

One :class:`SchedulerSimulation` runs one or two real
:class:`~nodeagent.scheduler.live.scheduler.LiveScheduler` replicas (queue, cache,
framework, binding pool, reporter, informers, leader elector), built ``stepped``: no
thread of their own. The simulation is their only thread. At each step it draws, from
one ``random.Random``, what happens next, as a real cluster may order it:

* a watch event delivered to one replica's pod, node or PDB informer (each stream in
  resourceVersion order, with any lag; the three streams interleaved arbitrarily), or a
  watch ended by 410 Gone (the informer re-lists);
* a scheduling cycle, a binding cycle (any of those in flight, in any order; the API may
  answer 500, 409, 404, apply it and lose the answer, and the rest of the world moves
  between applying it and answering), a status patch or event written;
* the clock moving on (the flush loop's and the leader elector's rounds come due);
* the cluster changing: pods created, updated (an annotation), deleted (at once or
  gracefully), nodes added, deleted, tainted, cordoned, relabelled, grown; PDBs changed;
  bound pods resized in place (KEP-1287) as the API server and a kubelet write it: the
  spec changed through ``resize``, then the kubelet's verdict in the status (a resize
  down granted and in progress, later actuated; a resize up beyond the node Infeasible);
* an API outage (every call refused for a while; watches come back or answer 410), a
  Lease write rejected, a replica killed and a new one started;
* storage (three seeds in four, drawn from a stream of their own, :mod:`.pv_controller`):
  a WaitForFirstConsumer and an Immediate class, local PVs on one node each (created,
  deleted, touched), pods with a claim (created with them or later), claims deleted once
  no pod uses them, the six storage informers' watch events (and 410s), and the PV
  controller's writes one at a time. VolumeBinding's PreBind waits for the controller as
  in a cluster: while it waits, the controller, the informers and the scheduling loop go
  on, and time passes when nothing else moves (outages, restarts and leader changes
  apply to all of it).

The invariants (:class:`Violation` names which one failed, with the step and the seed)
are checked after every step (1, 2, 5, 6, 7), at every binding (2, 5, 8) and PV write (7)
(kept, so that the binding cycle's own error handling cannot swallow them), and at
quiescence (3, 4), which the run reaches by healing every fault and letting the clock
run until nothing changes. A pod's requests are counted by :func:`requests_of`: for a
pod mid-resize, the larger of spec and actual (and allocated), as kube-scheduler counts
it; 6 is that no node is ever over its allocatable so counted, but for the race of two
schedulers (a pod someone else placed, or whose binding's answer was lost, that the
deciding cycle had not read yet: the kubelet's to settle). 7: a PV is bound to at most
one claim (no two claims name it, a bound claim is the one its claimRef names, no PUT
moves a claimRef away from a claim that exists). 8: no pod is bound to a node its
claims' PVs cannot reach (each claim bound, its PV's node affinity matching). 3 also
asks that no PV or claim is still assumed; 4 counts a pod as fitting only where its
volumes can be had (:func:`~tests.sim.pv_controller.volumes_fit`).

The same code runs a seed (``random.Random(seed)``: the fast set in the suite, the long
run in ``benchmarks/sim_scheduler.py``) and a hypothesis-drawn ``Random`` (which
hypothesis shrinks to a minimal failing sequence of choices).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodeagent.base import errors
from nodeagent.base.clock import FakeClock
from nodeagent.kube import client
from nodeagent.kube.informer import Informer
from nodeagent.scheduler import registry
from nodeagent.scheduler.live import settings as live_settings
from nodeagent.scheduler.live.metrics import SchedulerMetrics
from nodeagent.scheduler.live.scheduler import LiveScheduler
from tests.sim import pv_controller as pvc
from tests.sim.api import STORAGE, BindOutcome, Faults, SimAPI, SimClient

PROFILE = live_settings.DEFAULT_PROFILE
OTHER_SCHEDULER = "default-scheduler"
GPU = "example.com/gpu"
RESOURCES = ("cpu", "memory", "pods", GPU)
LEASE_KEY = ("kube-system", "nodeagent-scheduler")
FIT_ERROR = re.compile(r"0/\d+ nodes are available: |no nodes available to schedule pods")
"""kube-scheduler's FitError and ErrNoNodesAvailable messages."""


class Violation(AssertionError):
    """An invariant failed; the message names it, the step and what was seen."""


@functools.cache
def _base_settings() -> live_settings.LiveSettings:
    return live_settings.load(None, registry.in_tree_registry())


def settings(*, leader_elect: bool) -> live_settings.LiveSettings:
    base = _base_settings()
    return dataclasses.replace(
        base,
        leader_election=dataclasses.replace(base.leader_election, leader_elect=leader_elect),
    )


# --- the oracle: quantities and fit, independent of the framework --------------------------
def quantity(text: object) -> int:
    """The forms the simulation writes: ``250m`` (milli), ``64Mi``, ``2``."""
    value = str(text)
    if value.endswith("m"):
        return int(value[:-1])
    if value.endswith("Mi"):
        return int(value[:-2]) * 2**20
    return int(value) * 1000 if "." not in value else int(float(value) * 1000)


def requests_of(pod: client.KubeObject) -> dict[str, int]:
    """Each container's request; mid-resize, per resource the largest of spec (unless the
    kubelet found it Infeasible), actual and allocated."""
    status = pod.get("status") or {}
    infeasible = any(
        c.get("type") == "PodResizePending" and c.get("reason") == "Infeasible"
        for c in status.get("conditions") or ()
    )
    reported = {c["name"]: c for c in status.get("containerStatuses") or () if "resources" in c}
    total = {"cpu": 0, "memory": 0, "pods": 1000, GPU: 0}
    for container in pod["spec"].get("containers") or ():
        spec = (container.get("resources") or {}).get("requests") or {}
        entry = reported.get(container["name"])
        lists = [spec]
        if entry is not None:
            lists = [
                entry["resources"].get("requests") or {},
                entry.get("allocatedResources") or {},
            ]
            if not infeasible:
                lists.append(spec)
        for name in {n for amounts in lists for n in amounts}:
            total[name] = total.get(name, 0) + max(quantity(a[name]) for a in lists if name in a)
    return total


def allocatable_of(node: client.KubeObject) -> dict[str, int]:
    alloc = node["status"].get("allocatable") or {}
    return {name: quantity(alloc[name]) if name in alloc else 0 for name in RESOURCES}


def tolerates(pod: client.KubeObject, node: client.KubeObject) -> bool:
    tolerations = pod["spec"].get("tolerations") or ()
    for taint in node["spec"].get("taints") or ():
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(
            t.get("key") == taint["key"]
            and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
            for t in tolerations
        ):
            return False
    return True


def usage_by_node(
    api: SimAPI, skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, dict[str, int]]:
    usage: dict[str, dict[str, int]] = {}
    for pod in api.items("pods"):
        node = pod["spec"].get("nodeName")
        if node and pod["metadata"]["uid"] not in skip:
            row = usage.setdefault(node, dict.fromkeys(RESOURCES, 0))
            for name, amount in requests_of(pod).items():
                row[name] = row.get(name, 0) + amount
    return usage


def fits(pod: client.KubeObject, node: client.KubeObject, usage: dict[str, dict[str, int]]) -> bool:
    if node["spec"].get("unschedulable") or not tolerates(pod, node):
        return False
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod["spec"].get("nodeSelector") or {}).items()):
        return False
    return has_room(pod, node, usage)


PENDING_PODS = "pending-pods"
"""The scheduler's second pod informer; its events come from the pods' history."""
SOURCE = {PENDING_PODS: "pods"}


def _not_terminal(pod: client.KubeObject) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


SELECTED: dict[str, Callable[[client.KubeObject], bool]] = {
    "pods": lambda pod: bool(pod["spec"].get("nodeName")) and _not_terminal(pod),
    PENDING_PODS: lambda pod: not pod["spec"].get("nodeName") and _not_terminal(pod),
}
"""The pod informers' field selectors (``spec.nodeName!=`` / ``spec.nodeName=``, both
not terminal)."""


def _selected(
    event: client.WatchEvent, informer: Informer, matches: Callable[[client.KubeObject], bool]
) -> client.WatchEvent | None:
    """``event`` as a watch with a field selector shows it (kube-apiserver's
    ``cacheWatcher.convertToWatchEvent``): a pod that starts matching is ADDED, one that
    stops matching DELETED with the state it last matched in (at the new
    resourceVersion), one that never matched not at all."""
    obj = event.object
    meta = obj["metadata"]
    stored = informer.get((str(meta.get("namespace") or ""), str(meta["name"])))
    now = event.type is not client.WatchEventType.DELETED and matches(obj)
    if now:
        kind = client.WatchEventType.ADDED if stored is None else client.WatchEventType.MODIFIED
        return client.WatchEvent(kind, obj)
    if stored is None:
        return None
    gone = dict(stored)
    gone["metadata"] = {**stored["metadata"], "resourceVersion": meta.get("resourceVersion")}
    return client.WatchEvent(client.WatchEventType.DELETED, gone)


# --- replicas -------------------------------------------------------------------------------
@dataclass(eq=False)
class Replica:
    scheduler: LiveScheduler
    informers: dict[str, Informer]
    cursor: dict[str, int] = field(default_factory=dict)
    needs_list: dict[str, bool] = field(default_factory=dict)
    storage: dict[str, Informer] = field(default_factory=dict)
    """The volume plugins' informers, by kind (their cursors are in :attr:`cursor`)."""
    storage_needs_list: dict[str, bool] = field(default_factory=dict)
    next_flush: float = 0.0
    next_lease: float | None = None
    started: bool = False
    """Synced, and its loops (scheduling, flush, election) running."""
    lost: bool = False

    @property
    def identity(self) -> str:
        return self.scheduler.identity


@dataclass(frozen=True, slots=True)
class Shape:
    """What a seed's cluster and faults look like (drawn first, from the seed)."""

    nodes: int
    replicas: int
    leader_elect: bool
    steps: int
    call_failure: float
    bind_failure: float
    lost_response: float
    lease_rejection: float

    @classmethod
    def draw(cls, rng: random.Random) -> Shape:
        leader_elect = rng.random() < 0.5
        return cls(
            nodes=rng.randint(1, 3),
            replicas=rng.choice((1, 2)) if leader_elect else 1,
            leader_elect=leader_elect,
            steps=rng.randint(40, 120),
            call_failure=rng.choice((0.0, 0.0, 0.05, 0.2)),
            bind_failure=rng.choice((0.0, 0.1, 0.3)),
            lost_response=rng.choice((0.0, 0.1, 0.3)),
            lease_rejection=rng.choice((0.0, 0.0, 0.1, 0.3)),
        )


class SchedulerSimulation:
    def __init__(
        self,
        rng: random.Random,
        *,
        label: str = "",
        partitions: random.Random | None = None,
        storage: random.Random | None = None,
    ) -> None:
        """``partitions`` draws the Lease partitions (default: ``rng``); a stream of its
        own keeps the other choices of a seed as they were before partitions existed.
        ``storage`` draws everything about volumes (None: a cluster without storage,
        each choice of the seed as before storage existed)."""
        self.rng = rng
        self.partitions = partitions or rng
        self.resizes = random.Random(self.partitions.random())
        """In-place resizes draw from a stream of their own, like the partitions."""
        self.label = label
        self.clock = FakeClock(start=1000.0)
        self.shape = Shape.draw(rng)
        s = self.shape
        self.faults = Faults(
            rng,
            self.clock,
            call_failure=s.call_failure,
            bind_failure=s.bind_failure,
            lost_response=s.lost_response,
            lease_rejection=s.lease_rejection,
        )
        self.api = SimAPI(self.clock, self.faults)
        self.api.on_bind_applied = self._bind_applied
        self.api.while_answering = self._while_answering
        self.settings = settings(leader_elect=s.leader_elect)
        self.replicas: list[Replica] = []
        self.replica_count = 0
        self.step_no = 0
        self.trace: list[str] = []
        self._answering = 0
        self._checked_bindings = 0
        self._acked: dict[tuple[str, str], float] = {}
        self.node_count = 0
        self.pod_count = 0
        self.stats: dict[str, int] = {}
        self.violations: list[Violation] = []
        self.placed_at: dict[str, int] = {}
        """Pods placed by someone else, or whose binding's answer was lost: the index of
        the write that bound them in the pods' history."""
        self.decided_at: dict[tuple[str, str], int] = {}
        """(replica, pod UID) -> how far the replica's pod informer had read when its
        scheduling cycle chose the node."""
        self.storage_rng = storage or random.Random(0)
        self.storage_on = storage is not None and storage.random() < 0.75
        """A quarter of the seeds run without storage (their choices as before)."""
        self.controller = pvc.PVController(self.api, self.storage_rng, self.note)
        self.api.on_storage_replaced = self._storage_replaced
        self.pv_count = 0
        self.claims_to_create: list[tuple[str, str, str]] = []
        """Claims of pods created before them (name, class, size)."""

    # --- reporting ------------------------------------------------------------------------
    def violation(self, invariant: int, message: str) -> Violation:
        tail = "\n  ".join(self.trace[-25:])
        return Violation(
            f"invariant {invariant} violated at step {self.step_no} (t={self.clock.now():.2f}) "
            f"{self.label}: {message}\n  last steps:\n  {tail}"
        )

    def note(self, what: str) -> None:
        self.trace.append(f"{self.step_no:4d} t={self.clock.now():8.2f} {what}")
        if len(self.trace) > 200:
            del self.trace[:100]

    # --- the cluster ----------------------------------------------------------------------
    def add_node(self) -> None:
        self.node_count += 1
        name = f"n{self.node_count}"
        rng = self.rng
        allocatable = {
            "cpu": rng.choice(("1000m", "2000m", "4000m")),
            "memory": f"{rng.choice((1024, 2048, 4096))}Mi",
            "pods": str(rng.randint(2, 8)),
        }
        if rng.random() < 0.3:
            allocatable[GPU] = str(rng.randint(1, 2))
        spec: dict[str, Any] = {}
        if rng.random() < 0.2:
            spec["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
        self.api.create(
            "nodes",
            {
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, "zone": rng.choice("ab")},
                },
                "spec": spec,
                "status": {
                    "allocatable": allocatable,
                    "capacity": allocatable,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
        self.note(f"node {name} added {allocatable} {spec}")

    def add_pod(self, *, bound_to: str = "", volumes: bool = True) -> None:
        rng = self.rng
        self.pod_count += 1
        name = f"p{self.pod_count}"
        requests: dict[str, str] = {
            "cpu": f"{rng.choice((100, 250, 500, 1000, 1500))}m",  # 1500m: fits on some
            "memory": f"{rng.choice((64, 256, 1024))}Mi",
        }
        if rng.random() < 0.15:
            requests[GPU] = "1"
        spec: dict[str, Any] = {
            "schedulerName": OTHER_SCHEDULER if rng.random() < 0.08 else PROFILE,
            "containers": [{"name": "main", "image": "app", "resources": {"requests": requests}}],
        }
        if rng.random() < 0.2:
            spec["nodeSelector"] = {"zone": rng.choice("ab")}
        if rng.random() < 0.3:
            spec["tolerations"] = [
                {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
            ]
        if rng.random() < 0.25:
            spec["priority"] = 100  # may preempt the others
        if rng.random() < 0.1 and not bound_to:
            spec["schedulingGates"] = [{"name": "example.com/wait"}]
        if bound_to:
            spec["nodeName"] = bound_to
        elif volumes and self.storage_on and self.storage_rng.random() < 0.4:
            self.add_claim_for(name, spec)
        self.api.create(
            "pods",
            {
                "metadata": {"name": name, "namespace": "default", "labels": {"app": name[-1]}},
                "spec": spec,
                "status": {"phase": "Running" if bound_to else "Pending"},
            },
        )
        self.note(f"pod {name} created {requests} {bound_to or ''}")

    def add_bound_pod(self) -> None:
        """A pod another component placed (a static pod, another scheduler): only where
        it fits, counting the bindings the replicas have decided and not sent yet, so
        capacity stays the scheduler's to keep (an overcommit race between two schedulers
        is the kubelet's to settle, not the invariant's)."""
        usage = usage_by_node(self.api)
        for replica in self.replicas:
            for binding in replica.scheduler.binder.waiting:
                pod = self.api.get("pods", binding.pod.namespace, binding.pod.name)
                if pod is None or pod["spec"].get("nodeName"):
                    continue
                row = usage.setdefault(binding.node, dict.fromkeys(RESOURCES, 0))
                for name, amount in requests_of(pod).items():
                    row[name] = row.get(name, 0) + amount
        self.add_pod(volumes=False)
        pod = self.api.get("pods", "default", f"p{self.pod_count}")
        assert pod is not None
        places = [n["metadata"]["name"] for n in self.api.items("nodes") if fits(pod, n, usage)]
        if not places:
            self.api.delete("pods", "default", f"p{self.pod_count}")
            return
        node = self.rng.choice(places)
        self.api.update("pods", "default", pod["metadata"]["name"], _assign(node))
        self.placed_at[pod["metadata"]["uid"]] = len(self.api.history["pods"]) - 1
        self.note(f"pod {pod['metadata']['name']} placed on {node} by someone else")

    def change_cluster(self) -> None:
        if self.resizes.random() < 0.15:
            self.resize()
        rng = self.rng
        pods = self.api.items("pods")
        nodes = self.api.items("nodes")
        choice = rng.random()
        if choice < 0.35 or not pods:
            self.add_pod()
        elif choice < 0.42:
            self.add_bound_pod()
        elif choice < 0.57:
            unbound = [p for p in pods if not p["spec"].get("nodeName")]
            pod = rng.choice(unbound if unbound and rng.random() < 0.8 else pods)
            name = pod["metadata"]["name"]
            if pod["spec"].get("schedulingGates") and rng.random() < 0.5:
                self.api.update("pods", "default", name, _ungate)
                self.note(f"pod {name} ungated")
            else:
                self.api.update("pods", "default", name, _annotate(f"v{self.api.rv}"))
                self.note(f"pod {name} annotated")
        elif choice < 0.70:
            pod = rng.choice(pods)
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp") or rng.random() < 0.5:
                self.api.delete("pods", "default", name)
                self.note(f"pod {name} deleted")
            else:
                self.api.update("pods", "default", name, _terminating)
                self.note(f"pod {name} terminating")
        elif choice < 0.75:
            self.add_node()
        elif choice < 0.80 and nodes:
            node = rng.choice(nodes)
            self.api.delete("nodes", "", node["metadata"]["name"])
            self.note(f"node {node['metadata']['name']} deleted")
        elif choice < 0.92 and nodes:
            node = rng.choice(nodes)
            name = node["metadata"]["name"]
            change = rng.choice((_toggle_taint, _toggle_cordon, _relabel, _grow))
            self.api.update("nodes", "", name, change)
            self.note(f"node {name} {change.__name__}")
        elif choice < 0.96:
            self.change_budget()
        else:
            self.collect_orphans()

    def resize(self) -> None:
        """A bound pod's cpu resized in place, or the kubelet acting on an earlier resize.

        Only what a lagging scheduler cannot overcommit by: a resize down (granted at
        once, then actuated: counted at the old amount until then), or up beyond the
        node's allocatable (Infeasible: counted at what runs). A resize up that would fit
        races every scheduler's bindings (the kubelet's admission settles it) and is left
        out."""
        rng = self.resizes
        nodes = {n["metadata"]["name"]: n for n in self.api.items("nodes")}
        bound = [
            p
            for p in self.api.items("pods")
            if p["spec"].get("nodeName") in nodes and not p["metadata"].get("deletionTimestamp")
        ]
        if not bound:
            return
        pod = rng.choice(bound)
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        if any(c.get("type") == "PodResizeInProgress" for c in status.get("conditions") or ()):
            self.api.update("pods", "default", name, _actuated)
            self.note(f"pod {name} resize actuated")
            return
        if status.get("conditions") and any(
            c.get("type") == "PodResizePending" for c in status["conditions"]
        ):
            return  # Infeasible stays so until the spec changes
        current = quantity(pod["spec"]["containers"][0]["resources"]["requests"]["cpu"])
        node_cpu = allocatable_of(nodes[pod["spec"]["nodeName"]])["cpu"]
        smaller = [c for c in (50, 100, 250, 500) if c < current]
        if smaller and rng.random() < 0.7:
            target, verdict = rng.choice(smaller), "granted"
        else:
            target, verdict = node_cpu + rng.choice((500, 1000)), "infeasible"
        if not any("resources" in c for c in status.get("containerStatuses") or ()):
            # what the kubelet has long reported for a running pod (seed 7214: a resize
            # written onto a pod without it showed a cycle the new spec alone)
            self.api.update("pods", "default", name, _kubelet_reported)
        self.api.update("pods", "default", name, _resized_spec(f"{target}m"))
        self.api.update("pods", "default", name, _kubelet_verdict(verdict, f"{current}m"))
        self.note(f"pod {name} resized cpu {current}m -> {target}m: {verdict}")

    def change_budget(self) -> None:
        name = f"pdb-{self.rng.choice('ab')}"
        allowed = self.rng.randint(0, 2)
        budget = {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": str(self.rng.randint(0, 9))}}},
            "status": {"disruptionsAllowed": allowed},
        }
        if self.api.get("poddisruptionbudgets", "default", name) is None:
            self.api.create("poddisruptionbudgets", budget)
        elif self.rng.random() < 0.3:
            self.api.delete("poddisruptionbudgets", "default", name)
        else:
            self.api.update(
                "poddisruptionbudgets",
                "default",
                name,
                lambda b: b["status"].update(disruptionsAllowed=allowed),
            )
        self.note(f"budget {name} changed")

    def collect_orphans(self) -> None:
        """Pod garbage collection: pods bound to a node that is gone, and pods whose
        graceful deletion has run out."""
        nodes = {n["metadata"]["name"] for n in self.api.items("nodes")}
        for pod in self.api.items("pods"):
            node = pod["spec"].get("nodeName")
            if (node and node not in nodes) or pod["metadata"].get("deletionTimestamp"):
                self.api.delete("pods", "default", pod["metadata"]["name"])
                self.note(f"pod {pod['metadata']['name']} collected")

    # --- storage --------------------------------------------------------------------------
    def add_claim_for(self, pod_name: str, spec: dict[str, Any]) -> None:
        """The pod's one claim ``data-<pod>``, mostly of the WaitForFirstConsumer class;
        created with the pod or, now and then, later (the pod waits for it)."""
        rng = self.storage_rng
        name = f"data-{pod_name}"
        class_name = pvc.LOCAL if rng.random() < 0.75 else pvc.FAST
        size = rng.choice(("1Gi", "2Gi"))
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": name}}]
        if rng.random() < 0.3:
            self.claims_to_create.append((name, class_name, size))
            self.note(f"claim {name} ({class_name}, {size}) to come")
        else:
            self.api.create(pvc.CLAIMS, pvc.claim(name, class_name, size))
            self.note(f"claim {name} ({class_name}, {size}) created")

    def add_volume(self) -> None:
        """A local PV on one node (which may be deleted later: the PV stays)."""
        nodes = [n["metadata"]["name"] for n in self.api.items("nodes")]
        if not nodes:
            return
        rng = self.storage_rng
        self.pv_count += 1
        name = f"pv{self.pv_count}"
        node = rng.choice(nodes)
        class_name = pvc.LOCAL if rng.random() < 0.7 else pvc.FAST
        size = rng.choice(("1Gi", "2Gi", "5Gi"))
        self.api.create(pvc.PVS, pvc.local_volume(name, node, class_name, size))
        self.note(f"pv {name} ({class_name}, {size}) on {node}")

    def change_storage(self) -> None:
        rng = self.storage_rng
        choice = rng.random()
        if choice < 0.4:
            self.add_volume()
        elif choice < 0.55 and self.claims_to_create:
            name, class_name, size = self.claims_to_create.pop(
                rng.randrange(len(self.claims_to_create))
            )
            self.api.create(pvc.CLAIMS, pvc.claim(name, class_name, size))
            self.note(f"claim {name} created late")
        elif choice < 0.65:
            free = [
                pv["metadata"]["name"]
                for pv in self.api.items(pvc.PVS)
                if not pv["spec"].get("claimRef")
            ]
            if free:
                name = rng.choice(free)
                self.api.delete(pvc.PVS, "", name)
                self.note(f"pv {name} deleted")
        elif choice < 0.85:
            # a claim no pod uses any more is deleted (a StatefulSet scaled down and its
            # claims cleaned up; the in-use protection keeps the others)
            used = {c for p in self.api.items("pods") for c in pvc.claims_of(p)}
            unused = [
                c["metadata"]["name"]
                for c in self.api.items(pvc.CLAIMS)
                if c["metadata"]["name"] not in used
            ]
            if unused:
                name = rng.choice(unused)
                self.api.delete(pvc.CLAIMS, "default", name)
                self.note(f"claim {name} deleted")
        else:
            pvs = self.api.items(pvc.PVS)
            if pvs:
                name = rng.choice(pvs)["metadata"]["name"]
                self.api.update(pvc.PVS, "", name, _annotate(f"v{self.api.rv}"))
                self.note(f"pv {name} annotated")

    def storage_step(self) -> None:
        """Something about volumes, drawn from the storage stream."""
        rng = self.storage_rng
        roll = rng.random()
        if roll < 0.35 and self.replicas:
            replica = rng.choice(self.replicas)
            kinds = [k for k, needed in replica.storage_needs_list.items() if needed]
            if kinds:
                self.relist(replica, rng.choice(kinds))
            else:
                self.deliver(replica, rng.choice((pvc.PVS, pvc.PVS, pvc.CLAIMS, pvc.CLAIMS)))
        elif roll < 0.38 and self.replicas:
            replica = rng.choice(self.replicas)
            kind = rng.choice(STORAGE)
            replica.storage_needs_list[kind] = True
            self.note(f"{replica.identity}: a {kind} watch answered 410 Gone")
        elif roll < 0.70:
            self.controller.step()
        else:
            self.change_storage()

    def _volume_wait(self, timeout: float) -> None:
        """VolumeBinding's PreBind waiting for the PV controller (``wait_changed``): the
        rest of the world goes on meanwhile (the controller, informers, the scheduling
        loop); if nothing moved, time passes."""
        rng = self.storage_rng
        moved = False
        for _ in range(rng.choice((1, 2, 3))):
            roll = rng.random()
            replica = rng.choice(self.replicas)
            if roll < 0.45:
                moved |= self.controller.step()
            elif roll < 0.85:
                moved |= self.deliver(replica, rng.choice((pvc.PVS, pvc.CLAIMS)))
            elif roll < 0.93:
                moved |= self.schedule(replica)
            else:
                moved |= self.deliver(replica, "pods" if roll < 0.965 else PENDING_PODS)
        if not moved:
            self.clock.advance(timeout)
            self.timers()

    def _storage_replaced(
        self, sender: str, kind: str, old: client.KubeObject, new: client.KubeObject
    ) -> None:
        # 7: a PV's claimRef never moves away from a claim that still exists
        if kind == pvc.PVS:
            stolen = pvc.stolen_volume(self.api, old, new)
            if stolen is not None:
                raise self.observed(7, f"{sender} wrote {stolen}")

    # --- replicas -------------------------------------------------------------------------
    def add_replica(self) -> Replica:
        self.replica_count += 1
        identity = f"replica-{self.replica_count}"
        kube = SimClient(self.api, identity)
        scheduler = LiveScheduler(
            kube,
            self.settings,
            metrics=SchedulerMetrics(self.settings.profiles, process_metrics=False),
            clock=self.clock,
            identity=identity,
            seed=self.rng.randrange(2**32),
            stepped=True,
        )
        informers = {"nodes": scheduler.nodes, "poddisruptionbudgets": scheduler.budgets}
        informers["pods"] = scheduler.assigned_pods
        informers[PENDING_PODS] = scheduler.pending_pods
        replica = Replica(scheduler, informers)
        for kind in informers:
            replica.needs_list[kind] = True
            replica.cursor[kind] = 0
        replica.storage = {
            kind.value: inf
            for kind, inf in zip(client.StorageKind, scheduler.storage.informers, strict=True)
        }
        for kind in replica.storage:
            replica.storage_needs_list[kind] = True
            replica.cursor[kind] = 0
        catalog = scheduler.handle.volumes
        catalog.monotonic = self.clock.now
        catalog.wait_changed = self._volume_wait  # type: ignore[method-assign]
        self.replicas.append(replica)
        self.note(f"{identity} started")
        return replica

    def kill(self, replica: Replica) -> None:
        """kill -9: nothing in flight goes out, nothing is released."""
        replica.scheduler.binder.shutdown()
        self.replicas.remove(replica)
        self.note(f"{replica.identity} killed")

    def relist(self, replica: Replica, kind: str) -> bool:
        main = kind in replica.informers
        try:
            (replica.informers if main else replica.storage)[kind].sync_once()
        except errors.KubeAPIError:
            return False
        replica.cursor[kind] = len(self.api.history[SOURCE.get(kind, kind)])
        (replica.needs_list if main else replica.storage_needs_list)[kind] = False
        self.note(f"{replica.identity} listed {kind}")
        storage_listed = not self.storage_on or not any(replica.storage_needs_list.values())
        if not replica.started and not any(replica.needs_list.values()) and storage_listed:
            replica.started = True
            replica.next_flush = self.clock.now() + 1.0
            if replica.scheduler.elector is not None:
                replica.next_lease = self.clock.now()
        return True

    def deliver(self, replica: Replica, kind: str) -> bool:
        main = kind in replica.informers
        needs_list = replica.needs_list if main else replica.storage_needs_list
        if needs_list[kind] or self.faults.down:
            return False
        history = self.api.history[SOURCE.get(kind, kind)]
        while True:  # the next event this informer's watch shows
            position = replica.cursor[kind]
            if position >= len(history):
                return False
            replica.cursor[kind] = position + 1
            if kind not in SELECTED:
                event = history[position]
                break
            selected = _selected(history[position], replica.informers[kind], SELECTED[kind])
            if selected is not None:
                event = selected
                break
        self.note(
            f"{replica.identity} <- {event.type.value} {kind} "
            f"{event.object['metadata'].get('name')} rv={event.resource_version}"
        )
        (replica.informers if main else replica.storage)[kind].apply(event)
        return True

    def schedule(self, replica: Replica) -> bool:
        scheduler = replica.scheduler
        if not replica.started or replica.lost or not scheduler.may_schedule():
            return False
        waiting = scheduler.binder.waiting
        before = len(waiting)
        done = scheduler.schedule_next(timeout=0)
        for binding in waiting[before:]:
            self.decided_at[(replica.identity, binding.pod.uid)] = replica.cursor["pods"]
        return done

    def bind(self, replica: Replica) -> bool:
        pool = replica.scheduler.binder
        if not pool.waiting:
            return False
        binding = pool.waiting.pop(self.rng.randrange(len(pool.waiting)))
        self.note(f"{replica.identity} binds {binding.pod.key} -> {binding.node}")
        pool.run(binding)
        return True

    def report(self, replica: Replica) -> bool:
        return replica.scheduler.reporter.write_next()

    def timers(self) -> None:
        now = self.clock.now()
        for replica in list(self.replicas):
            if not replica.started or replica.lost:
                continue
            while replica.next_flush <= now:
                replica.scheduler.flush_once()
                replica.next_flush += 1.0
            elector = replica.scheduler.elector
            if elector is not None and replica.next_lease is not None and replica.next_lease <= now:
                wait = elector.step()
                if wait is None:
                    replica.lost = True
                    self.note(f"{replica.identity} lost the lease")
                else:
                    replica.next_lease = now + wait

    def _while_answering(self) -> None:
        """Between a binding applied and its answer: informers (and the scheduling
        thread) go on."""
        if self._answering:
            return
        self._answering += 1
        try:
            for _ in range(self.rng.choice((0, 0, 1, 3))):
                replica = self.rng.choice(self.replicas)
                roll = self.rng.random()
                if roll < 0.8:
                    self.deliver(replica, "pods" if roll < 0.4 else PENDING_PODS)
                else:
                    self.schedule(replica)
        finally:
            self._answering -= 1

    # --- invariants -----------------------------------------------------------------------
    def observed(self, invariant: int, message: str) -> Violation:
        """A violation seen inside the scheduler's call (a binding, a PUT): kept, so that
        the scheduler's own error handling (a binding cycle catches every exception)
        cannot swallow it; :meth:`check_step` raises it."""
        found = self.violation(invariant, message)
        self.violations.append(found)
        return found

    def _bind_applied(self, sender: str, pod: client.KubeObject, node_name: str) -> None:
        # 8: never bound where its volumes cannot be reached
        unreachable = pvc.unreachable_volumes(self.api, pod, node_name)
        if unreachable is not None:
            raise self.observed(
                8, f"{sender} bound {pod['metadata']['name']} to {node_name}: {unreachable}"
            )
        # 2: capacity, counting every bound pod but those someone else placed after the
        # replica's informer had read when it chose the node (a race of two schedulers,
        # which the kubelet's admission settles)
        node = self.api.get("nodes", "", node_name)
        assert node is not None
        read = self.decided_at.get((sender, pod["metadata"]["uid"]), len(self.api.history["pods"]))
        unseen = {uid for uid, at in self.placed_at.items() if at >= read}
        if not has_room(pod, node, usage_by_node(self.api, skip=unseen)):
            raise self.observed(
                2,
                f"{sender} bound {pod['metadata']['name']} ({requests_of(pod)}) to "
                f"{node_name} beyond its allocatable {allocatable_of(node)} "
                f"(in use {usage_by_node(self.api).get(node_name)})",
            )
        # 5: only the lease holder binds
        if self.shape.leader_elect:
            lease = self.api.get("leases", *LEASE_KEY)
            holder = (lease or {}).get("spec", {}).get("holderIdentity")
            if holder != sender:
                raise self.observed(
                    5,
                    f"{sender} bound {pod['metadata']['name']} while the lease names {holder!r}",
                )

    def check_step(self) -> None:
        if self.violations:
            raise self.violations[0]
        # 1: no binding POST for a pod after its sender got a 201; never two applied
        records = self.api.bindings
        for record in records[self._checked_bindings :]:
            key = (record.sender, record.uid)
            if key in self._acked:
                raise self.violation(
                    1,
                    f"{record.sender} POSTed a binding of {record.pod} to {record.node} "
                    f"after it got a 201 for it at t={self._acked[key]:.2f}",
                )
            if record.outcome is BindOutcome.CREATED:
                self._acked[key] = record.at
            elif record.outcome is BindOutcome.LOST:
                # applied, the answer lost: the sender forgets the pod (as kube-scheduler's
                # ForgetPod) until its informer shows it bound, as if someone else had
                # placed it
                self.placed_at[record.uid] = self._bound_write(record.uid)
        self._checked_bindings = len(records)
        # 7: a PV is bound to at most one claim
        if self.storage_on:
            wrong = pvc.binding_errors(self.api)
            if wrong:
                raise self.violation(7, "; ".join(wrong))
        # 5: never two leaders binding at once
        leaders = [r.identity for r in self.replicas if not r.lost and r.scheduler.may_bind()]
        if len(leaders) > 1:
            raise self.violation(5, f"two replicas may bind at once: {leaders}")
        # 6: no node over its allocatable, pods mid-resize counted at the larger amount
        nodes = {n["metadata"]["name"]: n for n in self.api.items("nodes")}
        for node_name, used in usage_by_node(self.api).items():
            node = nodes.get(node_name)
            if node is None:
                continue  # its pods are orphans, about to be collected
            alloc = allocatable_of(node)
            over = {n: v for n, v in used.items() if v > alloc.get(n, 0) and v}
            if over and not self._raced(node_name):
                raise self.violation(
                    6, f"{node_name} is over its allocatable {alloc}: in use {used}"
                )

    def _bound_write(self, uid: str) -> int:
        """The index in the pods' history of the write that bound the pod."""
        history = self.api.history["pods"]
        for index in range(len(history) - 1, -1, -1):
            obj = history[index].object
            bound_here = obj["metadata"].get("uid") == uid and obj["spec"].get("nodeName")
            if bound_here and (index == 0 or not _bound_at(history, index - 1, uid)):
                return index
        return len(history)

    def _raced(self, node_name: str) -> bool:
        """Whether a pod we bound to the node was placed there by a cycle that had not
        read a pod someone else placed there (two schedulers' race: the kubelet's to
        settle)."""
        on_node = [p for p in self.api.items("pods") if p["spec"].get("nodeName") == node_name]
        placed = [
            self.placed_at[p["metadata"]["uid"]]
            for p in on_node
            if p["metadata"]["uid"] in self.placed_at
        ]
        if not placed:
            return False
        uids = {p["metadata"]["uid"] for p in on_node}
        return any(
            uid in uids and read <= max(placed) for (_, uid), read in self.decided_at.items()
        )

    def check_quiescent(self) -> None:
        applied: dict[str, int] = {}
        for record in self.api.bindings:
            if record.outcome in (BindOutcome.CREATED, BindOutcome.LOST):
                applied[record.uid] = applied.get(record.uid, 0) + 1
        twice = {uid: n for uid, n in applied.items() if n > 1}
        if twice:
            raise self.violation(1, f"pods bound more than once: {twice}")
        pods = self.api.items("pods")
        nodes = {n["metadata"]["name"]: n for n in self.api.items("nodes")}
        usage = usage_by_node(self.api)
        pending = [
            p
            for p in pods
            if not p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and p["spec"]["schedulerName"] == PROFILE
        ]
        for replica in self.replicas:
            if replica.started and not replica.lost:
                self._check_cache(replica, pods, nodes)
                self._check_queue(replica, pending)
        # 4: every pod that fits somewhere is bound; the others say why not
        for pod in pending:
            if pod["spec"].get("schedulingGates"):
                continue  # held by PreEnqueue: never tried, nothing to say
            name = pod["metadata"]["name"]
            places = [
                n
                for n, node in nodes.items()
                if fits(pod, node, usage) and pvc.volumes_fit(self.api, pod, node)
            ]
            if places:
                raise self.violation(
                    4, f"pod {name} ({requests_of(pod)}) fits on {places} but is not bound"
                )
            condition = _pod_scheduled(pod)
            # the message of the pod's last attempt (a node deleted since does not move
            # it, as in kube-scheduler): the format is checked, not the count
            if (
                condition is None
                or condition.get("status") != "False"
                or condition.get("reason") != "Unschedulable"
                or not FIT_ERROR.match(str(condition.get("message", "")))
            ):
                raise self.violation(
                    4,
                    f"unschedulable pod {name} has PodScheduled {condition}, expected False, "
                    f"Unschedulable, '{FIT_ERROR.pattern}...'",
                )
        for pod in pods:
            if pod["spec"]["schedulerName"] != PROFILE and _pod_scheduled(pod) is not None:
                raise self.violation(
                    4,
                    f"pod {pod['metadata']['name']} of another scheduler "
                    "got a PodScheduled condition from us",
                )

    def _check_cache(
        self, replica: Replica, pods: list[client.KubeObject], nodes: dict[str, Any]
    ) -> None:
        """3: the cache's usage per node is the sum over the pods truly bound there."""
        cache = replica.scheduler.cache
        stats = cache.stats()
        bound = [p for p in pods if p["spec"].get("nodeName")]
        if stats.assumed:
            raise self.violation(3, f"{replica.identity} still assumes {stats.assumed} pod(s)")
        if replica.scheduler.handle.volumes.assumed():
            raise self.violation(
                3, f"{replica.identity} still assumes {replica.scheduler.handle.volumes.assumed()}"
            )
        if stats.bound != len(bound):
            raise self.violation(
                3, f"{replica.identity} caches {stats.bound} bound pods, the API has {len(bound)}"
            )
        with cache.cycle() as snapshot:
            for name in nodes:
                index = snapshot.index.get(name)
                if index is None:
                    raise self.violation(3, f"{replica.identity} does not know node {name}")
                truth = sorted(p["metadata"]["uid"] for p in bound if p["spec"]["nodeName"] == name)
                cached = sorted(p.uid for p in snapshot.pods_on_node[index])
                cpu = sum(requests_of(p)["cpu"] for p in bound if p["spec"]["nodeName"] == name)
                cached_cpu = int(snapshot.requested[snapshot.row["cpu"], index])
                if truth != cached or cpu != cached_cpu or len(truth) != snapshot.pod_count[index]:
                    raise self.violation(
                        3,
                        f"{replica.identity}'s cache has {cached} ({cached_cpu}m cpu, "
                        f"{snapshot.pod_count[index]} pods) on {name}; the API has {truth} "
                        f"({cpu}m cpu)",
                    )

    def _check_queue(self, replica: Replica, pending: list[client.KubeObject]) -> None:
        """3: the queue holds exactly the pending pods, and the metric says so."""
        scheduler = replica.scheduler
        queue = scheduler.queue
        missing = [
            p["metadata"]["name"] for p in pending if queue.where(p["metadata"]["uid"]) is None
        ]
        if missing or len(queue) != len(pending):
            raise self.violation(
                3,
                f"{replica.identity}'s queue holds {len(queue)} pods, the API has "
                f"{len(pending)} pending; not queued: {missing}",
            )
        metric = sum(
            sample.value
            for family in scheduler.metrics.registry.collect()
            if family.name == "scheduler_pending_pods"
            for sample in family.samples
        )
        if metric != len(pending):
            raise self.violation(
                3, f"{replica.identity}: scheduler_pending_pods is {metric}, truth {len(pending)}"
            )

    # --- running --------------------------------------------------------------------------
    def setup(self) -> None:
        for _ in range(self.shape.nodes):
            self.add_node()
        if self.storage_on:
            self.api.create(pvc.CLASSES, pvc.storage_class(pvc.LOCAL, "WaitForFirstConsumer"))
            self.api.create(pvc.CLASSES, pvc.storage_class(pvc.FAST, "Immediate"))
            for _ in range(self.storage_rng.randint(2 * self.shape.nodes, 4 * self.shape.nodes)):
                self.add_volume()
        for _ in range(self.rng.randint(2, 6)):
            self.add_pod()
        for _ in range(self.shape.replicas):
            self.add_replica()

    def step(self) -> None:
        self.step_no += 1
        if self.shape.leader_elect and self.replicas and self.partitions.random() < 0.02:
            self.cut_lease()
        if self.storage_on and self.storage_rng.random() < 0.3:
            self.storage_step()
            self.check_step()
            return
        rng = self.rng
        replica = rng.choice(self.replicas) if self.replicas else None
        roll = rng.random()
        if replica is None or roll < 0.04:
            if len(self.replicas) < self.shape.replicas or replica is None:
                self.add_replica()
            elif rng.random() < 0.3:
                self.kill(replica)
            return
        if roll < 0.30:
            kinds = [k for k in replica.needs_list if replica.needs_list[k]]
            if kinds:
                self.relist(replica, rng.choice(kinds))
            else:
                self.deliver(
                    replica, rng.choice(("pods", PENDING_PODS, "nodes", "poddisruptionbudgets"))
                )
        elif roll < 0.33:
            gone = ("pods", PENDING_PODS, "nodes", "poddisruptionbudgets")
            replica.needs_list[rng.choice(gone)] = True
            self.note(f"{replica.identity}: a watch answered 410 Gone")
        elif roll < 0.48:
            self.schedule(replica)
        elif roll < 0.60:
            self.bind(replica)
        elif roll < 0.66:
            self.report(replica)
        elif roll < 0.82:
            self.clock.advance(rng.choice((0.05, 0.3, 1.0, 2.5)))
            self.timers()
        elif roll < 0.98:
            self.change_cluster()
        elif not self.faults.down:
            self.outage()
        self.check_step()

    def cut_lease(self) -> None:
        """One replica's Lease requests fail for a while; everything else works."""
        replica = self.partitions.choice(self.replicas)
        length = self.partitions.uniform(5.0, 40.0)
        self.faults.lease_cut[replica.identity] = self.clock.now() + length
        self.note(f"{replica.identity} cut off from the Lease for {length:.1f} s")

    def outage(self) -> None:
        length = self.rng.uniform(1.0, 15.0)
        self.faults.outage_until = self.clock.now() + length
        self.note(f"API outage for {length:.1f} s")
        for replica in self.replicas:
            for kind in replica.needs_list:
                if self.rng.random() < 0.5:
                    replica.needs_list[kind] = True  # the watch comes back with 410
            if self.storage_on:
                for kind in replica.storage_needs_list:
                    if self.storage_rng.random() < 0.5:
                        replica.storage_needs_list[kind] = True

    def drain(self) -> bool:
        """Everything that can happen without the clock moving; True if anything did."""
        moved = False
        for _ in range(500):
            progress = False
            while self.storage_on and self.controller.step():
                progress = True
            for replica in list(self.replicas):
                for kind in replica.informers:
                    if replica.needs_list[kind]:
                        progress |= self.relist(replica, kind)
                    while self.deliver(replica, kind):
                        progress = True
                for kind in replica.storage if self.storage_on else ():
                    if replica.storage_needs_list[kind]:
                        progress |= self.relist(replica, kind)
                    while self.deliver(replica, kind):
                        progress = True
                while self.bind(replica):
                    progress = True
                while self.report(replica):
                    progress = True
                for _ in range(50):
                    if not self.schedule(replica):
                        break
                    progress = True
                self.check_step()
            moved |= progress
            if not progress:
                return moved
        raise self.violation(3, "the scheduler does not settle: work without end")

    def settle(self) -> None:
        """Heal every fault, stop changing the cluster, let time run until nothing moves."""
        self.faults.heal()
        self.note("faults healed")
        for name, class_name, size in self.claims_to_create:
            # the claims still to come come now: only their events (the QueueingHints
            # that say they may help) can move the pods that wait for them
            self.api.create(pvc.CLAIMS, pvc.claim(name, class_name, size))
            self.note(f"claim {name} created late")
        self.claims_to_create.clear()
        self.collect_orphans()
        quiet = 0
        last: tuple[int, ...] = ()
        for _ in range(400):
            self.replicas = [r for r in self.replicas if not r.lost]
            while len(self.replicas) < self.shape.replicas:
                self.add_replica()
            self.drain()
            self.clock.advance(1.0)
            self.timers()
            seen = (len(self.api.bindings), *(len(h) for h in self.api.history.values()))
            leading = not self.shape.leader_elect or any(
                r.scheduler.may_schedule() for r in self.replicas
            )
            # quiet: nothing written for longer than the longest backoff, a leader
            quiet = 0 if seen != last or not leading else quiet + 1
            last = seen
            if quiet >= 15:
                self.drain()
                return
        raise self.violation(4, "no quiescence after 400 s of simulated time")

    def run(self) -> None:
        logging.disable(logging.CRITICAL)
        try:
            self.setup()
            for _ in range(self.shape.steps):
                self.step()
            self.settle()
            self.check_step()
            self.check_quiescent()
        finally:
            logging.disable(logging.NOTSET)
            for replica in self.replicas:
                replica.scheduler.binder.shutdown()


def has_room(
    pod: client.KubeObject, node: client.KubeObject, usage: dict[str, dict[str, int]]
) -> bool:
    """Resources only (a taint or a label may have changed since the cycle saw the node:
    a race every scheduler has, that the kubelet's admission settles)."""
    used = usage.get(node["metadata"]["name"], {})
    alloc = allocatable_of(node)
    return all(
        used.get(name, 0) + amount <= alloc.get(name, 0)
        for name, amount in requests_of(pod).items()
        if amount
    )


def _bound_at(history: list[client.WatchEvent], index: int, uid: str) -> bool:
    """Whether the pod's latest write at or before ``index`` shows it bound."""
    for position in range(index, -1, -1):
        obj = history[position].object
        if obj["metadata"].get("uid") == uid:
            return bool(obj["spec"].get("nodeName"))
    return False


def _pod_scheduled(pod: client.KubeObject) -> dict[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return dict(condition)
    return None


def _assign(node: str) -> Callable[[client.KubeObject], None]:
    def change(pod: client.KubeObject) -> None:
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"

    return change


def _annotate(value: str) -> Callable[[client.KubeObject], None]:
    def change(pod: client.KubeObject) -> None:
        pod["metadata"].setdefault("annotations", {})["touched"] = value

    return change


def _resized_spec(cpu: str) -> Callable[[client.KubeObject], None]:
    """``PATCH pods/NAME/resize``: the container's cpu request, nothing else."""

    def change(pod: client.KubeObject) -> None:
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu

    return change


def _kubelet_verdict(verdict: str, running: str) -> Callable[[client.KubeObject], None]:
    """The kubelet's status for a resize (``handlePodResourcesResize``): granted (the
    spec allocated, ``running`` still actual, PodResizeInProgress), or Infeasible (the
    old allocation kept, PodResizePending)."""

    def change(pod: client.KubeObject) -> None:
        container = pod["spec"]["containers"][0]
        spec = dict(container["resources"]["requests"])
        actual = {**spec, "cpu": running}
        allocated = spec if verdict == "granted" else actual
        status = pod.setdefault("status", {})
        status["containerStatuses"] = [
            {
                "name": container["name"],
                "allocatedResources": allocated,
                "resources": {"requests": actual},
            }
        ]
        conditions = [
            c
            for c in status.get("conditions") or ()
            if c.get("type") not in ("PodResizePending", "PodResizeInProgress")
        ]
        if verdict == "granted":
            conditions.append({"type": "PodResizeInProgress", "status": "True"})
        else:
            conditions.append(
                {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
            )
        status["conditions"] = conditions

    return change


def _kubelet_reported(pod: client.KubeObject) -> None:
    """The kubelet's status of a running pod: what it allocated and runs, its spec."""
    container = pod["spec"]["containers"][0]
    spec = dict(container["resources"]["requests"])
    pod.setdefault("status", {})["containerStatuses"] = [
        {"name": container["name"], "allocatedResources": spec, "resources": {"requests": spec}}
    ]


def _actuated(pod: client.KubeObject) -> None:
    """The runtime applied the allocation: actual = allocated, the condition gone."""
    status = pod["status"]
    for entry in status.get("containerStatuses") or ():
        entry["resources"] = {"requests": dict(entry["allocatedResources"])}
    status["conditions"] = [
        c for c in status.get("conditions") or () if c.get("type") != "PodResizeInProgress"
    ]


def _ungate(pod: client.KubeObject) -> None:
    pod["spec"].pop("schedulingGates", None)


def _terminating(pod: client.KubeObject) -> None:
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"


def _toggle_taint(node: client.KubeObject) -> None:
    if node["spec"].get("taints"):
        node["spec"].pop("taints")
    else:
        node["spec"]["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]


def _toggle_cordon(node: client.KubeObject) -> None:
    node["spec"]["unschedulable"] = not node["spec"].get("unschedulable")


def _relabel(node: client.KubeObject) -> None:
    labels = node["metadata"]["labels"]
    labels["zone"] = "b" if labels.get("zone") == "a" else "a"


def _grow(node: client.KubeObject) -> None:
    alloc = node["status"]["allocatable"]
    alloc["cpu"] = f"{quantity(alloc['cpu']) + 500}m"
    alloc["pods"] = str(int(alloc["pods"]) + 1)


def simulation(seed: int, *, storage: bool = True) -> SchedulerSimulation:
    """Seed ``seed``'s run; ``storage=False``: its run as before storage existed (the
    regression seeds found then replay exactly)."""
    return SchedulerSimulation(
        random.Random(seed),
        label=f"[seed {seed}]",
        partitions=random.Random(-1 - seed),
        storage=random.Random(f"storage {seed}") if storage else None,
    )


def run_seed(seed: int, *, storage: bool = True) -> None:
    """One seeded run; raises :class:`Violation` (naming the seed) if an invariant fails."""
    simulation(seed, storage=storage).run()
