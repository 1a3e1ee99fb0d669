"""The long differential fuzz of the scheduler (issue 19): the checks CI runs a few
hundred times, run for as many examples as asked.

    python -m benchmarks.fuzz_scheduler --examples 100000 [--batch 500] [--seed 1]

Each example is a generated cluster (tests/scheduler/fuzz/strategies.py); per example,
in turn, the product is checked against the plain-loop oracle for the first pending pod
(``differential``) and the whole plan against its invariants (``plan_invariants``). The
run goes in batches of ``--batch`` examples, each with its own hypothesis seed, so a
failure is shrunk to a minimal cluster, printed, and the run goes on with the next
batch. It prints examples per second as it goes and, at the end, the total and every
failure (check, error, minimal cluster as JSON). Exit 1 if any check failed.

Runs from the repository root (it imports the generators and oracle from ``tests``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.scheduler.fuzz import checks, strategies

Check = Callable[[list[dict[str, Any]]], object]
CHECKS: dict[str, Check] = {
    "differential": checks.differential,
    "plan_invariants": checks.plan_invariants,
}


@dataclass
class Failure:
    check: str
    error: str
    example: list[dict[str, Any]]


def run_batch(check: Check, examples: int, batch_seed: int) -> tuple[int, Failure | None]:
    """``examples`` generated clusters through ``check``; how many ran, and the shrunk
    failure if one failed."""
    ran = 0
    last: list[list[dict[str, Any]]] = []

    @seed(batch_seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
    )
    @given(strategies.cluster())
    def one(objs: list[dict[str, Any]]) -> None:
        nonlocal ran
        ran += 1
        last[:] = [objs]
        check(objs)

    try:
        one()
    except Exception as exc:  # the shrunk failure: report it and go on
        return ran, Failure(check.__name__, f"{type(exc).__name__}: {exc}", last[0] if last else [])
    return ran, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    total = 0
    failures: list[Failure] = []
    batch = 0
    while total < args.examples:
        size = min(args.batch, args.examples - total)
        for name, check in CHECKS.items():
            ran, failure = run_batch(check, size, args.seed * 1_000_003 + batch)
            if failure is not None:
                failures.append(failure)
                print(f"FAILURE in {name}: {failure.error[:500]}", flush=True)
            total_for_batch = ran
        total += size
        batch += 1
        elapsed = time.perf_counter() - started
        print(
            f"{total} examples ({total_for_batch} in the last batch per check),"
            f" {total / elapsed:.1f} examples/s, {len(failures)} failures",
            flush=True,
        )
    elapsed = time.perf_counter() - started
    print(f"done: {total} examples x {len(CHECKS)} checks in {elapsed:.0f} s")
    print(f"      {total / elapsed:.1f} examples/s; {len(failures)} failures")
    for failure in failures:
        print(f"--- {failure.check}: {failure.error}")
        print(json.dumps(failure.example, sort_keys=True))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
