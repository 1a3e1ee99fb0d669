"""The claim informer's events, as the live scheduler's queueing hints receive them: an
update carries the old claim as the catalog read it when it arrived (not parsed a
second time), the same reading a fresh parse gives; a claim the catalog does not hold
as that very object is parsed afresh."""

from __future__ import annotations

from typing import Any

from nodeagent.kube import client, informer
from nodeagent.scheduler import resource_claims
from nodeagent.scheduler.framework import ClusterEvent
from nodeagent.scheduler.live import resources
from nodeagent.scheduler.resource_claims import ResourceCatalog
from tests.doubles.kube import FakeCluster, FakeKubeClient

Kind = client.ResourceKind


def claim(version: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "c1",
            "namespace": "default",
            "uid": "u1",
            "resourceVersion": version,
            "finalizers": finalizers or [],
        },
        "spec": {
            "devices": {
                "requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": 1}}]
            }
        },
    }


def claim_informer(informers: resources.ResourceInformers) -> informer.Informer:
    """The claims' informer (the group holds one per kind, slices and classes first)."""
    found = [i for i in informers.informers if i.list_watch.resource == Kind.RESOURCE_CLAIMS.value]
    assert len(found) == 1
    return found[0]


def test_an_update_hands_the_hints_the_old_claim_as_the_catalog_read_it() -> None:
    catalog = ResourceCatalog()
    seen: list[tuple[ClusterEvent, object, object]] = []
    informers = resources.ResourceInformers(
        FakeKubeClient(FakeCluster()), catalog, lambda *event: seen.append(event)
    )
    claims = claim_informer(informers)
    first, second = claim("1"), claim("2", [resource_claims.FINALIZER])
    claims.apply(client.WatchEvent(client.WatchEventType.ADDED, first))
    added = catalog.api_claim("default", "c1")
    claims.apply(client.WatchEvent(client.WatchEventType.MODIFIED, second))
    assert [e for e, _, _ in seen] == [
        ClusterEvent.RESOURCE_CLAIM_ADD,
        ClusterEvent.RESOURCE_CLAIM_UPDATE,
    ]
    _, old, new = seen[1]
    assert old is added  # the reading made when it arrived
    assert old == resource_claims.parse_resource_claim(first)
    assert isinstance(new, resource_claims.ResourceClaim)
    assert new.finalizers == (resource_claims.FINALIZER,)
    assert catalog.api_claim("default", "c1") is new


def test_an_old_claim_the_catalog_does_not_hold_is_parsed_afresh() -> None:
    catalog = ResourceCatalog()
    seen: list[tuple[ClusterEvent, object, object]] = []
    informers = resources.ResourceInformers(
        FakeKubeClient(FakeCluster()), catalog, lambda *event: seen.append(event)
    )
    claims = claim_informer(informers)
    first = claim("1")
    claims.apply(client.WatchEvent(client.WatchEventType.ADDED, first))
    catalog.set_claim(resource_claims.parse_resource_claim(claim("1")))  # another object
    claims.apply(client.WatchEvent(client.WatchEventType.MODIFIED, claim("2")))
    _, old, _ = seen[1]
    assert old == resource_claims.parse_resource_claim(first)
    assert old is not catalog.api_claim("default", "c1")


def test_the_echo_of_a_claim_the_scheduler_wrote_is_not_parsed_again() -> None:
    catalog = ResourceCatalog()
    seen: list[tuple[ClusterEvent, object, object]] = []
    informers = resources.ResourceInformers(
        FakeKubeClient(FakeCluster()), catalog, lambda *event: seen.append(event)
    )
    claims = claim_informer(informers)
    claims.apply(client.WatchEvent(client.WatchEventType.ADDED, claim("1")))
    # PreBind's PUT answered with version 2, assumed until the watch brings it
    written = resource_claims.parse_resource_claim(claim("2", [resource_claims.FINALIZER]))
    catalog.assume(written)
    echo = claim("2", [resource_claims.FINALIZER])  # the watch's copy of that version
    claims.apply(client.WatchEvent(client.WatchEventType.MODIFIED, echo))
    _, _, new = seen[1]
    assert isinstance(new, resource_claims.ResourceClaim)
    assert new.parsed is written.parsed  # the reading PreBind made
    assert new == resource_claims.parse_resource_claim(echo)
    stored = catalog.api_claim("default", "c1")
    assert stored is not None and stored.raw is echo  # the informer's object
    # a later version, someone else's write: parsed
    later = claim("3")
    claims.apply(client.WatchEvent(client.WatchEventType.MODIFIED, later))
    _, old, newest = seen[2]
    assert old is new
    assert isinstance(newest, resource_claims.ResourceClaim)
    assert newest.parsed is not written.parsed
    assert newest == resource_claims.parse_resource_claim(later)
    assert newest.finalizers == ()
