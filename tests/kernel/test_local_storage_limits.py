"""Local-storage limits on real filesystems: a pod's directory tree on a small tmpfs
(the kubelet root and log directories), with a memory-backed emptyDir that is a tmpfs
of its own, read by the real collector and judged by the engine. The memory-backed
volume counts against its ``sizeLimit`` but not in the pod's disk total; a container's
log directory counts against its own limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.eviction import engine
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.model import ContainerInfo, EmptyDirVolume, LocalStorageLimit, PodInfo, PodUID
from nodeagent.signals.collector import SignalCollector
from nodeagent.signals.pod_storage import disk_usage
from tests.signals.realkernel import tmpfs

pytestmark = pytest.mark.kernel

UID = PodUID("3a4b5c6d-0000-4000-8000-00000000abcd")
MIB = 1 << 20


def evictions(pod: PodInfo, collector: SignalCollector, now: float) -> list[tuple[str, str]]:
    observations = collector.collect(now)
    decision, _ = engine.evaluate(
        EvictionPolicy(thresholds=()), engine.EngineState(), observations, [pod], now
    )
    return [(str(e.signal), e.message) for e in decision.evictions]


def test_a_real_pod_tree_over_its_limits(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "node", size="16m", nr_inodes=400) as node:
        kubelet = node / "kubelet"
        volumes = kubelet / "pods" / UID / "volumes" / "kubernetes.io~empty-dir"
        (volumes / "scratch").mkdir(parents=True)
        logs = node / "logs" / f"default_web_{UID}" / "app"
        logs.mkdir(parents=True)
        with (
            tmpfs(volumes / "shm", size="4m", nr_inodes=20) as shm,
            SignalCollector(
                host_root="/",
                nodefs_path=node,
                imagefs_path=node,
                kubelet_root_dir=kubelet,
                pod_logs_path=node / "logs",
                pod_storage_scan_interval=1e-9,
            ) as collector,
        ):
            pod = PodInfo(
                "default",
                "web",
                UID,
                containers=(ContainerInfo("app", 2 * MIB),),
                volumes=(
                    EmptyDirVolume("scratch", size_limit=4 * MIB),
                    EmptyDirVolume("shm", "Memory", 1 * MIB),
                ),
            )
            (volumes / "scratch" / "a").write_bytes(b"s" * MIB)
            (shm / "a").write_bytes(b"m" * (MIB // 2))
            (logs / "0.log").write_bytes(b"l" * MIB)
            assert evictions(pod, collector, 1.0) == []

            (logs / "1.log").write_bytes(b"l" * (MIB + 4096))  # app: 2 MiB + 4 KiB of logs
            assert evictions(pod, collector, 2.0) == [
                (
                    "ephemeralcontainerfs.limit",
                    'Container app exceeded its local ephemeral storage limit "2Mi". ',
                )
            ]
            usage = collector.collect(3.0).pods[UID]
            assert usage.logs == disk_usage(str(logs.parent)).bytes
            assert usage.local_volumes == disk_usage(str(volumes / "scratch")).bytes
            assert usage.volumes["shm"] == disk_usage(str(shm)).bytes

            (shm / "b").write_bytes(b"m" * MIB)  # the tmpfs volume passes its 1 MiB limit
            assert evictions(pod, collector, 4.0) == [
                (
                    LocalStorageLimit.EMPTY_DIR.value,
                    'Usage of EmptyDir volume "shm" exceeds the limit "1Mi". ',
                )
            ]
            # memory is not disk: the pod's disk total did not move
            assert collector.collect(5.0).pods[UID].local_volumes == usage.local_volumes
