"""Kubernetes objects (as ``kubectl get -o yaml|json`` prints them) to scheduler values.

Accepted input: a ``List`` (or ``NodeList``/``PodList``...) with ``items``, several YAML
documents, or a single object; JSON is YAML. Nodes and Pods are required reading,
PriorityClasses resolve ``priorityClassName``, PodDisruptionBudgets are kept for
preemption, and the storage kinds (PersistentVolumes, PersistentVolumeClaims,
StorageClasses, CSINodes, CSIDrivers, CSIStorageCapacities) for the volume plugins;
other kinds are skipped.

What the API server would have defaulted is defaulted here too, so hand-written
fixtures behave like listed objects: a container request missing but a limit present
takes the limit; a Node without ``status.allocatable`` uses ``status.capacity``; a pod
without ``spec.priority`` takes its PriorityClass (or the global default) value.

Bad input raises :class:`~nodeagent.base.errors.ConfigError` naming the object, the field
path, the value and what was expected.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import InvalidOperation
from enum import StrEnum
from typing import Any, TypeVar

import msgspec
import yaml

from nodeagent.base.errors import ConfigError
from nodeagent.k8s import quantities
from nodeagent.k8s.pods import is_terminal
from nodeagent.k8s.pressure import Taint
from nodeagent.k8s.resources import (
    CPU,
    MEMORY,
    NON_ZERO_DEFAULTS,
    STATUS_FIELDS,
    PodResources,
    pod_requests,
    read_pod_resources,
    reads_status,
    resource_list,
)
from nodeagent.scheduler import api, fieldpath, resource_claims, storage, validation

FieldPath = fieldpath.FieldPath
"""Re-exported: plugins and the extender name fields through it."""


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """Everything read from a cluster file, in input order."""

    nodes: tuple[api.Node, ...]
    pods: tuple[api.Pod, ...]
    priority_classes: Mapping[str, int] = field(default_factory=dict)
    disruption_budgets: tuple[api.DisruptionBudget, ...] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Namespace name -> labels (for pod affinity's ``namespaceSelector``)."""
    workloads: tuple[api.Workload, ...] = ()
    storage: storage.StorageObjects = field(default_factory=storage.StorageObjects)
    """PVs, PVCs, StorageClasses, CSINodes, CSIDrivers, CSIStorageCapacities."""
    resources: resource_claims.ResourceObjects = field(
        default_factory=resource_claims.ResourceObjects
    )
    """ResourceClaims, DeviceClasses, ResourceSlices (dynamic resource allocation)."""

    def bound_pods(self) -> Iterator[api.Pod]:
        return (pod for pod in self.pods if pod.node_name)


def _mapping(value: Any, where: FieldPath) -> Mapping[str, Any]:
    if type(value) is dict:  # what JSON decodes to: no ABC check (a tenth of a pod's parse)
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise where.fail(value, "expected a mapping")
    return value


def _sequence(value: Any, where: FieldPath) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise where.fail(value, "expected a list")
    return value


def _string_map(value: Any, where: FieldPath) -> dict[str, str]:
    return {str(k): "" if v is None else str(v) for k, v in _mapping(value, where).items()}


class _Negative(Exception):
    pass


def parse_quantity(name: str, value: Any, where: FieldPath) -> int:
    """``name``'s quantity in base units, rounded up as the API does (cpu in milli-CPU);
    ``where`` is the path of the resource list holding it."""
    try:
        return _base_units(name, value)
    except (ValueError, TypeError, InvalidOperation) as exc:
        raise (where / name).fail(
            value, "expected a Kubernetes quantity such as 500m, 2, 1Gi"
        ) from exc
    except _Negative as exc:  # the API server rejects them; one would hand resources back
        raise (where / name).fail(value, "expected a non-negative quantity") from exc


@functools.lru_cache(maxsize=4096)
def _base_units(name: str, value: Any) -> int:
    """Memoised: a cluster repeats a handful of quantities (100m, 128Mi) thousands of
    times, and the exact Decimal parse is most of a pod's parsing time. Errors are not
    cached."""
    amount = quantities.quantity_value(value)
    if amount < 0:
        raise _Negative
    if name == CPU:
        amount *= 1000
    return math.ceil(amount)


def parse_resource_list(value: Any, where: FieldPath) -> dict[str, int]:
    return resource_list(STRICT, value, where)


class _StrictFields:
    """Fields as the planner reads them: anything malformed is refused, naming its path."""

    def mapping(self, value: Any, where: FieldPath) -> Mapping[str, Any]:
        return _mapping(value, where)

    def sequence(self, value: Any, where: FieldPath) -> Sequence[Any]:
        return _sequence(value, where)

    def quantity(self, resource: str, value: Any, where: FieldPath) -> int:
        return parse_quantity(resource, value, where)


STRICT = _StrictFields()


def unix_time(value: str | datetime) -> float:
    """RFC 3339 text (or a parsed datetime) to Unix seconds; no zone means UTC."""
    if isinstance(value, str):
        return _text_time(value)
    moment = value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@functools.lru_cache(maxsize=4096)
def _text_time(value: str) -> float:
    """:func:`unix_time` of a text: the pods of a scale-up were created within the same few
    seconds, and an API server writes times to the second, so most are read before."""
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _timestamp(value: Any, where: FieldPath) -> float:
    if value is None or value == "":
        return 0.0
    try:
        return unix_time(value if isinstance(value, datetime) else str(value))
    except ValueError as exc:
        raise where.fail(value, "expected an RFC 3339 time such as 2024-05-01T10:00:00Z") from exc


def _int(value: Any, where: FieldPath) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(value, "expected an integer")
    return value


def _bool(value: Any, where: FieldPath) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):  # a quoted "false" must not read as true
        raise where.fail(value, "expected true or false")
    return value


def _text(value: Any, where: FieldPath) -> str:
    """A string field; YAML's unquoted numbers are taken as their text."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise where.fail(value, "expected a string")
    return str(value)


def normalized_image_name(name: str) -> str:
    """kube-scheduler's image key: a name without a tag gets ``:latest``."""
    return name + ":latest" if name.rfind(":") <= name.rfind("/") else name


LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
"""A ``LabelSelectorRequirement``'s operators."""


def _label_key(key: str, where: FieldPath) -> str:
    if not api.is_label_key(key):
        raise where.fail(
            key, "a label key: [prefix/]name, name of at most 63 alphanumerics, '-', '_', '.'"
        )
    return key


def _label_value(value: str, where: FieldPath) -> str:
    if not api.is_label_value(value):
        raise where.fail(
            value,
            "a label value: at most 63 alphanumerics, '-', '_', '.', starting and ending"
            " alphanumeric",
        )
    return value


_VALID_LABELS: set[tuple[str, str]] = set()
"""Label pairs already validated: a cluster's nodes and pods repeat a few thousand of
them (zones, roles, app names), and a regular expression per label and object was a
fifth of reading a node. Cleared when it holds :data:`VALID_LABELS_KEPT`."""
VALID_LABELS_KEPT = 65_536


