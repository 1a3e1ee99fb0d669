"""The extender benchmark still runs (tiny sizes, short gaps): every pattern calls the
server as kube-scheduler does and every call answers 200."""

from __future__ import annotations

import gc
import random
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks import bench_extender, extender_clients
from nodeagent.serving.endpoints import WSGIApp
from tests.controlplane import cluster


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the benchmark freezes its node objects, as the extender does


def test_the_sporadic_pattern_has_long_gaps_and_calls_filter_then_prioritize() -> None:
    gaps = bench_extender.sporadic_gaps(1.0, 0.01, 0.1, random.Random(1))
    assert sum(gap >= 0.08 for gap in gaps) >= 3
    assert all(0.01 <= gap <= 0.1 for gap in gaps) and sum(gaps) >= 1.0
    rows, pauses, collections = bench_extender.sporadic(
        0.3, 40, 200.0, gaps=(0.01, 0.05), idle_gaps=2, idle_timeout=0.1
    )
    assert [row.case for row in rows] == [
        "sporadic /filter 40 names, HTTPS",
        "sporadic /prioritize 40 names, HTTPS",
        "sporadic, first call after >= 0.04 s",
        "sporadic, after > 0.1 s: new HTTPS connection",
    ]
    assert len(rows[0].wall) == len(rows[1].wall) == len(pauses)
    assert len(rows[2].wall) == sum(0.04 <= gap <= 0.1 for gap in pauses) >= 3
    assert len(rows[3].wall) == sum(gap > 0.1 for gap in pauses) == 2
    assert all(cpu > 0 for row in rows for cpu in [*row.cpu, *row.call_cpu])
    # a new connection's server CPU includes its TLS handshake
    assert min(rows[3].call_cpu) > max(rows[3].cpu)
    assert collections.line().startswith("  gc:")


def test_back_to_back_and_tls_cases() -> None:
    rows, _ = bench_extender.back_to_back(calls=3, nodes=40, full_nodes=5, updates_per_second=0)
    assert [row.case for row in rows] == [
        "/filter 40 names",
        "/prioritize 40 names",
        "/filter 5 whole nodes, warm",
        "/prioritize 5 whole nodes, warm",
        "/filter 5 whole nodes, cold",
        "/prioritize 5 whole nodes, cold",
    ]
    assert all(len(row.wall) == len(row.cpu) == len(row.base) == 3 for row in rows)
    tls = bench_extender.tls_calls(calls=3, nodes=40)
    assert [row.case for row in tls] == [
        "/filter 40 names, fresh TLS",
        "/filter 40 names, reused TLS",
    ]
    assert all(row.line() for row in [*rows, *tls])


def test_the_sporadic_pattern_against_a_server_process_of_its_own() -> None:
    rows, pauses, collections = bench_extender.sporadic(
        0.2, 40, 200.0, gaps=(0.01, 0.05), idle_gaps=1, idle_timeout=0.1, apart=True
    )
    assert len(rows[0].wall) == len(rows[1].wall) == len(pauses)
    assert len(rows[3].wall) == 1
    assert all(cpu > 0 for row in rows for cpu in [*row.cpu, *row.call_cpu, *row.client_cpu])
    assert collections.line().startswith("  gc:")


class TestServerCPU:
    """Each call's handler CPU says how much of it the collector took, in that thread
    only, so that an outlier names its cause."""

    @staticmethod
    def served(app: WSGIApp, cpu: bench_extender.ServerCPU) -> None:
        gc.callbacks.append(cpu.collecting)
        try:
            cpu.timed(app)({}, lambda status, headers: lambda data: None)
        finally:
            gc.callbacks.remove(cpu.collecting)

    def test_a_collection_inside_the_handler_is_its_collector_share(self) -> None:
        garbage: list[list[list[int]]] = [[[] for _ in range(50)] for _ in range(2000)]

        def collecting(environ: object, start_response: object) -> list[bytes]:
            garbage.clear()
            gc.collect()
            return [b"{}"]

        cpu = bench_extender.ServerCPU()
        self.served(collecting, cpu)
        (call,) = cpu.calls
        assert 0 < call.collector <= call.handler
        assert "collector" in call.why()

    def test_a_collection_in_another_thread_is_not_counted(self) -> None:
        def answering(environ: object, start_response: object) -> list[bytes]:
            other = threading.Thread(target=gc.collect)
            other.start()
            other.join()
            return [b"{}"]

        cpu = bench_extender.ServerCPU()
        self.served(answering, cpu)
        assert cpu.calls[0].collector == 0.0


@pytest.fixture(scope="session")
def go_clients() -> extender_clients.Clients:
    """kube-scheduler's extender client, built once per session: in seconds from the
    module and build caches tests/controlplane/build.sh fills, so only where it has run."""
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain: kube-scheduler's extender client cannot be built")
    if (reason := cluster.unavailable()) is not None:
        pytest.skip(f"{reason} (its caches make this build take seconds)")
    built = extender_clients.go_client()
    assert not isinstance(built, str), built
    return extender_clients.Clients(built)


