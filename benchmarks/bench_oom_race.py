"""The race users care about: does the agent evict a pod ramping toward the node's limit
before the kernel's OOM killer kills it?

    sudo python -m benchmarks.bench_oom_race                       # cgroup v1 here; 20 runs
    sudo python -m benchmarks.bench_oom_race --runs 5 --thresholds 100Mi --rates 256Mi,1Gi
    sudo python -m benchmarks.bench_oom_race --guest kvm --mem-mib 3072 --node-limit 1Gi \
        --configurations defaults,kubelet --thresholds 100Mi     # cgroup v2, in a guest
    sudo python -m benchmarks.bench_oom_race --kubelet --runs 10 --rates 256Mi,1Gi,max \
        --thresholds 100Mi,500Mi                                   # the real kubelet
    sudo python -m benchmarks.bench_oom_race --kubelet --page-cache 1600 --runs 10 \
        --rates 256Mi,1Gi --thresholds 500Mi                       # beside a hot page cache

Issue 22's measurement (root needed). The node is a real memory cgroup with a limit
(``--node-limit``: 2 GiB on the host's cgroup v1; in a cgroup v2 guest, ``--guest``
``uml``, ``kvm`` or ``tcg`` of tests/uml/machine.py, a ``memory.max``; each
configuration has its own node, so the guest's ``--mem-mib`` must hold them all). Under
it, as the kubelet lays them out: ``system`` (a ballast process holding the node's base
usage, as a system daemon would; its ``oom_score_adj`` is left as it is, the pod's 1000
makes the pod the OOM killer's victim whatever their sizes) and
``kubepods/besteffort/pod<uid>`` for each run's pod. ``memory.available`` of the node
cgroup is guarded with a hard threshold (``--thresholds``: 500Mi, 100Mi, 1Gi).

Each run's pod is a process in its pod cgroup (``oom_score_adj`` 1000: BestEffort, as
the kubelet sets it) that starts :data:`LEAD` above the crossing and allocates and
touches memory at a fixed rate (``--rates``: 256 MiB/s to 8 GiB/s; ``madvise
(MADV_POPULATE_WRITE)`` on a schedule checked every 0.5 ms, at most 1 MiB a call, reading
the node's usage after each) until it is killed. It reports the
CLOCK_MONOTONIC instant its node's usage first reached ``limit - threshold`` (the
crossing) and the rate it achieved up to then: a machine cannot fault memory in faster
than it can, and the tables say so.

The agents run as deployed: ``nodeagent run`` processes in cluster mode against the fake
API server (in this process, over HTTP on loopback), one per configuration, each with its
own Node and node cgroup (the same limit and ballast), so a crossing wakes only the agent
whose race it is. A stand-in kubelet (:class:`StandInKubelet`) watches pods through the API;
when a pod's eviction arrives (its ``deletionTimestamp`` appears) it SIGKILLs the pod's
processes (a hard threshold's kill; the kubelet's 1 s grace is not waited for: the pod
would be OOM-killed within it), then marks the pod Failed and deletes it.

A run ends one of two ways: **prevented** (the stand-in kubelet killed the pod, and the
pod cgroup's ``oom_kill`` count, from ``memory.oom_control`` on v1 or ``memory.events``
on v2, did not move) or **OOM-killed** (it did; the pod's exit status is SIGKILL either
way). Crossing-to-kill is the stand-in's CLOCK_MONOTONIC after its kill minus the pod's
crossing; it is split at the start of the agent's cycle and its decision (from the
agent's decision line, ``monotonic`` and ``decidedMonotonic``) and at the Eviction's
arrival at the API server. A pod the stand-in kills before its ramp began was evicted on
stats older than the pod (``kubelet-summary``: a sample of the previous run's pressure,
the innocent-pod eviction of kubernetes#41032); such a run is counted apart, neither
prevented nor OOM-killed, and left out of the OOM-free rate.

Configurations, side by side in the same run (runs interleaved, in random order):

- ``kubelet``: the same agent set to the kubelet's cadence: every signal read every 10 s
  (``pollInterval``, ``filesystemPollInterval``: the eviction manager's
  ``evictionMonitoringPeriod``), no kernel notification (no memcg threshold, the kubelet's
  ``kernelMemcgNotification`` default; no adaptive memory poll, no PSI, no
  ``memory.events``), one pod per cycle (``evictionStrategy: kubelet``). Its stats are
  read fresh at each cycle, as today's kubelet gets the node's: its eviction manager asks
  the Summary API for updated stats (``updateStats``), which has cAdvisor re-sample the
  root cgroup on demand. This is the baseline of the ratios;
- ``kubelet-summary``: the same, deciding on stats up to 10 s old
  (``statsHousekeepingInterval: 10s``: every signal from a sample a housekeeping thread
  takes every 10 s at a random phase, as cAdvisor's housekeeping samples the per-pod
  stats the kubelet also reads from the summary, and as the issue describes the node's).
  A lower bound for a kubelet: today's kubelet is the ``kubelet`` row for *when* it
  acts, and this one's staleness only for the per-pod stats it ranks by;
- ``defaults``: nodeagent as shipped;
- ``relief``: the defaults with ``evictionStrategy: relief``.

Prints, per threshold, configuration and rate: runs, OOM kills, prevented, the achieved
ramp rate, crossing-to-kill p50/p99 (prevented runs) and crossing-to-Eviction p50/p99;
then the OOM-free ramp rate of each configuration (the highest rate at which at least
19 of 20 runs, i.e. 95 %, ended without a kernel OOM kill, with every slower rate OOM-free
too) and its ratio to the kubelet emulation's.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import mmap
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_eviction_latency import StampingServer
from nodeagent.k8s import quantities as units
from nodeagent.kube import http
from tests.doubles import kube as fake
from tests.fakeapi import fixtures, objects

Mi = 1 << 20
Gi = 1 << 30
RATES = ("256Mi", "512Mi", "1Gi", "2Gi", "4Gi", "8Gi")
THRESHOLDS = ("500Mi", "100Mi", "1Gi")
LEAD = 512 * Mi
"""How far above the crossing each pod starts its ramp."""
STEP = 1 * Mi
"""The most a pod allocates between two readings of its node's usage: the crossing is
known to within 1 MiB (0.12 ms at 8 GiB/s)."""
BALLAST_MARGIN = 64 * Mi
"""Room left for the pod's interpreter below its start."""
OOM_FREE_SHARE = 0.95
"""19 of 20 runs without a kernel OOM kill."""
RUN_TIMEOUT = 60.0