def _labels(value: Any, where: FieldPath) -> dict[str, str]:
    """``metadata.labels`` (or a ``matchLabels``/``nodeSelector`` map), validated."""
    labels = _string_map(value, where)
    valid = _VALID_LABELS
    for pair in labels.items():
        if pair in valid:
            continue
        key, text = pair
        _label_key(key, where / key)
        _label_value(text, where / key)
        if len(valid) >= VALID_LABELS_KEPT:
            valid.clear()
        valid.add(pair)
    return labels


def _requirements(
    value: Any, where: FieldPath, operators: tuple[str, ...] | None
) -> tuple[api.Requirement, ...]:
    """Requirements; with ``operators``, as the API server admits them: a known
    operator, values as it allows (In/NotIn: some; Exists/DoesNotExist: none). Node
    selector terms are read as written (``None``): the NodeAffinity plugin judges a
    term kube-scheduler cannot parse as matching nothing, whatever its source."""
    out = []
    for i, raw in enumerate(_sequence(value, where)):
        item = _mapping(raw, where / i)
        values = tuple(str(v) for v in _sequence(item.get("values"), where / i / "values"))
        operator = item.get("operator")
        if operators is None:
            out.append(api.Requirement(str(item.get("key", "")), str(operator or ""), values))
            continue
        if operator not in operators:
            raise (where / i / "operator").fail(operator, f"expected one of {', '.join(operators)}")
        if operator in ("In", "NotIn") and not values:
            raise (where / i / "values").fail(list(values), f"{operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise (where / i / "values").fail(list(values), f"{operator} takes no values")
        key = _label_key(str(item.get("key") or ""), where / i / "key")
        out.append(api.Requirement(key, str(operator), values))
    return tuple(out)


def parse_selector_term(value: Any, where: FieldPath) -> api.SelectorTerm:
    term = _mapping(value, where)
    return api.SelectorTerm(
        _requirements(term.get("matchExpressions"), where / "matchExpressions", None),
        _requirements(term.get("matchFields"), where / "matchFields", None),
    )


def parse_node_affinity(
    value: Any, where: FieldPath, *, admitted: bool = False
) -> api.NodeAffinity | None:
    """A ``NodeAffinity`` object (the pod's, or a plugin's ``addedAffinity``). A pod's
    (``admitted``) passed the API server: a preferred weight outside 1..100 is refused;
    kube-scheduler's configuration drops weight-0 added terms instead."""
    if value is None:
        return None
    affinity = _mapping(value, where)
    required_raw = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = None
    if required_raw is not None:
        rwhere = where / "requiredDuringSchedulingIgnoredDuringExecution" / "nodeSelectorTerms"
        terms = _mapping(required_raw, rwhere).get("nodeSelectorTerms")
        required = tuple(
            parse_selector_term(t, rwhere / i) for i, t in enumerate(_sequence(terms, rwhere))
        )
    preferred = []
    pwhere = where / "preferredDuringSchedulingIgnoredDuringExecution"
    for i, raw in enumerate(
        _sequence(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), pwhere)
    ):
        item = _mapping(raw, pwhere / i)
        weight = (_weight if admitted else _int)(item.get("weight", 0), pwhere / i / "weight")
        term = parse_selector_term(item.get("preference"), pwhere / i / "preference")
        preferred.append(api.PreferredTerm(weight, term))
    return api.NodeAffinity(required, tuple(preferred))


def _weight(value: Any, where: FieldPath) -> int:
    """A preferred term's weight: the API admits 1..100."""
    weight = _int(value, where)
    if not 1 <= weight <= 100:
        raise where.fail(weight, "a weight in 1..100")
    return weight


def parse_label_selector(value: Any, where: FieldPath) -> api.LabelSelector | None:
    """A ``metav1.LabelSelector`` (``None`` when absent)."""
    if value is None:
        return None
    raw = _mapping(value, where)
    labels = _labels(raw.get("matchLabels"), where / "matchLabels")
    return api.LabelSelector(
        tuple(sorted(labels.items())),
        _requirements(raw.get("matchExpressions"), where / "matchExpressions", LABEL_OPERATORS),
    )


def _label_keys(value: Any, where: FieldPath) -> tuple[str, ...]:
    return tuple(str(k) for k in _sequence(value, where))


def _own_values(
    keys: tuple[str, ...], labels: Mapping[str, str], operator: str
) -> tuple[api.Requirement, ...]:
    """``matchLabelKeys`` (``In``) / ``mismatchLabelKeys`` (``NotIn``) as requirements on
    the pod's own values; keys the pod does not carry are ignored."""
    return tuple(api.Requirement(k, operator, (labels[k],)) for k in keys if k in labels)


def parse_pod_affinity_term(
    value: Any, where: FieldPath, labels: Mapping[str, str]
) -> api.PodAffinityTerm:
    raw = _mapping(value, where)
    selector = parse_label_selector(raw.get("labelSelector"), where / "labelSelector")
    extra = _own_values(
        _label_keys(raw.get("matchLabelKeys"), where / "matchLabelKeys"), labels, "In"
    ) + _own_values(
        _label_keys(raw.get("mismatchLabelKeys"), where / "mismatchLabelKeys"), labels, "NotIn"
    )
    if selector is not None and extra:
        selector = selector.with_requirements(*extra)
    topology_key = raw.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        raise (where / "topologyKey").fail(topology_key, "a non-empty label key is required")
    _label_key(topology_key, where / "topologyKey")
    return api.PodAffinityTerm(
        topology_key,
        selector,
        frozenset(str(n) for n in _sequence(raw.get("namespaces"), where / "namespaces")),
        parse_label_selector(raw.get("namespaceSelector"), where / "namespaceSelector"),
    )


def _affinity_terms(
    value: Any, where: FieldPath, labels: Mapping[str, str]
) -> tuple[tuple[api.PodAffinityTerm, ...], tuple[api.WeightedPodAffinityTerm, ...]]:
    raw = _mapping(value, where)
    rwhere = where / "requiredDuringSchedulingIgnoredDuringExecution"
    required = tuple(
        parse_pod_affinity_term(t, rwhere / i, labels)
        for i, t in enumerate(
            _sequence(raw.get("requiredDuringSchedulingIgnoredDuringExecution"), rwhere)
        )
    )
    pwhere = where / "preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, t in enumerate(
        _sequence(raw.get("preferredDuringSchedulingIgnoredDuringExecution"), pwhere)
    ):
        item = _mapping(t, pwhere / i)
        weight = _weight(item.get("weight"), pwhere / i / "weight")
        term = parse_pod_affinity_term(
            item.get("podAffinityTerm"), pwhere / i / "podAffinityTerm", labels
        )
        preferred.append(api.WeightedPodAffinityTerm(weight, term))
    return required, tuple(preferred)


def parse_pod_affinity(
    affinity: Mapping[str, Any], where: FieldPath, labels: Mapping[str, str]
) -> api.PodAffinity | None:
    if affinity.get("podAffinity") is None and affinity.get("podAntiAffinity") is None:
        return None
    required, preferred = _affinity_terms(
        affinity.get("podAffinity"), where / "podAffinity", labels
    )
    required_anti, preferred_anti = _affinity_terms(
        affinity.get("podAntiAffinity"), where / "podAntiAffinity", labels
    )
    found = api.PodAffinity(required, preferred, required_anti, preferred_anti)
    return found if found.has_affinity or found.has_anti_affinity else None


