"""The live scheduler's claim writes for extended resources backed by DRA, over HTTP to
the fake API server: the claim created from ``generateName``, deleted with its UID as
the precondition, the pod's ``status.extendedResourceClaimStatus`` patched."""

from __future__ import annotations

import pytest

from nodeagent.base import errors
from nodeagent.kube import http
from nodeagent.scheduler import objects, resource_claims
from nodeagent.scheduler.live.resources import APIClaimWriter
from tests.fakeapi.fixtures import clock, fake_api, kube
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler import builders
from tests.scheduler import dra_builders as b

__all__ = ["clock", "fake_api", "kube"]


def test_create_name_and_delete_the_extended_claim(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    body = builders.pod_dict("my-pod")
    body["metadata"]["uid"] = b.POD_UID
    fake_api.cluster.create("pods", body)
    pod = objects.parse_pod(body)
    writer = APIClaimWriter(kube)
    draft = resource_claims.parse_resource_claim(resource_claims.extended_claim_body(pod))
    asking = resource_claims.with_requests(
        draft,
        [{"name": "container-0-request-0", "exactly": {"deviceClassName": b.CLASS, "count": 1}}],
    )
    created = writer.create_claim(resource_claims.creatable(asking))
    assert created.name.startswith("my-pod-extended-resources-")
    assert len(created.name) > len("my-pod-extended-resources-")
    assert created.parsed.annotations == {resource_claims.EXTENDED_CLAIM_ANNOTATION: "true"}
    assert created.controller_uid == b.POD_UID
    stored = fake_api.cluster.get("resourceclaims", "default", created.name)
    assert stored["spec"]["devices"]["requests"][0]["name"] == "container-0-request-0"

    writer.patch_pod_status(
        pod,
        {"status": {"extendedResourceClaimStatus": {"resourceClaimName": created.name}}},
    )
    found = fake_api.cluster.get("pods", "default", "my-pod")
    assert found["status"]["extendedResourceClaimStatus"] == {"resourceClaimName": created.name}

    stale = resource_claims.parse_resource_claim(
        {**dict(created.raw), "metadata": {**created.raw["metadata"], "uid": "another"}}
    )
    with pytest.raises(errors.Conflict):
        writer.delete_claim(stale)
    writer.delete_claim(created)
    with pytest.raises(errors.NotFound):
        fake_api.cluster.get("resourceclaims", "default", created.name)
