"""The extender benchmark still runs (tiny sizes): every case answers 200 over HTTP."""

from __future__ import annotations

from benchmarks import bench_extender


def test_benchmark_runs_every_case() -> None:
    rows = bench_extender.run(calls=3, nodes=40, full_nodes=5, freeze=False)
    assert [row["case"] for row in rows] == [
        "/filter 40 names",
        "/prioritize 40 names",
        "/filter 5 whole nodes, warm",
        "/prioritize 5 whole nodes, warm",
        "/filter 5 whole nodes, cold",
        "/prioritize 5 whole nodes, cold",
    ]
    assert all(row["p99_ms"] >= row["p50_ms"] > 0 for row in rows)
    assert all(row["cpu_p99_ms"] >= row["cpu_p50_ms"] > 0 for row in rows)
