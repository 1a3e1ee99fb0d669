"""The ``resource.k8s.io/v1`` objects as the allocator reads them, and the allocation it writes.

Every object is parsed once, when an informer (or a cluster file) delivers it, into frozen
values: attribute values typed (int, bool, string, :class:`SemVer`), quantities exact
(:class:`Quantity`), node selectors as the scheduler's selector terms. The allocator then
never touches JSON, and a Filter call over thousands of nodes never re-parses anything.

What the API server validated is trusted for meaning (a count is positive, a name is
a DNS label), but the *shape* is checked: a wrong type or a missing required field raises
:class:`~nodeagent.base.errors.ConfigError` naming the object, the field path, the value
and what was expected, so a hand-written fixture with a typo fails loudly.

The reverse direction is :func:`allocation_to_api`: the ``status.allocation`` JSON that
PreBind writes, field for field as kube-scheduler's allocator fills
``resourceapi.AllocationResult`` (``structured/internal/incubating/allocator_incubating.go``,
``Allocate``), so the apiserver stores the same thing whichever scheduler allocated.

The fields kept are those of the features kube-scheduler v1.36 runs with its default
feature gates (``pkg/features/kube_features.go``): prioritized lists (GA), admin access
(GA), partitionable devices, device taints, consumable capacity, binding conditions and
device status, extended resources (all beta, on). List-typed attributes
(``DRAListTypeAttributes``, alpha, off) are refused like an unknown attribute type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from functools import total_ordering
from typing import Any, NamedTuple, TypeVar

from nodeagent.k8s import quantities
from nodeagent.scheduler import api
from nodeagent.scheduler.fieldpath import FieldPath

__all__ = [
    "RESULTS_MAX_SIZE",
    "AllocationConfig",
    "AllocationMode",
    "AllocationResult",
    "AttributeValue",
    "CapacityPolicy",
    "CapacityRange",
    "ClaimConfig",
    "ClaimSpec",
    "ConfigSource",
    "ConsumerRef",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceCapacity",
    "DeviceClass",
    "DeviceConstraint",
    "DeviceID",
    "DeviceRequest",
    "DeviceResult",
    "DeviceTaint",
    "DeviceToleration",
    "NodeSelector",
    "PoolID",
    "Quantity",
    "RequestSpec",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "SemVer",
    "TaintEffect",
    "TolerationOperator",
    "allocation_to_api",
    "parse_allocation",
    "parse_claim_template",
    "parse_device_class",
    "parse_resource_claim",
    "parse_resource_slice",
]

E = TypeVar("E", bound=StrEnum)

RESULTS_MAX_SIZE = 32
"""``resourceapi.AllocationResultsMaxSize``: the most devices one claim may be allocated."""


class AllocationMode(StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"
    NONE = "None"
    """Informational: never prevents allocation (``taintPreventsAllocation``)."""


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class ConfigSource(StrEnum):
    FROM_CLASS = "FromClass"
    FROM_CLAIM = "FromClaim"


# --- values ---------------------------------------------------------------------------


class DeviceID(NamedTuple):
    """A device's identity across the cluster (``structured.DeviceID``). A named tuple:
    the allocator hashes thousands of these per scheduling cycle."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class PoolID(NamedTuple):
    driver: str
    pool: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}"


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact ``resource.Quantity``: its value, and the text it is written back as."""

    value: Decimal
    text: str = field(compare=False)

    @classmethod
    def of(cls, value: Decimal | int) -> Quantity:
        """A computed amount, printed as ``resource.NewQuantity(v, BinarySI)`` would."""
        exact = Decimal(value)
        if exact == exact.to_integral_value():
            return cls(exact, quantities.format_quantity(int(exact)))
        return cls(exact, format(exact.normalize(), "f"))

    def __str__(self) -> str:
        return self.text


_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


@total_ordering
@dataclass(frozen=True, slots=True, eq=False)
class SemVer:
    """A semantic version 2.0.0 (what ``blang/semver``'s strict ``Parse`` accepts):
    ordered by major, minor, patch, then pre-release identifiers; build metadata is
    kept for printing but never compared."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> SemVer:
        match = _SEMVER.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not a semantic version (semver.org 2.0.0)")
        pre = tuple(
            int(part) if part.isdigit() else part for part in (match[4] or "").split(".") if part
        )
        build = tuple(match[5].split(".")) if match[5] else ()
        return cls(int(match[1]), int(match[2]), int(match[3]), pre, build)

    def _key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def compare(self, other: SemVer) -> int:
        """-1, 0 or 1, as ``semver.Version.Compare``."""
        if self._key() != other._key():
            return -1 if self._key() < other._key() else 1
        if not self.pre or not other.pre:
            # A release ranks above its pre-releases.
            return (not self.pre) - (not other.pre)
        for mine, theirs in zip(self.pre, other.pre, strict=False):
            if mine == theirs:
                continue
            if isinstance(mine, int) != isinstance(theirs, int):
                return -1 if isinstance(mine, int) else 1  # numeric below alphanumeric
            return -1 if mine < theirs else 1  # type: ignore[operator]
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SemVer) and self.compare(other) == 0

    def __lt__(self, other: SemVer) -> bool:
        return self.compare(other) < 0

    def __hash__(self) -> int:
        return hash((self._key(), self.pre))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


