"""The OOM race against the real kubelet: ``bench_oom_race --kubelet``.

    sudo python -m benchmarks.bench_oom_race --kubelet --runs 10 \\
        --rates 256Mi,1Gi,max --thresholds 100Mi,500Mi

A real node (tests/node: the kubelet built from the pinned k8s.io/kubernetes, containerd,
runc, a CNI bridge, node allocatable enforced so the kubepods cgroup has a memory limit,
``--allocatable``, 2 GiB by default) registered with a real control plane
(tests/controlplane). Each run is a real BestEffort pod, started by the kubelet, whose
one container (``workload ramp``, tests/node/workload.c) first populates memory up to
:data:`LEAD` below the crossing, then, once the pod runs and the benchmark says go,
allocates and touches memory at the run's rate until something kills it, reading the
kubepods cgroup's usage after every step of at most 1 MiB: the crossing is the CLOCK_MONOTONIC
instant that usage first reached ``limit - threshold`` (the kubelet's
``allocatableMemory.available`` is the limit minus the kubepods working set, which
usage bounds from above: the ramp's crossing is never late).

Per threshold (the kubelet's ``evictionHard: memory.available``, which the kubelet also
enforces on allocatable memory, since ``enforceNodeAllocatable`` holds ``pods``), two
configurations, runs interleaved at random:

- ``kubelet``: the kubelet alone, its eviction manager at its own cadence (every 10 s,
  ``evictionMonitoringPeriod``), no memcg notification (``kernelMemcgNotification``'s
  default);
- ``kubelet+agent``: the same kubelet, and ``nodeagent run`` beside it as a host process
  (tests/node/agent.py: the shipped RBAC and node-confinement policy) with the same hard
  threshold and its defaults otherwise. Its Eviction goes through the real API, and the
  real kubelet stops the pod.

A run ends when the ramp's process is gone (polled every 2 ms). It was **OOM-killed** if
the kernel logged an OOM kill of that process (``/dev/kmsg``: ``oom-kill:... oom_memcg=``
the kubepods cgroup, or the container's status says ``OOMKilled``); it was **evicted**
otherwise, by the kubelet (the pod's status: phase Failed, reason Evicted) or through the
Eviction API (the agent's: the pod got a ``deletionTimestamp``). Crossing-to-kill is the
disappearance minus the crossing. A pod killed before its ramp began is counted apart
(``before ramp``: evicted on stats from the previous run's pressure).

**Beside a hot page cache** (``--page-cache MIB``): a pod (``workload cache``) keeps a
MIB MiB file on the machine's disk in the active page cache of kubepods, re-reading it
every second, through every run; each ramp's crossing is then measured on what the
kernel cannot reclaim (usage less inactive and clean active page cache), since usage
is full of cache before the ramp begins. The kubelet keeps its default ``100Mi`` and the
agent guards at the threshold; per run the cache pod's fate is recorded beside the
ramp's (``kept``, or evicted by the kubelet or the agent; an evicted one is replaced,
its file removed, before the next run). Three configurations:

- ``kubelet+agent``: the agent with its defaults (the kubelet's accounting: active
  page cache is used memory);
- ``kubelet+agent-reclaimable``: the same with ``activePageCache: reclaimable`` and a
  memory PSI soft threshold (``memory.pressure.some.avg10>20`` for 10 s);
- ``agent-reclaimable``: that agent, and the kubelet's memory threshold off
  (``memory.available: 0%``): at its ``100Mi`` the kubelet still counts the cache as
  used, and once a ramp has filled kubepods to its limit its count is about the inactive
  cache alone, so a cycle of its eviction manager that lands then evicts the cache pod.

The kubelet alone at the threshold is not raced beside the cache: it evicts the cache
pod, and then keeps MemoryPressure (refusing every BestEffort pod, the ramps included)
for as long as the evicted pod's page cache stays charged to kubepods
(``tests/node/test_page_cache.py`` shows it).

``NODEAGENT_RACE_WORKDIR=/path`` keeps the node's directory (the kubelet's, containerd's
and the agent's logs) instead of a temporary one.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from nodeagent.k8s import quantities as units

Mi = 1 << 20
Gi = 1 << 30
LEAD = 512 * Mi
"""How far below the crossing each ramp starts."""
MAX_RATE = 64 * Gi
"""``max``: a rate no machine reaches; the ramp then goes as fast as this one faults
memory in (1 MiB a step), and the table shows what it achieved."""
RUN_TIMEOUT = 60.0
CONFIGURATIONS = ("kubelet", "kubelet+agent")
PAGE_CACHE_CONFIGURATIONS = ("kubelet+agent", "kubelet+agent-reclaimable", "agent-reclaimable")
RECLAIMABLE_FLAGS = (
    "--active-page-cache=reclaimable",
    "--eviction-soft=memory.pressure.some.avg10>20",
    "--eviction-soft-grace-period=memory.pressure.some.avg10=10s",
)
"""The opt-in of ``kubelet+agent-reclaimable`` (docs/eviction.md, "Active page cache")."""


def parse_rate(text: str) -> int:
    return MAX_RATE if text == "max" else units.parse_quantity(text).value


@dataclass(frozen=True)
class Run:
    configuration: str
    threshold: str
    rate: str
    outcome: str
    """``oom``, ``kubelet-eviction``, ``api-eviction``, ``before-ramp`` or ``timeout``."""
    achieved_rate: float
    to_kill: float | None
    """Crossing to the ramp's process gone (seconds)."""
    to_eviction: float | None
    """Crossing to the eviction decision: the agent's decision, or the kubelet's log line
    saying it is evicting."""
    to_kubelet_kill: float | None = None
    """Crossing to the kubelet starting to stop the container (its log)."""
    to_signal: float | None = None
    """Crossing to the ramp receiving SIGTERM (its handler's stamp): from then on it
    allocates nothing; its exit, which frees the memory, comes after."""
    cache: str | None = None
    """``--page-cache``: the cache pod after the run: ``kept``, ``kubelet-eviction`` or
    ``api-eviction``."""


