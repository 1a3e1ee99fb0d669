"""Disk pressure on the real node, the kubelet alone and with the agent beside it, at
the same thresholds (the kubelet's ``imagefs.available<15%``, ``nodefs.available<10%``):

* **imagefs**: unused images lie on the image filesystem (256 MiB, the runtime's root)
  and a pod fills its writable layer past the threshold. Removing an image is enough.
  The agent does it within its cycle (reclaim first: dead containers, then unused images
  on the pressured filesystem, oldest first, only as many as it takes, never the pinned
  sandbox image) and evicts no pod; the kubelet's eviction manager, at its next 10 s
  look, tried image garbage collection, freed nothing (images imported seconds before),
  and evicted the pod;
* **nodefs**: a pod fills an emptyDir on the node filesystem (256 MiB, the kubelet's
  root dir); nothing but the pod can give the space back, so it is evicted.

Each case prints what was done (images removed, pods evicted, bytes freed) and how long
from the crossing to relief.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.oom_race_kubelet import kubelet_evictions
from tests.node import agent as agents
from tests.node import images, pods
from tests.node.node import MIB, WORKLOAD_CACHE, Node

pytestmark = [pytest.mark.node, pytest.mark.slow]

UNUSED = ("nodeagent.test/unused-a:1", "nodeagent.test/unused-b:1")
PADDING = 20 * MIB
RELIEF_TIMEOUT = 60.0


def available_fraction(path: Path) -> float:
    stats = os.statvfs(path)
    return stats.f_bavail / stats.f_blocks


@dataclass(frozen=True)
class Outcome:
    case: str
    images_removed: list[str]
    evicted: bool
    freed: int
    crossing_to_relief: float | None

    def __str__(self) -> str:
        took = "never" if self.crossing_to_relief is None else f"{self.crossing_to_relief:.1f} s"
        return (
            f"{self.case}: images removed {self.images_removed or 'none'}, pod evicted"
            f" {'yes' if self.evicted else 'no'}, {self.freed / MIB:.0f} MiB freed,"
            f" crossing to relief {took}"
        )


def image_names(node: Node) -> set[str]:
    return {line.split()[0] for line in node.ctr("images", "list", "-q").split("\n") if line}


def watch(
    path: Path, threshold: float, done: Callable[[], bool]
) -> tuple[float | None, float | None, int]:
    """Poll ``path``'s filesystem every 50 ms until ``done``: when its available share
    first fell under ``threshold`` (the crossing), when it was back at or above it after
    that (relief), and the bytes it got back from the lowest point."""
    crossed = relieved = None
    lowest = highest_after = None
    deadline = time.monotonic() + RELIEF_TIMEOUT
    while time.monotonic() < deadline:
        stats = os.statvfs(path)
        free = stats.f_bavail * stats.f_frsize
        share = stats.f_bavail / stats.f_blocks
        now = time.monotonic()
        if crossed is None and share < threshold:
            crossed, lowest = now, free
        elif crossed is not None:
            lowest = min(lowest or free, free)
            highest_after = max(highest_after or free, free)
            if relieved is None and share >= threshold:
                relieved = now
        if relieved is not None and done():
            break
        time.sleep(0.05)
    freed = 0 if lowest is None or highest_after is None else highest_after - lowest
    return crossed, relieved, freed


def was_evicted(node: Node, namespace: str, name: str) -> bool:
    """Gone, or evicted by the kubelet: its eviction manager's log says so (the pod's
    status may not: the kubelet's status patch for a pod made a moment before can be
    refused while the Node authorizer's graph has not seen it yet)."""
    pod = pods.get(node.plane, namespace, name)
    if pod is None or (pod.get("status") or {}).get("reason") == "Evicted":
        return True
    log = node.logs / "kubelet.log"
    return any(victim == f"{namespace}/{name}" for _, victim in kubelet_evictions(log, 0))


def fill_pod(node: Node, namespace: str, name: str, path: str, mib: int) -> None:
    pods.create(
        node.plane,
        pods.workload(
            name,
            namespace,
            ["fill", path, str(mib), "40"],
            node=node.name,
            volumes=[{"name": "scratch", "emptyDir": {}}],
            mounts=[{"name": "scratch", "mountPath": "/scratch"}],
        ),
    )


