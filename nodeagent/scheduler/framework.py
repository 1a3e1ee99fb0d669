"""The scheduling framework: extension points, cycle state, and the plugin runtime.

One Protocol per extension point, in kube-scheduler's order and with its semantics
(``pkg/scheduler/framework/interface.go``). A plugin implements only the points it needs;
the framework finds them by structural checks when it builds a profile.

The one departure from kube-scheduler's interfaces is for speed and changes no result:
Filter and Score take an *array of node indices* into a
:class:`~nodeagent.scheduler.snapshot.ClusterSnapshot` and answer for all of them at once
(a mask, an int64 score array). Each Filter plugin also keeps the per-node form,
:meth:`FilterPlugin.filter_node`, which returns the full :class:`~api.Status` with
kube-scheduler's reasons; the framework calls it only to explain a rejection, and the
tests check that both forms agree.

Contracts:

* Filter plugins run in configured order and a node stops at its first rejection.
* A plugin whose PreFilter returned Skip has its Filter skipped this cycle; likewise
  PreScore/Score.
* Scores after NormalizeScore must lie in ``[0, 100]``; they are multiplied by the
  plugin's weight and summed.
* Unreserve runs in reverse order and must be idempotent.
* Plugin instances live as long as their profile: per-pod data goes into the
  :class:`CycleState`, never into the plugin.
* An exception escaping a plugin is a bug, and fails that pod's cycle only: it becomes a
  :class:`PluginError` naming plugin, extension point and pod (an Error status where
  the runner returns one), logged and counted by :class:`PluginFailures`. PreBind and
  Bind are the exception: the binding cycle catches what they raise itself.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator, KeysView, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np
from prometheus_client.core import CounterMetricFamily, Metric
from pydantic import BaseModel

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api, config, resource_claims, storage
from nodeagent.scheduler.extenders.chain import Extenders
from nodeagent.scheduler.snapshot import ClusterSnapshot, Int64s, Mask, NodeIndices

T = TypeVar("T")

log = logging.getLogger(__name__)


class PluginError(Exception):
    """A plugin could not do its work (not a verdict on the pod): the cycle errors.

    A plugin may raise it deliberately; any other exception escaping a plugin is turned
    into one by :class:`PluginFailures` (naming the plugin, extension point and pod), so
    one plugin's bug on one pod fails that pod's cycle and nothing else."""


class PluginFailures:
    """Exceptions that escaped plugins: each is logged once with the plugin, extension
    point and pod, and counted per plugin and extension point. It is a Prometheus
    collector (``nodeagent_scheduler_plugin_errors_total``) the live scheduler
    registers; the pod is named in the log and the pod's status, not in a label (pod
    names would make the series unbounded)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def guard(self, plugin: str, point: str, pod: api.Pod) -> _Guard:
        """A context that turns an exception escaping ``plugin`` into a :class:`PluginError`."""
        return _Guard(self, plugin, point, pod)

    def record(self, plugin: str, point: str, pod: api.Pod, exc: BaseException) -> PluginError:
        with self._lock:
            self.counts[(plugin, point)] += 1
        message = f"running {point} plugin {plugin!r} on pod {pod.key}: {type(exc).__name__}: {exc}"
        log.error("%s", message, exc_info=exc)
        return PluginError(message)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "nodeagent_scheduler_plugin_errors",
            "Exceptions that escaped a scheduler plugin (each failed one pod's cycle).",
            labels=("plugin", "extension_point"),
        )
        with self._lock:
            counts = list(self.counts.items())
        for (plugin, point), count in sorted(counts):
            family.add_metric((plugin, point), count)
        yield family


class _Guard:
    __slots__ = ("_failures", "_plugin", "_pod", "_point")

    def __init__(self, failures: PluginFailures, plugin: str, point: str, pod: api.Pod) -> None:
        self._failures, self._plugin, self._point, self._pod = failures, plugin, point, pod

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> Literal[False]:
        if exc is None or isinstance(exc, PluginError) or not isinstance(exc, Exception):
            return False
        raise self._failures.record(self._plugin, self._point, self._pod, exc) from exc


class CycleState:
    """Per-pod scratch space shared by the plugins of one scheduling cycle.

    ``cycle``: for the state of a preemption dry run, the state of the scheduling cycle
    it belongs to. The dry run runs PreFilter again (on a snapshot it edits), but a
    plugin whose PreFilter reads objects that the cycle's PostFilter may have changed
    since (DynamicResources after deallocating a claim) reuses the cycle's reading, as
    kube-scheduler's dry run works on a clone of the cycle's state.
    """

    def __init__(self, cycle: CycleState | None = None) -> None:
        self.cycle = cycle
        self._data: dict[str, object] = {}
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()

    def write(self, key: str, value: object) -> None:
        self._data[key] = value

    def read(self, key: str, kind: type[T]) -> T | None:
        value = self._data.get(key)
        return value if isinstance(value, kind) else None


@dataclass(frozen=True, slots=True)
class QueuedPod:
    """A pod waiting in the queue: when it (re)entered and in which order."""

    pod: api.Pod
    timestamp: float
    sequence: int = 0


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """The only nodes worth filtering (``None`` as a result means all of them)."""

    node_names: frozenset[str]

    def merge(self, other: PreFilterResult | None) -> PreFilterResult:
        return self if other is None else PreFilterResult(self.node_names & other.node_names)


class Binder(Protocol):
    """Writes the binding (live: a ``pods/binding`` POST; offline: a record)."""

    def bind(self, pod: api.Pod, node_name: str) -> api.Status: ...


