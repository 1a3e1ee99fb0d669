"""The paths and bodies of the writes made once per scheduled pod (its binding, its
``Scheduled`` event), shared by the client that sends them one at a time
(:mod:`~nodeagent.kube.http`) and the one that pipelines them
(:mod:`~nodeagent.kube.pipeline`, in the binding process, which imports no more than
this)."""

from __future__ import annotations

import urllib.parse

import msgspec


def segment(value: str) -> str:
    """``value`` as one path segment."""
    return urllib.parse.quote(value, safe="")


def binding_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(name)}/binding"


def pod_status_path(namespace: str, name: str) -> str:
    """A pod's status subresource, for the scheduler's strategic merge patches."""
    return f"/api/v1/namespaces/{segment(namespace)}/pods/{segment(name)}/status"


def resource_claim_path(namespace: str, name: str, *, status: bool = False) -> str:
    """A ResourceClaim (``status``: its status subresource), for a PUT."""
    path = (
        f"/apis/resource.k8s.io/v1/namespaces/{segment(namespace)}/resourceclaims/{segment(name)}"
    )
    return f"{path}/status" if status else path


def resource_claims_path(namespace: str) -> str:
    """A namespace's ResourceClaims, for a POST."""
    return f"/apis/resource.k8s.io/v1/namespaces/{segment(namespace)}/resourceclaims"


def events_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{segment(namespace)}/events"


def binding_body(namespace: str, name: str, *, uid: str, node_name: str) -> bytes:
    """The ``pods/NAME/binding`` request body: a v1 Binding with the pod's uid (the API
    server refuses it for a namesake pod) and the target node."""
    return msgspec.json.encode(
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
    )
