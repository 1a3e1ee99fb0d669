"""What the DynamicResources plugin tests share: the API side of its writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.base import errors
from nodeagent.scheduler import api, resource_claims
from nodeagent.scheduler.resource_claims import ResourceCatalog, ResourceClaim


class RecordingWriter:
    """The API side: claims stored by key, every write recorded; ``conflicts`` status
    updates answered 409 first."""

    def __init__(self, catalog: ResourceCatalog, conflicts: int = 0) -> None:
        self.catalog = catalog
        self.conflicts = conflicts
        self.calls: list[str] = []
        self.version = 10
        self.pod_status: Mapping[str, Any] = {}

    def _store(self, claim: ResourceClaim) -> ResourceClaim:
        current = self.catalog.api_claim(claim.namespace, claim.name)
        if current is not None and current.resource_version != claim.resource_version:
            raise errors.Conflict("the object has been modified", status=409)
        self.version += 1
        body = dict(claim.raw)
        body["metadata"] = {**body["metadata"], "resourceVersion": str(self.version)}
        stored = resource_claims.parse_resource_claim(body)
        self.catalog.set_claim(stored)
        return stored

    def get_claim(self, namespace: str, name: str) -> ResourceClaim:
        self.calls.append("get")
        found = self.catalog.api_claim(namespace, name)
        assert found is not None
        return found

    def update_claim(self, claim: ResourceClaim) -> ResourceClaim:
        self.calls.append("update")
        return self._store(claim)

    def update_claim_status(self, claim: ResourceClaim) -> ResourceClaim:
        self.calls.append("update-status")
        if self.conflicts:
            self.conflicts -= 1
            raise errors.Conflict("the object has been modified", status=409)
        return self._store(claim)

    def unreserve(self, claim: ResourceClaim, uid: str) -> None:
        self.calls.append(f"unreserve {uid}")

    def create_claim(self, body: Mapping[str, Any]) -> ResourceClaim:
        self.calls.append("create")
        self.version += 1
        meta = dict(body["metadata"])
        meta.update(
            name=meta["generateName"] + "x7k2q",
            uid=f"uid-{self.version}",
            resourceVersion=str(self.version),
        )
        stored = resource_claims.parse_resource_claim({**body, "metadata": meta})
        self.catalog.set_claim(stored)
        return stored

    def delete_claim(self, claim: ResourceClaim) -> None:
        self.calls.append(f"delete {claim.name}")
        self.catalog.set_claim(claim, present=False)

    def patch_pod_status(self, pod: api.Pod, patch: Mapping[str, Any]) -> None:
        self.calls.append("patch-pod-status")
        self.pod_status = patch

    def record_event(self, pod: api.Pod, reason: str, message: str) -> None:
        self.calls.append(f"event {reason}: {message}")