class KernelLog:
    """OOM kills from ``/dev/kmsg`` as they come: the task's pid and its memcgs."""

    PATTERN = re.compile(r"oom-kill:.*oom_memcg=([^,]*),task_memcg=([^,]*),task=([^,]*),pid=(\d+)")
    KILLED = re.compile(r"Memory cgroup out of memory: Killed process (\d+)")
    """The one line the kernel prints for every OOM kill: ``oom-kill:`` comes with the
    report that is rate-limited (mm/oom_kill.c's ``oom_rs``: 10 every 5 s), and in a
    run of OOM kills most have none."""

    def __init__(self) -> None:
        self.kills: dict[int, tuple[str, str]] = {}
        self._fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self._fd, 0, os.SEEK_END)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kmsg", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                record = os.read(self._fd, 8192).decode(errors="replace")
            except BlockingIOError:
                time.sleep(0.01)
                continue
            except OSError:  # EPIPE: records overwritten while we read; go on
                continue
            found = self.PATTERN.search(record)
            if found:
                memcg, task_memcg, _, pid = found.groups()
                self.kills[int(pid)] = (memcg, task_memcg)
            elif killed := self.KILLED.search(record):
                self.kills.setdefault(int(killed.group(1)), ("", ""))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1)
        os.close(self._fd)


KLOG = re.compile(r"[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d\.\d+)")


def klog_wall(line: str) -> float | None:
    """The wall-clock seconds of a klog line (klog stamps local time, to the
    microsecond, with no year)."""
    stamp = KLOG.match(line)
    if stamp is None:
        return None
    month, day, hour, minute = (int(group) for group in stamp.groups()[:4])
    year = time.localtime().tm_year
    return time.mktime((year, month, day, hour, minute, 0, 0, 0, -1)) + float(stamp.group(5))