KUBELET_CADENCE = [
    "--poll-interval=10s",
    "--filesystem-poll-interval=10s",
    "--kernel-memcg-notification=false",
    "--adaptive-memory-poll=false",
    "--memory-events-notification=false",
    "--psi-triggers=",
    "--eviction-strategy=kubelet",
]
KUBELET_HOUSEKEEPING = "10s"
"""cAdvisor's housekeeping interval under the kubelet (15 s at most with dynamic
housekeeping): how old the ``kubelet-summary`` configuration's stats get."""

CONFIGURATIONS: dict[str, list[str]] = {
    "kubelet": KUBELET_CADENCE,
    "kubelet-summary": [
        *KUBELET_CADENCE,
        f"--stats-housekeeping-interval={KUBELET_HOUSEKEEPING}",
    ],
    "defaults": [],
    "relief": ["--eviction-strategy=relief"],
}
BASELINE = "kubelet"

_POD = r"""
import json, mmap, os, sys, time
spec = json.loads(sys.argv[1])
with open("/proc/self/oom_score_adj", "w") as adj:
    adj.write("1000")
with open(spec["procs"], "w") as procs:
    procs.write("0")
usage_fd = os.open(spec["usage"], os.O_RDONLY)
def usage():
    return int(os.pread(usage_fd, 64, 0))
POPULATE = 23  # MADV_POPULATE_WRITE
PAGE = mmap.PAGESIZE
crossing = spec["crossing"]
rate = spec["rate"]
region = mmap.mmap(-1, spec["size"])
start = max(crossing - spec["lead"] - usage(), 0) // PAGE * PAGE
offset = 0
while offset < start:
    step = min(64 << 20, start - offset)
    region.madvise(POPULATE, offset, step)
    offset += step
print(json.dumps({"ready": True, "usage": usage()}), flush=True)
sys.stdin.readline()
time.sleep(spec["delay"])
began = time.monotonic()
base = offset
tick = 0.0005
crossed = False
while True:
    now = time.monotonic()
    target = base + int(rate * (now - began)) // PAGE * PAGE
    if target > offset:
        # at most a step between two reads of the usage: a pod that fell behind its
        # schedule must not cross inside one long call, unseen
        target = min(target, offset + spec["step"], spec["size"])
        region.madvise(POPULATE, offset, target - offset)
        offset = target
    else:
        time.sleep(tick)
    if not crossed:
        used = usage()
        if used >= crossing:
            crossed = True
            at = time.monotonic()
            print(json.dumps({"crossed_at": at, "usage": used,
                              "rate": (offset - base) / max(at - began, 1e-9)}), flush=True)
"""


