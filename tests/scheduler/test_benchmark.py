"""The benchmark's cluster generator is seedable, and a small run places every pod."""

from __future__ import annotations

from benchmarks import bench_scheduler


def test_generator_is_seedable() -> None:
    assert bench_scheduler.generate(20, 10, 5, seed=3) == bench_scheduler.generate(
        20, 10, 5, seed=3
    )
    assert bench_scheduler.generate(20, 10, 5, seed=3) != bench_scheduler.generate(
        20, 10, 5, seed=4
    )


def test_small_run_places_every_pod() -> None:
    result = bench_scheduler.run(nodes=150, pods=300, init_pods=50, zones=3, seed=1)
    assert result["placed"] == 300
    assert result["pods_per_s"] > 0
