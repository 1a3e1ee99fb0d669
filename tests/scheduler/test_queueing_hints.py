"""The plugins' QueueingHint functions against kube-scheduler v1.36's unit cases (the
``Test_isSchedulableAfter*`` tables of ``noderesources``, ``nodeaffinity``,
``tainttoleration``, ``nodeunschedulable``, ``nodeports``, ``schedulinggates``,
``podtopologyspread``, ``interpodaffinity``, ``nodedeclaredfeatures``), the event
split of a Pod update (``PodSchedulingPropertiesChange``), and what each plugin
registers (``EventsToRegister``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from nodeagent.k8s.pressure import Taint
from nodeagent.scheduler import api, framework
from nodeagent.scheduler.framework import ClusterEvent, QueueingHint
from nodeagent.scheduler.live.events import QueueingHints
from nodeagent.scheduler.plugins import (
    default_preemption,
    inter_pod_affinity,
    node_affinity,
    node_declared_features,
    node_ports,
    node_resources_fit,
    node_unschedulable,
    pod_topology_spread,
    scheduling_gates,
    taint_toleration,
)
from nodeagent.scheduler.snapshot import ClusterSnapshot
from tests.scheduler.builders import default_framework

E = ClusterEvent
Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
GI = 2**30


def pod(
    name: str = "pod1",
    *,
    uid: str | None = None,
    node: str = "",
    nominated: str = "",
    requests: dict[str, int] | None = None,
    labels: dict[str, str] | None = None,
    **fields: Any,
) -> api.Pod:
    return api.Pod(
        "default",
        name,
        uid=name if uid is None else uid,
        node_name=node,
        nominated_node_name=nominated,
        requests=requests or {},
        labels=labels or {},
        **fields,
    )


def node(name: str = "node-a", **fields: Any) -> api.Node:
    return api.Node(name, **fields)


# --- NodeResourcesFit -------------------------------------------------------------------

FIT = node_resources_fit.new(None, framework.Handle())
EXT_A, EXT_B = "example.com/aaa", "example.com/bbb"


@pytest.mark.parametrize(
    ("name", "target", "old", "new", "want"),
    [
        (
            "queue-on-other-pod-deleted",
            pod(requests={"cpu": 1000}),
            pod("pod2", requests={"cpu": 1000}, node="fake"),
            None,
            Q,
        ),
        ("skip-queue-on-unscheduled-pod-deleted", pod(), pod("pod2"), None, SKIP),
        (
            "queue-on-nominated-pod-deleted",
            pod(requests={"cpu": 1000}),
            pod("pod2", requests={"cpu": 2000}, nominated="fake"),
            None,
            Q,
        ),
        (
            "skip-queue-on-other-unscheduled-pod",
            pod(requests={"cpu": 1000}),
            pod("pod2", requests={"cpu": 2000}),
            pod("pod2", requests={"cpu": 1000}),
            SKIP,
        ),
        (
            "skip-queue-on-other-pod-unrelated-resource-scaled-down",
            pod(requests={"cpu": 1000}),
            pod("pod2", requests={"memory": 2}, node="fake"),
            pod("pod2", requests={"memory": 1}, node="fake"),
            SKIP,
        ),
        (
            "queue-on-other-pod-some-resource-scale-down",
            pod(requests={"cpu": 1000}),
            pod("pod2", requests={"cpu": 2000}, node="fake"),
            pod("pod2", requests={"cpu": 1000}, node="fake"),
            Q,
        ),
        (
            "queue-on-target-pod-some-resource-scale-down",
            pod(requests={"cpu": 1000}),
            pod(requests={"cpu": 2000}),
            pod(requests={"cpu": 1000}),
            Q,
        ),
    ],
)
def test_fit_after_pod_event(
    name: str, target: api.Pod, old: api.Pod, new: api.Pod | None, want: QueueingHint
) -> None:
    assert node_resources_fit.is_schedulable_after_pod_event(target, old, new) is want, name


def alloc(**resources: int) -> dict[str, int]:
    return {
        "pods": 32,
        **{k.replace("_", "/").replace("ext/", "example.com/"): v for k, v in resources.items()},
    }


@pytest.mark.parametrize(
    ("name", "requests", "old", "new", "want"),
    [
        (
            "skip-queue-on-node-add-without-sufficient-resources",
            {"memory": 2},
            None,
            {"memory": 1},
            SKIP,
        ),
        (
            "skip-queue-on-node-add-without-required-resource-type",
            {"cpu": 6, EXT_A: 1},
            None,
            {EXT_B: 1},
            SKIP,
        ),
        (
            "queue-on-node-add-with-sufficient-resources",
            {"memory": 2, EXT_A: 1},
            None,
            {"memory": 4, EXT_A: 2},
            Q,
        ),
        (
            "skip-queue-on-node-unrelated-changes",
            {"memory": 2, EXT_A: 1},
            {"memory": 2, EXT_A: 2},
            {"memory": 2, EXT_A: 1, EXT_B: 2},
            SKIP,
        ),
        (
            "queue-on-pod-requested-resources-increase",
            {"memory": 2, EXT_A: 2},
            {"memory": 2, EXT_A: 1},
            {"memory": 2, EXT_A: 2},
            Q,
        ),
        (
            "skip-queue-on-node-changes-from-suitable-to-unsuitable",
            {"memory": 2, EXT_A: 2},
            {"memory": 2, EXT_A: 2},
            {"memory": 1, EXT_A: 2},
            SKIP,
        ),
        (
            "queue-on-more-pods-allowed",
            {"memory": 2},
            {"memory": 2, "pods": 1},
            {"memory": 2, "pods": 2},
            Q,
        ),
    ],
)
def test_fit_after_node_change(
    name: str,
    requests: dict[str, int],
    old: dict[str, int] | None,
    new: dict[str, int],
    want: QueueingHint,
) -> None:
    target = pod(requests=requests)
    before = None if old is None else node(allocatable={"pods": 32, **old})
    after = node(allocatable={"pods": 32, **new})
    assert FIT.is_schedulable_after_node_change(target, before, after) is want, name


# --- NodeAffinity -----------------------------------------------------------------------


FOO_IN_BAR = api.SelectorTerm(match_expressions=(api.Requirement("foo", "In", ("bar",)),))
WITH_NODE_AFFINITY = pod(affinity=api.NodeAffinity(required=(FOO_IN_BAR,)))
NA = node_affinity.new(None, framework.Handle())
NA_ADDED = node_affinity.new(
    node_affinity.Args.model_validate(
        {
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}
                    ]
                }
            }
        }
    ),
    framework.Handle(),
)
ROOM = {"cpu": 1000}


@pytest.mark.parametrize(
    ("name", "plugin", "old", "new", "want"),
    [
        ("skip-queue-on-add", NA, None, node(), SKIP),
        ("queue-on-add", NA, None, node(labels={"foo": "bar"}), Q),
        ("skip-unrelated-changes", NA, node(), node(allocatable=ROOM), SKIP),
        ("skip-unrelated-changes-on-labels", NA, node(), node(labels={"k": "v"}), SKIP),
        (
            "skip-labels-changes-on-node-from-suitable-to-unsuitable",
            NA,
            node(labels={"foo": "bar"}),
            node(labels={"k": "v"}),
            SKIP,
        ),
        (
            "queue-on-labels-change-makes-pod-schedulable",
            NA,
            node(),
            node(labels={"foo": "bar"}),
            Q,
        ),
        (
            "skip-unrelated-change-that-keeps-pod-schedulable",
            NA,
            node(labels={"foo": "bar"}),
            node(labels={"foo": "bar"}, allocatable=ROOM),
            SKIP,
        ),
        ("skip-queue-on-add-scheduler-enforced-node-affinity", NA_ADDED, None, node(), SKIP),
        (
            "queue-on-add-scheduler-enforced-node-affinity",
            NA_ADDED,
            None,
            node(labels={"foo": "bar"}),
            Q,
        ),
    ],
)
def test_node_affinity_after_node_change(
    name: str,
    plugin: node_affinity.NodeAffinity,
    old: api.Node | None,
    new: api.Node,
    want: QueueingHint,
) -> None:
    assert plugin.is_schedulable_after_node_change(WITH_NODE_AFFINITY, old, new) is want, name


# --- TaintToleration and NodeUnschedulable ----------------------------------------------

TT = taint_toleration.new(None, framework.Handle())
NO_SCHEDULE = Taint("foo", api.TaintEffect.NO_SCHEDULE, "bar")
TOLERATES = (api.Toleration("foo", "Equal", "bar", "NoSchedule"),)


@pytest.mark.parametrize(
    ("name", "tolerations", "old", "new", "want"),
    [
        ("node-added-untolerated", (), None, (NO_SCHEDULE,), SKIP),
        ("node-added-tolerated", TOLERATES, None, (NO_SCHEDULE,), Q),
        ("node-changed-untolerated", (), (NO_SCHEDULE,), (NO_SCHEDULE,), SKIP),
        (
            "node-changed-tolerated (was not)",
            TOLERATES,
            (Taint("x", api.TaintEffect.NO_SCHEDULE),),
            (NO_SCHEDULE,),
            Q,
        ),
        ("node-taint-removed", (), (NO_SCHEDULE,), (), Q),
        (
            "node-taint-removed-but-another-untolerated",
            (),
            (NO_SCHEDULE, Taint("x", api.TaintEffect.NO_EXECUTE)),
            (Taint("x", api.TaintEffect.NO_EXECUTE),),
            SKIP,
        ),
    ],
)
def test_taint_toleration_after_node_change(
    name: str,
    tolerations: tuple[api.Toleration, ...],
    old: tuple[Taint, ...] | None,
    new: tuple[Taint, ...],
    want: QueueingHint,
) -> None:
    target = pod(tolerations=tolerations)
    before = None if old is None else node(taints=old)
    assert TT.is_schedulable_after_node_change(target, before, node(taints=new)) is want, name


def test_toleration_change_hints_ask_for_the_pod_itself() -> None:
    target = pod()
    changed = pod(tolerations=TOLERATES)
    other = pod("pod2", tolerations=TOLERATES)
    assert taint_toleration.is_schedulable_after_pod_toleration_change(target, target, changed) is Q
    assert taint_toleration.is_schedulable_after_pod_toleration_change(target, other, other) is SKIP
    unschedulable = node_unschedulable.new(None, framework.Handle())
    cordon = (api.Toleration(api.TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoSchedule"),)
    hint = unschedulable.is_schedulable_after_pod_toleration_change
    assert hint(target, target, pod(tolerations=cordon)) is Q
    assert hint(target, target, pod(tolerations=TOLERATES)) is SKIP
    assert hint(target, other, dataclasses.replace(other, tolerations=cordon)) is SKIP


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("backoff-on-new-schedulable-node", None, False, Q),
        ("skip-queue-on-new-unschedulable-node", None, True, SKIP),
        ("queue-on-uncordon", True, False, Q),
        ("skip-on-cordon", False, True, SKIP),
        ("skip-on-unrelated-change", False, False, SKIP),
    ],
)
def test_node_unschedulable_after_node_change(
    name: str, old: bool | None, new: bool, want: QueueingHint
) -> None:
    before = None if old is None else node(unschedulable=old)
    hint = node_unschedulable.is_schedulable_after_node_change
    assert hint(pod(), before, node(unschedulable=new)) is want, name


# --- NodePorts and SchedulingGates ------------------------------------------------------

PORT_8080 = (api.HostPort(8080),)


@pytest.mark.parametrize(
    ("name", "deleted", "want"),
    [
        ("backoff-wrong-old-object (unscheduled)", pod("pod2", host_ports=PORT_8080), SKIP),
        ("skip-queue-on-unscheduled", pod("pod2", host_ports=PORT_8080), SKIP),
        ("skip-queue-on-non-hostport", pod("pod2", node="n"), SKIP),
        (
            "skip-queue-on-unrelated-hostport",
            pod("pod2", node="n", host_ports=(api.HostPort(8081),)),
            SKIP,
        ),
        ("queue-on-released-hostport", pod("pod2", node="n", host_ports=PORT_8080), Q),
        (
            "queue-on-nominated-released-hostport",
            pod("pod2", nominated="n", host_ports=PORT_8080),
            Q,
        ),
    ],
)
def test_node_ports_after_pod_deleted(name: str, deleted: api.Pod, want: QueueingHint) -> None:
    target = pod(host_ports=PORT_8080)
    assert node_ports.is_schedulable_after_pod_deleted(target, deleted, None) is want, name


def test_scheduling_gates_after_gates_eliminated() -> None:
    target = pod(scheduling_gates=("g",))
    hint = scheduling_gates.is_schedulable_after_gates_eliminated
    assert hint(target, target, pod()) is Q
    assert hint(target, pod("pod2", scheduling_gates=("g",)), pod("pod2")) is SKIP


# --- PodTopologySpread ------------------------------------------------------------------

PTS = pod_topology_spread.new(None, framework.Handle())
FOO = api.LabelSelector(match_expressions=(api.Requirement("foo", "Exists"),))


def spread(*keys: str) -> tuple[api.SpreadConstraint, ...]:
    return tuple(
        api.SpreadConstraint(1, key, api.Unsatisfiable.DO_NOT_SCHEDULE, FOO) for key in keys
    )


@pytest.mark.parametrize(
    ("name", "keys", "old", "new", "want"),
    [
        (
            "node updates label which matches topologyKey",
            ("zone",),
            {"zone": "zone1"},
            {"zone": "zone2"},
            Q,
        ),
        (
            "node that doesn't match updates non-related label",
            ("zone",),
            {"foo": "bar1"},
            {"foo": "bar2"},
            SKIP,
        ),
        (
            "node that match adds non-related label",
            ("zone", "node"),
            {"zone": "zone1", "node": "node1", "foo": "bar"},
            {"zone": "zone1", "node": "node1"},
            SKIP,
        ),
        ("create node with non-related labels", ("zone",), None, {"foo": "bar"}, SKIP),
        ("create node with related labels", ("zone",), None, {"zone": "zone1"}, Q),
        ("delete node with non-related labels", ("zone",), {"foo": "bar"}, None, SKIP),
        ("delete node with related labels", ("zone",), {"zone": "zone1"}, None, Q),
        ("add node matching only one constraint", ("zone", "node"), None, {"zone": "zone1"}, SKIP),
        (
            "add node matching all constraints",
            ("zone", "node"),
            None,
            {"zone": "zone1", "node": "node1"},
            Q,
        ),
        (
            "update node matching all constraints",
            ("zone", "node"),
            {"zone": "zone1", "node": "node1"},
            {"zone": "zone1", "node": "node2"},
            Q,
        ),
    ],
)
def test_spread_after_node_change(
    name: str,
    keys: tuple[str, ...],
    old: dict[str, str] | None,
    new: dict[str, str] | None,
    want: QueueingHint,
) -> None:
    target = pod(labels={"foo": ""}, spread_constraints=spread(*keys))
    before = None if old is None else node(labels=old)
    after = None if new is None else node(labels=new)
    assert PTS.is_schedulable_after_node_change(target, before, after) is want, name


def test_spread_after_taint_change_on_matching_nodes_only() -> None:
    target = pod(spread_constraints=spread("zone", "node"))
    a = node(labels={"zone": "z", "node": "n"}, taints=(Taint("aaa", api.TaintEffect.NO_SCHEDULE),))
    b = dataclasses.replace(a, taints=(Taint("ccc", api.TaintEffect.NO_SCHEDULE),))
    assert PTS.is_schedulable_after_node_change(target, a, b) is Q
    c, d = (dataclasses.replace(n, labels={"node": "n"}) for n in (a, b))
    assert PTS.is_schedulable_after_node_change(target, c, d) is SKIP


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("add pod with labels match selector", None, pod("p2", node="n", labels={"foo": ""}), Q),
        ("add un-scheduled pod", None, pod("p2", labels={"foo": ""}), SKIP),
        (
            "update un-scheduled pod",
            pod("p2", labels={"bar": ""}),
            pod("p2", labels={"foo": ""}),
            SKIP,
        ),
        ("delete un-scheduled pod", pod("p2", labels={"foo": ""}), None, SKIP),
        (
            "add pod with different namespace",
            None,
            dataclasses.replace(pod("p2", node="n", labels={"foo": ""}), namespace="other"),
            SKIP,
        ),
        (
            "add pod with labels don't match selector",
            None,
            pod("p2", node="n", labels={"bar": ""}),
            SKIP,
        ),
        ("delete pod with labels that match", pod("p2", node="n", labels={"foo": ""}), None, Q),
        (
            "delete pod with labels that don't match",
            pod("p2", node="n", labels={"bar": ""}),
            None,
            SKIP,
        ),
        (
            "change pod's labels to match",
            pod("p2", node="n", labels={"bar": ""}),
            pod("p2", node="n", labels={"foo": ""}),
            Q,
        ),
        (
            "change pod's labels but both match",
            pod("p2", node="n", labels={"foo": "a"}),
            pod("p2", node="n", labels={"foo": "b"}),
            SKIP,
        ),
    ],
)
def test_spread_after_pod_change(
    name: str, old: api.Pod | None, new: api.Pod | None, want: QueueingHint
) -> None:
    target = pod("p", labels={"foo": ""}, spread_constraints=spread("zone"))
    assert PTS.is_schedulable_after_pod_change(target, old, new) is want, name


# --- InterPodAffinity -------------------------------------------------------------------


def term(key: str, *values: str, topology: str = "region") -> api.PodAffinityTerm:
    operator = "In" if values else "Exists"
    return api.PodAffinityTerm(
        topology, api.LabelSelector(match_expressions=(api.Requirement(key, operator, values),))
    )


SERVICE = term("service", "securityscan", "value2")
WITH_AFFINITY = pod("p", pod_affinity=api.PodAffinity(required=(SERVICE,)))
WITH_ANTI = pod("p", pod_affinity=api.PodAffinity(required_anti=(SERVICE,)))
MULTI = pod(
    "p",
    pod_affinity=api.PodAffinity(
        required=(term("aaa", topology="hostname"), term("bbb", topology="hostname"))
    ),
)


def other(labels: dict[str, str], *, node: str = "fake-node", **fields: Any) -> api.Pod:
    return pod("other", node=node, labels=labels, **fields)


@pytest.mark.parametrize(
    ("name", "target", "old", "new", "want"),
    [
        (
            "add a pod which matches the pod affinity",
            WITH_AFFINITY,
            None,
            other({"service": "securityscan"}),
            Q,
        ),
        (
            "add an un-scheduled pod",
            WITH_AFFINITY,
            None,
            other({"service": "securityscan"}, node=""),
            SKIP,
        ),
        (
            "add a pod which doesn't match the pod affinity",
            WITH_AFFINITY,
            None,
            other({"aaa": "a"}),
            SKIP,
        ),
        (
            "update a pod from non-match to match pod affinity",
            WITH_AFFINITY,
            other({"aaa": "a"}),
            other({"service": "securityscan"}),
            Q,
        ),
        (
            "matches both before and after label changes",
            WITH_AFFINITY,
            other({"service": "value2"}),
            other({"service": "securityscan"}),
            SKIP,
        ),
        (
            "update an un-scheduled pod",
            WITH_AFFINITY,
            other({"aaa": "a"}, node=""),
            other({"service": "securityscan"}, node=""),
            SKIP,
        ),
        (
            "update a pod from match to non-match the pod affinity",
            WITH_AFFINITY,
            other({"service": "securityscan"}),
            other({"aaa": "a"}),
            SKIP,
        ),
        (
            "match to non-match - multiple terms",
            MULTI,
            other({"aaa": "a"}),
            other({"service": "securityscan"}),
            SKIP,
        ),
        (
            "non-match to match - multiple terms",
            MULTI,
            other({"aaa": "a"}),
            other({"aaa": "", "bbb": ""}),
            Q,
        ),
        (
            "updated pod is the target pod",
            pod("p", labels={"foo": "baz"}),
            pod("p", labels={"foo": "bar"}),
            pod("p", labels={"foo": "baz"}),
            Q,
        ),
        (
            "anti-affinity: satisfying to not satisfying",
            WITH_ANTI,
            other({"service": "securityscan"}),
            other({"service": "aaaa"}),
            Q,
        ),
        (
            "anti-affinity: not satisfying to satisfying",
            WITH_ANTI,
            other({"service": "bbb"}),
            other({"service": "securityscan"}),
            SKIP,
        ),
        (
            "delete a pod which doesn't match pod's anti-affinity",
            WITH_ANTI,
            other({"aaa": "a"}),
            None,
            SKIP,
        ),
        (
            "delete a pod which matches pod's anti-affinity",
            WITH_ANTI,
            other({"service": "securityscan"}),
            None,
            Q,
        ),
        (
            "delete a pod with anti-affinity that matches pending pod",
            pod("p", uid="", labels={"service": "securityscan"}),
            other({}, uid="", pod_affinity=api.PodAffinity(required_anti=(SERVICE,))),
            None,
            Q,
        ),
        (
            "delete a pod with anti-affinity that doesn't match pending pod",
            pod("p", uid="", labels={"service": "foo"}),
            other({}, uid="", pod_affinity=api.PodAffinity(required_anti=(SERVICE,))),
            None,
            SKIP,
        ),
        (
            "delete a nominated pod which doesn't match pod's anti-affinity",
            WITH_ANTI,
            other({"aaa": "a"}, node="", nominated="fake-node"),
            None,
            SKIP,
        ),
        (
            "delete a nominated pod which matches pod's anti-affinity",
            WITH_ANTI,
            other({"service": "securityscan"}, node="", nominated="fake-node"),
            None,
            Q,
        ),
    ],
)
def test_inter_pod_affinity_after_pod_change(
    name: str, target: api.Pod, old: api.Pod | None, new: api.Pod | None, want: QueueingHint
) -> None:
    assert inter_pod_affinity.is_schedulable_after_pod_change(target, old, new) is want, name


@pytest.mark.parametrize(
    ("name", "target", "old", "new", "want"),
    [
        (
            "add a new node with matched pod affinity topologyKey",
            WITH_AFFINITY,
            None,
            {"region": "r1"},
            Q,
        ),
        ("add a new node without matched topologyKey", WITH_AFFINITY, None, {"zone": "z"}, SKIP),
        ("update node topologyKey value", WITH_AFFINITY, {"region": "r1"}, {"region": "r2"}, Q),
        (
            "update node label, topologyKey unchanged",
            WITH_AFFINITY,
            {"region": "r1", "a": "1"},
            {"region": "r1", "a": "2"},
            SKIP,
        ),
        ("add a new node with anti-affinity", WITH_ANTI, None, {"zone": "z"}, Q),
        ("node loses anti-affinity topologyKey", WITH_ANTI, {"region": "r1"}, {}, Q),
        ("node gains anti-affinity topologyKey", WITH_ANTI, {}, {"region": "r1"}, SKIP),
    ],
)
def test_inter_pod_affinity_after_node_change(
    name: str,
    target: api.Pod,
    old: dict[str, str] | None,
    new: dict[str, str],
    want: QueueingHint,
) -> None:
    before = None if old is None else node(labels=old)
    hint = inter_pod_affinity.is_schedulable_after_node_change
    assert hint(target, before, node(labels=new)) is want, name


# --- NodeDeclaredFeatures ---------------------------------------------------------------

RESTART_ALL = {
    "containers": [
        {"name": "c", "restartPolicyRules": [{"action": "RestartAllContainers"}]},
    ]
}


def ndf_pod(spec: dict[str, Any], name: str = "pod1") -> api.Pod:
    return dataclasses.replace(pod(name), raw={"spec": spec})


def ndf_node(*features: str) -> api.Node:
    return node(raw={"status": {"declaredFeatures": list(features)}})


@pytest.mark.parametrize(
    ("name", "spec", "want"),
    [
        ("Pod with no requirements", {"containers": [{"name": "c"}]}, frozenset()),
        (
            "restart all containers",
            RESTART_ALL,
            frozenset({node_declared_features.RESTART_ALL_CONTAINERS}),
        ),
        (
            "restart all from an init container",
            {"initContainers": RESTART_ALL["containers"], "containers": []},
            frozenset({node_declared_features.RESTART_ALL_CONTAINERS}),
        ),
        (
            "host network with user namespaces",
            {"hostNetwork": True, "hostUsers": False},
            frozenset({node_declared_features.USER_NAMESPACES_HOST_NETWORK}),
        ),
        ("host network with host users", {"hostNetwork": True, "hostUsers": True}, frozenset()),
        (
            "multiple feature requirements",
            {**RESTART_ALL, "hostNetwork": True, "hostUsers": False},
            frozenset(
                {
                    node_declared_features.RESTART_ALL_CONTAINERS,
                    node_declared_features.USER_NAMESPACES_HOST_NETWORK,
                }
            ),
        ),
    ],
)
def test_declared_features_a_pod_needs(
    name: str, spec: dict[str, Any], want: frozenset[str]
) -> None:
    assert node_declared_features.spec_requirements(spec) == want, name


@pytest.mark.parametrize(
    ("name", "declared", "passes"),
    [
        ("Node matches requirements", (node_declared_features.RESTART_ALL_CONTAINERS,), True),
        (
            "Node with multiple features, pod requires subset",
            (node_declared_features.RESTART_ALL_CONTAINERS, "Other"),
            True,
        ),
        ("Node does not match requirements", ("Other",), False),
        ("Node has no declared features", (), False),
    ],
)
def test_declared_features_filter(name: str, declared: tuple[str, ...], passes: bool) -> None:

    plugin = node_declared_features.NodeDeclaredFeatures()
    target = ndf_pod(RESTART_ALL)
    snapshot = ClusterSnapshot([ndf_node(*declared)], [])
    state = framework.CycleState()
    _, status = plugin.pre_filter(state, target, snapshot)
    assert status.is_success
    verdict = plugin.filter_node(state, target, snapshot, 0)
    assert verdict.is_success is passes, name
    if not passes:
        assert verdict.code is api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert verdict.reasons == (node_declared_features.REASON_UNSATISFIED,)
    mask = plugin.filter(state, target, snapshot, np.arange(1))
    assert bool(mask[0]) is passes


def test_declared_features_skip_a_pod_that_needs_none() -> None:
    plugin = node_declared_features.NodeDeclaredFeatures()
    _, status = plugin.pre_filter(framework.CycleState(), pod(), ClusterSnapshot([], []))
    assert status.is_skip


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("Node Add with feature", None, ("A",), Q),
        ("Node Update (Features Added)", ("A",), ("A", "B"), Q),
        ("Node Update (Features Unchanged)", ("A",), ("A",), SKIP),
    ],
)
def test_declared_features_after_node_change(
    name: str, old: tuple[str, ...] | None, new: tuple[str, ...], want: QueueingHint
) -> None:
    before = None if old is None else ndf_node(*old)
    hint = node_declared_features.is_schedulable_after_node_change
    assert hint(pod(), before, ndf_node(*new)) is want, name


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        ("Pod Update adds requirement", ndf_pod({}), ndf_pod(RESTART_ALL), Q),
        ("Pod Update removes requirement", ndf_pod(RESTART_ALL), ndf_pod({}), Q),
        (
            "Pod Update with no change in requirements",
            ndf_pod(RESTART_ALL),
            ndf_pod(RESTART_ALL),
            SKIP,
        ),
        (
            "Updated pod not the same as target pod",
            ndf_pod({}, "pod2"),
            ndf_pod(RESTART_ALL, "pod2"),
            SKIP,
        ),
    ],
)
def test_declared_features_after_pod_update(
    name: str, old: api.Pod, new: api.Pod, want: QueueingHint
) -> None:
    hint = node_declared_features.is_schedulable_after_pod_update
    assert hint(ndf_pod({}), old, new) is want, name


# --- events and registrations -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        (
            "labels",
            pod(labels={"a": "1"}),
            pod(labels={"a": "2"}),
            [E.UNSCHEDULED_POD_LABEL_CHANGE],
        ),
        (
            "scale down, bound",
            pod(node="n", requests={"cpu": 2}),
            pod(node="n", requests={"cpu": 1}),
            [E.ASSIGNED_POD_SCALE_DOWN],
        ),
        (
            "a resource removed",
            pod(node="n", requests={"cpu": 2, "memory": 1}),
            pod(node="n", requests={"cpu": 2}),
            [E.ASSIGNED_POD_SCALE_DOWN],
        ),
        (
            "scale up is a plain update",
            pod(node="n", requests={"cpu": 1}),
            pod(node="n", requests={"cpu": 2}),
            [E.ASSIGNED_POD_UPDATE],
        ),
        (
            "gates removed",
            pod(scheduling_gates=("g",)),
            pod(),
            [E.UNSCHEDULED_POD_GATES_ELIMINATED],
        ),
        (
            "one gate of two removed",
            pod(scheduling_gates=("g", "h")),
            pod(scheduling_gates=("g",)),
            [E.UNSCHEDULED_POD_UPDATE],
        ),
        (
            "toleration added",
            pod(),
            pod(tolerations=TOLERATES),
            [E.UNSCHEDULED_POD_TOLERATION_CHANGE],
        ),
    ],
)
def test_pod_update_events(name: str, old: api.Pod, new: api.Pod, want: list[ClusterEvent]) -> None:
    assert framework.pod_update_events(old, new) == want, name


def test_every_default_rejecting_plugin_registers_its_events() -> None:
    """Every plugin of the default profile that can reject a pod says which events may
    help (none hears every event by default), and DefaultPreemption only Skips."""
    hints = default_framework().queueing_hints()
    assert all(registered is not None for registered in hints.values()), hints
    assert hints["NodeName"] == (framework.EventHint(frozenset({E.NODE_ADD})),)
    preemption = hints[default_preemption.NAME]
    assert preemption is not None
    for entry in preemption:
        assert entry.hint is not None and entry.hint(pod(), pod("v", node="n"), None) is SKIP


def test_the_queue_asks_only_the_rejecting_plugins_and_counts_errors_as_queue() -> None:
    seen: list[tuple[str, str, str]] = []
    hints = QueueingHints(
        {"default-scheduler": default_framework()},
        observe=lambda plugin, event, hint, _s: seen.append((plugin, event, hint)),
    )
    target = pod(requests={"cpu": 1000})
    freed = pod("v", node="n", requests={"cpu": 1000})
    assert hints.worth_requeuing(target, {"NodeResourcesFit"}, E.ASSIGNED_POD_DELETE, freed, None)
    assert seen == [("NodeResourcesFit", "AssignedPodDelete", "Queue")]
    assert not hints.worth_requeuing(target, {"TaintToleration"}, E.ASSIGNED_POD_DELETE, freed)
    assert not hints.interested(E.PDB_CHANGE), "no default plugin registered it"
    # a hint that raises: Queue, labelled Error (the pod must not be stranded)
    seen.clear()
    assert hints.worth_requeuing(target, {"NodeResourcesFit"}, E.NODE_ADD, None, "not-a-node")
    assert seen == [("NodeResourcesFit", "NodeAdd", "Error")]
    assert hints.worth_requeuing(target, {"TaintToleration"}, E.UNSCHEDULABLE_TIMEOUT)
    assert hints.worth_requeuing(target, (), E.NODE_LABEL_CHANGE), "no rejector recorded"
