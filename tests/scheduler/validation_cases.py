"""Shapes the API server refuses on create, and unusual ones it accepts, for the planner's
validation (tests/scheduler/test_validation.py) and for the real kube-apiserver
(tests/controlplane/test_validation.py, a server-side dry run of each): one table, so it
cannot drift from what v1.36 does."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


def base_pod() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ]
        },
    }


def base_node() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"zone": "a"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }


def _set(obj: Obj, path: str, value: Any) -> None:
    parts = path.split(".")
    here: Any = obj
    for part in parts[:-1]:
        key: Any = int(part) if part.isdigit() else part
        here = here.setdefault(key, {}) if isinstance(here, dict) else here[key]
    last = parts[-1]
    if isinstance(here, list):
        here[int(last)] = value
    else:
        here[last] = value


def base_budget() -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }


def base_namespace() -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}


def base_replica_set() -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
            },
        },
    }


BASES = {
    "Pod": base_pod,
    "Node": base_node,
    "PodDisruptionBudget": base_budget,
    "Namespace": base_namespace,
    "ReplicaSet": base_replica_set,
}


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    """A key of :data:`BASES`."""
    changes: tuple[tuple[str, Any], ...]
    """Dotted paths (list indices as numbers) set on the base object."""
    field: str = ""
    """Refused cases: the field path the planner's error names."""
    status: int = 422
    """What the API server answers: 422 from validation, 403 from an admission plugin."""

    def build(self) -> Obj:
        obj = BASES[self.kind]()
        for path, value in self.changes:
            _set(obj, path, copy.deepcopy(value))
        return obj


def _affinity(*requirements: Obj) -> Obj:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(requirements)}]
            }
        }
    }


C0 = "spec.containers.0"
LONG = "a" * 64

