"""The fake API server, driven by the real ``kubernetes`` client, behaves like
kube-apiserver for every call the agent makes: node status
strategic merge by condition type, /status vs main resource, resourceVersion
preconditions, JSON and merge patches, field and label selectors, watches with bookmarks,
410 and timeouts, Eviction with PodDisruptionBudgets, deletes, events, faults and the
request log."""

from __future__ import annotations

import threading
import time
from typing import Any

import kubernetes.client
import kubernetes.watch
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from tests.fakeapi import objects
from tests.fakeapi.server import FakeAPIServer

CoreV1Api = Any
"""The generated client's models are Optional everywhere; tests read them as Any."""


def _conditions(node: Any) -> dict[str, str]:
    return {c.type: c.status for c in node.status.conditions}


@pytest.fixture
def seeded(fake_api: FakeAPIServer) -> FakeAPIServer:
    fake_api.cluster.create("nodes", objects.node("node-a"))
    fake_api.cluster.create("nodes", objects.node("node-b"))
    for name, node, phase in [
        ("a1", "node-a", "Running"),
        ("a2", "node-a", "Pending"),
        ("b1", "node-b", "Running"),
    ]:
        fake_api.cluster.create(
            "pods", objects.pod(name, node_name=node, phase=phase, labels={"app": name[0]})
        )
    fake_api.cluster.create(
        "pods", objects.pod("k1", namespace="kube-system", node_name="node-a", labels={"app": "k"})
    )
    return fake_api