_BALLAST = r"""
import mmap, os, sys
with open(sys.argv[1], "w") as procs:
    procs.write("0")
size = int(sys.argv[2])
region = mmap.mmap(-1, size)
for offset in range(0, size, 64 << 20):
    region.madvise(23, offset, min(64 << 20, size - offset))  # MADV_POPULATE_WRITE
print("held", flush=True)
sys.stdin.read()
"""


def slug(label: str) -> str:
    """A configuration's label as a Node and cgroup name can carry it."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def parse_quantity(text: str) -> int:
    return units.parse_quantity(text).value


# --- the node's cgroups ---------------------------------------------------------------------
class NodeCgroup:
    """The node: a memory cgroup with a limit, a ballast, and the kubelet's pod layout."""

    def __init__(self, limit: int, *, version: int, label: str) -> None:
        self.version = version
        self.limit = limit
        self.name = f"nodeagent-oom-{os.getpid()}-{label}"
        root = Path("/sys/fs/cgroup/memory" if version == 1 else "/sys/fs/cgroup")
        self.path = root / self.name
        self.path.mkdir()
        if version == 2:
            _enable_memory(root)
            (self.path / "memory.max").write_text(str(limit))
            _enable_memory(self.path)
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
        self.besteffort = self.path / "kubepods" / "besteffort"
        self.besteffort.mkdir(parents=True)
        if version == 2:  # down to the pods: each pod cgroup has its own memory.events
            _enable_memory(self.path / "kubepods")
            _enable_memory(self.besteffort)
        (self.path / "system").mkdir()
        self.ballast: subprocess.Popen[str] | None = None

    @property
    def usage_file(self) -> Path:
        return self.path / ("memory.usage_in_bytes" if self.version == 1 else "memory.current")

    def usage(self) -> int:
        return int(self.usage_file.read_text())

    def oom_kills(self, cgroup: Path) -> int:
        """The kernel's OOM kills of processes in ``cgroup`` (a pod's). cgroup v1 counts a
        kill in the victim's own memcg only (``memory.oom_control``), not in the node
        cgroup whose limit was hit; v2's ``memory.events`` counts it up the tree too."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in (cgroup / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        raise RuntimeError(f"no oom_kill in {cgroup / name}")

    def pod_cgroup(self, uid: str) -> Path:
        path = self.besteffort / f"pod{uid}"
        path.mkdir()
        return path

    def hold(self, size: int) -> None:
        """The node's base usage: a ballast in ``system`` (the pods' ``oom_score_adj`` of
        1000 makes them the OOM killer's victims before it; lowering its own to -1000
        would need CAP_SYS_RESOURCE, which this machine does not grant)."""
        self.ballast = subprocess.Popen(
            [
                sys.executable,
                "-S",
                "-c",
                _BALLAST,
                str(self.path / "system" / "cgroup.procs"),
                str(size // mmap.PAGESIZE * mmap.PAGESIZE),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.ballast.stdout is not None
        if self.ballast.stdout.readline().strip() != "held":
            raise RuntimeError("the ballast failed")

    def remove(self) -> None:
        if self.ballast is not None:
            self.ballast.kill()
            self.ballast.wait()
        for directory, _, _ in sorted(os.walk(self.path), key=lambda e: -len(e[0])):
            for _ in range(100):
                try:
                    for pid in Path(directory, "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)
                    os.rmdir(directory)
                    break
                except OSError:
                    time.sleep(0.02)


def _enable_memory(cgroup: Path) -> None:
    with contextlib.suppress(OSError):
        (cgroup / "cgroup.subtree_control").write_text("+memory")


def cgroup_version() -> int:
    return 2 if Path("/sys/fs/cgroup/cgroup.controllers").is_file() else 1


# --- the API and the stand-in kubelet ----------------------------------------------------------
@dataclass
class StandInKubelet:
    """Watches the pods through the API; kills an evicted pod's processes at once, then
    marks it Failed and deletes it, as the kubelet does for a hard eviction."""

    kube: http.HTTPKubeClient
    cgroups: dict[str, tuple[Path, Path]] = field(default_factory=dict)
    """Pod name to its cgroup and its node's usage file."""
    killed: dict[str, float] = field(default_factory=dict)
    """Pod name to the monotonic time its processes were SIGKILLed."""
    usage_at_kill: dict[str, int] = field(default_factory=dict)
    """Pod name to its node's usage read just before the kill: whether the pod had
    crossed when it was killed, even if it had no time to say so."""
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, name="stand-in-kubelet", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listed = self.kube.list_pods()
                stream = self.kube.watch_pods(
                    resource_version=listed.resource_version, timeout_seconds=60
                )
                for event in stream:
                    if self._stop.is_set():
                        break
                    meta = event.object.get("metadata") or {}
                    if meta.get("deletionTimestamp") and meta.get("name") not in self.killed:
                        self._kill(str(meta["namespace"]), str(meta["name"]))
            except Exception:  # a dropped watch: list and watch again
                time.sleep(0.05)

    def _kill(self, namespace: str, name: str) -> None:
        cgroup, usage_file = self.cgroups.get(name, (None, None))
        if cgroup is not None and usage_file is not None:
            with contextlib.suppress(OSError, ValueError):
                self.usage_at_kill[name] = int(usage_file.read_text())
            with contextlib.suppress(OSError):
                for pid in (cgroup / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
        self.killed[name] = time.monotonic()
        with contextlib.suppress(Exception):
            self.kube.patch_pod_status(
                namespace, name, {"status": {"phase": "Failed", "reason": "Evicted"}}
            )
        with contextlib.suppress(Exception):
            self.kube.delete_pod(namespace, name, grace_period_seconds=0)


# --- the agents -------------------------------------------------------------------------------
class Agent:
    """``nodeagent run`` for one configuration, its own Node, logging to a file."""

    def __init__(
        self, label: str, kubeconfig: Path, node: NodeCgroup, threshold: str, scratch: Path
    ) -> None:
        self.label = label
        configuration, _, checkout = label.partition("@")
        self.node_name = f"node-{slug(label)}"
        self.log = scratch / f"agent-{slug(label)}.log"
        args = [
            sys.executable,
            "-m",
            "nodeagent",
            "run",
            f"--kubeconfig={kubeconfig}",
            f"--node-name={self.node_name}",
            f"--node-cgroup=/{node.name}",
            f"--eviction-hard=memory.available<{threshold}",
            f"--nodefs-path={scratch}",
            f"--imagefs-path={scratch}",
            "--metrics-address=127.0.0.1:0",
            "--node-reclaim=false",
            # runs follow each other within seconds: the cap would measure itself
            "--max-evictions-per-interval=1000",
            "--log-format=json",
            *CONFIGURATIONS[configuration],
        ]
        # ``<configuration>@<checkout>``: the agent from another checkout (a before/after);
        # ``-m`` puts the working directory first on the path, so it runs from there
        env = {**os.environ, "PYTHONPATH": checkout} if checkout else None
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=out, env=env, cwd=checkout or None
            )
        self._read = 0
        self._decisions: dict[str, dict[str, Any]] = {}

    def wait_started(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"agent {self.label} exited: {self.log.read_text()[-2000:]}")
            if "nodeagent.decision" in self.log.read_text():
                return
            time.sleep(0.1)
        raise RuntimeError(f"agent {self.label} did not start")

    def decision_evicting(self, pod: str) -> dict[str, Any] | None:
        """The agent's decision line that chose ``pod`` (``namespace/name``), if any."""
        with self.log.open() as lines:
            lines.seek(self._read)
            for line in lines:
                if not line.endswith("\n"):
                    break
                self._read += len(line.encode())
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    for eviction in record.get("evict", ()):
                        self._decisions.setdefault(eviction["pod"], record)
        return self._decisions.get(pod)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _wait_for_pod_watches(api: StampingServer, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        watches = [r for r in api.requests_to("GET", r"/pods$") if r.param("watch")]
        if len(watches) >= count:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the agents' pod watches did not open within {timeout:.0f} s")


# --- one run ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    label: str
    threshold: str
    rate: str
    oom_killed: bool
    prevented: bool
    crossed: bool
    achieved_rate: float
    to_eviction: float | None
    to_kill: float | None
    to_cycle: float | None = None
    """Crossing to the start of the agent's cycle that decided the eviction."""
    to_decision: float | None = None
    """Crossing to the engine's decision."""
    trigger: str = ""
    """What started that cycle (``memcg-threshold:...``, ``poll:node``)."""
    crossed_at_kill: bool | None = None
    before_ramp: bool = False
    """The stand-in killed the pod before its ramp began: evicted on stats from before
    it started (a stale sample of the previous run's pressure). Neither prevented nor
    OOM-killed, and left out of the OOM-free rate."""
    """Whether the node's usage was past the crossing when the stand-in killed the pod
    (None: not killed by it). A pod preempted between its step and its reading can be
    killed before it reports its crossing; one killed below the crossing was evicted
    before its ramp reached the threshold, which would be a false win."""


def one_run(
    api: StampingServer,
    kubelet: StandInKubelet,
    node: NodeCgroup,
    *,
    agent: Agent,
    threshold: str,
    rate: str,
    number: int,
) -> Run:
    name = f"{slug(agent.label)}-{rate.lower()}-{number}"
    uid = str(uuid.uuid4())
    cgroup = node.pod_cgroup(uid)
    kubelet.cgroups[name] = (cgroup, node.usage_file)
    api.cluster.create("pods", objects.pod(name, node_name=agent.node_name, uid=uid))
    crossing = node.limit - parse_quantity(threshold)
    spec = {
        "procs": str(cgroup / "cgroup.procs"),
        "usage": str(node.usage_file),
        "crossing": crossing,
        "lead": LEAD,
        "rate": parse_quantity(rate),
        "size": node.limit + 64 * Mi,
        "step": STEP,
        "delay": random.uniform(0, 0.5),
    }
    kills_before = node.oom_kills(cgroup)
    pod = subprocess.Popen(
        [sys.executable, "-S", "-c", _POD, json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert pod.stdout is not None and pod.stdin is not None
    report: dict[str, Any] = {}
    try:
        ready = pod.stdout.readline()
        if not ready and name not in kubelet.killed:
            raise RuntimeError(f"pod {name} died before its ramp (status {pod.wait()})")
        if ready:
            time.sleep(0.2)  # the agents' pod watches deliver the pod
            pod.stdin.write("go\n")
            pod.stdin.flush()
            line = pod.stdout.readline()
            if line:
                report = json.loads(line)
        pod.wait(timeout=RUN_TIMEOUT)
    finally:
        if pod.poll() is None:
            pod.kill()
            pod.wait()
    oom = node.oom_kills(cgroup) > kills_before
    killed_at = kubelet.killed.get(name)
    usage_at_kill = kubelet.usage_at_kill.get(name)
    crossed_at = report.get("crossed_at")
    arrival = api.eviction_arrivals.get(name)
    with contextlib.suppress(Exception):
        api.cluster.delete("pods", "default", name, grace_period_seconds=0)
    for _ in range(100):
        try:
            cgroup.rmdir()
            break
        except OSError:
            time.sleep(0.02)
    decision = agent.decision_evicting(f"default/{name}")
    if decision is not None and crossed_at is not None:
        cycle, decided = (
            decision["monotonic"] - crossed_at,
            decision["decidedMonotonic"] - crossed_at,
        )
    else:
        cycle = decided = None
    return Run(
        agent.label,
        threshold,
        rate,
        oom_killed=oom,
        prevented=bool(ready) and not oom and killed_at is not None,
        before_ramp=not ready,
        crossed=crossed_at is not None,
        achieved_rate=float(report.get("rate", 0.0)),
        to_eviction=None if arrival is None or crossed_at is None else arrival - crossed_at,
        to_kill=None if killed_at is None or crossed_at is None or oom else killed_at - crossed_at,
        to_cycle=cycle,
        to_decision=decided,
        trigger=str(decision.get("trigger", "")).split(":")[0] if decision else "",
        crossed_at_kill=None if usage_at_kill is None else usage_at_kill >= crossing,
    )


def race(
    thresholds: Sequence[str],
    rates: Sequence[str],
    labels: Sequence[str],
    runs: int,
    node_limit: int,
) -> list[Run]:
    results: list[Run] = []
    version = cgroup_version()
    for threshold in thresholds:
        with contextlib.ExitStack() as stack:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="oom-race-")))
            cluster = fake.FakeCluster(termination_delay=3600.0)
            for label in labels:
                cluster.create("nodes", objects.node(f"node-{slug(label)}"))
            api = StampingServer(cluster)
            api.start()
            stack.callback(api.close)
            kubeconfig = fixtures.write_kubeconfig(scratch / "kubeconfig", api.url, token="x")
            kube = http.HTTPKubeClient.connect(http.load_configuration(kubeconfig))
            kubelet = StandInKubelet(kube)
            kubelet.start()
            stack.callback(kubelet.stop)
            nodes, agents = {}, {}
            for label in labels:
                node = NodeCgroup(node_limit, version=version, label=slug(label))
                stack.callback(node.remove)
                node.hold(node_limit - parse_quantity(threshold) - LEAD - BALLAST_MARGIN)
                nodes[label] = node
                agents[label] = Agent(label, kubeconfig, node, threshold, scratch)
                stack.callback(agents[label].stop)
            for agent in agents.values():
                agent.wait_started(timeout=120)
            # A pod the agent has not seen is no candidate: the first run must not start
            # before every agent's pod watch is open (then each new pod reaches it at once).
            _wait_for_pod_watches(api, len(agents), timeout=120)
            started = time.monotonic()
            for number in range(runs):
                for rate in rates:
                    for label in random.sample(list(labels), len(labels)):
                        results.append(
                            one_run(
                                api,
                                kubelet,
                                nodes[label],
                                agent=agents[label],
                                threshold=threshold,
                                rate=rate,
                                number=number,
                            )
                        )
            print(
                f"{threshold}: {runs * len(rates) * len(labels)} runs in "
                f"{time.monotonic() - started:.0f}s",
                file=sys.stderr,
            )
    return results


