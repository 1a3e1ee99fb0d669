"""Deterministic simulation of the agent's actuation: conditions, taints, evictions.

The whole agent as ``nodeagent run`` wires it (the real collector on a fixture host, the
real engine, the real actuation worker and actuators), in one thread and virtual time,
against the same :class:`~tests.sim.api.SimAPI` as the scheduler's simulation. A seed
draws what happens at each step:

* the node's memory goes under the hard threshold or back (the pressure begins, ends);
* the loop cycles, and the actuation worker applies the latest decision: at once, late
  (the worker stuck on a slow API), or not at all for a while;
* the pod cache catches up with the API (or lags), pods are created, terminate after an
  eviction at their own pace, or are deleted;
* another owner adds or removes its own taint on the node;
* the API fails calls, or refuses everything for a while (an outage);
* the agent restarts (a new one adopts what the API shows).

Invariants (each :class:`~tests.sim.scheduler_sim.Violation` names it):

A1. never two evictions of one pod in flight (a second one while the first is pending);
A2. never a pod evicted once the agent has observed that the pressure ended;
A3. at quiescence the condition and our taints are the last decision's;
A4. another owner's taint is never removed;
A5. no flapping, across restarts too: the condition turns False only after the pressure
    has been gone for the transition period, and True only within that period of
    pressure.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from nodeagent.agent.config import NodeAgentConfiguration, load_config
from nodeagent.agent.pods import PodView
from nodeagent.agent.runtime import Agent
from nodeagent.base.clock import FakeClock
from nodeagent.k8s.pods import QOSClass
from nodeagent.model import PodInfo, PodUID, Signal
from nodeagent.serving.sdnotify import SystemdNotifier
from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion
from tests.doubles.host import GIB, MIB, HostTree, Memory
from tests.doubles.triggers import FakeTriggers
from tests.fakeapi import objects
from tests.sim.api import EvictionRecord, Faults, SimAPI, SimClient
from tests.sim.scheduler_sim import Violation

NODE = "node-a"
CONDITION = "NodeAgentMemoryPressure"
OUR_TAINT_PREFIX = "nodeagent.io/"
FOREIGN_TAINT = {"key": "example.com/maintenance", "effect": "NoSchedule"}
TRANSITION = 30.0
MEMORY = Signal.MEMORY_AVAILABLE
POD_WATCH_LAG = 2.0
"""Seconds the pod cache may lag the API while the API answers."""
HIGH_USAGE = 15 * GIB + 512 * MIB
LOW_USAGE = 4 * GIB


class SimPods:
    """The agent's pod source: the API's pods on the node, as of the last refresh."""

    def __init__(self) -> None:
        self.current = PodView(synced=False)

    def view(self) -> PodView:
        return self.current


class AgentSimulation:
    def __init__(self, rng: random.Random, root: Path, *, label: str = "") -> None:
        self.rng = rng
        self.label = label
        self.clock = FakeClock(start=100.0)
        self.faults = Faults(rng, self.clock)
        self.api = SimAPI(self.clock, self.faults)
        self.host = HostTree(root / "host", version=CgroupVersion.V1, driver=CgroupDriver.CGROUPFS)
        self.host.proc(mem_total=16 * GIB)
        self.host.kubepods(Memory(2 * GIB), limit=15 * GIB)
        self.config = agent_config(self.host.root)
        self.pods = SimPods()
        self.pods_refreshed = self.clock.now()
        self.infos: dict[str, PodInfo] = {}
        self.pressure = False
        self.observed: list[tuple[float, bool]] = []
        """(time, memory threshold met) of every cycle: what the agent saw."""
        self.observed_at_write: list[int] = []
        """Per node write (the API's history), how many cycles had run when it was made:
        checked after every step, and a step's cycle comes before its writes."""
        self.flaps_checked = 0
        """How many of the API's node writes :meth:`check_flaps` has judged."""
        self.flaps_previous: str | None = None
        """Our condition's status in the last write judged."""
        self.relief_observed = True
        self.foreign_taint = False
        self.step_no = 0
        self.trace: list[str] = []
        self.restarts = 0
        self.settling = False
        self.agent: Agent
        self._set_usage(LOW_USAGE)
        node = objects.node(NODE)
        if rng.random() < 0.3:  # a previous agent left pressure published
            node["status"]["conditions"].append(
                {
                    "type": CONDITION,
                    "status": "True",
                    "reason": "MemoryThresholdMet",
                    "message": "memory.available is below the hard threshold 1Gi",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                }
            )
            node["spec"]["taints"] = [
                {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}
            ]
            self.observed = [(self.clock.now() - 5.0, True)]
        self.api.create("nodes", node)
        self.api.on_evicted = self.check_eviction
        self.start_agent()

    # --- the world ------------------------------------------------------------------------
    def note(self, what: str) -> None:
        self.trace.append(f"{self.step_no:4d} t={self.clock.now():8.2f} {what}")
        if len(self.trace) > 200:
            del self.trace[:100]

    def violation(self, invariant: str, message: str) -> Violation:
        tail = "\n  ".join(self.trace[-25:])
        return Violation(
            f"agent invariant {invariant} violated at step {self.step_no} "
            f"(t={self.clock.now():.2f}) {self.label}: {message}\n  last steps:\n  {tail}"
        )

    def _set_usage(self, working_set: int) -> None:
        self.host.root_memory(Memory(working_set + 256 * MIB, inactive_file=256 * MIB))

    def set_pressure(self, on: bool) -> None:
        if on == self.pressure:
            return
        self.pressure = on
        self._set_usage(HIGH_USAGE if on else LOW_USAGE)
        if not on:
            self.relief_observed = False
        self.note(f"pressure {'begins' if on else 'ends'}")

    def add_pod(self) -> None:
        name = f"pod{len(self.infos) + 1}"
        qos = self.rng.choice((QOSClass.BEST_EFFORT, QOSClass.BURSTABLE, QOSClass.BURSTABLE))
        info = PodInfo(
            namespace="default",
            name=name,
            uid=PodUID(f"uid-{name}"),
            qos=qos,
            priority=0,
            termination_grace_period_seconds=30,
        )
        self.infos[name] = info
        self.host.pod(str(info.uid), Memory(self.rng.choice((512 * MIB, 2 * GIB))), qos=qos)
        self.api.create("pods", objects.pod(name, node_name=NODE, uid=str(info.uid)))
        self.note(f"{name} created ({qos})")

    def refresh_pods(self) -> None:
        """The pod cache catches up with the API."""
        self.pods_refreshed = self.clock.now()
        present, running, terminating = [], [], []
        for pod in self.api.items("pods"):
            info = self.infos.get(pod["metadata"]["name"])
            if info is None:
                continue
            present.append(info.uid)
            if pod["metadata"].get("deletionTimestamp"):
                terminating.append(info.uid)
            else:
                running.append(info)
        self.pods.current = PodView(
            pods=tuple(running),
            present=frozenset(present),
            terminating=frozenset(terminating),
            synced=True,
        )

    def finish_terminations(self) -> None:
        for pod in self.api.items("pods"):
            if pod["metadata"].get("deletionTimestamp") and self.rng.random() < 0.5:
                self.api.delete("pods", "default", pod["metadata"]["name"])
                self.note(f"{pod['metadata']['name']} gone")
                if self.pressure and not self.settling and self.rng.random() < 0.5:
                    self.set_pressure(False)  # its memory was what pressed

    def toggle_foreign_taint(self) -> None:
        def change(node: dict[str, Any]) -> None:
            taints = [t for t in node["spec"].get("taints") or () if t != FOREIGN_TAINT]
            if not self.foreign_taint:
                taints.append(dict(FOREIGN_TAINT))
            node["spec"]["taints"] = taints

        self.api.update("nodes", "", NODE, change)
        self.foreign_taint = not self.foreign_taint
        self.note(f"another owner {'adds' if self.foreign_taint else 'removes'} its taint")

    # --- the agent ------------------------------------------------------------------------
    def start_agent(self) -> None:
        if self.restarts:
            self.kill_agent()
        self.restarts += 1
        self.pods.current = PodView(synced=False)  # a new process lists its pods afresh
        if not self.faults.down:
            self.refresh_pods()
        self.agent = Agent.build(
            self.config,
            clock=self.clock,
            kube=SimClient(self.api, f"agent-{self.restarts}"),
            triggers=FakeTriggers(self.clock),
            serve_metrics=False,
            notifier=SystemdNotifier(None, watchdog_timeout=None),
            pod_source=self.pods,
        )
        self.note(f"agent {self.restarts} started")

    def kill_agent(self) -> None:
        """kill -9: nothing flushed or released in the cluster; the kernel closes the
        process's files (here: the collector's and the triggers')."""
        self.agent.triggers.close()
        self.agent.collector.close()

    def cycle(self) -> None:
        if not self.faults.down and self.clock.now() - self.pods_refreshed > POD_WATCH_LAG:
            self.refresh_pods()  # the watch lags, but not for long while the API answers
        result = self.agent.loop.tick()
        if result is not None:  # what this cycle saw (a filesystem poll carries memory over)
            met = any(t.signal == MEMORY for t in result.decision.thresholds_met)
            self.observed.append((self.clock.now(), met))
            if not met and not self.pressure:
                self.relief_observed = True

    def apply(self) -> None:
        self.agent.actuation.apply_pending()

    # --- invariants -----------------------------------------------------------------------
    def check_eviction(self, record: EvictionRecord) -> None:
        self.note(f"{record.pod} evicted (grace {record.grace_period_seconds})")
        if record.pending_before:
            raise self.violation("A1", f"{record.pod} evicted while its eviction was pending")
        if not self.pressure and self.relief_observed:
            raise self.violation(
                "A2", f"{record.pod} evicted after the agent observed that the pressure ended"
            )

    def node(self) -> dict[str, Any]:
        node = self.api.get("nodes", "", NODE)
        assert node is not None
        return node

    def check_step(self) -> None:
        taints = self.node()["spec"].get("taints") or []
        if self.foreign_taint and FOREIGN_TAINT not in taints:
            raise self.violation("A4", f"another owner's taint was removed: {taints}")
        self.check_flaps()

    def pressure_seen_within(self, start: float, end: float, before: int) -> bool:
        """One of the first ``before`` cycles, in [start, end], sampled the node under
        pressure."""
        return any(on and start <= at <= end for at, on in self.observed[:before])

    def check_flaps(self) -> None:
        """A5 over every write of our condition the API has seen, each judged by what the
        agent had observed when it was written: a cycle at the same virtual instant but
        after the write (a step later) cannot have caused it."""
        history, written_at = self.api.history["nodes"], self.api.written_at["nodes"]
        while len(self.observed_at_write) < len(history):
            self.observed_at_write.append(len(self.observed))
        # A write, once judged, stays judged (what was seen before it never changes):
        # each check takes up where the last one stopped.
        first, previous = self.flaps_checked, self.flaps_previous
        self.flaps_checked = len(history)
        for event, at, seen in zip(
            history[first:], written_at[first:], self.observed_at_write[first:], strict=True
        ):
            status = _condition(event.object)
            self.flaps_previous = status
            if status is None or status == previous:
                previous = status
                continue
            if previous is not None:
                if status == "False" and self.pressure_seen_within(
                    at - TRANSITION + 1e-6, at, seen
                ):
                    raise self.violation(
                        "A5",
                        f"the condition turned False at {at:.2f} within the "
                        f"transition period of pressure (seen: {self.observed[-12:]})",
                    )
                if status == "True" and not self.pressure_seen_within(
                    at - TRANSITION - 3.0, at, seen
                ):
                    raise self.violation(
                        "A5",
                        f"the condition turned True at {at:.2f} without pressure "
                        f"(seen: {self.observed[-12:]})",
                    )
            previous = status

    def check_quiescent(self) -> None:
        last = self.agent.loop.last
        if last is None:
            raise self.violation("A3", "the agent never decided")
        decision = last.decision
        wanted = "True" if any(decision.pressure.values()) else "False"
        published = _condition(self.node())
        if published != wanted:
            raise self.violation(
                "A3", f"the condition is {published}, the last decision says {wanted}"
            )
        ours = sorted(
            (t["key"], t["effect"])
            for t in self.node()["spec"].get("taints") or ()
            if t["key"].startswith(OUR_TAINT_PREFIX)
        )
        decided = sorted((t.key, t.effect) for t in decision.taints)
        if ours != decided:
            raise self.violation("A3", f"our taints are {ours}, the last decision says {decided}")

    # --- running --------------------------------------------------------------------------
    def step(self) -> None:
        self.step_no += 1
        rng = self.rng
        roll = rng.random()
        if roll < 0.35:
            self.cycle()
            if rng.random() < 0.7:
                self.apply()
        elif roll < 0.45:
            self.apply()
        elif roll < 0.60:
            self.refresh_pods()
        elif roll < 0.68:
            self.finish_terminations()
        elif roll < 0.74:
            self.set_pressure(not self.pressure)
        elif roll < 0.79:
            self.add_pod()
        elif roll < 0.83:
            self.toggle_foreign_taint()
        elif roll < 0.88:
            self.faults.call_failure = rng.choice((0.0, 0.2, 0.5))
        elif roll < 0.91 and not self.faults.down:
            length = rng.uniform(1.0, 20.0)
            self.faults.outage_until = self.clock.now() + length
            self.note(f"API outage for {length:.1f} s")
        elif roll < 0.93:
            self.start_agent()
        else:
            self.clock.advance(rng.choice((0.5, 2.0, 10.0)))
        self.check_step()

    def run(self, steps: int) -> None:
        logging.disable(logging.CRITICAL)
        try:
            for _ in range(self.rng.randint(1, 4)):
                self.add_pod()
            self.refresh_pods()
            for _ in range(steps):
                self.step()
            self.faults.heal()
            self.note("faults healed")
            self.set_pressure(self.rng.random() < 0.5)  # and so it stays
            self.settling = True
            for _ in range(int(TRANSITION * 3)):
                self.refresh_pods()
                self.finish_terminations()
                self.cycle()
                self.apply()
                self.check_step()
            self.check_quiescent()
        finally:
            self.kill_agent()
            logging.disable(logging.NOTSET)


def _condition(node: dict[str, Any]) -> str | None:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if condition.get("type") == CONDITION:
            return str(condition.get("status"))
    return None


def load_agent_config(host_root: Path) -> NodeAgentConfiguration:
    """The agent's configuration for a host tree, validated."""
    return load_config(
        overrides={
            "host_root": str(host_root),
            "nodefs_path": "/",
            "imagefs_path": "/",
            "eviction_hard": {"memory.available": "1Gi"},
            "eviction_pressure_transition_period": f"{TRANSITION:g}s",
            "pod_storage_scan_interval": 0,
            "node_name": NODE,
        },
        environ={},
    )


@functools.cache
def _validated_config() -> NodeAgentConfiguration:
    return load_agent_config(Path("/"))


def agent_config(host_root: Path) -> NodeAgentConfiguration:
    """:func:`load_agent_config`, validated once per process: seeds differ only in
    ``host_root``, an absolute path taken as it is (validation was half of building a
    seed's world)."""
    if not host_root.is_absolute():
        raise ValueError(f"host_root {host_root}: must be an absolute path")
    return _validated_config().model_copy(update={"host_root": host_root})


SCRATCH = Path("/dev/shm")
"""Where the host trees go when it exists: a tmpfs, where rewriting a cgroup file costs
microseconds, not the milliseconds of a journalled disk (the files read the same)."""


def run_agent_seed(seed: int, steps: int = 150) -> None:
    scratch = SCRATCH if SCRATCH.is_dir() and os.access(SCRATCH, os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix="agent-sim-", dir=scratch))
    try:
        AgentSimulation(random.Random(seed), root, label=f"[agent seed {seed}]").run(steps)
    finally:
        shutil.rmtree(root, ignore_errors=True)