def test_list_and_get_nodes(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    assert sorted(n.metadata.name for n in core_api.list_node().items) == ["node-a", "node-b"]
    assert core_api.read_node("node-a").metadata.uid
    with pytest.raises(ApiException) as missing:
        core_api.read_node("node-z")
    assert missing.value.status == 404


def test_node_create_and_delete_are_seen_by_a_watch(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    listed = core_api.list_node()
    core_api.create_node(objects.node("node-c"))
    core_api.delete_node("node-a")
    with pytest.raises(ApiException) as missing:
        core_api.delete_node("node-a")
    assert missing.value.status == 404
    assert sorted(n.metadata.name for n in core_api.list_node().items) == ["node-b", "node-c"]
    watch: Any = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
    seen = []
    for event in watch.stream(
        core_api.list_node, timeout_seconds=1, resource_version=listed.metadata.resource_version
    ):
        seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
    assert seen == [("ADDED", "node-c"), ("DELETED", "node-a")]


def test_status_strategic_merge_keeps_other_conditions(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    patch = {"status": {"conditions": [{"type": "NodeAgentMemoryPressure", "status": "True"}]}}
    core_api.patch_node_status("node-a", patch)
    assert _conditions(core_api.read_node("node-a")) == {
        "Ready": "True",
        "MemoryPressure": "False",
        "NodeAgentMemoryPressure": "True",
    }
    flip = {"status": {"conditions": [{"type": "MemoryPressure", "status": "True"}]}}
    core_api.patch_node_status("node-a", flip)
    node = core_api.read_node("node-a")
    assert _conditions(node)["MemoryPressure"] == "True"
    [memory] = [c for c in node.status.conditions if c.type == "MemoryPressure"]
    assert memory.reason == "KubeletHasSufficientMemory", "fields merge"
    # in kube-apiserver's order: the first patch's new type went before the server's own
    assert [c.type for c in node.status.conditions] == [
        "NodeAgentMemoryPressure",
        "Ready",
        "MemoryPressure",
    ]
    sent = seeded.requests_to("PATCH", "/status$")[-1]
    assert sent.content_type == "application/strategic-merge-patch+json"


def test_status_patch_delete_directive_and_replaced_lists(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    core_api.patch_node_status(
        "node-a",
        {
            "status": {
                "conditions": [{"type": "MemoryPressure", "$patch": "delete"}],
                "volumesInUse": ["a"],
            }
        },
    )
    core_api.patch_node_status("node-a", {"status": {"volumesInUse": ["b"]}})
    node = seeded.cluster.get("nodes", "", "node-a")
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready"]
    assert node["status"]["volumesInUse"] == ["b"], "a list without merge key is replaced"


def test_status_subresource_ignores_spec_and_main_ignores_status(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    core_api.patch_node_status(
        "node-a", {"spec": {"unschedulable": True}, "status": {"phase": "Running"}}
    )
    core_api.patch_node(
        "node-a",
        {
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
    )
    node = seeded.cluster.get("nodes", "", "node-a")
    assert "unschedulable" not in node["spec"]
    assert node["status"]["phase"] == "Running"
    assert node["spec"]["podCIDR"] == "10.0.0.0/24"
    assert _conditions(core_api.read_node("node-a"))["Ready"] == "True"


def test_resource_version_bumps_and_stale_precondition_conflicts(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    before = int(core_api.read_node("node-a").metadata.resource_version)
    core_api.patch_node("node-a", {"metadata": {"labels": {"x": "1"}}})
    after = int(core_api.read_node("node-a").metadata.resource_version)
    assert after > before
    core_api.patch_node("node-a", {"metadata": {"labels": {"x": "1"}}})
    assert int(core_api.read_node("node-a").metadata.resource_version) == after, "no-op: no write"
    stale = {"metadata": {"resourceVersion": str(before)}, "spec": {"taints": []}}
    with pytest.raises(ApiException) as conflict:
        core_api.patch_node("node-a", stale)
    assert conflict.value.status == 409
    fresh = {"metadata": {"resourceVersion": str(after)}, "spec": {"unschedulable": True}}
    assert core_api.patch_node("node-a", fresh).spec.unschedulable is True


def test_taints_are_replaced_whole(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    first = [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]
    core_api.patch_node("node-a", {"spec": {"taints": first}})
    core_api.patch_node("node-a", {"spec": {"taints": [{"key": "c", "effect": "NoExecute"}]}})
    assert [t.key for t in core_api.read_node("node-a").spec.taints] == ["c"]


def test_json_patch_test_operation_and_merge_patch(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    rv = core_api.read_node("node-a").metadata.resource_version
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/spec/taints", "value": [{"key": "j", "effect": "NoSchedule"}]},
    ]
    core_api.patch_node("node-a", ops)
    assert seeded.requests[-1].content_type == "application/json-patch+json"
    assert [t.key for t in core_api.read_node("node-a").spec.taints] == ["j"]
    with pytest.raises(ApiException) as failed:
        core_api.patch_node("node-a", ops)  # resourceVersion moved on: the test op fails
    assert failed.value.status == 422
    stale_rv: list[dict[str, Any]] = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": rv}
    ]
    with pytest.raises(ApiException) as conflict:
        core_api.patch_node("node-a", stale_rv)
    assert conflict.value.status == 409
    core_api.patch_node(
        "node-a",
        {"metadata": {"labels": {"kubernetes.io/hostname": None, "m": "1"}}},
        _content_type="application/merge-patch+json",
    )
    assert core_api.read_node("node-a").metadata.labels == {"m": "1"}


@pytest.mark.parametrize(
    ("field_selector", "expected"),
    [
        pytest.param("spec.nodeName=node-a", ["a1", "a2", "k1"], id="equals"),
        pytest.param("spec.nodeName==node-b", ["b1"], id="double-equals"),
        pytest.param("spec.nodeName!=node-a", ["b1"], id="not-equals"),
        pytest.param("spec.nodeName=node-a,status.phase!=Running", ["a2"], id="and"),
        pytest.param("status.phase=Running", ["a1", "b1", "k1"], id="phase"),
        pytest.param("metadata.name=a1", ["a1"], id="name"),
        pytest.param("metadata.namespace=kube-system", ["k1"], id="namespace"),
        pytest.param("spec.nodeName=node-z", [], id="none"),
    ],
)
def test_pod_field_selectors(
    seeded: FakeAPIServer, core_api: CoreV1Api, field_selector: str, expected: list[str]
) -> None:
    pods = core_api.list_pod_for_all_namespaces(field_selector=field_selector)
    assert sorted(p.metadata.name for p in pods.items) == expected
    assert seeded.requests[-1].param("fieldSelector") == field_selector


@pytest.mark.parametrize(
    ("label_selector", "expected"),
    [
        pytest.param("app=a", ["a1", "a2"], id="equals"),
        pytest.param("app!=a", ["b1", "k1"], id="not-equals"),
        pytest.param("app in (b,k)", ["b1", "k1"], id="in"),
        pytest.param("app notin (a)", ["b1", "k1"], id="notin"),
        pytest.param("app", ["a1", "a2", "b1", "k1"], id="exists"),
        pytest.param("!app", [], id="absent"),
    ],
)
def test_pod_label_selectors(
    seeded: FakeAPIServer, core_api: CoreV1Api, label_selector: str, expected: list[str]
) -> None:
    pods = core_api.list_pod_for_all_namespaces(label_selector=label_selector)
    assert sorted(p.metadata.name for p in pods.items) == expected


def test_namespaced_pod_list_and_bad_selector(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    names = [p.metadata.name for p in core_api.list_namespaced_pod("kube-system").items]
    assert names == ["k1"]
    with pytest.raises(ApiException) as bad:
        core_api.list_pod_for_all_namespaces(field_selector="spec.nodeName")
    assert bad.value.status == 400


def _watch_events(core_api: CoreV1Api, *, timeout: int = 2, **kwargs: Any) -> list[tuple[str, str]]:
    watch: Any = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
    seen = []
    for event in watch.stream(
        core_api.list_pod_for_all_namespaces, timeout_seconds=timeout, **kwargs
    ):
        obj = event["raw_object"]
        seen.append((event["type"], obj["metadata"].get("name", "")))
        if event["type"] == "BOOKMARK":
            watch.stop()
    return seen


def test_watch_streams_changes_after_resource_version(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    listed = core_api.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-a")
    cluster = seeded.cluster

    def mutate() -> None:
        time.sleep(0.2)
        cluster.create("pods", objects.pod("a3"))
        cluster.patch("pods", "default", "a1", {"metadata": {"labels": {"x": "y"}}})
        cluster.delete("pods", "default", "a2")
        cluster.create("pods", objects.pod("b2", node_name="node-b"))  # filtered out

    threading.Thread(target=mutate).start()
    seen = _watch_events(
        core_api,
        timeout=1,
        field_selector="spec.nodeName=node-a",
        resource_version=listed.metadata.resource_version,
    )
    # a deletion marks the pod (deletionTimestamp) before it removes it, as kube-apiserver
    # does; with no termination delay its kubelet finishes at once
    assert seen == [("ADDED", "a3"), ("MODIFIED", "a1"), ("MODIFIED", "a2"), ("DELETED", "a2")]
    request = seeded.requests_to("GET", "/api/v1/pods$")[-1]
    assert request.param("watch") == "true"
    assert request.param("timeoutSeconds") == "1"


def test_watch_reports_objects_leaving_the_selection_as_deleted(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    rv = str(seeded.cluster.resource_version)
    seeded.cluster.patch(
        "pods", "default", "a2", {"status": {"phase": "Running"}}, subresource="status"
    )
    seen = _watch_events(
        core_api, timeout=1, field_selector="status.phase=Pending", resource_version=rv
    )
    assert seen == [("DELETED", "a2")]


def test_watch_sends_bookmarks_when_allowed(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    seeded.cluster.bookmark_interval = 0.1
    rv = str(seeded.cluster.resource_version)
    assert _watch_events(core_api, timeout=1, resource_version=rv) == [], "not asked: none"
    seen = _watch_events(core_api, timeout=2, resource_version=rv, allow_watch_bookmarks=True)
    assert seen == [("BOOKMARK", "")]


@pytest.mark.parametrize("as_status", [False, True], ids=["error-event", "http-410"])
def test_watch_from_compacted_version_is_gone(
    seeded: FakeAPIServer, core_api: CoreV1Api, as_status: bool
) -> None:
    old = str(seeded.cluster.resource_version - 2)
    seeded.cluster.create("pods", objects.pod("a9"))
    seeded.cluster.compact()
    seeded.watch_gone_as_status = as_status
    with pytest.raises(ApiException) as gone:
        _watch_events(core_api, timeout=1, resource_version=old)
    assert gone.value.status == 410


def test_expire_watches_ends_open_watch_with_error_410(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    rv = str(seeded.cluster.resource_version)
    threading.Timer(0.2, seeded.cluster.expire_watches).start()
    started = time.monotonic()
    with pytest.raises(ApiException) as gone:
        _watch_events(core_api, timeout=5, resource_version=rv)
    assert gone.value.status == 410
    assert time.monotonic() - started < 2


def test_watch_ends_at_timeout_seconds(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    started = time.monotonic()
    _watch_events(core_api, timeout=1, resource_version=str(seeded.cluster.resource_version))
    assert 0.9 <= time.monotonic() - started < 2.5


def _eviction(name: str, grace: int | None = None) -> kubernetes.client.V1Eviction:
    options = kubernetes.client.V1DeleteOptions(grace_period_seconds=grace)
    return kubernetes.client.V1Eviction(
        metadata=kubernetes.client.V1ObjectMeta(name=name, namespace="default"),
        delete_options=options,
    )


def test_eviction_deletes_pod_and_records_grace(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    core_api.create_namespaced_pod_eviction("a1", "default", _eviction("a1", 7))
    assert [p.metadata.name for p in core_api.list_namespaced_pod("default").items] == [
        "a2",
        "b1",
    ]
    record = seeded.cluster.evictions[-1]
    assert (record.name, record.grace_period_seconds, record.outcome) == ("a1", 7, 201)
    body = seeded.requests_to("POST", "/eviction$")[-1].body
    assert body["deleteOptions"]["gracePeriodSeconds"] == 7
    with pytest.raises(ApiException) as missing:
        core_api.create_namespaced_pod_eviction("a1", "default", _eviction("a1"))
    assert missing.value.status == 404


def test_eviction_blocked_by_disruption_budget(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    budget = seeded.cluster.add_pdb("default", "pdb-a", selector="app=a", disruptions_allowed=1)
    core_api.create_namespaced_pod_eviction("a1", "default", _eviction("a1"))
    assert budget.disruptions_allowed == 0
    # a Pending pod is evicted whatever its budget says (kube-apiserver's rule): a2 runs
    seeded.cluster.patch(
        "pods", "default", "a2", {"status": {"phase": "Running"}}, subresource="status"
    )
    with pytest.raises(ApiException) as blocked:
        core_api.create_namespaced_pod_eviction("a2", "default", _eviction("a2"))
    assert blocked.value.status == 429
    body = str(blocked.value.body)
    assert "Cannot evict pod as it would violate the pod's disruption budget." in body
    assert seeded.cluster.get("pods", "default", "a2")["metadata"]["name"] == "a2"


def test_eviction_with_termination_delay_marks_pod_terminating(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    seeded.cluster.termination_delay = 0.3
    core_api.create_namespaced_pod_eviction("a1", "default", _eviction("a1", 5))
    pod = core_api.read_namespaced_pod("a1", "default")
    assert pod.metadata.deletion_timestamp is not None
    assert pod.metadata.deletion_grace_period_seconds == 5
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        names = [p.metadata.name for p in core_api.list_namespaced_pod("default").items]
        if "a1" not in names:
            break
        time.sleep(0.05)
    assert "a1" not in names


def test_delete_with_grace_and_uid_precondition(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    wrong = kubernetes.client.V1DeleteOptions(
        grace_period_seconds=1, preconditions=kubernetes.client.V1Preconditions(uid="nope")
    )
    with pytest.raises(ApiException) as conflict:
        core_api.delete_namespaced_pod("a1", "default", body=wrong)
    assert conflict.value.status == 409
    core_api.delete_namespaced_pod("a1", "default", grace_period_seconds=1)
    assert seeded.cluster.deletions[-1].grace_period_seconds == 1
    with pytest.raises(ApiException):
        core_api.read_namespaced_pod("a1", "default")


def test_events_create_and_patch(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    event = kubernetes.client.CoreV1Event(
        metadata=kubernetes.client.V1ObjectMeta(name="node-a.1", namespace="default"),
        involved_object=kubernetes.client.V1ObjectReference(kind="Node", name="node-a"),
        reason="EvictionThresholdMet",
        message="Attempting to reclaim memory",
        type="Warning",
        count=1,
    )
    core_api.create_namespaced_event("default", event)
    core_api.patch_namespaced_event("node-a.1", "default", {"count": 2})
    stored = seeded.cluster.get("events", "default", "node-a.1")
    assert (stored["reason"], stored["count"]) == ("EvictionThresholdMet", 2)
    assert [e.reason for e in core_api.list_namespaced_event("default").items] == [
        "EvictionThresholdMet"
    ]


def test_injected_failures_latency_and_request_log(
    seeded: FakeAPIServer, core_api: CoreV1Api
) -> None:
    seeded.fail_next(2, status=503, path="/nodes/node-a$", retry_after=3)
    for _ in range(2):
        with pytest.raises(ApiException) as failed:
            core_api.read_node("node-a")
        assert failed.value.status == 503
        headers: Any = failed.value.headers
        assert headers["Retry-After"] == "3"
    assert core_api.read_node("node-b").metadata.name == "node-b", "other paths unaffected"
    assert core_api.read_node("node-a").metadata.name == "node-a"
    seeded.add_latency(0.3, path="/nodes/node-b$")
    started = time.monotonic()
    core_api.read_node("node-b")
    assert time.monotonic() - started >= 0.3
    assert [r.path for r in seeded.requests_to("GET", "/api/v1/nodes/")][-2:] == [
        "/api/v1/nodes/node-a",
        "/api/v1/nodes/node-b",
    ]


def test_outage_answers_503_then_recovers(seeded: FakeAPIServer, core_api: CoreV1Api) -> None:
    with seeded.outage():
        with pytest.raises(ApiException) as down:
            core_api.list_node()
        assert down.value.status == 503
    assert len(core_api.list_node().items) == 2


def test_outage_refusing_connections_then_recovers(seeded: FakeAPIServer) -> None:
    config = kubernetes.client.Configuration()
    config.host = seeded.url
    config.retries = False
    with kubernetes.client.ApiClient(config) as api_client:
        api: Any = kubernetes.client.CoreV1Api(api_client)
        with seeded.outage(refuse=True), pytest.raises(urllib3.exceptions.HTTPError):
            api.list_node(_request_timeout=1)
        assert len(api.list_node().items) == 2
