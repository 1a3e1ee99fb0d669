"""The agent's loop: wait for a reason to look, look, decide, report, hand over.

One loop per node, on one thread::

    wakes = triggers.wait(schedule.timeout(now))      # a kernel notification, or a poll due
    observations = collector.collect(now, groups)     # fresh signals
    decision, state = engine.evaluate(policy, state, observations, pods, now)
    reclaim through the CRI, re-read, re-check        # only before a disk eviction
    actuation.submit(decision)                        # applied by other threads
    log + metrics + health + watchdog                 # one line when the decision changes
    re-arm the memcg thresholds                       # they move with the page cache
    arm the adaptive memory polls                     # where no memcg threshold is armed

**What is read when.** A cycle reads what its cause is about. The node poll
(``pollInterval``, 1 s) and every kernel trigger (a memcg threshold, PSI, memory.events,
or the adaptive memory poll seeing a memory signal cross a threshold: cgroup v2, or v1
without eventfd thresholds) read every node-level signal and the per-pod cgroups
(working set, tasks: about 2 ms at 250 pods, for the ranking a memory eviction needs).
The filesystem poll (``filesystemPollInterval``, 500 ms: the kernel has no notification
for free space) reads the filesystems' statvfs alone and carries the other signals over
from their last read, each with the time it was read
(:attr:`~nodeagent.model.NodeObservations.sampled_at`): the engine acts on a signal only
when it was sampled after the one it last judged, as the kubelet compares each signal's
own time, so a carried-over value is never acted on twice. On a slow kernel the full
read is most of an idle agent's cost, and a cycle is time the adaptive memory poll
cannot read in. Per-pod disk usage is a directory walk left to its own thread
(:class:`StorageRefresher`) on its own interval.

**Nothing here blocks on the API.** Pods come from a cache kept by another thread, and
decisions go to :class:`~nodeagent.agent.actuation.Actuation`, which applies the latest
one in its own threads (evictions in one that waits on nothing else), handed over before
the cycle logs or counts anything; an API outage leaves the loop deciding at full speed. The one
wait is node-level reclaim before a disk eviction (:mod:`nodeagent.reclaim.cycle`):
whether to evict depends on what it freed, so the loop waits for the container
runtime, each call under a deadline.

The loop reads no clock but the one it is given, so tests run it in virtual time with
:class:`~nodeagent.base.clock.FakeClock` and :class:`~tests.doubles.triggers.FakeTriggers`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from nodeagent.actuators.node_status import SignalHeadroom
from nodeagent.agent import adoption, report
from nodeagent.agent.actuation import Actuation, ActuationJob
from nodeagent.agent.metrics import AgentMetrics
from nodeagent.agent.pods import PodSource
from nodeagent.base.clock import Clock
from nodeagent.base.logs import FIELDS
from nodeagent.eviction import engine, page_cache
from nodeagent.eviction import thresholds as thr
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.model import Decision, NodeObservations, Signal
from nodeagent.reclaim.cycle import reclaim_before_evicting
from nodeagent.reclaim.reclaimer import NodeReclaimer
from nodeagent.serving.health import Health
from nodeagent.serving.sdnotify import SystemdNotifier
from nodeagent.signals.cgroups import CgroupPaths, CgroupVersion
from nodeagent.signals.collector import SignalGroup
from nodeagent.triggers import setup
from nodeagent.triggers.api import Mechanism, MechanismStatus, MemoryProbe, Triggers, Wake
from nodeagent.triggers.schedule import Poll, PollSchedule
from nodeagent.triggers.settings import TriggerSettings

log = logging.getLogger("nodeagent.agent")
decisions_log = logging.getLogger("nodeagent.decision")

NODE_GROUPS: frozenset[SignalGroup] = frozenset(
    {SignalGroup.MEMORY, SignalGroup.PSI, SignalGroup.PIDS, SignalGroup.FILESYSTEMS}
)
"""Every node-level signal a threshold can be set on."""

POD_GROUPS: frozenset[SignalGroup] = NODE_GROUPS | {SignalGroup.PODS}
"""Read with the node poll and on kernel notifications (per-pod working sets)."""

FILESYSTEM_GROUPS: frozenset[SignalGroup] = frozenset({SignalGroup.FILESYSTEMS})
"""Read by the filesystem poll alone: statvfs, the one signal no kernel notifies."""

PROC_PRESSURE_DIR = "/proc/pressure"
"""Where system PSI triggers are armed: this process's own /proc, which is system-wide
and writable, unlike a read-only host /proc mounted into a container."""

RECLAIM_COMPONENT = "node-reclaim"
"""The degraded component an unreachable container runtime shows as: reclaim alone
suffers (evictions go on without it)."""

_MEMORY_SCOPES: Mapping[str, Signal] = {
    setup.NODE_SCOPE: Signal.MEMORY_AVAILABLE,
    setup.KUBEPODS_SCOPE: Signal.ALLOCATABLE_MEMORY_AVAILABLE,
}
"""Which signal's thresholds are armed as usage thresholds on which cgroup."""

