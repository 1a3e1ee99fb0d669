"""Node-level reclaim in the agent's loop, in virtual time, with the in-memory runtime."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from tests.agent.rig import Rig, pod
from tests.doubles.cri import FakeRuntime
from tests.eviction.builders import policy
from tests.reclaim.test_plan import container
from tests.reclaim.test_reclaimer import runtime

MIB = 1 << 20


def disk_pressure_rig(tmp_path: Path, fake: FakeRuntime, **settings: object) -> Rig:
    """nodefs (the fixture host, on this machine's disk) always below its threshold; the
    fake runtime frees nothing, so reclaim is never enough."""
    rig = Rig(
        tmp_path,
        settings={"eviction_hard": {"nodefs.available": "1Ei"}, **settings},
        container_runtime=fake,
    )
    victim = pod("victim")
    rig.add_pod(victim, 64 * MIB)
    rig.pods.set([victim])
    return rig


def reclaims(fake: FakeRuntime) -> int:
    return len(fake.removed("list_sandboxes"))


def test_one_reclaim_per_interval_and_eviction_when_not_enough(tmp_path: Path) -> None:
    fake = runtime()
    rig = disk_pressure_rig(tmp_path, fake)
    first = rig.cycle()
    assert first is not None and first.decision.node_reclaim_result is not None
    assert not first.decision.node_reclaim_result.enough
    assert fake.removed("remove_container") == ["old", "mid"]
    assert rig.evicted() == [("victim", 1)]
    results = rig.run_for(9.0)
    assert reclaims(fake) == 1  # the fs poll runs every 500 ms; reclaim waits 10 s
    assert all(r.decision.node_reclaim_result is None for r in results)
    rig.run_for(1.5)
    assert reclaims(fake) == 2


def test_dry_run_reclaims_nothing_and_reports_what_it_would(tmp_path: Path) -> None:
    fake = runtime()
    rig = disk_pressure_rig(tmp_path, fake, dry_run=True)
    result = rig.cycle()
    assert result is not None
    reclaimed = result.decision.node_reclaim_result
    assert reclaimed is not None and reclaimed.dry_run
    assert (reclaimed.containers_removed, reclaimed.images_removed) == (2, 2)  # b, c
    assert not fake.removed("remove_container") and not fake.removed("remove_image")


def test_reclaim_off_and_memory_pressure_never_touch_the_runtime(tmp_path: Path) -> None:
    fake = runtime()
    rig = disk_pressure_rig(tmp_path, fake, node_reclaim=False)
    rig.run_for(2.0)
    assert rig.evicted() == [("victim", 1)]
    memory = runtime()
    rig = Rig(tmp_path / "memory", container_runtime=memory)
    rig.set_node_usage(15 * 1024 * MIB + 512 * MIB)  # memory.available < 1Gi
    victim = pod("victim")
    rig.add_pod(victim, 512 * MIB)
    rig.pods.set([victim])
    rig.run_for(2.0)
    assert rig.evicted() == [("victim", 1)]
    assert fake.calls == [] and memory.calls == []


def test_an_unreachable_runtime_degrades_reclaim_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every CRI call fails: the cycle goes on to evict, the reason is logged and exported
    as the ``node-reclaim`` component's degradation, and cleared once the runtime answers."""
    fake = runtime()
    listings = ("list_sandboxes", "list_containers", "list_images")
    fake.failures.update(dict.fromkeys(listings, "UNAVAILABLE: no socket"))
    rig = disk_pressure_rig(tmp_path, fake)
    with caplog.at_level(logging.WARNING, logger="nodeagent.reclaim"):
        result = rig.cycle()
    assert result is not None
    reclaimed = result.decision.node_reclaim_result
    assert reclaimed is not None and not reclaimed.enough
    assert rig.evicted() == [("victim", 1)]
    assert any("UNAVAILABLE: no socket" in r.getMessage() for r in caplog.records)
    degraded = 'nodeagent_component_degraded{component="node-reclaim",reason="CRI '
    assert degraded in rig.metrics.exposition().decode()
    fake.failures.clear()
    rig.run_for(11.0)  # the next reclaim, past nodeReclaimInterval, reaches the runtime
    assert 'component="node-reclaim"' not in rig.metrics.exposition().decode()


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")
def test_pressure_back_soon_after_an_enough_reclaim_is_reclaimed_again(tmp_path: Path) -> None:
    """``nodeReclaimInterval`` spaces reclaims while a pod evicted after one that was not
    enough terminates; after a reclaim that was enough no pod is terminating, and disk
    pressure back a second later is reclaimed again, not met by an eviction (the kubelet
    reclaims before every disk eviction)."""
    fake = runtime()
    rig = disk_pressure_rig(
        tmp_path, fake, nodefs_path="/var/lib/kubelet", imagefs_path="/var/lib/kubelet"
    )
    disk = rig.host.root / "var" / "lib" / "kubelet"
    disk.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", disk], check=True)
    try:
        ballast = disk / "ballast"
        threshold = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - 4 * MIB
        rig.loop.policy = policy(
            eviction_hard={"nodefs.available": f"{threshold // 1024}Ki"},
            eviction_minimum_reclaim={"nodefs.available": "1Mi"},
        )
        ballast.write_bytes(bytes(8 * MIB))  # pressure: 4 MiB below the threshold
        fake.on_remove = lambda _: ballast.unlink(missing_ok=True)  # reclaim frees it
        first = rig.cycle()
        assert first is not None and first.decision.node_reclaim_result is not None
        assert first.decision.node_reclaim_result.enough
        ballast.write_bytes(bytes(8 * MIB))  # a second later the disk fills again
        fake.containers.extend(
            [container("old2", created=4, name="job"), container("new2", created=5, name="job")]
        )
        rig.run_for(1.0)
        assert reclaims(fake) == 2
        assert "old2" not in [c.id for c in fake.containers]
        assert rig.evicted() == []
    finally:
        subprocess.run(["umount", disk], check=True)
