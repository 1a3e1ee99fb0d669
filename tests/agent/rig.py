"""A whole agent in one thread and virtual time, for the loop's component tests.

The real signal collector reads a fixture host (:class:`~tests.doubles.host.HostTree`,
cgroup v1 with a kubepods cgroup), the real engine decides, the real actuators write to an
in-memory API (:class:`~tests.doubles.kube.FakeKubeClient`); time is a
:class:`~nodeagent.base.clock.FakeClock` that :class:`~tests.doubles.triggers.FakeTriggers`
advances by each wait's timeout, and pods come from a view the test sets. The actuation
worker's thread is not started: :meth:`Rig.cycle` applies each submission at once, so a
test reads as a sequence of cycles.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodeagent.agent.config import NodeAgentConfiguration, load_config
from nodeagent.agent.loop import CycleResult
from nodeagent.agent.pods import PodView
from nodeagent.agent.runtime import Agent
from nodeagent.base.clock import FakeClock
from nodeagent.cri.client import ContainerRuntime
from nodeagent.k8s.pods import QOSClass
from nodeagent.model import PodInfo, PodUID
from nodeagent.serving.sdnotify import SystemdNotifier
from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion
from tests.doubles import kube as fake
from tests.doubles.host import GIB, MIB, HostTree, Memory
from tests.doubles.triggers import FakeTriggers
from tests.fakeapi import objects

NODE = "node-a"
MEM_TOTAL = 16 * GIB


class StaticPods:
    """A pod source the test sets."""

    def __init__(self) -> None:
        self.current = PodView(synced=True)

    def view(self) -> PodView:
        return self.current

    def set(self, pods: list[PodInfo], *, terminating: frozenset[str] = frozenset()) -> None:
        gone = {PodUID(uid) for uid in terminating}
        self.current = PodView(
            pods=tuple(p for p in pods if p.uid not in gone),
            present=frozenset(p.uid for p in pods),
            terminating=frozenset(gone),
            synced=True,
        )


def pod(name: str, *, qos: QOSClass = QOSClass.BURSTABLE, priority: int = 0) -> PodInfo:
    return PodInfo(
        namespace="default",
        name=name,
        uid=PodUID(f"uid-{name}"),
        qos=qos,
        priority=priority,
        termination_grace_period_seconds=30,
    )


class Rig:
    def __init__(
        self,
        root: Path,
        *,
        settings: Mapping[str, Any] | None = None,
        node: dict[str, Any] | None = None,
        container_runtime: ContainerRuntime | None = None,
    ) -> None:
        self.host = HostTree(root / "host", version=CgroupVersion.V1, driver=CgroupDriver.CGROUPFS)
        self.host.proc(mem_total=MEM_TOTAL)
        self.host.kubepods(Memory(2 * GIB), limit=15 * GIB)
        self.set_node_usage(4 * GIB)
        fields: dict[str, Any] = {
            "host_root": str(self.host.root),
            "nodefs_path": "/",
            "imagefs_path": "/",
            "eviction_hard": {"memory.available": "1Gi"},
            "eviction_pressure_transition_period": "30s",
            "pod_storage_scan_interval": 0,
            "node_name": NODE,
        }
        fields.update(settings or {})
        self.config: NodeAgentConfiguration = load_config(overrides=fields, environ={})
        self.clock = FakeClock(start=100.0)
        self.cluster = fake.FakeCluster(wall=self.clock.wall)
        self.cluster.create("nodes", node or objects.node(NODE))
        self.kube = fake.FakeKubeClient(self.cluster)
        self.triggers = FakeTriggers(self.clock)
        self.pods = StaticPods()
        # The agent as `nodeagent run` wires it, with the fakes in place of the API, the
        # kernel's notifications and the pod cache; nothing is started, so the test drives
        # each cycle itself.
        self.agent = Agent.build(
            self.config,
            clock=self.clock,
            kube=self.kube,
            triggers=self.triggers,
            serve_metrics=False,
            notifier=SystemdNotifier(None, watchdog_timeout=None),
            pod_source=self.pods,
            container_runtime=container_runtime,
        )
        self.loop = self.agent.loop
        self.actuation = self.agent.actuation
        self.collector = self.agent.collector
        self.metrics = self.agent.metrics
        self.health = self.agent.health

    # --- the host ----------------------------------------------------------------------------
    def set_node_usage(self, working_set: int) -> None:
        """The node's memory working set (memory.available = 16Gi - this)."""
        self.host.root_memory(Memory(working_set + 256 * MIB, inactive_file=256 * MIB))

    def add_pod(self, info: PodInfo, usage: int) -> None:
        """A pod on the node: its cgroup on the host and its object in the API."""
        self.host.pod(str(info.uid), Memory(usage), qos=info.qos)
        self.cluster.create(
            "pods",
            objects.pod(info.name, namespace=info.namespace, node_name=NODE, uid=str(info.uid)),
        )

    # --- running -----------------------------------------------------------------------------
    def cycle(self) -> CycleResult | None:
        """Wait for the next poll (or a fired trigger), cycle, apply the decision."""
        result = self.loop.tick()
        self.actuation.apply_pending()
        return result

    def run_for(self, seconds: float) -> list[CycleResult]:
        end = self.clock.now() + seconds
        results = []
        while self.clock.now() < end:
            result = self.cycle()
            if result is not None:
                results.append(result)
        return results

    # --- what the API saw ---------------------------------------------------------------------
    def node(self) -> dict[str, Any]:
        return self.cluster.get("nodes", "", NODE)

    def condition(self, kind: str) -> dict[str, Any] | None:
        for condition in self.node()["status"].get("conditions", []):
            if condition["type"] == kind:
                return dict(condition)
        return None

    def own_taints(self) -> list[tuple[str, str]]:
        return [
            (t["key"], t["effect"])
            for t in self.node()["spec"].get("taints", [])
            if t["key"].startswith("nodeagent.io/")
        ]

    def evicted(self) -> list[tuple[str, int | None]]:
        """Pods the API accepted an Eviction for, with its grace period."""
        return [
            (e.name, e.grace_period_seconds) for e in self.cluster.evictions if e.outcome == 201
        ]

    def condition_writes(self, kind: str) -> list[str]:
        """Statuses written for condition ``kind``, in order."""
        statuses = []
        for call in self.kube.calls_to("patch_node_status"):
            for condition in call.args[1]["status"]["conditions"]:
                if condition["type"] == kind:
                    statuses.append(condition["status"])
        return statuses