_SIGNAL_NAMES = frozenset(Signal)
"""Degraded sources that are signals (exported with the signal itself): a set, as this
is asked of every source every cycle."""


class Collector(Protocol):
    """What the loop needs of :class:`~nodeagent.signals.collector.SignalCollector`."""

    def collect(self, now: float, groups: Collection[SignalGroup]) -> NodeObservations: ...

    def memory_probe(self, signal: Signal) -> MemoryProbe | None: ...

    @property
    def cgroups(self) -> CgroupPaths: ...

    def degraded(self) -> Mapping[str, str]: ...


def read_inactive_file(cgroup_dir: str) -> int | None:
    """A cgroup v1 memcg's ``total_inactive_file`` (its reclaimable page cache, children
    included), or None when unreadable."""
    try:
        with open(os.path.join(cgroup_dir, "memory.stat"), "rb") as file:
            stat = file.read()
    except OSError:
        return None
    start = stat.find(b"\ntotal_inactive_file ")
    if start < 0:
        return None
    start += len(b"\ntotal_inactive_file ")
    end = stat.find(b"\n", start)
    try:
        return int(stat[start:] if end < 0 else stat[start:end])
    except ValueError:
        return None


def trigger_paths(cgroups: CgroupPaths, proc_pressure_dir: str) -> setup.TriggerPaths:
    """Where the kernel triggers go, from the collector's resolved cgroups."""
    memory = {
        setup.NODE_SCOPE: cgroups.node_memory_dir,
        setup.KUBEPODS_SCOPE: cgroups.kubepods_memory_dir,
    }
    pressure = {
        setup.NODE_SCOPE: cgroups.node_unified_dir,
        setup.KUBEPODS_SCOPE: cgroups.kubepods_unified_dir,
    }
    return setup.TriggerPaths(
        cgroup_version=2 if cgroups.version is CgroupVersion.V2 else 1,
        proc_pressure_dir=proc_pressure_dir,
        memory_cgroup_dirs={k: v for k, v in memory.items() if v is not None},
        pressure_cgroup_dirs={
            k: v for k, v in pressure.items() if v is not None and os.path.isdir(v)
        },
    )


def headroom_of(
    observations: NodeObservations, thresholds: Mapping[Signal, int]
) -> dict[Signal, SignalHeadroom]:
    """Per signal with a threshold, what the pressure annotation publishes."""
    headroom = {}
    for signal, threshold in thresholds.items():
        value = observations.value(signal)
        if value is not None:
            headroom[signal] = SignalHeadroom(value.available, value.capacity, threshold)
    return headroom


def _cache_counted(observations: NodeObservations, signal: Signal) -> bool:
    """Whether ``signal`` counts page cache that the kernel reclaims while usage stays
    flat at the limit (``activePageCache: reclaimable``): a usage threshold cannot see
    that signal fall, as the hog's memory replaces the cache, so it is polled too."""
    return observations.active_file_counted and observations.active_file.get(signal, 0) > 0


def wake_label(wakes: Collection[Wake], due: Collection[Poll]) -> str:
    """What caused a cycle: the first kernel trigger's name, else the poll(s) due."""
    for wake in wakes:
        if wake.mechanism is not Mechanism.WAKE:
            return f"{wake.mechanism}:{wake.trigger}"
    return "poll:" + "+".join(sorted(str(p) for p in due)) if due else "wake"


@dataclass(frozen=True, slots=True)
class CycleResult:
    decision: Decision
    observations: NodeObservations
    trigger: str
    logged: bool


