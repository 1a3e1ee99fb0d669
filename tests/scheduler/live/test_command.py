"""``nodeagent scheduler`` as operators run it: configuration errors exit 2 naming the
field; the real process against the fake API server binds, serves promtool-clean
metrics and probes, and on SIGTERM stops cleanly and releases its lease."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from nodeagent import cli
from nodeagent.commands import scheduler as commands_scheduler
from nodeagent.scheduler.live.binder import APIBinder
from tests.fakeapi.fixtures import write_kubeconfig
from tests.fakeapi.server import FakeAPIServer
from tests.observability import tools
from tests.scheduler.live import harness as h
from tests.waiting import eventually


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"leaderElection": {"leaseDuration": "5s", "renewDeadline": "10s"}}, "leaseDuration"),
        ({"leaderElection": {"leaseDurashun": "5s"}}, "leaderElection.leaseDurashun"),
        ({"leaderElection": {"resourceLock": "endpoints"}}, "leaderElection.resourceLock"),
        ({"clientConnection": {"qps": -1}}, "clientConnection.qps"),
        ({"podMaxBackoffSeconds": 0}, "podMaxBackoffSeconds"),
    ],
)
def test_a_config_error_names_the_field_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: dict[str, object], field: str
) -> None:
    config = tmp_path / "scheduler.yaml"
    base = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
    config.write_text(yaml.safe_dump({**base, **document}))
    assert cli.main(["scheduler", "--config", str(config)]) == 2
    assert field in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kubeconfig(tmp_path: Path, url: str) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", url)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_process_binds_serves_metrics_and_releases_its_lease_on_sigterm(
    tmp_path: Path, fake_api: FakeAPIServer
) -> None:
    cluster = fake_api.cluster
    cluster.create("nodes", h.node("n1"))
    cluster.create("pods", h.pod("p1"))
    port = free_port()
    binary = Path(sys.executable).parent / "nodeagent"
    process = subprocess.Popen(
        [
            str(binary),
            "scheduler",
            "--kubeconfig",
            str(kubeconfig(tmp_path, fake_api.url)),
            "--lease-namespace",
            "default",
            "--metrics-address",
            f"127.0.0.1:{port}",
            # plain HTTP; tests/serving/ scrape it with credentials over HTTPS
            "--metrics-auth",
            "none",
            "--log-format",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KUBERNETES_SERVICE_HOST": ""},
    )
    try:
        eventually(lambda: h.node_of(fake_api, "p1") == "n1", timeout=20)
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        bound = (
            'nodeagent_scheduler_api_requests_total{code="201",resource="pods/binding",'
            'verb="create"} 1.0'
        )
        # the API shows the pod bound before the binding's answer is counted: wait for it
        status, metrics = eventually(
            lambda: (
                answer if bound in (answer := get(f"http://127.0.0.1:{port}/metrics"))[1] else None
            ),
            what="the binding counted",
        )
        assert status == 200
        assert (
            'scheduler_schedule_attempts_total{profile="nodeagent-scheduler",'
            'result="scheduled"} 1.0' in metrics
        )
        assert 'leader_election_master_status{name="nodeagent-scheduler"} 1.0' in metrics
        # the binding went out from the binding process, and its request was counted
        assert "nodeagent_scheduler_binding_process_starts_total 1.0" in metrics
        assert 'scheduler_pending_pods{queue="active"} 0.0' in metrics
        assert "nodeagent_scheduler_bindings_in_flight 0.0" in metrics
        promtool = tools.require("promtool")
        done = tools.run([promtool, "check", "metrics"], stdin=metrics.encode())
        assert done.returncode == 0, done.stdout + done.stderr
        lease = cluster.get("leases", "default", "nodeagent-scheduler")
        assert lease["spec"]["holderIdentity"].startswith(socket.gethostname() + "_")
        process.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert process.wait(timeout=15) == 0
        assert time.monotonic() - stopped < 10
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert cluster.get("leases", "default", "nodeagent-scheduler")["spec"]["holderIdentity"] == ""


def test_feature_gates_reach_the_live_framework(tmp_path: Path) -> None:
    parser = cli.build_parser()
    args = parser.parse_args(
        [
            "scheduler",
            "--kubeconfig",
            str(kubeconfig(tmp_path, "http://127.0.0.1:1")),
            "--leader-elect",
            "false",
            "--feature-gates",
            "TaintTolerationComparisonOperators=true",
        ]
    )
    scheduler, _server = commands_scheduler.build(args)
    assert scheduler.handle.features.taint_toleration_comparison_operators
    assert scheduler.process_binder is not None  # bindings from a process of their own


def test_bind_process_false_binds_from_the_schedulers_threads(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(
        [
            "scheduler",
            "--kubeconfig",
            str(kubeconfig(tmp_path, "http://127.0.0.1:1")),
            "--bind-process",
            "false",
        ]
    )
    scheduler, _server = commands_scheduler.build(args)
    assert scheduler.process_binder is None
    assert isinstance(scheduler.handle.binder, APIBinder)


def test_an_unknown_feature_gate_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["scheduler", "--feature-gates", "NoSuchGate=true"]) == 2
    assert "unrecognized feature gate 'NoSuchGate'" in capsys.readouterr().err
