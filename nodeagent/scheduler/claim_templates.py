"""ResourceClaimTemplates: why a pod's claim is not there yet, and the claim the
resourceclaim controller would make from one.

A pod entry ``spec.resourceClaims[].resourceClaimTemplateName`` gets its claim from
kube-controller-manager's resourceclaim controller, which creates it from the template
(``pkg/controller/resourceclaim/controller.go``, ``handleClaim``) and names it in the
pod's ``status.resourceClaimStatuses``. Until then kube-scheduler only says
``ResourceClaim not created yet`` (it does not read templates). Reading them adds the
reason an operator needs: the template is missing (the controller fails with
``resource claim template "t": ... not found`` and the pod waits for ever), or it is there
and the controller has yet to act.

The planner has no controller: :func:`materialize` makes the claims the controller
would make (the template's spec, labels and annotations, the pod as controlling owner,
the ``resource.kubernetes.io/pod-claim-name`` annotation, a name from the controller's
``<pod>-<claim>-`` base) so that such a pod is planned like any other.

:class:`TemplateStore` holds the templates (the live scheduler's informer, or the
cluster file); ``tracked`` says whether they are known at all (the informer synced, or
the file lists templates), since a missing template is only news when they are.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api
from nodeagent.scheduler.dra import model

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""``resourceapi.PodResourceClaimAnnotation``: the pod's claim entry a generated claim is for."""
MAX_BASE_LENGTH = 57
"""The controller's ``maxBaseLen``: room for the five random characters of a 63-character name."""
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The characters the API server's name generator draws from (``utilrand.String``)."""