def kubelet_lines(log: Path, since: int, marker: str) -> Iterator[tuple[float, str]]:
    """(wall-clock seconds, line) of the kubelet's log lines holding ``marker``, logged
    after byte ``since``."""
    with log.open("rb") as lines:
        lines.seek(since)
        for raw in lines:
            line = raw.decode(errors="replace")
            if marker in line and (wall := klog_wall(line)) is not None:
                yield wall, line


def kubelet_evictions(log: Path, since: int) -> list[tuple[float, str]]:
    """(wall-clock seconds, pod) of the kubelet's evictions: the pod its eviction manager
    says it evicted (``pod is evicted successfully``), dated by the ``pods ranked for
    eviction`` line before it (the decision; eviction_manager.go's synchronize). The
    first pod ranked is not always the victim: a critical pod ranked first is skipped,
    and a pod cAdvisor has no stats for yet is ranked last."""
    found = []
    decided: float | None = None
    for wall, line in kubelet_lines(log, since, "Eviction manager: po"):
        if "pods ranked for eviction" in line:
            decided = wall
        elif "pod is evicted successfully" in line:
            pod = re.search(r'pod="([^"]+)"', line)
            if pod is not None:
                found.append((decided if decided is not None else wall, pod.group(1)))
    return found


def kubelet_kill(log: Path, since: int, pod: str) -> float | None:
    """When the kubelet started stopping ``pod``'s container (``Killing container with a
    grace period``, kuberuntime_container.go), wall-clock seconds."""
    for wall, line in kubelet_lines(log, since, "Killing container with a grace period"):
        if f'pod="{pod}"' in line:
            return wall
    return None


def agent_decisions(log: Path) -> dict[str, dict[str, Any]]:
    """The agent's decision lines (JSON logs) that chose each pod (``namespace/name``)."""
    decisions: dict[str, dict[str, Any]] = {}
    if not log.exists():
        return decisions
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            for eviction in record.get("evict", ()):
                decisions.setdefault(str(eviction["pod"]), record)
    return decisions


def agent_evictions(log: Path) -> set[str]:
    """The pods (``namespace/name``) the agent sent an Eviction (or, past a blocking
    budget, a delete) for: its actuation log lines. A decision that named a pod while an
    earlier eviction was still in flight sent nothing (the agent waits for the cleanup,
    as the kubelet does)."""
    sent: set[str] = set()
    if not log.exists():
        return sent
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("logger") == "nodeagent.actuation" and record.get("outcome") in (
                "evicted",
                "deleted",
            ):
                sent.add(str(record["pod"]))
    return sent


