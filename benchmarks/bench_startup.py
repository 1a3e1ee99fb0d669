"""Start-up of the command line: how long ``nodeagent --version``, ``--help``, ``signals``
and a few more take, each in a fresh interpreter, and what each of them imports; with
``--scheduler``, how long ``nodeagent scheduler`` takes to sync its informers with a real
API server.

    python -m benchmarks.bench_startup [--rounds 15] [--tree DIR ...]
    python -m benchmarks.bench_startup --scheduler [--nodes 5000] [--pods 10000]
        [--rounds 5] [--tree DIR ...] [--profile DIR]

Each ``--tree`` is a checkout (default: this one); its ``nodeagent`` package is copied and
compiled to bytecode first, as an installation has it (this machine sets
PYTHONDONTWRITEBYTECODE, which would otherwise make every run compile the package again).
Commands run as the ``nodeagent`` console script runs them (``from nodeagent.cli import
main``), the trees interleaved round by round so that load from other processes falls on
all of them alike. Printed per command and tree: median and fastest wall time, median CPU
time (user + system), the import time ``-X importtime`` reports (the sum of the top-level
imports, median of three runs; steadier than the wall time on a loaded machine), and which
of the heavy dependencies the command imported. ``python (floor)`` is the bare interpreter
with the same site packages, what no change to nodeagent can remove; ``libraries
(floor)`` adds the imports ``signals`` needs whatever nodeagent does (pydantic-settings
for the configuration, PyYAML, gRPC and protobuf for the container runtime).

``--scheduler``: one real etcd + kube-apiserver (tests/controlplane) holding
bench_vs_kube_scheduler's cluster: ``--nodes`` nodes, 1000 pods bound, and ``--pods``
pending pods of ``nodeagent-scheduler`` held by a scheduling gate (so the scheduler
reads, parses and queues every one of them, as at a real start, and binds none: the
cluster stays the same for every run). Each round starts ``nodeagent scheduler`` from
each tree in turn (the manifests' configuration, no leader election, qps = burst = 5000)
and stops it once it has logged "informers synced". Printed per tree: the wall time
from the process start to that line, and the scheduler process's CPU time (user +
system, its binding process not counted) by then: the CPU is what a loaded machine
does not change, the wall time is what an operator waits. The same for its "cache
synced" line, where a tree logs one: the nodes and the bound pods are in and the
scheduling loop starts, while the pending pods are still listed. ``--profile DIR``:
after the rounds, one more start per tree under py-spy (``DIR/tree<n>.txt``, collapsed
stacks of every thread, idle samples left out, for a flame graph or ``sort | uniq``),
until its first synced line; not timed.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS: dict[str, tuple[str, ...]] = {
    "python (floor)": (),
    "libraries (floor)": (),
    "--version": ("--version",),
    "--help": ("--help",),
    "signals": ("signals",),
    "signals --help": ("signals", "--help"),
    "run --help": ("run", "--help"),
    "config check": ("config", "check"),
    "schedule --help": ("schedule", "--help"),
}
HEAVY = ("kubernetes", "numpy", "grpc", "pydantic", "yaml", "nodeagent.scheduler")

CONSOLE_SCRIPT = "import sys\nfrom nodeagent.cli import main\nsys.exit(main())"
FLOORS = {
    "python (floor)": "import sys",
    # What `signals` cannot go below while its configuration is pydantic-settings and it
    # asks the runtime over gRPC.
    "libraries (floor)": "import pydantic_settings, yaml, grpc, google.protobuf",
}
# After the command: which heavy packages it imported, written where $MODULES_OUT says.
IMPORTS_SCRIPT = """
import atexit, json, os, sys
def _dump():
    with open(os.environ["MODULES_OUT"], "w") as out:
        json.dump(sorted(sys.modules), out)
atexit.register(_dump)
from nodeagent.cli import main
sys.exit(main())
"""


@dataclass
class Samples:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


TEST_ONLY = ("kubernetes_validate", "jsonschema")
"""Packages of the test extra that the ``kubernetes`` library imports when they are there
(``kubernetes.dynamic`` tries ``kubernetes_validate``, which imports jsonschema: 0.03-0.05
s of a start's CPU). An installation of nodeagent has none of the test extra (the image
installs ``.``), so a copy run from here does not see them either."""


def installed_copy(tree: Path, into: Path) -> Path:
    """``tree``'s package copied under ``into`` and compiled, as pip leaves it, with the
    test extra's packages out of its sight (:data:`TEST_ONLY`)."""
    shutil.copytree(tree / "nodeagent", into / "nodeagent", ignore=shutil.ignore_patterns("*.pyc"))
    if not compileall.compile_dir(into / "nodeagent", quiet=1):
        raise SystemExit(f"{tree}: the package does not compile")
    hidden = "".join(f"sys.modules[{name!r}] = None\n" for name in TEST_ONLY)
    (into / "sitecustomize.py").write_text(f"import sys\n\n{hidden}")
    return into