class AgentLoop:
    """The loop; build it with everything it uses (see :mod:`nodeagent.agent.runtime`)."""

    def __init__(
        self,
        *,
        policy: EvictionPolicy,
        collector: Collector,
        triggers: Triggers,
        trigger_settings: TriggerSettings,
        pods: PodSource,
        actuation: Actuation,
        clock: Clock,
        metrics: AgentMetrics,
        health: Health,
        notifier: SystemdNotifier,
        decision_log_interval: float = 10.0,
        proc_pressure_dir: str = PROC_PRESSURE_DIR,
        reclaimer: NodeReclaimer | None = None,
    ) -> None:
        self.policy = policy
        self.reclaimer = reclaimer
        self._last_reclaim_enough = False
        """Whether the last reclaim ended the pressure: then no pod is terminating and
        ``nodeReclaimInterval`` does not hold the next one back."""
        self._collector = collector
        self._triggers = triggers
        self._trigger_settings = trigger_settings
        self._pods = pods
        self._actuation = actuation
        self._clock = clock
        self._metrics = metrics
        self._health = health
        self._notifier = notifier
        self._log_interval = decision_log_interval
        self._proc_pressure_dir = proc_pressure_dir
        self.state = engine.EngineState()
        self.schedule = PollSchedule.from_settings(trigger_settings)
        self._paths: CgroupPaths | None = None
        self._trigger_paths: setup.TriggerPaths | None = None
        self._degraded: dict[str, str | None] = {}
        self._unarmed: dict[str, MechanismStatus] = {}
        """Static triggers that had nothing to arm on (the triggers object has no status
        for them)."""
        self._unheard: set[str] = set()
        """Memory scopes whose memcg threshold woke a cycle that found no threshold of
        theirs met: watched by the memory poll until one is met or available is back
        above them all (issue 22: the kernel stays silent after such a wake)."""
        self._last_shape: report.DecisionShape | None = None
        self._last_logged = float("-inf")
        self._ready = False
        self.cycles = 0
        self.last: CycleResult | None = None

    # --- running ---------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Cycle until ``stop`` is set; whoever sets it also calls ``triggers.wake()`` so
        a wait in progress returns at once."""
        while not stop.is_set():
            self.tick()

    def tick(self) -> CycleResult | None:
        """Wait for the next reason to look (a trigger, or a poll due), then cycle."""
        wakes = self._triggers.wait(self.schedule.timeout(self._clock.now()))
        return self.step(wakes)

    def step(self, wakes: Collection[Wake] = ()) -> CycleResult | None:
        """One cycle, if a poll is due or a kernel trigger fired; None otherwise (a bare
        :meth:`Triggers.wake`, or a trigger that fired before its poll was due)."""
        now = self._clock.now()
        due = self.schedule.due(now)
        kernel_wakes = [w for w in wakes if w.mechanism is not Mechanism.WAKE]
        if not due and not kernel_wakes:
            return None
        read_pods = Poll.NODE in due or bool(kernel_wakes)
        self._follow_cgroups()
        observations = self._collect(now, POD_GROUPS if read_pods else FILESYSTEM_GROUPS)
        collected = self._clock.now()
        self._observe_detection(kernel_wakes, due, collected)
        self.schedule = self.schedule.ran(
            {Poll.FILESYSTEMS, Poll.NODE} if read_pods else {Poll.FILESYSTEMS}, now
        )

        adopted = self._actuation.take_adopted()
        if adopted is not None:
            self.state = adoption.seed_engine_state(
                self.state,
                adopted,
                condition_types=self.policy.condition_types,
                taint_keys=self.policy.taint_keys,
                now=now,
            )
        view = self._pods.view()
        decision, self.state = engine.evaluate(
            self.policy, self.state, observations, view.pods, now
        )
        decided = self._clock.now()
        decision, observations = self._reclaim_node(decision, observations)
        thresholds = self.policy.enforced_thresholds(observations)
        # Handed over before anything is logged or counted: a log line waits on its
        # handler's lock and on the pipe behind it, and an eviction must not.
        self._actuation.submit(
            ActuationJob(decision, headroom_of(observations, thresholds), view, now)
        )
        self._metrics.observe_decision_latency(decided - collected)
        self._metrics.observe_collection(observations, thresholds)
        trigger = wake_label(kernel_wakes, due)
        logged = self._log_decision(decision, trigger, now, decided)
        if read_pods:
            # The memory thresholds move with what was just read; a filesystem-only
            # cycle read no memory and leaves them where they are.
            self._follow_unheard(kernel_wakes, observations)
            self._rearm(observations)
            self._arm_memory_polls(observations, read_at=now)
        self._update_degraded()

        finished = self._clock.now()
        self._metrics.observe_decision(decision, cycle_seconds=finished - now)
        self._health.beat(finished)
        self._notifier.watchdog(finished)
        if not self._ready:
            self._ready = True
            self._notifier.ready("evaluating")
        self.cycles += 1
        self.last = CycleResult(decision, observations, trigger, logged)
        return self.last

    def _collect(self, now: float, groups: Collection[SignalGroup]) -> NodeObservations:
        """A collection as the policy counts the active page cache, so the kernel
        triggers, the metrics and the annotation see what the engine decides on."""
        observations = self._collector.collect(now, groups)
        return page_cache.view(observations, self.policy.active_page_cache)

    # --- node-level reclaim -----------------------------------------------------------------
    def _reclaim_node(
        self, decision: Decision, observations: NodeObservations
    ) -> tuple[Decision, NodeObservations]:
        """Before a disk eviction, free what the node can and re-check
        (:mod:`nodeagent.reclaim.cycle`); the re-read observations replace the cycle's."""
        reclaimer = self.reclaimer
        if reclaimer is None or not decision.node_reclaim:
            return decision, observations
        if not self._last_reclaim_enough and not reclaimer.due(self._clock.now()):
            return decision, observations  # a pod evicted after it may still be terminating
        decision, observations = reclaim_before_evicting(
            reclaimer,
            self.policy,
            decision,
            observations,
            lambda: self._collect(self._clock.now(), {SignalGroup.FILESYSTEMS}),
        )
        if decision.node_reclaim_result is not None:
            self._metrics.record_node_reclaim(decision.node_reclaim_result)
            self._last_reclaim_enough = decision.node_reclaim_result.enough
        return decision, observations

    # --- reporting -------------------------------------------------------------------------
    def _observe_detection(
        self, kernel_wakes: Collection[Wake], due: Collection[Poll], collected: float
    ) -> None:
        for wake in kernel_wakes:
            self._metrics.observe_detection_latency(
                max(0.0, collected - wake.time), str(wake.mechanism)
            )
        if due and not kernel_wakes:
            since = min(self.schedule.next_due(p) for p in due)
            if since > float("-inf"):
                self._metrics.observe_detection_latency(max(0.0, collected - since), "poll")

    def _log_decision(self, decision: Decision, trigger: str, now: float, decided: float) -> bool:
        shape = report.shape_of(decision)
        changed = shape != self._last_shape
        due = not shape.quiet and now - self._last_logged >= self._log_interval
        self._last_shape = shape
        if not changed and not due:
            return False
        self._last_logged = now
        decisions_log.info(
            report.decision_message(decision),
            extra={FIELDS: report.decision_fields(decision, trigger=trigger, decided_at=decided)},
        )
        return True

    def _update_degraded(self) -> None:
        current: dict[str, str | None] = {
            source: reason
            for source, reason in self._collector.degraded().items()
            if source not in _SIGNAL_NAMES
        }
        statuses = {**self._unarmed, **self._triggers.status()}
        current.update(setup.degraded_components(statuses))
        if self.reclaimer is not None and self.reclaimer.unreachable is not None:
            current[RECLAIM_COMPONENT] = self.reclaimer.unreachable
        for component in self._degraded.keys() - current.keys():
            self._metrics.set_degraded(component, None)
        for component, reason in current.items():
            if self._degraded.get(component, "") != reason:
                self._metrics.set_degraded(component, reason)
        self._degraded = current

    # --- kernel triggers -------------------------------------------------------------------
    def _follow_cgroups(self) -> None:
        """Arm the static triggers (PSI, memory.events) for the collector's cgroups, again
        whenever they change (kubepods created after the agent started)."""
        paths = self._collector.cgroups
        if paths == self._paths:
            return
        self._paths = paths
        self._trigger_paths = trigger_paths(paths, self._proc_pressure_dir)
        statuses = setup.arm_static_triggers(
            self._triggers, self._trigger_settings, self._trigger_paths
        )
        live = self._triggers.status()
        self._unarmed = {name: s for name, s in statuses.items() if name not in live}
        for name, status in statuses.items():
            log.debug(
                "trigger %s: %s",
                name,
                status.state,
                extra={FIELDS: {"path": status.path, "detail": status.detail}},
            )

    def _rearm(self, observations: NodeObservations) -> None:
        """Keep one usage threshold per memory threshold on the node and kubepods memcgs
        (cgroup v1), placed from this collection.

        The kernel watches usage; the threshold is on available. Available falls below
        the threshold one byte past the usage ``capacity - threshold + inactive_file``
        (the kubelet's formula; :mod:`~nodeagent.triggers.memcg`), so the usage handed
        to the placement rule is derived from this collection's available rather than
        read again: a second read of a usage that moves fast (a process allocating or
        freeing hundreds of MiB a second) would place the threshold off by whatever
        moved in between. The same usage tells the triggers whether the armed threshold
        is spent (usage past it, the threshold not met) and whether usage passed the
        new one while it was being registered. The page cache's size, read from
        ``memory.stat``, moves slowly."""
        paths = self._trigger_paths
        if paths is None or paths.cgroup_version != 1:
            return
        layout_thresholds = self.policy.thresholds_for(observations.fs_layout)
        for scope, signal in _MEMORY_SCOPES.items():
            directory = paths.memory_cgroup_dirs.get(scope)
            value = observations.value(signal)
            wanted = [t for t in layout_thresholds if t.signal is signal]
            inactive = read_inactive_file(directory) if directory and value and wanted else None
            if inactive is None or value is None:
                setup.rearm_memory_thresholds(
                    self._triggers,
                    self._trigger_settings,
                    paths,
                    scope=scope,
                    usage=0,
                    available=0,
                    thresholds={},
                )
                continue
            if observations.active_file_counted:
                # the page cache counted as available is as much reclaimable as inactive
                inactive += observations.active_file.get(signal, 0)
            setup.rearm_memory_thresholds(
                self._triggers,
                self._trigger_settings,
                paths,
                scope=scope,
                usage=value.capacity - value.available + inactive,
                available=value.available,
                thresholds={
                    f"{t.describe()} {'hard' if t.hard else 'soft'}": thr.threshold_quantity(
                        t, value.capacity
                    )
                    for t in wanted
                },
            )

    def _follow_unheard(
        self, kernel_wakes: Collection[Wake], observations: NodeObservations
    ) -> None:
        """Mark a scope whose memcg threshold woke this cycle with none of its thresholds
        met; unmark one whose signal now meets a threshold (the engine acts) or is back
        above them all by the hysteresis (usage fell back below the armed value)."""
        woken = {
            scope
            for scope in _MEMORY_SCOPES
            for wake in kernel_wakes
            if wake.mechanism is Mechanism.MEMCG_THRESHOLD
            and wake.trigger.startswith(setup.memory_threshold_name(scope, ""))
        }
        layout_thresholds = self.policy.thresholds_for(observations.fs_layout)
        margin = self._trigger_settings.memory_threshold_hysteresis
        for scope, signal in _MEMORY_SCOPES.items():
            value = observations.value(signal)
            if value is None:
                self._unheard.discard(scope)
                continue
            bars = [
                thr.threshold_quantity(t, value.capacity)
                for t in layout_thresholds
                if t.signal is signal
            ]
            met = any(value.available < bar for bar in bars)
            near = bool(bars) and not met and value.available < max(bars) + margin
            if near and scope in woken:
                self._unheard.add(scope)
            elif not near:
                self._unheard.discard(scope)

    def _arm_memory_polls(self, observations: NodeObservations, read_at: float) -> None:
        """Keep the adaptive memory poll armed on each memory signal the kernel does not
        notify at (:func:`setup.arm_memory_poll`): its thresholds resolved against this
        collection's capacity, its probe from the collector, and this collection's value
        as its latest read, taken at ``read_at`` (the next read is due counting from
        then, not from the end of the cycle)."""
        layout_thresholds = self.policy.thresholds_for(observations.fs_layout)
        for scope, signal in _MEMORY_SCOPES.items():
            value = observations.value(signal)
            resolved = (
                [
                    thr.threshold_quantity(t, value.capacity)
                    for t in layout_thresholds
                    if t.signal is signal
                ]
                if value is not None
                else []
            )
            setup.arm_memory_poll(
                self._triggers,
                self._trigger_settings,
                scope=scope,
                source=f"{signal}: {value.source}" if value is not None else str(signal),
                probe=self._collector.memory_probe(signal),
                thresholds=resolved,
                observed=None if value is None else value.available,
                observed_at=read_at,
                unheard=scope in self._unheard or _cache_counted(observations, signal),
            )