def vmstat_oom_kills() -> int:
    """The machine's OOM kills so far (``oom_kill`` in /proc/vmstat)."""
    for line in Path("/proc/vmstat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def _ramp_pid(cgroup: Path, deadline: float) -> int | None:
    """The ramp's host pid: the process under the pod's cgroup running ``ramp``."""
    while time.monotonic() < deadline:
        for procs in cgroup.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(OSError):
                        if b"ramp" in Path(f"/proc/{pid}/cmdline").read_bytes():
                            return int(pid)
        time.sleep(0.01)
    return None


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


class Race:
    """The node, its results directory, and the runs."""

    def __init__(self, node: Any, kernel: KernelLog) -> None:
        from tests.node import pods

        self.node = node
        self.plane = node.plane
        self.kernel = kernel
        self.pods = pods
        self.results = node.base / "results"
        self.results.mkdir(exist_ok=True)
        self.namespace = self.plane.namespace(f"race-{uuid.uuid4().hex[:6]}")
        self.wall_offset = time.time() - time.monotonic()
        self.agent_log: Path | None = None

    def close(self) -> None:
        """Delete the race's namespace (its pods are gone after every run)."""
        self.plane.admin.request("DELETE", f"/api/v1/namespaces/{self.namespace}")

    def cache_pod(self, mib: int) -> str:
        """A running pod keeping a ``mib`` MiB file in kubepods' active page cache, made
        if none is: its name. Returns once most of the file is active."""
        for pod in self.plane.admin.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]:
            name = pod["metadata"]["name"]
            running = pod["status"].get("phase") == "Running"
            deleted = pod["metadata"].get("deletionTimestamp")
            if name.startswith("cache-") and running and not deleted:
                return str(name)
        self.wait_admitting()
        name = f"cache-{uuid.uuid4().hex[:6]}"
        data = self.node.base / name
        data.mkdir()
        before = self.active_file()
        self.pods.create(
            self.plane,
            self.pods.workload(
                name,
                self.namespace,
                ["cache", "/data/file", str(mib)],
                node=self.node.name,
                volumes=[{"name": "data", "hostPath": {"path": str(data)}}],
                mounts=[{"name": "data", "mountPath": "/data"}],
            ),
        )
        self.pods.wait_running(self.plane, self.namespace, name, timeout=120)
        deadline = time.monotonic() + 120
        while self.active_file() - before < mib * Mi * 3 // 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        return name

    def cache_fate(self, name: str, since: int) -> str:
        """``kept``, or who evicted the cache pod ``name``; an evicted one is deleted and
        its file removed (its page cache stays charged to kubepods until then)."""
        pod = self.pods.get(self.plane, self.namespace, name)
        status = (pod or {}).get("status") or {}
        key = f"{self.namespace}/{name}"
        kubelet_log = self.node.logs / "kubelet.log"
        if any(victim == key for _, victim in kubelet_evictions(kubelet_log, since)) or (
            status.get("reason") == "Evicted"
        ):
            fate = "kubelet-eviction"
        elif self.agent_log is not None and key in agent_evictions(self.agent_log):
            fate = "api-eviction"
        elif pod is not None and not pod["metadata"].get("deletionTimestamp"):
            return "kept"
        else:
            fate = "gone"
        self.plane.admin.request(
            "DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{name}", {"gracePeriodSeconds": 0}
        )
        with contextlib.suppress(RuntimeError):
            self.pods.wait_gone(self.plane, self.namespace, name, timeout=60)
        (self.node.base / name / "file").unlink(missing_ok=True)
        return fate

    def active_file(self) -> int:
        for line in (self.node.kubepods / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "total_active_file":
                return int(value)
        return 0

    def baseline(self) -> int:
        return int((self.node.kubepods / "memory.usage_in_bytes").read_text())

    def unreclaimable(self) -> int:
        """The kubepods usage less what the kernel can drop without I/O (inactive and
        clean active page cache): what ``activePageCache: reclaimable`` counts as used."""
        stat: dict[str, int] = {}
        for line in (self.node.kubepods / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            stat[key] = int(value)
        active = stat["total_active_file"] - stat["total_dirty"] - stat["total_writeback"]
        return self.baseline() - stat["total_inactive_file"] - max(active, 0)

    def settle(self, floor: int) -> None:
        """Wait until the kubepods usage is back near ``floor`` (the last pod's memory
        freed, its cgroup gone)."""
        deadline = time.monotonic() + 60
        while self.baseline() > floor + 64 * Mi and time.monotonic() < deadline:
            time.sleep(0.05)

    def wait_admitting(self) -> None:
        """Wait until the kubelet has posted its MemoryPressure condition False since
        this call: while the condition is True its admission refuses BestEffort pods
        (Failed, reason Evicted, "The node had condition: [MemoryPressure]"), for
        evictionPressureTransitionPeriod after its eviction manager last saw pressure,
        and the API's copy lags the kubelet's by up to its status update period."""
        beat = self.node.condition("Ready").get("lastHeartbeatTime")
        deadline = time.monotonic() + 120
        while (
            self.node.condition("MemoryPressure").get("status") != "False"
            or self.node.condition("Ready").get("lastHeartbeatTime") == beat
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the kubelet's MemoryPressure stayed True for 120 s")
            time.sleep(0.2)

    def one(
        self,
        configuration: str,
        threshold: str,
        rate: str,
        floor: int,
        *,
        page_cache: bool = False,
    ) -> Run:
        """One ramp. ``page_cache``: the crossing is measured on what the kernel cannot
        reclaim (usage less inactive and clean active page cache), as
        ``activePageCache: reclaimable`` counts it, for a node whose page cache fills
        kubepods' usage (its usage would cross before the ramp began)."""
        self.wait_admitting()
        name = f"ramp-{uuid.uuid4().hex[:8]}"
        limit = self.node.allocatable_memory
        crossing = limit - units.parse_quantity(threshold).value
        used = self.unreclaimable() if page_cache else self.baseline()
        start = max(crossing - LEAD - used, 0)
        pod = self.pods.workload(
            name,
            self.namespace,
            [
                "ramp",
                f"/node-memory/{'memory.stat' if page_cache else 'memory.usage_in_bytes'}",
                str(start),
                str(crossing),
                str(parse_rate(rate)),
                f"/results/{name}.json",
                f"/results/{name}.go",
            ],
            node=self.node.name,
            volumes=[
                self.pods.usage_volume(self.node),
                {"name": "results", "hostPath": {"path": str(self.results)}},
            ],
            mounts=[self.pods.USAGE_MOUNT, {"name": "results", "mountPath": "/results"}],
            grace=1,
        )
        pod["spec"]["restartPolicy"] = "Never"
        kubelet_log = self.node.logs / "kubelet.log"
        log_from = kubelet_log.stat().st_size
        created = self.pods.create(self.plane, pod)
        uid = created["metadata"]["uid"]
        outcome, killed_at, ramp_began = "timeout", None, None
        try:
            running = self.pods.wait_running(self.plane, self.namespace, name, timeout=60)
            cgroup = self.pods.cgroup(self.node, running)
            pid = _ramp_pid(cgroup, time.monotonic() + 10)
            if pid is not None:
                time.sleep(random.uniform(0.2, 0.7))  # the ramp populated; a random phase
                oom_kills = vmstat_oom_kills()
                (self.results / f"{name}.go").touch()
                ramp_began = time.monotonic()
                deadline = ramp_began + RUN_TIMEOUT
                while not _gone(pid) and time.monotonic() < deadline:
                    time.sleep(0.002)
                if _gone(pid):
                    killed_at = time.monotonic()
                    outcome = self._outcome(name, pid, kubelet_log, log_from, oom_kills)
            else:
                outcome = "before-ramp"
        except RuntimeError:  # the pod ended before it ran: evicted or refused early
            outcome = "before-ramp"
        report: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            report = json.loads((self.results / f"{name}.json").read_text())
        crossed = report.get("crossed_at")
        signalled = None
        with contextlib.suppress(OSError, ValueError):
            signalled = float((self.results / f"{name}.json.stop").read_text())
        to_eviction = self._to_eviction(name, crossed, kubelet_log, log_from)
        stopping = kubelet_kill(kubelet_log, log_from, f"{self.namespace}/{name}")
        to_kubelet_kill = (
            None if stopping is None or crossed is None else stopping - self.wall_offset - crossed
        )
        self.plane.admin.request(
            "DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{name}", {"gracePeriodSeconds": 0}
        )
        with contextlib.suppress(RuntimeError):
            self.pods.wait_gone(self.plane, self.namespace, name, timeout=60)
        deadline = time.monotonic() + 30
        while any(self.node.kubepods.rglob(f"pod{uid}")) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.settle(floor)
        if (
            ramp_began is not None
            and crossed is None
            and outcome != "oom"
            and killed_at is not None
            and not self._decided_during_ramp(name, outcome, ramp_began, kubelet_log, log_from)
        ):
            outcome = "before-ramp"
        return Run(
            configuration,
            threshold,
            rate,
            outcome,
            achieved_rate=float(report.get("rate", 0.0)),
            to_kill=None if killed_at is None or crossed is None else killed_at - crossed,
            to_eviction=to_eviction,
            to_kubelet_kill=to_kubelet_kill,
            to_signal=None if signalled is None or crossed is None else signalled - crossed,
        )

    def _outcome(self, name: str, pid: int, kubelet_log: Path, since: int, oom_kills: int) -> str:
        """What killed the ramp: the kernel's OOM killer (its log names the pid, or the
        container's status says so, or the machine's OOM kill count moved while the ramp
        got no SIGTERM: the kernel's log loses records under a burst), the kubelet's
        eviction manager (its log names the pod its victim), or an Eviction through the
        API (the agent's decision named it)."""
        deadline = time.monotonic() + 5
        signalled = (self.results / f"{name}.json.stop").exists()
        while True:
            if pid in self.kernel.kills or (not signalled and vmstat_oom_kills() > oom_kills):
                return "oom"
            pod = self.pods.get(self.plane, self.namespace, name)
            status = (pod or {}).get("status") or {}
            for container in status.get("containerStatuses") or ():
                terminated = (container.get("state") or {}).get("terminated") or {}
                if terminated.get("reason") == "OOMKilled":
                    return "oom"
            if (
                any(
                    victim == f"{self.namespace}/{name}"
                    for _, victim in kubelet_evictions(kubelet_log, since)
                )
                or status.get("reason") == "Evicted"
            ):
                return "kubelet-eviction"
            if self.agent_log is not None and (
                f"{self.namespace}/{name}" in agent_decisions(self.agent_log)
            ):
                return "api-eviction"
            if time.monotonic() > deadline:  # the kernel's record may come after the kill
                return "unknown"
            time.sleep(0.05)

    def _decided_during_ramp(
        self, name: str, outcome: str, ramp_began: float, kubelet_log: Path, since: int
    ) -> bool:
        """Whether the eviction of a ramp with no crossing stamp was decided after its
        ramp began. The ramp stamps its crossing at its next read of usage after the step
        that crossed, which waits for the CPU on a loaded machine (and, beside a page
        cache, on page faults that reclaim slows): the agent's read can see the crossing
        first, and the ramp is then evicted during its ramp without a stamp (no times).
        An eviction decided before the ramp began is one on the last run's pressure."""
        key = f"{self.namespace}/{name}"
        if outcome == "api-eviction" and self.agent_log is not None:
            decision = agent_decisions(self.agent_log).get(key)
            decided = None if decision is None else decision.get("decidedMonotonic")
            return decided is not None and float(decided) >= ramp_began
        if outcome == "kubelet-eviction":
            return any(
                victim == key and wall - self.wall_offset >= ramp_began
                for wall, victim in kubelet_evictions(kubelet_log, since)
            )
        return False

    def _to_eviction(
        self, name: str, crossed: float | None, kubelet_log: Path, since: int
    ) -> float | None:
        if crossed is None:
            return None
        for wall, pod in kubelet_evictions(kubelet_log, since):
            if pod.endswith(f"/{name}"):
                return wall - self.wall_offset - crossed
        if self.agent_log is not None:
            decision = agent_decisions(self.agent_log).get(f"{self.namespace}/{name}")
            if decision is not None and "decidedMonotonic" in decision:
                return float(decision["decidedMonotonic"]) - crossed
        return None


def race(
    thresholds: Sequence[str],
    rates: Sequence[str],
    configurations: Sequence[str],
    runs: int,
    allocatable: int,
    *,
    page_cache_mib: int = 0,
) -> list[Run]:
    from tests.controlplane import cluster
    from tests.node import agent, node

    reason = cluster.unavailable() or node.unavailable()
    if reason is not None:
        raise SystemExit(reason)
    results: list[Run] = []
    with contextlib.ExitStack() as stack:
        kept = os.environ.get("NODEAGENT_RACE_WORKDIR")
        if kept:  # logs of the kubelet, containerd, the agent kept there for a look after
            Path(kept).mkdir(parents=True, exist_ok=True)
            base = Path(tempfile.mkdtemp(prefix=f"race-{'-'.join(thresholds)}-", dir=kept))
        else:
            base = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="oom-race-kubelet-"))
            )
        plane = stack.enter_context(
            cluster.running(
                base / "controlplane",
                controllers=(*cluster.CONTROLLERS, "node-lifecycle-controller"),
            )
        )
        kernel = KernelLog()
        stack.callback(kernel.close)
        for threshold in thresholds:
            # beside a page cache the kubelet keeps its default under the agent, and is
            # raised to the threshold only when it races alone
            eviction_hard = {"memory.available": "100Mi" if page_cache_mib else threshold}
            with node.running(
                plane,
                base / f"node-{threshold}",
                allocatable_memory=allocatable,
                eviction_hard=eviction_hard,
                # the kubelet admits BestEffort pods again 5 s after its last eviction
                # (default 5 min): the next run need not wait that long
                kubelet_extra={"evictionPressureTransitionPeriod": "5s"},
            ) as the_node:
                started = time.monotonic()
                the_race = Race(the_node, kernel)
                # the agent's identity (its anchor pod) before the floor is read
                agent.identity(the_node)
                if page_cache_mib:
                    the_race.cache_pod(page_cache_mib)
                floor = the_race.baseline()
                order = [(c, r) for c in configurations for r in rates for _ in range(runs)]
                random.shuffle(order)
                by_configuration = collections.defaultdict(list)
                for configuration, rate in order:
                    by_configuration[configuration].append(rate)
                # runs grouped by configuration (the agent starts once), rates shuffled
                for configuration in random.sample(list(configurations), len(configurations)):
                    with contextlib.ExitStack() as runs_stack:
                        if configuration == "agent-reclaimable":
                            runs_stack.enter_context(
                                the_node.reconfigured(
                                    evictionHard={
                                        **the_node.eviction_hard,
                                        "memory.available": "0%",
                                    }
                                )
                            )
                        if "agent" in configuration:
                            flags = [
                                f"--eviction-hard=memory.available<{threshold}",
                                "--max-evictions-per-interval=1000",
                            ]
                            if configuration.endswith("agent-reclaimable"):
                                flags += RECLAIMABLE_FLAGS
                            running = runs_stack.enter_context(
                                agent.running(the_node, flags, name=f"race-{configuration}")
                            )
                            agent.wait_ready(running)
                            the_race.agent_log = running.process.log
                        else:
                            the_race.agent_log = None
                        for rate in by_configuration[configuration]:
                            if not page_cache_mib:
                                run = the_race.one(configuration, threshold, rate, floor)
                            else:
                                cache = the_race.cache_pod(page_cache_mib)
                                since = (the_node.logs / "kubelet.log").stat().st_size
                                run = the_race.one(
                                    configuration, threshold, rate, floor, page_cache=True
                                )
                                run = replace(run, cache=the_race.cache_fate(cache, since))
                            results.append(run)
                            print(_line(results[-1]), flush=True)
                print(
                    f"{threshold}: {len(order)} runs in {time.monotonic() - started:.0f} s",
                    flush=True,
                )
    return results


