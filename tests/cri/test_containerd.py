"""Node-level reclaim against a real containerd (Debian's, CRI plugin) the tests start.

containerd's root is on a small tmpfs mounted as the image filesystem; its images are
tarballs built by the tests and imported with ``ctr``; pods are host-network sandboxes
made through the CRI, their containers run a program that exits at once. The agent
speaks to it only through :class:`~nodeagent.cri.client.GrpcRuntime` on the socket.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.agent.config import load_config
from nodeagent.base.clock import FakeClock
from nodeagent.cri.client import ContainerState
from nodeagent.eviction.layout import RECLAIM_CONTAINERS, RECLAIM_IMAGES
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.model import FsLayout, PodUID, Signal
from nodeagent.reclaim.reclaimer import NodeReclaimer
from nodeagent.signals.collector import SignalCollector, SignalGroup
from tests.agent.rig import Rig, pod
from tests.cri import images
from tests.cri.containerd import (
    PINNED,
    SANDBOX_IMAGE,
    Containerd,
    MiB,
    available,
    free_bytes,
    run_app_three_times,
    start,
    stop,
)

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.skipif(available() is not None, reason=str(available())),
]


def test_the_client_speaks_cri_v1_to_containerd(containerd: Containerd) -> None:
    runtime = containerd.runtime
    assert runtime is not None
    version = runtime.version()
    assert (version.runtime_name, version.runtime_api_version) == ("containerd", "v1")
    app = containerd.build_and_import("nodeagent.test/app:1", padding=MiB)
    [container] = run_app_three_times(containerd, "nodeagent.test/app:1")[-1:]
    images = {i.id: i for i in runtime.list_images()}
    assert images[app].repo_tags == ("nodeagent.test/app:1",)
    assert images[app].size > MiB
    listed = {c.id: c for c in runtime.list_containers()}
    assert listed[container].state is ContainerState.EXITED
    assert listed[container].name == "app" and listed[container].attempt == 2
    assert app in listed[container].image_refs
    [sandbox] = runtime.list_sandboxes()
    assert (sandbox.pod_uid, sandbox.pod_name, sandbox.ready) == ("uid-p1", "p1", True)
    fs_info = runtime.image_fs_info()
    [image_fs] = fs_info.image_filesystems
    assert image_fs.mountpoint.startswith(str(containerd.root))
    assert image_fs.used_bytes is not None  # sampled every 10 s by containerd


def test_reclaim_removes_dead_containers_and_unused_images_oldest_first(
    containerd: Containerd,
) -> None:
    runtime = containerd.runtime
    assert runtime is not None
    reclaimer = NodeReclaimer(runtime, clock=FakeClock(), dry_run=False, pinned_images=PINNED)
    app = containerd.build_and_import("nodeagent.test/app:1", padding=MiB)
    keep = containerd.build_and_import("nodeagent.test/keep:1", padding=MiB)
    old = containerd.build_and_import("nodeagent.test/old:1", padding=MiB)
    reclaimer.inventory(1.0)
    newer = containerd.build_and_import("nodeagent.test/newer:1", padding=MiB)
    reclaimer.inventory(2.0)
    attempts = run_app_three_times(containerd, "nodeagent.test/app:1")
    before = free_bytes(containerd.imagefs)

    # A need the oldest unused image covers (and does: nothing is needed after it): only
    # it goes, with the dead containers.
    needs = iter((1, 0))
    first = reclaimer.reclaim((RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: next(needs))
    assert [c.id for c in first.containers] == attempts[:2]
    assert [i.id for i in first.images] == [old]
    assert first.errors == ()
    containers = runtime.list_containers()
    assert [c.id for c in containers] == attempts[2:]
    assert {i.id for i in runtime.list_images()} >= {app, keep, newer}
    assert old not in {i.id for i in runtime.list_images()}

    # Every unused image: the newer one goes; the image the kept exited container uses,
    # the pinned one and the sandbox image stay.
    second = reclaimer.reclaim((RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: None)
    assert second.containers == ()
    assert [i.id for i in second.images] == [newer]
    remaining = {tag for i in runtime.list_images() for tag in i.repo_tags}
    assert remaining == {"nodeagent.test/app:1", "nodeagent.test/keep:1", SANDBOX_IMAGE}
    assert free_bytes(containerd.imagefs) - before >= 2 * MiB


def test_dry_run_removes_nothing(containerd: Containerd) -> None:
    runtime = containerd.runtime
    assert runtime is not None
    containerd.build_and_import("nodeagent.test/app:1")
    unused = containerd.build_and_import("nodeagent.test/old:1")
    attempts = run_app_three_times(containerd, "nodeagent.test/app:1")
    images_before = runtime.list_images()
    reclaimer = NodeReclaimer(runtime, clock=FakeClock(), dry_run=True, pinned_images=PINNED)
    report = reclaimer.reclaim((RECLAIM_CONTAINERS, RECLAIM_IMAGES), image_need=lambda: None)
    assert [c.id for c in report.containers] == attempts[:2]
    assert [i.id for i in report.images] == [unused]
    assert len(runtime.list_containers()) == 3
    assert set(runtime.list_images()) == set(images_before)


# --- the agent, with its nodefs and imagefs on containerd's filesystem --------------------


def rig_on_containerd(tmp_path: Path, nodefs_path: str) -> Iterator[tuple[Rig, Containerd]]:
    """A rig whose host has containerd's tmpfs at /var/lib/containerd (imagefs), nodefs
    at ``nodefs_path``, pod p1's three exited containers, and pod ``victim`` in the API."""
    runtime = start(tmp_path / "host" / "var" / "lib" / "containerd")
    try:
        runtime.build_and_import("nodeagent.test/app:1")
        run_app_three_times(runtime, "nodeagent.test/app:1")
        rig = Rig(
            tmp_path,
            settings={
                "nodefs_path": nodefs_path,
                "imagefs_path": "/var/lib/containerd",
                "container_runtime_endpoint": runtime.endpoint,
                "pinned_images": list(PINNED),
            },
        )
        victim = pod("victim")
        rig.add_pod(victim, 64 * MiB)
        rig.pods.set([victim])
        yield rig, runtime
    finally:
        stop(runtime)


