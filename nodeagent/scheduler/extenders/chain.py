"""The configured extenders, run at their points of the scheduling cycle with
kube-scheduler's semantics (``findNodesThatPassExtenders``, ``prioritizeNodes``,
``callExtenders``, ``HTTPExtender``).

* **Interest**: an extender with ``managedResources`` is called only for pods whose
  containers or init containers request or limit one of them; one without is called for
  every pod.
* **Filter** (after the plugins' Filter, on the feasible nodes, only while some remain):
  extenders run in order, each on what the previous one kept. Names in
  ``FailedAndUnresolvableNodes`` become ``UnschedulableAndUnresolvable`` (preemption
  skips them) and win over ``FailedNodes`` (``Unschedulable``). The kept nodes must be
  among those sent. An ``Error`` in the answer, or any failed call, fails the pod's
  attempt unless the extender is ``ignorable``, in which case it is skipped.
* **Prioritize** (with the plugins' Score, when more than one node is feasible):
  interested prioritizers are called concurrently; each returned ``score`` adds
  ``score x weight x (MaxNodeScore / 10)`` to that node's total; a failing prioritizer
  contributes nothing (kube-scheduler ignores prioritize errors).
* **Bind**: the first interested binder binds instead of the Bind plugins; if it fails
  and is ignorable, the next one (or the plugins) is tried.
* **Preempt**: see :mod:`.preempting`.

Pods and nodes go over the wire as the API objects they were read from
(``api.Pod.raw``/``api.Node.raw``), as kube-scheduler sends its cached objects.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api
from nodeagent.scheduler.extenders import wire
from nodeagent.scheduler.extenders.client import ExtenderError, HTTPExtender
from nodeagent.scheduler.extenders.settings import ExtenderConfig
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices

log = logging.getLogger(__name__)

SCORE_SCALE = api.MAX_NODE_SCORE // wire.MAX_EXTENDER_PRIORITY


def pod_object(pod: api.Pod) -> Mapping[str, Any]:
    """The Pod as the API served it (an identifying stub for a pod built in code)."""
    if pod.raw is not None:
        return pod.raw
    return {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}


def node_object(node: api.Node) -> Mapping[str, Any]:
    if node.raw is not None:
        return node.raw
    return {"metadata": {"name": node.name}}


def _resource_names(pod: api.Pod) -> set[str]:
    """Resources the pod's containers and init containers request or limit."""
    if pod.raw is None:
        return set(pod.requests)
    spec = pod.raw.get("spec") or {}
    names: set[str] = set()
    for kind in ("containers", "initContainers"):
        for container in spec.get(kind) or ():
            resources = (container or {}).get("resources") or {}
            names.update(resources.get("requests") or ())
            names.update(resources.get("limits") or ())
    return names


def is_interested(extender: HTTPExtender, pod: api.Pod) -> bool:
    return not extender.managed or not extender.managed.isdisjoint(_resource_names(pod))


@dataclass(frozen=True, slots=True)
class FilterVerdicts:
    feasible: NodeIndices
    """The nodes every interested filter extender kept, in the last one's order."""
    statuses: dict[int, api.Status] = field(default_factory=dict)
    """Nodes an extender failed, with its reason (the status names the extender)."""
    dropped: dict[int, str] = field(default_factory=dict)
    """Nodes an extender left out without a reason: node -> extender."""


@dataclass(frozen=True, slots=True)
class ExtenderScores:
    """One prioritizer's answer over the scored nodes."""

    extender: str
    weight: int
    scores: Int64s
    """The extender's 0..10 score per scored node (0 where it gave none)."""
    returned: Mask
    """Which scored nodes the extender gave a score."""

    @property
    def weighted(self) -> Int64s:
        """``score x weight x MaxNodeScore / 10``, what it adds to each node's total."""
        result: Int64s = self.scores * (self.weight * SCORE_SCALE)
        return result