# --- the report -------------------------------------------------------------------------------
def _ms(values: Sequence[float], q: float) -> str:
    return f"{np.percentile(np.asarray(values), q) * 1e3:.0f}" if values else "-"


def oom_free_rate(runs: Sequence[Run], rates: Sequence[str]) -> str | None:
    """The highest rate at which, as at every slower one, at least 95 % of the runs
    ended without a kernel OOM kill."""
    best = None
    for rate in sorted(rates, key=parse_quantity):
        these = [r for r in runs if r.rate == rate and not r.before_ramp]
        if not these or sum(not r.oom_killed for r in these) < OOM_FREE_SHARE * len(these):
            break
        best = rate
    return best


def report(results: Sequence[Run], rates: Sequence[str], labels: Sequence[str]) -> None:
    header = (
        f"{'threshold':<10}{'configuration':<16}{'rate':>7}{'achieved':>10}{'runs':>6}"
        f"{'OOM':>5}{'prevented':>10}{'kill p50':>10}{'kill p99':>10}{'evict p50':>10}"
        f"{'evict p99':>10}"
    )
    print(header)
    thresholds = list(dict.fromkeys(r.threshold for r in results))
    for threshold in thresholds:
        for label in labels:
            for rate in rates:
                these = [
                    r for r in results if (r.threshold, r.label, r.rate) == (threshold, label, rate)
                ]
                if not these:
                    continue
                kills = [r.to_kill for r in these if r.to_kill is not None]
                evictions = [r.to_eviction for r in these if r.to_eviction is not None]
                achieved = [r.achieved_rate for r in these if r.crossed]
                early = sum(r.prevented and r.crossed_at_kill is False for r in these)
                unseen = sum(r.prevented and not r.crossed for r in these) - early
                stale = sum(r.before_ramp for r in these)
                print(
                    f"{threshold:<10}{label:<16}{rate + '/s':>7}"
                    f"{(np.median(achieved) / Mi if achieved else 0):>7.0f}M/s"
                    f"{len(these):>6}{sum(r.oom_killed for r in these):>5}"
                    f"{sum(r.prevented for r in these):>10}"
                    f"{_ms(kills, 50):>8}ms{_ms(kills, 99):>8}ms"
                    f"{_ms(evictions, 50):>8}ms{_ms(evictions, 99):>8}ms"
                    + (f"  ({unseen} killed before reporting the crossing)" if unseen else "")
                    + (f"  ({early} EVICTED BEFORE THE CROSSING)" if early else "")
                    + (f"  ({stale} evicted before the ramp, on stale stats)" if stale else "")
                )
    print()
    for threshold in thresholds:
        free = {
            label: oom_free_rate(
                [r for r in results if (r.threshold, r.label) == (threshold, label)], rates
            )
            for label in labels
        }
        base = free.get(BASELINE)
        for label in labels:
            found = free[label]
            ratio = ""
            if not label.startswith(BASELINE) and found is not None:
                ratio = (
                    f" ({parse_quantity(found) / parse_quantity(base):.0f}x the kubelet emulation)"
                    if base is not None
                    else " (the kubelet emulation is OOM-free at no rate measured)"
                )
            print(
                f"OOM-free ramp rate, memory.available<{threshold}, {label}: "
                f"{(found + '/s') if found else 'none of the rates measured'}{ratio}"
            )


