"""``nodeagent extender`` as a stock kube-scheduler sees it: a client that speaks exactly
as kube-scheduler does (Go field names, ``null`` for the unused node form, compact JSON,
``POST <prefix>/<verb>``) against the real server, whose node view is kept by the
project's informer through the real ``kubernetes`` client over HTTP (tests/fakeapi)."""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.extender import server
from nodeagent.extender.nodeview import NodeView
from nodeagent.k8s.pressure import PRESSURE_ANNOTATION
from nodeagent.kube import http as kube_http
from nodeagent.kube import informer
from nodeagent.kube.client import api_time
from nodeagent.scheduler.plugins import node_pressure
from nodeagent.serving.server import Protection
from nodeagent.serving.settings import ListenAddress, MetricsAuth, resolve
from tests.extenders import tls
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler.builders import node_dict, pod_dict

GiB = 2**30


def annotation(available: int, *, at: float, capacity: int = 32 * GiB) -> str:
    return json.dumps(
        {
            "time": api_time(at),
            "signals": {
                "memory.available": {
                    "available": available,
                    "capacity": capacity,
                    "threshold": GiB,
                }
            },
        }
    )


def cluster_nodes(now: float) -> list[dict[str, Any]]:
    """calm (headroom 100), tight (3.2 GiB above the threshold of 32 GiB: 50), stale,
    memory-pressure condition, agent's taint, kubelet's taint."""
    taint = {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}
    kubelet = {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}
    return [
        node_dict("calm", annotations={PRESSURE_ANNOTATION: annotation(20 * GiB, at=now)}),
        node_dict(
            "tight",
            annotations={PRESSURE_ANNOTATION: annotation(GiB + 3436 * 2**20, at=now)},
        ),
        node_dict(
            "stale",
            annotations={PRESSURE_ANNOTATION: annotation(20 * GiB, at=now - 3600)},
        ),
        node_dict("pressured", conditions={"NodeAgentMemoryPressure": "True"}),
        node_dict("tainted", taints=[taint]),
        node_dict("disk", taints=[kubelet]),
    ]


@dataclass
class Extender:
    url: str
    api: FakeAPIServer
    view: NodeView
    context: ssl.SSLContext | None = None

    def call(
        self, verb: str, body: bytes, *, headers: dict[str, str] | None = None, method: str = "POST"
    ) -> tuple[int, bytes]:
        host, port = self.url.split("//", 1)[1].split(":")
        if self.context is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, int(port), context=self.context, timeout=10
            )
        else:
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request(
                method,
                f"/{verb}",
                body=body,
                headers={"Content-Type": "application/json", **(headers or {})},
            )
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def json(self, verb: str, message: Any) -> Any:
        status, body = self.call(verb, go_json(message))
        assert status == 200, body
        return json.loads(body)


def go_json(message: Any) -> bytes:
    """Compact, as Go's json.Marshal writes."""
    return json.dumps(message, separators=(",", ":")).encode()


def args(pod: dict[str, Any], *, names: list[str] | None = None, nodes: Any = None) -> Any:
    """ExtenderArgs exactly as kube-scheduler marshals them (no JSON tags, nil -> null)."""
    return {
        "Pod": pod,
        "Nodes": None if nodes is None else {"metadata": {}, "items": nodes},
        "NodeNames": names,
    }


def read_until_closed(connection: socket.socket) -> str:
    chunks = []
    while chunk := connection.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture
def now() -> float:
    return time.time()


@contextmanager
def start_extender(
    fake_api: FakeAPIServer, kube: kube_http.HTTPKubeClient, protection: Protection | None
) -> Iterator[tuple[str, NodeView]]:
    view = NodeView(synced=lambda: nodes.synced)
    nodes = informer.Informer(informer.nodes(kube), view.handlers())
    endpoint, _ = server.make_server(
        view,
        server.PressureJudge(node_pressure.Args()),
        ListenAddress("127.0.0.1", 0),
        protection=protection,
        max_request_bytes=1 << 20,
        watching=lambda: nodes.alive,
    )
    endpoint.start()
    nodes.start()
    try:
        yield endpoint.url, view
    finally:
        nodes.stop()
        endpoint.stop()


