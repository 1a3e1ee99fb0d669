"""PSI scopes: the system files, the node cgroup's, and why a scope is missing."""

from __future__ import annotations

from pathlib import Path

from nodeagent.model import PsiLine
from nodeagent.signals.cgroups import CgroupVersion
from nodeagent.signals.files import FileReader
from nodeagent.signals.fixtures import HostTree, Memory, Psi
from nodeagent.signals.psi import PsiReader


def test_system_and_node_scopes(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V2)
    tree.cgroup("/node.slice", Memory(1))
    tree.pressure("memory", Psi(some=(1.0, 2.0, 3.0, 4)))
    tree.pressure("memory", Psi(some=(5.0, 6.0, 7.0, 8)), cgroup="/node.slice")
    for resource in ("io", "cpu"):
        tree.pressure(resource, Psi())
    reader = PsiReader(
        proc_dir=str(tree.path("/proc")), node_unified_dir=str(tree.unified_dir("/node.slice"))
    )
    stats, unavailable = reader.read(FileReader())
    assert unavailable == {}
    assert set(stats) == {"memory", "io", "cpu", "node/memory", "node/io", "node/cpu"}
    assert stats["memory"].some == PsiLine(1.0, 2.0, 3.0, 4)
    assert stats["node/memory"].some == PsiLine(5.0, 6.0, 7.0, 8)


def test_missing_and_malformed_scopes_say_why(tmp_path: Path) -> None:
    tree = HostTree(tmp_path, version=CgroupVersion.V1, hybrid=False)
    tree.pressure("memory", Psi())
    tree.path("/proc/pressure/io").write_text("nonsense\n")
    reader = PsiReader(proc_dir=str(tree.path("/proc")), node_unified_dir=None)
    stats, unavailable = reader.read(FileReader())
    assert set(stats) == {"memory"}
    assert "cannot parse" in unavailable["io"]
    assert "No such file" in unavailable["cpu"]
    assert "no cgroup2 hierarchy" in unavailable["node/memory"]
