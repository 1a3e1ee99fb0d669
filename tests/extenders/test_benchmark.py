"""The extender benchmark still runs (tiny sizes, short gaps): every pattern calls the
server as kube-scheduler does and every call answers 200."""

from __future__ import annotations

import gc
import random
import threading
from collections.abc import Iterator

import pytest

from benchmarks import bench_extender
from nodeagent.observability.server import WSGIApp


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