class RecordingBinder:
    """The offline binder: remembers bindings, never fails."""

    def __init__(self) -> None:
        self.bindings: dict[str, str] = {}

    def bind(self, pod: api.Pod, node_name: str) -> api.Status:
        self.bindings[pod.key] = node_name
        return api.SUCCESS


class Nominator:
    """Pods that preemption nominated to a node and that are not bound yet.

    While nominated, a pod's requests count on its node against every pod of lower or
    equal priority (kube-scheduler's ``addGENominatedPods``): the scheduling cycle
    adds them before filtering. The planner and the live scheduler share this one
    record of nominations."""

    def __init__(self) -> None:
        self._by_node: dict[str, dict[str, api.Pod]] = {}
        self._node_of: dict[str, str] = {}

    def add(self, pod: api.Pod, node_name: str) -> None:
        self.remove(pod)
        self._by_node.setdefault(node_name, {})[pod.key] = pod
        self._node_of[pod.key] = node_name

    def remove(self, pod: api.Pod) -> None:
        node_name = self._node_of.pop(pod.key, None)
        if node_name is not None:
            pods = self._by_node[node_name]
            pods.pop(pod.key, None)
            if not pods:
                del self._by_node[node_name]

    def node_of(self, pod: api.Pod) -> str | None:
        return self._node_of.get(pod.key)

    def pods_on(self, node_name: str) -> list[api.Pod]:
        return list(self._by_node.get(node_name, {}).values())

    def __bool__(self) -> bool:
        return bool(self._node_of)

    def node_names(self) -> KeysView[str]:
        """The nodes holding nominated pods."""
        return self._by_node.keys()

    def counted_on(self, node_name: str, pod: api.Pod) -> list[api.Pod]:
        """:meth:`counted_for` on one node, in the same order."""
        pods = self._by_node.get(node_name)
        if pods is None:
            return []
        own, priority = pod.key, pod.priority
        return [o for key, o in pods.items() if o.priority >= priority and key != own]

    def counted_for(self, pod: api.Pod) -> list[tuple[api.Pod, str]]:
        """Nominated pods (other than ``pod``) of priority >= ``pod``'s, with their node."""
        own, priority = pod.key, pod.priority  # the pods are held by their key
        return [
            (other, node_name)
            for node_name, pods in self._by_node.items()
            for key, other in pods.items()
            if other.priority >= priority and key != own
        ]


