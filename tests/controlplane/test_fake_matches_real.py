"""The fake API server (tests/fakeapi) answers as the real one does, for what this
project sends: the same requests against both, the same observations (status codes,
reasons, the fields the project reads back). Each case found or guards a difference the
fast tests would otherwise hide; when the real apiserver changes, this is where it shows.

The state each case needs is set up the way each server allows: through the fake's
store, or through the real API as admin (pods marked Running and Ready as their kubelet
would; a PodDisruptionBudget whose status the real disruption controller computes)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pytest
import urllib3

from tests.controlplane import objects as o
from tests.controlplane.cluster import ControlPlane, Nodes, Rest
from tests.doubles import kube as fake
from tests.fakeapi import server
from tests.waiting import eventually

pytestmark = pytest.mark.controlplane


class Backend(Protocol):
    namespace: str

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = ...
    ) -> tuple[int, Any]: ...

    def node(self, name: str, conditions: list[dict[str, Any]]) -> None: ...

    def pod(self, name: str, *, labels: dict[str, str], bound: bool) -> str:
        """Create a pod (bound: to an existing node, Running and Ready); its uid."""
        ...

    def budget(self, name: str, app: str, *, allowed: int, healthy: int) -> None: ...


class _PlainRest:
    """The fake's HTTP answers, read as :class:`Rest` reads the real one's."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool = urllib3.PoolManager(retries=False)

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        response = self._pool.request(method, self.url + path, body=data, headers=headers)
        text = response.data.decode()
        try:
            return response.status, json.loads(text) if text else None
        except json.JSONDecodeError:
            return response.status, text


@dataclass
class FakeBackend:
    api: server.FakeAPIServer
    namespace: str = "fake-ns"

    def __post_init__(self) -> None:
        self._rest = _PlainRest(self.api.url)

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        return self._rest.request(method, path, body, content_type=content_type)

    def node(self, name: str, conditions: list[dict[str, Any]]) -> None:
        node = o.node(name)
        node["status"]["conditions"] = conditions
        self.api.cluster.create("nodes", node)

    def pod(self, name: str, *, labels: dict[str, str], bound: bool) -> str:
        pod = o.pod(name, self.namespace, labels=labels, node_name="diff-node" if bound else None)
        pod["metadata"]["uid"] = str(uuid.uuid4())
        pod["status"] = {"phase": "Running" if bound else "Pending"}
        created = self.api.cluster.create("pods", pod, self.namespace)
        return str(created["metadata"]["uid"])

    def budget(self, name: str, app: str, *, allowed: int, healthy: int) -> None:
        self.api.cluster.add_pdb(
            self.namespace, name, selector=f"app={app}", disruptions_allowed=allowed
        )


@dataclass
class RealBackend:
    plane: ControlPlane
    nodes: Nodes
    namespace: str

    @property
    def admin(self) -> Rest:
        return self.plane.admin

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        return self.admin.request(method, path, body, content_type=content_type)

    def node(self, name: str, conditions: list[dict[str, Any]]) -> None:
        node = o.node(name)
        node["status"]["conditions"] = conditions
        self.nodes.create(node)

    def pod(self, name: str, *, labels: dict[str, str], bound: bool) -> str:
        pod = o.pod(name, self.namespace, labels=labels, node_name="diff-node" if bound else None)
        created = self.admin.create(f"/api/v1/namespaces/{self.namespace}/pods", pod)
        if bound:
            o.running(self.admin, self.namespace, name)
        return str(created["metadata"]["uid"])

    def budget(self, name: str, app: str, *, allowed: int, healthy: int) -> None:
        path = f"/apis/policy/v1/namespaces/{self.namespace}/poddisruptionbudgets"
        self.admin.create(
            path,
            {
                "metadata": {"name": name},
                "spec": {
                    "minAvailable": healthy - allowed,
                    "selector": {"matchLabels": {"app": app}},
                },
            },
        )

        def settled() -> bool:
            status = self.admin.get(f"{path}/{name}").get("status") or {}
            return bool(
                status.get("currentHealthy") == healthy
                and status.get("disruptionsAllowed") == allowed
            )

        eventually(settled, what=f"PDB {name}'s status from the disruption controller")


