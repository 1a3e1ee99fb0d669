"""The live scheduler: informers -> cache and queue -> scheduling loop -> binding pool.

Threads: four informers (bound pods, pending pods, nodes, PodDisruptionBudgets; their
handlers update the cache and the queue) and six for the volume plugins' storage kinds
(:mod:`.volumes`), the scheduling loop (one pod at a time, as kube-scheduler), the
binding workers, the queue flusher (backoff expiry every second, the 5-minute
unschedulable flush, expired assumptions), the reporter, leader election and the
metrics server.

Which pods: kube-scheduler's choice (``addAllEventHandlers``): pods not terminal
(``status.phase!=Succeeded,status.phase!=Failed``); a pod with a node feeds the cache, a
pod without one whose ``schedulerName`` is a profile and that is not being deleted feeds
the queue. Nothing is fetched per pod: the informers carry everything. The two halves
are two informers (``spec.nodeName!=`` and ``spec.nodeName=``, as kube-scheduler's
factory had them before its shared informer), so that scheduling can begin once the
nodes and the bound pods are in, while the pending pods are still being listed
(:meth:`LiveScheduler.start`): a binding shows as a pod leaving the pending watch and
joining the bound one, in either order.

One scheduling cycle (:meth:`LiveScheduler.schedule_one`): the framework filters (with
nominated pods of higher or equal priority counted on their nodes) and scores on the
cache's snapshot, and then either

* a node: the pod is **assumed** there (the next cycle sees it), Reserve and Permit
  run, and the binding goes to the pool; or
* none: PostFilter (preemption) may nominate a node and name victims, which are acted
  on (nomination written, victims deleted with a DisruptionTarget condition, lower
  nominations on that node cleared); the pod goes to unschedulablePods with the plugins
  that rejected it, gets ``PodScheduled=False`` and one ``FailedScheduling`` event.

Shutdown (:meth:`LiveScheduler.stop`): stop popping, let bindings in flight finish
(bounded), release the lease, stop the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from nodeagent.base import errors, heap
from nodeagent.base.clock import Clock, RealClock
from nodeagent.base.logs import FIELDS
from nodeagent.k8s.pods import NOT_TERMINAL_FIELD_SELECTOR
from nodeagent.kube import client, informer
from nodeagent.kube.events import EventRecorder
from nodeagent.scheduler import api, framework, objects, registry, scheduling
from nodeagent.scheduler.api import BindResult
from nodeagent.scheduler.live import bind_process, resources, startup, volumes
from nodeagent.scheduler.live.binder import APIBinder, Binding, BindingPool
from nodeagent.scheduler.live.cache import AlreadyAccounted, SchedulerCache
from nodeagent.scheduler.live.events import ClusterEvent, QueueingHints
from nodeagent.scheduler.live.leader import LeaderElector, default_identity
from nodeagent.scheduler.live.metrics import SchedulerMetrics
from nodeagent.scheduler.live.queue import PodInfo, SchedulingQueue, Where
from nodeagent.scheduler.live.reporter import Reporter
from nodeagent.scheduler.live.settings import LiveSettings
from nodeagent.scheduler.snapshot import ClusterSnapshot
from nodeagent.serving.health import ProbeResult

log = logging.getLogger("nodeagent.scheduler")

ASSIGNED_POD_SELECTOR = f"spec.nodeName!=,{NOT_TERMINAL_FIELD_SELECTOR}"
PENDING_POD_SELECTOR = f"spec.nodeName=,{NOT_TERMINAL_FIELD_SELECTOR}"
NOMINATED_POD_SELECTOR = f"{PENDING_POD_SELECTOR},status.nominatedNodeName!="
"""Pending pods holding a nomination: if there are any when the scheduler starts, it
waits for every pending pod before its first cycle (see :meth:`LiveScheduler.start`)."""
FLUSH_INTERVAL = 1.0
STATIC_REFRESH_INTERVAL = 10.0
"""Seconds between refreshes of plugins' per-node caches (published pressure ages)."""
SHUTDOWN_BIND_TIMEOUT = 10.0
PROCESS_BINDING_THREADS = 8
"""Binding threads beside a binding process, for profiles whose binding cycle runs
more than DefaultBinder (PreBind plugins, a binder extender): each waits for its
answer."""
LIVENESS_TIMEOUT = 60.0
SETTLE_LOOKUPS = 16
"""Pods a flush asks the API server about at most (:meth:`LiveScheduler._settle_left`)."""


T = TypeVar("T")


def _readable(
    kind: str, parse: Callable[[client.KubeObject], T], obj: client.KubeObject
) -> T | None:
    """``parse(obj)``, or None (logged) for an object the scheduler cannot read: one bad
    object must not stop the informer."""
    try:
        return parse(obj)
    except errors.ConfigError as exc:
        log.warning("ignoring a %s the scheduler cannot read: %s", kind, exc)
        return None


_RESOURCE_STATUS = ("containerStatuses", "initContainerStatuses", "resources", "allocatedResources")
_RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")


