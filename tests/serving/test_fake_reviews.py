"""The fakes' TokenReview and SubjectAccessReview, as the serving layer reaches them: the
real client over HTTP to the fake API server and the in-memory client answer alike
(one store, :mod:`tests.doubles.reviews`), with kube-apiserver's refusals for
malformed reviews."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.kube import client, http
from nodeagent.kube import errors as kube_errors
from nodeagent.serving.auth import review_client
from tests.doubles import kube as fake
from tests.doubles.reviews import Identity
from tests.fakeapi import server
from tests.fakeapi.fixtures import configuration


@pytest.fixture(params=["http", "in-memory"])
def reviews(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[client.AccessReviewClient, fake.FakeCluster]]:
    cluster = fake.FakeCluster()
    cluster.reviews.add_token("t", Identity("alice", uid="1", groups=("devs",)))
    cluster.reviews.grant(group="devs", paths=("/metrics", "/debug/*"))
    if request.param == "in-memory":
        yield fake.FakeKubeClient(cluster), cluster
        return
    with server.running(cluster) as api:
        connected: http.HTTPKubeClient = review_client(configuration(api.url))
        try:
            yield connected, cluster
        finally:
            connected.close()


def test_token_reviews(reviews: tuple[client.AccessReviewClient, fake.FakeCluster]) -> None:
    kube, cluster = reviews
    known = kube.create_token_review("t")
    assert known["kind"] == "TokenReview"
    assert known["status"] == {
        "authenticated": True,
        "user": {"username": "alice", "uid": "1", "groups": ["devs"]},
    }
    assert not kube.create_token_review("forged")["status"].get("authenticated")
    with pytest.raises(kube_errors.Invalid):
        kube.create_token_review("")
    assert cluster.reviews.token_reviews == 2


@pytest.mark.parametrize(
    ("path", "verb", "allowed"),
    [
        ("/metrics", "get", True),
        ("/debug/pprof/heap", "get", True),
        ("/metrics", "post", False),
        ("/", "get", False),
    ],
)
def test_access_reviews(
    reviews: tuple[client.AccessReviewClient, fake.FakeCluster], path: str, verb: str, allowed: bool
) -> None:
    kube, _ = reviews
    spec = {
        "user": "alice",
        "groups": ["devs"],
        "nonResourceAttributes": {"path": path, "verb": verb},
    }
    answer = kube.create_subject_access_review(spec)
    assert answer["kind"] == "SubjectAccessReview"
    assert answer["status"]["allowed"] is allowed


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}, id="no-user"),
        pytest.param({"user": "alice"}, id="no-attributes"),
        pytest.param(
            {
                "user": "alice",
                "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
                "resourceAttributes": {"resource": "pods", "verb": "get"},
            },
            id="both-attributes",
        ),
    ],
)
def test_malformed_access_reviews_are_refused(
    reviews: tuple[client.AccessReviewClient, fake.FakeCluster], spec: dict[str, Any]
) -> None:
    kube, _ = reviews
    with pytest.raises(kube_errors.Invalid):
        kube.create_subject_access_review(spec)
