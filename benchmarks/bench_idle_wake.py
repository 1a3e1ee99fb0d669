"""What coming back from idle costs on this machine, whatever the program: the CPU time of
a fixed unit of pure-Python work right after sleeping ``gap`` seconds, against the same
unit run again at once. A call that arrives after a pause (the extender's sporadic
pattern) pays this on top of its own work; a difference here is the machine's (caches,
frequency and power states, the hypervisor), not the extender's.

    python -m benchmarks.bench_idle_wake [--gaps 0,2,12] [--repeat 4]
"""

from __future__ import annotations

import argparse
import statistics
import time

UNIT = 60_000
"""Loop iterations in one unit: about 2 ms of CPU here."""


def unit() -> float:
    """Milliseconds of this thread's CPU time for one unit of work."""
    started = time.thread_time()
    total = 0
    for i in range(UNIT):
        total += i * i
    return (time.thread_time() - started) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaps", default="0,2,12", help="seconds of sleep before each unit")
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    for gap in (float(g) for g in args.gaps.split(",")):
        first, again = [], []
        for _ in range(args.repeat if gap else 5 * args.repeat):
            time.sleep(gap)
            first.append(unit())
            again.append(unit())
        print(
            f"after {gap:4.1f} s idle: {statistics.median(first):.2f} ms (max {max(first):.2f});"
            f" the same unit again at once: {statistics.median(again):.2f} ms;"
            f" ratio {statistics.median(first) / statistics.median(again):.2f}"
        )


if __name__ == "__main__":
    main()
