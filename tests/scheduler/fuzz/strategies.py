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

Clusters stay small (at most 6 nodes, 8 bound and 4 pending pods) so an example costs
milliseconds and a long run covers 100,000 of them.
"""

from __future__ import annotations

from typing import Any

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
CPU_FORMS = ("0", "100m", "250m", "500m", "0.5", "1", "1.5", "2", "1e0", "2000m", 1, 2)
MEMORY_FORMS = ("0", "64Mi", "128Mi", "0.5Gi", "1Gi", "1G", "512M", "1e9", "2Gi", 268435456)
EPHEMERAL_FORMS = ("0", "1Gi", "500M", "10Gi")
GPU_FORMS = ("0", "1", "2")


# --- labels and selectors -----------------------------------------------------------------


@st.composite
def pod_labels(draw: st.DrawFn) -> dict[str, str]:
    keys = draw(st.lists(st.sampled_from(sorted(POD_LABELS)), unique=True, max_size=3))
    return {k: draw(st.sampled_from(POD_LABELS[k])) for k in keys}


@st.composite
def label_requirement(draw: st.DrawFn, keys: tuple[str, ...], values: tuple[str, ...]) -> Obj:
    """A ``LabelSelectorRequirement`` (In, NotIn, Exists, DoesNotExist)."""
    operator = draw(st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist")))
    out: Obj = {"key": draw(st.sampled_from(keys)), "operator": operator}
    if operator in ("In", "NotIn"):
        out["values"] = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2))
    return out


@st.composite
def pod_selector(draw: st.DrawFn, allow_nil: bool = True) -> Obj | None:
    """A pod ``labelSelector``: nil, empty (everything), matchLabels, matchExpressions."""
    shape = draw(st.sampled_from(("nil", "empty", "labels", "expressions", "both")))
    if shape == "nil" and allow_nil:
        return None
    if shape in ("nil", "empty"):
        return {}
    out: Obj = {}
    if shape in ("labels", "both"):
        key = draw(st.sampled_from(sorted(POD_LABELS)))
        out["matchLabels"] = {key: draw(st.sampled_from(POD_LABELS[key]))}
    if shape in ("expressions", "both"):
        values = tuple(v for vs in POD_LABELS.values() for v in vs)
        out["matchExpressions"] = draw(
            st.lists(label_requirement(tuple(sorted(POD_LABELS)), values), min_size=1, max_size=2)
        )
    return out


@st.composite
def namespace_selector(draw: st.DrawFn) -> Obj | None:
    return draw(
        st.sampled_from(
            (
                None,
                {},
                {"matchLabels": {"team": "a"}},
                {"matchExpressions": [{"key": "env", "operator": "Exists"}]},
            )
        )
    )


def _selector_keys(selector: Obj) -> set[str]:
    keys = set(selector.get("matchLabels", {}))
    keys |= {r["key"] for r in selector.get("matchExpressions", [])}
    return keys


@st.composite
def pod_affinity_term(draw: st.DrawFn) -> Obj:
    term: Obj = {"topologyKey": draw(st.sampled_from(TOPOLOGY_KEYS))}
    selector = draw(pod_selector())
    if selector is not None:
        term["labelSelector"] = selector
        # The API forbids a key in both the selector and match/mismatchLabelKeys.
        free = sorted(set(POD_LABELS) - _selector_keys(selector))
        if draw(st.booleans()) and free:
            keys = draw(st.lists(st.sampled_from(free), unique=True, max_size=2))
            half = draw(st.integers(0, len(keys)))
            if keys[:half]:
                term["matchLabelKeys"] = keys[:half]
            if keys[half:]:
                term["mismatchLabelKeys"] = keys[half:]
    if draw(st.booleans()):
        term["namespaces"] = draw(
            st.lists(st.sampled_from(sorted(NAMESPACES)), unique=True, max_size=2)
        )
    chosen = draw(namespace_selector())
    if chosen is not None:
        term["namespaceSelector"] = chosen
    return term


@st.composite
def pod_affinity(draw: st.DrawFn) -> Obj:
    out: Obj = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        if not draw(st.booleans()):
            continue
        block: Obj = {}
        required = draw(st.lists(pod_affinity_term(), max_size=2))
        if required:
            block["requiredDuringSchedulingIgnoredDuringExecution"] = required
        preferred = draw(
            st.lists(
                st.builds(
                    lambda w, t: {"weight": w, "podAffinityTerm": t},
                    st.integers(1, 100),
                    pod_affinity_term(),
                ),
                max_size=2,
            )
        )
        if preferred:
            block["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        out[kind] = block
    return out


@st.composite
def node_selector_requirement(draw: st.DrawFn) -> Obj:
    """A ``NodeSelectorRequirement`` with every operator, values as each allows."""
    operator = draw(st.sampled_from(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")))
    out: Obj = {"key": draw(st.sampled_from((*NODE_LABEL_KEYS, HOSTNAME))), "operator": operator}
    if operator in ("In", "NotIn"):
        pool = NODE_LABEL_VALUES + NUMERIC_VALUES
        out["values"] = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2))
    elif operator in ("Gt", "Lt"):
        out["values"] = [draw(st.sampled_from(NUMERIC_VALUES))]
    return out


@st.composite
def node_selector_term(draw: st.DrawFn, node_names: tuple[str, ...]) -> Obj:
    """A term; sometimes empty (it matches nothing), sometimes with matchFields."""
    term: Obj = {}
    expressions = draw(st.lists(node_selector_requirement(), max_size=2))
    if expressions:
        term["matchExpressions"] = expressions
    if draw(st.integers(0, 4)) == 4:
        term["matchFields"] = [
            {
                "key": "metadata.name",
                "operator": draw(st.sampled_from(("In", "NotIn"))),
                "values": [draw(st.sampled_from(node_names))],
            }
        ]
    return term


@st.composite
def node_affinity(draw: st.DrawFn, node_names: tuple[str, ...]) -> Obj:
    out: Obj = {}
    if draw(st.booleans()):
        out["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": draw(
                st.lists(node_selector_term(node_names), min_size=1, max_size=2)
            )
        }
    preferred = draw(
        st.lists(
            st.builds(
                lambda w, t: {"weight": w, "preference": t},
                st.integers(1, 100),
                node_selector_term(node_names),
            ),
            max_size=2,
        )
    )
    if preferred:
        out["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return out


# --- resources ---------------------------------------------------------------------------


@st.composite
def resource_list(draw: st.DrawFn) -> Obj:
    out: Obj = {}
    for name, forms in (
        ("cpu", CPU_FORMS),
        ("memory", MEMORY_FORMS),
        ("ephemeral-storage", EPHEMERAL_FORMS),
        (GPU, GPU_FORMS),
    ):
        if draw(st.integers(0, 3 if name in ("cpu", "memory") else 8)) == 0:
            continue
        out[name] = draw(st.sampled_from(forms))
    return out


@st.composite
def container(draw: st.DrawFn, index: int, init: bool = False) -> Obj:
    out: Obj = {"name": f"{'i' if init else 'c'}{index}", "image": "registry.example/app:1"}
    resources: Obj = {}
    requests = draw(resource_list())
    if requests:
        resources["requests"] = requests
    if draw(st.integers(0, 4)) == 4:  # limits only: the API defaults requests to them
        limits = draw(resource_list())
        for name in requests:
            limits.pop(name, None)  # never a limit below its request
        if limits:
            resources["limits"] = limits
    if resources:
        out["resources"] = resources
    if not init and draw(st.integers(0, 4)) == 4:
        port: Obj = {
            "containerPort": 8080,
            "hostPort": draw(st.sampled_from((80, 8080))),
            "protocol": draw(st.sampled_from(("TCP", "UDP"))),
        }
        if draw(st.booleans()):
            port["hostIP"] = draw(st.sampled_from(("127.0.0.1", "0.0.0.0", "10.0.0.1")))
        out["ports"] = [port]
    if init and draw(st.integers(0, 3)) == 3:
        out["restartPolicy"] = "Always"  # a sidecar
    return out


# --- objects -----------------------------------------------------------------------------


@st.composite
def node(draw: st.DrawFn, name: str) -> Obj:
    labels: Obj = {}
    if draw(st.integers(0, 4)) < 4:  # the hostname label, on most nodes only
        labels[HOSTNAME] = name
    for key in NODE_LABEL_KEYS:
        if draw(st.booleans()):
            pool = NUMERIC_VALUES if key == "example.com/gen" else NODE_LABEL_VALUES
            labels[key] = draw(st.sampled_from(pool))
    taints = []
    tainted = draw(st.integers(0, 2)) == 2
    for key in draw(st.lists(st.sampled_from(TAINT_KEYS), unique=True, max_size=2 * tainted)):
        taint: Obj = {"key": key, "effect": draw(st.sampled_from(EFFECTS))}
        if draw(st.booleans()):
            taint["value"] = draw(st.sampled_from(("a", "b")))
        taints.append(taint)
    allocatable: Obj = {
        "cpu": draw(st.sampled_from((8, "4", "2", "2.5", "1500m", "1", "500m"))),
        "memory": draw(st.sampled_from(("16Gi", "8e9", "4Gi", "4096Mi", "2G", "1Gi"))),
        "pods": draw(st.sampled_from(("110", "3", "110", "1", 4))),
    }
    if draw(st.booleans()):
        allocatable["ephemeral-storage"] = draw(st.sampled_from(("10Gi", "1Gi", "0")))
    if draw(st.integers(0, 2)) == 2:
        allocatable[GPU] = draw(st.sampled_from(("1", "2", "0")))
    spec: Obj = {}
    if taints:
        spec["taints"] = taints
    if draw(st.integers(0, 9)) == 9:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


@st.composite
def toleration(draw: st.DrawFn) -> Obj:
    operator = draw(st.sampled_from(("Equal", "Exists", None)))
    out: Obj = {}
    if operator == "Exists" and draw(st.booleans()):
        pass  # an empty key with Exists tolerates every taint (of the effect)
    else:
        out["key"] = draw(st.sampled_from(TAINT_KEYS))
    if operator is not None:
        out["operator"] = operator
    if operator != "Exists" and draw(st.booleans()):
        out["value"] = draw(st.sampled_from(("a", "b")))
    effect = draw(st.sampled_from(("", *EFFECTS)))
    if effect:
        out["effect"] = effect
    if effect == "NoExecute" and draw(st.booleans()):
        out["tolerationSeconds"] = 300
    return out


@st.composite
def spread_constraint(draw: st.DrawFn) -> Obj:
    when = draw(st.sampled_from(("DoNotSchedule", "ScheduleAnyway")))
    out: Obj = {
        "maxSkew": draw(st.integers(1, 3)),
        "topologyKey": draw(st.sampled_from(TOPOLOGY_KEYS)),
        "whenUnsatisfiable": when,
    }
    selector = draw(pod_selector())
    if selector is not None:
        out["labelSelector"] = selector
        free = sorted(set(POD_LABELS) - _selector_keys(selector))
        if draw(st.integers(0, 3)) == 3 and free:
            out["matchLabelKeys"] = [draw(st.sampled_from(free))]
    if when == "DoNotSchedule" and draw(st.integers(0, 2)) == 2:
        out["minDomains"] = draw(st.integers(1, 3))
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        if draw(st.integers(0, 2)) == 2:
            out[policy] = draw(st.sampled_from(("Honor", "Ignore")))
    return out


@st.composite
def pod(draw: st.DrawFn, name: str, node_names: tuple[str, ...], bound_to: str = "") -> Obj:
    namespace = draw(st.sampled_from(sorted(NAMESPACES)))
    metadata: Obj = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": draw(pod_labels()),
        "creationTimestamp": f"2024-05-01T10:00:{draw(st.integers(0, 59)):02d}Z",
    }
    spec: Obj = {
        "containers": [draw(container(i)) for i in range(draw(st.integers(0, 2)))],
    }
    if not spec["containers"]:
        spec["containers"] = [{"name": "c0", "image": "registry.example/app:1"}]
    if draw(st.integers(0, 4)) == 4:
        spec["initContainers"] = [draw(container(i, init=True)) for i in range(2)]
    spec["priority"] = draw(
        st.sampled_from((-5, 0, 0, 10, 100, 1000))
        if bound_to
        else st.sampled_from((0, 100, 1000, 1000))
    )
    if draw(st.booleans()):
        spec["preemptionPolicy"] = draw(st.sampled_from(("Never", "PreemptLowerPriority")))
    tolerations = draw(st.lists(toleration(), max_size=3 if draw(st.booleans()) else 0))
    if tolerations:
        spec["tolerations"] = tolerations
    if draw(st.integers(0, 4)) == 4:
        key = draw(st.sampled_from(NODE_LABEL_KEYS[:2]))
        spec["nodeSelector"] = {key: draw(st.sampled_from(NODE_LABEL_VALUES))}
    affinity: Obj = {}
    if draw(st.integers(0, 3)) == 3:
        affinity["nodeAffinity"] = draw(node_affinity(node_names))
    if draw(st.integers(0, 2)) == 2:
        affinity.update(draw(pod_affinity()))
    if affinity:
        spec["affinity"] = affinity
    if draw(st.integers(0, 2)) == 2:
        spec["topologySpreadConstraints"] = draw(
            st.lists(spread_constraint(), min_size=1, max_size=2)
        )
    status: Obj = {"phase": "Pending"}
    if bound_to:
        spec["nodeName"] = bound_to
        status = {
            "phase": "Running",
            "startTime": f"2024-05-01T11:{draw(st.integers(0, 59)):02d}:00Z",
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


@st.composite
def disruption_budget(draw: st.DrawFn, index: int) -> Obj:
    spec: Obj = {"minAvailable": 1}
    selector = draw(pod_selector())
    if selector is not None:
        spec["selector"] = selector
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": f"pdb-{index}",
            "namespace": draw(st.sampled_from(sorted(NAMESPACES))),
        },
        "spec": spec,
        "status": {"disruptionsAllowed": draw(st.integers(0, 2))},
    }


def namespaces() -> list[Obj]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": labels}}
        for n, labels in NAMESPACES.items()
    ]


@st.composite
def cluster(
    draw: st.DrawFn, max_nodes: int = 6, max_bound: int = 8, max_pending: int = 4
) -> list[Obj]:
    """A whole cluster file's objects: Namespaces, Nodes, bound then pending Pods, PDBs."""
    count = draw(st.integers(1, max_nodes))
    names = tuple(f"n{i}" for i in range(count))
    nodes = [draw(node(name)) for name in names]
    bound = [
        draw(pod(f"b{i}", names, bound_to=draw(st.sampled_from(names))))
        for i in range(draw(st.integers(0, max_bound)))
    ]
    pending = [draw(pod(f"p{i}", names)) for i in range(draw(st.integers(1, max_pending)))]
    budgets = [draw(disruption_budget(i)) for i in range(draw(st.integers(0, 2)))]
    return [*namespaces(), *nodes, *bound, *pending, *budgets]


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