@dataclass(frozen=True, slots=True)
class ClaimTemplate:
    """A ResourceClaimTemplate: what a claim made from it carries."""

    namespace: str
    name: str
    spec: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """``spec.spec``: the claim's spec."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def pod_controller_reference(pod: api.Pod) -> dict[str, Any]:
    """The owner reference a claim made for ``pod`` carries, by the resourceclaim
    controller or by the scheduler: the pod as its controller, with no
    ``blockOwnerDeletion`` (which would need update on ``pods/finalizers``)."""
    return {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}


def parse_claim_template(obj: Mapping[str, Any]) -> ClaimTemplate:
    """A ResourceClaimTemplate as the API serves it (a clear error names a bad field)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name") or not meta.get("namespace"):
        raise ConfigError(
            "ResourceClaimTemplate: metadata.name and metadata.namespace are required",
            field="metadata",
        )
    where = f"ResourceClaimTemplate {meta['namespace']}/{meta['name']}"
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: spec must be an object", field="spec")
    claim_meta = spec.get("metadata") or {}
    claim_spec = spec.get("spec")
    if not isinstance(claim_meta, Mapping) or not isinstance(claim_spec, Mapping):
        raise ConfigError(
            f"{where}: spec.metadata and spec.spec must be objects (spec.spec is required)",
            field="spec.spec",
        )
    try:  # refused here, as the API server refuses it, not when a claim is made from it
        model.parse_resource_claim(
            {"metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "spec": claim_spec}
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: spec.spec: {exc}", field="spec.spec") from None
    return ClaimTemplate(
        str(meta["namespace"]),
        str(meta["name"]),
        claim_spec,
        {str(k): str(v) for k, v in (claim_meta.get("labels") or {}).items()},
        {str(k): str(v) for k, v in (claim_meta.get("annotations") or {}).items()},
    )


class TemplateStore:
    """The templates by namespace and name; thread-safe (the informer writes, the
    scheduling loop reads)."""

    def __init__(self, templates: Iterable[ClaimTemplate] = (), *, tracked: bool = False) -> None:
        self._lock = threading.Lock()
        self._templates = {t.key: t for t in templates}
        self.tracked = tracked or bool(self._templates)
        """Whether the templates are known (else a missing one says nothing)."""

    def get(self, namespace: str, name: str) -> ClaimTemplate | None:
        with self._lock:
            return self._templates.get(f"{namespace}/{name}")

    def set(self, template: ClaimTemplate, *, present: bool = True) -> None:
        with self._lock:
            if present:
                self._templates[template.key] = template
            else:
                self._templates.pop(template.key, None)

    def discard(self, namespace: str, name: str) -> None:
        with self._lock:
            self._templates.pop(f"{namespace}/{name}", None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._templates)


def not_created_reason(pod: api.Pod, entry: api.PodResourceClaim, store: TemplateStore) -> str:
    """Why the claim of ``entry`` (made from a template) is not there: kube-scheduler's
    ``ResourceClaim not created yet``, and what the template says about it when known."""
    reason = f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet'
    if not store.tracked:
        return reason
    template = f'ResourceClaimTemplate "{pod.namespace}/{entry.template_name}"'
    if store.get(pod.namespace, entry.template_name) is None:
        return f"{reason}: {template} not found, the resourceclaim controller cannot create it"
    return f"{reason}: waiting for the resourceclaim controller to create it from {template}"


def generated_name(pod_name: str, claim_name: str, taken: Iterable[str] = ()) -> str:
    """The controller's ``<pod>-<claim>-`` base (both parts truncated in proportion
    when too long) and five characters from the name generator's alphabet, drawn from
    a hash of the base instead of at random so that a plan is repeatable."""
    base = f"{pod_name}-{claim_name}-"
    if len(base) > MAX_BASE_LENGTH:
        length = len(base)
        base = (
            pod_name[: len(pod_name) * MAX_BASE_LENGTH // length]
            + "-"
            + claim_name[: len(claim_name) * MAX_BASE_LENGTH // length]
        )
    used = set(taken)
    attempt = 0
    while True:
        digest = hashlib.sha256(f"{base}/{attempt}".encode()).digest()
        name = base + "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])
        if name not in used:
            return name
        attempt += 1


def claim_object(
    pod: api.Pod, entry: api.PodResourceClaim, template: ClaimTemplate, name: str
) -> dict[str, Any]:
    """The ResourceClaim the controller creates for ``entry`` from ``template`` (the UID
    stands in for the one the API server would assign)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": pod.namespace,
            "uid": f"planned-{pod.uid}-{entry.name}",
            "labels": dict(template.labels),
            "annotations": {**template.annotations, POD_CLAIM_NAME_ANNOTATION: entry.name},
            "ownerReferences": [pod_controller_reference(pod)],
        },
        "spec": copy.deepcopy(dict(template.spec)),
    }


def pending_entries(pod: api.Pod) -> list[api.PodResourceClaim]:
    """The pod's template entries whose claim the controller has not named yet."""
    return [e for e in pod.resource_claims if e.template_name and e.name not in pod.claim_statuses]


def with_claim_names(pod: api.Pod, names: Mapping[str, str]) -> api.Pod:
    """``pod`` once the controller has named its generated claims in its status."""
    return replace(pod, claim_statuses={**pod.claim_statuses, **names})


def materialize(
    pods: Iterable[api.Pod], store: TemplateStore, claim_names: Iterable[str]
) -> tuple[list[api.Pod], list[dict[str, Any]]]:
    """What the resourceclaim controller does before a plan: for each pod entry made from
    a template that exists, the claim (named apart from ``claim_names``, the namespaced
    ``ns/name`` keys of the claims there are) and the pod naming it in its status. An
    entry whose template is missing stays as it is (the plugin says why)."""
    taken = set(claim_names)
    planned: list[api.Pod] = []
    claims: list[dict[str, Any]] = []
    for pod in pods:
        names: dict[str, str] = {}
        for entry in pending_entries(pod):
            template = store.get(pod.namespace, entry.template_name)
            if template is None:
                continue
            in_namespace = (k.partition("/")[2] for k in taken if k.startswith(f"{pod.namespace}/"))
            name = generated_name(pod.name, entry.name, in_namespace)
            taken.add(f"{pod.namespace}/{name}")
            claims.append(claim_object(pod, entry, template, name))
            names[entry.name] = name
        planned.append(with_claim_names(pod, names) if names else pod)
    return planned, claims