@pytest.fixture
def extender(
    fake_api: FakeAPIServer, kube: kube_http.HTTPKubeClient, now: float
) -> Iterator[Extender]:
    for obj in cluster_nodes(now):
        fake_api.cluster.create("nodes", obj)
    with start_extender(fake_api, kube, None) as (url, view):
        wait_for(lambda: view.synced and len(view) == 6)
        yield Extender(url, fake_api, view)


POD = pod_dict("web", requests={"cpu": "100m"})
NAMES = ["calm", "tight", "stale", "pressured", "tainted", "disk", "unknown"]


# --- filter ----------------------------------------------------------------------------------


def test_filter_by_names_fails_untolerated_pressure_taints(extender: Extender) -> None:
    result = extender.json("filter", args(POD, names=NAMES))
    assert result["NodeNames"] == ["calm", "tight", "stale", "pressured", "unknown"]
    assert result["Nodes"] is None
    assert result["FailedNodes"] == {}
    assert result["FailedAndUnresolvableNodes"] == {
        "tainted": "node(s) had memory pressure",
        "disk": "node(s) had disk pressure",
    }
    assert result["Error"] == ""


def test_a_toleration_lets_the_pod_through(extender: Extender) -> None:
    tolerant = pod_dict(
        "ds",
        tolerations=[{"key": "nodeagent.io/memory-pressure", "operator": "Exists"}],
    )
    result = extender.json("filter", args(tolerant, names=["tainted", "disk"]))
    assert result["NodeNames"] == ["tainted"]
    assert list(result["FailedAndUnresolvableNodes"]) == ["disk"]


def test_filter_with_whole_nodes_echoes_the_passing_ones_unchanged(
    extender: Extender, now: float
) -> None:
    sent = cluster_nodes(now)
    sent[0]["status"]["nodeInfo"] = {"kubeletVersion": "v1.30.1"}  # not read, echoed
    result = extender.json("filter", args(POD, nodes=sent))
    assert result["NodeNames"] is None
    assert result["Nodes"]["items"] == [sent[0], sent[1], sent[2], sent[3]]
    assert set(result["FailedAndUnresolvableNodes"]) == {"tainted", "disk"}


