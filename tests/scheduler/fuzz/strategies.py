"""Hypothesis strategies for clusters the API server would accept, as ``kubectl get -o
json`` prints them: Nodes, Pods (bound and pending), PodDisruptionBudgets, Namespaces.

The vocabularies are deliberately small (a few label keys and values, a few taint keys)
so that selectors, taints and topology keys *meet*: a random selector over a large
alphabet would match nothing and exercise nothing. Within them every shape the API
admits is drawn: labels on some nodes only, topology keys on no node or some, nil and
empty selectors, every operator, namespaces and namespaceSelector, matchLabelKeys and
mismatchLabelKeys, preferred weights 1-100, empty node-affinity terms, Exists
tolerations with an empty key, every taint effect, extended resources, zero-request
pods, host ports, priorities with both preemption policies, unschedulable nodes, and
quantities in every form the API parses (plain, decimal, milli, binary and decimal
suffixes, exponents).

Clusters stay small (at most 6 nodes, 8 bound and 4 pending pods). Every generator
draws through a :class:`Source`: under hypothesis (:func:`cluster`, for CI: failures
shrink to a minimal cluster) or from a seeded ``random.Random`` (:func:`random_cluster`,
for the long run: hypothesis's engine costs about 50 ms an example, plain draws about 1).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st

Obj = dict[str, Any]

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
ABSENT = "example.com/on-no-node"
"""A topology key no generated node carries (a typo, a label not applied yet)."""
TOPOLOGY_KEYS = (HOSTNAME, ZONE, RACK, ABSENT)
NODE_LABEL_KEYS = (ZONE, RACK, "example.com/tier", "example.com/gen")
NODE_LABEL_VALUES = ("a", "b", "c", "")
NUMERIC_VALUES = ("1", "5", "10", "0206", "3")
POD_LABELS = {"app": ("web", "db"), "tier": ("front", "back"), "rev": ("1", "2")}
TAINT_KEYS = ("dedicated", "example.com/gpu", "node.kubernetes.io/unschedulable")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NAMESPACES = {"default": {}, "team-a": {"team": "a"}, "team-b": {"team": "b", "env": "prod"}}
GPU = "example.com/gpu"
CPU_FORMS = ("0", "100m", "250m", "500m", "0.5", "0.25", "1", "1e0", "200m", 1, "1500m")
MEMORY_FORMS = ("0", "64Mi", "128Mi", "0.5Gi", "1Gi", "1G", "512M", "1e9", "2Gi", 268435456)
EPHEMERAL_FORMS = ("0", "1Gi", "500M", "10Gi")
GPU_FORMS = ("0", "1", "2")

T = TypeVar("T")


class Source(Protocol):
    """Where the generators' choices come from."""

    def pick(self, options: Sequence[T]) -> T: ...

    def number(self, low: int, high: int) -> int: ...

    def flip(self) -> bool: ...

    def some(
        self, options: Sequence[T], max_size: int, *, min_size: int = 0, unique: bool = True
    ) -> list[T]: ...


class HypothesisSource:
    """Choices drawn by hypothesis (shrinkable; it favours the first option and 0, so
    the generators put the permissive choices first and rare features at the top)."""

    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def pick(self, options: Sequence[T]) -> T:
        return self._draw(st.sampled_from(options))

    def number(self, low: int, high: int) -> int:
        return self._draw(st.integers(low, high))

    def flip(self) -> bool:
        return self._draw(st.booleans())

    def some(
        self, options: Sequence[T], max_size: int, *, min_size: int = 0, unique: bool = True
    ) -> list[T]:
        return self._draw(
            st.lists(st.sampled_from(options), min_size=min_size, max_size=max_size, unique=unique)
        )