Case = Callable[[Backend], Any]
CASES: dict[str, Case] = {}


def case(function: Case) -> Case:
    CASES[function.__name__] = function
    return function


def pods(backend: Backend, name: str = "") -> str:
    return f"/api/v1/namespaces/{backend.namespace}/pods" + (f"/{name}" if name else "")


def reason(body: Any) -> str:
    return str((body or {}).get("reason", ""))


def condition(pod: dict[str, Any], kind: str) -> tuple[str, str] | None:
    found = o.pod_condition(pod, kind)
    return (found["status"], found.get("reason", "")) if found else None


def eviction(backend: Backend, name: str, uid: str | None = None) -> dict[str, Any]:
    """A policy/v1 Eviction as the agent sends it (nodeagent.kube.http)."""
    options: dict[str, Any] = {"gracePeriodSeconds": 30}
    if uid:
        options["preconditions"] = {"uid": uid}
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": backend.namespace},
        "deleteOptions": options,
    }


def binding(backend: Backend, name: str, uid: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": backend.namespace}
    if uid:
        meta["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": "diff-node"},
    }


def with_node(backend: Backend) -> None:
    backend.node("diff-node", [{"type": "Ready", "status": "True", "reason": "KubeletReady"}])


@case
def binding_once_then_conflict(backend: Backend) -> Any:
    with_node(backend)
    uid = backend.pod("p", labels={}, bound=False)
    first, _ = backend.request("POST", pods(backend, "p/binding"), binding(backend, "p", uid))
    second, body = backend.request("POST", pods(backend, "p/binding"), binding(backend, "p", uid))
    _, pod = backend.request("GET", pods(backend, "p"))
    return first, second, reason(body), pod["spec"]["nodeName"], condition(pod, "PodScheduled")


@case
def binding_with_a_stale_uid_conflicts(backend: Backend) -> Any:
    with_node(backend)
    backend.pod("p", labels={}, bound=False)
    stale = str(uuid.uuid4())
    status, body = backend.request("POST", pods(backend, "p/binding"), binding(backend, "p", stale))
    return status, reason(body)


@case
def eviction_blocked_by_a_budget(backend: Backend) -> Any:
    with_node(backend)
    backend.pod("p", labels={"app": "a"}, bound=True)
    backend.budget("b", "a", allowed=0, healthy=1)
    status, body = backend.request("POST", pods(backend, "p/eviction"), eviction(backend, "p"))
    causes = [c.get("reason") for c in ((body or {}).get("details") or {}).get("causes") or ()]
    return status, reason(body), causes


@case
def eviction_allowed_marks_and_deletes(backend: Backend) -> Any:
    with_node(backend)
    uid = backend.pod("p", labels={"app": "a"}, bound=True)
    backend.budget("b", "a", allowed=1, healthy=1)
    status, _ = backend.request("POST", pods(backend, "p/eviction"), eviction(backend, "p", uid))
    _, pod = backend.request("GET", pods(backend, "p"))
    return (
        status,
        bool(pod["metadata"].get("deletionTimestamp")),
        condition(pod, "DisruptionTarget"),
    )


@case
def eviction_of_a_pending_pod_ignores_the_budget(backend: Backend) -> Any:
    backend.pod("p", labels={"app": "a"}, bound=False)
    backend.budget("b", "a", allowed=0, healthy=0)
    status, _ = backend.request("POST", pods(backend, "p/eviction"), eviction(backend, "p"))
    gone, _ = backend.request("GET", pods(backend, "p"))
    return status, gone


@case
def eviction_with_a_stale_uid_conflicts(backend: Backend) -> Any:
    with_node(backend)
    backend.pod("p", labels={}, bound=True)
    status, body = backend.request(
        "POST", pods(backend, "p/eviction"), eviction(backend, "p", str(uuid.uuid4()))
    )
    return status, reason(body)


@case
def eviction_naming_another_pod_is_refused(backend: Backend) -> Any:
    with_node(backend)
    backend.pod("p", labels={}, bound=True)
    status, body = backend.request("POST", pods(backend, "p/eviction"), eviction(backend, "q"))
    return status, reason(body)


