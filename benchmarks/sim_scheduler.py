"""The long run of the live scheduler's deterministic simulation (tests/sim).

    python -m benchmarks.sim_scheduler --seeds 100000 [--start 0] [--jobs 2]
    python -m benchmarks.sim_scheduler --replay SEED
    python -m benchmarks.sim_scheduler --agent --seeds 2000   (the agent's actuation)

Runs seeds ``start .. start+seeds-1`` (in ``jobs`` processes, chunks of seeds each;
three in four with PVs, claims and the PV controller, see tests/sim/scheduler_sim.py),
prints progress with seeds per second, every failing seed with the invariant it broke,
and a summary; exits 1 if any seed failed. ``--replay`` runs one seed and prints every
step it took (and the violation, if any): what a failing seed is debugged with.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Iterator

from tests.sim.agent_sim import run_agent_seed
from tests.sim.scheduler_sim import Violation, run_seed
from tests.sim.scheduler_sim import simulation as seeded

CHUNK = 200


def run_chunk(bounds: tuple[int, int, bool]) -> tuple[int, list[tuple[int, str]]]:
    """Seeds ``[first, last)`` (of the agent's simulation if the flag is set): how many
    ran, and the failures (seed, first line)."""
    first, last, agent = bounds
    run = run_agent_seed if agent else run_seed
    failures: list[tuple[int, str]] = []
    for seed in range(first, last):
        try:
            run(seed)
        except Violation as exc:
            failures.append((seed, str(exc).splitlines()[0]))
        except Exception as exc:  # a crash is a failure too, with its seed
            failures.append((seed, f"crashed: {exc!r}"))
    return last - first, failures


def chunks(start: int, seeds: int, agent: bool) -> Iterator[tuple[int, int, bool]]:
    size = CHUNK // 10 if agent else CHUNK
    for first in range(start, start + seeds, size):
        yield first, min(first + size, start + seeds), agent


def replay(seed: int) -> int:
    simulation = seeded(seed)
    steps: list[str] = []
    note = simulation.note

    def keep(what: str) -> None:
        note(what)
        steps.append(simulation.trace[-1])

    simulation.note = keep  # type: ignore[method-assign]
    try:
        simulation.run()
    except Violation as exc:
        print("\n".join(steps))
        print(str(exc).splitlines()[0])
        return 1
    print("\n".join(steps))
    print(f"seed {seed}: every invariant held ({simulation.shape})")
    return 0


def replay_agent(seed: int) -> int:
    """One agent seed: the violation with the steps that led to it, or that it held."""
    try:
        run_agent_seed(seed)
    except Violation as exc:
        print(exc)
        return 1
    print(f"agent seed {seed}: every invariant held")
    return 0


def replay_command(seed: int, agent: bool) -> str:
    return f"python -m benchmarks.sim_scheduler {'--agent ' if agent else ''}--replay {seed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10_000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    parser.add_argument("--replay", type=int, default=None, metavar="SEED")
    parser.add_argument("--agent", action="store_true", help="the agent's simulation")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay_agent(args.replay) if args.agent else replay(args.replay)
    started = time.perf_counter()
    done, failures = 0, []
    report_every = max(CHUNK // 10, args.seeds // 20)
    next_report = report_every
    with multiprocessing.Pool(args.jobs) as pool:
        for ran, failed in pool.imap_unordered(
            run_chunk, chunks(args.start, args.seeds, args.agent)
        ):
            done += ran
            for seed, line in failed:
                failures.append(seed)
                print(
                    f"FAILED seed {seed}: {line}\n  reproduce: {replay_command(seed, args.agent)}",
                    flush=True,
                )
            if done >= next_report:
                next_report += report_every
                elapsed = time.perf_counter() - started
                print(
                    f"{done} seeds, {len(failures)} failing, {done / elapsed:.1f} seeds/s",
                    flush=True,
                )
    elapsed = time.perf_counter() - started
    print(
        f"simulated {done} seeds ({args.start}..{args.start + done - 1}) in {elapsed:.0f} s "
        f"with {args.jobs} process(es): {done / elapsed:.1f} seeds/s; "
        f"{len(failures)} failing{': ' + ' '.join(map(str, sorted(failures))) if failures else ''}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
