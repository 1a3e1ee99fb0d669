"""The agent on a real node: beside the real kubelet (built from the pinned
k8s.io/kubernetes), containerd and runc, real pods in real pod cgroups, all registered
with the real control plane (:mod:`tests.node.conftest`).

* coexistence: through kubelet status updates and a kubelet restart, the agent's
  conditions and taint and the kubelet's own conditions all stay, each written by its
  owner only (the apiserver's managedFields say who wrote what), and the node-confinement
  policy refuses none of the agent's writes;
* eviction: the agent's Eviction is honoured by the real kubelet (containers stopped, the
  pod cgroup removed, the memory back in the agent's next cycles), and a
  PodDisruptionBudget that blocks it is honoured too;
* per-pod signals: what the agent reads per pod matches the kubelet's Summary API.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.node import agent as agents
from tests.node import pods
from tests.node.node import MIB, Node
from tests.waiting import eventually

pytestmark = [pytest.mark.node, pytest.mark.slow]

DISK_CONDITION = "NodeAgentDiskPressure"
DISK_TAINT = "nodeagent.io/disk-pressure"
MEMORY_TAINT = "nodeagent.io/memory-pressure"


def node_object(node: Node) -> dict[str, Any]:
    result: dict[str, Any] = node.plane.admin.get(f"/api/v1/nodes/{node.name}")
    return result


def conditions(node: Node) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in node_object(node)["status"].get("conditions") or ()}


def taint_keys(node: Node) -> list[str]:
    return [t["key"] for t in node_object(node)["spec"].get("taints") or ()]


def ballast(node: Node, fraction: float) -> Path:
    """A file outside any pod filling ``fraction`` of the node filesystem: pressure the
    agent sees and no pod is to blame for (so it taints, and evicts nobody)."""
    path = node.nodefs / "ballast"
    size = int(node.nodefs_mib * MIB * fraction)
    with path.open("wb") as out:
        out.truncate(0)
        for _ in range(size // MIB):
            out.write(b"b" * MIB)
    return path


class TestCoexistence:
    def test_status_updates_and_a_kubelet_restart_keep_both_owners_state(
        self, node: Node, namespace: str
    ) -> None:
        plane = node.plane
        path = ballast(node, 0.5)
        try:
            # nodefs 50 % used: under the agent's 60 % threshold, far above the kubelet's 10 %
            with agents.running(node, ["--eviction-hard=nodefs.available<60%"]) as agent:
                eventually(
                    lambda: (conditions(node).get(DISK_CONDITION) or {}).get("status") == "True",
                    timeout=60,
                    what="the agent's disk condition",
                )
                eventually(lambda: DISK_TAINT in taint_keys(node), what="the agent's taint")
                first = conditions(node)[DISK_CONDITION]

                heartbeats: list[str] = []

                def kubelet_posted() -> bool:
                    seen = conditions(node)
                    beat = seen["Ready"]["lastHeartbeatTime"]
                    if beat not in heartbeats:
                        heartbeats.append(beat)
                        # at every kubelet status update, both owners' state is there
                        assert set(agents.KUBELET_CONDITIONS) <= set(seen), seen
                        assert seen[DISK_CONDITION]["status"] == "True"
                        assert DISK_TAINT in taint_keys(node)
                    return len(heartbeats) >= 4

                eventually(kubelet_posted, timeout=60, what="3 kubelet status updates")
                node.restart_kubelet()
                before_restart = len(heartbeats)
                eventually(
                    lambda: kubelet_posted() and len(heartbeats) >= before_restart + 3,
                    timeout=90,
                    what="3 status updates of the restarted kubelet",
                )
                assert conditions(node)["Ready"]["status"] == "True"
                after = conditions(node)[DISK_CONDITION]
                assert after["status"] == "True"
                assert after["lastTransitionTime"] == first["lastTransitionTime"]
                assert DISK_TAINT in taint_keys(node)
                # each owner wrote its own condition types only, as the apiserver recorded
                owners = agents.agent_fields(plane, node.name)
                print(f"\ncondition types by field manager: {owners}")
                kubelet = owners.get("kubelet", set())
                mine = {
                    kind
                    for manager, kinds in owners.items()
                    if "nodeagent" in manager
                    for kind in kinds
                }
                assert set(agents.KUBELET_CONDITIONS) <= kubelet, owners
                assert mine and not mine & set(agents.KUBELET_CONDITIONS), owners
                assert not kubelet & mine, owners
                # the node-confinement policy refused none of the agent's writes
                assert agent.refused() == []
                assert agent.process.alive(), agent.process.tail()
        finally:
            path.unlink()


class TestEviction:
    def test_an_eviction_is_carried_out_by_the_kubelet_and_a_budget_is_honoured(
        self, node: Node, namespace: str
    ) -> None:
        plane = node.plane
        limit = node.allocatable_memory
        # a hog holding 65 % of allocatable behind a budget, a spare holding 10 %: without
        # the spare the hog alone still meets the threshold
        holds = {"hog": int(limit * 0.65), "spare": int(limit * 0.10)}
        created = {}
        for name, size in holds.items():
            pod = pods.workload(
                name,
                namespace,
                pods.hold_args(size),
                node=node.name,
                labels={"app": name},
            )
            pods.create(plane, pod)
        for name in holds:
            created[name] = pods.wait_running(plane, namespace, name)
        budgets = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
        plane.admin.create(
            budgets,
            {
                "metadata": {"name": "hog"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "hog"}}},
            },
        )
        eventually(
            lambda: (
                (plane.admin.get(f"{budgets}/hog").get("status") or {}).get("currentHealthy") == 1
            ),
            what="the disruption controller's status of the budget",
        )
        cgroups = {name: pods.cgroup(node, pod) for name, pod in created.items()}
        assert all(path.is_dir() for path in cgroups.values())
        # the agent's threshold on allocatable memory: met by the two pods' 75 %
        threshold = f"{int(limit * 0.40) // MIB}Mi"
        with agents.running(node, [f"--eviction-hard=memory.available<{threshold}"]) as agent:
            eventually(
                lambda: pods.get(plane, namespace, "spare") is None,
                timeout=60,
                what="the spare evicted and deleted by the kubelet",
            )
            assert not cgroups["spare"].exists()
            eventually(
                lambda: (
                    (agent.sample("nodeagent_evictions_total", outcome="blocked_by_pdb") or 0) >= 1
                ),
                what="the budget's 429",
            )
            hog = pods.get(plane, namespace, "hog")
            assert hog is not None and "deletionTimestamp" not in hog["metadata"]
            # the budget lets one go: the real Eviction API accepts, the kubelet stops it
            plane.admin.merge_patch(f"{budgets}/hog", {"spec": {"minAvailable": 0}})
            eventually(
                lambda: pods.get(plane, namespace, "hog") is None,
                timeout=60,
                what="the hog evicted and deleted by the kubelet",
            )
            assert not cgroups["hog"].exists()
            assert all(
                created[name]["metadata"]["uid"] not in node.ctr("containers", "list")
                for name in holds
            )

            def allocatable_available() -> float:
                value = agent.sample(
                    "nodeagent_signal_available_bytes", signal="allocatableMemory.available"
                )
                return value or 0.0

            eventually(
                lambda: allocatable_available() > limit * 0.8,
                what="the agent seeing the memory back",
            )
            assert agent.refused() == []
        events = [
            e
            for e in plane.admin.get(f"/api/v1/namespaces/{namespace}/events")["items"]
            if e.get("reason") == "Evicted"
        ]
        assert {e["involvedObject"]["name"] for e in events} >= {"hog", "spare"}


class TestPerPodSignals:
    MEMORY_TOLERANCE = 4 * MIB
    """The working set moves by the kernel's own allocations between the two reads."""
    DISK_TOLERANCE = 8 * 1024
    """The kubelet counts the pod's ``etc-hosts`` file (one 4 KiB block), the agent does
    not; otherwise both count whole blocks of the same files."""
    INODE_TOLERANCE = 10
    """Per pod, the agent counts the sandbox (pause) container's writable layer (6 inodes
    under containerd 1.6) and the two log directories (pod, container), which the
    kubelet does not; the kubelet counts ``etc-hosts``, which the agent does not."""

    def test_the_agent_reads_what_the_summary_api_reports(self, node: Node, namespace: str) -> None:
        plane = node.plane
        specs = {
            "mem": pods.hold_args(300 * MIB),
            "disk": ["fill", "/scratch/data", "24", "0"],
            "layer": ["fill", "/layer-data", "12", "0"],
        }
        for name, args in specs.items():
            pods.create(
                plane,
                pods.workload(
                    name,
                    namespace,
                    args,
                    node=node.name,
                    volumes=[{"name": "scratch", "emptyDir": {}}],
                    mounts=[{"name": "scratch", "mountPath": "/scratch"}],
                ),
            )
        uids = {
            name: pods.wait_running(plane, namespace, name)["metadata"]["uid"] for name in specs
        }

        def summary_pods() -> dict[str, dict[str, Any]]:
            return {
                p["podRef"]["uid"]: p
                for p in node.summary().get("pods") or ()
                if p["podRef"]["namespace"] == namespace
            }

        def settled() -> bool:
            # the kubelet measures volumes every volumeStatsAggPeriod (here 10 s), its
            # containers' layers at cAdvisor's housekeeping: wait for both
            found = summary_pods()
            return all(
                uid in found
                and found[uid].get("volume")
                and (found[uid].get("ephemeral-storage") or {}).get("usedBytes") is not None
                # 0 until cAdvisor's first housekeeping of the pod's cgroup
                and (found[uid].get("memory") or {}).get("workingSetBytes")
                for uid in uids.values()
            ) and (found[uids["disk"]]["ephemeral-storage"]["usedBytes"] >= 24 * MIB)

        eventually(settled, timeout=120, what="the Summary API's stats of the pods")
        summary = summary_pods()
        ours = agent_signals(node)["pods"]
        report = []
        for name, uid in uids.items():
            theirs, mine = summary[uid], ours[uid]
            kubelet_ws = theirs["memory"]["workingSetBytes"]
            kubelet_disk = theirs["ephemeral-storage"]["usedBytes"]
            kubelet_inodes = theirs["ephemeral-storage"]["inodesUsed"]
            agent_disk = mine["rootfs"] + mine["logs"] + mine["localVolumes"]
            agent_inodes = mine["rootfsInodes"] + mine["logsInodes"] + mine["localVolumesInodes"]
            report.append(
                f"{name}: working set kubelet {kubelet_ws} agent {mine['memory']}; "
                f"ephemeral storage kubelet {kubelet_disk} agent {agent_disk}; "
                f"inodes kubelet {kubelet_inodes} agent {agent_inodes}"
            )
        for uid in uids.values():
            theirs, mine = summary[uid], ours[uid]
            agent_disk = mine["rootfs"] + mine["logs"] + mine["localVolumes"]
            agent_inodes = mine["rootfsInodes"] + mine["logsInodes"] + mine["localVolumesInodes"]
            memory_gap = abs(mine["memory"] - theirs["memory"]["workingSetBytes"])
            disk_gap = abs(agent_disk - theirs["ephemeral-storage"]["usedBytes"])
            inode_gap = abs(agent_inodes - theirs["ephemeral-storage"]["inodesUsed"])
            assert memory_gap <= self.MEMORY_TOLERANCE, report
            assert disk_gap <= self.DISK_TOLERANCE, report
            assert inode_gap <= self.INODE_TOLERANCE, report
        print("\n".join(report))


def agent_signals(node: Node) -> dict[str, Any]:
    """``nodeagent signals -o json`` on this node: what the agent reads, once."""
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent", "signals", "-o", "json", *agents.node_flags(node)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PYTHONPATH": str(agents.REPO), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result
