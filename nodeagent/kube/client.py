"""The agent's narrow view of the Kubernetes API.

Everything the agent does to the cluster goes through :class:`KubeClient`: read its
Node, patch the Node's status (conditions) and the Node itself (taints, the pressure
annotation), list and watch the pods bound to the node, evict or delete a pod, and
record events. Two implementations sit side by side:

* :class:`nodeagent.kube.http.HTTPKubeClient`: the official ``kubernetes`` client over
  HTTP, with bounded QPS, retries with backoff and jitter, and errors translated;
* :class:`tests.doubles.kube.FakeKubeClient`: in memory, with kube-apiserver semantics,
  a call log and error injection, for tests and for standalone runs.

Objects cross this seam as plain JSON-shaped dicts (what the API server sends), not as
the client library's generated models: the agent reads a handful of fields, and
deserializing every pod into models costs far more than the rest of a cycle.

Contract for every method:

* it raises only :class:`nodeagent.base.errors.KubeAPIError` subclasses (see
  :mod:`nodeagent.kube.errors`), after the client's own retries have been spent;
* patches are idempotent: applying the same patch twice leaves the same object;
* nothing is cached: each call reflects the server at the time of the call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

KubeObject = dict[str, Any]
"""One API object as JSON (``{"apiVersion": ..., "metadata": {...}, ...}``)."""


def api_time(wall: float) -> str:
    """A ``metav1.Time`` string: RFC 3339, UTC, second precision."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_api_time(text: object) -> float | None:
    """Unix seconds of a ``metav1.Time`` (or RFC 3339 with fractions); None if invalid."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class WatchEventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: WatchEventType
    object: KubeObject

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion", ""))


@dataclass(frozen=True, slots=True)
class ObjectList:
    """A list answer: the items and the resourceVersion to watch from."""

    items: tuple[KubeObject, ...]
    resource_version: str


class WatchStream(Protocol):
    """An open watch. Iterating yields events until the server ends the watch (its
    ``timeoutSeconds``), and raises :class:`nodeagent.kube.errors.Gone` when the
    resourceVersion has expired. ``close`` may be called from another thread and makes
    the iteration end promptly (how the agent stops within a few seconds)."""

    def __iter__(self) -> Iterator[WatchEvent]: ...

    def close(self) -> None: ...


class KubeClient(Protocol):
    def get_node(self, name: str) -> KubeObject:
        """The Node object (``nodes get``)."""
        ...

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """Strategic merge patch of the Node (``nodes patch``). A
        ``metadata.resourceVersion`` in the patch is a precondition: a stale one raises
        :class:`nodeagent.base.errors.Conflict`. Status changes are ignored here."""
        ...

    def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """Strategic merge patch of the ``nodes/status`` subresource: conditions are merged
        by ``type``, so other writers' conditions survive. Spec changes are ignored."""
        ...

    def list_pods(self, *, field_selector: str = "", label_selector: str = "") -> ObjectList:
        """Pods in every namespace matching the selectors (``pods list``)."""
        ...

    def watch_pods(
        self,
        *,
        resource_version: str,
        field_selector: str = "",
        label_selector: str = "",
        timeout_seconds: int = 1800,
    ) -> WatchStream:
        """Changes to matching pods after ``resource_version`` (``pods watch``), with
        bookmarks requested."""
        ...

    def evict_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None,
        uid: str | None = None,
    ) -> None:
        """POST a policy/v1 Eviction (``pods/eviction create``). ``uid`` is a precondition
        so a pod recreated under the same name is never hit. A PodDisruptionBudget
        refusal raises :class:`nodeagent.kube.errors.EvictionBlocked` and is never
        retried."""
        ...

    def delete_pod(
        self,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None,
        uid: str | None = None,
    ) -> None:
        """DELETE the pod (``pods delete``), bypassing disruption budgets."""
        ...

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> KubeObject:
        """Create a core/v1 Event (``events create``)."""
        ...

    def post_event(self, namespace: str, body: bytes) -> None:
        """Create a core/v1 Event already serialised (``events create``), its answer
        not read: for events written hundreds of times a second
        (:class:`~nodeagent.actuators.events.UniqueEvents`)."""
        ...

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """Patch a core/v1 Event, to bump ``count`` and ``lastTimestamp`` (``events patch``)."""
        ...


class Collection(StrEnum):
    """The cluster-wide collections an informer lists in pages
    (:class:`PagedLister`), by resource name."""

    PODS = "pods"
    NODES = "nodes"
    DISRUPTION_BUDGETS = "poddisruptionbudgets"

    @property
    def resource(self) -> str:
        return self.value

    @property
    def path(self) -> str:
        """The collection across all namespaces."""
        group = "/apis/policy/v1" if self is Collection.DISRUPTION_BUDGETS else "/api/v1"
        return f"{group}/{self.value}"