def test_whole_nodes_are_judged_as_sent_not_as_watched(extender: Extender, now: float) -> None:
    calm = node_dict("calm", taints=[{"key": "nodeagent.io/pid-pressure", "effect": "NoExecute"}])
    calm["metadata"]["resourceVersion"] = "999999"
    result = extender.json("filter", args(POD, nodes=[calm]))
    assert result["FailedAndUnresolvableNodes"] == {"calm": "node(s) had pid pressure"}


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_a_node_the_api_would_refuse_is_skipped_and_the_others_answered(
    extender: Extender, now: float, verb: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An unknown taint effect (the API server refuses it) makes that one node
    unjudgeable: it passes the filter and scores neutral, named in one warning; the
    rest of the call is answered as usual (issue 19: skip, never fail the call)."""
    invalid = node_dict("odd", taints=[{"key": "k", "effect": "Sometimes"}])
    sent = [invalid, *cluster_nodes(now)]
    caplog.set_level(logging.WARNING, logger="nodeagent")
    result = extender.json(verb, args(POD, nodes=sent))
    if verb == "filter":
        assert result["Nodes"]["items"][0] == invalid
        assert set(result["FailedAndUnresolvableNodes"]) == {"tainted", "disk"}
    else:
        scores = {entry["Host"]: entry["Score"] for entry in result}
        assert set(scores) == {n["metadata"]["name"] for n in sent}
        assert scores["odd"] == 5  # neutral: the plugin's 50 on the extender's 0..10
        assert scores["pressured"] == 0
    warnings = [r.getMessage() for r in caplog.records if "invalid node" in r.getMessage()]
    assert len(warnings) == 1 and "odd" in warnings[0] and "Sometimes" in warnings[0]


def test_lowercase_field_names_of_older_extender_types_are_accepted(extender: Extender) -> None:
    status, body = extender.call("filter", go_json({"pod": POD, "nodenames": ["tainted"]}))
    assert status == 200
    assert json.loads(body)["FailedAndUnresolvableNodes"] == {
        "tainted": "node(s) had memory pressure"
    }


def test_the_view_follows_the_watch(extender: Extender) -> None:
    taint = {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}
    extender.api.cluster.patch("nodes", "", "calm", {"spec": {"taints": [taint]}})
    wait_for(
        lambda: (
            "calm"
            in extender.json("filter", args(POD, names=["calm"]))["FailedAndUnresolvableNodes"]
        )
    )
    extender.api.cluster.delete("nodes", "", "tainted")
    wait_for(lambda: extender.view.get("tainted") is None)
    assert extender.json("filter", args(POD, names=["tainted"]))["NodeNames"] == ["tainted"]


# --- prioritize ------------------------------------------------------------------------------


def test_prioritize_scores_published_headroom_on_zero_to_ten(extender: Extender) -> None:
    result = extender.json("prioritize", args(POD, names=NAMES))
    assert result == [
        {"Host": "calm", "Score": 10},
        {"Host": "tight", "Score": 5},  # 3.36 GiB of 32 GiB above the threshold: 52 -> 5
        {"Host": "stale", "Score": 5},  # stale annotation: neutral 50 -> 5
        {"Host": "pressured", "Score": 0},  # condition True
        {"Host": "tainted", "Score": 5},  # no annotation: neutral
        {"Host": "disk", "Score": 5},
        {"Host": "unknown", "Score": 5},  # not in the view: neutral
    ]


def test_prioritize_with_whole_nodes(extender: Extender, now: float) -> None:
    result = extender.json("prioritize", args(POD, nodes=cluster_nodes(now)[:2]))
    assert result == [{"Host": "calm", "Score": 10}, {"Host": "tight", "Score": 5}]


# --- bad requests ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"{not json", "not a JSON object", id="not-json"),
        pytest.param(b"[1, 2]", "not a JSON object", id="array"),
        pytest.param(go_json({"NodeNames": ["a"]}), "Pod: missing", id="no-pod"),
        pytest.param(go_json({"Pod": None, "NodeNames": ["a"]}), "Pod: missing", id="null-pod"),
        pytest.param(go_json({"Pod": "web", "NodeNames": ["a"]}), "Pod", id="pod-type"),
        pytest.param(go_json({"Pod": POD}), "both missing", id="no-nodes"),
        pytest.param(go_json({"Pod": POD, "NodeNames": "a"}), "NodeNames", id="names-type"),
        pytest.param(go_json({"Pod": POD, "NodeNames": [1]}), "NodeNames", id="name-type"),
        pytest.param(go_json({"Pod": POD, "Nodes": {"items": 3}}), "Nodes", id="items-type"),
        pytest.param(
            go_json({"Pod": POD, "Nodes": {"items": [{"metadata": {"name": 5}}]}}),
            "Nodes.items[0]",
            id="node-name-type",
        ),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_bad_requests_get_400_with_a_message(
    extender: Extender, verb: str, body: bytes, message: str
) -> None:
    status, answer = extender.call(verb, body)
    assert status == 400
    assert message in answer.decode()
    assert extender.json(verb, args(POD, names=["calm"]))  # still serving


def test_malformed_tolerations_are_a_bad_filter_request(extender: Extender) -> None:
    body = go_json({"Pod": {"spec": {"tolerations": "all"}}, "NodeNames": ["a"]})
    status, answer = extender.call("filter", body)
    assert status == 400
    assert "Pod.spec.tolerations" in answer.decode()
    # prioritize does not read tolerations
    assert extender.call("prioritize", body)[0] == 200


def test_huge_bodies_are_refused_unread(extender: Extender) -> None:
    host, port = extender.url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        # The answer comes from the headers alone: none of the 1 GB is waited for.
        raw.sendall(b"POST /filter HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n{")
        answer = read_until_closed(raw)
    assert answer.startswith("HTTP/1.1 413")
    assert "\r\nConnection: close\r\n" in answer  # the body was not read: the connection ends
    assert "request body of 1000000000 bytes exceeds the limit of 1048576" in answer
    assert extender.json("filter", args(POD, names=["calm"]))  # still serving


def test_other_methods_and_missing_length(extender: Extender) -> None:
    status, _ = extender.call("filter", b"", method="GET")
    assert status == 405
    host, port = extender.url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.sendall(b"POST /filter HTTP/1.0\r\nContent-Type: application/json\r\n\r\n")
        assert read_until_closed(raw).startswith("HTTP/1.1 411")


def test_probes_and_metrics(extender: Extender) -> None:
    assert extender.call("readyz", b"", method="GET") == (200, b"ok: serving; 6 nodes known\n")
    assert extender.call("healthz", b"", method="GET")[0] == 200
    extender.json("filter", args(POD, names=["tainted"]))
    extender.call("prioritize", b"{")
    status, text = extender.call("metrics", b"", method="GET")
    assert status == 200
    metrics = text.decode()
    assert 'nodeagent_extender_requests_total{code="200",verb="filter"} 1.0' in metrics
    assert 'nodeagent_extender_requests_total{code="400",verb="prioritize"} 1.0' in metrics
    assert 'nodeagent_extender_request_duration_seconds_count{verb="filter"} 1.0' in metrics
    assert "nodeagent_extender_nodes 6.0" in metrics
    assert 'nodeagent_extender_filtered_nodes_total{pressure="memory"} 1.0' in metrics


def test_not_ready_until_the_nodes_are_listed(
    fake_api: FakeAPIServer, kube: kube_http.HTTPKubeClient
) -> None:
    with fake_api.outage(status=503), start_extender(fake_api, kube, None) as (url, view):
        probe = Extender(url, fake_api, view)
        assert probe.call("readyz", b"", method="GET")[0] == 503
        assert probe.call("healthz", b"", method="GET")[0] == 200
        # unknown nodes pass while the view is empty
        result = probe.json("filter", args(POD, names=["n1"]))
        assert result["NodeNames"] == ["n1"]


# --- TLS -------------------------------------------------------------------------------------


def test_tls(fake_api: FakeAPIServer, kube: kube_http.HTTPKubeClient, tmp_path: Path) -> None:
    pki = tls.make_pki(tmp_path)
    fake_api.cluster.create("nodes", node_dict("n1"))
    security = resolve(MetricsAuth.NONE, pki.server_cert, pki.server_key, None)
    with start_extender(fake_api, kube, Protection(security)) as (url, view):
        assert url.startswith("https://")
        client = ssl.create_default_context(cafile=str(pki.ca))
        extender = Extender(url, fake_api, view, client)
        wait_for(lambda: view.synced)
        assert extender.json("filter", args(POD, names=["n1"]))["NodeNames"] == ["n1"]
        other = tls.make_pki(tmp_path / "other")
        stranger = Extender(url, fake_api, view, ssl.create_default_context(cafile=str(other.ca)))
        with pytest.raises(ssl.SSLCertVerificationError):
            stranger.call("filter", b"{}")
        # a plain-HTTP client or a silent one never stalls the server
        host, port = url.split("//", 1)[1].split(":")
        with socket.create_connection((host, int(port)), timeout=5):
            assert extender.json("filter", args(POD, names=["n1"]))["NodeNames"] == ["n1"]


# --- the command -----------------------------------------------------------------------------


def test_the_command_serves_https_until_sigterm(fake_api: FakeAPIServer, tmp_path: Path) -> None:
    pki = tls.make_pki(tmp_path)
    fake_api.cluster.create(
        "nodes",
        node_dict("n1", taints=[{"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}]),
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": fake_api.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "fake", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "nodeagent",
        "extender",
        "--kubeconfig",
        str(kubeconfig),
        "--listen",
        f"127.0.0.1:{port}",
        "--tls-cert-file",
        str(pki.server_cert),
        "--tls-private-key-file",
        str(pki.server_key),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        extender = Extender(
            f"https://127.0.0.1:{port}",
            fake_api,
            NodeView(),
            ssl.create_default_context(cafile=str(pki.ca)),
        )

        def ready() -> bool:
            try:
                return extender.call("readyz", b"", method="GET")[0] == 200
            except OSError:
                return False

        wait_for(ready, timeout=30)
        result = extender.json("filter", args(POD, names=["n1"]))
        assert result["FailedAndUnresolvableNodes"] == {"n1": "node(s) had memory pressure"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        pytest.param(["--listen", "nowhere"], "--listen 'nowhere'", id="listen"),
        pytest.param(["--tls-cert-file", "/x.crt"], "needs --tls-private-key-file too", id="key"),
        pytest.param(
            ["--tls-cert-file", "/x.crt", "--tls-private-key-file", "/x.key"],
            "cannot load",
            id="files",
        ),
        pytest.param(["--max-request-bytes", "0"], "--max-request-bytes 0", id="limit"),
    ],
)
def test_bad_flags_exit_2(flags: list[str], field: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", "extender", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert field in done.stderr
