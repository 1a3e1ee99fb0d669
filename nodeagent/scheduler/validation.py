"""The API server's validation of the objects the planner reads, so that a cluster file
holding an object no cluster could hold is refused instead of planned.

A plan from ``nodeagent schedule`` is only worth having if the cluster it describes could
exist. The parser (:mod:`nodeagent.scheduler.objects`) reads the fields the plugins use and
refuses what it cannot read; this module refuses, in addition, whatever
``kube-apiserver`` v1.36 refuses on create (``ValidatePodCreate``, ``ValidateNode``,
``pkg/apis/core/validation``; ``ValidatePodDisruptionBudget``; a Namespace's name) among
the fields of the kinds the planner reads, with the
default feature gates: names, labels and annotations, node selectors and affinity
(operators and how many values each takes), tolerations (operator, value and effect
combinations), topology spread constraints, resource names, quantities and their
request/limit rules, container names, images and ports, scheduling gates. The first
error is raised as a :class:`~nodeagent.base.errors.ConfigError` naming the object, the
field path, the value and what is allowed.

The live scheduler does not call it: its objects come from the API server, which has
validated them already.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from nodeagent.k8s import quantities
from nodeagent.k8s.resources import CPU, EPHEMERAL_STORAGE, HUGEPAGES_PREFIX, MEMORY
from nodeagent.scheduler import api
from nodeagent.scheduler.fieldpath import FieldPath

_DECIMAL_INTEGER = re.compile(r"^(0|-?[1-9][0-9]*)$")
"""``content.IsDecimalInteger``: no sign but ``-``, no leading zeros, no ``-0``."""
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_ANNOTATIONS_BYTES = 256 * 1024
"""``TotalAnnotationSizeLimitB``."""

NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
TOLERATION_OPERATORS = ("Equal", "Exists")
"""``Gt``/``Lt`` need the TaintTolerationComparisonOperators gate, off by default."""
TAINT_EFFECTS = tuple(api.TaintEffect)
PROTOCOLS = ("TCP", "UDP", "SCTP")
STANDARD_CONTAINER_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE)
STANDARD_RESOURCES = (*STANDARD_CONTAINER_RESOURCES, "pods", "storage")
"""``IsStandardResourceName`` for what nodes report (plus the quota names, never seen
on a Node)."""

_LABEL_KEY_RULE = (
    "a label key: an optional DNS subdomain prefix and '/', then at most 63 alphanumerics,"
    " '-', '_', '.', starting and ending alphanumeric"
)
_LABEL_VALUE_RULE = (
    "a label value: at most 63 alphanumerics, '-', '_', '.', starting and ending alphanumeric"
)


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def _map(value: Any) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case, without the ABC's isinstance
        return value
    return value if isinstance(value, Mapping) else {}


def _dns_label_ok(value: Any) -> bool:
    text = str(value)
    return len(text) <= 63 and bool(_DNS_LABEL.match(text))


def _dns_subdomain_ok(value: Any) -> bool:
    text = str(value)
    return len(text) <= 253 and bool(_DNS_SUBDOMAIN.match(text))


def dns_label(value: Any, where: FieldPath) -> None:
    if not _dns_label_ok(value):
        raise where.fail(
            value,
            "a DNS label: at most 63 lowercase alphanumerics or '-', alphanumeric at both ends",
        )


def dns_subdomain(value: Any, where: FieldPath) -> None:
    if not _dns_subdomain_ok(value):
        raise where.fail(
            value,
            "a DNS subdomain: at most 253 lowercase alphanumerics, '-' or '.', each part"
            " alphanumeric at both ends",
        )


@functools.lru_cache(maxsize=16384)
def _is_key(value: str) -> bool:
    """Memoised: a cluster repeats a few hundred keys, values and resource names over
    thousands of objects."""
    return api.is_label_key(value)


@functools.lru_cache(maxsize=16384)
def _is_value(value: str) -> bool:
    return api.is_label_value(value)


def label_key(value: Any, where: FieldPath) -> None:
    if not isinstance(value, str) or not _is_key(value):
        raise where.fail(value, _LABEL_KEY_RULE)


def label_value(value: Any, where: FieldPath) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not _is_value(value):
        raise where.fail(value, _LABEL_VALUE_RULE)


def labels(value: Any, where: FieldPath) -> None:
    for key, text in _map(value).items():
        # the path is made only for an error: most objects have none
        if not (isinstance(key, str) and _is_key(key)):
            label_key(key, where / str(key))
        if text is not None and not (isinstance(text, str) and _is_value(text)):
            label_value(text, where / str(key))


def annotation_map(value: Any, where: FieldPath) -> None:
    total = 0
    for key, text in _map(value).items():
        if not _is_key(str(key).lower()):
            raise (where / str(key)).fail(key, "an annotation key: " + _LABEL_KEY_RULE[13:])
        total += len(str(key)) + len(str(text or ""))
    if total > MAX_ANNOTATIONS_BYTES:
        raise where.fail(
            f"{total} bytes", f"annotations may take at most {MAX_ANNOTATIONS_BYTES} bytes"
        )


def metadata(meta: Mapping[str, Any], where: FieldPath, *, namespaced: bool) -> None:
    name = meta.get("name")
    if not name:
        raise (where / "name").fail(name, "a name is required")
    if not _dns_subdomain_ok(name):
        dns_subdomain(name, where / "name")
    namespace = meta.get("namespace")
    if namespaced and namespace and not _dns_label_ok(namespace):
        dns_label(namespace, where / "namespace")
    labels(meta.get("labels"), where / "labels")
    annotation_map(meta.get("annotations"), where / "annotations")
    for i, ref in enumerate(_list(meta.get("ownerReferences"))):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not _map(ref).get(key):
                raise (where / "ownerReferences" / i / key).fail(
                    _map(ref).get(key), "required in an owner reference"
                )


# --- resources ---------------------------------------------------------------------------


def _native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _hugepages(name: str) -> bool:
    if not name.startswith(HUGEPAGES_PREFIX):
        return False
    try:
        return quantities.quantity_value(name.removeprefix(HUGEPAGES_PREFIX)) > 0
    except (ValueError, TypeError, ArithmeticError):
        return False


def _extended(name: str) -> bool:
    """``IsExtendedResourceName``."""
    return (
        not _native(name)
        and not name.startswith("requests.")
        and api.is_label_key("requests." + name)
    )


def _overcommit_allowed(name: str) -> bool:
    return _native(name) and not name.startswith(HUGEPAGES_PREFIX)


class Kind:
    """Where a resource list is: what its names may be."""

    CONTAINER = "container"
    POD = "pod"
    OTHER = "other"


@functools.lru_cache(maxsize=4096)
def _name_problem(name: str, kind: str) -> str | None:
    """``validateResourceName`` (``validateContainerResourceName`` for a container,
    ``validatePodResourceName`` for the pod level): what is wrong, or None."""
    if not api.is_label_key(name):
        return "a resource name: a qualified name such as cpu or example.com/gpu"
    container = kind == Kind.CONTAINER
    if "/" not in name:
        allowed = STANDARD_CONTAINER_RESOURCES if container else STANDARD_RESOURCES
        if name not in allowed and not _hugepages(name):
            return (
                f"a standard resource ({', '.join(allowed)}, hugepages-<size>) or a fully"
                " qualified name such as example.com/gpu"
            )
    elif container and not _native(name) and not _extended(name):
        return "an extended resource name such as example.com/gpu"
    if kind == Kind.POD and name not in (CPU, MEMORY) and not name.startswith(HUGEPAGES_PREFIX):
        return "pod-level resources are cpu, memory and hugepages-<size>"
    return None


def resource_name(name: str, where: FieldPath, *, kind: str) -> None:
    problem = _name_problem(name, kind)
    if problem is not None:
        raise where.fail(name, problem)


def _amount_or_problem(name: str, value: Any) -> Decimal | str:
    """``ValidateResourceQuantityValue``: non-negative; a whole number for extended
    resources (``IsIntegerResourceName``). The amount, or what is wrong."""
    try:
        amount = quantities.quantity_value(value)
    except (ValueError, TypeError, ArithmeticError):
        return "a Kubernetes quantity such as 500m, 2, 1Gi"
    if amount < 0:
        return "a non-negative quantity"
    if _extended(name) and amount != amount.to_integral_value():
        return f"{name} takes whole numbers only"
    return amount


_cached_amount = functools.lru_cache(maxsize=8192)(_amount_or_problem)


def resource_quantity(name: str, value: Any, where: FieldPath) -> Decimal:
    try:
        found = _cached_amount(name, value)
    except TypeError:  # unhashable: a list or a mapping where a quantity belongs
        found = _amount_or_problem(name, value)
    if isinstance(found, str):
        raise where.fail(value, found)
    return found


def resource_list(value: Any, where: FieldPath, *, kind: str) -> dict[str, Decimal]:
    """Each name and amount checked; the path made only for an error."""
    out: dict[str, Decimal] = {}
    for name, amount in _map(value).items():
        key = str(name)
        if _name_problem(key, kind) is not None:
            resource_name(key, where / key, kind=kind)
        try:
            found = _cached_amount(key, amount)
        except TypeError:
            found = _amount_or_problem(key, amount)
        out[key] = (
            found if not isinstance(found, str) else resource_quantity(key, amount, where / key)
        )
    return out


def requirements(value: Any, where: FieldPath, *, pod_level: bool = False) -> None:
    """``validateResourceRequirements`` for a container's (or the pod's) ``resources``."""
    res = _map(value)
    kind = Kind.POD if pod_level else Kind.CONTAINER
    limits = resource_list(res.get("limits"), where / "limits", kind=kind)
    requests = resource_list(res.get("requests"), where / "requests", kind=kind)
    names = limits.keys() | requests.keys()
    if any(n.startswith(HUGEPAGES_PREFIX) for n in names) and not names & {CPU, MEMORY}:
        raise where.fail(dict(res), "hugepages require a cpu or memory request or limit")
    for name, request in requests.items():
        limit = limits.get(name)
        if limit is None:
            if not _overcommit_allowed(name):
                raise (where / "limits").fail(
                    None, f"a limit is required for {name}, which cannot be overcommitted"
                )
        elif request != limit and not _overcommit_allowed(name):
            raise (where / "requests").fail(
                res["requests"][name], f"must equal the {name} limit {limit}"
            )
        elif request > limit:
            raise (where / "requests").fail(
                res["requests"][name], f"must be at most the {name} limit {limit}"
            )


# --- selectors ---------------------------------------------------------------------------


def node_selector_requirement(value: Any, where: FieldPath) -> None:
    """``ValidateNodeSelectorRequirement`` (label values checked, as on create)."""
    item = _map(value)
    operator = item.get("operator")
    values = _list(item.get("values"))
    if operator in ("In", "NotIn") and not values:
        raise (where / "values").fail(values, f"{operator} needs at least one value")
    if operator in ("Exists", "DoesNotExist") and values:
        raise (where / "values").fail(values, f"{operator} takes no values")
    if operator in ("Gt", "Lt") and len(values) != 1:
        raise (where / "values").fail(values, f"{operator} takes exactly one value")
    if operator not in NODE_SELECTOR_OPERATORS:
        raise (where / "operator").fail(
            operator, f"expected one of {', '.join(NODE_SELECTOR_OPERATORS)} (case matters)"
        )
    label_key(item.get("key"), where / "key")
    for i, text in enumerate(values):
        label_value(text, where / "values" / i)


def node_field_requirement(value: Any, where: FieldPath) -> None:
    """``ValidateNodeFieldSelectorRequirement``: ``metadata.name`` In/NotIn one name."""
    item = _map(value)
    operator = item.get("operator")
    values = _list(item.get("values"))
    if operator not in ("In", "NotIn"):
        raise (where / "operator").fail(operator, "expected In or NotIn for a field selector")
    if len(values) != 1:
        raise (where / "values").fail(values, f"{operator} on a field takes exactly one value")
    if item.get("key") != "metadata.name":
        raise (where / "key").fail(
            item.get("key"), "the only field a node selector reads is metadata.name"
        )
    dns_subdomain(values[0], where / "values" / 0)


def node_selector_term(value: Any, where: FieldPath) -> None:
    term = _map(value)
    for i, req in enumerate(_list(term.get("matchExpressions"))):
        node_selector_requirement(req, where / "matchExpressions" / i)
    for i, req in enumerate(_list(term.get("matchFields"))):
        node_field_requirement(req, where / "matchFields" / i)


def weight(value: Any, where: FieldPath) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise where.fail(value, "a weight in 1..100")


def node_affinity(value: Any, where: FieldPath) -> None:
    affinity = _map(value)
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        rwhere = where / "requiredDuringSchedulingIgnoredDuringExecution" / "nodeSelectorTerms"
        terms = _list(_map(required).get("nodeSelectorTerms"))
        if not terms:
            raise rwhere.fail(terms, "at least one node selector term is required")
        for i, term in enumerate(terms):
            node_selector_term(term, rwhere / i)
    pwhere = where / "preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(
        _list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
    ):
        weight(_map(item).get("weight"), pwhere / i / "weight")
        node_selector_term(_map(item).get("preference"), pwhere / i / "preference")


def label_selector(value: Any, where: FieldPath) -> set[str]:
    """``ValidateLabelSelector``; the keys it names."""
    selector = _map(value)
    labels(selector.get("matchLabels"), where / "matchLabels")
    keys = set(_map(selector.get("matchLabels")))
    for i, raw in enumerate(_list(selector.get("matchExpressions"))):
        item = _map(raw)
        here = where / "matchExpressions" / i
        operator = item.get("operator")
        values = _list(item.get("values"))
        if operator not in LABEL_SELECTOR_OPERATORS:
            raise (here / "operator").fail(
                operator, f"expected one of {', '.join(LABEL_SELECTOR_OPERATORS)} (case matters)"
            )
        if operator in ("In", "NotIn") and not values:
            raise (here / "values").fail(values, f"{operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise (here / "values").fail(values, f"{operator} takes no values")
        label_key(item.get("key"), here / "key")
        for j, text in enumerate(values):
            label_value(text, here / "values" / j)
        keys.add(str(item.get("key")))
    return keys


def _match_label_keys(value: Any, where: FieldPath, selector: Any, selected: set[str]) -> None:
    keys = _list(value)
    if keys and selector is None:
        raise where.fail(keys, "matchLabelKeys need a labelSelector")
    for i, key in enumerate(keys):
        label_key(key, where / i)


def pod_affinity_term(value: Any, where: FieldPath) -> None:
    term = _map(value)
    selected = (
        label_selector(term.get("labelSelector"), where / "labelSelector")
        if term.get("labelSelector") is not None
        else set()
    )
    if term.get("namespaceSelector") is not None:
        label_selector(term.get("namespaceSelector"), where / "namespaceSelector")
    for i, namespace in enumerate(_list(term.get("namespaces"))):
        dns_label(namespace, where / "namespaces" / i)
    topology = term.get("topologyKey")
    if not topology:
        raise (where / "topologyKey").fail(topology, "a topology key (a label key) is required")
    label_key(topology, where / "topologyKey")
    for key in ("matchLabelKeys", "mismatchLabelKeys"):
        _match_label_keys(term.get(key), where / key, term.get("labelSelector"), selected)
    overlap = set(map(str, _list(term.get("matchLabelKeys")))) & set(
        map(str, _list(term.get("mismatchLabelKeys")))
    )
    if overlap:
        raise (where / "mismatchLabelKeys").fail(
            sorted(overlap), "a key may not be in both matchLabelKeys and mismatchLabelKeys"
        )


def pod_affinity(value: Any, where: FieldPath) -> None:
    affinity = _map(value)
    rwhere = where / "requiredDuringSchedulingIgnoredDuringExecution"
    for i, term in enumerate(_list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))):
        pod_affinity_term(term, rwhere / i)
    pwhere = where / "preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(
        _list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
    ):
        weight(_map(item).get("weight"), pwhere / i / "weight")
        pod_affinity_term(_map(item).get("podAffinityTerm"), pwhere / i / "podAffinityTerm")


# --- the pod spec ------------------------------------------------------------------------


def toleration(value: Any, where: FieldPath, *, comparison: bool = False) -> None:
    """``ValidateTolerations``; ``comparison``: the TaintTolerationComparisonOperators
    gate is on (``Gt``/``Lt`` with a decimal int64 value)."""
    item = _map(value)
    key = item.get("key") or ""
    operator = item.get("operator") or ""
    text = item.get("value") or ""
    effect = item.get("effect") or ""
    if key:
        label_key(key, where / "key")
    elif operator != "Exists":
        raise (where / "operator").fail(
            operator, "must be Exists when the key is empty (it tolerates every taint)"
        )
    if item.get("tolerationSeconds") is not None and effect != "NoExecute":
        raise (where / "effect").fail(effect, "must be NoExecute when tolerationSeconds is set")
    if operator in ("", "Equal"):
        if not api.is_label_value(str(text)):
            raise (where / "value").fail(text, _LABEL_VALUE_RULE)
    elif operator == "Exists":
        if text:
            raise (where / "value").fail(text, "must be empty when the operator is Exists")
    elif operator in ("Gt", "Lt") and comparison:
        if not _DECIMAL_INTEGER.match(str(text)) or not -(2**63) <= int(text) < 2**63:
            raise (where / "value").fail(text, f"{operator} compares with a decimal 64-bit integer")
    else:
        raise (where / "operator").fail(
            operator,
            f"expected one of {', '.join(TOLERATION_OPERATORS)} (Gt and Lt need the"
            " TaintTolerationComparisonOperators feature gate, off in v1.36)",
        )
    if effect and effect not in TAINT_EFFECTS:
        raise (where / "effect").fail(effect, f"expected one of {', '.join(TAINT_EFFECTS)}")


def spread_constraints(value: Any, where: FieldPath) -> None:
    """``validateTopologySpreadConstraints``."""
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(_list(value)):
        item = _map(raw)
        here = where / i
        skew = item.get("maxSkew")
        if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
            raise (here / "maxSkew").fail(skew, "an integer greater than zero")
        topology = item.get("topologyKey")
        if not topology:
            raise (here / "topologyKey").fail(topology, "a topology key (a label key) is required")
        label_key(topology, here / "topologyKey")
        when = item.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise (here / "whenUnsatisfiable").fail(
                when, "expected DoNotSchedule or ScheduleAnyway"
            )
        min_domains = item.get("minDomains")
        if min_domains is not None:
            if isinstance(min_domains, bool) or not isinstance(min_domains, int) or min_domains < 1:
                raise (here / "minDomains").fail(min_domains, "an integer greater than zero")
            if when != "DoNotSchedule":
                raise (here / "minDomains").fail(
                    min_domains, "only with whenUnsatisfiable: DoNotSchedule"
                )
        pair = (str(topology), str(when))
        if pair in seen:
            raise (here / "{topologyKey, whenUnsatisfiable}").fail(
                f"{topology}, {when}", "each pair may appear once"
            )
        seen.add(pair)
        for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            if item.get(policy) is not None and item.get(policy) not in ("Honor", "Ignore"):
                raise (here / policy).fail(item.get(policy), "expected Honor or Ignore")
        selected = (
            label_selector(item.get("labelSelector"), here / "labelSelector")
            if item.get("labelSelector") is not None
            else set()
        )
        _match_label_keys(
            item.get("matchLabelKeys"), here / "matchLabelKeys", item.get("labelSelector"), selected
        )


def _port(value: Any, where: FieldPath, *, required: bool) -> None:
    if value is None and not required:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (0 if not required else 1) <= value <= 65535
    ):
        raise where.fail(
            value, "a port number in 1..65535" if required else "a port number in 0..65535"
        )


def container(value: Any, where: FieldPath, *, init: bool) -> str:
    item = _map(value)
    name = item.get("name")
    if not name:
        raise (where / "name").fail(name, "a container name is required")
    if not _dns_label_ok(name):
        dns_label(name, where / "name")
    if not item.get("image"):
        raise (where / "image").fail(item.get("image"), "an image is required")
    if item.get("resources"):
        requirements(item.get("resources"), where / "resources")
    policy = item.get("restartPolicy")
    if init and policy is not None and policy != "Always":
        raise (where / "restartPolicy").fail(
            policy, "an init container's restartPolicy may only be Always"
        )
    for i, raw in enumerate(_list(item.get("ports"))):
        port = _map(raw)
        _port(port.get("containerPort"), where / "ports" / i / "containerPort", required=True)
        _port(port.get("hostPort"), where / "ports" / i / "hostPort", required=False)
        protocol = port.get("protocol")
        if protocol is not None and protocol not in PROTOCOLS:
            raise (where / "ports" / i / "protocol").fail(
                protocol, f"expected one of {', '.join(PROTOCOLS)}"
            )
    return str(name)


def pod_spec(spec: Mapping[str, Any], where: FieldPath, *, comparison: bool = False) -> None:
    containers = _list(spec.get("containers"))
    if not containers:
        raise (where / "containers").fail(containers, "a pod needs at least one container")
    names: set[str] = set()
    for key, init in (("initContainers", True), ("containers", False)):
        for i, raw in enumerate(_list(spec.get(key))):
            name = container(raw, where / key / i, init=init)
            if name in names:
                raise (where / key / i / "name").fail(
                    name, "container names must be unique in a pod"
                )
            names.add(name)
    if spec.get("nodeSelector"):
        labels(spec.get("nodeSelector"), where / "nodeSelector")
    for key in ("nodeName", "priorityClassName"):  # a schedulerName's form is not checked
        value = spec.get(key)
        # (the parser refuses what is not a string)
        if value and isinstance(value, str) and not _dns_subdomain_ok(value):
            dns_subdomain(value, where / key)
    affinity = _map(spec.get("affinity"))
    if affinity.get("nodeAffinity") is not None:
        node_affinity(affinity.get("nodeAffinity"), where / "affinity" / "nodeAffinity")
    for kind in ("podAffinity", "podAntiAffinity"):
        if affinity.get(kind) is not None:
            pod_affinity(affinity.get(kind), where / "affinity" / kind)
    for i, raw in enumerate(_list(spec.get("tolerations"))):
        toleration(raw, where / "tolerations" / i, comparison=comparison)
    if spec.get("topologySpreadConstraints"):
        spread_constraints(
            spec.get("topologySpreadConstraints"), where / "topologySpreadConstraints"
        )
    gates: set[str] = set()
    for i, raw in enumerate(_list(spec.get("schedulingGates"))):
        gate = _map(raw).get("name")
        if not isinstance(gate, str) or not api.is_label_key(gate):
            raise (where / "schedulingGates" / i / "name").fail(
                gate, "a qualified name such as example.com/gate"
            )
        if gate in gates:
            raise (where / "schedulingGates" / i / "name").fail(gate, "each gate may appear once")
        gates.add(gate)
    if spec.get("overhead"):
        resource_list(spec.get("overhead"), where / "overhead", kind=Kind.OTHER)
    if spec.get("resources") is not None:
        requirements(spec.get("resources"), where / "resources", pod_level=True)
    policy = spec.get("preemptionPolicy")
    if policy is not None and policy not in (api.PREEMPT_LOWER_PRIORITY, api.PREEMPT_NEVER):
        raise (where / "preemptionPolicy").fail(
            policy, f"expected {api.PREEMPT_LOWER_PRIORITY} or {api.PREEMPT_NEVER}"
        )


def pod(obj: Mapping[str, Any], *, comparison: bool = False) -> None:
    """Refuse a Pod the API server would not create (``comparison``: the
    TaintTolerationComparisonOperators gate is on)."""
    meta = _map(obj.get("metadata"))
    where = FieldPath(f"Pod {meta.get('namespace') or 'default'}/{meta.get('name')}")
    metadata(meta, where / "metadata", namespaced=True)
    pod_spec(_map(obj.get("spec")), where / "spec", comparison=comparison)


def node(obj: Mapping[str, Any]) -> None:
    """Refuse a Node the API server would not create (``ValidateNode``)."""
    meta = _map(obj.get("metadata"))
    where = FieldPath(f"Node {meta.get('name')}")
    metadata(meta, where / "metadata", namespaced=False)
    seen: set[tuple[str, str]] = set()
    twhere = where / "spec" / "taints"
    for i, raw in enumerate(_list(_map(obj.get("spec")).get("taints"))):
        taint = _map(raw)
        label_key(taint.get("key"), twhere / i / "key")
        label_value(taint.get("value"), twhere / i / "value")
        effect = taint.get("effect")
        if effect not in TAINT_EFFECTS:
            raise (twhere / i / "effect").fail(
                effect, f"expected one of {', '.join(TAINT_EFFECTS)}"
            )
        pair = (str(taint.get("key")), str(effect))
        if pair in seen:
            raise (twhere / i).fail(f"{pair[0]}:{pair[1]}", "a key and effect may appear once")
        seen.add(pair)
    status = _map(obj.get("status"))
    for key in ("capacity", "allocatable"):
        resource_list(status.get(key), where / "status" / key, kind=Kind.OTHER)


_PERCENT = re.compile(r"^[0-9]+%$")
UNHEALTHY_POD_EVICTION_POLICIES = ("IfHealthyBudget", "AlwaysAllow")


def _int_or_percent(value: Any, where: FieldPath) -> None:
    """``ValidatePositiveIntOrPercent`` and ``IsNotMoreThan100Percent``."""
    if isinstance(value, str):
        if not _PERCENT.match(value):
            raise where.fail(value, "an integer or a percentage such as 50%")
        if int(value[:-1]) > 100:
            raise where.fail(value, "must not be greater than 100%")
    elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise where.fail(value, "a non-negative integer or a percentage such as 50%")


def disruption_budget(obj: Mapping[str, Any]) -> None:
    """Refuse a PodDisruptionBudget the API server would not create
    (``ValidatePodDisruptionBudgetSpec``)."""
    meta = _map(obj.get("metadata"))
    where = FieldPath(
        f"PodDisruptionBudget {meta.get('namespace') or 'default'}/{meta.get('name')}"
    )
    metadata(meta, where / "metadata", namespaced=True)
    spec = _map(obj.get("spec"))
    swhere = where / "spec"
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        raise swhere.fail(
            {k: spec[k] for k in ("minAvailable", "maxUnavailable")},
            "minAvailable and maxUnavailable cannot both be set",
        )
    for key in ("minAvailable", "maxUnavailable"):
        if spec.get(key) is not None:
            _int_or_percent(spec.get(key), swhere / key)
    if spec.get("selector") is not None:
        label_selector(spec.get("selector"), swhere / "selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in UNHEALTHY_POD_EVICTION_POLICIES:
        raise (swhere / "unhealthyPodEvictionPolicy").fail(
            policy, f"expected one of {', '.join(UNHEALTHY_POD_EVICTION_POLICIES)}"
        )


def namespace(obj: Mapping[str, Any]) -> None:
    """Refuse a Namespace the API server would not create: its name a DNS label."""
    meta = _map(obj.get("metadata"))
    where = FieldPath(f"Namespace {meta.get('name')}")
    metadata(meta, where / "metadata", namespaced=False)
    dns_label(meta.get("name"), where / "metadata" / "name")


def workload(kind: str, obj: Mapping[str, Any]) -> None:
    """The parts the planner reads of a Service, ReplicationController (a plain label
    map for a selector), ReplicaSet or StatefulSet (a label selector)."""
    meta = _map(obj.get("metadata"))
    where = FieldPath(f"{kind} {meta.get('namespace') or 'default'}/{meta.get('name')}")
    metadata(meta, where / "metadata", namespaced=True)
    selector = _map(obj.get("spec")).get("selector")
    if selector is None:
        return
    if kind in ("Service", "ReplicationController"):
        labels(selector, where / "spec" / "selector")
    else:
        label_selector(selector, where / "spec" / "selector")


def priority_class(obj: Mapping[str, Any]) -> None:
    meta = _map(obj.get("metadata"))
    where = FieldPath(f"PriorityClass {meta.get('name')}")
    metadata(meta, where / "metadata", namespaced=False)
    value = obj.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        raise (where / "value").fail(value, "an integer")
    if value > 1_000_000_000 and not str(meta.get("name")).startswith("system-"):
        raise (where / "value").fail(value, "at most 1000000000 (HighestUserDefinablePriority)")


__all__ = ["disruption_budget", "namespace", "node", "pod", "priority_class", "workload"]