@runtime_checkable
class PagedLister(Protocol):
    """A client that can hand a list over page by page (the HTTP client; the test
    doubles list whole)."""

    def list_pages(
        self, collection: Collection, *, field_selector: str = "", label_selector: str = ""
    ) -> Iterator[ObjectList]:
        """The pages of one consistent list, each with the list's resourceVersion."""
        ...


INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the bookmark that ends a streamed list's initial state."""


@runtime_checkable
class StreamingLister(Protocol):
    """A client that can stream a list as a watch (the HTTP client): kube-apiserver's
    WatchList (``sendInitialEvents``), what client-go's reflector uses by default."""

    def watch_list(
        self,
        collection: Collection,
        *,
        field_selector: str = "",
        label_selector: str = "",
        timeout_seconds: int = 1800,
    ) -> WatchStream:
        """A watch that begins with an ADDED event for every object there is now (a
        consistent read), then a BOOKMARK annotated :data:`INITIAL_EVENTS_END` whose
        resourceVersion is that state's, then the changes after it. An API server that
        does not stream lists refuses it with
        :class:`~nodeagent.kube.errors.Invalid`."""
        ...


class StorageKind(StrEnum):
    """The storage kinds the scheduler's volume plugins watch, by resource name."""

    PERSISTENT_VOLUMES = "persistentvolumes"
    PERSISTENT_VOLUME_CLAIMS = "persistentvolumeclaims"
    STORAGE_CLASSES = "storageclasses"
    CSI_NODES = "csinodes"
    CSI_DRIVERS = "csidrivers"
    CSI_STORAGE_CAPACITIES = "csistoragecapacities"

    @property
    def api_version(self) -> str:
        core = (StorageKind.PERSISTENT_VOLUMES, StorageKind.PERSISTENT_VOLUME_CLAIMS)
        return "v1" if self in core else "storage.k8s.io/v1"

    @property
    def namespaced(self) -> bool:
        return self in (StorageKind.PERSISTENT_VOLUME_CLAIMS, StorageKind.CSI_STORAGE_CAPACITIES)

    @property
    def kind(self) -> str:
        return _STORAGE_KIND_NAMES[self]

    @property
    def path(self) -> str:
        """The collection across all namespaces."""
        group = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        return f"{group}/{self.value}"


_STORAGE_KIND_NAMES = {
    StorageKind.PERSISTENT_VOLUMES: "PersistentVolume",
    StorageKind.PERSISTENT_VOLUME_CLAIMS: "PersistentVolumeClaim",
    StorageKind.STORAGE_CLASSES: "StorageClass",
    StorageKind.CSI_NODES: "CSINode",
    StorageKind.CSI_DRIVERS: "CSIDriver",
    StorageKind.CSI_STORAGE_CAPACITIES: "CSIStorageCapacity",
}


class ResourceKind(StrEnum):
    """The dynamic resource allocation kinds the scheduler's DynamicResources plugin
    watches (``resource.k8s.io/v1``), by resource name."""

    RESOURCE_SLICES = "resourceslices"
    DEVICE_CLASSES = "deviceclasses"
    RESOURCE_CLAIMS = "resourceclaims"
    RESOURCE_CLAIM_TEMPLATES = "resourceclaimtemplates"
    """Not read by kube-scheduler: the reason a pod waits for its claim."""

    @property
    def api_version(self) -> str:
        return "resource.k8s.io/v1"

    @property
    def namespaced(self) -> bool:
        return self in (ResourceKind.RESOURCE_CLAIMS, ResourceKind.RESOURCE_CLAIM_TEMPLATES)

    @property
    def kind(self) -> str:
        return _RESOURCE_KIND_NAMES[self]

    @property
    def path(self) -> str:
        """The collection across all namespaces."""
        return f"/apis/{self.api_version}/{self.value}"


_RESOURCE_KIND_NAMES = {
    ResourceKind.RESOURCE_SLICES: "ResourceSlice",
    ResourceKind.DEVICE_CLASSES: "DeviceClass",
    ResourceKind.RESOURCE_CLAIMS: "ResourceClaim",
    ResourceKind.RESOURCE_CLAIM_TEMPLATES: "ResourceClaimTemplate",
}


