"""Detection on a real cgroup v2 kernel: crossing -> decision, and the agent's CPU.

    sudo python -m benchmarks.bench_detection_v2                  # 20 runs a scope; ~8 min
    sudo python -m benchmarks.bench_detection_v2 --runs 30 --baseline-runs 10
    python -m benchmarks.bench_detection_v2 --guest kvm           # Debian's kernel under KVM

Issue 14's measurement. Boots a cgroup v2 guest (tests/uml/machine.py; ``--guest``:
``uml``, user-mode-linux, Linux 6.1 as a process, one CPU; ``kvm``, Debian's kernel under
qemu with KVM, two CPUs; ``tcg``, the same under qemu's emulation) with ``--mem-mib``
of RAM (1 GiB) and runs :mod:`tests.uml.inside_detection` in it: a real ``nodeagent
run --standalone`` guards ``memory.available`` at the v2 root (capacity MemTotal,
``memory.available<160Mi``) and at a node cgroup with ``memory.max`` 512 MiB
(``memory.available<64Mi``); a ballast holds memory 24 MiB above the threshold and a hog
crosses it, each run at a random phase. Latency is the agent's ``decidedMonotonic`` minus
the hog's CLOCK_MONOTONIC reading of its crossing. CPU is ``utime + stime`` of the agent
over ``--cpu-window`` seconds at rest (before the ballast) and near the threshold (with
it).

Configurations per scope, side by side in the same boot (``--configurations``): the
defaults (``adaptive``: the adaptive memory poll), ``poll``: ``--adaptive-memory-poll=false``
(the 1 s node poll alone), the baseline of the ratios, and ``floor-10ms``: the adaptive
poll with ``--memory-poll-floor=10ms`` (its floor, 30 ms by default, bounds the p99: a
crossing lands at a random phase of the poll). ``--before DIR`` adds ``before``: the
defaults run from another checkout of the project (``git archive REF | tar -x -C DIR``),
so a change is measured against the code it replaces in the same boot. Prints the guest's boot
time, then p50/p99/max, what caught each crossing, and CPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tests.uml import machine

SCOPES = ("root", "node")
CONFIGURATIONS = {
    "adaptive": [],
    "poll": ["--adaptive-memory-poll=false"],
    "floor-10ms": ["--memory-poll-floor=10ms"],
}
BASELINE = "poll"
"""The configuration run ``--baseline-runs`` times; every other ``--runs`` times."""


BEFORE = "before"
"""The configuration run from ``--before DIR``: the defaults, the other checkout's code."""


def inside_command(
    runs: int,
    baseline_runs: int,
    cpu_window: float,
    scopes: list[str],
    labels: list[str],
    *,
    before: Path | None = None,
) -> list[str]:
    steps = []
    for scope in scopes:
        for label in labels:
            agent_args = CONFIGURATIONS.get(label, [])
            count = baseline_runs if label == BASELINE else runs
            args = [
                "-m",
                "tests.uml.inside_detection",
                f"--scope={scope}",
                f"--runs={count}",
                f"--label={label}",
                f"--cpu-window={cpu_window}",
                *(f"--agent-arg={arg}" for arg in agent_args),
            ]
            command = " ".join([sys.executable, *args])
            # `python -m` puts the working directory first on the path: the agent and
            # its measurement come from the checkout the step runs in.
            where = before if label == BEFORE and before is not None else Path.cwd()
            steps.append(f"(cd {where} && {command})")
    return ["sh", "-c", " && ".join(steps)]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def _ratio(numerator: dict[str, Any], denominator: dict[str, Any], q: float) -> float:
    """Of two configurations' latency percentiles."""
    return percentile(numerator["latencies_s"], q) / percentile(denominator["latencies_s"], q)