class Preemptions:
    """Preemptors whose victims are still being deleted, off the scheduling loop
    (asynchronous preemption's ``preempting`` set in ``preemption.Executor``). While a
    pod is here, DefaultPreemption's PreEnqueue holds it back, so it is not scheduled
    (nor preempts again) on a cluster the deletions have not reached yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, int] = {}
        self._failed: set[str] = set()

    def start(self, uid: str, victims: int) -> None:
        """``uid`` preempts ``victims`` pods (none: nothing to wait for)."""
        if victims <= 0:
            return
        with self._lock:
            self._pending[uid] = self._pending.get(uid, 0) + victims

    def victim_done(self, uid: str, *, ok: bool = True) -> bool | None:
        """One victim's deletion was answered. When it was the last one: whether every
        deletion succeeded (None: others are still on the way)."""
        with self._lock:
            left = self._pending.get(uid)
            if left is None:
                return None
            if not ok:
                self._failed.add(uid)
            if left > 1:
                self._pending[uid] = left - 1
                return None
            del self._pending[uid]
            failed = uid in self._failed
            self._failed.discard(uid)
            return not failed

    def running(self, uid: str) -> bool:
        with self._lock:
            return uid in self._pending

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


@dataclass(frozen=True, slots=True)
class Victims:
    """What preempting on one node would take: the pods (most important first) and how
    many of them a PodDisruptionBudget protects."""

    pods: tuple[api.Pod, ...]
    num_pdb_violations: int = 0


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """A PostFilter's offer. For preemption: the nominated node, the victims to delete
    there, every candidate the dry run produced (``candidates``, in the dry run's
    order), and the lower-priority pods nominated to that node that lose their
    nomination. The caller applies it: the planner to its snapshot, the live scheduler
    through the API."""

    nominated_node: str | None = None
    victims: tuple[api.Pod, ...] = ()
    candidates: Mapping[str, Victims] = field(default_factory=dict)
    cleared_nominations: tuple[api.Pod, ...] = ()


class Diagnosis(Protocol):
    """Why the cycle found no node: what PostFilter plugins read."""

    def node_status(self, node: int) -> api.Status | None:
        """The rejection of node ``node`` (``None``: it was not rejected)."""
        ...

    def preemption_may_help(self) -> Mask:
        """Over all nodes: rejected by a status other than UnschedulableAndUnresolvable."""
        ...


@dataclass(slots=True)
class Handle:
    """What plugins may use besides the pod and snapshot they are handed."""

    now: float = 0.0
    """Wall-clock Unix seconds of this plan (freshness of published node data)."""
    binder: Binder = field(default_factory=RecordingBinder)
    features: config.FeatureGates = field(default_factory=config.FeatureGates)
    nominator: Nominator = field(default_factory=Nominator)
    rng: random.Random = field(default_factory=random.Random)
    """Randomness plugins may use (preemption's starting offset); seeded by the planner."""
    extenders: Extenders | None = None
    """The configuration's HTTP extenders (``None``: none configured); the scheduling
    cycle calls them, see :mod:`nodeagent.scheduler.extenders.chain`."""
    failures: PluginFailures = field(default_factory=PluginFailures)
    """Where exceptions escaping plugins are logged and counted."""
    volumes: storage.VolumeCatalog = field(default_factory=storage.VolumeCatalog)
    """PVs, PVCs, StorageClasses and the CSI objects, with the volume binder's
    assumptions (kube-scheduler's storage listers and assume cache)."""
    resources: resource_claims.ResourceCatalog = field(
        default_factory=resource_claims.ResourceCatalog
    )
    """ResourceClaims (with the allocations in flight), ResourceSlices, DeviceClasses
    (kube-scheduler's DRA manager)."""
    preemptions: Preemptions = field(default_factory=Preemptions)
    """Preemptions whose victims are being deleted (live only; the planner applies a
    preemption at once)."""

    def guard(self, plugin: str, point: str, pod: api.Pod) -> _Guard:
        return self.failures.guard(plugin, point, pod)


class ClusterEvent(StrEnum):
    """What can happen in the cluster that may make a rejected pod schedulable: the
    resource and action of kube-scheduler's ``fwk.ClusterEvent``, one member per action
    a plugin can register for (``pkg/scheduler/framework/events.go``). A Node update is
    split into what changed, a Pod update likewise (``PodSchedulingPropertiesChange``,
    ``NodeSchedulingPropertiesChange``)."""

    NODE_ADD = "NodeAdd"
    NODE_DELETE = "NodeDelete"
    NODE_ALLOCATABLE_CHANGE = "NodeAllocatableChange"
    NODE_LABEL_CHANGE = "NodeLabelChange"
    NODE_TAINT_CHANGE = "NodeTaintChange"
    NODE_CONDITION_CHANGE = "NodeConditionChange"
    NODE_SPEC_UNSCHEDULABLE_CHANGE = "NodeSpecUnschedulableChange"
    NODE_ANNOTATION_CHANGE = "NodeAnnotationChange"
    NODE_DECLARED_FEATURE_CHANGE = "NodeDeclaredFeatureChange"
    ASSIGNED_POD_ADD = "AssignedPodAdd"
    ASSIGNED_POD_UPDATE = "AssignedPodUpdate"
    """A bound pod changed in none of the ways below (only a plugin registering every
    Pod update hears it)."""
    ASSIGNED_POD_LABEL_CHANGE = "AssignedPodUpdatePodLabel"
    ASSIGNED_POD_SCALE_DOWN = "AssignedPodUpdatePodScaleDown"
    """A bound pod's requests went down (in-place resize, ``extractPodScaleDown``)."""
    ASSIGNED_POD_DELETE = "AssignedPodDelete"
    UNSCHEDULED_POD_UPDATE = "UnscheduledPodUpdate"
    UNSCHEDULED_POD_LABEL_CHANGE = "UnscheduledPodUpdatePodLabel"
    UNSCHEDULED_POD_SCALE_DOWN = "UnscheduledPodUpdatePodScaleDown"
    UNSCHEDULED_POD_TOLERATION_CHANGE = "UnscheduledPodUpdatePodToleration"
    UNSCHEDULED_POD_GATES_ELIMINATED = "UnscheduledPodUpdatePodSchedulingGatesEliminated"
    UNSCHEDULED_POD_DELETE = "UnscheduledPodDelete"
    PDB_CHANGE = "PodDisruptionBudgetChange"
    PV_ADD = "PersistentVolumeAdd"
    PV_UPDATE = "PersistentVolumeUpdate"
    PVC_ADD = "PersistentVolumeClaimAdd"
    PVC_UPDATE = "PersistentVolumeClaimUpdate"
    STORAGE_CLASS_ADD = "StorageClassAdd"
    STORAGE_CLASS_UPDATE = "StorageClassUpdate"
    CSI_NODE_ADD = "CSINodeAdd"
    CSI_NODE_UPDATE = "CSINodeUpdate"
    CSI_DRIVER_UPDATE = "CSIDriverUpdate"
    CSI_STORAGE_CAPACITY_ADD = "CSIStorageCapacityAdd"
    CSI_STORAGE_CAPACITY_UPDATE = "CSIStorageCapacityUpdate"
    RESOURCE_CLAIM_ADD = "ResourceClaimAdd"
    RESOURCE_CLAIM_UPDATE = "ResourceClaimUpdate"
    RESOURCE_SLICE_ADD = "ResourceSliceAdd"
    RESOURCE_SLICE_UPDATE = "ResourceSliceUpdate"
    DEVICE_CLASS_ADD = "DeviceClassAdd"
    DEVICE_CLASS_UPDATE = "DeviceClassUpdate"
    UNSCHEDULED_POD_GENERATED_RESOURCE_CLAIM = "UnscheduledPodUpdatePodGeneratedResourceClaim"
    """``status.resourceClaimStatuses`` changed (``UpdatePodGeneratedResourceClaim``)."""
    UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"
    """The 5-minute flush: moves every pod whatever the hints say."""
    FORCE_ACTIVATE = "ForceActivate"
    """A pod moved on purpose (its asynchronous preemption failed): no hint asked."""


E = ClusterEvent
POD_ADD_EVENTS = frozenset({E.ASSIGNED_POD_ADD})
POD_DELETE_EVENTS = frozenset({E.ASSIGNED_POD_DELETE, E.UNSCHEDULED_POD_DELETE})
POD_LABEL_EVENTS = frozenset({E.ASSIGNED_POD_LABEL_CHANGE, E.UNSCHEDULED_POD_LABEL_CHANGE})
POD_SCALE_DOWN_EVENTS = frozenset({E.ASSIGNED_POD_SCALE_DOWN, E.UNSCHEDULED_POD_SCALE_DOWN})
POD_UPDATE_EVENTS = frozenset(
    {
        E.ASSIGNED_POD_UPDATE,
        E.UNSCHEDULED_POD_UPDATE,
        *POD_LABEL_EVENTS,
        *POD_SCALE_DOWN_EVENTS,
        E.UNSCHEDULED_POD_TOLERATION_CHANGE,
        E.UNSCHEDULED_POD_GATES_ELIMINATED,
        E.UNSCHEDULED_POD_GENERATED_RESOURCE_CLAIM,
    }
)
"""``Pod/Update``: every kind of Pod update (kube-scheduler's ``fwk.Update``)."""
NODE_UPDATE_EVENTS = frozenset(
    {
        E.NODE_ALLOCATABLE_CHANGE,
        E.NODE_LABEL_CHANGE,
        E.NODE_TAINT_CHANGE,
        E.NODE_CONDITION_CHANGE,
        E.NODE_SPEC_UNSCHEDULABLE_CHANGE,
        E.NODE_ANNOTATION_CHANGE,
        E.NODE_DECLARED_FEATURE_CHANGE,
    }
)


class QueueingHint(StrEnum):
    """A plugin's answer to "may this event make the pod I rejected schedulable?"
    (``fwk.QueueingHint``)."""

    QUEUE_SKIP = "QueueSkip"
    QUEUE = "Queue"


HintFn = Callable[[api.Pod, Any, Any], QueueingHint]
"""``(rejected pod, old object, new object)``: the objects are the event's
:class:`api.Pod` or :class:`api.Node`, or the parsed ResourceClaim, ResourceSlice or
DeviceClass (old ``None`` on Add, new ``None`` on Delete).
An exception counts as :attr:`QueueingHint.QUEUE` (kube-scheduler's rule: an error must
not strand a pod)."""


@dataclass(frozen=True, slots=True)
class EventHint:
    """``fwk.ClusterEventWithHint``: the events, and the hint deciding for each pod
    (``None``: always Queue)."""

    events: frozenset[ClusterEvent]
    hint: HintFn | None = None


@runtime_checkable
class EnqueueExtensions(Protocol):
    """A plugin that says which events may undo its rejections (``EventsToRegister``).
    A plugin without it is taken to care about every event, which is safe."""

    name: str

    def events_to_register(self) -> Sequence[EventHint]: ...


def pod_update_events(old: api.Pod, new: api.Pod) -> list[ClusterEvent]:
    """What a Pod update is, as events (``PodSchedulingPropertiesChange``): a label
    change, a scale-down of its requests (with in-place resize, ``requests`` is already
    the larger of spec and status), a toleration added, its scheduling gates all
    removed; none of these: a plain update."""
    bound = bool(new.node_name)
    found: list[ClusterEvent] = []
    if old.labels != new.labels:
        found.append(E.ASSIGNED_POD_LABEL_CHANGE if bound else E.UNSCHEDULED_POD_LABEL_CHANGE)
    if is_scaled_down(old, new):
        found.append(E.ASSIGNED_POD_SCALE_DOWN if bound else E.UNSCHEDULED_POD_SCALE_DOWN)
    if not bound:
        if not new.scheduling_gates and old.scheduling_gates:
            found.append(E.UNSCHEDULED_POD_GATES_ELIMINATED)
        if len(new.tolerations) != len(old.tolerations):
            found.append(E.UNSCHEDULED_POD_TOLERATION_CHANGE)
        if new.claim_statuses != old.claim_statuses:
            found.append(E.UNSCHEDULED_POD_GENERATED_RESOURCE_CLAIM)
    if not found:
        found.append(E.ASSIGNED_POD_UPDATE if bound else E.UNSCHEDULED_POD_UPDATE)
    return found


def is_scaled_down(old: api.Pod, new: api.Pod) -> bool:
    """``extractPodScaleDown``: a resource the old pod requested is gone or lower."""
    requests = new.requests
    return any(
        name not in requests or requests[name] < value for name, value in old.requests.items()
    )


@runtime_checkable
class PreEnqueuePlugin(Protocol):
    name: str

    def pre_enqueue(self, pod: api.Pod) -> api.Status: ...


@runtime_checkable
class QueueSortPlugin(Protocol):
    name: str

    def less(self, a: QueuedPod, b: QueuedPod) -> bool: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status]: ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask:
        """Which of ``nodes`` pass; must agree with :meth:`filter_node` on every node."""
        ...

    def filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        """The verdict on one node, with kube-scheduler's code and reasons."""
        ...