class RandomSource:
    """Choices from a seeded ``random.Random``: the long run's cheap draws."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def pick(self, options: Sequence[T]) -> T:
        return options[self._rng.randrange(len(options))]

    def number(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)

    def flip(self) -> bool:
        return self._rng.random() < 0.5

    def some(
        self, options: Sequence[T], max_size: int, *, min_size: int = 0, unique: bool = True
    ) -> list[T]:
        size = self._rng.randint(min_size, max_size)
        if unique:
            return self._rng.sample(list(options), min(size, len(options)))
        return [self.pick(options) for _ in range(size)]


# --- labels and selectors -----------------------------------------------------------------


def pod_labels(src: Source) -> dict[str, str]:
    keys = src.some(sorted(POD_LABELS), 3)
    return {k: src.pick(POD_LABELS[k]) for k in keys}


def label_requirement(src: Source, keys: tuple[str, ...], values: tuple[str, ...]) -> Obj:
    """A ``LabelSelectorRequirement`` (In, NotIn, Exists, DoesNotExist)."""
    operator = src.pick(("In", "NotIn", "Exists", "DoesNotExist"))
    out: Obj = {"key": src.pick(keys), "operator": operator}
    if operator in ("In", "NotIn"):
        out["values"] = src.some(values, 2, min_size=1, unique=False)
    return out


def pod_selector(src: Source, allow_nil: bool = True) -> Obj | None:
    """A pod ``labelSelector``: nil, empty (everything), matchLabels, matchExpressions."""
    shape = src.pick(("nil", "empty", "labels", "expressions", "both"))
    if shape == "nil" and allow_nil:
        return None
    if shape in ("nil", "empty"):
        return {}
    out: Obj = {}
    if shape in ("labels", "both"):
        key = src.pick(sorted(POD_LABELS))
        out["matchLabels"] = {key: src.pick(POD_LABELS[key])}
    if shape in ("expressions", "both"):
        values = tuple(v for vs in POD_LABELS.values() for v in vs)
        keys = tuple(sorted(POD_LABELS))
        out["matchExpressions"] = [
            label_requirement(src, keys, values) for _ in range(src.number(1, 2))
        ]
    return out


def namespace_selector(src: Source) -> Obj | None:
    return src.pick(
        (
            None,
            {},
            {"matchLabels": {"team": "a"}},
            {"matchExpressions": [{"key": "env", "operator": "Exists"}]},
        )
    )


def _selector_keys(selector: Obj) -> set[str]:
    keys = set(selector.get("matchLabels", {}))
    keys |= {r["key"] for r in selector.get("matchExpressions", [])}
    return keys


def pod_affinity_term(src: Source) -> Obj:
    term: Obj = {"topologyKey": src.pick(TOPOLOGY_KEYS)}
    selector = pod_selector(src)
    if selector is not None:
        term["labelSelector"] = selector
        # The API forbids a key in both the selector and match/mismatchLabelKeys.
        free = sorted(set(POD_LABELS) - _selector_keys(selector))
        if src.flip() and free:
            keys = src.some(free, 2)
            half = src.number(0, len(keys))
            if keys[:half]:
                term["matchLabelKeys"] = keys[:half]
            if keys[half:]:
                term["mismatchLabelKeys"] = keys[half:]
    if src.flip():
        term["namespaces"] = src.some(sorted(NAMESPACES), 2)
    chosen = namespace_selector(src)
    if chosen is not None:
        term["namespaceSelector"] = chosen
    return term


def pod_affinity(src: Source) -> Obj:
    out: Obj = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        if not src.flip():
            continue
        block: Obj = {}
        required = [pod_affinity_term(src) for _ in range(src.number(0, 2))]
        if required:
            block["requiredDuringSchedulingIgnoredDuringExecution"] = required
        preferred = [
            {"weight": src.number(1, 100), "podAffinityTerm": pod_affinity_term(src)}
            for _ in range(src.number(0, 2))
        ]
        if preferred:
            block["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        out[kind] = block
    return out


def node_selector_requirement(src: Source) -> Obj:
    """A ``NodeSelectorRequirement`` with every operator, values as each allows."""
    operator = src.pick(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
    out: Obj = {"key": src.pick((*NODE_LABEL_KEYS, HOSTNAME)), "operator": operator}
    if operator in ("In", "NotIn"):
        pool = NODE_LABEL_VALUES + NUMERIC_VALUES
        out["values"] = src.some(pool, 2, min_size=1, unique=False)
    elif operator in ("Gt", "Lt"):
        out["values"] = [src.pick(NUMERIC_VALUES)]
    return out


def node_selector_term(src: Source, node_names: tuple[str, ...]) -> Obj:
    """A term; sometimes empty (it matches nothing), sometimes with matchFields."""
    term: Obj = {}
    expressions = [node_selector_requirement(src) for _ in range(src.number(0, 2))]
    if expressions:
        term["matchExpressions"] = expressions
    if src.number(0, 4) == 4:
        term["matchFields"] = [
            {
                "key": "metadata.name",
                "operator": src.pick(("In", "NotIn")),
                "values": [src.pick(node_names)],
            }
        ]
    return term


def node_affinity(src: Source, node_names: tuple[str, ...]) -> Obj:
    out: Obj = {}
    if src.flip():
        out["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [
                node_selector_term(src, node_names) for _ in range(src.number(1, 2))
            ]
        }
    preferred = [
        {"weight": src.number(1, 100), "preference": node_selector_term(src, node_names)}
        for _ in range(src.number(0, 2))
    ]
    if preferred:
        out["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return out


# --- resources ---------------------------------------------------------------------------


def resource_list(src: Source) -> Obj:
    out: Obj = {}
    for name, forms in (
        ("cpu", CPU_FORMS),
        ("memory", MEMORY_FORMS),
        ("ephemeral-storage", EPHEMERAL_FORMS),
        (GPU, GPU_FORMS),
    ):
        common = name in ("cpu", "memory")
        top = 3 if common else 8
        drawn = src.number(0, top)
        if drawn == top if common else drawn != top:  # cpu, memory: 3 in 4; others: 1 in 9
            continue
        out[name] = src.pick(forms)
    return out


def container(src: Source, index: int, init: bool = False) -> Obj:
    out: Obj = {"name": f"{'i' if init else 'c'}{index}", "image": "registry.example/app:1"}
    resources: Obj = {}
    requests = resource_list(src)
    if requests:
        resources["requests"] = requests
    limits: Obj = {}
    if src.number(0, 4) == 4:  # limits only: the API defaults requests to them
        limits = resource_list(src)
        for name in requests:
            limits.pop(name, None)  # never a limit below its request
    if GPU in requests:  # an extended resource cannot be overcommitted: limit = request
        limits[GPU] = requests[GPU]
    if limits:
        resources["limits"] = limits
    if resources:
        out["resources"] = resources
    if not init and src.number(0, 4) == 4:
        port: Obj = {
            "containerPort": 8080,
            "hostPort": src.pick((80, 8080)),
            "protocol": src.pick(("TCP", "UDP")),
        }
        if src.flip():
            port["hostIP"] = src.pick(("127.0.0.1", "0.0.0.0", "10.0.0.1"))
        out["ports"] = [port]
    if init and src.number(0, 3) == 3:
        out["restartPolicy"] = "Always"  # a sidecar
    return out


RESIZE_CONDITIONS: tuple[tuple[Obj, ...], ...] = (
    (),
    ({"type": "PodResizePending", "status": "True", "reason": "Deferred"},),
    ({"type": "PodResizePending", "status": "True", "reason": "Infeasible"},),
    ({"type": "PodResizeInProgress", "status": "True"},),
    (
        {"type": "PodResizeInProgress", "status": "True"},
        {"type": "PodResizePending", "status": "True", "reason": "Infeasible"},
    ),
)


def resize_status(src: Source, spec: Obj, status: Obj) -> None:
    """A bound pod in the middle of an in-place resize: the kubelet's status for some of
    its containers and sidecars (actual and allocated requests that differ from the
    spec's) and a resize condition."""
    for key, status_key in (
        ("containers", "containerStatuses"),
        ("initContainers", "initContainerStatuses"),
    ):
        entries = []
        for c in spec.get(key) or ():
            if key == "initContainers" and c.get("restartPolicy") != "Always" and not src.flip():
                continue  # an ordinary init container's status (which no rule reads), sometimes
            if src.flip():
                continue
            entry: Obj = {"name": c["name"], "resources": {"requests": resource_list(src)}}
            if src.flip():
                entry["allocatedResources"] = resource_list(src)
            entries.append(entry)
        if entries:
            status[status_key] = entries
    conditions = src.pick(RESIZE_CONDITIONS)
    if conditions:
        status["conditions"] = [dict(c) for c in conditions]


# --- objects -----------------------------------------------------------------------------


def node(src: Source, name: str) -> Obj:
    labels: Obj = {}
    if src.number(0, 4) < 4:  # the hostname label, on most nodes only
        labels[HOSTNAME] = name
    for key in NODE_LABEL_KEYS:
        if src.flip():
            pool = NUMERIC_VALUES if key == "example.com/gen" else NODE_LABEL_VALUES
            labels[key] = src.pick(pool)
    taints = []
    tainted = src.number(0, 2) == 2
    for key in src.some(TAINT_KEYS, 2 * tainted):
        taint: Obj = {"key": key, "effect": src.pick(EFFECTS)}
        if src.flip():
            taint["value"] = src.pick(("a", "b"))
        taints.append(taint)
    allocatable: Obj = {
        "cpu": src.pick((8, "4", "4", "2", "2.5", "1500m", "1", "500m")),
        "memory": src.pick(("16Gi", "8e9", "4Gi", "4096Mi", "2G", "1Gi")),
        "pods": src.pick(("110", "110", "110", "3", "1", 4)),
    }
    if src.flip():
        allocatable["ephemeral-storage"] = src.pick(("10Gi", "1Gi", "0"))
    if src.number(0, 2) == 2:
        allocatable[GPU] = src.pick(("1", "2", "0"))
    spec: Obj = {}
    if taints:
        spec["taints"] = taints
    if src.number(0, 9) == 9:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def toleration(src: Source) -> Obj:
    operator = src.pick(("Equal", "Exists", None))
    out: Obj = {}
    if operator == "Exists" and src.flip():
        pass  # an empty key with Exists tolerates every taint (of the effect)
    else:
        out["key"] = src.pick(TAINT_KEYS)
    if operator is not None:
        out["operator"] = operator
    if operator != "Exists" and src.flip():
        out["value"] = src.pick(("a", "b"))
    effect = src.pick(("", *EFFECTS))
    if effect:
        out["effect"] = effect
    if effect == "NoExecute" and src.flip():
        out["tolerationSeconds"] = 300
    return out


def spread_constraint(src: Source) -> Obj:
    when = src.pick(("DoNotSchedule", "ScheduleAnyway"))
    out: Obj = {
        "maxSkew": src.number(1, 3),
        "topologyKey": src.pick(TOPOLOGY_KEYS),
        "whenUnsatisfiable": when,
    }
    selector = pod_selector(src)
    if selector is not None:
        out["labelSelector"] = selector
        free = sorted(set(POD_LABELS) - _selector_keys(selector))
        if src.number(0, 3) == 3 and free:
            out["matchLabelKeys"] = [src.pick(free)]
    if when == "DoNotSchedule" and src.number(0, 2) == 2:
        out["minDomains"] = src.number(1, 3)
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        if src.number(0, 2) == 2:
            out[policy] = src.pick(("Honor", "Ignore"))
    return out


def pod(src: Source, name: str, node_names: tuple[str, ...], bound_to: str = "") -> Obj:
    namespace = src.pick(sorted(NAMESPACES))
    metadata: Obj = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": pod_labels(src),
        "creationTimestamp": f"2024-05-01T10:00:{src.number(0, 59):02d}Z",
    }
    spec: Obj = {
        "containers": [container(src, i) for i in range(src.number(0, 2))],
    }
    if not spec["containers"]:
        spec["containers"] = [{"name": "c0", "image": "registry.example/app:1"}]
    if src.number(0, 4) == 4:
        spec["initContainers"] = [container(src, i, init=True) for i in range(2)]
    spec["priority"] = src.pick((-5, 0, 0, 10, 100, 1000) if bound_to else (0, 100, 1000, 1000))
    if src.flip():
        spec["preemptionPolicy"] = src.pick(("Never", "PreemptLowerPriority"))
    tolerations = [toleration(src) for _ in range(src.number(0, 3) if src.flip() else 0)]
    if tolerations:
        spec["tolerations"] = tolerations
    if src.number(0, 4) == 4:
        key = src.pick(NODE_LABEL_KEYS[:2])
        spec["nodeSelector"] = {key: src.pick(NODE_LABEL_VALUES)}
    affinity: Obj = {}
    if src.number(0, 3) == 3:
        affinity["nodeAffinity"] = node_affinity(src, node_names)
    if src.number(0, 2) == 2:
        affinity.update(pod_affinity(src))
    if affinity:
        spec["affinity"] = affinity
    if src.number(0, 2) == 2:
        constraints: dict[tuple[str, str], Obj] = {}
        for _ in range(src.number(1, 2)):  # the API server refuses a repeated pair
            drawn = spread_constraint(src)
            constraints.setdefault((drawn["topologyKey"], drawn["whenUnsatisfiable"]), drawn)
        spec["topologySpreadConstraints"] = list(constraints.values())
    status: Obj = {"phase": "Pending"}
    if bound_to:
        spec["nodeName"] = bound_to
        status = {
            "phase": "Running",
            "startTime": f"2024-05-01T11:{src.number(0, 59):02d}:00Z",
        }
        if src.number(0, 2) == 2:
            resize_status(src, spec, status)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def disruption_budget(src: Source, index: int) -> Obj:
    spec: Obj = {"minAvailable": 1}
    selector = pod_selector(src)
    if selector is not None:
        spec["selector"] = selector
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": f"pdb-{index}",
            "namespace": src.pick(sorted(NAMESPACES)),
        },
        "spec": spec,
        "status": {"disruptionsAllowed": src.number(0, 2)},
    }