@case
def eviction_of_a_missing_pod(backend: Backend) -> Any:
    status, body = backend.request(
        "POST", pods(backend, "nobody/eviction"), eviction(backend, "nobody")
    )
    return status, reason(body)


@case
def lease_create_twice_and_stale_replace(backend: Backend) -> Any:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{backend.namespace}/leases"
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    created, first = backend.request("POST", path, lease)
    again, body = backend.request("POST", path, lease)
    current = dict(first)
    current["spec"] = {**first["spec"], "holderIdentity": "b"}
    replaced, _ = backend.request("PUT", f"{path}/l", current)
    stale, stale_body = backend.request("PUT", f"{path}/l", current)
    return created, again, reason(body), replaced, stale, reason(stale_body)


@case
def node_conditions_merge_by_type(backend: Backend) -> Any:
    backend.node(
        "diff-node",
        [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
        ],
    )
    patch = {
        "status": {
            "conditions": [
                {"type": "NodeAgentDiskPressure", "status": "True", "reason": "Threshold"},
                {"type": "MemoryPressure", "status": "True", "reason": "Changed"},
            ]
        }
    }
    status, node = backend.request(
        "PATCH",
        "/api/v1/nodes/diff-node/status",
        patch,
        content_type="application/strategic-merge-patch+json",
    )
    return status, [(c["type"], c["status"]) for c in node["status"]["conditions"]]


@case
def node_taints_are_replaced_whole(backend: Backend) -> Any:
    with_node(backend)
    first = {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    second = {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}}
    kind = "application/strategic-merge-patch+json"
    backend.request("PATCH", "/api/v1/nodes/diff-node", first, content_type=kind)
    status, node = backend.request("PATCH", "/api/v1/nodes/diff-node", second, content_type=kind)
    return status, [t["key"] for t in node["spec"].get("taints") or ()]


@case
def nominated_node_name_null_removes_it(backend: Backend) -> Any:
    backend.pod("p", labels={}, bound=False)
    kind = "application/merge-patch+json"
    set_status, _ = backend.request(
        "PATCH",
        pods(backend, "p/status"),
        {"status": {"nominatedNodeName": "n"}},
        content_type=kind,
    )
    cleared_status, pod = backend.request(
        "PATCH",
        pods(backend, "p/status"),
        {"status": {"nominatedNodeName": None}},
        content_type=kind,
    )
    return set_status, cleared_status, "nominatedNodeName" in pod["status"]


@case
def a_field_selector_the_api_does_not_index(backend: Backend) -> Any:
    status, body = backend.request("GET", pods(backend) + "?fieldSelector=spec.priority%3D1")
    return status, reason(body)


@case
def an_event_outside_its_objects_namespace(backend: Backend) -> Any:
    backend.pod("p", labels={}, bound=False)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1", "namespace": backend.namespace},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "elsewhere"},
        "reason": "Test",
        "message": "m",
        "type": "Normal",
        "source": {"component": "tests"},
    }
    status, body = backend.request("POST", f"/api/v1/namespaces/{backend.namespace}/events", event)
    return status, reason(body)


@case
def a_list_read_in_pages(backend: Backend) -> Any:
    """What the informers' paged lists rely on: ``limit`` pages, ``continue`` carries on
    at one resourceVersion (a pod created between pages is in none), the last page has
    no token, and a token the server cannot read is refused."""
    for name in ("a", "b", "c"):
        backend.pod(name, labels={}, bound=False)
    pages = []
    token = ""
    while True:
        query = "?limit=2" + (f"&continue={token}" if token else "")
        status, body = backend.request("GET", pods(backend) + query)
        meta = body["metadata"]
        pages.append(
            (
                status,
                [p["metadata"]["name"] for p in body["items"]],
                meta.get("remainingItemCount"),
                meta["resourceVersion"],
            )
        )
        token = meta.get("continue") or ""
        if not token:
            break
        backend.pod(f"late-{len(pages)}", labels={}, bound=False)
    same_version = len({version for *_, version in pages}) == 1
    refused, body = backend.request("GET", pods(backend) + "?limit=2&continue=" + "x" * 8)
    return [page[:3] for page in pages], same_version, refused