def imagefs_case(node: Node, namespace: str, label: str) -> Outcome:
    for name in UNUSED:
        node.ctr(
            "images", "import", str(images.padded_image(node.base, WORKLOAD_CACHE, name, PADDING))
        )
    before = image_names(node)
    root = node.containerd_root
    # fill the writable layer until the image filesystem is 5 % under the threshold
    stats = os.statvfs(root)
    target = stats.f_bavail * stats.f_frsize - int(0.10 * stats.f_blocks * stats.f_frsize)
    pod = "layer-" + label.replace(" + ", "-").replace(" ", "-")
    fill_pod(node, namespace, pod, "/layer-fill", target // MIB)
    crossed, relieved, freed = watch(
        root,
        0.15,
        lambda: not set(UNUSED) & image_names(node) or pods.get(node.plane, namespace, pod) is None,
    )
    evicted = was_evicted(node, namespace, pod)
    removed = sorted(before - image_names(node))
    node.plane.admin.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}", {"gracePeriodSeconds": 0}
    )
    pods.wait_gone(node.plane, namespace, pod)
    return Outcome(
        f"imagefs, {label}",
        removed,
        evicted,
        freed,
        None if crossed is None or relieved is None else relieved - crossed,
    )


def nodefs_case(node: Node, namespace: str, label: str) -> Outcome:
    stats = os.statvfs(node.nodefs)
    target = stats.f_bavail * stats.f_frsize - int(0.06 * stats.f_blocks * stats.f_frsize)
    pod = "volume-" + label.replace(" + ", "-").replace(" ", "-")
    fill_pod(node, namespace, pod, "/scratch/fill", target // MIB)
    before = image_names(node)
    crossed, relieved, freed = watch(
        node.nodefs, 0.10, lambda: pods.get(node.plane, namespace, pod) is None
    )
    evicted = was_evicted(node, namespace, pod)
    removed = sorted(before - image_names(node))
    node.plane.admin.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}", {"gracePeriodSeconds": 0}
    )
    pods.wait_gone(node.plane, namespace, pod)
    return Outcome(
        f"nodefs, {label}",
        removed,
        evicted,
        freed,
        None if crossed is None or relieved is None else relieved - crossed,
    )


def admitting(node: Node) -> None:
    """Wait for the kubelet to post DiskPressure False (a fresh status): while it is
    True, its admission refuses every new pod ("The node had condition: [DiskPressure]")."""
    beat = node.condition("Ready").get("lastHeartbeatTime")
    deadline = time.monotonic() + 120
    while (
        node.condition("DiskPressure").get("status") != "False"
        or node.condition("Ready").get("lastHeartbeatTime") == beat
    ):
        assert time.monotonic() < deadline, "the kubelet's DiskPressure stayed True"
        time.sleep(0.2)


def test_image_reclaim_first_and_emptydir_eviction_beside_the_kubelet(
    node: Node, namespace: str
) -> None:
    outcomes = []
    thresholds = "imagefs.available<15%,nodefs.available<10%"
    # the kubelet admits pods again 5 s after its last disk pressure (default 5 min)
    with node.reconfigured(evictionPressureTransitionPeriod="5s"):
        with agents.running(node, [f"--eviction-hard={thresholds}"], name="disk-agent") as agent:
            agents.wait_ready(agent)
            admitting(node)
            with_agent = imagefs_case(node, namespace, "kubelet + agent")
            outcomes.append(with_agent)
            admitting(node)
            volume = nodefs_case(node, namespace, "kubelet + agent")
            outcomes.append(volume)
            assert agent.refused() == []
        admitting(node)
        outcomes.append(imagefs_case(node, namespace, "kubelet alone"))
        admitting(node)
        outcomes.append(nodefs_case(node, namespace, "kubelet alone"))
    print()
    print("\n".join(str(outcome) for outcome in outcomes))
    # beside the kubelet, the agent reclaimed unused images first (oldest first, only
    # as many as threshold + minimum reclaim needs), evicted nobody, kept the sandbox
    # image, and did it within a few of its cycles
    named = [i for i in with_agent.images_removed if not i.startswith("sha256:")]
    assert named and set(named) <= set(UNUSED), with_agent
    assert not with_agent.evicted, with_agent
    assert images.PAUSE in image_names(node)
    assert with_agent.crossing_to_relief is not None and with_agent.crossing_to_relief < 5
    # the emptyDir's pod is the one thing to give the space back: evicted, quickly
    assert volume.evicted and volume.images_removed == []
    assert volume.crossing_to_relief is not None and volume.crossing_to_relief < 10