@pytest.fixture
def agent_on_containerd(tmp_path: Path) -> Iterator[tuple[Rig, Containerd]]:
    """Single filesystem: nodefs and imagefs are containerd's tmpfs."""
    yield from rig_on_containerd(tmp_path, "/var/lib/containerd")


@pytest.fixture
def agent_on_dedicated_imagefs(tmp_path: Path) -> Iterator[tuple[Rig, Containerd]]:
    """Dedicated imagefs: nodefs on the host's disk, imagefs on containerd's tmpfs."""
    yield from rig_on_containerd(tmp_path, "/")


def pull_three_unused_images(rig: Rig, runtime: Containerd) -> list[str]:
    """Three unused 4 MiB images, arriving one per second as the agent's inventory sees
    them, in *descending* id order: the oldest has the largest id, so removing by age and
    removing by id disagree. Returns their tags, oldest first."""
    built = {}
    for n in range(3):
        tag = f"nodeagent.test/unused-{n}:1"
        tarball = images.build_image(
            runtime.base / f"unused-{n}.tar", tag, program=images.EXIT_PROGRAM, padding=4 * MiB
        )
        built[images.image_id(tarball)] = (tag, tarball)
    reclaimer = rig.loop.reclaimer
    assert reclaimer is not None
    order = [built[image_id] for image_id in sorted(built, reverse=True)]
    for _, tarball in order:
        runtime.import_image(tarball)
        reclaimer.inventory(rig.clock.now())  # what the inventory thread does
        rig.clock.advance(1.0)
    return [tag for tag, _ in order]


def disk_threshold(
    rig: Rig, runtime: Containerd, above_free: int, signal: str = "nodefs.available"
) -> None:
    """``signal`` hard at containerd's filesystem's free space plus ``above_free``, with
    1Mi of minimum reclaim."""
    threshold = free_bytes(runtime.imagefs) + above_free
    rig.loop.policy = EvictionPolicy.from_settings(
        load_config(
            overrides={
                "eviction_hard": {signal: f"{threshold // 1024}Ki"},
                "eviction_minimum_reclaim": {signal: "1Mi"},
            },
            environ={},
        )
    )