def _policy(value: Any, where: FieldPath, default: bool) -> bool:
    """``Honor`` -> True, ``Ignore`` -> False, absent -> the default."""
    if value is None:
        return default
    if value not in ("Honor", "Ignore"):
        raise where.fail(value, "expected Honor or Ignore")
    return bool(value == "Honor")


def parse_spread_constraints(
    value: Any, where: FieldPath, labels: Mapping[str, str]
) -> tuple[api.SpreadConstraint, ...]:
    out = []
    for i, raw in enumerate(_sequence(value, where)):
        item = _mapping(raw, where / i)
        here = where / i
        max_skew = _int(item.get("maxSkew"), here / "maxSkew")
        if max_skew < 1:
            raise (here / "maxSkew").fail(max_skew, "must be greater than zero")
        topology_key = item.get("topologyKey")
        if not isinstance(topology_key, str) or not topology_key:
            raise (here / "topologyKey").fail(topology_key, "a non-empty label key is required")
        when = item.get("whenUnsatisfiable")
        if not isinstance(when, str) or when not in set(api.Unsatisfiable):
            raise (here / "whenUnsatisfiable").fail(
                when, f"expected one of {', '.join(api.Unsatisfiable)}"
            )
        min_domains_raw = item.get("minDomains")
        min_domains = 1
        if min_domains_raw is not None:
            min_domains = _int(min_domains_raw, here / "minDomains")
            if min_domains < 1:
                raise (here / "minDomains").fail(min_domains, "must be greater than zero")
        selector = parse_label_selector(item.get("labelSelector"), here / "labelSelector")
        extra = _own_values(
            _label_keys(item.get("matchLabelKeys"), here / "matchLabelKeys"), labels, "In"
        )
        if selector is not None and extra:
            selector = selector.with_requirements(*extra)
        out.append(
            api.SpreadConstraint(
                max_skew,
                topology_key,
                api.Unsatisfiable(when),
                selector,
                min_domains,
                _policy(item.get("nodeAffinityPolicy"), here / "nodeAffinityPolicy", True),
                _policy(item.get("nodeTaintsPolicy"), here / "nodeTaintsPolicy", False),
            )
        )
    return tuple(out)


def _controller(meta: Mapping[str, Any], where: FieldPath) -> tuple[str, str] | None:
    for i, raw in enumerate(_sequence(meta.get("ownerReferences"), where)):
        ref = _mapping(raw, where / i)
        if ref.get("controller") is True:
            return str(ref.get("kind") or ""), str(ref.get("name") or "")
    return None


def _preempted(status: Mapping[str, Any], where: FieldPath) -> bool:
    for i, raw in enumerate(_sequence(status.get("conditions"), where)):
        condition = _mapping(raw, where / i)
        if (
            condition.get("type") == "DisruptionTarget"
            and condition.get("status") == "True"
            and condition.get("reason") == "PreemptionByScheduler"
        ):
            return True
    return False


TOLERATION_OPERATORS = ("Equal", "Exists", "Gt", "Lt")
"""Gt/Lt: the TaintTolerationComparisonOperators feature (alpha in 1.35)."""


def parse_tolerations(value: Any, where: FieldPath) -> tuple[api.Toleration, ...]:
    out = []
    for i, raw in enumerate(_sequence(value, where)):
        item = _mapping(raw, where / i)
        toleration = api.Toleration(
            key=str(item.get("key") or ""),
            operator=str(item.get("operator") or "Equal"),
            value=str(item.get("value") or ""),
            effect=str(item.get("effect") or ""),
        )
        if toleration.operator not in TOLERATION_OPERATORS:
            raise (where / i / "operator").fail(
                toleration.operator, f"expected one of {', '.join(TOLERATION_OPERATORS)}"
            )
        if toleration.effect and toleration.effect not in set(api.TaintEffect):
            raise (where / i / "effect").fail(
                toleration.effect, f"expected one of {', '.join(api.TaintEffect)}"
            )
        out.append(toleration)
    return tuple(out)


