"""``nodeagent run`` as a process: it serves its probes and metrics, and SIGTERM stops it
cleanly within a few seconds, standalone and with a pod watch open on the API."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.doubles import kube as fake
from tests.e2e import harness
from tests.fakeapi import server

pytestmark = pytest.mark.timeout(60)

STOP_WITHIN = 3.0
"""Seconds from SIGTERM to exit that the tests allow ("a few seconds")."""


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_standalone_run_serves_probes_and_metrics_and_stops_on_sigterm() -> None:
    with harness.agent_process(["--standalone", "--metrics-address", "127.0.0.1:0"]) as agent:
        started = agent.wait_line("nodeagent running")
        assert started["mode"] == "standalone" and started["dryRun"] is True
        url = started["metrics"]
        harness.wait_for("readiness", lambda: get(url + "/readyz")[0] == 200)
        status, body = get(url + "/metrics")
        assert status == 200
        assert 'nodeagent_signal_available_bytes{signal="memory.available"}' in body
        decision = agent.wait_line("no threshold met")
        assert decision["logger"] == "nodeagent.decision"
        assert agent.terminate() < STOP_WITHIN
        assert agent.wait_line("stopped")["cycles"] >= 1


def test_cluster_run_stops_on_sigterm_with_its_pod_watch_open(
    api: server.FakeAPIServer, cluster: fake.FakeCluster, tmp_path: Path
) -> None:
    kubeconfig = harness.write_kubeconfig(tmp_path / "kubeconfig", api.url)
    args = [
        "--kubeconfig",
        str(kubeconfig),
        "--node-name",
        harness.NODE,
        "--metrics-address",
        "127.0.0.1:0",
        "--nodefs-path",
        str(tmp_path),
        "--imagefs-path",
        str(tmp_path),
    ]
    with harness.agent_process(args) as agent:
        assert agent.wait_line("nodeagent running")["mode"] == "cluster"
        harness.wait_for(
            "the agent's conditions on the node",
            lambda: harness.condition_status(cluster, "NodeAgentMemoryPressure") == "False",
            timeout=20,
        )
        # the informer lists by streaming: its one request is the watch (a list, then a
        # watch, where the server does not stream)
        harness.wait_for(
            "the pod watch",
            lambda: [
                r for r in api.requests_to("GET", r"/api/v1/pods$") if r.param("watch") == "true"
            ],
        )
        assert agent.terminate() < STOP_WITHIN
