"""`nodeagent signals`: the JSON document's exact shape, and a table people can read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.cli import main
from nodeagent.k8s.pods import QOSClass
from tests.doubles.host import GIB, MIB, HostTree, Memory, Psi

SIGNAL_NAMES = [
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
]


@pytest.fixture
def host(tree: HostTree) -> HostTree:
    tree.proc(mem_total=8 * GIB, tasks=100, pid_max=32768)
    tree.root_memory(Memory(3 * GIB, inactive_file=1 * GIB, active_file=512 * MIB))
    tree.kubepods(Memory(1 * GIB), limit=6 * GIB)
    tree.pod("uid-1", Memory(300 * MIB, active_file=100 * MIB), qos=QOSClass.BURSTABLE, tasks=3)
    for resource in ("memory", "io", "cpu"):
        tree.pressure(resource, Psi(some=(1.25, 0.5, 0.25, 42)))
    tree.path("/var/lib/kubelet/pods").mkdir(parents=True)  # no imagefs dir: unavailable
    return tree


NO_RUNTIME = "unix:///nonexistent/nodeagent-test.sock"
"""The fixture host has no container runtime to ask where imagefs is."""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["signals", "--container-runtime-endpoint", NO_RUNTIME, *argv]) == 0
    return capsys.readouterr().out


def test_json_document(host: HostTree, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(run(capsys, "--output", "json", "--host-root", str(host.root)))
    signals = document["signals"]
    assert list(signals) == SIGNAL_NAMES
    # the kubelet's figures, and beside them the clean active page cache they count as used
    assert signals["memory.available"] == {
        "available": 6 * GIB,
        "capacity": 8 * GIB,
        "activeFile": 512 * MIB,
    }
    assert signals["allocatableMemory.available"] == {
        "available": 5 * GIB,
        "capacity": 6 * GIB,
        "activeFile": 0,
    }
    assert signals["pid.available"] == {"available": 32668, "capacity": 32768}
    assert set(signals["nodefs.available"]) == {"available", "capacity"}
    imagefs = signals["imagefs.available"]["unavailable"]
    assert imagefs.startswith(f"path {host.root}/var/lib/containerd does not exist; ")
    assert "CRI ImageFsInfo: UNAVAILABLE" in imagefs and NO_RUNTIME in imagefs
    for value in signals.values():
        assert set(value) - {"activeFile"} in ({"available", "capacity"}, {"unavailable"})
        assert all(isinstance(number, int) for key, number in value.items() if key != "unavailable")
    assert document["pods"]["uid-1"]["memory"] == 300 * MIB
    assert document["pods"]["uid-1"]["activeFile"] == 100 * MIB
    assert document["pods"]["uid-1"]["processes"] == 3
    assert document["pods"]["uid-1"]["qos"] == "Burstable"
    assert document["psi"]["memory"]["some"] == {
        "avg10": 1.25,
        "avg60": 0.5,
        "avg300": 0.25,
        "total": 42,
    }
    assert document["fsLayout"] == "single"
    assert document["swap"] is None
    assert "memory.available" in document["sources"]
    assert document["degraded"]["imagefs.available"] == imagefs


def test_table(host: HostTree, capsys: pytest.CaptureFixture[str]) -> None:
    table = run(capsys, "--host-root", str(host.root))
    lines = table.splitlines()
    assert lines[0].split() == ["SIGNAL", "AVAILABLE", "CAPACITY", "FREE", "SOURCE"]
    memory = next(line for line in lines if line.startswith("memory.available"))
    assert "6.0GiB" in memory
    assert "8.0GiB" in memory
    assert "75.0%" in memory
    assert "pid.available" in table
    assert "32,668" in table
    imagefs = next(line for line in lines if line.startswith("imagefs.available"))
    assert "unavailable: path" in imagefs
    assert "PODS (1)" in table
    assert "uid-1" in table
    assert "Burstable" in table
    assert "300.0MiB" in table
    assert "PSI" in table


def test_configuration_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["signals", "--host-root", str(tmp_path / "absent")]) == 2
    assert "hostRoot" in capsys.readouterr().err
    assert main(["signals", "--node-cgroup", "/../x"]) == 2
    assert "nodeCgroup" in capsys.readouterr().err


def test_works_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(run(capsys, "-o", "json"))
    assert list(document["signals"]) == SIGNAL_NAMES
    memory = document["signals"]["memory.available"]
    assert 0 < memory["available"] <= memory["capacity"]


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head` exiting before the report is written
    try:
        process = subprocess.run(
            [sys.executable, "-m", "nodeagent", "signals", "--host-root", str(tmp_path)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert process.stderr == ""
    assert process.returncode == 0