@runtime_checkable
class BulkStatusFilter(Protocol):
    """A Filter plugin that gives :meth:`FilterPlugin.filter_node`'s statuses for many
    nodes at once (explaining a cycle that rejected thousands of nodes)."""

    def filter_statuses(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> tuple[list[api.Status], NodeIndices]:
        """The distinct statuses, and for each of ``nodes`` the index of its own."""
        ...


@runtime_checkable
class PreemptionAwareFilter(Protocol):
    """A Filter plugin that can say, for many nodes at once, which of its rejections
    preemption could resolve (the others are UnschedulableAndUnresolvable). Plugins
    without it are asked node by node through :meth:`FilterPlugin.filter_node`."""

    def preemption_may_help(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Mask: ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    name: str

    def post_filter(
        self,
        state: CycleState,
        pod: api.Pod,
        snapshot: ClusterSnapshot,
        diagnosis: Diagnosis,
        framework: Framework,
    ) -> tuple[PostFilterResult | None, api.Status]:
        """Runs when no node is feasible; may nominate a node (preemption)."""
        ...


@runtime_checkable
class PreScorePlugin(Protocol):
    name: str

    def pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str

    def score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> Int64s: ...


@runtime_checkable
class ScoreNormalizer(Protocol):
    """kube-scheduler's ScoreExtensions: rescale one plugin's scores over all nodes."""

    def normalize_score(self, state: CycleState, pod: api.Pod, scores: Int64s) -> Int64s: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status: ...

    def unreserve(self, state: CycleState, pod: api.Pod, node_name: str) -> None: ...


@runtime_checkable
class PermitPlugin(Protocol):
    name: str

    def permit(
        self, state: CycleState, pod: api.Pod, node_name: str
    ) -> tuple[api.Status, float]: ...


@runtime_checkable
class PreBindPlugin(Protocol):
    name: str

    def pre_bind(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status: ...


@runtime_checkable
class PreBindPreFlight(Protocol):
    """A PreBind plugin that can tell, before the binding cycle, that it has nothing to
    do for this pod (kube-scheduler's ``PreBindPreFlight`` returning Skip): a binding
    whose PreBind plugins all skip can take the direct path (no worker thread)."""

    def pre_bind_pre_flight(
        self, state: CycleState, pod: api.Pod, node_name: str
    ) -> api.Status: ...


@runtime_checkable
class BindPlugin(Protocol):
    name: str

    def bind(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status: ...


@runtime_checkable
class PostBindPlugin(Protocol):
    name: str

    def post_bind(self, state: CycleState, pod: api.Pod, node_name: str) -> None: ...


EXTENSION_PROTOCOLS: Mapping[config.ExtensionPoint, type] = {
    config.ExtensionPoint.PRE_ENQUEUE: PreEnqueuePlugin,
    config.ExtensionPoint.QUEUE_SORT: QueueSortPlugin,
    config.ExtensionPoint.PRE_FILTER: PreFilterPlugin,
    config.ExtensionPoint.FILTER: FilterPlugin,
    config.ExtensionPoint.POST_FILTER: PostFilterPlugin,
    config.ExtensionPoint.PRE_SCORE: PreScorePlugin,
    config.ExtensionPoint.SCORE: ScorePlugin,
    config.ExtensionPoint.RESERVE: ReservePlugin,
    config.ExtensionPoint.PERMIT: PermitPlugin,
    config.ExtensionPoint.PRE_BIND: PreBindPlugin,
    config.ExtensionPoint.BIND: BindPlugin,
    config.ExtensionPoint.POST_BIND: PostBindPlugin,
}

Factory = Callable[[Any, Handle], object]

_IMPLEMENTS: dict[tuple[type, config.ExtensionPoint], bool] = {}
"""Whether a plugin class implements an extension point, by class: a runtime Protocol
check costs about 0.1 ms and a profile makes some 180 of them, which was most of the
time to build a framework (a plan, a fuzz example). Plugins define their extension
methods on the class, so every instance of a class answers alike."""


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """How to build a plugin, and the model of its ``pluginConfig`` args, if any."""

    factory: Factory
    args: type[BaseModel] | None = None


Registry = Mapping[str, PluginSpec]


@dataclass(frozen=True, slots=True)
class PluginScores:
    """One score plugin's scores over the scored nodes, at each stage."""

    plugin: str
    raw: Int64s
    normalized: Int64s
    weighted: Int64s


@dataclass(frozen=True)
class ScoreOutcome:
    """The weighted totals over the scored nodes, and each scoring plugin's part (row
    ``i`` of ``normalized`` is plugin ``names[i]``'s)."""

    totals: Int64s
    names: tuple[str, ...] = ()
    raw: tuple[Int64s, ...] = ()
    normalized: Int64s = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    weights: tuple[int, ...] = ()
    status: api.Status = api.SUCCESS

    @functools.cached_property
    def plugins(self) -> tuple[PluginScores, ...]:
        """Per plugin, built the first time asked (to explain a decision), not in every
        cycle."""
        return tuple(
            PluginScores(name, raw, self.normalized[row], self.normalized[row] * weight)
            for row, (name, raw, weight) in enumerate(
                zip(self.names, self.raw, self.weights, strict=True)
            )
        )


MAX_TOTAL_SCORE = 2**63 - 1


class Framework:
    """One profile's plugins, instantiated and ordered per extension point."""

    def __init__(
        self, profile: config.Profile, registry: Registry, handle: Handle | None = None
    ) -> None:
        self.profile = profile
        self.handle = handle or Handle()
        where = f"profiles[{profile.index}] (schedulerName {profile.scheduler_name!r})"
        self._where = where
        self.plugins: dict[str, object] = {}
        for name in profile.needed_plugins():
            spec = registry.get(name)
            if spec is None:
                raise ConfigError(f"{where}: {config.unknown_plugin_message(name, registry)}")
            args = profile.plugin_args.get(name)
            if args is None and spec.args is not None:
                args = spec.args()
            self.plugins[name] = spec.factory(args, self.handle)

        lists: dict[config.ExtensionPoint, list[str]] = {}
        for point in config.ExtensionPoint:
            lists[point] = self._explicit(point)
        if profile.plugins.multi_point.enabled:
            for point in config.ExtensionPoint:
                lists[point] = self._expand_multi_point(point, lists[point])

        def instances(point: config.ExtensionPoint) -> list[Any]:
            return [self.plugins[name] for name in lists[point]]

        self.pre_enqueue: list[PreEnqueuePlugin] = instances(config.ExtensionPoint.PRE_ENQUEUE)
        self.queue_sort: list[QueueSortPlugin] = instances(config.ExtensionPoint.QUEUE_SORT)
        self.pre_filter: list[PreFilterPlugin] = instances(config.ExtensionPoint.PRE_FILTER)
        self.filter: list[FilterPlugin] = instances(config.ExtensionPoint.FILTER)
        self.post_filter: list[PostFilterPlugin] = instances(config.ExtensionPoint.POST_FILTER)
        self.pre_score: list[PreScorePlugin] = instances(config.ExtensionPoint.PRE_SCORE)
        self.score: list[ScorePlugin] = instances(config.ExtensionPoint.SCORE)
        self.reserve: list[ReservePlugin] = instances(config.ExtensionPoint.RESERVE)
        self.permit: list[PermitPlugin] = instances(config.ExtensionPoint.PERMIT)
        self.pre_bind: list[PreBindPlugin] = instances(config.ExtensionPoint.PRE_BIND)
        self.bind: list[BindPlugin] = instances(config.ExtensionPoint.BIND)
        self.post_bind: list[PostBindPlugin] = instances(config.ExtensionPoint.POST_BIND)

        if len(self.queue_sort) != 1:
            raise ConfigError(
                f"{where}: exactly one queueSort plugin is required, got {len(self.queue_sort)}"
                f" ({', '.join(p.name for p in self.queue_sort) or 'none'})"
            )
        if not self.bind:
            raise ConfigError(f"{where}: at least one bind plugin is required")
        self.weights = self._score_weights()
        self._normalizers: dict[str, ScoreNormalizer] = {
            p.name: p for p in self.score if isinstance(p, ScoreNormalizer)
        }

    @property
    def scheduler_name(self) -> str:
        return self.profile.scheduler_name

    def queueing_hints(self) -> dict[str, tuple[EventHint, ...] | None]:
        """The events each plugin that can reject a pod (at PreEnqueue, PreFilter,
        Filter, Reserve or Permit) registered, with their hints; ``None``: a plugin
        without :class:`EnqueueExtensions`, which hears every event
        (``buildQueueingHintMap``)."""
        hints: dict[str, tuple[EventHint, ...] | None] = {}
        rejecting: list[Any] = [
            *self.pre_enqueue,
            *self.pre_filter,
            *self.filter,
            *self.reserve,
            *self.permit,
        ]
        for plugin in rejecting:
            if plugin.name in hints:
                continue
            if isinstance(plugin, EnqueueExtensions):
                hints[plugin.name] = tuple(plugin.events_to_register())
            else:
                hints[plugin.name] = None
        return hints

    @property
    def percentage_of_nodes_to_score(self) -> int | None:
        return self.profile.percentage_of_nodes_to_score

    def _implements(self, name: str, point: config.ExtensionPoint) -> bool:
        plugin = self.plugins[name]
        key = (type(plugin), point)
        found = _IMPLEMENTS.get(key)
        if found is None:
            found = _IMPLEMENTS[key] = isinstance(plugin, EXTENSION_PROTOCOLS[point])
        return found

    def _explicit(self, point: config.ExtensionPoint) -> list[str]:
        names: list[str] = []
        for i, ref in enumerate(self.profile.plugins.for_point(point).enabled):
            if not self._implements(ref.name, point):
                raise ConfigError(
                    f"{self._where}: plugins.{point}.enabled[{i}]: plugin {ref.name!r} does not"
                    f" extend the {point} extension point"
                )
            if ref.name in names:
                raise ConfigError(
                    f"{self._where}: plugins.{point}.enabled[{i}]: plugin {ref.name!r} is"
                    f" already enabled for {point}"
                )
            names.append(ref.name)
        return names

    def _expand_multi_point(self, point: config.ExtensionPoint, explicit: list[str]) -> list[str]:
        """kube-scheduler's MultiPoint expansion of one extension point. Three parts, in
        order: the plugins enabled both at the point and in MultiPoint (explicit
        overrides, in the point's own order), then the other MultiPoint plugins that
        implement the point and are not disabled there, then the rest of the point's
        own plugins."""
        disabled = {ref.name for ref in self.profile.plugins.for_point(point).disabled}
        if "*" in disabled:
            return explicit
        overridden: set[str] = set()
        multi: list[str] = []
        for i, ref in enumerate(self.profile.plugins.multi_point.enabled):
            if not self._implements(ref.name, point) or ref.name in disabled:
                continue
            if ref.name in explicit:
                overridden.add(ref.name)
                continue
            if ref.name in multi:
                raise ConfigError(
                    f"{self._where}: plugins.multiPoint.enabled[{i}]: plugin {ref.name!r} is"
                    f" already enabled for {point}"
                )
            multi.append(ref.name)
        overrides = [name for name in explicit if name in overridden]
        rest = [name for name in explicit if name not in overridden]
        return [*overrides, *multi, *rest]

    def _score_weights(self) -> dict[str, int]:
        weights: dict[str, int] = {}
        total = 0
        refs = [*self.profile.plugins.score.enabled, *self.profile.plugins.multi_point.enabled]
        for ref in refs:
            if ref.name in weights or not self._implements(ref.name, config.ExtensionPoint.SCORE):
                continue
            weight = ref.weight or 1
            if weight * api.MAX_NODE_SCORE > MAX_TOTAL_SCORE - total:
                raise ConfigError(f"{self._where}: total score of Score plugins could overflow")
            weights[ref.name] = weight
            total += weight * api.MAX_NODE_SCORE
        return weights

    # --- running the extension points -------------------------------------------------

    def less(self, a: QueuedPod, b: QueuedPod) -> bool:
        return self.queue_sort[0].less(a, b)

    def _failed(self, plugin: str, point: str, pod: api.Pod, exc: Exception) -> PluginError:
        """``exc`` raised by ``plugin``: a deliberate PluginError as is, any other
        exception logged and counted. (The hot runners use try/except, free when
        nothing is raised, rather than a guard context per call.)"""
        if isinstance(exc, PluginError):
            return exc
        return self.handle.failures.record(plugin, point, pod, exc)

    def run_pre_enqueue(self, pod: api.Pod) -> api.Status:
        for plugin in self.pre_enqueue:
            try:
                with self.handle.guard(plugin.name, "PreEnqueue", pod):
                    status = plugin.pre_enqueue(pod)
            except PluginError as exc:
                return api.error(str(exc)).with_plugin(plugin.name)
            if not status.is_success:
                return status.with_plugin(plugin.name)
        return api.SUCCESS

    def run_pre_filter(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot
    ) -> tuple[PreFilterResult | None, api.Status, tuple[str, ...]]:
        """The merged node-name restriction, the status, and the restricting plugins."""
        result: PreFilterResult | None = None
        restricting: list[str] = []
        for plugin in self.pre_filter:
            try:
                partial, status = plugin.pre_filter(state, pod, snapshot)
            except Exception as exc:
                error = self._failed(plugin.name, "PreFilter", pod, exc)
                return None, api.error(str(error)).with_plugin(plugin.name), ()
            if status.is_skip:
                state.skip_filter.add(plugin.name)
                continue
            if not status.is_success:
                if status.is_rejection:
                    return None, status.with_plugin(plugin.name), tuple(restricting)
                message = f"running PreFilter plugin {plugin.name!r}: {status.message}"
                return None, api.error(message).with_plugin(plugin.name), ()
            if partial is not None:
                restricting.append(plugin.name)
                result = partial.merge(result)
                if not result.node_names:
                    if len(restricting) == 1:
                        message = f"node(s) didn't satisfy plugin {restricting[0]}"
                    else:
                        message = (
                            f"node(s) didn't satisfy plugin(s) [{' '.join(restricting)}]"
                            " simultaneously"
                        )
                    status = api.unschedulable(message, unresolvable=True)
                    return result, status, tuple(restricting)
        return result, api.SUCCESS, tuple(restricting)

    def active_filters(self, state: CycleState) -> list[FilterPlugin]:
        return [p for p in self.filter if p.name not in state.skip_filter]

    def run_filter_node(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, node: int
    ) -> api.Status:
        """Per-node Filter, stopping at the first rejection (used to explain)."""
        for plugin in self.active_filters(state):
            try:
                with self.handle.guard(plugin.name, "Filter", pod):
                    status = plugin.filter_node(state, pod, snapshot, node)
            except PluginError as exc:
                return api.error(str(exc)).with_plugin(plugin.name)
            if not status.is_success:
                return status.with_plugin(plugin.name)
        return api.SUCCESS

    def run_post_filter(
        self,
        state: CycleState,
        pod: api.Pod,
        snapshot: ClusterSnapshot,
        diagnosis: Diagnosis,
    ) -> tuple[PostFilterResult | None, api.Status]:
        """kube-scheduler's RunPostFilterPlugins: the first success wins; an unresolvable
        rejection or an error stops the run; otherwise every plugin runs, their reasons
        are collected, the first rejecting plugin is named, and the last nomination
        offered is kept."""
        nominated: PostFilterResult | None = None
        reasons: list[str] = []
        rejector = ""
        for plugin in self.post_filter:
            try:
                with self.handle.guard(plugin.name, "PostFilter", pod):
                    offered, status = plugin.post_filter(state, pod, snapshot, diagnosis, self)
            except PluginError as exc:  # from it or from the filters its dry run ran
                return None, api.error(str(exc)).with_plugin(plugin.name)
            if status.is_success:
                return offered, status
            if status.code is api.Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return offered, status.with_plugin(plugin.name)
            if not status.is_rejection:
                message = f"running PostFilter plugin {plugin.name!r}: {status.message}"
                return None, api.error(message).with_plugin(plugin.name)
            nominated = offered or nominated
            reasons.extend(status.reasons)
            rejector = rejector or plugin.name
        return nominated, api.Status(api.Code.UNSCHEDULABLE, tuple(reasons), rejector)

    def run_pre_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> api.Status:
        for plugin in self.pre_score:
            try:
                status = plugin.pre_score(state, pod, snapshot, nodes)
            except Exception as exc:
                error = self._failed(plugin.name, "PreScore", pod, exc)
                return api.error(str(error)).with_plugin(plugin.name)
            if status.is_skip:
                state.skip_score.add(plugin.name)
            elif not status.is_success:
                message = f"running PreScore plugin {plugin.name!r}: {status.message}"
                return api.error(message).with_plugin(plugin.name)
        return api.SUCCESS

    def run_score(
        self, state: CycleState, pod: api.Pod, snapshot: ClusterSnapshot, nodes: NodeIndices
    ) -> ScoreOutcome:
        """Score, NormalizeScore and the weighted totals. The normalized scores go into
        one matrix, range-checked and weighted with a few calls rather than a few per
        plugin (a cycle's cost is mostly its number of numpy calls). The outcome is the
        one of checking and adding each plugin in turn: the first plugin that raised or
        returned a score out of range fails the run, and the totals and details are
        those of the plugins before it."""
        plugins = [p for p in self.score if p.name not in state.skip_score]
        normalized = np.empty((len(plugins), len(nodes)), dtype=np.int64)
        raws: list[Int64s] = []
        raised: Exception | None = None
        for row, plugin in enumerate(plugins):
            normalizer = self._normalizers.get(plugin.name)
            try:
                raw = np.asarray(plugin.score(state, pod, snapshot, nodes), dtype=np.int64)
                if normalizer is None:
                    normalized[row] = raw
                else:
                    normalized[row] = normalizer.normalize_score(state, pod, raw.copy())
            except Exception as exc:
                raised = exc
                break
            raws.append(raw)
        valid = len(raws)
        failure: api.Status | None = None
        scored = normalized[:valid]
        if scored.size and (scored.min() < api.MIN_NODE_SCORE or scored.max() > api.MAX_NODE_SCORE):
            outside = (scored < api.MIN_NODE_SCORE) | (scored > api.MAX_NODE_SCORE)
            valid = int(np.flatnonzero(outside.any(axis=1))[0])
            bad = scored[valid][outside[valid]][0]
            failure = api.error(
                f"plugin {plugins[valid].name!r} returns an invalid score {bad}, it should be"
                f" in the range of [{api.MIN_NODE_SCORE}, {api.MAX_NODE_SCORE}] after"
                " normalizing"
            )
        elif raised is not None:
            failure = api.error(str(self._failed(plugins[valid].name, "Score", pod, raised)))
        names = tuple(plugin.name for plugin in plugins[:valid])
        weights = tuple(self.weights[name] for name in names)
        totals: Int64s = np.array(weights, dtype=np.int64) @ normalized[:valid]
        outcome = ScoreOutcome(totals, names, tuple(raws[:valid]), normalized[:valid], weights)
        return outcome if failure is None else replace(outcome, status=failure)

    def has_score_plugins(self) -> bool:
        return bool(self.score)

    def run_reserve(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        for plugin in self.reserve:
            try:
                with self.handle.guard(plugin.name, "Reserve", pod):
                    status = plugin.reserve(state, pod, node_name)
            except PluginError as exc:
                return api.error(str(exc)).with_plugin(plugin.name)
            if not status.is_success:
                return status.with_plugin(plugin.name)
        return api.SUCCESS

    def run_unreserve(self, state: CycleState, pod: api.Pod, node_name: str) -> None:
        for plugin in reversed(self.reserve):
            try:  # every plugin's Unreserve runs, whatever one of them does
                with self.handle.guard(plugin.name, "Unreserve", pod):
                    plugin.unreserve(state, pod, node_name)
            except PluginError:
                continue  # logged and counted by the guard

    def run_permit(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        for plugin in self.permit:
            try:
                with self.handle.guard(plugin.name, "Permit", pod):
                    status, _timeout = plugin.permit(state, pod, node_name)
            except PluginError as exc:
                return api.error(str(exc)).with_plugin(plugin.name)
            if status.code is api.Code.WAIT:
                # Offline there is nobody to allow a waiting pod: report it, don't hang.
                reason = f"pod is waiting at Permit plugin {plugin.name}"
                return api.unschedulable(reason).with_plugin(plugin.name)
            if not status.is_success:
                return status.with_plugin(plugin.name)
        return api.SUCCESS

    def run_pre_bind(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        # PreBind and Bind may raise: the binding cycle (live: binder.py) catches what
        # they raise and tells a final refusal from a failure by the exception's type.
        for plugin in self.pre_bind:
            status = plugin.pre_bind(state, pod, node_name)
            if not status.is_success:
                return status.with_plugin(plugin.name)
        return api.SUCCESS

    def pre_bind_skipped(self, state: CycleState, pod: api.Pod, node_name: str) -> bool:
        """Whether every PreBind plugin says it has nothing to do for this binding."""
        for plugin in self.pre_bind:
            if not isinstance(plugin, PreBindPreFlight):
                return False
            if not plugin.pre_bind_pre_flight(state, pod, node_name).is_skip:
                return False
        return True

    def run_bind(self, state: CycleState, pod: api.Pod, node_name: str) -> api.Status:
        """The bind step: an interested binder extender first (kube-scheduler's
        ``extendersBinding``), else the Bind plugins until one does not Skip."""
        if self.handle.extenders is not None:
            bound = self.handle.extenders.bind(pod, node_name)
            if bound is not None:
                return bound
        for plugin in self.bind:
            status = plugin.bind(state, pod, node_name)
            if status.is_skip:
                continue
            return status if status.is_success else status.with_plugin(plugin.name)
        return api.error("no bind plugin bound the pod")

    def run_post_bind(self, state: CycleState, pod: api.Pod, node_name: str) -> None:
        for plugin in self.post_bind:
            try:  # informational: the pod is bound whatever PostBind does
                with self.handle.guard(plugin.name, "PostBind", pod):
                    plugin.post_bind(state, pod, node_name)
            except PluginError:
                continue  # logged and counted by the guard


def build_frameworks(
    configuration: config.SchedulerConfiguration,
    registry: Registry,
    handle: Handle | None = None,
) -> dict[str, Framework]:
    """One framework per profile, keyed by scheduler name; all must sort the queue alike.
    The configuration's extenders are shared by every profile, as in kube-scheduler."""
    shared = handle or Handle()
    if configuration.extenders and shared.extenders is None:
        shared.extenders = Extenders(configuration.extenders)
    frameworks = {
        profile.scheduler_name: Framework(profile, registry, shared)
        for profile in configuration.profiles
    }
    sorts: Sequence[str] = sorted({fw.queue_sort[0].name for fw in frameworks.values()})
    if len(sorts) > 1:
        raise ConfigError(
            f"profiles: queueSort must be the same for all profiles, got {', '.join(sorts)}"
        )
    return frameworks