class ClusterClient(KubeClient, Protocol):
    """What a cluster-wide component (the live scheduler, the extender) needs beyond the
    agent's node-local view: nodes and disruption budgets to watch, bindings, pod status,
    and Leases for leader election. Same contract as :class:`KubeClient`."""

    def list_nodes(self) -> ObjectList:
        """Every Node (``nodes list``)."""
        ...

    def watch_nodes(self, *, resource_version: str, timeout_seconds: int = 1800) -> WatchStream:
        """Changes to Nodes after ``resource_version`` (``nodes watch``), with bookmarks."""
        ...

    def list_disruption_budgets(self) -> ObjectList:
        """policy/v1 PodDisruptionBudgets in every namespace."""
        ...

    def watch_disruption_budgets(
        self, *, resource_version: str, timeout_seconds: int = 1800
    ) -> WatchStream: ...

    def list_storage(self, kind: StorageKind) -> ObjectList:
        """Every object of a storage kind (in every namespace for the namespaced ones)."""
        ...

    def watch_storage(
        self, kind: StorageKind, *, resource_version: str, timeout_seconds: int = 1800
    ) -> WatchStream: ...

    def replace_storage(
        self, kind: StorageKind, namespace: str, name: str, body: Mapping[str, Any]
    ) -> KubeObject:
        """PUT a PersistentVolume or claim whose ``metadata.resourceVersion`` is the
        precondition (:class:`nodeagent.base.errors.Conflict` when stale): what
        VolumeBinding's PreBind writes."""
        ...

    def list_resources(self, kind: ResourceKind) -> ObjectList:
        """Every object of a dynamic resource allocation kind (claims: every namespace)."""
        ...

    def watch_resources(
        self, kind: ResourceKind, *, resource_version: str, timeout_seconds: int = 1800
    ) -> WatchStream: ...

    def get_resource_claim(self, namespace: str, name: str) -> KubeObject: ...

    def replace_resource_claim(
        self, namespace: str, name: str, body: Mapping[str, Any], *, status: bool = False
    ) -> KubeObject:
        """PUT a ResourceClaim (``status``: its ``/status`` subresource) whose
        ``metadata.resourceVersion`` is the precondition (:class:`Conflict` when stale):
        what DynamicResources' PreBind and PostFilter write."""
        ...

    def patch_resource_claim_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> KubeObject:
        """Strategic merge patch of ``resourceclaims/status`` (Unreserve removes its
        pod from ``reservedFor`` by UID)."""
        ...

    def create_resource_claim(self, namespace: str, body: Mapping[str, Any]) -> KubeObject:
        """POST a ResourceClaim (a pod's extended-resource claim, its name generated)."""
        ...

    def delete_resource_claim(self, namespace: str, name: str, *, uid: str) -> None:
        """DELETE a ResourceClaim, ``uid`` the precondition (a claim of that name made
        since is not deleted)."""
        ...

    def bind_pod(self, namespace: str, name: str, *, uid: str, node_name: str) -> None:
        """POST a Binding (``pods/binding create``): the server sets ``spec.nodeName``.
        An already bound pod raises :class:`nodeagent.base.errors.Conflict`; never retried
        after an answer, since a second bind could only fail or double."""
        ...

    def patch_pod_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """Strategic merge patch of ``pods/status`` (conditions merge by ``type``)."""
        ...

    def get_lease(self, namespace: str, name: str) -> KubeObject:
        """A coordination.k8s.io/v1 Lease; :class:`nodeagent.base.errors.NotFound` if none."""
        ...

    def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> KubeObject:
        """Create a Lease; :class:`nodeagent.base.errors.Conflict` if it exists already."""
        ...

    def replace_lease(self, namespace: str, name: str, lease: Mapping[str, Any]) -> KubeObject:
        """PUT a Lease whose ``metadata.resourceVersion`` is the precondition: a stale
        one raises :class:`nodeagent.base.errors.Conflict` (someone else wrote it)."""
        ...


class AccessReviewClient(Protocol):
    """The two reviews a server makes to delegate authentication and authorization of its
    own callers to the API server (kube-scheduler's ``--authentication-kubeconfig``,
    granted by ``system:auth-delegator``). Same contract as :class:`KubeClient`: errors are
    :class:`nodeagent.base.errors.KubeAPIError` after the client's retries."""

    def create_token_review(self, token: str) -> KubeObject:
        """POST an ``authentication.k8s.io/v1`` TokenReview of ``token``; the answer with
        its ``status`` (``authenticated``, ``user``, ``error``)."""
        ...

    def create_subject_access_review(self, spec: Mapping[str, Any]) -> KubeObject:
        """POST an ``authorization.k8s.io/v1`` SubjectAccessReview with ``spec``; the answer
        with its ``status`` (``allowed``, ``denied``, ``reason``, ``evaluationError``)."""
        ...


class ApiCallObserver(Protocol):
    """Where a client reports each request and retry (the metrics layer implements it)."""

    def api_request(self, verb: str, resource: str, code: str) -> None:
        """One HTTP exchange finished; ``code`` is the status or ``"error"`` (no answer)."""
        ...

    def api_retry(self, verb: str, resource: str, reason: str) -> None: ...


class RecordingObserver:
    """Keeps what it observes, in order: (verb, resource, code) per request and (verb,
    resource, reason) per retry."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str]] = []
        self.retries: list[tuple[str, str, str]] = []

    def api_request(self, verb: str, resource: str, code: str) -> None:
        self.requests.append((verb, resource, code))

    def api_retry(self, verb: str, resource: str, reason: str) -> None:
        self.retries.append((verb, resource, reason))


class NullObserver:
    def api_request(self, verb: str, resource: str, code: str) -> None:
        pass

    def api_retry(self, verb: str, resource: str, reason: str) -> None:
        pass