def _line(run: Run) -> str:
    kill = f"{run.to_kill * 1e3:.0f} ms" if run.to_kill is not None else "-"
    cache = f"  page-cache pod {run.cache}" if run.cache is not None else ""
    return (
        f"  {run.threshold:<7}{run.configuration:<15}{run.rate:>6}/s  {run.outcome:<17}"
        f" {run.achieved_rate / Mi:>6.0f} MiB/s  crossing-to-kill {kill}{cache}"
    )


def _ms(values: Sequence[float], q: float) -> str:
    return f"{np.percentile(np.asarray(values), q) * 1e3:.0f}" if values else "-"


def table(results: Sequence[Run]) -> str:
    """Per threshold, configuration and rate: runs, OOM kills, evictions (by the kubelet,
    through the API), before-ramp, the achieved rate, and p50/p99 (ms) from the crossing
    to the eviction decision, to the kubelet stopping the container, to its process gone
    (runs not OOM-killed); beside a page cache, what became of the cache pod."""
    with_cache = any(r.cache is not None for r in results)
    lines = [
        "| threshold | configuration | rate | achieved | runs | OOM kills | kubelet evictions"
        " | API evictions | before ramp | crossing to: eviction decision | the kubelet"
        " stopping it | SIGTERM in the pod | its process gone (p50 / p99, ms) |"
        + (" page-cache pod kept / evicted by the kubelet / by the agent |" if with_cache else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if with_cache else ""),
    ]
    keys = dict.fromkeys((r.threshold, r.configuration, r.rate) for r in results)
    for threshold, configuration, rate in sorted(
        keys, key=lambda k: (units.parse_quantity(k[0]).value, k[1], parse_rate(k[2]))
    ):
        these = [
            r
            for r in results
            if (r.threshold, r.configuration, r.rate) == (threshold, configuration, rate)
        ]
        count = collections.Counter(r.outcome for r in these)
        achieved = [r.achieved_rate for r in these if r.achieved_rate]
        kills = [r.to_kill for r in these if r.to_kill is not None and r.outcome != "oom"]
        evictions = [r.to_eviction for r in these if r.to_eviction is not None]
        stops = [r.to_kubelet_kill for r in these if r.to_kubelet_kill is not None]
        signals = [r.to_signal for r in these if r.to_signal is not None]
        lines.append(
            f"| {threshold} | {configuration} | {rate}/s |"
            f" {(np.median(achieved) / Mi if achieved else 0):.0f} MiB/s | {len(these)} |"
            f" {count['oom']} | {count['kubelet-eviction']} | {count['api-eviction']} |"
            f" {count['before-ramp']} | {_ms(evictions, 50)} / {_ms(evictions, 99)} |"
            f" {_ms(stops, 50)} / {_ms(stops, 99)} | {_ms(signals, 50)} / {_ms(signals, 99)} |"
            f" {_ms(kills, 50)} / {_ms(kills, 99)} |" + (_cache_cell(these) if with_cache else "")
        )
    return "\n".join(lines)


