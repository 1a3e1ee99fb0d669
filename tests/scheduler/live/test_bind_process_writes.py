"""Claim writes through the binding process, for real: a spawned child connected to the
fake API server over HTTP PUTs and POSTs what the scheduler hands it and answers with
the stored object; a 409 comes back as the Conflict the scheduler's own client raises
(PreBind re-reads the claim on one); a 5xx is retried in the child and the retry
reaches the scheduler's metrics; a fault that outlasts the retries is Unavailable; and
the claim writer gives the same claims through the child as through the client. The
wire's write message and its answer survive a round trip through the framing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from nodeagent.base import errors
from nodeagent.kube import client, http, writes
from nodeagent.kube import errors as kube_errors
from nodeagent.scheduler import resource_claims
from nodeagent.scheduler.live import bind_child
from nodeagent.scheduler.live.bind_process import ProcessBinder
from nodeagent.scheduler.live.resources import APIClaimWriter
from tests.fakeapi.fixtures import clock, kube
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler.live.test_bind_process import Binder, spec

__all__ = ["clock", "kube"]


@pytest.fixture
def binder(fake_api: FakeAPIServer, tmp_path: Path) -> Iterator[Binder]:
    recorder = client.RecordingObserver()
    binder = ProcessBinder(spec(fake_api, tmp_path), lambda: True, observer=recorder)
    binder.start()
    try:
        yield binder, recorder
    finally:
        binder.close()


def claim_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]
            }
        },
    }


def put(
    process_binder: ProcessBinder, claim: dict[str, Any], *, status: bool = False
) -> dict[str, Any]:
    meta = claim["metadata"]
    resource = "resourceclaims/status" if status else "resourceclaims"
    answer = process_binder.write(
        "PUT",
        writes.resource_claim_path(meta["namespace"], meta["name"], status=status),
        msgspec.json.encode(claim),
        verb="update",
        resource=resource,
        what=f"replace {resource} default/{meta['name']}",
    )
    stored = msgspec.json.decode(answer)
    assert isinstance(stored, dict)
    return stored


def test_a_put_answered_200_returns_the_stored_object(
    fake_api: FakeAPIServer, binder: Binder
) -> None:
    process_binder, recorder = binder
    created = fake_api.cluster.create("resourceclaims", claim_body("c1"))
    changed = {**created, "metadata": {**created["metadata"], "finalizers": ["f.example/x"]}}
    stored = put(process_binder, changed)
    assert stored["metadata"]["finalizers"] == ["f.example/x"]
    assert stored["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert stored == fake_api.cluster.get("resourceclaims", "default", "c1")
    assert recorder.requests == [("update", "resourceclaims", "200")]


def test_a_409_is_the_conflict_the_client_raises(
    fake_api: FakeAPIServer, binder: Binder, kube: http.HTTPKubeClient
) -> None:
    process_binder, recorder = binder
    created = fake_api.cluster.create("resourceclaims", claim_body("c1"))
    put(process_binder, {**created, "status": {"reservedFor": []}}, status=True)
    # written at the resourceVersion the first write replaced
    with pytest.raises(errors.Conflict) as through_child:
        put(process_binder, created)
    with pytest.raises(errors.Conflict) as through_client:
        kube.replace_resource_claim("default", "c1", created)
    assert str(through_child.value) == str(through_client.value)
    assert through_child.value.status == 409
    assert recorder.requests[-1] == ("update", "resourceclaims", "409")
    assert not recorder.retries


def test_a_404_is_not_found(fake_api: FakeAPIServer, binder: Binder) -> None:
    process_binder, _ = binder
    with pytest.raises(errors.NotFound, match="replace resourceclaims default/gone"):
        put(process_binder, claim_body("gone"))


def test_a_5xx_is_retried_in_the_child_and_the_retry_reaches_the_metrics(
    fake_api: FakeAPIServer, binder: Binder
) -> None:
    process_binder, recorder = binder
    created = fake_api.cluster.create("resourceclaims", claim_body("c1"))
    fake_api.fail_next(1, status=503, method="PUT", path="/resourceclaims/c1$")
    changed = {**created, "metadata": {**created["metadata"], "labels": {"a": "b"}}}
    assert put(process_binder, changed)["metadata"]["labels"] == {"a": "b"}
    assert recorder.requests == [
        ("update", "resourceclaims", "503"),
        ("update", "resourceclaims", "200"),
    ]
    assert [r[:2] for r in recorder.retries] == [("update", "resourceclaims")]


def test_a_fault_that_outlasts_the_retries_is_unavailable(
    fake_api: FakeAPIServer, binder: Binder
) -> None:
    process_binder, _ = binder
    created = fake_api.cluster.create("resourceclaims", claim_body("c1"))
    fake_api.fail_next(10, status=500, method="PUT", path="/resourceclaims/c1$")
    with pytest.raises(kube_errors.Unavailable, match="replace resourceclaims default/c1: 500"):
        put(process_binder, created)
    assert "labels" not in fake_api.cluster.get("resourceclaims", "default", "c1")["metadata"]


def test_only_post_and_put_are_written_there(binder: Binder) -> None:
    process_binder, _ = binder
    with pytest.raises(ValueError, match="PATCH"):
        process_binder.write(
            "PATCH", "/x", b"{}", verb="patch", resource="resourceclaims", what="patch x"
        )


@pytest.mark.parametrize("through_child", [False, True], ids=["client", "child"])
def test_the_claim_writer_writes_the_same_claims_through_the_child(
    fake_api: FakeAPIServer,
    binder: Binder,
    kube: http.HTTPKubeClient,
    through_child: bool,
) -> None:
    process_binder, _ = binder
    writer = APIClaimWriter(kube, writes=process_binder if through_child else None)
    created = writer.create_claim(claim_body("c1"))
    assert created.raw == fake_api.cluster.get("resourceclaims", "default", "c1")
    finalized = writer.update_claim(resource_claims.with_finalizer(created))
    assert resource_claims.FINALIZER in finalized.finalizers
    allocated = writer.update_claim_status(
        resource_claims.with_allocation(
            finalized, None, (resource_claims.Consumer("pods", "p", "u"),)
        )
    )
    stored = fake_api.cluster.get("resourceclaims", "default", "c1")
    assert allocated.raw == stored
    assert [c.uid for c in allocated.parsed.reserved_for] == ["u"]
    with pytest.raises(errors.Conflict):
        writer.update_claim(finalized)  # a resourceVersion behind


def test_a_write_and_its_answer_survive_the_wire() -> None:
    body = msgspec.json.encode(claim_body("c1"))
    sent: bind_child.Write = (7, "PUT", "/apis/x", body, "update", "resourceclaims", "what")
    answered: bind_child.Written = (7, 409, b'{"kind":"Status"}')
    wire = bind_child.frame(sent) + bind_child.frame(([], [], [], 0, [], [answered]))
    frames = bind_child.Frames()
    # split anywhere: the messages come out whole
    first = frames.feed(wire[:5])
    rest = frames.feed(wire[5:])
    assert first == []
    assert rest[0] == list(sent)
    assert rest[1][5] == [list(answered)]
