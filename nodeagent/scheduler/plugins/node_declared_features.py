"""NodeDeclaredFeatures (PreFilter, Filter; beta and on by default in v1.36): a pod
that needs a node feature is placed only on nodes that declare it
(``plugins/nodedeclaredfeatures``, KEP-5328).

A kubelet lists the features it supports in ``status.declaredFeatures``. What a pod
needs is inferred from its spec by the registry of features in
``k8s.io/component-helpers/nodedeclaredfeatures`` (``InferForPodScheduling``); in
v1.36 two features are needed for scheduling:

* ``RestartAllContainersOnContainerExits``: a container or init container with a
  ``restartPolicyRules`` entry whose action is ``RestartAllContainers``;
* ``UserNamespacesHostNetworkSupport``: ``hostNetwork: true`` with ``hostUsers: false``.

(The registry's other features only matter to updates of a running pod.) Both are read
from the objects as the API server stored them, so pods and nodes built in code
(without ``raw``) need and declare nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nodeagent.scheduler import api
from nodeagent.scheduler.framework import (
    ClusterEvent,
    CycleState,
    EventHint,
    Handle,
    PreFilterResult,
    QueueingHint,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot, Mask, NodeIndices

NAME = "NodeDeclaredFeatures"
REASON_UNSATISFIED = "node(s) didn't match Pod's required features"
_STATE_KEY = "PreFilter" + NAME

RESTART_ALL_CONTAINERS = "RestartAllContainersOnContainerExits"
USER_NAMESPACES_HOST_NETWORK = "UserNamespacesHostNetworkSupport"


def _restarts_all(containers: object) -> bool:
    if not isinstance(containers, list):
        return False
    for container in containers:
        rules = container.get("restartPolicyRules") if isinstance(container, Mapping) else None
        if isinstance(rules, list) and any(
            isinstance(rule, Mapping) and rule.get("action") == "RestartAllContainers"
            for rule in rules
        ):
            return True
    return False


def spec_requirements(spec: Mapping[str, Any]) -> frozenset[str]:
    """The node features a pod with this spec needs to be scheduled."""
    needed: set[str] = set()
    if _restarts_all(spec.get("containers")) or _restarts_all(spec.get("initContainers")):
        needed.add(RESTART_ALL_CONTAINERS)
    if spec.get("hostNetwork") is True and spec.get("hostUsers") is False:
        needed.add(USER_NAMESPACES_HOST_NETWORK)
    return frozenset(needed)


def required_features(pod: api.Pod) -> frozenset[str]:
    """The node features ``pod`` needs (none for a pod built in code)."""
    if pod.raw is None:
        return frozenset()
    spec = pod.raw.get("spec")
    return spec_requirements(spec) if isinstance(spec, Mapping) else frozenset()


def declared_features(node: api.Node) -> tuple[str, ...]:
    """``status.declaredFeatures`` of ``node``, in its order."""
    if node.raw is None:
        return ()
    status = node.raw.get("status")
    features = status.get("declaredFeatures") if isinstance(status, Mapping) else None
    if not isinstance(features, list):
        return ()
    return tuple(str(f) for f in features)


class NodeDeclaredFeatures:
    name = NAME
    resource_local = True
    """Filter reads only the node (batched preemption may use it)."""

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]:
        needed = required_features(pod)
        if not needed:
            return None, api.SKIP
        state.write(_STATE_KEY, needed)
        return None, api.SUCCESS

    def _needed(self, state: CycleState, pod: api.Pod) -> frozenset[str]:
        needed = state.read(_STATE_KEY, frozenset)
        return required_features(pod) if needed is None else needed

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        needed = self._needed(state, pod)
        return np.fromiter(
            (needed.issubset(declared_features(snapshot.nodes[int(n)])) for n in nodes),
            dtype=bool,
            count=len(nodes),
        )

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        if self._needed(state, pod).issubset(declared_features(snapshot.nodes[node])):
            return api.SUCCESS
        return api.unschedulable(REASON_UNSATISFIED, unresolvable=True)

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Every rejection of this plugin is UnschedulableAndUnresolvable."""
        return np.zeros(len(nodes), dtype=bool)

    # --- QueueingHints ------------------------------------------------------------------

    def events_to_register(self) -> Sequence[EventHint]:
        return (
            EventHint(
                frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_DECLARED_FEATURE_CHANGE}),
                is_schedulable_after_node_change,
            ),
            EventHint(
                frozenset(
                    {
                        ClusterEvent.UNSCHEDULED_POD_UPDATE,
                        ClusterEvent.UNSCHEDULED_POD_LABEL_CHANGE,
                        ClusterEvent.UNSCHEDULED_POD_SCALE_DOWN,
                        ClusterEvent.UNSCHEDULED_POD_TOLERATION_CHANGE,
                        ClusterEvent.UNSCHEDULED_POD_GATES_ELIMINATED,
                    }
                ),
                is_schedulable_after_pod_update,
            ),
        )


def is_schedulable_after_node_change(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """Queue unless an updated node declares the same features as before."""
    if old is not None and declared_features(old) == declared_features(new):
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE


def is_schedulable_after_pod_update(pod: api.Pod, old: Any, new: Any) -> QueueingHint:
    """Queue when the rejected pod itself changed what it needs."""
    if new is None or new.uid != pod.uid:
        return QueueingHint.QUEUE_SKIP
    if required_features(old) == required_features(new):
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE


def new(args: Any, handle: Handle) -> NodeDeclaredFeatures:
    return NodeDeclaredFeatures()
