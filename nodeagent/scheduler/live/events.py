"""Cluster events, and which rejected pods each one may help (QueueingHints, GA in 1.34).

A pod rejected by plugins waits in unschedulablePods. An event moves it only if one of
its *rejecting* plugins registered for the event and that plugin's hint function,
asked about this pod and the event's objects, answers Queue
(``PriorityQueue.isPodWorthRequeuing`` in ``pkg/scheduler/backend/queue``); every
other event leaves it parked, so a busy cluster does not retry a pod for a change that
cannot help it. The registrations and hints live with the plugins
(``events_to_register``, :class:`~nodeagent.scheduler.framework.EnqueueExtensions`);
:class:`QueueingHints` gathers them per profile.

:func:`node_events` turns an observed Node change into events; it is pure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from nodeagent.k8s.pressure import PRESSURE_ANNOTATION
from nodeagent.scheduler import api
from nodeagent.scheduler.framework import (
    ClusterEvent,
    Framework,
    HintFn,
    QueueingHint,
)
from nodeagent.scheduler.plugins.node_declared_features import declared_features

__all__ = ["REGISTRATIONS", "ClusterEvent", "QueueingHints", "node_events"]

log = logging.getLogger(__name__)

E = ClusterEvent

REGISTRATIONS: Mapping[str, frozenset[ClusterEvent]] = {}
"""Events of plugins that have no ``events_to_register`` yet, without hints (a
registered event always moves the pod). A plugin in neither hears every event."""

WILDCARDS = frozenset({E.UNSCHEDULABLE_TIMEOUT, E.FORCE_ACTIVATE})
"""Events that move a pod whatever its plugins say (``ClusterEventIsWildCard``)."""

Observe = Callable[[str, str, str, float], None]
"""``(plugin, event, hint, seconds)``: one hint function's run, for
``scheduler_queueing_hint_execution_duration_seconds``."""


class QueueingHints:
    """Every profile's registrations: for each event, the plugins that registered for
    it and their hint functions (``queueingHintMap``)."""

    def __init__(
        self,
        frameworks: Mapping[str, Framework],
        *,
        observe: Observe | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._observe = observe
        self._timer = timer
        self._map: dict[str, dict[ClusterEvent, list[tuple[str, HintFn | None]]]] = {}
        for profile, fw in frameworks.items():
            per_event: dict[ClusterEvent, list[tuple[str, HintFn | None]]] = {}
            for plugin, registered in fw.queueing_hints().items():
                if registered is None:
                    legacy = REGISTRATIONS.get(plugin)
                    events = frozenset(ClusterEvent) if legacy is None else legacy
                    for event in events:
                        per_event.setdefault(event, []).append((plugin, None))
                    continue
                for entry in registered:
                    for event in entry.events:
                        per_event.setdefault(event, []).append((plugin, entry.hint))
            self._map[profile] = per_event
        self._interesting = frozenset(e for m in self._map.values() for e in m) | WILDCARDS
        self._plugins_for: dict[ClusterEvent, frozenset[str]] = {
            event: frozenset(plugin for m in self._map.values() for plugin, _ in m.get(event, ()))
            for event in ClusterEvent
        }

    def interested(self, event: ClusterEvent) -> bool:
        """Whether any plugin registered for ``event`` (``isEventOfInterest``)."""
        return event in self._interesting

    def plugins_for(self, event: ClusterEvent) -> frozenset[str] | None:
        """The plugins of any profile registered for ``event``; None: a wildcard event,
        which concerns every pod."""
        return None if event in WILDCARDS else self._plugins_for[event]

    def registered(self, profile: str, event: ClusterEvent) -> frozenset[str]:
        """The plugins of ``profile`` registered for ``event``."""
        return frozenset(plugin for plugin, _ in self._map.get(profile, {}).get(event, ()))

    def worth_requeuing(
        self,
        pod: api.Pod,
        rejectors: Iterable[str],
        event: ClusterEvent,
        old: object = None,
        new: object = None,
    ) -> bool:
        """Whether ``event`` may make ``pod``, rejected by ``rejectors``, schedulable:
        a wildcard event or no known rejector, yes; else whether a rejector registered
        for the event answers Queue (no hint function: Queue; an exception: Queue)."""
        if event in WILDCARDS:
            return True
        plugins = rejectors if isinstance(rejectors, frozenset) else frozenset(rejectors)
        if not plugins:
            return True
        per_event = self._map.get(pod.scheduler_name)
        if per_event is None:
            return True  # not our profile: nothing says which event matters
        for plugin, hint_fn in per_event.get(event, ()):
            if plugin not in plugins:
                continue
            if hint_fn is None:
                return True
            if self._ask(plugin, hint_fn, pod, event=event, old=old, new=new) is QueueingHint.QUEUE:
                return True
        return False

    def _ask(
        self,
        plugin: str,
        hint_fn: HintFn,
        pod: api.Pod,
        *,
        event: ClusterEvent,
        old: object,
        new: object,
    ) -> QueueingHint:
        started = self._timer()
        label: str
        try:
            hint = hint_fn(pod, old, new)
            label = hint.value
        except Exception:  # a hint's bug must not strand the pod: Queue, as upstream
            log.exception("queueing hint of plugin %s failed for pod %s", plugin, pod.key)
            hint, label = QueueingHint.QUEUE, "Error"
        if self._observe is not None:
            self._observe(plugin, event.value, label, self._timer() - started)
        return hint


def node_events(old: api.Node, new: api.Node) -> frozenset[ClusterEvent]:
    """What changed between two observations of a Node, as cluster events
    (``NodeSchedulingPropertiesChange``)."""
    found: set[ClusterEvent] = set()
    if old.allocatable != new.allocatable:
        found.add(E.NODE_ALLOCATABLE_CHANGE)
    if old.labels != new.labels:
        found.add(E.NODE_LABEL_CHANGE)
    if old.taints != new.taints:
        found.add(E.NODE_TAINT_CHANGE)
    if old.unschedulable != new.unschedulable:
        found.add(E.NODE_SPEC_UNSCHEDULABLE_CHANGE)
    if old.conditions != new.conditions:
        found.add(E.NODE_CONDITION_CHANGE)
    if old.annotations.get(PRESSURE_ANNOTATION) != new.annotations.get(PRESSURE_ANNOTATION):
        found.add(E.NODE_ANNOTATION_CHANGE)
    if declared_features(old) != declared_features(new):
        found.add(E.NODE_DECLARED_FEATURE_CHANGE)
    return frozenset(found)