def report(found: dict[tuple[str, str], dict[str, Any]]) -> None:
    print(
        f"{'scope':<6}{'configuration':<15}{'runs':>5}{'p50':>10}{'p99':>10}{'max':>10}"
        f"{'CPU rest':>10}{'CPU near':>10}  caught by"
    )
    for (scope, label), result in found.items():
        latencies = result["latencies_s"]
        caught = collections.Counter(result["caught_by"])
        moved = result.get("moved_while_waiting", 0)
        print(
            f"{scope:<6}{label:<15}{len(latencies):>5}"
            f"{percentile(latencies, 50) * 1e3:>8.1f}ms"
            f"{percentile(latencies, 99) * 1e3:>8.1f}ms"
            f"{max(latencies) * 1e3:>8.1f}ms"
            f"{result['cpu_rest'] * 100:>9.2f}%"
            f"{result['cpu_near'] * 100:>9.2f}%  "
            + ", ".join(f"{kind} {count}" for kind, count in caught.most_common())
            + (f" ({moved} runs again: crossed while the hog waited)" if moved else "")
        )
    for scope in SCOPES:
        adaptive = found.get((scope, "adaptive"))
        if adaptive is None:
            continue
        poll = found.get((scope, BASELINE))
        if poll is not None:
            p50, p99 = (_ratio(poll, adaptive, q) for q in (50, 99))
            print(f"{scope}: poll / adaptive latency p50 {p50:.0f}x, p99 {p99:.0f}x")
        floor = found.get((scope, "floor-10ms"))
        if floor is not None:
            p50, p99 = (_ratio(adaptive, floor, q) for q in (50, 99))
            rest, near = (floor[key] / adaptive[key] for key in ("cpu_rest", "cpu_near"))
            print(
                f"{scope}: adaptive / floor-10ms latency p50 {p50:.2f}x, p99 {p99:.2f}x; "
                f"CPU floor-10ms / adaptive at rest {rest:.2f}x, near {near:.2f}x"
            )
        before = found.get((scope, BEFORE))
        if before is not None:
            now_latency, then_latency = adaptive["latencies_s"], before["latencies_s"]
            ratios = [percentile(then_latency, q) / percentile(now_latency, q) for q in (50, 99)]
            print(
                f"{scope}: before / now latency p50 {ratios[0]:.2f}x, p99 {ratios[1]:.2f}x; "
                f"CPU at rest {before['cpu_rest'] / adaptive['cpu_rest']:.2f}x, "
                f"near {before['cpu_near'] / adaptive['cpu_near']:.2f}x"
            )
        print(
            f"{scope}: headroom at rest {adaptive['available_at_rest'] >> 20} MiB, near "
            f"{adaptive['available_near'] >> 20} MiB (available; threshold below it)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench_detection_v2", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--baseline-runs", type=int, default=10)
    parser.add_argument("--cpu-window", type=float, default=20.0)
    parser.add_argument("--guest", choices=list(machine.Kernel), default=machine.Kernel.UML)
    parser.add_argument("--mem-mib", type=int, default=1024)
    parser.add_argument("--scopes", default=",".join(SCOPES), help="root, node")
    parser.add_argument(
        "--configurations", default=",".join(CONFIGURATIONS), help=", ".join(CONFIGURATIONS)
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="another checkout of the project, run as the 'before' configuration",
    )
    args = parser.parse_args()
    scopes, labels = args.scopes.split(","), args.configurations.split(",")
    if args.before is not None:
        labels.append(BEFORE)
    kernel = machine.Kernel(args.guest)
    reason = machine.missing(kernel)
    if reason is not None:
        raise SystemExit(f"{kernel} cannot be tried: {reason}")
    try:
        guest = machine.start(kernel, mem_mib=args.mem_mib)
    except machine.BootFailed as failure:
        raise SystemExit(str(failure)) from None
    with guest:
        print(f"{guest}: booted in {guest.boot_s:.1f} s", file=sys.stderr)
        run = guest.run(
            inside_command(
                args.runs, args.baseline_runs, args.cpu_window, scopes, labels, before=args.before
            ),
            timeout_s=3600,
        )
    print(f"one command, {run.seconds:.0f} s", file=sys.stderr)
    found = {}
    for scope in scopes:
        for label in labels:
            path = run.results / f"detection-{scope}-{label}.json"
            if path.is_file():
                found[scope, label] = json.loads(path.read_text())
    if len(found) < len(scopes) * len(labels):
        print(run.output[-4000:], guest.console()[-2000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"the guest did not finish (status {run.status})")
    report(found)


if __name__ == "__main__":
    main()