class TestKubeSchedulersClient:
    """The benchmark's patterns through kube-scheduler's own HTTPExtender: every call
    answers 200, the client times the whole call (the server's handling inside it) and
    says which calls opened a connection."""

    def test_the_sporadic_pattern_reuses_its_connection_until_it_idles_out(
        self, go_clients: extender_clients.Clients
    ) -> None:
        rows, pauses, _ = bench_extender.sporadic(
            0.3,
            40,
            200.0,
            gaps=(0.01, 0.05),
            idle_gaps=2,
            idle_timeout=0.5,  # the transport's, instead of 90 s
            apart=True,
            clients=go_clients,
        )
        filters, prioritizes, _, reconnected = rows
        assert len(filters.wall) == len(prioritizes.wall) == len(pauses)
        # the first call, and the first after each pause longer than the idle timeout
        assert len(reconnected.wall) == 2
        assert filters.connections == 3 and prioritizes.connections == 0
        for row in (filters, prioritizes):
            assert all(wall > handler for wall, handler in zip(row.wall, row.cpu, strict=True))
            assert all(cpu > 0 for cpu in row.client_cpu)

    def test_back_to_back_and_tls_cases(self, go_clients: extender_clients.Clients) -> None:
        rows, _ = bench_extender.back_to_back(
            calls=3, nodes=40, full_nodes=5, updates_per_second=0, clients=go_clients
        )
        assert len(rows) == 6
        assert all(len(row.wall) == len(row.base) == 3 for row in rows)
        assert all(row.connections == 0 for row in rows)  # warmed up on a kept connection
        assert all(
            wall > handler for row in rows for wall, handler in zip(row.wall, row.cpu, strict=True)
        )
        fresh, reused = bench_extender.tls_calls(calls=3, nodes=40, clients=go_clients)
        assert (fresh.connections, reused.connections) == (3, 0)
        # a new connection's server CPU includes its side of the TLS handshake
        assert min(fresh.call_cpu) > max(fresh.cpu)

    def test_a_failed_call_is_an_error_not_a_timing(
        self, go_clients: extender_clients.Clients
    ) -> None:
        payload = extender_clients.Payload(bench_extender.POD, [bench_extender.node(0, 0.0, "1")])
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            port = unused.getsockname()[1]
            with (
                go_clients.open(port, payload, tls=False) as client,
                pytest.raises(extender_clients.GoClientError, match=r"filter: .*refused"),
            ):
                client.call(["filter"])
        with (
            bench_extender.extender(1, tls=False, updates_per_second=0) as ext,
            go_clients.open(ext.port, payload, tls=False) as client,
            pytest.raises(extender_clients.GoClientError, match="unknown verb"),
        ):
            client.call(["bind"])


class TestChoosingTheClient:
    """kube-scheduler's client is built once and again only when its source changes;
    without a Go toolchain, or when the build fails, the benchmark says so and calls
    with Python's."""

    @staticmethod
    def fake_go(directory: Path, *, fails: bool = False) -> Path:
        """A ``go`` that notes its arguments and writes an executable to ``-o``."""
        go = directory / "go"
        build = (
            'echo "cannot load k8s.io/kubernetes/pkg/scheduler" >&2; exit 1'
            if fails
            else 'while [ $# -gt 0 ]; do [ "$1" = -o ] && out="$2"; shift; done\n'
            'printf "#!/bin/sh\\n" >"$out"; chmod +x "$out"'
        )
        go.write_text(f'#!/bin/sh\necho "$@" >>"{directory}/calls"\n{build}\n')
        go.chmod(0o755)
        return directory / "calls"

    @pytest.fixture
    def built_into(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        tools = tmp_path / "bin"
        tools.mkdir()
        monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
        monkeypatch.setenv("NODEAGENT_CONTROLPLANE_DIR", str(tmp_path / "built"))
        return tools

    def test_built_once_then_again_only_when_the_source_changes(self, built_into: Path) -> None:
        calls = self.fake_go(built_into)
        binary = extender_clients.go_client()
        assert binary == built_into.parent / "built" / "extenderclient"
        assert extender_clients.go_client() == binary
        (built_command,) = calls.read_text().splitlines()
        assert built_command.endswith("./extenderclient") and "-trimpath" in built_command
        (binary.parent / ".extenderclient.stamp").write_text("an older source")
        assert extender_clients.go_client() == binary
        assert len(calls.read_text().splitlines()) == 2

    def test_without_go_the_python_client_calls(
        self, built_into: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        clients = extender_clients.Clients.choose(extender_clients.ClientKind.GO)
        assert clients.kind is extender_clients.ClientKind.PYTHON
        assert "no Go toolchain" in capsys.readouterr().err
        rows, _ = bench_extender.back_to_back(
            calls=2, nodes=20, full_nodes=2, updates_per_second=0, clients=clients
        )
        assert all(len(row.wall) == 2 and row.client_cpu for row in rows)

    def test_a_failed_build_is_said_and_the_python_client_calls(
        self, built_into: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        self.fake_go(built_into, fails=True)
        clients = extender_clients.Clients.choose(extender_clients.ClientKind.GO)
        assert clients.kind is extender_clients.ClientKind.PYTHON
        assert "cannot load k8s.io/kubernetes/pkg/scheduler" in capsys.readouterr().err
        assert not (built_into.parent / "built" / "extenderclient").exists()

    def test_python_when_asked(self, capsys: pytest.CaptureFixture[str]) -> None:
        clients = extender_clients.Clients.choose(extender_clients.ClientKind.PYTHON)
        assert clients.kind is extender_clients.ClientKind.PYTHON
        assert capsys.readouterr().err == ""