AttributeValue = bool | int | str | SemVer
"""One ``DeviceAttribute``: ``bool``, ``int``, ``string`` or ``version`` (a :class:`SemVer`).
Test bools before ints: in Python a bool is an int."""


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A ``v1.NodeSelector``: its terms are ORed, each term's requirements ANDed."""

    terms: tuple[api.SelectorTerm, ...]

    def to_api(self) -> dict[str, Any]:
        return {"nodeSelectorTerms": [_term_to_api(t) for t in self.terms]}


def _term_to_api(term: api.SelectorTerm) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if term.match_expressions:
        out["matchExpressions"] = [_requirement_to_api(r) for r in term.match_expressions]
    if term.match_fields:
        out["matchFields"] = [_requirement_to_api(r) for r in term.match_fields]
    return out


def _requirement_to_api(requirement: api.Requirement) -> dict[str, Any]:
    out: dict[str, Any] = {"key": requirement.key, "operator": requirement.operator}
    if requirement.values:
        out["values"] = list(requirement.values)
    return out


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    effect: TaintEffect
    value: str = ""
    time_added: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    """``DeviceToleration``; an empty ``effect`` tolerates every effect, an empty ``key``
    with ``Exists`` every taint."""

    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        """``resourceclaim.ToleratesTaint``."""
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator is TolerationOperator.EXISTS:
            return True
        return self.value == taint.value

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.key:
            out["key"] = self.key
        out["operator"] = str(self.operator)
        if self.value:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = str(self.effect)
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclass(frozen=True, slots=True)
class CapacityRange:
    min: Quantity
    max: Quantity | None = None
    step: Quantity | None = None


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """``CapacityRequestPolicy``: what a request for a shared device's capacity may be."""

    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    valid_range: CapacityRange | None = None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Quantity
    request_policy: CapacityPolicy | None = None


