"""Per-pod ephemeral storage: directory walks checked against du and find, and the
scanner's attribution of logs, emptyDir volumes and writable layers to pods."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent.k8s.pods import QOSClass
from nodeagent.model import PodUID
from nodeagent.signals.cgroups import PodCgroupIndex, detect_cgroups
from nodeagent.signals.pod_storage import DiskUsage, PodStorageScanner, disk_usage
from tests.doubles.host import HostTree, Memory


def du_and_find(path: Path) -> DiskUsage:
    """The same figures from GNU coreutils and findutils, independently."""
    used = subprocess.run(
        ["du", "-s", "-x", "-B1", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    found = subprocess.run(
        ["find", str(path), "-xdev", "-printf", "%i\\n"], capture_output=True, text=True, check=True
    ).stdout.split()
    return DiskUsage(int(used), len(set(found)))


needs_coreutils = pytest.mark.skipif(
    shutil.which("du") is None or shutil.which("find") is None, reason="needs du and find"
)

tree_spec = st.dictionaries(
    st.lists(st.sampled_from(["a", "b", "c", "logs", "0.log"]), min_size=1, max_size=3).map(
        "/".join
    ),
    st.integers(min_value=0, max_value=20_000),
    max_size=12,
)


@needs_coreutils
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(files=tree_spec)
def test_disk_usage_agrees_with_du_and_find(tmp_path: Path, files: dict[str, int]) -> None:
    root = tmp_path / f"walk-{abs(hash(tuple(files.items())))}"
    root.mkdir()
    for name, size in files.items():
        target = root / name
        if any(parent.is_file() for parent in target.parents):
            continue  # "a" is already a file: cannot hold "a/b"
        if target.is_dir():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"x" * size)
    assert disk_usage(str(root)) == du_and_find(root)
    shutil.rmtree(root)


@needs_coreutils
def test_hard_links_count_once_and_sparse_files_count_what_they_allocate(tmp_path: Path) -> None:
    (tmp_path / "data").write_bytes(b"y" * 10_000)
    os.link(tmp_path / "data", tmp_path / "link")
    with open(tmp_path / "sparse", "wb") as sparse:
        sparse.truncate(1 << 30)  # 1 GiB apparent size, nothing allocated
    usage = disk_usage(str(tmp_path))
    assert usage == du_and_find(tmp_path)
    assert usage.inodes == 3  # the directory, data (once), sparse
    assert usage.bytes < 1 << 20


def test_disk_usage_of_a_single_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"z" * 5000)
    assert disk_usage(str(tmp_path / "f")) == DiskUsage(os.lstat(tmp_path / "f").st_blocks * 512, 1)


def test_disk_usage_of_a_missing_path_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        disk_usage(str(tmp_path / "nope"))


def scanner_for(tree: HostTree) -> PodStorageScanner:
    return PodStorageScanner(
        host_root=str(tree.root),
        proc_dir=str(tree.path("/proc")),
        kubelet_root_dir=str(tree.path("/var/lib/kubelet")),
        pod_logs_dir=str(tree.path("/var/log/pods")),
    )


def test_scanner_attributes_logs_volumes_and_layers_to_pods(tree: HostTree) -> None:
    tree.kubepods(Memory(0), limit=None)
    tree.pod("web", Memory(1), qos=QOSClass.BURSTABLE, containers={"app": 4242, "side": 4243})
    tree.pod("idle", Memory(1), qos=QOSClass.BEST_EFFORT, containers={"sleep": None})
    logs = tree.pod_logs("default", "web-0", "web", {"app/0.log": 3000, "side/0.log": 100})
    cache = tree.empty_dir("web", "cache", {"blob": 9000})
    upper_app = tree.container_rootfs(4242, "/var/lib/containerd/snapshots/11/fs", {"tmp/x": 7000})
    upper_side = tree.container_rootfs(4243, "/var/lib/containerd/snapshots/12/fs", {})
    tree.empty_dir("orphan", "scratch", {"f": 1})  # a pod dir whose cgroup is gone

    index = PodCgroupIndex(detect_cgroups(str(tree.path("/sys/fs/cgroup"))))
    index.refresh()
    scan = scanner_for(tree).scan(index.pods, now=5.0)

    assert scan.time == 5.0
    assert scan.unavailable == {}
    web = scan.pods[PodUID("web")]
    assert web.logs == disk_usage(str(logs))
    assert web.local_volumes == disk_usage(str(cache))
    assert web.rootfs == disk_usage(str(upper_app)) + disk_usage(str(upper_side))
    assert PodUID("idle") not in scan.pods  # nothing found for it: no stats
    orphan = scan.pods[PodUID("orphan")]
    assert orphan.local_volumes is not None
    assert orphan.local_volumes.inodes == 2


def test_pod_without_empty_dirs_uses_no_local_volume_space(tree: HostTree) -> None:
    tree.path("/var/lib/kubelet/pods/plain/volumes/kubernetes.io~secret/token").mkdir(parents=True)
    scan = scanner_for(tree).scan({}, now=0.0)
    assert scan.pods[PodUID("plain")].local_volumes == DiskUsage(0, 0)


def test_unreachable_parts_are_reported_with_reasons(tree: HostTree) -> None:
    tree.kubepods(Memory(0), limit=None)
    # A container whose process lives in another PID namespace shows as PID 0.
    tree.pod("p", Memory(1), containers={"c": 0})
    index = PodCgroupIndex(detect_cgroups(str(tree.path("/sys/fs/cgroup"))))
    index.refresh()
    scan = scanner_for(tree).scan(index.pods, now=0.0)
    assert set(scan.unavailable) == {"logs", "local-volumes", "rootfs"}
    assert "/var/log/pods" in scan.unavailable["logs"]
    assert "host PID namespace" in scan.unavailable["rootfs"]
    assert PodUID("p") not in scan.pods