REFUSED: tuple[Case, ...] = (
    Case(
        "nodeSelector value of 64 characters",
        "Pod",
        (("spec.nodeSelector", {"zone": LONG}),),
        "spec.nodeSelector.zone",
    ),
    Case(
        "nodeSelector key not a label key",
        "Pod",
        (("spec.nodeSelector", {"bad key": "a"}),),
        "spec.nodeSelector.bad key",
    ),
    Case(
        "bound pod, node affinity operator Equals",
        "Pod",
        (
            ("spec.nodeName", "n1"),
            ("spec.affinity", _affinity({"key": "zone", "operator": "Equals", "values": ["a"]})),
        ),
        "nodeSelectorTerms[0].matchExpressions[0].operator",
    ),
    Case(
        "node affinity operator in lower case",
        "Pod",
        (("spec.affinity", _affinity({"key": "zone", "operator": "in", "values": ["a"]})),),
        "matchExpressions[0].operator",
    ),
    Case(
        "node affinity In without values",
        "Pod",
        (("spec.affinity", _affinity({"key": "zone", "operator": "In", "values": []})),),
        "matchExpressions[0].values",
    ),
    Case(
        "node affinity Exists with values",
        "Pod",
        (("spec.affinity", _affinity({"key": "zone", "operator": "Exists", "values": ["a"]})),),
        "matchExpressions[0].values",
    ),
    Case(
        "node affinity Gt with two values",
        "Pod",
        (("spec.affinity", _affinity({"key": "n", "operator": "Gt", "values": ["1", "2"]})),),
        "matchExpressions[0].values",
    ),
    Case(
        "node affinity value not a label value",
        "Pod",
        (("spec.affinity", _affinity({"key": "zone", "operator": "In", "values": ["a b"]})),),
        "matchExpressions[0].values[0]",
    ),
    Case(
        "node affinity without terms",
        "Pod",
        (
            (
                "spec.affinity",
                {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
                    }
                },
            ),
        ),
        "nodeSelectorTerms",
    ),
    Case(
        "node affinity matchFields on a label",
        "Pod",
        (
            (
                "spec.affinity",
                {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.labels",
                                            "operator": "In",
                                            "values": ["n1"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
            ),
        ),
        "matchFields[0].key",
    ),
    Case(
        "preferred node affinity weight 0",
        "Pod",
        (
            (
                "spec.affinity",
                {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 0,
                                "preference": {
                                    "matchExpressions": [{"key": "zone", "operator": "Exists"}]
                                },
                            }
                        ]
                    }
                },
            ),
        ),
        "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
    ),
    Case(
        "pod affinity without topologyKey",
        "Pod",
        (
            (
                "spec.affinity",
                {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "db"}}}
                        ]
                    }
                },
            ),
        ),
        "requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
    ),
    Case(
        "pod anti-affinity selector operator Equals",
        "Pod",
        (
            (
                "spec.affinity",
                {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "topologyKey": "zone",
                                "labelSelector": {
                                    "matchExpressions": [
                                        {"key": "app", "operator": "Equals", "values": ["db"]}
                                    ]
                                },
                            }
                        ]
                    }
                },
            ),
        ),
        "labelSelector.matchExpressions[0].operator",
    ),
    Case(
        "toleration Exists with a value",
        "Pod",
        (("spec.tolerations", [{"key": "k", "operator": "Exists", "value": "v"}]),),
        "spec.tolerations[0].value",
    ),
    Case(
        "toleration without key and operator Equal",
        "Pod",
        (("spec.tolerations", [{"operator": "Equal", "value": "v"}]),),
        "spec.tolerations[0].operator",
    ),
    Case(
        "toleration seconds without NoExecute",
        "Pod",
        (
            (
                "spec.tolerations",
                [
                    {
                        "key": "k",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                        "tolerationSeconds": 5,
                    }
                ],
            ),
        ),
        "spec.tolerations[0].effect",
    ),
    Case(
        "toleration operator Gt (gate off)",
        "Pod",
        (("spec.tolerations", [{"key": "k", "operator": "Gt", "value": "5"}]),),
        "spec.tolerations[0].operator",
    ),
    Case(
        "toleration effect unknown",
        "Pod",
        (("spec.tolerations", [{"key": "k", "operator": "Exists", "effect": "NoRun"}]),),
        "spec.tolerations[0].effect",
    ),
    Case(
        "spread maxSkew 0",
        "Pod",
        (
            (
                "spec.topologySpreadConstraints",
                [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
            ),
        ),
        "topologySpreadConstraints[0].maxSkew",
    ),
    Case(
        "spread minDomains with ScheduleAnyway",
        "Pod",
        (
            (
                "spec.topologySpreadConstraints",
                [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "minDomains": 2,
                    }
                ],
            ),
        ),
        "topologySpreadConstraints[0].minDomains",
    ),
    Case(
        "spread pair repeated",
        "Pod",
        (
            (
                "spec.topologySpreadConstraints",
                [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}] * 2,
            ),
        ),
        "topologySpreadConstraints[1]",
    ),
    Case(
        "spread whenUnsatisfiable unknown",
        "Pod",
        (
            (
                "spec.topologySpreadConstraints",
                [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Never"}],
            ),
        ),
        "topologySpreadConstraints[0].whenUnsatisfiable",
    ),
    Case(
        "resource name not standard",
        "Pod",
        ((f"{C0}.resources.requests", {"gpu": "1"}),),
        "spec.containers[0].resources.requests.gpu",
    ),
    Case(
        "request above limit",
        "Pod",
        ((f"{C0}.resources", {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),),
        "spec.containers[0].resources.requests",
    ),
    Case(
        "extended resource without limit",
        "Pod",
        ((f"{C0}.resources.requests", {"example.com/gpu": "1"}),),
        "spec.containers[0].resources.limits",
    ),
    Case(
        "extended resource fraction",
        "Pod",
        (
            (
                f"{C0}.resources",
                {"requests": {"example.com/gpu": "500m"}, "limits": {"example.com/gpu": "500m"}},
            ),
        ),
        "spec.containers[0].resources.limits.example.com/gpu",
    ),
    Case(
        "negative quantity",
        "Pod",
        ((f"{C0}.resources.requests", {"cpu": "-1"}),),
        "spec.containers[0].resources.requests.cpu",
    ),
    Case(
        "hugepages without cpu or memory",
        "Pod",
        ((f"{C0}.resources", {"limits": {"hugepages-2Mi": "4Mi"}}),),
        "spec.containers[0].resources",
    ),
    Case(
        "pod-level ephemeral-storage",
        "Pod",
        (("spec.resources", {"requests": {"ephemeral-storage": "1Gi"}}),),
        "spec.resources.requests.ephemeral-storage",
    ),
    Case(
        "container name with upper case", "Pod", ((f"{C0}.name", "App"),), "spec.containers[0].name"
    ),
    Case("container without image", "Pod", ((f"{C0}.image", ""),), "spec.containers[0].image"),
    Case("no containers", "Pod", (("spec.containers", []),), "spec.containers"),
    Case(
        "duplicate container names",
        "Pod",
        (("spec.initContainers", [{"name": "app", "image": "registry.example/app:1"}]),),
        "spec.containers[0].name",
    ),
    Case(
        "hostPort out of range",
        "Pod",
        ((f"{C0}.ports", [{"containerPort": 80, "hostPort": 70000}]),),
        "spec.containers[0].ports[0].hostPort",
    ),
    Case(
        "port protocol unknown",
        "Pod",
        ((f"{C0}.ports", [{"containerPort": 80, "protocol": "HTTP"}]),),
        "spec.containers[0].ports[0].protocol",
    ),
    Case("pod name with upper case", "Pod", (("metadata.name", "Web"),), "metadata.name"),
    Case(
        "label value of 64 characters",
        "Pod",
        (("metadata.labels", {"app": LONG}),),
        "metadata.labels.app",
    ),
    Case(
        "annotation key not qualified",
        "Pod",
        (("metadata.annotations", {"a b": "x"}),),
        "metadata.annotations.a b",
    ),
    Case(
        "scheduling gate repeated",
        "Pod",
        (("spec.schedulingGates", [{"name": "example.com/g"}, {"name": "example.com/g"}]),),
        "spec.schedulingGates[1].name",
    ),
    Case(
        "preemptionPolicy unknown",
        "Pod",
        (("spec.preemptionPolicy", "Always"),),
        "spec.preemptionPolicy",
        403,  # the Priority admission plugin refuses it before validation
    ),
    Case(
        "node taint without effect",
        "Node",
        (("spec.taints", [{"key": "k", "value": "v"}]),),
        "spec.taints[0].effect",
    ),
    Case(
        "node taint key and effect repeated",
        "Node",
        (
            (
                "spec.taints",
                [
                    {"key": "k", "effect": "NoSchedule"},
                    {"key": "k", "value": "x", "effect": "NoSchedule"},
                ],
            ),
        ),
        "spec.taints[1]",
    ),
    Case(
        "node taint value of 64 characters",
        "Node",
        (("spec.taints", [{"key": "k", "value": LONG, "effect": "NoSchedule"}]),),
        "spec.taints[0].value",
    ),
    Case(
        "node label value of 64 characters",
        "Node",
        (("metadata.labels", {"zone": LONG}),),
        "metadata.labels.zone",
    ),
    Case("node name with underscore", "Node", (("metadata.name", "node_1"),), "metadata.name"),
)

REFUSED += (
    Case(
        "budget with both minAvailable and maxUnavailable",
        "PodDisruptionBudget",
        (("spec.maxUnavailable", 1),),
        "spec",
    ),
    Case(
        "budget minAvailable 150%",
        "PodDisruptionBudget",
        (("spec.minAvailable", "150%"),),
        "spec.minAvailable",
    ),
    Case(
        "budget minAvailable not a percentage",
        "PodDisruptionBudget",
        (("spec.minAvailable", "half"),),
        "spec.minAvailable",
    ),
    Case(
        "budget selector operator Equals",
        "PodDisruptionBudget",
        (
            (
                "spec.selector",
                {"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["web"]}]},
            ),
        ),
        "spec.selector.matchExpressions[0].operator",
    ),
    Case(
        "replica set selector value of 64 characters",
        "ReplicaSet",
        (
            ("spec.selector", {"matchLabels": {"app": LONG}}),
            ("spec.template.metadata.labels", {"app": LONG}),
        ),
        "spec.selector.matchLabels.app",
    ),
    Case("namespace name with a dot", "Namespace", (("metadata.name", "team.a"),), "metadata.name"),
    Case(
        "namespace label value of 64 characters",
        "Namespace",
        (("metadata.labels", {"team": LONG}),),
        "metadata.labels.team",
    ),
)

ACCEPTED: tuple[Case, ...] = (
    Case("the base budget", "PodDisruptionBudget", ()),
    Case(
        "budget maxUnavailable 100%",
        "PodDisruptionBudget",
        (("spec.minAvailable", None), ("spec.maxUnavailable", "100%")),
    ),
    Case("the base namespace", "Namespace", ()),
    Case("the base replica set", "ReplicaSet", ()),
    # kube-apiserver does not check a scheduler name's form: no scheduler will claim it
    Case(
        "schedulerName with upper case and underscore",
        "Pod",
        (("spec.schedulerName", "My_Scheduler"),),
    ),
    Case("the base pod", "Pod", ()),
    Case("the base node", "Node", ()),
    Case(
        "nodeSelector value of 63 characters", "Pod", (("spec.nodeSelector", {"zone": "a" * 63}),)
    ),
    Case(
        "node affinity Gt with one integer",
        "Pod",
        (("spec.affinity", _affinity({"key": "n", "operator": "Gt", "values": ["3"]})),),
    ),
    Case(
        "node affinity matchFields on metadata.name",
        "Pod",
        (
            (
                "spec.affinity",
                {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            ),
        ),
    ),
    Case("toleration of everything", "Pod", (("spec.tolerations", [{"operator": "Exists"}]),)),
    Case(
        "toleration with empty operator (Equal)",
        "Pod",
        (("spec.tolerations", [{"key": "k", "value": "v"}]),),
    ),
    Case(
        "extended resource with equal limit",
        "Pod",
        (
            (
                f"{C0}.resources",
                {"requests": {"example.com/gpu": "2"}, "limits": {"example.com/gpu": "2"}},
            ),
        ),
    ),
    Case(
        "hugepages with memory",
        "Pod",
        ((f"{C0}.resources", {"limits": {"hugepages-2Mi": "4Mi", "memory": "64Mi"}}),),
    ),
    Case(
        "pod-level cpu and memory",
        "Pod",
        (("spec.resources", {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}),),
    ),
    Case(
        "sidecar init container",
        "Pod",
        (
            (
                "spec.initContainers",
                [{"name": "proxy", "image": "registry.example/proxy:1", "restartPolicy": "Always"}],
            ),
        ),
    ),
    Case(
        "annotation key with upper case",
        "Pod",
        (("metadata.annotations", {"Example.com/Note": "x"}),),
    ),
    Case(
        "node taint with empty value",
        "Node",
        (("spec.taints", [{"key": "k", "effect": "NoExecute"}]),),
    ),
    Case(
        "node taint same key, two effects",
        "Node",
        (
            (
                "spec.taints",
                [{"key": "k", "effect": "NoSchedule"}, {"key": "k", "effect": "NoExecute"}],
            ),
        ),
    ),
    Case(
        "spread with minDomains",
        "Pod",
        (
            (
                "spec.topologySpreadConstraints",
                [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "minDomains": 2,
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "matchLabelKeys": ["pod-template-hash"],
                    }
                ],
            ),
        ),
    ),
)


def cases(table: tuple[Case, ...]) -> list[Any]:
    import pytest

    return [pytest.param(case, id=case.id) for case in table]