class Extenders:
    """The ``extenders:`` of a configuration, ready to call."""

    def __init__(self, configs: Sequence[ExtenderConfig]) -> None:
        self.items: list[HTTPExtender] = []
        for i, config in enumerate(configs):
            try:
                self.items.append(HTTPExtender(config))
            except ExtenderError as exc:
                raise ConfigError(f"extenders[{i}].tlsConfig: {exc}", field="tlsConfig") from exc

    @property
    def has_filters(self) -> bool:
        return any(e.is_filter for e in self.items)

    @property
    def has_prioritizers(self) -> bool:
        return any(e.is_prioritizer for e in self.items)

    def close(self) -> None:
        for extender in self.items:
            extender.close()

    # --- filter ---------------------------------------------------------------------------

    def filter(self, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices) -> FilterVerdicts:
        """Run the filter extenders on ``nodes``; :class:`ExtenderError` when a
        non-ignorable extender fails."""
        statuses: dict[int, api.Status] = {}
        dropped: dict[int, str] = {}
        feasible = nodes
        for extender in self.items:
            if feasible.size == 0:
                break
            if not extender.is_filter or not is_interested(extender, pod):
                continue
            try:
                kept, failed, unresolvable = self._filter_one(extender, pod, snapshot, feasible)
            except (ExtenderError, wire.ProtocolError) as exc:
                if extender.ignorable:
                    log.info("skipping ignorable filter extender %s: %s", extender.name, exc)
                    continue
                raise ExtenderError(str(exc)) from exc
            for name, message in failed.items():
                if name in snapshot.index and name not in unresolvable:
                    status = api.unschedulable(message).with_plugin(extender.name)
                    statuses[snapshot.index[name]] = status
            for name, message in unresolvable.items():
                if name in snapshot.index:
                    status = api.unschedulable(message, unresolvable=True)
                    statuses[snapshot.index[name]] = status.with_plugin(extender.name)
            kept_set = {int(i) for i in kept}
            for node in feasible:
                index = int(node)
                if index not in kept_set and index not in statuses:
                    dropped[index] = extender.name
            feasible = kept
        return FilterVerdicts(feasible, statuses, dropped)

    def _filter_one(
        self, extender: HTTPExtender, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> tuple[NodeIndices, dict[str, str], dict[str, str]]:
        names, args = _extender_args(extender, pod, snapshot, nodes)
        where = f"filter answer from extender {extender.name}"
        answer = wire.object_at(
            extender.send(extender.config.filter_verb, args), wire.FILTER_RESULT_FIELDS, where
        )
        error = answer.get(wire.ERROR)
        if error:
            raise ExtenderError(str(error))
        kept_names: list[str] = []
        if extender.node_cache_capable and answer.get(wire.NODE_NAMES) is not None:
            kept_names = _strings(answer[wire.NODE_NAMES], f"{where}: NodeNames")
        elif answer.get(wire.NODES) is not None:
            kept_names = _node_names(answer[wire.NODES], f"{where}: Nodes")
        sent = set(names)
        for name in kept_names:
            if name not in sent:
                raise ExtenderError(
                    f"extender {extender.name!r} claims a filtered node {name!r} which is not"
                    " found in the input node list"
                )
        kept = np.array([snapshot.index[name] for name in kept_names], dtype=np.intp)
        failed = _reasons(answer.get(wire.FAILED_NODES), f"{where}: FailedNodes")
        unresolvable = _reasons(
            answer.get(wire.FAILED_AND_UNRESOLVABLE_NODES),
            f"{where}: FailedAndUnresolvableNodes",
        )
        return kept, failed, unresolvable

    # --- prioritize -----------------------------------------------------------------------

    def prioritize(
        self, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> tuple[ExtenderScores, ...]:
        """Every interested prioritizer's scores over ``nodes``; failures give nothing."""
        chosen = [e for e in self.items if e.is_prioritizer and is_interested(e, pod)]
        if not chosen:
            return ()
        if len(chosen) == 1:
            answers = [self._prioritize_one(chosen[0], pod, snapshot, nodes)]
        else:
            with ThreadPoolExecutor(max_workers=len(chosen)) as pool:
                answers = list(
                    pool.map(lambda e: self._prioritize_one(e, pod, snapshot, nodes), chosen)
                )
        return tuple(answer for answer in answers if answer is not None)

    def _prioritize_one(
        self, extender: HTTPExtender, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> ExtenderScores | None:
        names, args = _extender_args(extender, pod, snapshot, nodes)
        where = f"prioritize answer from extender {extender.name}"
        try:
            answer = extender.send(extender.config.prioritize_verb, args)
            if not isinstance(answer, list):
                raise ExtenderError(f"{where}: expected a HostPriorityList (a JSON array)")
            position = {name: i for i, name in enumerate(names)}
            scores = np.zeros(len(names), dtype=np.int64)
            returned = np.zeros(len(names), dtype=bool)
            for k, entry in enumerate(answer):
                item = wire.object_at(entry, wire.HOST_PRIORITY_FIELDS, f"{where}[{k}]")
                score = item.get(wire.SCORE, 0)
                if isinstance(score, bool) or not isinstance(score, int):
                    raise ExtenderError(f"{where}[{k}].Score: expected an integer, got {score!r}")
                i = position.get(str(item.get(wire.HOST)))
                if i is not None:
                    scores[i] = score
                    returned[i] = True
        except (ExtenderError, wire.ProtocolError) as exc:
            log.info("prioritize extender %s gave no scores: %s", extender.name, exc)
            return None
        return ExtenderScores(extender.name, extender.weight, scores, returned)

    # --- bind -----------------------------------------------------------------------------

    def bind(self, pod: api.Pod, node_name: str) -> api.Status | None:
        """The first interested binder's verdict, or ``None`` when no extender bound the
        pod (the Bind plugins do it then)."""
        for extender in self.items:
            if not extender.is_binder or not is_interested(extender, pod):
                continue
            args = {
                "PodName": pod.name,
                "PodNamespace": pod.namespace,
                "PodUID": pod.uid,
                "Node": node_name,
            }
            try:
                answer = wire.object_at(
                    extender.send(extender.config.bind_verb, args),
                    wire.BINDING_RESULT_FIELDS,
                    f"bind answer from extender {extender.name}",
                )
                if answer.get(wire.ERROR):
                    raise ExtenderError(str(answer[wire.ERROR]))
            except (ExtenderError, wire.ProtocolError) as exc:
                if extender.ignorable:
                    log.info("skipping ignorable bind extender %s: %s", extender.name, exc)
                    continue
                return api.error(f"extender {extender.name} bind: {exc}").with_plugin(extender.name)
            return api.SUCCESS
        return None


def _extender_args(
    extender: HTTPExtender, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
) -> tuple[list[str], dict[str, Any]]:
    """The nodes' names, and the ``ExtenderArgs`` for them in the extender's form."""
    names = [snapshot.names[int(i)] for i in nodes]
    if extender.node_cache_capable:
        return names, wire.extender_args(pod_object(pod), node_names=names)
    objects = [node_object(snapshot.nodes[int(i)]) for i in nodes]
    return names, wire.extender_args(pod_object(pod), nodes=objects)


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ExtenderError(f"{where}: expected a list of node names")
    return value


def _node_names(value: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        raise ExtenderError(f"{where}: expected a NodeList object")
    items = value.get("items") or []
    if not isinstance(items, list):
        raise ExtenderError(f"{where}: items: expected a list of Node objects")
    names = []
    for i, item in enumerate(items):
        name = ((item or {}).get("metadata") or {}).get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            raise ExtenderError(f"{where}: items[{i}]: a Node without metadata.name")
        names.append(name)
    return names


def _reasons(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ExtenderError(f"{where}: expected a map of node name to message")
    return {str(name): str(message) for name, message in value.items()}
