"""PSI scopes: the system files, the node and kubepods cgroups', and why a scope is
missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodeagent.model import PsiLine
from nodeagent.signals.cgroups import CgroupDriver, CgroupVersion, detect_cgroups
from nodeagent.signals.files import FileReader
from nodeagent.signals.psi import RECHECK_S, PsiReader
from tests.doubles.host import HostTree, Memory, Psi

from .counting import CountingReader


def reader_for(tree: HostTree, node_cgroup: str = "/") -> PsiReader:
    paths = detect_cgroups(str(tree.path("/sys/fs/cgroup")), node_cgroup=node_cgroup)
    return PsiReader(proc_dir=str(tree.path("/proc")), cgroups=paths)


@pytest.mark.parametrize(
    ("version", "driver"),
    [
        pytest.param(CgroupVersion.V2, CgroupDriver.SYSTEMD, id="v2"),
        pytest.param(CgroupVersion.V1, CgroupDriver.SYSTEMD, id="hybrid"),
    ],
)
def test_system_node_and_kubepods_scopes(
    tmp_path: Path, version: CgroupVersion, driver: CgroupDriver
) -> None:
    tree = HostTree(tmp_path, version=version, driver=driver, hybrid=True)
    tree.cgroup("/node.slice", Memory(1))
    tree.cgroup("/node.slice/node-kubepods.slice", Memory(1))
    tree.pressure("memory", Psi(some=(1.0, 2.0, 3.0, 4)))
    tree.pressure("memory", Psi(some=(5.0, 6.0, 7.0, 8)), cgroup="/node.slice")
    tree.pressure(
        "memory",
        Psi(some=(9.0, 10.0, 11.0, 12), full=(0.5, 0.25, 0.75, 13)),
        cgroup="/node.slice/node-kubepods.slice",
    )
    for resource in ("io", "cpu"):
        tree.pressure(resource, Psi())
    stats, unavailable = reader_for(tree, "/node.slice").read(FileReader(), now=0.0)
    assert unavailable == {}
    assert set(stats) == {
        *("memory", "io", "cpu"),
        *("node/memory", "node/io", "node/cpu"),
        *("kubepods/memory", "kubepods/io", "kubepods/cpu"),
    }
    assert stats["memory"].some == PsiLine(1.0, 2.0, 3.0, 4)
    assert stats["node/memory"].some == PsiLine(5.0, 6.0, 7.0, 8)
    assert stats["kubepods/memory"].some == PsiLine(9.0, 10.0, 11.0, 12)
    assert stats["kubepods/memory"].full == PsiLine(0.5, 0.25, 0.75, 13)


def test_missing_and_malformed_scopes_say_why(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V1, hybrid=False)
    tree.pressure("memory", Psi())
    tree.path("/proc/pressure/io").write_text("nonsense\n")
    stats, unavailable = reader_for(tree).read(FileReader(), now=0.0)
    assert set(stats) == {"memory"}
    assert "cannot parse" in unavailable["io"]
    assert "No such file" in unavailable["cpu"]
    for scope in ("node", "kubepods"):
        assert "no cgroup2 hierarchy" in unavailable[f"{scope}/memory"]


def test_kubepods_scope_without_kubepods_says_what_to_configure(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    tree.proc()
    for resource in ("memory", "io", "cpu"):
        tree.pressure(resource, Psi())
    stats, unavailable = reader_for(tree).read(FileReader(), now=0.0)
    assert {"node/memory", "node/io", "node/cpu"} <= stats.keys()
    assert set(unavailable) == {"kubepods/memory", "kubepods/io", "kubepods/cpu"}
    assert "kubepodsCgroup" in unavailable["kubepods/memory"]


def test_hybrid_kubepods_outside_the_cgroup2_hierarchy(tmp_path: Path) -> None:
    # The cgroupfs driver on a hybrid host creates kubepods in the v1 controllers only.
    tree = HostTree(tmp_path, version=CgroupVersion.V1, driver=CgroupDriver.CGROUPFS, hybrid=True)
    tree.kubepods(Memory(0), limit=None)
    kubepods_unified = tree.unified_dir("/kubepods")
    assert kubepods_unified is not None
    shutil.rmtree(kubepods_unified)
    stats, unavailable = reader_for(tree).read(FileReader(), now=0.0)
    assert "node/memory" in stats
    assert f"{kubepods_unified}/memory.pressure" in unavailable["kubepods/memory"]
    assert "No such file" in unavailable["kubepods/memory"]


def test_a_missing_pressure_file_is_looked_for_again_only_after_the_recheck_interval(
    tmp_path: Path,
) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V1, hybrid=False)
    tree.pressure("memory", Psi())
    psi_reader = reader_for(tree)
    files = CountingReader()
    io = str(tree.path("/proc/pressure/io"))
    _, first = psi_reader.read(files, now=0.0)
    for now in (0.5, 1.0, RECHECK_S - 0.1):
        _, unavailable = psi_reader.read(files, now=now)
        assert unavailable["io"] == first["io"]  # still degraded, with its reason
    assert files.asked.count(io) == 1  # opened once, not every cycle
    assert files.asked.count(str(tree.path("/proc/pressure/memory"))) == 4
    tree.pressure("io", Psi(some=(1.0, 2.0, 3.0, 4)))
    stats, unavailable = psi_reader.read(files, now=RECHECK_S)
    assert "io" in stats and "io" not in unavailable  # found again at the re-check
    assert files.asked.count(io) == 2
