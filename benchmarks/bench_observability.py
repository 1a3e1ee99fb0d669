"""What observability costs the agent, and what the agent costs the node.

Two measurements, printed as figures and ratios (docs/operations.md records them):

1. **Per-cycle cost of metrics.** ``AgentMetrics.observe_collection`` +
   ``observe_decision`` (a reference swap; families are built only when scraped)
   against the eager alternative that sets every labelled gauge each cycle, and the
   cost of one scrape (rendering the registry).
2. **Footprint.** A child process that imports nodeagent (with the Kubernetes client,
   as the agent will), collects every signal of this machine with the real
   :class:`~nodeagent.signals.collector.SignalCollector` every ``--interval`` seconds,
   publishes it through ``AgentMetrics`` and serves ``/metrics`` and the probes, while
   this process scrapes it every ``--scrape-interval`` seconds and samples the child's
   RSS and CPU from /proc. The DaemonSet's requests and limits come from these figures
   (until ``nodeagent run`` exists; then measure that instead).

    python -m benchmarks.bench_observability                 # both, 60 s footprint
    python -m benchmarks.bench_observability --duration 20   # shorter footprint run
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from nodeagent import model
from nodeagent.agent import metrics


def _observations(time_s: float) -> model.NodeObservations:
    signals: dict[model.Signal, model.Observation] = {
        signal: model.SignalValue(available=int(1e9 + time_s), capacity=int(4e9))
        for signal in model.Signal
    }
    line = model.PsiLine(1.0, 2.0, 3.0, int(time_s * 1000))
    psi = {
        f"{scope}{resource}": model.PsiStats(some=line, full=line)
        for scope in ("", "node/", "kubepods/")
        for resource in ("memory", "io", "cpu")
    }
    return model.NodeObservations(time=time_s, signals=signals, psi=psi)


def _eager_cycle(gauges: dict[str, Gauge], observations: model.NodeObservations) -> None:
    """What a naive exporter does each cycle: set every labelled gauge."""
    for signal, observed in observations.signals.items():
        if isinstance(observed, model.SignalValue):
            gauges["available"].labels(signal.value).set(observed.available)
            gauges["capacity"].labels(signal.value).set(observed.capacity)
    for key, stats in observations.psi.items():
        for kind, line in (("some", stats.some), ("full", stats.full)):
            if line is None:
                continue
            for window, percent in (
                ("10s", line.avg10),
                ("60s", line.avg60),
                ("300s", line.avg300),
            ):
                gauges["psi"].labels(key, kind, window).set(percent / 100)


def per_cycle_cost(cycles: int = 20_000) -> None:
    agent = metrics.AgentMetrics()
    decision = model.Decision(
        time=0.0,
        thresholds_met=(),
        pressure={},
        conditions=(),
        taints=(),
        evictions=(),
    )
    batch = [_observations(float(i)) for i in range(100)]
    start = time.perf_counter()
    for i in range(cycles):
        agent.observe_collection(batch[i % 100])
        agent.observe_decision(decision, cycle_seconds=0.001)
    lazy = (time.perf_counter() - start) / cycles

    registry = CollectorRegistry()
    gauges = {
        "available": Gauge("x_available", "x", ["signal"], registry=registry),
        "capacity": Gauge("x_capacity", "x", ["signal"], registry=registry),
        "psi": Gauge("x_psi", "x", ["scope", "kind", "window"], registry=registry),
    }
    start = time.perf_counter()
    for i in range(cycles):
        _eager_cycle(gauges, batch[i % 100])
    eager = (time.perf_counter() - start) / cycles

    scrapes = 500
    start = time.perf_counter()
    for _ in range(scrapes):
        size = len(generate_latest(agent.registry))
    scrape = (time.perf_counter() - start) / scrapes

    print("== per-cycle cost of metrics (9 signals, 9 PSI files)")
    print(f"observe_collection + observe_decision: {lazy * 1e6:8.2f} us/cycle")
    print(f"eager gauges (the alternative):        {eager * 1e6:8.2f} us/cycle")
    print(f"ratio eager / ours:                    {eager / lazy:8.1f} x")
    print(f"one scrape (render {size} bytes):      {scrape * 1e3:8.2f} ms")
    # A 1 s loop scraped every 15 s: 15 cycles and one render per scrape.
    ours, eager_total = (15 * cost + scrape for cost in (lazy, eager))
    print(f"15 cycles + 1 scrape: ours {ours * 1e3:.2f} ms, eager {eager_total * 1e3:.2f} ms")


def _child(duration: float, interval: float) -> None:
    """The measured process: collection + metrics server, like the agent's loop."""
    from nodeagent.agent.config import load_config
    from nodeagent.base.clock import RealClock
    from nodeagent.kube import http  # noqa: F401  (the agent imports the API client)
    from nodeagent.serving.endpoints import ObservabilityServer
    from nodeagent.serving.health import Health
    from nodeagent.serving.settings import ListenAddress
    from nodeagent.signals.collector import SignalCollector

    config = load_config()
    clock = RealClock()
    agent = metrics.AgentMetrics()
    health = Health(clock=clock, liveness_timeout=30.0, requires_api=False)
    with (
        SignalCollector.from_settings(config) as collector,
        ObservabilityServer(
            ListenAddress("127.0.0.1", 0), registry=agent.registry, health=health
        ) as server,
    ):
        print(server.port, flush=True)
        end = clock.now() + duration
        while clock.now() < end:
            started = clock.now()
            observations = collector.collect(started)
            agent.observe_collection(observations)
            health.beat(clock.now())
            clock.sleep(max(0.0, interval - (clock.now() - started)))