def _accounted(obj: client.KubeObject) -> tuple[Any, ...]:
    """What the cache's accounting of a bound pod reads, but the binding itself."""
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != "nodeName"}
    status = obj.get("status") or {}
    return (
        spec,
        (obj.get("metadata") or {}).get("labels"),
        [status.get(key) for key in _RESOURCE_STATUS],
        [c for c in status.get("conditions") or () if c.get("type") in _RESIZE_CONDITIONS],
    )


def _spec_changed(old: client.KubeObject, new: client.KubeObject) -> bool:
    """The spec or labels changed, or the names of the claims generated for the pod
    (what DynamicResources waits for)."""
    return (
        old.get("spec") != new.get("spec")
        or (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels")
        or (old.get("status") or {}).get("resourceClaimStatuses")
        != (new.get("status") or {}).get("resourceClaimStatuses")
    )


class LiveScheduler:
    def __init__(
        self,
        kube: client.ClusterClient,
        settings: LiveSettings,
        *,
        metrics: SchedulerMetrics | None = None,
        clock: Clock | None = None,
        identity: str | None = None,
        plugins: framework.Registry | None = None,
        seed: int | None = None,
        watch_timeout: int = 300,
        bind_target: bind_process.Target | None = None,
        stepped: bool = False,
    ) -> None:
        """``bind_target``: bind from a process of its own that reaches the API server
        so (:mod:`~nodeagent.scheduler.live.bind_process`); None: bind over ``kube``.

        ``stepped``: no binding threads; a driver runs the loops' steps itself on one
        thread (:meth:`schedule_next`, :meth:`flush_once`, the informers'
        ``sync_once``/``apply``, the binder's ``run``, the reporter's ``write_next``, the
        elector's ``step``) and :meth:`start` is not called: the deterministic
        simulation in tests/sim drives the production code this way."""
        self._kube = kube
        self.settings = settings
        self._clock = clock or RealClock()
        self.identity = identity or default_identity()
        self.metrics = metrics or SchedulerMetrics(settings.profiles)
        self.elector = self._elector(kube) if settings.leader_election.leader_elect else None
        self.handle = framework.Handle(now=self._clock.wall(), features=settings.features)
        self.handle.volumes.writer = volumes.APIVolumeWriter(kube)  # VolumeBinding's PreBind
        self.metrics.registry.register(self.handle.failures)  # plugin_errors_total
        self.process_binder = None if bind_target is None else self._process_binder(bind_target)
        self.handle.binder = (
            APIBinder(kube, self.may_bind) if self.process_binder is None else self.process_binder
        )
        self.frameworks = framework.build_frameworks(
            settings.configuration, plugins or registry.in_tree_registry(), self.handle
        )
        any_fw = next(iter(self.frameworks.values()))
        self.handle.rng = random.Random(seed)
        self.cache = SchedulerCache(clock=self._clock.now, nominator=self.handle.nominator)
        self.hints = QueueingHints(self.frameworks, observe=self.metrics.hint_ran)
        self.queue = self._queue(any_fw.less)
        self.metrics.watch_queue(self.queue.pending)
        self.algorithm = scheduling.Scheduler(
            self.frameworks,
            ClusterSnapshot([]),
            percentage_of_nodes_to_score=settings.configuration.percentage_of_nodes_to_score,
            rng=random.Random(seed),
        )
        self.recorder = EventRecorder(
            kube,
            node_name=self.identity,
            clock=self._clock,
            component=settings.profiles[0],
        )
        self.reporter = self._reporter(kube)
        self.binder = BindingPool(
            0 if stepped else self._binding_threads(bind_target), self._binding_done
        )
        self.metrics.watch_bindings(lambda: self.binder.in_flight)
        self.assigned_pods, self.pending_pods, self.nodes, self.budgets = self._informers(
            kube, watch_timeout
        )
        self.storage = volumes.StorageInformers(
            kube, self.handle.volumes, self._event, watch_timeout=watch_timeout
        )
        self.handle.resources.writer = resources.APIClaimWriter(  # DRA
            kube, self.recorder, self.process_binder
        )
        self.handle.resources.observer = self.metrics
        self.resources = resources.ResourceInformers(
            kube, self.handle.resources, self._resource_event, watch_timeout=watch_timeout
        )
        self.timeline = startup.StartupTimeline(startup.process_started())
        self._stopping = threading.Event()
        self._lost = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_beat = self._last_refresh = self._clock.now()
        self.times = {"algorithm": 0.0, "assume": 0.0, "failure": 0.0, "cycles": 0.0}
        self.bound_count = 0
        self._bound_lock = threading.Lock()
        self._left_pending: list[tuple[str, informer.Key, float]] = []
        """``(uid, key, when)`` of pods that left the pending watch not seen bound, by
        ``when`` (:meth:`_settle_left`)."""
        self._left_lock = threading.Lock()

    # --- the parts ----------------------------------------------------------------------
    def _elector(self, kube: client.ClusterClient) -> LeaderElector:
        return LeaderElector(
            kube,
            self.settings.leader_election,
            identity=self.identity,
            now=self._clock.now,
            wall=self._clock.wall,
            on_started_leading=self._started_leading,
            on_stopped_leading=self._stopped_leading,
        )

    def _process_binder(self, target: bind_process.Target) -> bind_process.ProcessBinder:
        """The binding process reaching the API server through ``target``."""
        return bind_process.ProcessBinder(
            target,
            self.may_bind,
            observer=self.metrics,
            on_start=self.metrics.binding_process_starts.inc,
            # the Scheduled events go out from there too, off this interpreter
            reporting=bind_process.Reporting(self.settings.profiles[0], self.identity),
            on_events_dropped=self.metrics.events_dropped.inc,
        )

    def _binding_threads(self, bind_target: bind_process.Target | None) -> int:
        if bind_target is None:
            return self.settings.bind_workers
        # bindings with DefaultBinder alone take no thread (binder.direct_binder);
        # the threads are for a profile whose binding cycle waits for more
        return min(self.settings.bind_workers, PROCESS_BINDING_THREADS)

    def _queue(
        self, less: Callable[[framework.QueuedPod, framework.QueuedPod], bool]
    ) -> SchedulingQueue:
        settings = self.settings
        return SchedulingQueue(
            less=less,
            pre_enqueue=self._pre_enqueue,
            clock=self._clock.now,
            initial_backoff=settings.initial_backoff,
            max_backoff=settings.max_backoff,
            on_move=self._moved,
            hints=self.hints,
            on_wasted=self.metrics.wasted_retry,
        )

    def _reporter(self, kube: client.ClusterClient) -> Reporter:
        settings = self.settings
        return Reporter(
            kube,
            self.recorder,
            wall=self._clock.wall,
            scheduler_name=settings.profiles[0],
            on_event_dropped=self.metrics.events_dropped.inc,
            clock=self._clock,
            event_qps=settings.qps,
            event_burst=settings.burst,
            on_victim_done=self._victim_done,
        )

    def _informers(
        self, kube: client.ClusterClient, watch_timeout: int
    ) -> tuple[informer.Informer, informer.Informer, informer.Informer, informer.Informer]:
        """The bound pods', pending pods', node and PodDisruptionBudget informers, feeding
        the handlers below."""
        assigned = informer.Informer(
            informer.pods(kube, field_selector=ASSIGNED_POD_SELECTOR),
            informer.Handlers(self._assigned_added, self._assigned_updated, self._assigned_deleted),
            watch_timeout=watch_timeout,
            name="assigned-pod-informer",
        )
        pending = informer.Informer(
            # in pages: a streamed list of the pods this scheduler binds while it lists
            # them is cut by kube-apiserver (the watcher's buffer of new changes fills
            # while it still sends the initial state: "Forcing watcher close due to
            # unresponsiveness") and would start over each time; pages are requests of
            # their own on one snapshot, and the watch after them resumes where it stops
            informer.pods(kube, field_selector=PENDING_POD_SELECTOR, streamed=False),
            informer.Handlers(self._pending_added, self._pending_updated, self._pending_deleted),
            watch_timeout=watch_timeout,
            name="pending-pod-informer",
        )
        nodes = informer.Informer(
            informer.nodes(kube),
            informer.Handlers(self._node_added, self._node_updated, self._node_deleted),
            watch_timeout=watch_timeout,
            name="node-informer",
        )
        budgets = informer.Informer(
            informer.disruption_budgets(kube),
            informer.Handlers(
                self._budget_changed,
                lambda _old, new: self._budget_changed(new),
                lambda gone: self._budget_changed(gone, present=False),
            ),
            watch_timeout=watch_timeout,
            name="pdb-informer",
        )
        return assigned, pending, nodes, budgets

    # --- leadership ---------------------------------------------------------------------
    def may_schedule(self) -> bool:
        """Leading (or not electing) and never having lost the lease."""
        return not self._lost.is_set() and (self.elector is None or self.elector.is_leader())

    may_bind = may_schedule
    """The binder asks the same question right before each POST."""

    def _started_leading(self) -> None:
        self.metrics.leader.labels(self.settings.leader_election.resource_name).set(1)

    def _stopped_leading(self) -> None:
        self.metrics.leader.labels(self.settings.leader_election.resource_name).set(0)
        self._lost.set()
        self.queue.close()  # stop scheduling at once
        if self.process_binder is not None:
            self.process_binder.abandon()  # nothing it queued may go out now

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    # --- informer handlers --------------------------------------------------------------
    def _responsible(self, pod: api.Pod) -> bool:
        return not pod.node_name and not pod.deleting and pod.scheduler_name in self.frameworks

    @staticmethod
    def _parse_pod(obj: client.KubeObject) -> api.Pod | None:
        return _readable("pod", objects.parse_pod, obj)

    def _others_pending(self, obj: client.KubeObject) -> bool:
        """An unassigned pod another scheduler places: kube-scheduler's informer filters
        it out before its handlers (``responsibleForPod``), and so is it here, before it
        is even parsed (its schedulerName is immutable, so it can never be ours)."""
        spec = obj.get("spec") or {}
        name = spec.get("schedulerName") or api.DEFAULT_SCHEDULER_NAME
        return not spec.get("nodeName") and name not in self.frameworks

    def _assigned_added(self, obj: client.KubeObject) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        self.queue.delete(uid)  # the pending watch may not have shown it leave yet
        # our own binding, seen bound: the assumed pod is the bound one, if nothing else
        # changed since (the watch may show the binding and a resize at once, as
        # kube-scheduler's cache updates the assumed pod from the informer's: cache.AddPod)
        was_pending = self.pending_pods.get(informer.object_key(obj))
        if (
            was_pending is not None
            and _accounted(was_pending) == _accounted(obj)
            and self.cache.confirm(uid, str((obj.get("spec") or {}).get("nodeName") or ""))
        ):
            self._event(ClusterEvent.ASSIGNED_POD_ADD, None, self.cache.bound(uid))
            return
        pod = self._parse_pod(obj)
        if pod is None:
            return
        self.cache.set_nominated(pod)  # bound: forgets any nomination
        before = self.cache.bound(pod.uid) if self.cache.is_bound(pod.uid) else None
        self.cache.add_bound(pod)
        if before is None:  # new, or our assumption confirmed
            self._event(ClusterEvent.ASSIGNED_POD_ADD, None, pod)
        else:  # a relist after a 410 (the store replaced) reports it added again
            for event in framework.pod_update_events(before, pod):
                self._event(event, before, pod)

    def _assigned_updated(self, _old_obj: client.KubeObject, obj: client.KubeObject) -> None:
        pod = self._parse_pod(obj)
        if pod is None:
            return
        before = self.cache.bound(pod.uid)
        self.cache.add_bound(pod)
        if before is None:
            self._event(ClusterEvent.ASSIGNED_POD_ADD, None, pod)
        else:
            # a resize down frees room (isPodResourcesResizedDown)
            for event in framework.pod_update_events(before, pod):
                self._event(event, before, pod)

    def _assigned_deleted(self, obj: client.KubeObject) -> None:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        self.queue.delete(uid)
        self.reporter.forget(uid)
        gone = self.cache.remove_bound(uid)
        if gone is not None:
            self._event(ClusterEvent.ASSIGNED_POD_DELETE, gone, None)

    def _pending_added(self, obj: client.KubeObject) -> None:
        if self._others_pending(obj):
            return
        pod = self._parse_pod(obj)
        if pod is None:
            return
        if self._responsible(pod) and not self.cache.accounts(pod.uid):
            self.cache.set_nominated(pod)
            self.queue.add(pod)

    def _pending_updated(self, old_obj: client.KubeObject, obj: client.KubeObject) -> None:
        if self._others_pending(obj):
            return
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if self.cache.accounts(uid):
            # assumed (its binding in flight or not yet seen) or already seen bound (the
            # two watches are not ordered with each other): an older version of the pod
            # (a late update, our own status patch) must not queue it again
            # (kube-scheduler's updatePodInSchedulingQueue)
            return
        pod = self._parse_pod(obj)
        if pod is None:
            return
        if self._responsible(pod):
            old_nomination = (old_obj.get("status") or {}).get("nominatedNodeName")
            if not pod.nominated_node_name and not old_nomination:
                # an update racing our own nomination (its status patch not seen yet):
                # keep the nomination made in memory, as kube-scheduler's nominator does
                kept = self.cache.nomination_of(pod)
                if kept:
                    pod = dataclasses.replace(pod, nominated_node_name=kept)
            self.cache.set_nominated(pod)
            self.queue.update(pod, relevant=_spec_changed(old_obj, obj))
        else:
            self.queue.delete(pod.uid)
            self.cache.set_nominated(dataclasses.replace(pod, nominated_node_name=""))

    def _pending_deleted(self, obj: client.KubeObject) -> None:
        """The pod left the pending pods: deleted, gone terminal, or bound (its bound
        state comes on the other watch, before or after this)."""
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        self.queue.delete(uid)
        if self.cache.is_bound(uid):
            return  # seen bound: the bound pods' watch says when it goes
        if self._others_pending(obj):
            return
        with self._left_lock:
            # deleted, or bound and not yet seen so on the other watch (ours, assumed;
            # or a binding whose answer was lost): settled at a flush (_settle_left)
            self._left_pending.append((uid, informer.object_key(obj), self._clock.now()))
        if self.cache.accounts(uid):
            return
        pod = self._parse_pod(obj)
        if pod is None:
            return
        self.cache.set_nominated(dataclasses.replace(pod, nominated_node_name=""))
        if pod.nominated_node_name:
            # the room nominated to it is free again
            self._event(ClusterEvent.UNSCHEDULED_POD_DELETE, pod, None)

    def _node_added(self, obj: client.KubeObject) -> None:
        node = self._parse_node(obj)
        if node is not None:
            self._node_seen(node, self.cache.node(node.name), self.cache.add_node(node))

    def _node_updated(self, old_obj: client.KubeObject, obj: client.KubeObject) -> None:
        node = self._parse_node(obj)
        if node is not None:
            self._node_seen(node, self.cache.node(node.name), self.cache.update_node(node))

    def _node_seen(
        self, node: api.Node, before: api.Node | None, events: frozenset[ClusterEvent]
    ) -> None:
        for event in events:
            self._event(event, None if event is ClusterEvent.NODE_ADD else before, node)

    def _node_deleted(self, obj: client.KubeObject) -> None:
        gone = self.cache.remove_node(str((obj.get("metadata") or {}).get("name") or ""))
        if gone is not None:
            self._event(ClusterEvent.NODE_DELETE, gone, None)

    @staticmethod
    def _parse_node(obj: client.KubeObject) -> api.Node | None:
        return _readable("node", objects.parse_node, obj)

    def _budget_changed(self, obj: client.KubeObject, *, present: bool = True) -> None:
        budget = _readable("PodDisruptionBudget", objects.parse_disruption_budget, obj)
        if budget is None:
            return
        self.cache.set_budget(budget, present=present)
        self._event(ClusterEvent.PDB_CHANGE)

    def _event(self, event: ClusterEvent, old: object = None, new: object = None) -> None:
        self.queue.on_event(event, old, new)

    def _resource_event(self, event: ClusterEvent, old: object, new: object) -> None:
        """A claim, slice or class added or updated: may help pods the plugin rejected,
        and (a claim) pods held back at PreEnqueue waiting for it. During the claims'
        first list none is (the pods held meanwhile are let through once after the
        informers synced): a recheck per claim listed is claims x pods."""
        self.queue.on_event(event, old, new)
        if event is ClusterEvent.RESOURCE_CLAIM_ADD and self.resources.synced:
            self.queue.recheck_gated(event, resources.may_wait_for(new))

    def _moved(self, where: Where, event: str) -> None:
        self.metrics.incoming_child(where.value, event).inc()

    def _pre_enqueue(self, pod: api.Pod) -> api.Status:
        fw = self.frameworks.get(pod.scheduler_name)
        return api.SUCCESS if fw is None else fw.run_pre_enqueue(pod)

    # --- the scheduling cycle -----------------------------------------------------------
    def schedule_one(self, info: PodInfo) -> None:
        pod = info.pod
        fw = self.frameworks[pod.scheduler_name]
        started = self._clock.now()
        self.handle.now = self._clock.wall()
        offer: framework.PostFilterResult | None = None
        with self.cache.cycle() as snapshot:
            self.algorithm.snapshot = snapshot
            try:
                result = self.algorithm.schedule_pod(fw, pod)
            except framework.PluginError as exc:
                result = scheduling.CycleResult(
                    pod, fw, snapshot, framework.CycleState(), status=api.error(str(exc))
                )
            decided = self._clock.now()
            self.times["algorithm"] += decided - started
            if result.node is not None:
                node = result.node
                try:
                    assumed = self.cache.assume(pod, node)
                except AlreadyAccounted as exc:
                    # cannot happen while informer events of accounted pods never queue
                    # them; if it did, the pod is not scheduled again: the watch tells
                    log.error("not scheduling %s again: %s", pod.key, exc)
                    self.queue.bound(info)
                    return
                status = fw.run_reserve(result.state, assumed, node)
                if status.is_success:
                    status = fw.run_permit(result.state, assumed, node)
                if not status.is_success:
                    fw.run_unreserve(result.state, assumed, node)
                    self.cache.forget(pod.uid)
                    result.status, result.node = status, None
                else:
                    self.queue.assumed(info)
                    self.binder.submit(Binding(assumed, node, fw, result.state, self._clock.now()))
                    self.timeline.scheduled()
                    self.times["assume"] += self._clock.now() - decided
                    self._attempt("scheduled", fw, started)
                    return
            message, rejectors = self._explain_failure(result)
            if result.status.is_rejection and fw.post_filter:
                offer, post = fw.run_post_filter(result.state, pod, snapshot, result)
                self.metrics.preemption_attempts.inc()  # per PostFilter run, as upstream
                if post.code is not api.Code.ERROR and post.message:
                    # kube-scheduler appends the PostFilter message to the FitError's
                    message = f"{message} {post.message}"
                if offer is not None and offer.nominated_node:
                    self._preempt(pod, offer)
        error = not result.status.is_rejection
        # a nomination made by preemption was queued by _preempt; an empty one clears
        nominated_node = "" if offer is not None and offer.nominated_node == "" else None
        if error:
            self.queue.failed(info)
        else:
            self.queue.unschedulable(info, rejectors)
        self.reporter.unschedulable(pod, message, error=error, nominated=nominated_node)
        self.times["failure"] += self._clock.now() - started
        self._attempt("error" if error else "unschedulable", fw, started)

    @staticmethod
    def _explain_failure(
        result: scheduling.CycleResult,
    ) -> tuple[str, set[str]]:
        rejectors: set[str] = set()
        if not result.prefilter_status.is_success:
            rejectors.add(result.prefilter_status.plugin)
        if result.outcome is not None and result.filters:
            rejectors.update(result.filters[int(p)].name for p in set(result.outcome.rejected_by))
        if result.absent_status is not None:
            rejectors.add("*")  # a PreFilter restriction: any event may matter
        rejectors.discard("")
        if "*" in rejectors:
            rejectors = set()
        return result.status.message, rejectors

    def _preempt(self, pod: api.Pod, offer: framework.PostFilterResult) -> None:
        """Act on preemption's offer (cache lock held): nominate, delete the victims
        (each with a DisruptionTarget condition), clear the lower nominations there."""
        node = offer.nominated_node
        assert node is not None
        victims = offer.victims
        if victims:
            self.metrics.preemption_victims.observe(len(victims))
        log.info(
            "preempting %d pod(s) on %s for %s: %s",
            len(victims),
            node,
            pod.key,
            ", ".join(v.key for v in victims),
        )
        nominated = dataclasses.replace(pod, nominated_node_name=node)
        # asynchronous preemption: the victims are deleted by the reporter's thread; until
        # the last deletion is answered DefaultPreemption's PreEnqueue holds the pod back
        self.handle.preemptions.start(pod.uid, len(victims))
        self.cache.set_nominated(nominated)
        self.queue.update(nominated, relevant=False)  # its next cycle tries that node first
        self.reporter.nominate(pod, node)
        for victim in victims:
            self.cache.mark_preempted(victim.uid)
            self.reporter.preempt(victim, pod, node)
        for cleared in offer.cleared_nominations:
            self.cache.set_nominated(dataclasses.replace(cleared, nominated_node_name=""))
            self.reporter.clear_nomination(cleared)

    def _victim_done(self, preemptor_uid: str, ok: bool) -> None:
        """A victim's deletion was answered (reporter's thread). After the last one the
        preemptor may go on: if every deletion went through, it waits (ungated) for the
        events of the victims leaving; if one failed, it is retried at once
        (``prepareCandidateAsync``: ``Activate`` on an error)."""
        finished = self.handle.preemptions.victim_done(preemptor_uid, ok=ok)
        if finished is None:
            return
        if finished:
            self.queue.recheck_gate(preemptor_uid, ClusterEvent.ASSIGNED_POD_DELETE)
        else:
            self.queue.activate(preemptor_uid)

    def _attempt(self, result: str, fw: framework.Framework, started: float) -> None:
        self.metrics.attempt(result, fw.scheduler_name, self._clock.now() - started)
        self.times["cycles"] += 1

    def _binding_done(self, binding: Binding, result: BindResult, why: str) -> None:
        pod = binding.pod
        info = self.queue.info(pod.uid)
        self.metrics.binding_child(result.value).observe(self._clock.now() - binding.submitted)
        if result is BindResult.BOUND:
            self.cache.finish_binding(pod.uid)
            if info is not None:
                self.metrics.sli_child(str(min(info.attempts, 15))).observe(
                    self._clock.now() - info.first_seen
                )
                self.queue.bound(info)
            with self._bound_lock:
                self.bound_count += 1
            self.reporter.scheduled(pod, binding.node, event=self.process_binder is None)
            first = self.timeline.bound()
            if first is not None:
                log.info("first binding", extra={FIELDS: {"pod": pod.key, **first}})
            return
        if self.cache.forget(pod.uid):
            # the room it held is free again: pods it kept out may fit now (as
            # kube-scheduler moves them, with AssignedPodDelete, on a failed binding)
            self._event(ClusterEvent.ASSIGNED_POD_DELETE, pod, None)
        if result is BindResult.FINAL:
            # 409/404: bound already, deleted, or its node is gone. It backs off like
            # any failure (kube-scheduler's handleSchedulingFailure): the watch removes
            # a pod bound or deleted meanwhile from the queue, and one whose node went
            # away is placed again
            log.info("binding %s to %s refused: %s", pod.key, binding.node, why)
            if info is not None:
                self.queue.failed(info)
            return
        log.warning("binding %s to %s failed, backing off: %s", pod.key, binding.node, why)
        if info is not None and self.queue.failed(info):
            self.reporter.unschedulable(pod, f"Binding rejected: {why}", error=True)

    # --- loops --------------------------------------------------------------------------
    def _scheduling_loop(self) -> None:
        with self.cache.cycle():
            pass  # the snapshot built while the first pending pods are on their way
        while not self._stopping.is_set():
            self._last_beat = self._clock.now()
            if not self.may_schedule():
                # a standby keeps its queue as is: when it leads, nothing is backing off
                self._stopping.wait(0.2)
                continue
            self.schedule_next(timeout=1.0)

    def schedule_next(self, timeout: float | None) -> bool:
        """Pop the next pod (waiting up to ``timeout``) and run its scheduling cycle:
        the scheduling loop's step. False if there was none to schedule."""
        info = self.queue.pop(timeout=0)
        if info is None:
            if self.process_binder is not None:
                self.process_binder.flush()  # what it batched goes before the loop waits
            info = self.queue.pop(timeout=timeout)
        if info is None or self._stopping.is_set():
            return False
        if not self.may_schedule():
            self.queue.failed(info)
            return True
        try:
            self.schedule_one(info)
        except Exception:  # one pod must not stop the scheduler
            log.exception("scheduling %s failed", info.pod.key)
            self.queue.failed(info)
        if self.process_binder is not None:
            self.process_binder.flush(due_only=True)
        return True

    def _flush_loop(self) -> None:
        while not self._stopping.wait(FLUSH_INTERVAL):
            self.flush_once()

    def flush_once(self) -> None:
        """The background loop's step (every :data:`FLUSH_INTERVAL`): expired backoffs
        and stale unschedulable pods back to activeQ, expired assumptions dropped,
        aggregated events written, plugins' aging node data refreshed."""
        self.queue.flush()
        for expired in self.cache.expire_assumed():
            self._event(ClusterEvent.ASSIGNED_POD_DELETE, expired, None)
        self._settle_left()
        self.reporter.retry_failed()
        self.recorder.flush()
        if self._clock.now() - self._last_refresh >= STATIC_REFRESH_INTERVAL:
            self.cache.refresh_static()
            self._last_refresh = self._clock.now()

    def _settle_left(self) -> None:
        """The pods that left the pending watch a flush interval ago or more and are
        not seen bound yet: bound (the bound pods' watch shows it later), or deleted.
        The two watches are not ordered with each other, so the API server says which.
        A deleted one's assumption is dropped (deleted while its binding was in flight,
        or bound and deleted while the bound pods' watch was re-listing: as
        kube-scheduler's cache removes an assumed pod its informer reports deleted), and
        the reporter forgets it (a failed status patch kept for it must not reach a new
        pod of the same name)."""
        settled = self._clock.now() - FLUSH_INTERVAL
        with self._left_lock:
            count = 0
            for *_, left_at in self._left_pending:
                if left_at > settled:
                    break
                count += 1
            due, self._left_pending = self._left_pending[:count], self._left_pending[count:]
        unknown = []
        lookups = 0
        for uid, key, left_at in due:
            held = self.assigned_pods.get(key)
            if self.cache.is_bound(uid) or (held or {}).get("metadata", {}).get("uid") == uid:
                continue
            if lookups >= SETTLE_LOOKUPS:
                # a bound pods' watch lagging behind a burst of bindings: most of these
                # will show there by the next flush, without asking
                unknown.append((uid, key, left_at))
                continue
            lookups += 1
            try:
                listed = self._kube.list_pods(
                    field_selector=f"metadata.namespace={key[0]},metadata.name={key[1]}"
                ).items
            except errors.KubeAPIError:
                unknown.append((uid, key, left_at))  # asked again at the next flush
                continue
            current = next((o for o in listed if (o.get("metadata") or {}).get("uid") == uid), None)
            if current is not None and (current.get("spec") or {}).get("nodeName"):
                # bound: the bound pods' watch will show it, unless it re-lists after the
                # pod is gone (then only asking again tells): kept until one of them does
                unknown.append((uid, key, self._clock.now()))
                continue
            assumed = self.cache.remove_bound(uid)
            if assumed is not None:
                self._event(ClusterEvent.ASSIGNED_POD_DELETE, assumed, None)
            self.reporter.forget(uid)
        if unknown:
            with self._left_lock:
                self._left_pending = sorted(
                    [*unknown, *self._left_pending], key=lambda entry: entry[2]
                )

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # --- lifecycle ----------------------------------------------------------------------
    def start(
        self,
        *,
        sync_timeout: float | None = None,
        stop: threading.Event | None = None,
        freeze_heap: bool = False,
    ) -> bool:
        """Start informers and the reporter, wait for what a cycle reads to sync, then
        lead (or stand by). Returns False if the informers did not sync in time, or
        ``stop`` was set meanwhile (SIGTERM while the API is unreachable).

        A cycle needs every node and every bound pod (else it would place a pod on room
        already taken), not every pending pod: the pending pods' list opens once the
        rest is in and the loop starts beside it, taking pods as they are listed, as it
        would had they been created over that time. (kube-scheduler waits for its one
        pod informer, which lists both.) One thing a pending pod can hold is room on a
        node: a nomination. If any pending pod of this scheduler holds one (a restart
        during a preemption), the loop waits for the whole pending list, so every
        nomination is counted from its first cycle.

        ``freeze_heap``: the informers list with the collector off and what they listed
        is then taken out of its reach (:func:`nodeagent.base.heap.building`), for a
        process that is the scheduler (not a test run, which starts many)."""
        if self.process_binder is not None:
            self.process_binder.start()  # its start-up overlaps the informers' lists
        self.reporter.start()
        self.timeline.starting_informers()
        building = contextlib.ExitStack()
        if freeze_heap:
            building.enter_context(heap.building())  # closed once the pending pods are in
        try:
            # the longest lists first (each informer's first request opens a connection
            # of its own): all must sync before the first cycle, whatever their order
            for inf in (self.nodes, self.assigned_pods, self.budgets):
                inf.start()
            self.storage.start()  # the volume plugins' objects
            self.resources.start()  # DynamicResources' claims, slices and classes
            synced = self._wait_synced(lambda: self.cache_synced, sync_timeout, stop)
            if synced:
                self.pending_pods.start()  # its first page is on its way meanwhile
                every_pending = self._nominations_pending()
                if every_pending:
                    log.info("pending pods hold nominations: listing them all first")
                    synced = self._wait_synced(lambda: self.synced, sync_timeout, stop)
        except BaseException:
            building.close()
            raise
        if not synced:
            building.close()
            return False
        self.queue.recheck_gated(ClusterEvent.RESOURCE_CLAIM_ADD)  # see _resource_event
        cache_informers = (self.nodes, self.budgets, self.assigned_pods, *self.storage.informers)
        timeline = self.timeline.synced((*cache_informers, *self.resources.informers))
        log.info(
            "cache synced",
            extra={FIELDS: {"nodes": len(self.nodes), "pods": len(self.assigned_pods), **timeline}},
        )
        self._spawn(lambda: self._pending_listed(building), "pending-listed")
        self._spawn(self._flush_loop, "queue-flush")
        self._spawn(self._scheduling_loop, "scheduling")
        if self.elector is not None:
            self.elector.start()
        return True

    def _nominations_pending(self) -> bool:
        """Whether a pending pod of this scheduler holds a nomination (True when the API
        server cannot say: waiting for the whole list is the safe side)."""
        try:
            listed = self._kube.list_pods(field_selector=NOMINATED_POD_SELECTOR)
        except errors.KubeAPIError as exc:
            log.warning("cannot list the nominated pods (%s): listing every pending pod first", exc)
            return True
        return any(not self._others_pending(obj) for obj in listed.items)

    def _pending_listed(self, building: contextlib.ExitStack) -> None:
        """Wait for the pending pods' first list, then log "informers synced" and end
        ``building`` (the heap listed so far frozen, the collector back)."""
        try:
            while not self.pending_pods.wait_synced(0.1):
                if self._stopping.is_set():
                    return
            timeline = self.timeline.synced((self.pending_pods,))
            log.info(
                "informers synced",
                extra={
                    FIELDS: {
                        "nodes": len(self.nodes),
                        "pods": len(self.assigned_pods) + len(self.pending_pods),
                        **timeline,
                    }
                },
            )
        finally:
            building.close()

    def _wait_synced(
        self, synced: Callable[[], bool], timeout: float | None, stop: threading.Event | None
    ) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not synced():
            if stop is not None and stop.is_set():
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def wait(self, stop: threading.Event) -> int:
        """Block until ``stop`` or a lost lease; 0, or 1 when the lease was lost."""
        while not stop.wait(0.2):
            if self._lost.is_set():
                return 1
        return 0

    def stop(self, *, bind_timeout: float = SHUTDOWN_BIND_TIMEOUT) -> None:
        """Stop popping, finish bindings in flight (bounded), release the lease, stop."""
        self._stopping.set()
        self.queue.close()
        for thread in self._threads:
            thread.join(5)
        if self.process_binder is not None:
            self.process_binder.flush()
        if not self.binder.drain(bind_timeout):
            log.warning("%d binding(s) still in flight at shutdown", self.binder.in_flight)
        self.binder.shutdown()
        if self.process_binder is not None:
            self.process_binder.close(bind_timeout)
        if self.elector is not None:
            self.elector.stop(release=not self._lost.is_set())
        for inf in (self.pending_pods, self.assigned_pods, self.nodes, self.budgets):
            inf.stop(2.0)
        self.storage.stop(2.0)
        self.resources.stop(2.0)
        self.reporter.stop(2.0)
        with contextlib.suppress(errors.KubeAPIError):
            self.recorder.flush()

    # --- probes -------------------------------------------------------------------------
    @property
    def cache_synced(self) -> bool:
        """What a scheduling cycle reads is listed: every informer's first list is in
        but the pending pods'."""
        return (self.storage.synced and self.resources.synced) and all(
            i.synced for i in (self.assigned_pods, self.nodes, self.budgets)
        )

    @property
    def synced(self) -> bool:
        """Every informer's first list is in, the pending pods' too."""
        return self.cache_synced and self.pending_pods.synced

    def liveness(self) -> ProbeResult:
        silence = self._clock.now() - self._last_beat
        if self._threads and silence > LIVENESS_TIMEOUT:
            return ProbeResult(False, f"scheduling loop silent for {silence:.0f} s")
        return ProbeResult(True, "scheduling loop turning")

    def readiness(self) -> ProbeResult:
        if not self.synced:
            return ProbeResult(False, "informers not synced yet")
        if self.elector is None:
            return ProbeResult(True, "scheduling")
        if self.elector.is_leader():
            return ProbeResult(True, "leading")
        if self._lost.is_set():
            return ProbeResult(False, "lost the lease")
        if not self.elector.healthy:
            return ProbeResult(False, f"standby, cannot reach the lease: {self.elector.last_error}")
        return ProbeResult(True, f"standby (leader: {self.elector.holder or 'none'})")

    def pending(self) -> Mapping[str, int]:
        return self.queue.pending()