def namespaces() -> list[Obj]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": labels}}
        for n, labels in NAMESPACES.items()
    ]


# --- storage ---------------------------------------------------------------------------------

DRIVER = "csi.example.com"
CLASSES = ("wffc", "dyn", "imm")
"""WaitForFirstConsumer without a provisioner (local PVs), WaitForFirstConsumer with
``DRIVER`` as provisioner, Immediate."""
SIZES = ("1Gi", "2Gi", "5Gi", "500Mi")
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod", "ReadWriteMany")


def storage_classes(src: Source) -> list[Obj]:
    dynamic: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "dyn"},
        "provisioner": DRIVER,
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    if src.number(0, 2) == 2:
        values = src.some(NODE_LABEL_VALUES[:3], 2, min_size=1)
        dynamic["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": ZONE, "values": values}]}
        ]
    local = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "wffc"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    immediate = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "imm"},
        "provisioner": DRIVER,
        "volumeBindingMode": "Immediate",
    }
    driver = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": DRIVER},
        "spec": {"storageCapacity": src.number(0, 2) == 2},
    }
    capacities = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIStorageCapacity",
            "metadata": {"name": f"cap-{i}", "namespace": "default"},
            "storageClassName": "dyn",
            "capacity": src.pick(SIZES),
            "nodeTopology": {"matchLabels": {ZONE: src.pick(NODE_LABEL_VALUES[:3])}},
        }
        for i in range(src.number(0, 2))
    ]
    return [dynamic, local, immediate, driver, *capacities]


