"""The scheduler's vocabulary: statuses, and the parts of Pods and Nodes it reads.

Plugins never see raw Kubernetes objects. :mod:`nodeagent.scheduler.objects` turns a
listed Pod or Node into the frozen values below once, resolving quantities to integers
(milli-CPU, bytes, counts) and precomputing what every cycle would otherwise recompute
(the pod's effective requests, its host ports, its normalized image names). That keeps
the per-cycle work to arithmetic, and keeps the API's quirks (defaulting, quantity
rounding) in one place.

Statuses follow kube-scheduler's codes and their consequences exactly; an expected
rejection is a value, never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from nodeagent.k8s.pressure import Taint
from nodeagent.k8s.resources import CPU, EPHEMERAL_STORAGE, MEMORY

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0

PODS = "pods"

DEFAULT_SCHEDULER_NAME = "default-scheduler"

TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"


class Code(StrEnum):
    """What a plugin's verdict means for the pod."""

    SUCCESS = "Success"
    ERROR = "Error"
    """Something broke (not the pod's fault): the cycle fails and the pod backs off."""
    UNSCHEDULABLE = "Unschedulable"
    """The node does not fit now; preempting lower-priority pods might make it fit."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    """The node can never fit this pod: preemption skips it."""
    WAIT = "Wait"
    """Permit only: hold the pod until allowed or timed out."""
    SKIP = "Skip"
    """PreFilter/PreScore: this plugin has nothing to do for the pod; its Filter/Score
    is skipped this cycle. Bind: let the next binder try."""


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    """The plugin that produced a failure, filled in by the framework."""

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @property
    def is_rejection(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        return Status(self.code, self.reasons, plugin)


SUCCESS = Status()
SKIP = Status(Code.SKIP)


def unschedulable(*reasons: str, unresolvable: bool = False) -> Status:
    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
    return Status(code, reasons)


def error(message: str) -> Status:
    return Status(Code.ERROR, (message,))


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint, *, comparison_operators: bool = False) -> bool:
        """kube-scheduler's ``ToleratesTaint``: effect, then key, then operator.

        ``Gt``/``Lt`` (feature gate TaintTolerationComparisonOperators, alpha in 1.35)
        compare the taint's value with the toleration's as int64 (taint > toleration for
        ``Gt``); an unparsable value on either side never matches, and with the gate off
        neither operator matches."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        if self.operator in ("Gt", "Lt") and comparison_operators:
            have, want = parse_go_int(taint.value), parse_go_int(self.value)
            if have is None or want is None:
                return False
            return have > want if self.operator == "Gt" else have < want
        return self.operator == "Exists"


def tolerates(
    tolerations: tuple[Toleration, ...], taint: Taint, *, comparison_operators: bool = False
) -> bool:
    return any(
        toleration.tolerates(taint, comparison_operators=comparison_operators)
        for toleration in tolerations
    )


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_GO_INT = re.compile(r"^[+-]?[0-9]+$")
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_QUALIFIED_NAME = re.compile(
    rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME_PART}$"
)
_LABEL_VALUE = re.compile(rf"^({_NAME_PART})?$")
MAX_LABEL_NAME = 63
"""The longest label value, and the longest name part of a label key."""


def is_label_key(key: str) -> bool:
    """A qualified name as the API server validates label keys: an optional DNS
    subdomain prefix and ``/``, then a name of at most 63 characters."""
    return (
        len(key) <= 316
        and bool(_QUALIFIED_NAME.match(key))
        and len(key.rsplit("/", 1)[-1]) <= MAX_LABEL_NAME
    )


def is_label_value(value: str) -> bool:
    """At most 63 alphanumerics, ``-``, ``_``, ``.``, starting and ending alphanumeric."""
    return len(value) <= MAX_LABEL_NAME and bool(_LABEL_VALUE.match(value))