def environment(path: Path) -> dict[str, str]:
    """Run with ``cwd=path`` too: ``python -c`` puts the working directory first on the
    path, and a checkout there would shadow the compiled copy."""
    env = dict(os.environ, PYTHONPATH=str(path), COLUMNS="100")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def script(command: str) -> str:
    return FLOORS.get(command, CONSOLE_SCRIPT)


def timed(path: Path, command: str) -> tuple[float, float]:
    """Wall and CPU seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", script(command), *COMMANDS[command]],
        env=environment(path),
        cwd=path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        timeout=120,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def import_ms(path: Path, command: str) -> float:
    """The sum of the top-level imports' cumulative times, from ``-X importtime``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", script(command), *COMMANDS[command]],
        env=environment(path),
        cwd=path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        timeout=120,
    )
    total = 0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if cumulative.strip().isdigit() and not name.startswith("  "):
            total += int(cumulative)
    return total / 1000


def heavy_imports(path: Path, command: str, workdir: Path) -> list[str]:
    if command in FLOORS:
        return []
    out = workdir / "modules.json"
    subprocess.run(
        [sys.executable, "-c", IMPORTS_SCRIPT, *COMMANDS[command]],
        env={**environment(path), "MODULES_OUT": str(out)},
        cwd=path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        timeout=120,
    )
    modules = json.loads(out.read_text())
    return [h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in modules)]


HOLD_GATE = "bench.nodeagent.io/hold"


def scheduler_startup(trees: list[Path], paths: list[Path], args: argparse.Namespace) -> None:
    """The ``--scheduler`` measurement (module docstring)."""
    import yaml

    from benchmarks import bench_vs_kube_scheduler as side_by_side
    from tests.controlplane import cluster

    reason = cluster.unavailable()
    if reason is not None:
        raise SystemExit(reason)
    work = paths[0].parent
    document = yaml.safe_load((ROOT / "manifests" / "scheduler" / "config.yaml").read_text())
    document["leaderElection"] = {"leaderElect": False}
    document["clientConnection"] = {"qps": 5000, "burst": 5000}
    config = work / "scheduler.yaml"
    config.write_text(yaml.safe_dump(document))
    with cluster.running(
        work / "controlplane",
        controllers=("serviceaccount-controller",),
        apiserver_flags=("--disable-admission-plugins=TaintNodesByCondition",),
    ) as plane:
        side_by_side.populate(plane, args.nodes)
        plane.namespace(side_by_side.NAMESPACE)
        pending = side_by_side.pending_pods("basic", args.pods, "nodeagent")
        for pod in pending:
            pod["spec"]["schedulingGates"] = [{"name": HOLD_GATE}]
        side_by_side.create_all(plane.admin, "/api/v1/namespaces/{namespace}/pods", pending)
        print(f"{args.nodes} nodes, 1000 bound pods, {args.pods} gated pending pods")
        starts: dict[int, list[Start]] = {n: [] for n in range(len(paths))}
        for round_ in range(args.rounds):
            for n, path in enumerate(paths):
                start = _until_synced(path, plane.scheduler_kubeconfig, config, work)
                starts[n].append(start)
                load = os.getloadavg()[0]
                cache = ""
                if start.cache_wall is not None:
                    cache = f" (cache synced after {start.cache_wall:.2f} s, {start.cache_cpu:.2f})"
                print(
                    f"[{round_ + 1}] {str(trees[n])[-24:]:<24} synced after {start.wall:.2f} s,"
                    f" {start.cpu:.2f} s of CPU{cache} (load {load:.1f})",
                    flush=True,
                )
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            for n, path in enumerate(paths):
                out = args.profile / f"tree{n}.txt"
                _until_synced(path, plane.scheduler_kubeconfig, config, work, profile=out)
                print(f"{trees[n]}: py-spy profile to its first synced line in {out}")
    print(f"\n{args.rounds} rounds, trees interleaved; medians (fastest)")
    for n, tree in enumerate(trees):
        print(f"{str(tree)[-24:]:<24} {_medians(starts[n])}")