def volume_object(src: Source, name: str, node_names: Sequence[str]) -> Obj:
    """A PV: a local one on one node (class wffc), or a CSI one of ``DRIVER``, some with
    zone labels."""
    spec: Obj = {
        "capacity": {"storage": src.pick(SIZES)},
        "accessModes": src.some(ACCESS_MODES, 2, min_size=1),
        "persistentVolumeReclaimPolicy": "Retain",
    }
    labels: Obj = {}
    if src.flip():
        spec["storageClassName"] = "wffc"
        spec["local"] = {"path": f"/mnt/{name}"}
        host = src.pick(node_names)
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [host]}]}
                ]
            }
        }
    else:
        spec["storageClassName"] = src.pick(("dyn", "wffc"))
        spec["csi"] = {"driver": DRIVER, "volumeHandle": f"h-{name}"}
        if src.flip():
            labels[ZONE] = src.pick(NODE_LABEL_VALUES[:3])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"phase": "Available"},
    }


def claim_object(src: Source, name: str, namespace: str, class_name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": {
            "storageClassName": class_name,
            "accessModes": src.some(ACCESS_MODES[:3], 1, min_size=1),
            "resources": {"requests": {"storage": src.pick(SIZES)}},
        },
        "status": {"phase": "Pending"},
    }