def parse_go_int(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: optional sign, ASCII digits, int64 range."""
    if not _GO_INT.match(text):
        return None
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions``/``matchFields`` entry, as written in the pod."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """A ``nodeSelectorTerm``: its expressions and fields are ANDed."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.match_expressions and not self.match_fields


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    preference: SelectorTerm


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    required: tuple[SelectorTerm, ...] | None = None
    """``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`` (ORed);
    ``None`` when the pod states no requirement."""
    preferred: tuple[PreferredTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A ``metav1.LabelSelector``: ``matchLabels`` and ``matchExpressions`` ANDed.

    An empty selector matches every set of labels; where the API means "nothing" by a
    missing selector, the field holding it is ``None``. An expression with an unknown
    operator, or a value count its operator forbids, fails to convert in kube-scheduler
    and the selector then matches nothing."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    @property
    def valid(self) -> bool:
        for r in self.match_expressions:
            if r.operator in ("In", "NotIn"):
                if not r.values:
                    return False
            elif r.operator in ("Exists", "DoesNotExist"):
                if r.values:
                    return False
            else:
                return False
        return True

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value or key not in labels:
                return False
        for r in self.match_expressions:
            present = r.key in labels
            if r.operator == "In":
                ok = present and labels[r.key] in r.values
            elif r.operator == "NotIn":
                ok = not present or labels[r.key] not in r.values
            elif r.operator == "Exists":
                ok = present
            elif r.operator == "DoesNotExist":
                ok = not present
            else:
                ok = False
            if not ok:
                return False
        return self.valid

    def with_requirements(self, *extra: Requirement) -> LabelSelector:
        return LabelSelector(self.match_labels, (*self.match_expressions, *extra))


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """One pod (anti-)affinity term. ``matchLabelKeys``/``mismatchLabelKeys`` are already
    merged into ``selector`` (``key In [own value]`` / ``key NotIn [own value]``), as the
    API server does when it admits the pod."""

    topology_key: str
    selector: LabelSelector | None
    """``None``: the term selects no pod."""
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None

    def namespace_matches(
        self,
        owner_namespace: str,
        namespace: str,
        namespace_labels: Mapping[str, Mapping[str, str]],
    ) -> bool:
        """Whether pods of ``namespace`` are in this term's scope. Neither
        ``namespaces`` nor ``namespaceSelector``: the owning pod's namespace; an empty
        ``namespaceSelector``: every namespace."""
        if not self.namespaces and self.namespace_selector is None:
            return namespace == owner_namespace
        if namespace in self.namespaces:
            return True
        selector = self.namespace_selector
        if selector is None:
            return False
        return selector.matches(namespace_labels.get(namespace, {}))

    def matches(
        self,
        owner_namespace: str,
        pod: Pod,
        namespace_labels: Mapping[str, Mapping[str, str]],
    ) -> bool:
        return (
            self.selector is not None
            and self.namespace_matches(owner_namespace, pod.namespace, namespace_labels)
            and self.selector.matches(pod.labels)
        )


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """``spec.affinity.podAffinity`` and ``podAntiAffinity`` together."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()
    required_anti: tuple[PodAffinityTerm, ...] = ()
    preferred_anti: tuple[WeightedPodAffinityTerm, ...] = ()

    @property
    def has_affinity(self) -> bool:
        return bool(self.required or self.preferred)

    @property
    def has_anti_affinity(self) -> bool:
        return bool(self.required_anti or self.preferred_anti)


class Unsatisfiable(StrEnum):
    DO_NOT_SCHEDULE = "DoNotSchedule"
    SCHEDULE_ANYWAY = "ScheduleAnyway"


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One ``topologySpreadConstraints`` entry; ``matchLabelKeys`` merged into
    ``selector`` (``key In [own value]``, missing keys ignored)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: Unsatisfiable
    selector: LabelSelector | None
    min_domains: int = 1
    honor_node_affinity: bool = True
    """``nodeAffinityPolicy``: Honor (default) or Ignore."""
    honor_node_taints: bool = False
    """``nodeTaintsPolicy``: Ignore (default) or Honor."""

    def selects(self, labels: Mapping[str, str]) -> bool:
        return self.selector is not None and self.selector.matches(labels)


class WorkloadKind(StrEnum):
    """Objects whose selector gives a pod the default spreading constraints."""

    SERVICE = "Service"
    REPLICATION_CONTROLLER = "ReplicationController"
    REPLICA_SET = "ReplicaSet"
    STATEFUL_SET = "StatefulSet"


@dataclass(frozen=True, slots=True)
class Workload:
    kind: WorkloadKind
    namespace: str
    name: str
    selector: LabelSelector | None


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = frozenset()
    """``status.disruptedPods`` names: already counted against the budget."""

    def covers(self, pod: Pod) -> bool:
        """kube-scheduler's PDB match for preemption: same namespace and a non-empty
        selector that matches the pod's labels."""
        return (
            pod.namespace == self.namespace
            and self.selector is not None
            and not self.selector.is_empty
            and self.selector.matches(pod.labels)
        )


PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port bound on the host; ``0.0.0.0`` and TCP when unspecified."""

    port: int
    protocol: str = "TCP"
    ip: str = "0.0.0.0"


class VolumeKind(StrEnum):
    """The kinds of pod volume the volume plugins tell apart."""

    CLAIM = "persistentVolumeClaim"
    EPHEMERAL = "ephemeral"
    """A generic ephemeral volume: its claim is ``<pod>-<volume>``, owned by the pod."""
    GCE_PD = "gcePersistentDisk"
    AWS_EBS = "awsElasticBlockStore"
    RBD = "rbd"
    ISCSI = "iscsi"
    AZURE_DISK = "azureDisk"
    CINDER = "cinder"
    PORTWORX = "portworxVolume"
    CSI = "csi"
    """An inline CSI volume (not attachable: never counted against a limit)."""
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class PodVolume:
    """One ``spec.volumes`` entry, reduced to what scheduling reads."""

    name: str
    kind: VolumeKind = VolumeKind.OTHER
    claim_name: str = ""
    read_only: bool = False
    disk: str = ""
    """The disk's identity: GCE ``pdName``, EBS ``volumeID``, iSCSI ``iqn``, RBD
    ``pool/image``, Azure ``diskURI``, Cinder/Portworx ``volumeID``."""
    monitors: tuple[str, ...] = ()
    """RBD ``monitors`` (two RBD volumes conflict when their monitors overlap)."""
    driver: str = ""
    """An inline CSI volume's driver."""


@dataclass(frozen=True, slots=True)
class Pod:
    """What the scheduler reads from a Pod.

    ``requests`` is the effective request the Filter compares with free resources
    (containers, init containers, sidecars, overhead; no defaults for missing values).
    ``nonzero_cpu``/``nonzero_memory`` are the same with kube-scheduler's defaults for
    containers that omit them, which is what the scoring strategies use.
    """

    namespace: str
    name: str
    uid: str = ""
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    node_name: str = ""
    nominated_node_name: str = ""
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: NodeAffinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    scheduling_gates: tuple[str, ...] = ()
    requests: Mapping[str, int] = field(default_factory=dict)
    nonzero_cpu: int = 0
    nonzero_memory: int = 0
    host_ports: tuple[HostPort, ...] = ()
    images: tuple[str, ...] = ()
    """Normalized image names of init containers, containers, then image volumes."""
    container_count: int = 0
    """Init containers plus containers (ImageLocality's threshold scales with it)."""
    created: float = 0.0
    """``metadata.creationTimestamp`` as Unix seconds (queue order among equals)."""
    deleting: bool = False
    """``metadata.deletionTimestamp`` is set: kube-scheduler never schedules such a pod
    (a bound one still holds its resources until it is gone)."""
    pod_affinity: PodAffinity | None = None
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    start_time: float | None = None
    """``status.startTime`` as Unix seconds (preemption spares older pods first)."""
    preempted: bool = False
    """Its ``DisruptionTarget`` condition says the scheduler preempted it (it is
    terminating on behalf of a higher-priority pod)."""
    controller: tuple[str, str] | None = None
    """Kind and name of the ``ownerReferences`` entry with ``controller: true``."""
    volumes: tuple[PodVolume, ...] = ()
    resource_claims: tuple[PodResourceClaim, ...] = ()
    """``spec.resourceClaims`` (dynamic resource allocation)."""
    claim_statuses: Mapping[str, str | None] = field(default_factory=dict)
    """``status.resourceClaimStatuses``: the name of the claim the resourceclaim
    controller generated for each template-backed entry (``None``: none is needed)."""
    unsupported: tuple[str, ...] = ()
    """Fields the pod uses that this scheduler does not implement (``spec.resourceClaims``):
    such a pod is reported unschedulable, never bound."""
    raw: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The Pod object as read (what extenders are sent); ``None`` for pods built in code."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    """One ``spec.resourceClaims`` entry: a claim by name, or one made from a template."""

    name: str
    claim_name: str = ""
    template_name: str = ""


@dataclass(frozen=True, slots=True)
class NodeImage:
    names: tuple[str, ...]
    size: int


@dataclass(frozen=True, slots=True)
class Node:
    """What the scheduler reads from a Node."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Mapping[str, int] = field(default_factory=dict)
    """``status.allocatable`` in base units (milli-CPU for cpu)."""
    images: tuple[NodeImage, ...] = ()
    conditions: Mapping[str, str] = field(default_factory=dict)
    """Condition type to status (``"True"``, ``"False"``, ``"Unknown"``)."""
    raw: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The Node object as read (what extenders are sent); ``None`` for nodes built in code."""


def is_extended_resource(name: str) -> bool:
    """A vendor resource (``example.com/gpu``): has a domain that is not kubernetes.io."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def is_scalar_resource(name: str) -> bool:
    """Anything beyond cpu, memory, ephemeral-storage and pods (extended, hugepages...)."""
    return name not in (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)


class FinalBindError(Exception):
    """The API answered a binding with 409 or 404: the pod changed under us. (Here, not
    in the binder, so that the binding process imports no framework.)"""


class BindResult(StrEnum):
    """How a binding cycle ended."""

    BOUND = "bound"
    FINAL = "final"
    """409/404: an answer about the pod; backs off quietly, the watch tells the rest."""
    FAILED = "failed"
    """A fault: backs off, with ``PodScheduled=False`` (SchedulerError)."""