def test_reclaim_ends_disk_pressure_without_evicting(
    agent_on_containerd: tuple[Rig, Containerd],
) -> None:
    rig, runtime = agent_on_containerd
    oldest, *newer = pull_three_unused_images(rig, runtime)
    disk_threshold(rig, runtime, above_free=2 * MiB)
    result = rig.cycle()
    assert result is not None
    decision = result.decision
    assert Signal.NODEFS_AVAILABLE in {t.signal for t in decision.thresholds_met}
    reclaimed = decision.node_reclaim_result
    assert reclaimed is not None
    assert reclaimed.enough and decision.evictions == ()
    # Two dead containers, and of the unused images only the oldest: its 4 MiB is what
    # the 3 MiB gap (2 MiB + 1Mi minimum reclaim) needed.
    assert (reclaimed.containers_removed, reclaimed.images_removed) == (2, 1)
    assert reclaimed.bytes_reclaimed >= 3 * MiB
    assert runtime.runtime is not None
    tags = {t for i in runtime.runtime.list_images() for t in i.repo_tags}
    assert oldest not in tags
    assert set(newer) <= tags
    rig.run_for(2.0)
    assert rig.evicted() == []
    exposition = rig.metrics.exposition().decode()
    assert 'nodeagent_node_reclaims_total{result="enough"} 1.0' in exposition
    assert 'nodeagent_node_reclaim_removed_total{kind="containers"} 2.0' in exposition
    assert 'nodeagent_node_reclaim_removed_total{kind="images"} 1.0' in exposition


def test_pods_are_evicted_when_reclaim_is_not_enough(
    agent_on_containerd: tuple[Rig, Containerd],
) -> None:
    rig, runtime = agent_on_containerd
    pull_three_unused_images(rig, runtime)
    disk_threshold(rig, runtime, above_free=512 * MiB)  # more than the whole disk
    result = rig.cycle()
    assert result is not None
    reclaimed = result.decision.node_reclaim_result
    assert reclaimed is not None and not reclaimed.enough
    assert (reclaimed.containers_removed, reclaimed.images_removed) == (2, 3)
    assert [e.pod.uid for e in result.decision.evictions] == [PodUID("uid-victim")]
    assert rig.evicted() == [("victim", 1)]
    assert 'nodeagent_node_reclaims_total{result="not_enough"} 1.0' in (
        rig.metrics.exposition().decode()
    )


@pytest.mark.parametrize(
    ("signal", "reclaims"),
    [
        pytest.param("imagefs.available", True, id="imagefs-pressure-reclaims"),
        pytest.param("nodefs.available", False, id="nodefs-pressure-goes-straight-to-eviction"),
    ],
)
def test_a_dedicated_imagefs_reclaims_only_for_imagefs_pressure(
    agent_on_dedicated_imagefs: tuple[Rig, Containerd], signal: str, reclaims: bool
) -> None:
    """nodefs on the host's disk, imagefs on containerd's tmpfs: images and writable
    layers live on imagefs, so reclaim relieves imagefs and, as in the kubelet, nodefs
    pressure goes straight to eviction."""
    rig, runtime = agent_on_dedicated_imagefs
    pull_three_unused_images(rig, runtime)
    if signal == "nodefs.available":
        threshold = free_bytes(rig.host.root) + 512 * MiB
        rig.loop.policy = EvictionPolicy.from_settings(
            load_config(overrides={"eviction_hard": {signal: f"{threshold >> 20}Mi"}}, environ={})
        )
    else:
        disk_threshold(rig, runtime, above_free=2 * MiB, signal=signal)
    result = rig.cycle()
    assert result is not None
    assert result.observations.fs_layout is FsLayout.DEDICATED_IMAGEFS
    reclaimed = result.decision.node_reclaim_result
    assert (reclaimed is not None) is reclaims
    assert runtime.runtime is not None
    assert (len(runtime.runtime.list_containers()) == 1) is reclaims
    assert bool(rig.evicted()) is not reclaims


def test_imagefs_is_where_containerd_says_when_no_path_is_configured(
    containerd: Containerd, tmp_path: Path
) -> None:
    """No ``imagefsPath``: imagefs is the filesystem of containerd's ImageFsInfo
    mountpoint (its tmpfs here), apart from nodefs, so the layout is a dedicated imagefs."""
    runtime = containerd.runtime
    assert runtime is not None
    with SignalCollector(
        nodefs_path=tmp_path, imagefs_path=None, image_fs_info=runtime.image_fs_info
    ) as collector:
        observations = collector.collect(1.0, {SignalGroup.FILESYSTEMS})
    imagefs = observations.value(Signal.IMAGEFS_AVAILABLE)
    assert imagefs is not None
    vfs = os.statvfs(containerd.imagefs)
    assert (imagefs.available, imagefs.capacity) == (
        vfs.f_bavail * vfs.f_frsize,
        vfs.f_blocks * vfs.f_frsize,
    )
    assert "from CRI ImageFsInfo" in imagefs.source and str(containerd.root) in imagefs.source
    assert observations.fs_layout is FsLayout.DEDICATED_IMAGEFS