def bind(pv: Obj, claim: Obj) -> None:
    """Claim and PV bound to each other, as the PV controller leaves them."""
    meta = claim["metadata"]
    pv["spec"]["claimRef"] = {
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
    }
    pv["status"] = {"phase": "Bound"}
    claim["spec"]["volumeName"] = pv["metadata"]["name"]
    claim["spec"]["storageClassName"] = pv["spec"]["storageClassName"]
    meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    claim["status"] = {"phase": "Bound"}


def add_storage(src: Source, names: tuple[str, ...], pods: list[Obj]) -> list[Obj]:
    """Storage for a cluster: classes, CSINodes on some nodes, PVs, and claims some pods
    use (unbound of each class, bound to a PV, shared between a bound and a pending pod,
    inline GCE disks that may conflict). Adds the volumes to the pods."""
    if not src.number(0, 2):
        return []
    objs = storage_classes(src)
    for name in src.some(names, len(names)):
        count = src.number(0, 3)
        objs.append(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": name},
                "spec": {
                    "drivers": [{"name": DRIVER, "nodeID": name, "allocatable": {"count": count}}]
                },
            }
        )
    volumes = [volume_object(src, f"pv-{i}", names) for i in range(src.number(0, 6))]
    claims: list[Obj] = []
    free = list(volumes)
    for i, pod_obj in enumerate(pods):
        if src.number(0, 2) == 0:
            continue
        namespace = pod_obj["metadata"]["namespace"]
        used: list[Obj] = []
        for j in range(src.number(1, 2)):
            kind = src.pick(("claim", "bound", "shared", "gce"))
            if kind == "gce":
                disk = {"pdName": src.pick(("disk-a", "disk-b")), "readOnly": src.flip()}
                used.append({"name": f"g{j}", "gcePersistentDisk": disk})
                continue
            if kind == "shared" and claims:
                shared = [c for c in claims if c["metadata"]["namespace"] == namespace]
                if shared:
                    claim_name = src.pick(shared)["metadata"]["name"]
                    used.append(
                        {"name": f"v{j}", "persistentVolumeClaim": {"claimName": claim_name}}
                    )
                    continue
            claim = claim_object(src, f"c{i}-{j}", namespace, src.pick(CLASSES))
            if kind == "bound" and free:
                bind(free.pop(src.number(0, len(free) - 1)), claim)
            claims.append(claim)
            used.append(
                {"name": f"v{j}", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
            )
        pod_obj["spec"]["volumes"] = used
    return [*objs, *volumes, *claims]


# --- dynamic resource allocation ----------------------------------------------------------

DRA_DRIVER = "gpu.fuzz.example"
DRA_CLASS = "gpu"
MODELS = ("a", "b")


def model_selector(model: str) -> str:
    """The one CEL selector the fuzz writes (the oracle reads the model back out)."""
    return f'device.attributes["{DRA_DRIVER}"].model == "{model}"'


def add_resources(src: Source, names: tuple[str, ...], pending: list[Obj]) -> list[Obj]:
    """Dynamic resource allocation for a cluster: a class of the driver's devices, a
    slice on some nodes (devices of two models), claims some pending pods use (new, with
    or without a selector on the model; already allocated on a node; shared with another
    pod; missing), and allocated claims no pending pod uses, holding devices."""
    if not src.number(0, 2):
        return []
    objs: list[Obj] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRA_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
        }
    ]
    devices: list[tuple[str, str]] = []
    for name in src.some(names, len(names)):
        models = [src.pick(MODELS) for _ in range(src.number(0, 3))]
        devices.extend((name, f"dev-{i}") for i in range(len(models)))
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{DRA_DRIVER}"},
                "spec": {
                    "driver": DRA_DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"dev-{i}", "attributes": {"model": {"string": m}}}
                        for i, m in enumerate(models)
                    ],
                },
            }
        )
    free = list(devices)
    claims: list[Obj] = []

    def claim(name: str, namespace: str, *, allocate: bool) -> Obj:
        exactly: Obj = {"deviceClassName": DRA_CLASS, "count": src.number(1, 2)}
        if src.flip():
            exactly["selectors"] = [{"cel": {"expression": model_selector(src.pick(MODELS))}}]
        body: Obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        }
        if allocate and free:
            node, device = free.pop(src.number(0, len(free) - 1))
            exactly["count"] = 1
            exactly.pop("selectors", None)
            body["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRA_DRIVER, "pool": node, "device": device}
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node]}
                                ]
                            }
                        ]
                    },
                }
            }
        claims.append(body)
        return body

    for i in range(src.number(0, 2)):  # holding devices, used by no pending pod
        claim(f"held-{i}", "default", allocate=True)
    for i, pod_obj in enumerate(pending):
        if src.number(0, 1) == 0:
            continue
        namespace = pod_obj["metadata"]["namespace"]
        entries: list[Obj] = []
        for j in range(src.number(1, 2)):
            kind = src.pick(("new", "allocated", "shared", "missing"))
            name = f"rc{i}-{j}"
            if kind == "missing":
                name = "ghost"
            elif kind == "shared" and any(c["metadata"]["namespace"] == namespace for c in claims):
                name = src.pick([c for c in claims if c["metadata"]["namespace"] == namespace])[
                    "metadata"
                ]["name"]
            else:
                claim(name, namespace, allocate=kind == "allocated")
            if all(e["resourceClaimName"] != name for e in entries):
                entries.append({"name": f"r{j}", "resourceClaimName": name})
        pod_obj["spec"]["resourceClaims"] = entries
    return [*objs, *claims]


