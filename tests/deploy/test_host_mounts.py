"""The DaemonSet's host mounts, rebuilt with the real kernel in a private mount
namespace (``unshare -m``): what the agent can read and what it cannot write.

It shows on this machine why the manifest is written as it is: a read-only bind
leaves submounts writable (a cgroup can be created through it on a cgroup v1 host),
``recursiveReadOnly`` closes that, the read-only host ``/proc`` refuses PSI triggers,
and the container's own ``/proc/pressure`` accepts them. Every mount lives in the
child's namespace and vanishes with it; a cgroup created by the probe is removed at
once.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import files
from tests.observability import tools

CHILD = r"""
import errno, json, os, subprocess, sys

plan, root = json.loads(sys.argv[1]), sys.argv[2]

def mount(*args):
    subprocess.run(["mount", *args], check=True, capture_output=True)

def mounts_under(target):
    with open("/proc/self/mountinfo") as info:
        points = [line.split()[4] for line in info]
    return [p for p in points if p == target or p.startswith(target + "/")]

def attempt(action):
    try:
        action()
        return "ok"
    except OSError as exc:
        return errno.errorcode[exc.errno]

for entry in plan:
    target = root + entry["target"]
    os.makedirs(target, exist_ok=True)
    mount("--rbind", entry["source"], target)
    if entry["read_only"]:
        for point in mounts_under(target) if entry["recursive"] else [target]:
            mount("-o", "remount,bind,ro", point)

def psi_trigger(path):
    def arm():
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        try:
            os.write(fd, b"some 150000 2000000\0")
        finally:
            os.close(fd)
    return arm

def new_cgroup(memory_dir):
    def create():
        probe = os.path.join(memory_dir, f"nodeagent-mount-probe-{os.getpid()}")
        os.mkdir(probe)
        os.rmdir(probe)
    return create

results = {}
host = root + "/host"
results["read_meminfo"] = attempt(lambda: open(host + "/proc/meminfo").read())
results["host_psi_trigger"] = attempt(psi_trigger(host + "/proc/pressure/memory"))
results["own_psi_trigger"] = attempt(psi_trigger("/proc/pressure/memory"))
results["write_proc_sys"] = attempt(
    lambda: open(host + "/proc/sys/kernel/pid_max", "w").write("32768")
)
for name, memory in (("recursive", host + "/sys/fs/cgroup/memory"),
                     ("plain", root + "/plain/sys/fs/cgroup/memory")):
    if os.path.isdir(memory):
        results["read_cgroup_" + name] = attempt(
            lambda m=memory: open(m + "/memory.usage_in_bytes").read()
        )
        results["new_cgroup_" + name] = attempt(new_cgroup(memory))
print(json.dumps(results))
"""


def mount_plan() -> list[dict[str, Any]]:
    """The DaemonSet's hostPath mounts whose source exists on this machine, plus the
    cgroup mount once more as a plain (non-recursive) read-only bind to compare."""
    pod = files.one("DaemonSet")["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    plan = []
    for volume in pod["volumes"]:
        if "hostPath" not in volume or not os.path.isdir(volume["hostPath"]["path"]):
            continue
        mount = mounts[volume["name"]]
        plan.append(
            {
                "source": volume["hostPath"]["path"],
                "target": mount["mountPath"],
                "read_only": bool(mount.get("readOnly")),
                "recursive": mount.get("recursiveReadOnly") in ("IfPossible", "Enabled"),
            }
        )
    plan.append(
        {
            "source": "/sys/fs/cgroup",
            "target": "/plain/sys/fs/cgroup",
            "read_only": True,
            "recursive": False,
        }
    )
    return plan


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a mount namespace and bind mounts")
    unshare = tools.require("unshare")
    if shutil.which("mount") is None:
        pytest.skip("mount (util-linux) is not installed")
    root = tmp_path_factory.mktemp("container-root")
    done = tools.run(
        [
            unshare,
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            CHILD,
            json.dumps(mount_plan()),
            str(root),
        ]
    )
    assert done.returncode == 0, done.stderr
    parsed: dict[str, str] = json.loads(done.stdout)
    return parsed


@pytest.mark.kernel
def test_the_agent_reads_the_host(results: dict[str, str]) -> None:
    assert results["read_meminfo"] == "ok"
    if "read_cgroup_recursive" in results:
        assert results["read_cgroup_recursive"] == "ok"


@pytest.mark.kernel
def test_host_proc_is_read_only(results: dict[str, str]) -> None:
    assert results["write_proc_sys"] == "EROFS"
    if not Path("/proc/pressure/memory").exists():
        pytest.skip("this kernel has no PSI (/proc/pressure)")
    assert results["host_psi_trigger"] == "EROFS"
    # Hence the agent arms system PSI triggers on its own /proc/pressure.
    assert results["own_psi_trigger"] == "ok"


@pytest.mark.kernel
def test_recursive_read_only_closes_the_cgroup_submounts(results: dict[str, str]) -> None:
    if "new_cgroup_plain" not in results:
        pytest.skip("no cgroup v1 memory controller mounted at /sys/fs/cgroup/memory")
    assert results["new_cgroup_recursive"] == "EROFS"
    if Path("/sys/fs/cgroup/memory").is_mount():
        # A plain read-only bind of /sys/fs/cgroup does not cover the controller.
        assert results["new_cgroup_plain"] == "ok"