def _sample(pid: int) -> tuple[float, int, int]:
    """CPU seconds (user + system), RSS and peak RSS (bytes) of ``pid``. psutil reads the
    first two; the peak (``VmHWM``) it does not report on Linux, so that one line comes
    from ``/proc/<pid>/status``."""
    process = psutil.Process(pid)
    with process.oneshot():
        times = process.cpu_times()
        rss = process.memory_info().rss
    status = Path(f"/proc/{pid}/status").read_text()
    peak_kib = int(status.partition("VmHWM:")[2].split()[0])
    return times.user + times.system, rss, peak_kib * 1024


MEMORY_CGROUP_ROOT = Path("/sys/fs/cgroup/memory")


@contextmanager
def fake_node(pods: int) -> Iterator[dict[str, str]]:
    """A node-sized workload for the collector: ``pods`` real (empty) pod memory
    cgroups under a node cgroup of our own, and their log and emptyDir directories.
    Yields the agent's environment; removes everything afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="nodeagent-bench-"))
    node = MEMORY_CGROUP_ROOT / f"nodeagent-bench-{os.getpid()}"
    created: list[Path] = []
    use_cgroups = os.geteuid() == 0 and MEMORY_CGROUP_ROOT.is_dir()
    environ = {
        "NODEAGENT_KUBELET_ROOT_DIR": str(workdir / "kubelet"),
        "NODEAGENT_NODEFS_PATH": str(workdir / "kubelet"),
        "NODEAGENT_IMAGEFS_PATH": str(workdir),
        "NODEAGENT_POD_LOGS_PATH": str(workdir / "logs"),
    }
    try:
        for i in range(pods):
            uid = str(uuid.uuid4())
            volume = workdir / "kubelet/pods" / uid / "volumes/kubernetes.io~empty-dir/data"
            volume.mkdir(parents=True)
            (volume / "file").write_bytes(b"x" * 4096)
            logs = workdir / "logs" / f"default_pod-{i}_{uid}" / "app"
            logs.mkdir(parents=True)
            (logs / "0.log").write_bytes(b"line\n" * 100)
            if use_cgroups:
                qos = node / "kubepods" / ("burstable", "besteffort")[i % 2]
                for directory in (node, node / "kubepods", qos, qos / f"pod{uid}"):
                    if not directory.exists():
                        directory.mkdir()
                        created.append(directory)
        if created:
            environ["NODEAGENT_NODE_CGROUP"] = "/" + node.name
        yield environ
    finally:
        for directory in reversed(created):
            directory.rmdir()
        shutil.rmtree(workdir, ignore_errors=True)


def footprint(duration: float, interval: float, scrape_interval: float, pods: int) -> None:
    with fake_node(pods) as environ:
        _footprint(duration, interval, scrape_interval, {**os.environ, **environ})
    print(f"workload:             {pods} pods (cgroups, logs, emptyDirs) on this machine")


def _footprint(
    duration: float, interval: float, scrape_interval: float, environ: dict[str, str]
) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_observability",
            "--child",
            f"--duration={duration}",
            f"--interval={interval}",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=environ,
    )
    assert child.stdout is not None
    port = int(child.stdout.readline())
    url = f"http://127.0.0.1:{port}/metrics"
    cpu_start, _, _ = _sample(child.pid)
    start = time.monotonic()
    per_second: list[float] = []
    rss: list[int] = []
    last_cpu, last_time, next_scrape = cpu_start, start, start
    peak = 0
    while child.poll() is None:
        now = time.monotonic()
        if now >= next_scrape:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    response.read()
            except OSError:
                break  # the child finished its run and closed the server
            next_scrape += scrape_interval
        time.sleep(1.0)
        try:
            cpu, resident, peak = _sample(child.pid)
        except (FileNotFoundError, ProcessLookupError, KeyError):
            break
        now = time.monotonic()
        per_second.append((cpu - last_cpu) / (now - last_time))
        rss.append(resident)
        last_cpu, last_time = cpu, now
    child.wait()
    elapsed = last_time - start
    steady = rss[len(rss) // 2 :]
    mib = 1024 * 1024
    print(f"== footprint: collect every {interval:g} s, scrape every {scrape_interval:g} s")
    print(f"run:                  {elapsed:.0f} s after start-up (imports included in RSS)")
    print(f"CPU average:          {1000 * (last_cpu - cpu_start) / elapsed:.1f} millicores")
    print(f"CPU p99 of 1 s steps: {1000 * statistics.quantiles(per_second, n=100)[98]:.1f} mc")
    print(f"RSS steady (median):  {statistics.median(steady) / mib:.1f} MiB")
    print(f"RSS growth 2nd half:  {(steady[-1] - steady[0]) / mib:+.2f} MiB")
    print(f"RSS peak (VmHWM):     {peak / mib:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--scrape-interval", type=float, default=1.0)
    parser.add_argument("--pods", type=int, default=110, help="pods on the simulated node")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-footprint", action="store_true")
    args = parser.parse_args()
    if args.child:
        _child(args.duration, args.interval)
        return
    per_cycle_cost()
    if not args.skip_footprint:
        footprint(args.duration, args.interval, args.scrape_interval, args.pods)


if __name__ == "__main__":
    main()