@dataclass(frozen=True, slots=True)
class CounterSet:
    """A slice's ``sharedCounters`` entry: what partitions of one device draw from."""

    name: str
    counters: Mapping[str, Quantity]


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    counter_set: str
    counters: Mapping[str, Quantity]


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. Attribute and capacity names are as published:
    either an ID (implicitly in the driver's domain) or ``domain/id``."""

    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    """The three above only with the slice's ``perDeviceNodeSelection``."""
    taints: tuple[DeviceTaint, ...] = ()
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    allow_multiple_allocations: bool = False
    plain_capacity: bool = field(init=False, compare=False, repr=False)
    """No capacity has a request policy (derived): a request without capacity requests
    then fits the device whenever no share of it is taken."""

    def __post_init__(self) -> None:
        plain = all(c.request_policy is None for c in self.capacity.values())
        object.__setattr__(self, "plain_capacity", plain)


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()
    resource_version: str = ""
    device_ids: tuple[DeviceID, ...] = field(init=False, compare=False, repr=False)
    """Each device's ID, in device order (derived)."""

    def __post_init__(self) -> None:
        ids = tuple(DeviceID(self.driver, self.pool, d.name) for d in self.devices)
        object.__setattr__(self, "device_ids", ids)

    @property
    def pool_id(self) -> PoolID:
        return PoolID(self.driver, self.pool)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str | None, ...] = ()
    """CEL expressions; ``None`` for a selector of a type this version does not know."""
    config: tuple[Mapping[str, Any], ...] = ()
    """Each ``DeviceConfiguration`` as written (``{"opaque": {"driver", "parameters"}}``)."""
    extended_resource_name: str | None = None
    uid: str = ""
    resource_version: str = ""
    creation_timestamp: str = ""
    """RFC 3339: of two classes naming the same extended resource, the later wins."""


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What to allocate for a request: an ``exactly`` request (named as the request) or one
    ``firstAvailable`` subrequest (``admin_access`` is then always ``None``)."""

    name: str
    device_class_name: str
    selectors: tuple[str | None, ...] = ()
    allocation_mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    capacity_requests: Mapping[str, Quantity] | None = None


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A claim's request: exactly one of ``exactly`` and ``first_available`` is set."""

    name: str
    exactly: RequestSpec | None = None
    first_available: tuple[RequestSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    requests: tuple[str, ...] = ()
    """Request (or ``request/subrequest``) names; empty means all of the claim's."""
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimConfig:
    requests: tuple[str, ...]
    configuration: Mapping[str, Any]
    """The inline ``DeviceConfiguration`` as written (``{"opaque": {...}}``)."""


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[ClaimConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One ``DeviceRequestAllocationResult``."""

    request: str
    """The request's name, or ``request/subrequest`` for a prioritized list."""
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    share_id: str | None = None
    consumed_capacity: Mapping[str, Quantity] | None = None

    @property
    def device_id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class AllocationConfig:
    source: ConfigSource
    requests: tuple[str, ...]
    configuration: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """A claim's ``status.allocation``."""

    results: tuple[DeviceResult, ...] = ()
    config: tuple[AllocationConfig, ...] = ()
    node_selector: NodeSelector | None = None
    """``None``: the devices are reachable from every node."""
    allocation_timestamp: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    """A ``reservedFor`` entry (kube-scheduler reserves for pods: ``resource: pods``)."""

    resource: str
    name: str
    uid: str
    api_group: str = ""

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"resource": self.resource, "name": self.name, "uid": self.uid}
        if self.api_group:
            out["apiGroup"] = self.api_group
        return out


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    spec: ClaimSpec
    uid: str = ""
    resource_version: str = ""
    allocation: AllocationResult | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    deletion_timestamp: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owner_uids: tuple[str, ...] = ()
    """``metadata.ownerReferences`` UIDs: a claim made from a template is owned by its pod."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    namespace: str
    name: str
    spec: ClaimSpec
    """``spec.spec``: what every claim made from the template asks for."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    uid: str = ""
    resource_version: str = ""


# --- parsing --------------------------------------------------------------------------


def _mapping(value: Any, where: FieldPath) -> Mapping[str, Any]:
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


def _str(value: Any, where: FieldPath, *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise where.fail(value, "required: a non-empty string")
        return ""
    if not isinstance(value, str):
        raise where.fail(value, "expected a string")
    return value


def _opt_str(value: Any, where: FieldPath) -> str | None:
    return _str(value, where) or None


def _int(value: Any, where: FieldPath, *, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(value, "expected an integer")
    return value


def _bool(value: Any, where: FieldPath) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise where.fail(value, "expected true or false")
    return value


def _opt_bool(value: Any, where: FieldPath) -> bool | None:
    return None if value is None else _bool(value, where)


def _strings(value: Any, where: FieldPath) -> tuple[str, ...]:
    return tuple(_str(v, where / i, required=True) for i, v in enumerate(_sequence(value, where)))


def _string_map(value: Any, where: FieldPath) -> dict[str, str]:
    return {str(k): _str(v, where / str(k)) for k, v in _mapping(value, where).items()}


def _enum(kind: type[E], value: Any, where: FieldPath) -> E:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(m) for m in kind)
        raise where.fail(value, f"expected one of {allowed}") from None


def _quantity(value: Any, where: FieldPath) -> Quantity:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise where.fail(value, "expected a quantity such as 8Gi or 4")
    try:
        exact = quantities.quantity_value(value)
    except quantities.UnitError as exc:
        raise where.fail(value, str(exc)) from None
    return Quantity(exact, str(value))


def _opt_quantity(value: Any, where: FieldPath) -> Quantity | None:
    return None if value is None else _quantity(value, where)


def _quantity_map(value: Any, where: FieldPath) -> dict[str, Quantity]:
    return {str(k): _quantity(v, where / str(k)) for k, v in _mapping(value, where).items()}


def _counter_map(value: Any, where: FieldPath) -> dict[str, Quantity]:
    """``map[string]Counter``: each ``{"value": quantity}``."""
    return {
        str(k): _quantity(_mapping(v, where / str(k)).get("value"), where / str(k) / "value")
        for k, v in _mapping(value, where).items()
    }


def _meta(obj: Any, kind: str) -> tuple[Mapping[str, Any], FieldPath]:
    if not isinstance(obj, Mapping):
        raise FieldPath(kind).fail(obj, f"expected a {kind} object (a mapping)")
    metadata = _mapping(obj.get("metadata"), FieldPath(kind, "metadata"))
    name = metadata.get("name")
    namespace = metadata.get("namespace")
    label = f"{namespace}/{name}" if namespace else str(name)
    where = FieldPath(f"{kind} {label}")
    _str(name, where / "metadata" / "name", required=True)
    return metadata, where


def parse_node_selector(value: Any, where: FieldPath) -> NodeSelector | None:
    """A ``v1.NodeSelector``; requirements are read as written (matching judges them)."""
    if value is None:
        return None
    terms = []
    for i, raw in enumerate(_sequence(_mapping(value, where).get("nodeSelectorTerms"), where)):
        at = where / "nodeSelectorTerms" / i
        term = _mapping(raw, at)
        terms.append(
            api.SelectorTerm(
                _requirements(term.get("matchExpressions"), at / "matchExpressions"),
                _requirements(term.get("matchFields"), at / "matchFields"),
            )
        )
    return NodeSelector(tuple(terms))


def _requirements(value: Any, where: FieldPath) -> tuple[api.Requirement, ...]:
    out = []
    for i, raw in enumerate(_sequence(value, where)):
        item = _mapping(raw, where / i)
        out.append(
            api.Requirement(
                _str(item.get("key"), where / i / "key"),
                _str(item.get("operator"), where / i / "operator"),
                tuple(str(v) for v in _sequence(item.get("values"), where / i / "values")),
            )
        )
    return tuple(out)


def _attribute(value: Any, where: FieldPath) -> AttributeValue:
    item = _mapping(value, where)
    kinds = [k for k in ("int", "bool", "string", "version") if item.get(k) is not None]
    if len(kinds) != 1:
        raise where.fail(
            dict(item),
            "expected exactly one of int, bool, string, version (list values need "
            "DRAListTypeAttributes, off in v1.36)",
        )
    kind = kinds[0]
    raw = item[kind]
    if kind == "int":
        return _int(raw, where / "int")
    if kind == "bool":
        return _bool(raw, where / "bool")
    if kind == "string":
        if not isinstance(raw, str):
            raise (where / "string").fail(raw, "expected a string")
        return raw
    if not isinstance(raw, str):
        raise (where / "version").fail(raw, "expected a string")
    try:
        return SemVer.parse(raw)
    except ValueError as exc:
        raise (where / "version").fail(raw, str(exc)) from None


def _capacity(value: Any, where: FieldPath) -> DeviceCapacity:
    item = _mapping(value, where)
    policy_raw = item.get("requestPolicy")
    policy = None
    if policy_raw is not None:
        at = where / "requestPolicy"
        policy_map = _mapping(policy_raw, at)
        range_raw = policy_map.get("validRange")
        valid_range = None
        if range_raw is not None:
            rat = at / "validRange"
            range_map = _mapping(range_raw, rat)
            valid_range = CapacityRange(
                _quantity(range_map.get("min"), rat / "min"),
                _opt_quantity(range_map.get("max"), rat / "max"),
                _opt_quantity(range_map.get("step"), rat / "step"),
            )
        policy = CapacityPolicy(
            _opt_quantity(policy_map.get("default"), at / "default"),
            tuple(
                _quantity(v, at / "validValues" / i)
                for i, v in enumerate(_sequence(policy_map.get("validValues"), at / "validValues"))
            ),
            valid_range,
        )
    return DeviceCapacity(_quantity(item.get("value"), where / "value"), policy)


def _taint(value: Any, where: FieldPath) -> DeviceTaint:
    item = _mapping(value, where)
    return DeviceTaint(
        key=_str(item.get("key"), where / "key", required=True),
        effect=_enum(TaintEffect, item.get("effect"), where / "effect"),
        value=_str(item.get("value"), where / "value"),
        time_added=_opt_str(item.get("timeAdded"), where / "timeAdded"),
    )


def _toleration(value: Any, where: FieldPath) -> DeviceToleration:
    item = _mapping(value, where)
    effect = item.get("effect")
    seconds = item.get("tolerationSeconds")
    return DeviceToleration(
        key=_str(item.get("key"), where / "key"),
        operator=_enum(TolerationOperator, item.get("operator") or "Equal", where / "operator"),
        value=_str(item.get("value"), where / "value"),
        effect=None if not effect else _enum(TaintEffect, effect, where / "effect"),
        toleration_seconds=None if seconds is None else _int(seconds, where / "tolerationSeconds"),
    )


def _device(value: Any, where: FieldPath) -> Device:
    item = _mapping(value, where)
    return Device(
        name=_str(item.get("name"), where / "name", required=True),
        attributes={
            str(k): _attribute(v, where / "attributes" / str(k))
            for k, v in _mapping(item.get("attributes"), where / "attributes").items()
        },
        capacity={
            str(k): _capacity(v, where / "capacity" / str(k))
            for k, v in _mapping(item.get("capacity"), where / "capacity").items()
        },
        consumes_counters=tuple(
            CounterConsumption(
                _str(_mapping(c, at).get("counterSet"), at / "counterSet", required=True),
                _counter_map(_mapping(c, at).get("counters"), at / "counters"),
            )
            for i, c in enumerate(
                _sequence(item.get("consumesCounters"), where / "consumesCounters")
            )
            for at in [where / "consumesCounters" / i]
        ),
        node_name=_opt_str(item.get("nodeName"), where / "nodeName"),
        node_selector=parse_node_selector(item.get("nodeSelector"), where / "nodeSelector"),
        all_nodes=_bool(item.get("allNodes"), where / "allNodes"),
        taints=tuple(
            _taint(t, where / "taints" / i)
            for i, t in enumerate(_sequence(item.get("taints"), where / "taints"))
        ),
        binds_to_node=_bool(item.get("bindsToNode"), where / "bindsToNode"),
        binding_conditions=_strings(item.get("bindingConditions"), where / "bindingConditions"),
        binding_failure_conditions=_strings(
            item.get("bindingFailureConditions"), where / "bindingFailureConditions"
        ),
        allow_multiple_allocations=_bool(
            item.get("allowMultipleAllocations"), where / "allowMultipleAllocations"
        ),
    )


def parse_resource_slice(obj: Any) -> ResourceSlice:
    """A ``ResourceSlice`` as the apiserver returns it."""
    metadata, where = _meta(obj, "ResourceSlice")
    spec_at = where / "spec"
    spec = _mapping(obj.get("spec"), spec_at)
    pool_at = spec_at / "pool"
    pool = _mapping(spec.get("pool"), pool_at)
    return ResourceSlice(
        name=str(metadata["name"]),
        driver=_str(spec.get("driver"), spec_at / "driver", required=True),
        pool=_str(pool.get("name"), pool_at / "name", required=True),
        generation=_int(pool.get("generation"), pool_at / "generation", default=0),
        resource_slice_count=_int(pool.get("resourceSliceCount"), pool_at / "resourceSliceCount"),
        node_name=_opt_str(spec.get("nodeName"), spec_at / "nodeName"),
        node_selector=parse_node_selector(spec.get("nodeSelector"), spec_at / "nodeSelector"),
        all_nodes=_bool(spec.get("allNodes"), spec_at / "allNodes"),
        per_device_node_selection=_bool(
            spec.get("perDeviceNodeSelection"), spec_at / "perDeviceNodeSelection"
        ),
        devices=tuple(
            _device(d, spec_at / "devices" / i)
            for i, d in enumerate(_sequence(spec.get("devices"), spec_at / "devices"))
        ),
        shared_counters=tuple(
            CounterSet(
                _str(_mapping(c, at).get("name"), at / "name", required=True),
                _counter_map(_mapping(c, at).get("counters"), at / "counters"),
            )
            for i, c in enumerate(_sequence(spec.get("sharedCounters"), spec_at / "sharedCounters"))
            for at in [spec_at / "sharedCounters" / i]
        ),
        resource_version=_str(metadata.get("resourceVersion"), where / "metadata"),
    )


def _selectors(value: Any, where: FieldPath) -> tuple[str | None, ...]:
    out: list[str | None] = []
    for i, raw in enumerate(_sequence(value, where)):
        cel = _mapping(raw, where / i).get("cel")
        if cel is None:
            out.append(None)
            continue
        at = where / i / "cel"
        out.append(_str(_mapping(cel, at).get("expression"), at / "expression", required=True))
    return tuple(out)


def _configuration(item: Mapping[str, Any], where: FieldPath) -> dict[str, Any]:
    """The inline ``DeviceConfiguration`` of a config entry (only ``opaque`` exists)."""
    opaque = item.get("opaque")
    if opaque is None:
        return {}
    at = where / "opaque"
    _str(_mapping(opaque, at).get("driver"), at / "driver", required=True)
    return {"opaque": opaque}


def parse_device_class(obj: Any) -> DeviceClass:
    """A ``DeviceClass`` as the apiserver returns it."""
    metadata, where = _meta(obj, "DeviceClass")
    spec_at = where / "spec"
    spec = _mapping(obj.get("spec"), spec_at)
    return DeviceClass(
        name=str(metadata["name"]),
        selectors=_selectors(spec.get("selectors"), spec_at / "selectors"),
        config=tuple(
            _configuration(_mapping(c, spec_at / "config" / i), spec_at / "config" / i)
            for i, c in enumerate(_sequence(spec.get("config"), spec_at / "config"))
        ),
        extended_resource_name=_opt_str(
            spec.get("extendedResourceName"), spec_at / "extendedResourceName"
        ),
        uid=_str(metadata.get("uid"), where / "metadata" / "uid"),
        resource_version=_str(metadata.get("resourceVersion"), where / "metadata"),
        creation_timestamp=_str(
            metadata.get("creationTimestamp"), where / "metadata" / "creationTimestamp"
        ),
    )


def _request_spec(
    item: Mapping[str, Any], name: str, where: FieldPath, *, sub: bool
) -> RequestSpec:
    mode = _enum(
        AllocationMode, item.get("allocationMode") or "ExactCount", where / "allocationMode"
    )
    count = _int(
        item.get("count"), where / "count", default=1 if mode is AllocationMode.EXACT_COUNT else 0
    )
    capacity = item.get("capacity")
    return RequestSpec(
        name=name,
        device_class_name=_str(item.get("deviceClassName"), where / "deviceClassName"),
        selectors=_selectors(item.get("selectors"), where / "selectors"),
        allocation_mode=mode,
        count=count,
        admin_access=None if sub else _opt_bool(item.get("adminAccess"), where / "adminAccess"),
        tolerations=tuple(
            _toleration(t, where / "tolerations" / i)
            for i, t in enumerate(_sequence(item.get("tolerations"), where / "tolerations"))
        ),
        capacity_requests=None
        if capacity is None
        else _quantity_map(
            _mapping(capacity, where / "capacity").get("requests"), where / "capacity" / "requests"
        ),
    )


def _claim_spec(value: Any, where: FieldPath) -> ClaimSpec:
    devices_at = where / "devices"
    devices = _mapping(_mapping(value, where).get("devices"), devices_at)
    requests = []
    for i, raw in enumerate(_sequence(devices.get("requests"), devices_at / "requests")):
        at = devices_at / "requests" / i
        item = _mapping(raw, at)
        name = _str(item.get("name"), at / "name", required=True)
        exactly_raw = item.get("exactly")
        first = _sequence(item.get("firstAvailable"), at / "firstAvailable")
        if (exactly_raw is None) == (not first):
            raise at.fail(dict(item), "expected exactly one of exactly, firstAvailable")
        exactly = (
            None
            if exactly_raw is None
            else _request_spec(
                _mapping(exactly_raw, at / "exactly"), name, at / "exactly", sub=False
            )
        )
        subs = []
        for j, sub_raw in enumerate(first):
            sat = at / "firstAvailable" / j
            sub = _mapping(sub_raw, sat)
            subs.append(
                _request_spec(
                    sub, _str(sub.get("name"), sat / "name", required=True), sat, sub=True
                )
            )
        requests.append(DeviceRequest(name, exactly, tuple(subs)))
    constraints = []
    for i, raw in enumerate(_sequence(devices.get("constraints"), devices_at / "constraints")):
        at = devices_at / "constraints" / i
        item = _mapping(raw, at)
        constraints.append(
            DeviceConstraint(
                requests=_strings(item.get("requests"), at / "requests"),
                match_attribute=_opt_str(item.get("matchAttribute"), at / "matchAttribute"),
                distinct_attribute=_opt_str(
                    item.get("distinctAttribute"), at / "distinctAttribute"
                ),
            )
        )
    config = []
    for i, raw in enumerate(_sequence(devices.get("config"), devices_at / "config")):
        at = devices_at / "config" / i
        item = _mapping(raw, at)
        config.append(
            ClaimConfig(_strings(item.get("requests"), at / "requests"), _configuration(item, at))
        )
    return ClaimSpec(tuple(requests), tuple(constraints), tuple(config))


def _device_result(value: Any, where: FieldPath) -> DeviceResult:
    item = _mapping(value, where)
    consumed = item.get("consumedCapacity")
    return DeviceResult(
        request=_str(item.get("request"), where / "request", required=True),
        driver=_str(item.get("driver"), where / "driver", required=True),
        pool=_str(item.get("pool"), where / "pool", required=True),
        device=_str(item.get("device"), where / "device", required=True),
        admin_access=_opt_bool(item.get("adminAccess"), where / "adminAccess"),
        tolerations=tuple(
            _toleration(t, where / "tolerations" / i)
            for i, t in enumerate(_sequence(item.get("tolerations"), where / "tolerations"))
        ),
        binding_conditions=_strings(item.get("bindingConditions"), where / "bindingConditions"),
        binding_failure_conditions=_strings(
            item.get("bindingFailureConditions"), where / "bindingFailureConditions"
        ),
        share_id=_opt_str(item.get("shareID"), where / "shareID"),
        consumed_capacity=None
        if consumed is None
        else _quantity_map(consumed, where / "consumedCapacity"),
    )


def parse_allocation(value: Any, where: FieldPath) -> AllocationResult | None:
    """A claim's ``status.allocation`` (``None`` when absent)."""
    if value is None:
        return None
    item = _mapping(value, where)
    devices_at = where / "devices"
    devices = _mapping(item.get("devices"), devices_at)
    configs = []
    for i, raw in enumerate(_sequence(devices.get("config"), devices_at / "config")):
        at = devices_at / "config" / i
        entry = _mapping(raw, at)
        configs.append(
            AllocationConfig(
                _enum(ConfigSource, entry.get("source"), at / "source"),
                _strings(entry.get("requests"), at / "requests"),
                _configuration(entry, at),
            )
        )
    return AllocationResult(
        results=tuple(
            _device_result(r, devices_at / "results" / i)
            for i, r in enumerate(_sequence(devices.get("results"), devices_at / "results"))
        ),
        config=tuple(configs),
        node_selector=parse_node_selector(item.get("nodeSelector"), where / "nodeSelector"),
        allocation_timestamp=_opt_str(
            item.get("allocationTimestamp"), where / "allocationTimestamp"
        ),
    )


def parse_resource_claim(obj: Any) -> ResourceClaim:
    """A ``ResourceClaim`` as the apiserver returns it (spec and status)."""
    metadata, where = _meta(obj, "ResourceClaim")
    status_at = where / "status"
    status = _mapping(obj.get("status"), status_at)
    reserved = []
    for i, raw in enumerate(_sequence(status.get("reservedFor"), status_at / "reservedFor")):
        at = status_at / "reservedFor" / i
        ref = _mapping(raw, at)
        reserved.append(
            ConsumerRef(
                resource=_str(ref.get("resource"), at / "resource", required=True),
                name=_str(ref.get("name"), at / "name", required=True),
                uid=_str(ref.get("uid"), at / "uid", required=True),
                api_group=_str(ref.get("apiGroup"), at / "apiGroup"),
            )
        )
    owners = _sequence(metadata.get("ownerReferences"), where / "metadata" / "ownerReferences")
    return ResourceClaim(
        namespace=_str(metadata.get("namespace"), where / "metadata" / "namespace", required=True),
        name=str(metadata["name"]),
        spec=_claim_spec(obj.get("spec"), where / "spec"),
        uid=_str(metadata.get("uid"), where / "metadata" / "uid"),
        resource_version=_str(
            metadata.get("resourceVersion"), where / "metadata" / "resourceVersion"
        ),
        allocation=parse_allocation(status.get("allocation"), status_at / "allocation"),
        reserved_for=tuple(reserved),
        deletion_timestamp=_opt_str(
            metadata.get("deletionTimestamp"), where / "metadata" / "deletionTimestamp"
        ),
        labels=_string_map(metadata.get("labels"), where / "metadata" / "labels"),
        annotations=_string_map(metadata.get("annotations"), where / "metadata" / "annotations"),
        owner_uids=tuple(
            str(_mapping(o, where / "metadata" / "ownerReferences" / i).get("uid", ""))
            for i, o in enumerate(owners)
        ),
    )


def parse_claim_template(obj: Any) -> ResourceClaimTemplate:
    """A ``ResourceClaimTemplate`` as the apiserver returns it."""
    metadata, where = _meta(obj, "ResourceClaimTemplate")
    outer_at = where / "spec"
    outer = _mapping(obj.get("spec"), outer_at)
    inner_meta = _mapping(outer.get("metadata"), outer_at / "metadata")
    return ResourceClaimTemplate(
        namespace=_str(metadata.get("namespace"), where / "metadata" / "namespace", required=True),
        name=str(metadata["name"]),
        spec=_claim_spec(outer.get("spec"), outer_at / "spec"),
        labels=_string_map(inner_meta.get("labels"), outer_at / "metadata" / "labels"),
        annotations=_string_map(
            inner_meta.get("annotations"), outer_at / "metadata" / "annotations"
        ),
        uid=_str(metadata.get("uid"), where / "metadata" / "uid"),
        resource_version=_str(
            metadata.get("resourceVersion"), where / "metadata" / "resourceVersion"
        ),
    )


# --- writing --------------------------------------------------------------------------


def _device_result_to_api(result: DeviceResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "request": result.request,
        "driver": result.driver,
        "pool": result.pool,
        "device": result.device,
    }
    if result.admin_access is not None:
        out["adminAccess"] = result.admin_access
    if result.tolerations:
        out["tolerations"] = [t.to_api() for t in result.tolerations]
    if result.binding_conditions:
        out["bindingConditions"] = list(result.binding_conditions)
    if result.binding_failure_conditions:
        out["bindingFailureConditions"] = list(result.binding_failure_conditions)
    if result.share_id is not None:
        out["shareID"] = result.share_id
    if result.consumed_capacity:
        out["consumedCapacity"] = {k: str(v) for k, v in result.consumed_capacity.items()}
    return out


def allocation_to_api(result: AllocationResult) -> dict[str, Any]:
    """The ``status.allocation`` JSON for ``result``, omitting empty fields as the API
    types' ``omitempty`` does. The allocator leaves ``allocationTimestamp`` unset; with
    binding conditions on (v1.36's default) kube-scheduler's PreBind stamps it when it
    writes the claim (``bindClaim``): set it with ``dataclasses.replace`` first."""
    devices: dict[str, Any] = {}
    if result.results:
        devices["results"] = [_device_result_to_api(r) for r in result.results]
    if result.config:
        devices["config"] = [
            {
                "source": str(c.source),
                **({"requests": list(c.requests)} if c.requests else {}),
                **c.configuration,
            }
            for c in result.config
        ]
    out: dict[str, Any] = {"devices": devices}
    if result.node_selector is not None:
        out["nodeSelector"] = result.node_selector.to_api()
    if result.allocation_timestamp is not None:
        out["allocationTimestamp"] = result.allocation_timestamp
    return out