def _host_ports(container: Mapping[str, Any], where: FieldPath) -> list[api.HostPort]:
    out = []
    for i, raw in enumerate(_sequence(container.get("ports"), where / "ports")):
        port = _mapping(raw, where / "ports" / i)
        host_port = port.get("hostPort") or 0
        if _int(host_port, where / "ports" / i / "hostPort") > 0:
            out.append(
                api.HostPort(
                    host_port,
                    str(port.get("protocol") or "TCP"),
                    str(port.get("hostIP") or "0.0.0.0"),
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class _Containers:
    """What a pod's containers say, read once."""

    resources: PodResources
    images: tuple[str, ...]
    """Normalized image names of init containers then containers."""
    host_ports: tuple[api.HostPort, ...]


def _read_containers(
    spec: Mapping[str, Any],
    swhere: FieldPath,
    status: Mapping[str, Any],
    stwhere: FieldPath | None,
) -> _Containers:
    images: list[str] = []
    ports: list[api.HostPort] = []

    def visit(key: str, container: Mapping[str, Any], where: FieldPath) -> None:
        images.append(normalized_image_name(str(container.get("image") or "")))
        if key == "containers":
            ports.extend(_host_ports(container, where))

    resources = read_pod_resources(STRICT, spec, swhere, visit, status=status, status_where=stwhere)
    return _Containers(resources, tuple(images), tuple(ports))


def _image_volumes(volumes: Any, where: FieldPath) -> tuple[str, ...]:
    """The normalized references of the pod's image volumes (``volumes[].image``), which
    ImageLocality counts beside the containers' images (``sumImageScores``) without
    raising its per-container threshold."""
    found = []
    for i, raw in enumerate(_sequence(volumes, where)):
        source = _mapping(raw, where / i).get("image")
        if source is not None:
            reference = _mapping(source, where / i / "image").get("reference")
            found.append(normalized_image_name(_text(reference, where / i / "image" / "reference")))
    return tuple(found)


def _priority(
    spec: Mapping[str, Any], swhere: FieldPath, priority_classes: Mapping[str, int] | None
) -> int:
    """``spec.priority``, or what admission would set: the PriorityClass's value, or the
    global default class's."""
    priority = spec.get("priority")
    if priority is None:
        classes = priority_classes or {}
        class_name = spec.get("priorityClassName")
        if class_name:
            if not isinstance(class_name, str) or class_name not in classes:
                raise (swhere / "priorityClassName").fail(
                    class_name, "no PriorityClass of that name in the cluster file"
                )
            priority = classes[class_name]
        else:
            priority = classes.get("", 0)  # "" holds the globalDefault class's value
    return _int(priority, swhere / "priority")


@dataclass(frozen=True, slots=True)
class _SpecReading:
    """What :func:`parse_pod` reads from a pod's spec alone: the same for every pod of one
    template (a ReplicaSet's, a Job's), so it is read once per distinct spec."""

    scheduler_name: str
    node_selector: dict[str, str]
    affinity: api.NodeAffinity | None
    tolerations: tuple[api.Toleration, ...]
    scheduling_gates: tuple[str, ...]
    requests: dict[str, int]
    nonzero_cpu: int
    nonzero_memory: int
    host_ports: tuple[api.HostPort, ...]
    images: tuple[str, ...]
    container_count: int
    preemption_policy: str
    volumes: tuple[api.PodVolume, ...]
    resource_claims: tuple[api.PodResourceClaim, ...]
    unsupported: tuple[str, ...]


SPEC_READINGS_KEPT = 4096
"""Distinct specs whose reading :func:`parse_pod` keeps (about two kilobytes each with
its key, the spec's JSON; the values are shared with the pods parsed from them); when
full it starts again."""

_spec_readings: dict[bytes, _SpecReading] = {}
_encode_json = msgspec.json.Encoder().encode

_TOKEN_VOLUME = re.compile(rb'"kube-api-access-[a-z0-9]{5}"')
_TOKEN_VOLUME_PREFIX = "kube-api-access-"
"""The ServiceAccount admission plugin gives every pod's projected token volume (and its
mounts) a name of its own, ``kube-api-access-`` and five random characters: the one
difference between the specs of a template's pods. No reading keeps that volume (it is
not one a plugin reads), so the name is left out of the key; a reading that keeps a
volume so named is not shared."""


_RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")
_STATUS_RESOURCES = frozenset(STATUS_FIELDS) - {"conditions"}


def _status_may_count(status: Mapping[str, Any]) -> bool:
    """Whether the pod-requests rule reads anything in ``status`` (``reads_status``), other
    than conditions of no resize: a pending pod's ``PodScheduled`` (gated, unschedulable)
    leaves its requests its spec's."""
    if not reads_status(status):
        return False
    if not status.keys().isdisjoint(_STATUS_RESOURCES):
        return True
    conditions = status.get("conditions")
    return not isinstance(conditions, list) or any(
        not isinstance(c, Mapping) or c.get("type") in _RESIZE_CONDITIONS for c in conditions
    )


def _template_key(spec: Mapping[str, Any]) -> bytes | None:
    """The key of ``spec``'s reading; None for a spec JSON cannot hold (a cluster file's
    YAML may carry values no API server would send): read, not kept. ``nodeName`` is
    read per pod, so the bound pods of a template share a reading too."""
    if "nodeName" in spec:
        spec = {k: v for k, v in spec.items() if k != "nodeName"}
    try:
        encoded = _encode_json(spec)
    except (TypeError, msgspec.EncodeError):
        return None
    return _TOKEN_VOLUME.sub(b'"kube-api-access-"', encoded)


def _read_spec(
    spec: Mapping[str, Any],
    swhere: FieldPath,
    status: Mapping[str, Any],
    stwhere: FieldPath | None,
) -> _SpecReading:
    """The spec's part of a pod; ``stwhere``: the status counts too (a resize's
    resources, ``reads_status``)."""
    containers = _read_containers(spec, swhere, status, stwhere)
    nonzero = pod_requests(containers.resources, non_zero_defaults=NON_ZERO_DEFAULTS)
    affinity = _mapping(spec.get("affinity"), swhere / "affinity")
    gates = _sequence(spec.get("schedulingGates"), swhere / "schedulingGates")
    preemption_policy = spec.get("preemptionPolicy") or api.PREEMPT_LOWER_PRIORITY
    if preemption_policy not in (api.PREEMPT_LOWER_PRIORITY, api.PREEMPT_NEVER):
        raise (swhere / "preemptionPolicy").fail(
            preemption_policy, f"expected {api.PREEMPT_LOWER_PRIORITY} or {api.PREEMPT_NEVER}"
        )
    return _SpecReading(
        scheduler_name=_text(spec.get("schedulerName"), swhere / "schedulerName")
        or api.DEFAULT_SCHEDULER_NAME,
        node_selector=_string_map(spec.get("nodeSelector"), swhere / "nodeSelector"),
        affinity=parse_node_affinity(
            affinity.get("nodeAffinity"), swhere / "affinity" / "nodeAffinity", admitted=True
        ),
        tolerations=parse_tolerations(spec.get("tolerations"), swhere / "tolerations"),
        scheduling_gates=tuple(
            str(_mapping(g, swhere / "schedulingGates" / i).get("name", ""))
            for i, g in enumerate(gates)
        ),
        requests=pod_requests(containers.resources),
        nonzero_cpu=nonzero.get(CPU, 0),
        nonzero_memory=nonzero.get(MEMORY, 0),
        host_ports=containers.host_ports,
        images=containers.images + _image_volumes(spec.get("volumes"), swhere / "volumes"),
        container_count=len(containers.images),
        preemption_policy=str(preemption_policy),
        volumes=parse_pod_volumes(spec.get("volumes"), swhere / "volumes"),
        resource_claims=parse_pod_resource_claims(
            spec.get("resourceClaims"), swhere / "resourceClaims"
        ),
        unsupported=_unsupported(spec),
    )


def parse_pod(obj: Mapping[str, Any], priority_classes: Mapping[str, int] | None = None) -> api.Pod:
    meta = _mapping(obj.get("metadata"), FieldPath("Pod", "metadata"))
    namespace = _text(meta.get("namespace"), FieldPath("Pod", "metadata.namespace")) or "default"
    name = _text(meta.get("name"), FieldPath("Pod", "metadata.name"))
    where = FieldPath(f"Pod {namespace}/{name}")
    if not name:
        raise (where / "metadata" / "name").fail(name, "a pod needs a name")
    # each step of a path is an object: the common stems are made once
    swhere, stwhere, mwhere = where / "spec", where / "status", where / "metadata"
    awhere = swhere / "affinity"
    spec = _mapping(obj.get("spec"), swhere)
    status = _mapping(obj.get("status"), stwhere)
    if _status_may_count(status):  # a resize's resources may count: read afresh
        reading = _read_spec(spec, swhere, status, stwhere)
    else:
        # a pending pod's spec is its template's: thousands of pods, a few specs
        key = _template_key(spec)
        found = None if key is None else _spec_readings.get(key)
        if found is None:
            found = _read_spec(spec, swhere, status, None)  # raises naming this pod
            if key is not None and not any(
                v.name.startswith(_TOKEN_VOLUME_PREFIX) for v in found.volumes
            ):
                if len(_spec_readings) >= SPEC_READINGS_KEPT:
                    _spec_readings.clear()
                _spec_readings[key] = found
        reading = found
    labels = _labels(meta.get("labels"), mwhere / "labels")
    affinity = _mapping(spec.get("affinity"), awhere)
    start_time = status.get("startTime")
    return api.Pod(
        namespace=namespace,
        name=name,
        uid=_text(meta.get("uid"), mwhere / "uid") or f"{namespace}/{name}",
        scheduler_name=reading.scheduler_name,
        node_name=_text(spec.get("nodeName"), swhere / "nodeName"),
        nominated_node_name=_text(status.get("nominatedNodeName"), stwhere / "nominatedNodeName"),
        priority=_priority(spec, swhere, priority_classes),
        labels=labels,
        node_selector=reading.node_selector,
        affinity=reading.affinity,
        tolerations=reading.tolerations,
        scheduling_gates=reading.scheduling_gates,
        requests=reading.requests,
        nonzero_cpu=reading.nonzero_cpu,
        nonzero_memory=reading.nonzero_memory,
        host_ports=reading.host_ports,
        images=reading.images,
        container_count=reading.container_count,
        created=_timestamp(meta.get("creationTimestamp"), mwhere / "creationTimestamp"),
        deleting=bool(meta.get("deletionTimestamp")),
        pod_affinity=parse_pod_affinity(affinity, awhere, labels),
        spread_constraints=parse_spread_constraints(
            spec.get("topologySpreadConstraints"), swhere / "topologySpreadConstraints", labels
        ),
        preemption_policy=reading.preemption_policy,
        start_time=None if not start_time else _timestamp(start_time, stwhere / "startTime"),
        preempted=_preempted(status, stwhere / "conditions"),
        controller=_controller(meta, mwhere / "ownerReferences"),
        volumes=reading.volumes,
        resource_claims=reading.resource_claims,
        claim_statuses=_claim_statuses(
            status.get("resourceClaimStatuses"), stwhere / "resourceClaimStatuses"
        ),
        unsupported=reading.unsupported,
        raw=obj,
    )


def parse_node(obj: Mapping[str, Any]) -> api.Node:
    meta = _mapping(obj.get("metadata"), FieldPath("Node", "metadata"))
    name = _text(meta.get("name"), FieldPath("Node", "metadata.name"))
    where = FieldPath(f"Node {name}")
    if not name:
        raise (where / "metadata" / "name").fail(name, "a node needs a name")
    spec = _mapping(obj.get("spec"), where / "spec")
    status = _mapping(obj.get("status"), where / "status")
    taints = []
    for i, raw in enumerate(_sequence(spec.get("taints"), where / "spec" / "taints")):
        taint = _mapping(raw, where / "spec" / "taints" / i)
        effect = str(taint.get("effect") or "")
        if effect not in set(api.TaintEffect):
            raise (where / "spec" / "taints" / i / "effect").fail(
                effect, f"expected one of {', '.join(api.TaintEffect)}"
            )
        taints.append(Taint(str(taint.get("key") or ""), effect, str(taint.get("value") or "")))
    allocatable_raw = status.get("allocatable")
    if allocatable_raw is None:
        allocatable_raw = status.get("capacity")
    images = []
    for i, raw in enumerate(_sequence(status.get("images"), where / "status" / "images")):
        image = _mapping(raw, where / "status" / "images" / i)
        names = tuple(str(n) for n in _sequence(image.get("names"), where / "status" / "images"))
        size = _int(image.get("sizeBytes", 0), where / "status" / "images" / i / "sizeBytes")
        images.append(api.NodeImage(names, size))
    conditions = {}
    for i, raw in enumerate(_sequence(status.get("conditions"), where / "status" / "conditions")):
        condition = _mapping(raw, where / "status" / "conditions" / i)
        conditions[str(condition.get("type", ""))] = str(condition.get("status", "Unknown"))
    return api.Node(
        name=name,
        labels=_labels(meta.get("labels"), where / "metadata" / "labels"),
        annotations=_string_map(meta.get("annotations"), where / "metadata" / "annotations"),
        taints=tuple(taints),
        unschedulable=_bool(spec.get("unschedulable"), where / "spec" / "unschedulable"),
        allocatable=parse_resource_list(allocatable_raw, where / "status" / "allocatable"),
        images=tuple(images),
        conditions=conditions,
        raw=obj,
    )


def parse_disruption_budget(obj: Mapping[str, Any]) -> api.DisruptionBudget:
    meta = _mapping(obj.get("metadata"), FieldPath("PodDisruptionBudget", "metadata"))
    namespace = (
        _text(meta.get("namespace"), FieldPath("PodDisruptionBudget", "metadata")) or "default"
    )
    name = _text(meta.get("name"), FieldPath("PodDisruptionBudget", "metadata.name"))
    where = FieldPath(f"PodDisruptionBudget {namespace}/{name}")
    spec = _mapping(obj.get("spec"), where / "spec")
    status = _mapping(obj.get("status"), where / "status")
    allowed = status.get("disruptionsAllowed")
    disrupted = _mapping(status.get("disruptedPods"), where / "status" / "disruptedPods")
    return api.DisruptionBudget(
        namespace,
        name,
        parse_label_selector(spec.get("selector"), where / "spec" / "selector"),
        0 if allowed is None else _int(allowed, where / "status" / "disruptionsAllowed"),
        frozenset(str(n) for n in disrupted),
    )


def parse_workload(kind: api.WorkloadKind, obj: Mapping[str, Any]) -> api.Workload:
    meta = _mapping(obj.get("metadata"), FieldPath(kind.value, "metadata"))
    namespace = _text(meta.get("namespace"), FieldPath(kind.value, "metadata")) or "default"
    name = _text(meta.get("name"), FieldPath(kind.value, "metadata.name"))
    where = FieldPath(f"{kind.value} {namespace}/{name}")
    spec = _mapping(obj.get("spec"), where / "spec")
    raw = spec.get("selector")
    selector: api.LabelSelector | None
    if kind in (api.WorkloadKind.SERVICE, api.WorkloadKind.REPLICATION_CONTROLLER):
        labels = _string_map(raw, where / "spec" / "selector")  # a plain label map
        selector = api.LabelSelector(tuple(sorted(labels.items()))) if labels else None
    else:
        selector = parse_label_selector(raw, where / "spec" / "selector")
    return api.Workload(kind, namespace, name, selector)


@dataclass(frozen=True, slots=True)
class _Located:
    where: str
    """``document 2`` or ``document 0 items[5]``: where the object sits in the file."""
    kind: str
    obj: Mapping[str, Any]


def _flatten(documents: Sequence[Any], source: str) -> Iterator[_Located]:
    for d, document in enumerate(documents):
        where = f"document {d}"
        if document is None:
            continue
        if not isinstance(document, Mapping):
            raise ConfigError(
                f"{source}: {where}: expected a Kubernetes object (a mapping with a kind),"
                f" got {type(document).__name__}"
            )
        kind = document.get("kind")
        if kind is None and "items" in document:
            kind = "List"
        if not isinstance(kind, str) or not kind:
            fields = ", ".join(sorted(str(k) for k in document)[:8]) or "none"
            raise ConfigError(
                f"{source}: {where}: kind = {kind!r}: expected a Kubernetes object or List"
                f" with a kind (fields found: {fields})",
                field="kind",
            )
        if not kind.endswith("List"):
            yield _Located(where, kind, document)
            continue
        items = document.get("items")
        if not isinstance(items, list):
            raise ConfigError(
                f"{source}: {where}: items = {items!r:.60}: expected a list of objects",
                field="items",
            )
        for i, item in enumerate(items):
            here = f"{where} items[{i}]"
            if not isinstance(item, Mapping):
                raise ConfigError(f"{source}: {here}: expected a Kubernetes object (a mapping)")
            item_kind = item.get("kind") or kind.removesuffix("List")
            if not isinstance(item_kind, str) or item_kind in ("", "List"):
                raise ConfigError(
                    f"{source}: {here}: kind = {item_kind!r}: expected an object kind",
                    field="kind",
                )
            yield _Located(here, item_kind, item)


def read_cluster(
    objects: Sequence[Any], source: str = "cluster", *, comparison_operators: bool = False
) -> ClusterObjects:
    """Nodes, pods, PriorityClasses, PDBs, Namespaces, the workloads that select pods
    (Services, ReplicaSets, StatefulSets, ReplicationControllers) and the storage kinds
    (:data:`STORAGE_KINDS`) from decoded documents. Other kinds are skipped; a file with
    neither Nodes nor Pods is an error. Nodes, pods, PriorityClasses, PDBs, Namespaces
    and workloads are refused where the API server would refuse them
    (:mod:`~nodeagent.scheduler.validation`; ``comparison_operators``: the
    TaintTolerationComparisonOperators gate is on)."""
    flat = list(_flatten(objects, source))
    classes: dict[str, int] = {}
    for located in flat:
        if located.kind == "PriorityClass":
            with _located(source, located):
                obj = located.obj
                validation.priority_class(obj)
                meta = _mapping(obj.get("metadata"), FieldPath("PriorityClass", "metadata"))
                name = _text(meta.get("name"), FieldPath("PriorityClass", "metadata.name"))
                value = _int(obj.get("value"), FieldPath(f"PriorityClass {name}", "value"))
                classes[name] = value
                if _bool(obj.get("globalDefault"), FieldPath(name, "globalDefault")):
                    classes[""] = value
    nodes: list[api.Node] = []
    pods: list[api.Pod] = []
    budgets: list[api.DisruptionBudget] = []
    namespaces: dict[str, Mapping[str, str]] = {}
    workloads: list[api.Workload] = []
    kept: dict[str, list[Any]] = {kind: [] for kind in STORAGE_KINDS}
    resource_kinds: dict[str, list[Any]] = {kind: [] for kind in resource_claims.KINDS}
    for located in flat:
        kind, obj = located.kind, located.obj
        with _located(source, located):
            if kind == "Node":
                validation.node(obj)
                nodes.append(parse_node(obj))
            elif kind == "Pod":
                phase = _mapping(obj.get("status"), FieldPath("Pod", "status")).get("phase")
                if not is_terminal(phase):  # the scheduler never sees finished pods
                    validation.pod(obj, comparison=comparison_operators)
                    pods.append(parse_pod(obj, classes))
            elif kind == "PodDisruptionBudget":
                validation.disruption_budget(obj)
                budgets.append(parse_disruption_budget(obj))
            elif kind == "Namespace":
                validation.namespace(obj)
                meta = _mapping(obj.get("metadata"), FieldPath("Namespace", "metadata"))
                name = _text(meta.get("name"), FieldPath("Namespace", "metadata.name"))
                labels = _string_map(meta.get("labels"), FieldPath(f"Namespace {name}", "labels"))
                namespaces[name] = labels
            elif kind in set(api.WorkloadKind):
                validation.workload(kind, obj)
                workloads.append(parse_workload(api.WorkloadKind(kind), obj))
            elif kind in STORAGE_KINDS:
                kept[kind].append(STORAGE_KINDS[kind](obj))
            elif kind in resource_claims.KINDS:
                resource_kinds[kind].append(resource_claims.KINDS[kind](obj))
    if not nodes and not pods:
        kinds = sorted({located.kind for located in flat})
        raise ConfigError(
            f"{source}: no Node or Pod objects found (kinds read: {', '.join(kinds) or 'none'});"
            " expected the output of kubectl get nodes,pods -A -o yaml"
        )
    _reject_duplicates("Node", [node.name for node in nodes], source)
    _reject_duplicates("Pod", [pod.key for pod in pods], source)
    _reject_duplicates("PersistentVolume", [pv.name for pv in kept["PersistentVolume"]], source)
    _reject_duplicates(
        "PersistentVolumeClaim", [pvc.key for pvc in kept["PersistentVolumeClaim"]], source
    )
    return ClusterObjects(
        tuple(nodes),
        tuple(pods),
        classes,
        tuple(budgets),
        namespaces,
        tuple(workloads),
        storage.StorageObjects(
            tuple(kept["PersistentVolume"]),
            tuple(kept["PersistentVolumeClaim"]),
            tuple(kept["StorageClass"]),
            tuple(kept["CSINode"]),
            tuple(kept["CSIDriver"]),
            tuple(kept["CSIStorageCapacity"]),
        ),
        resource_claims.read_objects(resource_kinds, source),
    )


@contextmanager
def _located(source: str, located: _Located) -> Iterator[None]:
    """Prefix an object's error with the file and the object's place in it."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError(f"{source}: {located.where}: {exc}", field=exc.field) from exc


def _reject_duplicates(kind: str, names: Sequence[str], source: str) -> None:
    """A snapshot lists each object once; twice means concatenated or overlapping dumps,
    and a pending pod listed twice would be placed twice."""
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        raise ConfigError(f"{source}: {kind} {repeated[0]} appears more than once")


def load_cluster(
    text: str, source: str = "cluster", *, comparison_operators: bool = False
) -> ClusterObjects:
    """Parse a cluster file's text (YAML, multi-document YAML or JSON).

    JSON (``kubectl get -o json``) is read with the json module first: for a large
    cluster it needs a tenth of the memory of a YAML parser building the same objects
    (about 30 MB instead of 250 MB for 5,000 nodes and 11,000 pods)."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            decoded = json.loads(text)
        except ValueError:
            pass  # YAML flow style, or broken JSON: the YAML parser says where
        else:
            return read_cluster(
                decoded if isinstance(decoded, list) else [decoded],
                source,
                comparison_operators=comparison_operators,
            )
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        documents = list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML or JSON: {exc}") from exc
    return read_cluster(documents, source, comparison_operators=comparison_operators)


# --- the storage kinds ----------------------------------------------------------------

_IN_TREE_VOLUMES: Mapping[str, tuple[api.VolumeKind, str]] = {
    "gcePersistentDisk": (api.VolumeKind.GCE_PD, "pdName"),
    "awsElasticBlockStore": (api.VolumeKind.AWS_EBS, "volumeID"),
    "iscsi": (api.VolumeKind.ISCSI, "iqn"),
    "azureDisk": (api.VolumeKind.AZURE_DISK, "diskURI"),
    "cinder": (api.VolumeKind.CINDER, "volumeID"),
    "portworxVolume": (api.VolumeKind.PORTWORX, "volumeID"),
}
"""Inline in-tree sources the volume plugins read, and the field naming the disk."""


def parse_pod_volumes(value: Any, where: FieldPath) -> tuple[api.PodVolume, ...]:
    """``spec.volumes``, each reduced to its kind and what identifies its disk; a volume
    no plugin reads (a secret, a config map, the service account's projected token,
    an emptyDir) is left out."""
    out = []
    for i, raw in enumerate(_sequence(value, where)):
        here = where / i
        item = _mapping(raw, here)
        name = _text(item.get("name"), here / "name")
        if "persistentVolumeClaim" in item:
            source = _mapping(item["persistentVolumeClaim"], here / "persistentVolumeClaim")
            claim = _text(source.get("claimName"), here / "persistentVolumeClaim" / "claimName")
            read_only = _bool(source.get("readOnly"), here / "persistentVolumeClaim" / "readOnly")
            out.append(api.PodVolume(name, api.VolumeKind.CLAIM, claim, read_only))
        elif "ephemeral" in item:
            out.append(api.PodVolume(name, api.VolumeKind.EPHEMERAL))
        elif "rbd" in item:
            source = _mapping(item["rbd"], here / "rbd")
            monitors = tuple(str(m) for m in _sequence(source.get("monitors"), here / "rbd"))
            pool = _text(source.get("pool"), here / "rbd" / "pool") or "rbd"
            image = _text(source.get("image"), here / "rbd" / "image")
            read_only = _bool(source.get("readOnly"), here / "rbd" / "readOnly")
            disk = f"{pool}/{image}"
            out.append(api.PodVolume(name, api.VolumeKind.RBD, "", read_only, disk, monitors))
        elif "csi" in item:
            driver = _text(_mapping(item["csi"], here / "csi").get("driver"), here / "csi")
            out.append(api.PodVolume(name, api.VolumeKind.CSI, driver=driver))
        else:
            for key, (kind, disk_field) in _IN_TREE_VOLUMES.items():
                if key in item:
                    source = _mapping(item[key], here / key)
                    disk = _text(source.get(disk_field), here / key / disk_field)
                    read_only = _bool(source.get("readOnly"), here / key / "readOnly")
                    out.append(api.PodVolume(name, kind, "", read_only, disk))
                    break
    return tuple(out)


def parse_pod_resource_claims(value: Any, where: FieldPath) -> tuple[api.PodResourceClaim, ...]:
    """``spec.resourceClaims``: each entry's name and its claim or template."""
    out = []
    for i, raw in enumerate(_sequence(value, where)):
        here = where / i
        item = _mapping(raw, here)
        out.append(
            api.PodResourceClaim(
                _text(item.get("name"), here / "name"),
                _text(item.get("resourceClaimName"), here / "resourceClaimName"),
                _text(item.get("resourceClaimTemplateName"), here / "resourceClaimTemplateName"),
            )
        )
    return tuple(out)


def _claim_statuses(value: Any, where: FieldPath) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, raw in enumerate(_sequence(value, where)):
        item = _mapping(raw, where / i)
        claim = item.get("resourceClaimName")
        out[_text(item.get("name"), where / i / "name")] = (
            None if claim is None else _text(claim, where / i / "resourceClaimName")
        )
    return out


def _unsupported(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """Fields nodeagent's scheduler cannot honour: such a pod must never be bound (none
    today; the mechanism stays for the next such field)."""
    return ()


def _meta(kind: str, obj: Mapping[str, Any], *, namespaced: bool) -> tuple[str, str, FieldPath]:
    meta = _mapping(obj.get("metadata"), FieldPath(kind, "metadata"))
    name = _text(meta.get("name"), FieldPath(kind, "metadata.name"))
    namespace = ""
    if namespaced:
        namespace = _text(meta.get("namespace"), FieldPath(kind, "metadata.namespace"))
        namespace = namespace or "default"
    where = FieldPath(f"{kind} {namespace}/{name}" if namespaced else f"{kind} {name}")
    if not name:
        raise (where / "metadata" / "name").fail(name, f"a {kind} needs a name")
    return namespace, name, where


E = TypeVar("E", bound=StrEnum)


def _choice(value: Any, where: FieldPath, kind: type[E]) -> E:
    """One of a closed set of strings (any other value, of any type, refused)."""
    if not isinstance(value, str) or value not in kind.__members__.values():
        raise where.fail(value, f"expected one of {', '.join(kind)}")
    return kind(value)


def _enum_set(value: Any, where: FieldPath, kind: type[E]) -> frozenset[E]:
    return frozenset(
        _choice(item, where / i, kind) for i, item in enumerate(_sequence(value, where))
    )


def _volume_mode(value: Any, where: FieldPath) -> storage.VolumeMode:
    if value is None:
        return storage.VolumeMode.FILESYSTEM
    return _choice(value, where, storage.VolumeMode)


def _storage_bytes(value: Any, where: FieldPath) -> int | None:
    raw = _mapping(value, where).get("storage")
    return None if raw is None else parse_quantity("storage", raw, where / "storage")


def _pv_source(spec: Mapping[str, Any], where: FieldPath) -> storage.CSISource | None:
    """The attachable source behind a PV: CSI as is, a migratable in-tree source as
    the CSI driver it migrates to (the handle is the in-tree disk's identity)."""
    if "csi" in spec:
        csi = _mapping(spec["csi"], where / "csi")
        return storage.CSISource(
            _text(csi.get("driver"), where / "csi" / "driver"),
            _text(csi.get("volumeHandle"), where / "csi" / "volumeHandle"),
        )
    for key, (kind, disk_field) in _IN_TREE_VOLUMES.items():
        plugin = storage.IN_TREE_PLUGIN.get(kind)
        if key in spec and plugin is not None:
            disk = _text(_mapping(spec[key], where / key).get(disk_field), where / key)
            return storage.CSISource(storage.IN_TREE_TO_CSI[plugin], disk, plugin)
    return None


def parse_persistent_volume(obj: Mapping[str, Any]) -> storage.PersistentVolume:
    _, name, where = _meta("PersistentVolume", obj, namespaced=False)
    meta = _mapping(obj.get("metadata"), where / "metadata")
    spec = _mapping(obj.get("spec"), where / "spec")
    swhere = where / "spec"
    annotations = _string_map(meta.get("annotations"), where / "metadata" / "annotations")
    storage_class = annotations.get(storage.BETA_STORAGE_CLASS_ANNOTATION)
    if storage_class is None:
        storage_class = _text(spec.get("storageClassName"), swhere / "storageClassName")
    claim_ref = None
    if spec.get("claimRef") is not None:
        ref = _mapping(spec["claimRef"], swhere / "claimRef")
        claim_ref = storage.ClaimRef(
            _text(ref.get("namespace"), swhere / "claimRef" / "namespace"),
            _text(ref.get("name"), swhere / "claimRef" / "name"),
            _text(ref.get("uid"), swhere / "claimRef" / "uid"),
        )
    affinity = None
    required = _mapping(spec.get("nodeAffinity"), swhere / "nodeAffinity").get("required")
    if required is not None:
        rwhere = swhere / "nodeAffinity" / "required" / "nodeSelectorTerms"
        terms = _mapping(required, rwhere).get("nodeSelectorTerms")
        affinity = tuple(
            parse_selector_term(t, rwhere / i) for i, t in enumerate(_sequence(terms, rwhere))
        )
    phase = _mapping(obj.get("status"), where / "status").get("phase") or "Pending"
    volume_phase = _choice(phase, where / "status" / "phase", storage.VolumePhase)
    capacity = _storage_bytes(spec.get("capacity"), swhere / "capacity")
    return storage.PersistentVolume(
        name=name,
        storage_class=storage_class,
        capacity=capacity or 0,
        access_modes=_enum_set(spec.get("accessModes"), swhere / "accessModes", storage.AccessMode),
        volume_mode=_volume_mode(spec.get("volumeMode"), swhere / "volumeMode"),
        claim_ref=claim_ref,
        node_affinity=affinity,
        labels=_labels(meta.get("labels"), where / "metadata" / "labels"),
        annotations=annotations,
        phase=volume_phase,
        deleting=bool(meta.get("deletionTimestamp")),
        attributes_class=_text(
            spec.get("volumeAttributesClassName"), swhere / "volumeAttributesClassName"
        ),
        source=_pv_source(spec, swhere),
        resource_version=_text(meta.get("resourceVersion"), where / "metadata"),
        raw=obj,
    )


def _controller_uid(meta: Mapping[str, Any], where: FieldPath) -> str:
    for i, raw in enumerate(_sequence(meta.get("ownerReferences"), where)):
        ref = _mapping(raw, where / i)
        if ref.get("controller") is True:
            return _text(ref.get("uid"), where / i / "uid")
    return ""


def parse_persistent_volume_claim(obj: Mapping[str, Any]) -> storage.PersistentVolumeClaim:
    namespace, name, where = _meta("PersistentVolumeClaim", obj, namespaced=True)
    meta = _mapping(obj.get("metadata"), where / "metadata")
    spec = _mapping(obj.get("spec"), where / "spec")
    swhere = where / "spec"
    annotations = _string_map(meta.get("annotations"), where / "metadata" / "annotations")
    storage_class = annotations.get(storage.BETA_STORAGE_CLASS_ANNOTATION)
    if storage_class is None and spec.get("storageClassName") is not None:
        storage_class = _text(spec.get("storageClassName"), swhere / "storageClassName")
    resources = _mapping(spec.get("resources"), swhere / "resources")
    phase = _mapping(obj.get("status"), where / "status").get("phase") or "Pending"
    claim_phase = _choice(phase, where / "status" / "phase", storage.ClaimPhase)
    return storage.PersistentVolumeClaim(
        namespace=namespace,
        name=name,
        uid=_text(meta.get("uid"), where / "metadata" / "uid"),
        storage_class=storage_class,
        request=_storage_bytes(resources.get("requests"), swhere / "resources" / "requests"),
        access_modes=_enum_set(spec.get("accessModes"), swhere / "accessModes", storage.AccessMode),
        volume_mode=_volume_mode(spec.get("volumeMode"), swhere / "volumeMode"),
        selector=parse_label_selector(spec.get("selector"), swhere / "selector"),
        volume_name=_text(spec.get("volumeName"), swhere / "volumeName"),
        phase=claim_phase,
        annotations=annotations,
        deleting=bool(meta.get("deletionTimestamp")),
        controller_uid=_controller_uid(meta, where / "metadata" / "ownerReferences"),
        attributes_class=_text(
            spec.get("volumeAttributesClassName"), swhere / "volumeAttributesClassName"
        ),
        resource_version=_text(meta.get("resourceVersion"), where / "metadata"),
        raw=obj,
    )


def parse_storage_class(obj: Mapping[str, Any]) -> storage.StorageClass:
    _, name, where = _meta("StorageClass", obj, namespaced=False)
    mode = obj.get("volumeBindingMode")
    if mode is not None:
        mode = _choice(mode, where / "volumeBindingMode", storage.BindingMode)
    terms = []
    twhere = where / "allowedTopologies"
    for i, raw in enumerate(_sequence(obj.get("allowedTopologies"), twhere)):
        term = _mapping(raw, twhere / i)
        ewhere = twhere / i / "matchLabelExpressions"
        expressions = []
        for j, expr in enumerate(_sequence(term.get("matchLabelExpressions"), ewhere)):
            item = _mapping(expr, ewhere / j)
            key = _label_key(_text(item.get("key"), ewhere / j / "key"), ewhere / j / "key")
            values = frozenset(str(v) for v in _sequence(item.get("values"), ewhere / j))
            expressions.append((key, values))
        terms.append(storage.TopologyTerm(tuple(expressions)))
    return storage.StorageClass(
        name,
        _text(obj.get("provisioner"), where / "provisioner"),
        # the API server defaults a missing mode to Immediate
        storage.BindingMode(mode or storage.BindingMode.IMMEDIATE),
        tuple(terms),
    )


def parse_csi_node(obj: Mapping[str, Any]) -> storage.CSINode:
    _, name, where = _meta("CSINode", obj, namespaced=False)
    meta = _mapping(obj.get("metadata"), where / "metadata")
    dwhere = where / "spec" / "drivers"
    drivers: dict[str, int | None] = {}
    for i, raw in enumerate(
        _sequence(_mapping(obj.get("spec"), where / "spec").get("drivers"), dwhere)
    ):
        item = _mapping(raw, dwhere / i)
        count = _mapping(item.get("allocatable"), dwhere / i / "allocatable").get("count")
        limit = None if count is None else _int(count, dwhere / i / "allocatable" / "count")
        drivers[_text(item.get("name"), dwhere / i / "name")] = limit
    annotations = _string_map(meta.get("annotations"), where / "metadata" / "annotations")
    migrated = annotations.get(storage.MIGRATED_PLUGINS_ANNOTATION, "")
    return storage.CSINode(
        name, drivers, frozenset(p.strip() for p in migrated.split(",") if p.strip())
    )


def parse_csi_driver(obj: Mapping[str, Any]) -> storage.CSIDriver:
    _, name, where = _meta("CSIDriver", obj, namespaced=False)
    spec = _mapping(obj.get("spec"), where / "spec")
    return storage.CSIDriver(
        name, _bool(spec.get("storageCapacity"), where / "spec" / "storageCapacity")
    )


def parse_csi_storage_capacity(obj: Mapping[str, Any]) -> storage.CSIStorageCapacity:
    namespace, name, where = _meta("CSIStorageCapacity", obj, namespaced=True)
    capacity, maximum = obj.get("capacity"), obj.get("maximumVolumeSize")
    class_name = _text(obj.get("storageClassName"), where / "storageClassName")
    if not class_name:
        raise (where / "storageClassName").fail(class_name, "a StorageClass name is required")
    return storage.CSIStorageCapacity(
        namespace,
        name,
        class_name,
        None if capacity is None else parse_quantity("storage", capacity, where / "capacity"),
        None
        if maximum is None
        else parse_quantity("storage", maximum, where / "maximumVolumeSize"),
        parse_label_selector(obj.get("nodeTopology"), where / "nodeTopology"),
    )


STORAGE_KINDS: Mapping[str, Any] = {
    "PersistentVolume": parse_persistent_volume,
    "PersistentVolumeClaim": parse_persistent_volume_claim,
    "StorageClass": parse_storage_class,
    "CSINode": parse_csi_node,
    "CSIDriver": parse_csi_driver,
    "CSIStorageCapacity": parse_csi_storage_capacity,
}
"""The storage kinds a cluster file may hold, and how each is read."""