def breakdown(results: Sequence[Run], labels: Sequence[str]) -> None:
    """Where the time from crossing to kill goes, over the runs that were prevented."""
    print()
    print(
        f"{'threshold':<10}{'configuration':<16}{'runs':>6}  p50 / p99 (ms) from the crossing to: "
        "the cycle's start, the decision, the Eviction's arrival, the kill; caught by"
    )
    for threshold in dict.fromkeys(r.threshold for r in results):
        for label in labels:
            these = [
                r
                for r in results
                if (r.threshold, r.label) == (threshold, label)
                and r.prevented
                and r.to_decision is not None
            ]
            if not these:
                continue
            stages = [
                [r.to_cycle for r in these if r.to_cycle is not None],
                [r.to_decision for r in these if r.to_decision is not None],
                [r.to_eviction for r in these if r.to_eviction is not None],
                [r.to_kill for r in these if r.to_kill is not None],
            ]
            caught = collections.Counter(r.trigger for r in these)
            print(
                f"{threshold:<10}{label:<16}{len(these):>6}  "
                + "  ".join(f"{_ms(stage, 50)} / {_ms(stage, 99)}" for stage in stages)
                + "  "
                + ", ".join(f"{kind} {count}" for kind, count in caught.most_common())
            )


def projection(results: Sequence[Run], rates: Sequence[str], labels: Sequence[str]) -> None:
    """For each rate asked, the share of prevented runs whose crossing-to-kill fits the
    time that rate leaves (threshold / rate): what the race would give at rates this
    machine cannot ramp at, assuming the agent's latency does not depend on the rate."""
    print()
    print("crossing-to-kill within the time a ramp leaves (threshold / rate), all rates' runs:")
    for threshold in dict.fromkeys(r.threshold for r in results):
        for label in labels:
            kills = [
                r.to_kill
                for r in results
                if (r.threshold, r.label) == (threshold, label) and r.to_kill is not None
            ]
            runs = sum(1 for r in results if (r.threshold, r.label) == (threshold, label))
            if not runs:
                continue
            parts = []
            for rate in rates:
                budget = parse_quantity(threshold) / parse_quantity(rate)
                parts.append(
                    f"{rate}/s ({budget * 1e3:.0f} ms) {sum(k <= budget for k in kills)}/{runs}"
                )
            print(f"  {threshold:<7}{label:<16}" + ", ".join(parts))