def build_cluster(
    src: Source, max_nodes: int = 6, max_bound: int = 8, max_pending: int = 4
) -> list[Obj]:
    """A whole cluster file's objects: Namespaces, Nodes, bound then pending Pods, PDBs,
    and (in two clusters of three) storage: classes, CSI objects, PVs and claims; and (as
    often) dynamic resource allocation: a class, slices, ResourceClaims."""
    count = src.number(1, max_nodes)
    names = tuple(f"n{i}" for i in range(count))
    nodes = [node(src, name) for name in names]
    bound = [
        pod(src, f"b{i}", names, bound_to=src.pick(names)) for i in range(src.number(0, max_bound))
    ]
    pending = [pod(src, f"p{i}", names) for i in range(src.number(1, max_pending))]
    budgets = [disruption_budget(src, i) for i in range(src.number(0, 2))]
    storage = add_storage(src, names, [*bound, *pending])
    resources = add_resources(src, names, pending)
    return [*namespaces(), *nodes, *bound, *pending, *budgets, *storage, *resources]


@st.composite
def cluster(
    draw: st.DrawFn, max_nodes: int = 6, max_bound: int = 8, max_pending: int = 4
) -> list[Obj]:
    """:func:`build_cluster` under hypothesis."""
    return build_cluster(HypothesisSource(draw), max_nodes, max_bound, max_pending)


