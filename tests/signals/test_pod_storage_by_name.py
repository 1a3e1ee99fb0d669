"""Per-container and per-volume figures of the pod storage scan, which the local-storage
limit checks compare with the containers' ``ephemeral-storage`` limits and the
emptyDir ``sizeLimit`` s: containers named from their termination-message mounts, logs
by container directory, emptyDir usage by volume name."""

from __future__ import annotations

import json

import pytest

from nodeagent.cli import main
from nodeagent.k8s.pods import QOSClass
from nodeagent.model import ContainerUsage, PodUID
from nodeagent.signals import parse
from nodeagent.signals.cgroups import PodCgroupIndex, detect_cgroups
from nodeagent.signals.pod_storage import PodStorageScanner, disk_usage, disk_usage_by_child
from tests.doubles.host import HostTree, Memory

UID = "0f5b8a2c-1111-4a2b-9c3d-4e5f60718293"


def termination_log_mount(kubelet_root: str, uid: str, container: str) -> str:
    """The mountinfo line of the kubelet's termination-message bind mount."""
    return (
        f"2010 2000 8:1 {kubelet_root}/pods/{uid}/containers/{container}/8c1d2e3f "
        "/dev/termination-log rw,relatime - ext4 /dev/sda1 rw\n"
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (termination_log_mount("/var/lib/kubelet", UID, "app"), "app"),
        # the kubelet root on its own filesystem: the mount root is relative to it
        (termination_log_mount("", UID, "side-car"), "side-car"),
        # another pod's mount, or none at all
        (termination_log_mount("/var/lib/kubelet", "other", "app"), None),
        ("2001 2000 0:312 / /proc rw,nosuid - proc proc rw\n", None),
        # escaped spaces in an unrelated root do not confuse the split
        (
            "7 1 8:1 /a\\040b /mnt rw - ext4 /dev/sda1 rw\n"
            + termination_log_mount("/var/lib/kubelet", UID, "app"),
            "app",
        ),
    ],
)
def test_container_name_from_mountinfo(line: str, expected: str | None) -> None:
    assert parse.container_name_from_mountinfo(line, UID) == expected


def test_scan_reports_each_containers_layer_and_logs_and_each_volume(tree: HostTree) -> None:
    tree.kubepods(Memory(0), limit=None)
    tree.pod(UID, Memory(1), qos=QOSClass.BURSTABLE, containers={"c1": 4242, "c2": 4243, "p": 4244})
    logs = tree.pod_logs(
        "default", "web", UID, {"app/0.log": 3000, "app/1.log": 500, "side/0.log": 100}
    )
    scratch = tree.empty_dir(UID, "scratch", {"blob": 9000})
    app_layer = tree.container_rootfs(4242, "/var/lib/containerd/snapshots/11/fs", {"tmp/x": 7000})
    side_layer = tree.container_rootfs(4243, "/var/lib/containerd/snapshots/12/fs", {"y": 5000})
    pause_layer = tree.container_rootfs(4244, "/var/lib/containerd/snapshots/13/fs", {"z": 1})
    for pid, name in ((4242, "app"), (4243, "side")):
        with open(tree.path(f"/proc/{pid}/mountinfo"), "a") as mountinfo:
            mountinfo.write(termination_log_mount("/var/lib/kubelet", UID, name))

    index = PodCgroupIndex(detect_cgroups(str(tree.path("/sys/fs/cgroup"))))
    index.refresh()
    scanner = PodStorageScanner(
        host_root=str(tree.root),
        proc_dir=str(tree.path("/proc")),
        kubelet_root_dir=str(tree.path("/var/lib/kubelet")),
        pod_logs_dir=str(tree.path("/var/log/pods")),
    )
    pod = scanner.scan(index.pods, now=0.0).pods[PodUID(UID)]

    assert pod.containers == {
        "app": ContainerUsage(
            rootfs=disk_usage(str(app_layer)).bytes, logs=disk_usage(str(logs / "app")).bytes
        ),
        "side": ContainerUsage(
            rootfs=disk_usage(str(side_layer)).bytes, logs=disk_usage(str(logs / "side")).bytes
        ),
    }
    # the pause container's layer has no name but still counts in the pod's total
    assert pod.rootfs == (
        disk_usage(str(app_layer)) + disk_usage(str(side_layer)) + disk_usage(str(pause_layer))
    )
    assert pod.logs == disk_usage(str(logs))  # the per-container split changes no total
    assert pod.volumes == {"scratch": disk_usage(str(scratch)).bytes}
    fields = pod.usage_fields()
    assert fields["containers"] == pod.containers and fields["volumes"] == pod.volumes


def test_disk_usage_by_child_adds_up_to_disk_usage(tree: HostTree) -> None:
    top = tree.pod_logs("ns", "p", "u", {"a/0.log": 4096, "a/deep/x": 10, "b/0.log": 1, "stray": 7})
    total, children = disk_usage_by_child(str(top))
    assert total == disk_usage(str(top))
    assert set(children) == {"a", "b"}
    assert children["a"] == disk_usage(str(top / "a"))


def test_nodeagent_signals_json_carries_each_containers_and_volumes_figures(
    tree: HostTree, capsys: pytest.CaptureFixture[str]
) -> None:
    tree.proc()
    tree.root_memory(Memory(1 << 30))
    tree.kubepods(Memory(0), limit=None)
    tree.pod(UID, Memory(1), containers={"c1": 4242})
    logs = tree.pod_logs("default", "web", UID, {"app/0.log": 3000})
    scratch = tree.empty_dir(UID, "scratch", {"blob": 9000})
    layer = tree.container_rootfs(4242, "/var/lib/containerd/snapshots/11/fs", {"x": 7000})
    with open(tree.path("/proc/4242/mountinfo"), "a") as mountinfo:
        mountinfo.write(termination_log_mount("/var/lib/kubelet", UID, "app"))
    assert main(["signals", "--output", "json", "--host-root", str(tree.root)]) == 0
    pod = json.loads(capsys.readouterr().out)["pods"][UID]
    assert pod["containers"] == {
        "app": {
            "rootfs": disk_usage(str(layer)).bytes,
            "logs": disk_usage(str(logs / "app")).bytes,
        }
    }
    assert pod["volumes"] == {"scratch": disk_usage(str(scratch)).bytes}