def _medians(starts: list[Start]) -> str:
    def span(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s ({min(values):.2f})"

    line = (
        f"to informers synced: {span([s.wall for s in starts])},"
        f" CPU {span([s.cpu for s in starts])}"
    )
    caches = [s for s in starts if s.cache_wall is not None and s.cache_cpu is not None]
    if caches:
        walls = [s.cache_wall for s in caches if s.cache_wall is not None]
        cpus = [s.cache_cpu for s in caches if s.cache_cpu is not None]
        line += f"; to cache synced: {span(walls)}, CPU {span(cpus)}"
    return line


CACHE_SYNCED = b"cache synced"
"""Logged when the nodes and the bound pods are in and the scheduling loop starts (a
tree from before the pending pods had an informer of their own does not log it)."""
INFORMERS_SYNCED = b"informers synced"


@dataclass
class Start:
    """One start: wall and CPU seconds from the process start to each line."""

    wall: float
    cpu: float
    cache_wall: float | None = None
    cache_cpu: float | None = None


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _until_synced(
    path: Path, kubeconfig: Path, config: Path, work: Path, profile: Path | None = None
) -> Start:
    """One ``nodeagent scheduler`` from its start to the "informers synced" line of its
    log, and to its "cache synced" line; ``profile``: run it under py-spy until the
    first of them, writing there (the times are then py-spy's process's, not the
    scheduler's)."""
    log = work / "scheduler.log"
    env = {**environment(path), "KUBERNETES_SERVICE_HOST": ""}
    argv = [sys.executable, "-m", "nodeagent", "scheduler", f"--kubeconfig={kubeconfig}"]
    argv += [f"--config={config}", "--metrics-address=127.0.0.1:0", "--metrics-auth=none"]
    if profile is not None:
        spy = ["py-spy", "record", "--rate", "500", "--format", "raw", "--threads"]
        argv = [*spy, "--output", str(profile), "--", *argv]
    started = time.perf_counter()
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=path)
    cache: tuple[float, float] | None = None
    try:
        while True:
            text = log.read_bytes()
            if cache is None and CACHE_SYNCED in text:
                cache = (time.perf_counter() - started, _cpu_seconds(process.pid))
                if profile is not None:
                    break
            if INFORMERS_SYNCED in text:
                break
            if process.poll() is not None:
                raise SystemExit(f"nodeagent scheduler exited: {log.read_text()[-2000:]}")
            if time.perf_counter() - started > 600:
                raise SystemExit("nodeagent scheduler: informers not synced after 600 s")
            time.sleep(0.01)
        start = Start(time.perf_counter() - started, _cpu_seconds(process.pid))
        if cache is not None:
            start.cache_wall, start.cache_cpu = cache
    finally:
        if profile is not None:  # py-spy writes its profile when the scheduler ends
            subprocess.run(["pkill", "-INT", "-P", str(process.pid)], check=False)
        else:
            process.terminate()
        process.wait(30)
    return start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="a checkout to measure (repeat to compare; default: this one)",
    )
    parser.add_argument("--commands", nargs="*", choices=list(COMMANDS), default=list(COMMANDS))
    parser.add_argument(
        "--scheduler", action="store_true", help="nodeagent scheduler's start on a real apiserver"
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument(
        "--profile", type=Path, help="with --scheduler: also profile one start per tree here"
    )
    args = parser.parse_args()
    trees: list[Path] = args.tree or [ROOT]
    with tempfile.TemporaryDirectory(prefix="nodeagent-startup-") as work:
        workdir = Path(work)
        paths = [
            installed_copy(tree.resolve(), workdir / f"tree{n}") for n, tree in enumerate(trees)
        ]
        if args.scheduler:
            scheduler_startup(trees, paths, args)
            return
        samples = {(c, n): Samples() for c in args.commands for n in range(len(paths))}
        for path in paths:  # warm the page cache
            for command in args.commands:
                timed(path, command)
        for _ in range(args.rounds):
            for command in args.commands:
                for n, path in enumerate(paths):
                    wall, cpu = timed(path, command)
                    samples[command, n].wall.append(wall)
                    samples[command, n].cpu.append(cpu)
        print(f"{args.rounds} rounds, trees interleaved; times in ms")
        print(
            f"{'command':<17} {'tree':<24} {'wall median':>11} {'fastest':>8} {'CPU':>6}"
            f" {'imports':>8}  heavy imports"
        )
        for command in args.commands:
            for n, path in enumerate(paths):
                s = samples[command, n]
                heavy = heavy_imports(path, command, workdir)
                imports = statistics.median(import_ms(path, command) for _ in range(3))
                print(
                    f"{command:<17} {str(trees[n])[-24:]:<24}"
                    f" {statistics.median(s.wall) * 1e3:>11.0f} {min(s.wall) * 1e3:>8.0f}"
                    f" {statistics.median(s.cpu) * 1e3:>6.0f}"
                    f" {imports:>8.0f}  {', '.join(heavy) or '-'}"
                )


if __name__ == "__main__":
    main()