def random_cluster(rng: random.Random) -> list[Obj]:
    """:func:`build_cluster` from plain random draws (the long run)."""
    return build_cluster(RandomSource(rng))


# --- invalid objects ---------------------------------------------------------------------


def _first_container(obj: Obj) -> Obj:
    first: Obj = obj["spec"]["containers"][0]
    return first


def _set_requests(obj: Obj, name: str, amount: str) -> None:
    _first_container(obj).setdefault("resources", {}).setdefault("requests", {})[name] = amount


def _anti_term(obj: Obj, term: Obj) -> None:
    anti = obj["spec"].setdefault("affinity", {}).setdefault("podAntiAffinity", {})
    anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).insert(0, term)


def _preferred_affinity(obj: Obj, weight: int) -> None:
    block = obj["spec"].setdefault("affinity", {}).setdefault("podAffinity", {})
    block.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).insert(
        0, {"weight": weight, "podAffinityTerm": {"topologyKey": ZONE, "labelSelector": {}}}
    )


INVALID_POD_MUTATIONS: dict[str, tuple[str, Any]] = {
    "negative-quantity": (
        "spec.containers[0].resources.requests.cpu",
        lambda o: _set_requests(o, "cpu", "-1"),
    ),
    "unparsable-quantity": (
        "spec.containers[0].resources.requests.memory",
        lambda o: _set_requests(o, "memory", "1.5.3Gi"),
    ),
    "unknown-selector-operator": (
        "labelSelector.matchExpressions[0].operator",
        lambda o: _anti_term(
            o,
            {
                "topologyKey": ZONE,
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]},
            },
        ),
    ),
    "in-without-values": (
        "labelSelector.matchExpressions[0].values",
        lambda o: _anti_term(
            o,
            {
                "topologyKey": ZONE,
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]},
            },
        ),
    ),
    "over-long-label-value": (
        "metadata.labels.app",
        lambda o: o["metadata"].setdefault("labels", {}).update(app="x" * 64),
    ),
    "missing-topology-key": (
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".topologyKey",
        lambda o: _anti_term(o, {"labelSelector": {}}),
    ),
    "max-skew-zero": (
        "spec.topologySpreadConstraints[0].maxSkew",
        lambda o: o["spec"].update(
            topologySpreadConstraints=[
                {"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
            ]
        ),
    ),
    "weight-zero": (
        "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        lambda o: _preferred_affinity(o, 0),
    ),
    "weight-over-100": (
        "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        lambda o: _preferred_affinity(o, 101),
    ),
    "node-affinity-weight-zero": (
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        lambda o: o["spec"].update(
            affinity={
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "preference": {}}
                    ]
                }
            }
        ),
    ),
    "unknown-toleration-operator": (
        "spec.tolerations[0].operator",
        lambda o: o["spec"].update(tolerations=[{"key": "k", "operator": "Maybe"}]),
    ),
    "unknown-preemption-policy": (
        "spec.preemptionPolicy",
        lambda o: o["spec"].update(preemptionPolicy="Sometimes"),
    ),
}
"""Mutations the API server would reject: name -> (the field path the error must
name, the mutation of a valid pod)."""


@st.composite
def invalid_cluster(draw: st.DrawFn) -> tuple[list[Obj], str, str]:
    """A valid cluster with one pod broken: the objects, the pod's name, the path."""
    objs = draw(cluster(max_nodes=3, max_bound=3, max_pending=2))
    pods = [o for o in objs if o["kind"] == "Pod"]
    victim = draw(st.sampled_from(pods))
    path, mutate = INVALID_POD_MUTATIONS[draw(st.sampled_from(sorted(INVALID_POD_MUTATIONS)))]
    mutate(victim)
    meta = victim["metadata"]
    return objs, f"Pod {meta['namespace']}/{meta['name']}", path
