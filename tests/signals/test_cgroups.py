"""Finding the cgroup hierarchies, the kubepods cgroup and the pods, without the API."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.k8s.pods import QOSClass
from nodeagent.model import PodUID
from nodeagent.signals.cgroups import (
    CgroupDriver,
    CgroupVersion,
    PodCgroupIndex,
    detect_cgroups,
    missing_kubepods_reason,
    normalize_cgroup,
    pod_uid_from_cgroup_name,
)
from tests.doubles.host import HostTree, Memory


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("/", "/", id="root"),
        pytest.param("", "/", id="empty"),
        pytest.param("mynode.slice", "/mynode.slice", id="relative"),
        pytest.param("/a//b/./c/", "/a/b/c", id="untidy"),
    ],
)
def test_normalize_cgroup(path: str, expected: str) -> None:
    assert normalize_cgroup(path) == expected


def test_normalize_cgroup_refuses_to_escape_the_mount() -> None:
    with pytest.raises(ValueError, match=r"\.\."):
        normalize_cgroup("/kubepods/../../etc")


UID = "0b6e0e0a-1c1f-4d5e-9a0b-1234567890ab"
SYSTEMD_UID = UID.replace("-", "_")


@pytest.mark.parametrize(
    ("name", "prefix", "suffix", "expected"),
    [
        pytest.param(f"pod{UID}", "pod", "", UID, id="cgroupfs"),
        pytest.param(
            f"kubepods-burstable-pod{SYSTEMD_UID}.slice",
            "kubepods-burstable-pod",
            ".slice",
            UID,
            id="systemd-burstable",
        ),
        pytest.param(
            f"kubepods-pod{SYSTEMD_UID}.slice",
            "kubepods-pod",
            ".slice",
            UID,
            id="systemd-guaranteed",
        ),
        pytest.param("kubepods-burstable.slice", "kubepods-pod", ".slice", None, id="qos-parent"),
        pytest.param("burstable", "pod", "", None, id="cgroupfs-qos-parent"),
        pytest.param("pod", "pod", "", None, id="no-uid"),
        pytest.param("memory.stat", "pod", "", None, id="a-file"),
        pytest.param(f"pod{UID}.scope", "pod", "", None, id="dotted"),
    ],
)
def test_pod_uid_from_cgroup_name(
    name: str, prefix: str, suffix: str, expected: str | None
) -> None:
    assert pod_uid_from_cgroup_name(name, prefix, suffix) == expected


@given(st.uuids())
def test_systemd_escaping_round_trips_any_uid(uid: object) -> None:
    text = str(uid)
    name = f"kubepods-besteffort-pod{text.replace('-', '_')}.slice"
    assert pod_uid_from_cgroup_name(name, "kubepods-besteffort-pod", ".slice") == text


def test_detects_v2(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")))
    mount = str(tree.path("/sys/fs/cgroup"))
    assert paths.version is CgroupVersion.V2
    assert paths.memory_root == paths.unified_root == paths.pids_root == mount
    assert paths.node_memory_dir == mount
    assert paths.kubepods_cgroup is None


def test_detects_hybrid_v1(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V1, hybrid=True)
    tree.root_memory(Memory(1))
    mount = str(tree.path("/sys/fs/cgroup"))
    paths = detect_cgroups(mount, node_cgroup="/mynode")
    assert paths.version is CgroupVersion.V1
    assert paths.memory_root == f"{mount}/memory"
    assert paths.unified_root == f"{mount}/unified"
    assert paths.pids_root == f"{mount}/pids"
    assert paths.node_memory_dir == f"{mount}/memory/mynode"
    assert paths.node_unified_dir == f"{mount}/unified/mynode"


def test_detects_pure_v1_without_pids(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V1, hybrid=False, pids_hierarchy=False)
    tree.root_memory(Memory(1))
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")))
    assert paths.version is CgroupVersion.V1
    assert paths.unified_root is None
    assert paths.pids_root is None
    assert paths.node_unified_dir is None


def test_detects_no_memory_controller(tmp_path: Path) -> None:
    paths = detect_cgroups(str(tmp_path))
    assert paths.version is None
    assert paths.node_memory_dir is None


@pytest.mark.parametrize(
    ("version", "driver", "expected"),
    [
        pytest.param(CgroupVersion.V1, CgroupDriver.CGROUPFS, "/kubepods", id="v1-cgroupfs"),
        pytest.param(CgroupVersion.V2, CgroupDriver.SYSTEMD, "/kubepods.slice", id="v2-systemd"),
    ],
)
def test_finds_kubepods(
    tmp_path: Path, version: CgroupVersion, driver: CgroupDriver, expected: str
) -> None:
    tree = HostTree(tmp_path, version=version, driver=driver)
    tree.root_memory(Memory(1))
    tree.kubepods(Memory(0), limit=None)
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")))
    assert paths.kubepods_cgroup == expected
    assert paths.driver is driver


def test_prefers_kubepods_under_the_node_cgroup(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V1)
    tree.root_memory(Memory(1))
    tree.kubepods(Memory(0), limit=None)
    tree.cgroup("/mynode/kubepods", Memory(0))
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")), node_cgroup="/mynode")
    assert paths.kubepods_cgroup == "/mynode/kubepods"


@pytest.mark.parametrize(
    ("node_cgroup", "kubepods"),
    [
        pytest.param("/mynode.slice", "/mynode.slice/mynode-kubepods.slice", id="systemd-root"),
        pytest.param("/a.slice/a-b.slice", "/a.slice/a-b.slice/a-b-kubepods.slice", id="nested"),
        pytest.param("/mynode.slice", "/mynode.slice/kubepods.slice", id="plain-name-in-slice"),
        pytest.param("/mynode", "/mynode/kubepods", id="cgroupfs-root"),
        pytest.param("/mynode.slice", "/kubepods.slice", id="falls-back-to-the-root"),
    ],
)
def test_finds_kubepods_under_a_kubelet_cgroup_root(
    tmp_path: Path, node_cgroup: str, kubepods: str
) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    tree.cgroup(node_cgroup, Memory(0))
    tree.cgroup(kubepods, Memory(0))
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")), node_cgroup=node_cgroup)
    assert paths.kubepods_cgroup == kubepods


def test_pods_under_a_systemd_cgroup_root(tmp_path: Path) -> None:
    # kubelet --cgroup-driver=systemd --cgroup-root=/mynode.slice
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    kubepods = "/mynode.slice/mynode-kubepods.slice"
    tree.cgroup(kubepods, Memory(0))
    pods = {
        f"{kubepods}/mynode-kubepods-pod{SYSTEMD_UID}.slice": QOSClass.GUARANTEED,
        f"{kubepods}/mynode-kubepods-burstable.slice/mynode-kubepods-burstable-pod1.slice": (
            QOSClass.BURSTABLE
        ),
    }
    for cgroup in pods:
        tree.cgroup(cgroup, Memory(1))
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")), node_cgroup="/mynode.slice")
    assert paths.driver is CgroupDriver.SYSTEMD
    index = PodCgroupIndex(paths)
    index.refresh()
    assert {pod.cgroup: pod.qos for pod in index.pods.values()} == pods
    assert set(index.pods) == {UID, "1"}


def test_missing_kubepods_names_every_place_looked_at(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")), node_cgroup="/n.slice")
    reason = missing_kubepods_reason(paths)
    for candidate in ("/n.slice/n-kubepods.slice", "/n.slice/kubepods", "/kubepods.slice"):
        assert candidate in reason
    assert "kubepodsCgroup" in reason


def test_configured_kubepods_wins_over_detection(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    tree.kubepods(Memory(0), limit=None)
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")), kubepods_cgroup="custom/pods")
    assert paths.kubepods_cgroup == "/custom/pods"


def test_index_finds_pods_of_every_qos_class(tree: HostTree) -> None:
    tree.kubepods(Memory(0), limit=None)
    expected = {
        PodUID("aaaaaaaa-0000-0000-0000-000000000001"): QOSClass.GUARANTEED,
        PodUID("bbbbbbbb-0000-0000-0000-000000000002"): QOSClass.BURSTABLE,
        PodUID("cccccccc-0000-0000-0000-000000000003"): QOSClass.BEST_EFFORT,
    }
    for uid, qos in expected.items():
        tree.pod(uid, Memory(1), qos=qos, containers={"c0ffee": None})
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")))
    index = PodCgroupIndex(paths)
    assert index.refresh() == []
    assert {uid: pod.qos for uid, pod in index.pods.items()} == expected
    for uid, pod in index.pods.items():
        assert pod.cgroup == tree.pod_cgroup(uid, expected[uid])
        assert Path(pod.usage_file).is_file()
        assert Path(pod.stat_file).is_file()
        assert pod.pids_file is not None
        assert Path(pod.pids_file).is_file()


def test_index_reports_pods_that_went_away(tree: HostTree) -> None:
    tree.kubepods(Memory(0), limit=None)
    tree.pod("gone", Memory(1), qos=QOSClass.BEST_EFFORT)
    tree.pod("stays", Memory(1), qos=QOSClass.BEST_EFFORT)
    index = PodCgroupIndex(detect_cgroups(str(tree.path("/sys/fs/cgroup"))))
    index.refresh()
    tree.remove_cgroup(tree.pod_cgroup("gone", QOSClass.BEST_EFFORT))
    gone = index.refresh()
    assert [pod.uid for pod in gone] == ["gone"]
    assert list(index.pods) == ["stays"]
    assert index.refresh() == []  # nothing changed since


def test_index_tolerates_missing_qos_parents(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2, driver=CgroupDriver.CGROUPFS)
    tree.cgroup("/kubepods", Memory(0))
    tree.pod("only", Memory(1), qos=QOSClass.GUARANTEED)
    index = PodCgroupIndex(detect_cgroups(str(tree.path("/sys/fs/cgroup"))))
    index.refresh()
    assert list(index.pods) == ["only"]
