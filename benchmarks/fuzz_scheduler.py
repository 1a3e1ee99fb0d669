"""The long differential fuzz of the scheduler (issue 19): the checks CI runs under
hypothesis a few hundred times, here for as many examples as asked.

    nice python -m benchmarks.fuzz_scheduler --examples 100000 [--seed 1]

Example ``i`` is the cluster :func:`~tests.scheduler.fuzz.strategies.random_cluster`
draws from ``random.Random(f"{seed}-{i}")``: plain draws (a quarter of a millisecond)
instead of hypothesis's engine (about 50 ms), so the run is bounded by the checks, not
by generation. Each example goes through both checks: the product against the
plain-loop oracle for the first pending pod (``differential``) and the whole plan
against its invariants (``plan_invariants``). A failure is printed with the example's
index and cluster (JSON), and the run goes on; ``--example I`` re-runs one example.
Progress and examples per second go to stdout. Exit 1 if any check failed.

Runs from the repository root (it imports the generators and oracle from ``tests``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.scheduler.fuzz import checks, strategies

Check = Callable[[list[dict[str, Any]]], object]
CHECKS: dict[str, Check] = {
    "differential": checks.differential,
    "plan_invariants": checks.plan_invariants,
}
REPORT_EVERY = 5_000


@dataclass(frozen=True)
class Failure:
    index: int
    check: str
    error: str
    example: list[dict[str, Any]]


def example(seed: int, index: int) -> list[dict[str, Any]]:
    return strategies.random_cluster(random.Random(f"{seed}-{index}"))


def run_one(seed: int, index: int) -> list[Failure]:
    objs = example(seed, index)
    failures = []
    for name, check in CHECKS.items():
        try:
            check(objs)
        except Exception as exc:  # a finding: record it and go on
            failures.append(Failure(index, name, f"{type(exc).__name__}: {exc}", objs))
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--example", type=int, help="re-run this one example and print it")
    args = parser.parse_args(argv)

    if args.example is not None:
        found = run_one(args.seed, args.example)
        print(json.dumps(example(args.seed, args.example), indent=1, sort_keys=True))
        for failure in found:
            print(f"--- {failure.check}: {failure.error}")
        return 1 if found else 0

    started = time.perf_counter()
    failures: list[Failure] = []
    for index in range(args.examples):
        for failure in run_one(args.seed, index):
            failures.append(failure)
            print(f"FAILURE example {index} {failure.check}: {failure.error[:300]}", flush=True)
        done = index + 1
        if done % REPORT_EVERY == 0 or done == args.examples:
            elapsed = time.perf_counter() - started
            print(
                f"{done} examples in {elapsed:.0f} s: {done / elapsed:.1f} examples/s"
                f" ({len(CHECKS)} checks each), {len(failures)} failures",
                flush=True,
            )
    for failure in failures:
        print(f"--- example {failure.index}, {failure.check}: {failure.error}")
        print(json.dumps(failure.example, sort_keys=True))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