def _cache_cell(runs: Sequence[Run]) -> str:
    fates = collections.Counter(r.cache for r in runs)
    return f" {fates['kept']} / {fates['kubelet-eviction']} / {fates['api-eviction']} |"


def main(args: argparse.Namespace) -> None:
    """``bench_oom_race --kubelet``: ``args`` carries runs, rates, thresholds,
    configurations (``kubelet``, ``kubelet+agent``; with page_cache also
    ``kubelet+agent-reclaimable``), allocatable, page_cache (MiB of hot page cache beside
    the ramps, 0 for none), json and report_from (print the table of an earlier
    ``--json`` file, run nothing)."""
    if args.report_from is not None:
        print(table(list(runs_from_json(args.report_from))))
        return
    if os.geteuid() != 0:
        raise SystemExit("needs root: it runs a kubelet")
    asked = args.configurations.split(",")
    known = PAGE_CACHE_CONFIGURATIONS if args.page_cache else CONFIGURATIONS
    # the emulation's names (its default) are not this race's: then all of this race's
    configurations = asked if set(asked) <= set(known) else list(known)
    results: list[Run] = []
    for threshold in args.thresholds.split(","):
        results += race(
            [threshold],
            args.rates.split(","),
            configurations,
            args.runs,
            units.parse_quantity(args.allocatable).value,
            page_cache_mib=args.page_cache,
        )
        if args.json is not None:  # each threshold's runs kept as soon as they are done
            args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    print(table(results))


def runs_from_json(path: Path) -> Iterator[Run]:
    for run in json.loads(path.read_text()):
        yield Run(**run)
