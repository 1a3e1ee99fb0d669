"""The generic informer over HTTP against the fake API server: nodes and disruption budgets
listed and watched, handlers called in order, a re-list after 410 reporting what was deleted
in the gap, and the ClusterClient calls the scheduler makes (binding, pod status, Leases)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from nodeagent.base import errors
from nodeagent.kube import client, http, informer, retry, writes
from tests.doubles import kube as fake
from tests.fakeapi import fixtures, objects
from tests.fakeapi.server import FakeAPIServer


def eventually(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def handlers(self) -> informer.Handlers:
        return informer.Handlers(
            on_add=lambda o: self.add("add", o),
            on_update=lambda old, new: self.add("update", new),
            on_delete=lambda o: self.add("delete", o),
        )

    def add(self, kind: str, obj: client.KubeObject) -> None:
        with self.lock:
            self.events.append((kind, obj["metadata"]["name"]))

    def seen(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.events)


def test_node_informer_follows_adds_updates_deletes(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", objects.node("n1"))
    recorder = Recorder()
    nodes = informer.Informer(informer.nodes(kube), recorder.handlers(), watch_timeout=30)
    nodes.start()
    try:
        assert nodes.wait_synced(5)
        assert recorder.seen() == [("add", "n1")]
        cluster.create("nodes", objects.node("n2"))
        cluster.patch("nodes", "", "n1", {"spec": {"unschedulable": True}})
        cluster.delete("nodes", "", "n2")
        eventually(lambda: len(recorder.seen()) == 4)
        assert recorder.seen()[1:] == [("add", "n2"), ("update", "n1"), ("delete", "n2")]
        assert [o["metadata"]["name"] for o in nodes.items()] == ["n1"]
        assert nodes.get(("", "n1"))["spec"]["unschedulable"] is True  # type: ignore[index]
        assert nodes.stats.lists == 1
        assert nodes.stats.first_list is not None  # when it was asked for, when it was in
        asked, handled = nodes.stats.first_list
        assert asked <= handled <= time.monotonic()
    finally:
        nodes.stop()


def test_relist_after_410_reports_deletions_made_in_the_gap(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    cluster = fake_api.cluster
    for name in ("n1", "n2"):
        cluster.create("nodes", objects.node(name))
    recorder = Recorder()
    nodes = informer.Informer(
        informer.nodes(kube),
        recorder.handlers(),
        watch_timeout=30,
        backoff=retry.RetryPolicy(initial_delay=0.05, max_delay=0.1),
    )
    nodes.start()
    try:
        assert nodes.wait_synced(5)
        with fake_api.outage(refuse=True):
            cluster.delete("nodes", "", "n2")
            cluster.create("nodes", objects.node("n3"))
            cluster.compact()  # the gap is gone from history: resuming answers 410
        eventually(lambda: nodes.stats.relists_after_gone >= 1)
        eventually(lambda: {("delete", "n2"), ("add", "n3")} <= set(recorder.seen()))
        assert sorted(o["metadata"]["name"] for o in nodes.items()) == ["n1", "n3"]
    finally:
        nodes.stop()


def test_disruption_budget_informer(fake_api: FakeAPIServer, kube: http.HTTPKubeClient) -> None:
    fake_api.cluster.add_pdb("default", "pdb-a", selector="app=a", disruptions_allowed=1)
    recorder = Recorder()
    budgets = informer.Informer(informer.disruption_budgets(kube), recorder.handlers())
    budgets.start()
    try:
        assert budgets.wait_synced(5)
        (pdb,) = budgets.items()
        assert pdb["kind"] == "PodDisruptionBudget"
        assert pdb["spec"]["selector"]["matchExpressions"] == [
            {"key": "app", "operator": "In", "values": ["a"]}
        ]
        assert pdb["status"]["disruptionsAllowed"] == 1
        fake_api.cluster.add_pdb("other", "pdb-b", selector="app=b")
        eventually(lambda: ("add", "pdb-b") in recorder.seen())
    finally:
        budgets.stop()
    assert fake_api.requests_to("GET", "^/apis/policy/v1/poddisruptionbudgets$")


def test_binding_sets_the_node_and_condition_and_a_second_bind_is_409(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    pod = fake_api.cluster.create("pods", objects.pod("p", node_name=""))
    uid = pod["metadata"]["uid"]
    kube.bind_pod("default", "p", uid=uid, node_name="n1")
    bound = fake_api.cluster.get("pods", "default", "p")
    assert bound["spec"]["nodeName"] == "n1"
    assert [c["status"] for c in bound["status"]["conditions"] if c["type"] == "PodScheduled"] == [
        "True"
    ]
    (sent,) = fake_api.requests_to("POST", "/pods/p/binding$")
    assert sent.body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert sent.body["metadata"]["uid"] == uid
    with pytest.raises(errors.Conflict, match="already assigned"):
        kube.bind_pod("default", "p", uid=uid, node_name="n2")
    assert len(fake_api.requests_to("POST", "/pods/p/binding$")) == 2, "a 409 is not retried"
    with pytest.raises(errors.NotFound):
        kube.bind_pod("default", "missing", uid="x", node_name="n1")


def test_the_binding_request_is_exactly_a_v1_binding_with_the_client_s_auth(
    fake_api: FakeAPIServer,
) -> None:
    """The binding POST (sent raw, without the generated client's models) carries the
    exact v1 Binding as JSON, the configured bearer token and the user agent's path."""
    configuration = fixtures.configuration(fake_api.url)
    configuration.api_key = {"authorization": "s3cret"}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    kube = http.HTTPKubeClient.connect(configuration, qps=100, burst=100)
    try:
        pod = fake_api.cluster.create("pods", objects.pod("p", node_name=""))
        uid = pod["metadata"]["uid"]
        kube.bind_pod("default", "p", uid=uid, node_name="n1")
    finally:
        kube.close()
    (sent,) = fake_api.requests_to("POST", "^/api/v1/namespaces/default/pods/p/binding$")
    assert sent.content_type == "application/json"
    assert sent.authorization == "Bearer s3cret"
    assert sent.body == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "default", "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    assert writes.binding_body("default", "p", uid=uid, node_name="n1") == (
        b'{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p","namespace":"default",'
        + f'"uid":"{uid}"}},"target":{{"apiVersion":"v1","kind":"Node","name":"n1"}}}}'.encode()
    )