def results_to_json(results: Sequence[Run]) -> list[dict[str, Any]]:
    return [r.__dict__ for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench_oom_race", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rates", default=",".join(RATES))
    parser.add_argument("--thresholds", default=",".join(THRESHOLDS))
    parser.add_argument("--configurations", default=",".join(CONFIGURATIONS))
    parser.add_argument("--node-limit", default="2Gi", help="the node cgroup's memory limit")
    parser.add_argument("--json", type=Path, help="also write every run to this file")
    parser.add_argument(
        "--report-from", type=Path, help="print the report of an earlier --json file, run nothing"
    )
    parser.add_argument(
        "--fresh-agents",
        action="store_true",
        help="start the agents anew for every run: each race is the first after a start",
    )
    parser.add_argument(
        "--guest", choices=("uml", "kvm", "tcg"), help="run in a cgroup v2 guest of this kernel"
    )
    parser.add_argument("--mem-mib", type=int, default=3072, help="the guest's RAM (--guest)")
    parser.add_argument(
        "--kubelet",
        action="store_true",
        help="race the real kubelet on a real node (benchmarks/oom_race_kubelet.py)",
    )
    parser.add_argument(
        "--allocatable", default="2Gi", help="the node's kubepods limit (--kubelet)"
    )
    parser.add_argument(
        "--page-cache",
        type=int,
        default=0,
        metavar="MIB",
        help="--kubelet: a pod keeps MIB MiB of file in the active page cache beside every"
        " ramp; adds the kubelet+agent-reclaimable configuration (activePageCache)",
    )
    args = parser.parse_args()
    if args.kubelet:
        from benchmarks import oom_race_kubelet

        oom_race_kubelet.main(args)
        return
    rates, labels = args.rates.split(","), args.configurations.split(",")
    if args.report_from is not None:
        results = [Run(**run) for run in json.loads(args.report_from.read_text())]
        report(results, rates, labels)
        breakdown(results, labels)
        projection(results, rates, labels)
        return
    if os.geteuid() != 0:
        raise SystemExit("needs root: it creates memory cgroups")
    if args.guest is not None:
        results = in_guest(args)
    else:
        results = []
        per_start, starts = (1, args.runs) if args.fresh_agents else (args.runs, 1)
        for threshold in args.thresholds.split(","):
            for _ in range(starts):
                results += race(
                    [threshold], rates, labels, per_start, parse_quantity(args.node_limit)
                )
            if args.json is not None:  # each threshold's runs kept as soon as they are done
                args.json.write_text(json.dumps(results_to_json(results), indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(results_to_json(results), indent=1))
    report(results, rates, labels)
    breakdown(results, labels)
    projection(results, rates, labels)


def in_guest(args: argparse.Namespace) -> list[Run]:
    """The same race inside a cgroup v2 guest (tests/uml/machine.py), results back as JSON."""
    from tests.uml import machine

    kernel = machine.Kernel(args.guest)
    reason = machine.missing(kernel)
    if reason is not None:
        raise SystemExit(f"{kernel} cannot be tried: {reason}")
    inside = [
        sys.executable,
        "-m",
        "benchmarks.bench_oom_race",
        f"--runs={args.runs}",
        f"--rates={args.rates}",
        f"--thresholds={args.thresholds}",
        f"--configurations={args.configurations}",
        f"--node-limit={args.node_limit}",
        "--json=$GUEST_RESULTS/oom-race.json",
        *(["--fresh-agents"] if args.fresh_agents else []),
    ]
    try:
        guest = machine.start(kernel, mem_mib=args.mem_mib)
    except machine.BootFailed as failure:
        raise SystemExit(str(failure)) from None
    with guest:
        print(f"{guest}: booted in {guest.boot_s:.1f} s", file=sys.stderr)
        run = guest.run(["sh", "-c", " ".join(inside)], timeout_s=4 * 3600)
    path = run.results / "oom-race.json"
    if not path.is_file():
        print(run.output[-6000:], guest.console()[-2000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"the guest did not finish (status {run.status})")
    print(run.output[-3000:], file=sys.stderr)
    return [Run(**run) for run in json.loads(path.read_text())]


if __name__ == "__main__":
    main()