@case
def a_list_streamed_as_a_watch(backend: Backend) -> Any:
    """What the informers' streamed lists rely on (WatchList, as client-go's reflector
    lists): an ADDED event per object, then a bookmark annotated
    k8s.io/initial-events-end at a resourceVersion no older than any object's; the
    options validated (422); and a list at resourceVersion 0 served whole, its limit
    ignored (the watch cache's answer)."""
    for name in ("a", "b"):
        backend.pod(name, labels={}, bound=False)
    query = "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    status, body = backend.request(
        "GET", pods(backend) + query + "&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    lines = body if isinstance(body, str) else json.dumps(body)
    events = [json.loads(line) for line in lines.splitlines() if line.strip()]
    seen = []
    for event in events:
        meta = event["object"]["metadata"]
        if event["type"] == "BOOKMARK":
            annotations = meta.get("annotations") or {}
            if annotations.get("k8s.io/initial-events-end") == "true":
                newest = max(int(e["object"]["metadata"]["resourceVersion"]) for e in events[:-1])
                seen.append(("end", int(meta["resourceVersion"]) >= newest))
        else:
            seen.append((event["type"], meta["name"]))
    refused = [
        backend.request("GET", pods(backend) + "?watch=1&sendInitialEvents=true")[0],
        backend.request("GET", pods(backend) + "?watch=1&resourceVersionMatch=NotOlderThan")[0],
    ]
    _, whole = backend.request("GET", pods(backend) + "?resourceVersion=0&limit=1")
    listed = sorted(p["metadata"]["name"] for p in whole["items"])
    return status, seen, refused, listed, whole["metadata"].get("continue")


def watched(backend: Backend, since: str) -> list[tuple[str, str, bool, Any]]:
    """The namespace's pod watch events from ``since`` that arrive within a second:
    (type, pod, deletionTimestamp set, deletionGracePeriodSeconds)."""
    status, body = backend.request(
        "GET", pods(backend) + f"?watch=1&resourceVersion={since}&timeoutSeconds=1"
    )
    assert status == 200, body
    lines = body if isinstance(body, str) else json.dumps(body)
    events = [json.loads(line) for line in lines.splitlines() if line.strip()]
    return [
        (
            e["type"],
            e["object"]["metadata"]["name"],
            bool(e["object"]["metadata"].get("deletionTimestamp")),
            e["object"]["metadata"].get("deletionGracePeriodSeconds"),
        )
        for e in events
        if e["type"] != "BOOKMARK"
    ]


@case
def deletion_marks_the_pod_before_it_removes_it(backend: Backend) -> Any:
    """Every pod deletion first writes deletionTimestamp (a MODIFIED event, a window in
    which a binding is refused 409 "is being deleted"), then removes a pod whose grace
    period is 0: unbound (whatever was asked), or asked 0."""
    with_node(backend)
    backend.pod("unbound", labels={}, bound=False)
    backend.pod("forced", labels={}, bound=True)
    backend.pod("graceful", labels={}, bound=True)
    _, listed = backend.request("GET", pods(backend))
    since = listed["metadata"]["resourceVersion"]
    answers = [
        backend.request("DELETE", pods(backend, "unbound"), {"gracePeriodSeconds": 30}),
        backend.request("DELETE", pods(backend, "forced"), {"gracePeriodSeconds": 0}),
        backend.request("DELETE", pods(backend, "graceful"), {"gracePeriodSeconds": 30}),
    ]
    returned = [
        (
            status,
            bool(body["metadata"].get("deletionTimestamp")),
            body["metadata"].get("deletionGracePeriodSeconds"),
        )
        for status, body in answers
    ]
    return returned, watched(backend, since)


class TestTheFakeAnswersAsTheRealApiserver:
    @pytest.mark.parametrize("name", sorted(CASES))
    def test_the_same_requests_get_the_same_answers(
        self, control_plane: ControlPlane, namespace: str, nodes: Nodes, name: str
    ) -> None:
        real = CASES[name](RealBackend(control_plane, nodes, namespace))
        # pods stay terminating as long as they would on a node without a kubelet
        with server.running(fake.FakeCluster(termination_delay=3600)) as api:
            faked = CASES[name](FakeBackend(api, namespace))
            api.cluster.close()
        assert faked == real