@pytest.mark.parametrize(
    ("status", "retry_after"), [(503, None), (500, None), (429, 0.01)], ids=str
)
def test_a_binding_answered_with_a_fault_is_retried_by_the_client_policy(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient, status: int, retry_after: float | None
) -> None:
    pod = fake_api.cluster.create("pods", objects.pod("p", node_name=""))
    fake_api.fail_next(
        1, status=status, method="POST", path="/pods/p/binding$", retry_after=retry_after
    )
    kube.bind_pod("default", "p", uid=pod["metadata"]["uid"], node_name="n1")
    assert fake_api.cluster.get("pods", "default", "p")["spec"]["nodeName"] == "n1"
    assert len(fake_api.requests_to("POST", "/pods/p/binding$")) == 2


def test_a_binding_refused_with_409_or_404_is_final(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    pod = fake_api.cluster.create("pods", objects.pod("p", node_name=""))
    fake_api.fail_next(1, status=409, method="POST", path="/pods/p/binding$")
    with pytest.raises(errors.Conflict):
        kube.bind_pod("default", "p", uid=pod["metadata"]["uid"], node_name="n1")
    fake_api.fail_next(1, status=404, method="POST", path="/pods/p/binding$")
    with pytest.raises(errors.NotFound):
        kube.bind_pod("default", "p", uid=pod["metadata"]["uid"], node_name="n1")
    assert len(fake_api.requests_to("POST", "/pods/p/binding$")) == 2, "one attempt each"
    assert not fake_api.cluster.get("pods", "default", "p")["spec"].get("nodeName")


def test_pod_status_patch_merges_conditions(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    fake_api.cluster.create("pods", objects.pod("p", node_name=""))
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    kube.patch_pod_status("default", "p", {"status": {"conditions": [condition]}})
    kube.patch_pod_status("default", "p", {"status": {"nominatedNodeName": "n1"}})
    status = fake_api.cluster.get("pods", "default", "p")["status"]
    assert status["conditions"] == [condition] and status["nominatedNodeName"] == "n1"
    assert status["phase"] == "Running"


def test_lease_create_get_and_replace_with_optimistic_concurrency(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    with pytest.raises(errors.NotFound):
        kube.get_lease("kube-system", "s")
    lease = {"metadata": {"name": "s"}, "spec": {"holderIdentity": "a"}}
    created = kube.create_lease("kube-system", lease)
    with pytest.raises(errors.Conflict):
        kube.create_lease("kube-system", lease)
    assert created["apiVersion"] == "coordination.k8s.io/v1"
    mine = dict(created, spec={"holderIdentity": "b"})
    kube.replace_lease("kube-system", "s", mine)
    assert kube.get_lease("kube-system", "s")["spec"]["holderIdentity"] == "b"
    with pytest.raises(errors.Conflict):
        kube.replace_lease("kube-system", "s", dict(created, spec={"holderIdentity": "c"}))


def test_node_informer_over_the_in_process_fake() -> None:
    kube = fake.FakeKubeClient()
    kube.cluster.create("nodes", objects.node("n1"))
    recorder = Recorder()
    nodes = informer.Informer(informer.nodes(kube), recorder.handlers(), watch_timeout=30)
    nodes.start()
    try:
        assert nodes.wait_synced(5)
        kube.cluster.create("nodes", objects.node("n2"))
        eventually(lambda: recorder.seen() == [("add", "n1"), ("add", "n2")])
        cluster_client: client.ClusterClient = kube  # the fake implements all of it
        assert cluster_client is kube
    finally:
        nodes.stop()
    assert [c.method for c in kube.calls[:2]] == ["list_nodes", "watch_nodes"]


def _pages_asked(fake_api: FakeAPIServer, path: str) -> list[tuple[str, str]]:
    return [
        (r.param("limit") or "", r.param("continue") or "")
        for r in fake_api.requests
        if r.method == "GET" and r.path == path and r.param("watch") is None
    ]


def test_a_list_is_read_in_pages_of_one_snapshot(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "LIST_PAGE_SIZE", 2)
    cluster = fake_api.cluster
    for i in range(5):
        cluster.create("nodes", objects.node(f"n{i}"))
    version = cluster.list("nodes", None).resource_version
    pages = kube.list_pages(client.Collection.NODES)
    first = next(pages)
    cluster.create("nodes", objects.node("late"))  # after the snapshot: in no page
    rest = list(pages)
    assert [len(p.items) for p in (first, *rest)] == [2, 2, 1]
    assert {p.resource_version for p in (first, *rest)} == {version}
    names = [o["metadata"]["name"] for p in (first, *rest) for o in p.items]
    assert sorted(names) == [f"n{i}" for i in range(5)]
    asked = _pages_asked(fake_api, "/api/v1/nodes")
    assert [limit for limit, _ in asked] == ["2", "2", "2"]
    assert asked[0][1] == "" and all(token for _, token in asked[1:])
    # the whole-list call pages the same way and joins the pages
    listed = kube.list_nodes()
    assert len(listed.items) == 6


def test_the_first_list_is_handled_page_by_page_and_a_relist_replaces(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "LIST_PAGE_SIZE", 2)
    cluster = fake_api.cluster
    for i in range(5):
        cluster.create("pods", objects.pod(f"p{i}", node_name="n1"))
    recorder = Recorder()
    pods = informer.Informer(informer.pods(kube), recorder.handlers(), watch_timeout=30)
    pods.sync_once()
    assert sorted(recorder.seen()) == [("add", f"p{i}") for i in range(5)]
    assert pods.synced and len(pods) == 5
    assert pods.resource_version == cluster.list("pods", None).resource_version
    # a second list (after a 410) replaces the store and reports only the differences
    cluster.delete("pods", "default", "p0")
    cluster.create("pods", objects.pod("p5", node_name="n1"))
    pods.sync_once()
    assert recorder.seen()[5:] == [("delete", "p0"), ("add", "p5")]
    assert pods.stats.lists == 2


def test_an_expired_continue_token_makes_the_informer_list_again(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "LIST_PAGE_SIZE", 2)
    cluster = fake_api.cluster
    for i in range(5):
        cluster.create("nodes", objects.node(f"n{i}"))
    forget = threading.Event()
    original = http.HTTPKubeClient._pages

    def pages_forgetting_once(*args: object, **kwargs: object) -> object:
        for n, page in enumerate(original(*args, **kwargs)):  # type: ignore[arg-type]
            if n == 0 and not forget.is_set():
                forget.set()
                fake_api.continues.clear()  # as etcd's compaction would
            yield page

    monkeypatch.setattr(http.HTTPKubeClient, "_pages", pages_forgetting_once)
    fake_api.watch_list = False  # a server that does not stream lists: they are paged
    recorder = Recorder()
    nodes = informer.Informer(
        informer.nodes(kube),
        recorder.handlers(),
        watch_timeout=30,
        backoff=retry.RetryPolicy(initial_delay=0.05, max_delay=0.1),
    )
    nodes.start()
    try:
        assert nodes.wait_synced(10)
        assert nodes.stats.relists_after_gone == 1
        assert sorted(o["metadata"]["name"] for o in nodes.items()) == [f"n{i}" for i in range(5)]
        # the two objects reported from the failed list are not reported again
        assert sorted(recorder.seen()) == sorted(("add", f"n{i}") for i in range(5))
    finally:
        nodes.stop()


def test_a_reader_that_stops_early_stops_the_page_thread(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http, "LIST_PAGE_SIZE", 1)
    for i in range(6):
        fake_api.cluster.create("nodes", objects.node(f"n{i}"))
    fake_api.add_latency(0.2, method="GET", path="/api/v1/nodes")
    pages = kube.list_pages(client.Collection.NODES)
    next(pages)
    pages.close()  # type: ignore[attr-defined]
    eventually(lambda: not any(t.name == "list-nodes" for t in threading.enumerate()))
    # it stopped at the page after the one it was fetching when the reader left
    assert len(_pages_asked(fake_api, "/api/v1/nodes")) <= 3


def _watch_lists_asked(fake_api: FakeAPIServer, path: str) -> list[dict[str, str | None]]:
    return [
        {
            key: r.param(key)
            for key in ("sendInitialEvents", "resourceVersionMatch", "resourceVersion")
        }
        for r in fake_api.requests
        if r.method == "GET" and r.path == path and r.param("watch") is not None
    ]


def test_the_first_list_is_streamed_and_followed_as_the_watch(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    cluster = fake_api.cluster
    for name in ("n1", "n2"):
        cluster.create("nodes", objects.node(name))
    version = cluster.list("nodes", None).resource_version
    recorder = Recorder()
    nodes = informer.Informer(informer.nodes(kube), recorder.handlers(), watch_timeout=30)
    nodes.start()
    try:
        assert nodes.wait_synced(5)
        assert sorted(recorder.seen()) == [("add", "n1"), ("add", "n2")]
        assert nodes.resource_version == version  # the closing bookmark's
        cluster.create("nodes", objects.node("n3"))
        eventually(lambda: recorder.seen()[2:] == [("add", "n3")])
        # one request: a consistent streamed list, then its watch; nothing paged
        assert _watch_lists_asked(fake_api, "/api/v1/nodes") == [
            {
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
                "resourceVersion": None,
            }
        ]
        assert _pages_asked(fake_api, "/api/v1/nodes") == []
        assert (nodes.stats.lists, nodes.stats.watches) == (1, 1)
        assert nodes.stats.first_list is not None
    finally:
        nodes.stop()


def test_a_server_that_does_not_stream_lists_is_listed_in_pages(
    fake_api: FakeAPIServer, kube: http.HTTPKubeClient
) -> None:
    fake_api.watch_list = False  # kube-apiserver with the WatchList feature off: 422
    fake_api.cluster.create("nodes", objects.node("n1"))
    recorder = Recorder()
    nodes = informer.Informer(informer.nodes(kube), recorder.handlers(), watch_timeout=30)
    nodes.start()
    try:
        assert nodes.wait_synced(5)
        fake_api.cluster.create("nodes", objects.node("n2"))
        eventually(lambda: recorder.seen() == [("add", "n1"), ("add", "n2")])
        asked = _watch_lists_asked(fake_api, "/api/v1/nodes")
        assert asked[0]["sendInitialEvents"] == "true"  # asked once, refused
        assert all(a["sendInitialEvents"] is None for a in asked[1:])  # then watched
        assert len(_pages_asked(fake_api, "/api/v1/nodes")) == 1
    finally:
        nodes.stop()


class ScriptedStream:
    """A watch stream playing ``events`` then ending (as a broken connection would)."""

    def __init__(self, events: list[client.WatchEvent]) -> None:
        self.events = events
        self.closed = False

    def __iter__(self) -> Iterator[client.WatchEvent]:
        yield from self.events

    def close(self) -> None:
        self.closed = True


def _added(name: str, version: str) -> client.WatchEvent:
    node = objects.node(name)
    node["metadata"]["resourceVersion"] = version
    return client.WatchEvent(client.WatchEventType.ADDED, node)


def _end(version: str) -> client.WatchEvent:
    meta = {"resourceVersion": version, "annotations": {client.INITIAL_EVENTS_END: "true"}}
    return client.WatchEvent(client.WatchEventType.BOOKMARK, {"metadata": meta})


def _streamed_informer(
    streams: list[ScriptedStream], opened: list[ScriptedStream]
) -> tuple[informer.Informer, Recorder]:
    """A node informer whose streamed lists are ``streams``, in turn (each appended to
    ``opened`` when asked for), driven by hand through ``_sync_streamed``."""

    def watch_list(timeout: int) -> client.WatchStream:
        opened.append(streams.pop(0))
        return opened[-1]

    def unused(*_: object) -> client.WatchStream:
        raise AssertionError("a streamed list is not followed by another watch here")

    recorder = Recorder()
    nodes = informer.Informer(
        informer.ListWatch("nodes", lambda: client.ObjectList((), ""), unused, None, watch_list),
        recorder.handlers(),
    )
    return nodes, recorder


def test_a_stream_broken_before_its_bookmark_is_listed_again_reporting_the_differences() -> None:
    streams = [
        ScriptedStream([_added("n1", "5"), _added("n2", "6")]),  # breaks: no bookmark
        ScriptedStream([_added("n2", "6"), _added("n3", "8"), _end("9")]),
    ]
    opened: list[ScriptedStream] = []
    nodes, recorder = _streamed_informer(streams, opened)
    first = nodes._sync_streamed  # the informer loop's list step, driven by hand
    with pytest.raises(errors.KubeAPIError):
        first()
    assert not nodes.synced and opened[0].closed
    assert recorder.seen() == [("add", "n1"), ("add", "n2")]  # reported as they came
    listed = first()
    assert listed is not None
    # into a store that has objects, the second list is collected and replaced whole
    assert recorder.seen()[2:] == [("delete", "n1"), ("add", "n3")]
    assert nodes.synced and nodes.resource_version == "9"
    assert sorted(o["metadata"]["name"] for o in nodes.items()) == ["n2", "n3"]


def _changed(kind: client.WatchEventType, name: str, version: str) -> client.WatchEvent:
    node = objects.node(name)
    node["metadata"]["resourceVersion"] = version
    node["metadata"]["labels"] = {"seen": version}
    return client.WatchEvent(kind, node)


@pytest.mark.parametrize("relist", [False, True])
def test_changes_streamed_before_the_closing_bookmark_are_applied_in_order(relist: bool) -> None:
    """kube-apiserver sends the initial-events-end bookmark at its next bookmark tick:
    changes made since the list's snapshot (pods bound by the scheduler reading them)
    may come first. client-go's reflector applies them; a list refused for them would
    be asked again for as long as something changes."""
    modified, deleted = client.WatchEventType.MODIFIED, client.WatchEventType.DELETED
    script = [
        _added("n1", "5"),
        _added("n2", "6"),
        _changed(deleted, "n1", "10"),
        _changed(modified, "n2", "11"),
        _changed(client.WatchEventType.ADDED, "n4", "12"),
        _end("12"),
    ]
    streams = [ScriptedStream([_added("n1", "3"), _added("n3", "4"), _end("4")])] if relist else []
    streams.append(ScriptedStream(script))
    nodes, recorder = _streamed_informer(streams, [])
    before = 0
    if relist:  # a store that has objects: the list is collected, then replaces it
        assert nodes._sync_streamed() is not None
        before = len(recorder.seen())
    assert nodes._sync_streamed() is not None
    assert nodes.synced and nodes.resource_version == "12"
    stored = {o["metadata"]["name"]: o["metadata"].get("labels") for o in nodes.items()}
    assert stored == {"n2": {"seen": "11"}, "n4": {"seen": "12"}}
    expected = [("add", "n1"), ("add", "n2"), ("delete", "n1"), ("update", "n2"), ("add", "n4")]
    if relist:
        expected = [("delete", "n1"), ("delete", "n3"), ("add", "n2"), ("add", "n4")]
    assert recorder.seen()[before:] == expected
