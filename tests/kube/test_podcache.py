"""The pod cache against the fake API server over HTTP: initial list, watch events, terminal
and terminating pods, bookmarks, resume after a watch ends, re-list after 410, reconnect
after an outage, and a prompt stop."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from nodeagent.agent import podcache
from nodeagent.kube import http
from tests.fakeapi import objects
from tests.fakeapi.server import FakeAPIServer


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


@pytest.fixture
def cache(fake_api: FakeAPIServer, kube: http.HTTPKubeClient) -> Iterator[podcache.PodCache]:
    fake_api.cluster.create("pods", objects.pod("a1", uid="u-a1", priority=10))
    fake_api.cluster.create("pods", objects.pod("b1", uid="u-b1", node_name="node-b"))
    cache = podcache.PodCache(
        kube, "node-a", watch_timeout=30, initial_backoff=0.05, max_backoff=0.2
    )
    cache.start()
    assert cache.wait_synced(5)
    try:
        yield cache
    finally:
        cache.stop()


def names(cache: podcache.PodCache) -> set[str]:
    return {p.name for p in cache.snapshot().pods.values()}


def test_lists_only_this_nodes_pods(cache: podcache.PodCache, fake_api: FakeAPIServer) -> None:
    snapshot = cache.snapshot()
    assert snapshot.synced and names(cache) == {"a1"}
    assert snapshot.pods["u-a1"].priority == 10  # type: ignore[index]
    assert fake_api.requests_to("GET", "/api/v1/pods$")[0].param("fieldSelector") == (
        "spec.nodeName=node-a"
    )


def test_follows_adds_updates_deletes_and_terminal_pods(
    cache: podcache.PodCache, fake_api: FakeAPIServer
) -> None:
    cluster = fake_api.cluster
    cluster.create("pods", objects.pod("a2", uid="u-a2"))
    eventually(lambda: names(cache) == {"a1", "a2"})
    cluster.patch("pods", "default", "a2", {"spec": {"priority": 7}})
    eventually(lambda: cache.snapshot().pods["u-a2"].priority == 7)  # type: ignore[index]
    cluster.patch("pods", "default", "a2", {"status": {"phase": "Succeeded"}}, subresource="status")
    eventually(lambda: names(cache) == {"a1"})
    cluster.delete("pods", "default", "a1")
    eventually(lambda: names(cache) == set())
    assert cache.stats.lists == 1, "no re-list for ordinary events"


def test_terminating_pods_are_flagged(cache: podcache.PodCache, fake_api: FakeAPIServer) -> None:
    fake_api.cluster.termination_delay = 0.5
    fake_api.cluster.delete("pods", "default", "a1", grace_period_seconds=5)
    eventually(lambda: "u-a1" in cache.snapshot().terminating)
    assert cache.snapshot().active() == ()
    eventually(lambda: names(cache) == set())


def test_relists_after_watch_expiry_and_drops_pods_deleted_meanwhile(
    cache: podcache.PodCache, fake_api: FakeAPIServer
) -> None:
    cluster = fake_api.cluster
    cluster.create("pods", objects.pod("a2", uid="u-a2"))
    eventually(lambda: "a2" in names(cache))
    cluster.expire_watches()
    eventually(lambda: cache.stats.relists_after_gone == 1)
    eventually(lambda: cache.stats.lists == 2)
    cluster.create("pods", objects.pod("a3", uid="u-a3"))
    eventually(lambda: names(cache) == {"a1", "a2", "a3"})


def test_resumes_from_last_version_after_watch_timeout(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    fake_api.cluster.create("pods", objects.pod("a1", uid="u-a1"))
    # a 1 s watch (jitter draw 0): it ends and resumes, never re-lists
    cache = podcache.PodCache(kube, "node-a", watch_timeout=1, draw=lambda: 0.0)
    cache.start()
    try:
        assert cache.wait_synced(5)
        eventually(lambda: cache.stats.watches >= 2, timeout=5)
        fake_api.cluster.create("pods", objects.pod("a2", uid="u-a2"))
        eventually(lambda: names(cache) == {"a1", "a2"})
        assert cache.stats.lists == 1
        watches = fake_api.requests_to("GET", "/api/v1/pods$")[1:]
        versions = [int(r.param("resourceVersion") or 0) for r in watches]
        assert versions == sorted(versions) and versions[0] > 0
    finally:
        cache.stop()


def test_bookmarks_advance_the_resume_version(
    cache: podcache.PodCache, fake_api: FakeAPIServer
) -> None:
    fake_api.cluster.create("pods", objects.pod("b2", node_name="node-b"))  # not ours
    before = cache.snapshot().resource_version

    def bookmarked() -> bool:
        fake_api.cluster.send_bookmarks()  # again, in case the watch was not open yet
        return cache.snapshot().resource_version != before

    eventually(bookmarked)
    assert int(cache.snapshot().resource_version) == fake_api.cluster.resource_version


def test_keeps_last_state_through_an_outage_and_catches_up(
    cache: podcache.PodCache, fake_api: FakeAPIServer
) -> None:
    with fake_api.outage(refuse=True):
        fake_api.cluster.create("pods", objects.pod("a2", uid="u-a2"))
        # The watch was cut: wait until the cache has tried the API and failed.
        eventually(lambda: cache.stats.failures >= 1)
        assert names(cache) == {"a1"}, "the last good state stays readable"
    eventually(lambda: names(cache) == {"a1", "a2"})
    assert cache.stats.failures >= 1


def test_stop_returns_promptly(fake_api: FakeAPIServer, kube: http.HTTPKubeClient) -> None:
    cache = podcache.PodCache(kube, "node-a", watch_timeout=600)
    cache.start()
    assert cache.wait_synced(5)
    # Stop while a 600 s watch is open: it must be interrupted, not waited out.
    eventually(lambda: any(r.param("watch") for r in fake_api.requests_to("GET", "/pods$")))
    started = time.monotonic()
    cache.stop(timeout=5)
    assert time.monotonic() - started < 4.0, "stop waited for the watch instead of ending it"
    assert cache._thread is not None and not cache._thread.is_alive()
