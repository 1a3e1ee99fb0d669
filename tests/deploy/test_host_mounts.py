"""The DaemonSet's host mounts, rebuilt with the real kernel in a private mount
namespace (``unshare -m``): what the agent can read and what it cannot write.

It shows on this machine why the manifest is written as it is: a read-only bind
leaves submounts writable (a cgroup can be created through it on a cgroup v1 host),
``recursiveReadOnly`` closes that, the read-only host ``/proc`` refuses PSI triggers,
and the container's own ``/proc/pressure`` accepts them. The child joins a PID
namespace of its own unless the DaemonSet sets ``hostPID``: the writable-layer reader
(nodeagent/signals/pod_storage.py) finds a container's process in its cgroup's
``cgroup.procs``, which lists no process outside the reader's PID namespace. Every
mount lives in the child's namespace and vanishes with it; the probe cgroups are
removed at once, the sleeper cgroup in the fixture's ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import files
from tests.observability import tools

CHILD = r"""
import errno, json, os, subprocess, sys

plan, root, sleeper_cgroup = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]

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
def container_mountinfo():
    # As pod_storage does: a process from the container's cgroup, then its mountinfo.
    procs = open(host + "/sys/fs/cgroup" + sleeper_cgroup + "/cgroup.procs").read().split()
    pids = [pid for pid in procs if pid != "0"]
    if not pids:
        raise OSError(errno.ESRCH, "no process visible in cgroup.procs")
    open(host + "/proc/" + pids[0] + "/mountinfo").read()

results["container_mountinfo"] = attempt(container_mountinfo)
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


def sleeper_cgroup_parent() -> Path:
    """Where a container-like cgroup is made: the v1 memory hierarchy, else cgroup2."""
    memory = Path("/sys/fs/cgroup/memory")
    return memory if memory.is_dir() else Path("/sys/fs/cgroup")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a mount namespace and bind mounts")
    unshare = tools.require("unshare")
    if shutil.which("mount") is None:
        pytest.skip("mount (util-linux) is not installed")
    root = tmp_path_factory.mktemp("container-root")
    # Stands for a container: a process in a cgroup of its own.
    cgroup = sleeper_cgroup_parent() / f"nodeagent-deploy-probe-{os.getpid()}"
    cgroup.mkdir()
    sleeper = None
    try:
        sleeper = subprocess.Popen(["sleep", "60"])
        (cgroup / "cgroup.procs").write_text(str(sleeper.pid))
        host_pid = files.one("DaemonSet")["spec"]["template"]["spec"].get("hostPID", False)
        namespaces = ["-m", "--propagation", "private"] + ([] if host_pid else ["-p", "-f"])
        done = tools.run(
            [
                unshare,
                *namespaces,
                sys.executable,
                "-c",
                CHILD,
                json.dumps(mount_plan()),
                str(root),
                "/" + str(cgroup.relative_to("/sys/fs/cgroup")),
            ]
        )
        assert done.returncode == 0, done.stderr
        parsed: dict[str, str] = json.loads(done.stdout)
        yield parsed
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        cgroup.rmdir()


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
def test_the_agent_finds_container_processes_for_their_writable_layers(
    results: dict[str, str],
) -> None:
    """Per-pod ephemeral storage includes each container's writable layer, found from
    one of its processes: without the host's PID namespace there is none to find, and
    the agent would rank pods for disk pressure without it (and report itself degraded
    on every node)."""
    assert results["container_mountinfo"] == "ok"


@pytest.mark.kernel
def test_recursive_read_only_closes_the_cgroup_submounts(results: dict[str, str]) -> None:
    if "new_cgroup_plain" not in results:
        pytest.skip("no cgroup v1 memory controller mounted at /sys/fs/cgroup/memory")
    assert results["new_cgroup_recursive"] == "EROFS"
    if Path("/sys/fs/cgroup/memory").is_mount():
        # A plain read-only bind of /sys/fs/cgroup does not cover the controller.
        assert results["new_cgroup_plain"] == "ok"
