"""The signals on a real cgroup v2 kernel, against the kernel's own files.

One command runs :mod:`tests.uml.inside_signals` in the guest; each test asserts on part
of its results.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.uml import machine
from tests.uml.conftest import results

pytestmark = [pytest.mark.uml, pytest.mark.slow, pytest.mark.timeout(600)]

MiB = 1 << 20
PAGE_BATCH = 1 * MiB
"""Tolerance between the agent's read and the test's read of a moving figure."""


@pytest.fixture(scope="module")
def signals(guest: machine.Guest) -> dict[str, Any]:
    run = guest.run(machine.python_module("tests.uml.inside_signals"), timeout_s=300)
    found: dict[str, Any] = results(guest, run, "signals")
    return found


def test_the_guest_is_a_cgroup_v2_kernel(signals: dict[str, Any], guest: machine.Guest) -> None:
    assert {"memory", "pids", "cpu", "io"} <= set(signals["controllers"])
    # Debian's user-mode-linux is built without PSI; its amd64 kernel has it.
    assert signals["psi"] is (guest.kernel is not machine.Kernel.UML)
    assert signals["root"]["version"] == "v2"
    assert signals["root"]["kubepods"] is None


@pytest.mark.parametrize("sample", ["before", "with_hog"])
def test_memory_available_on_the_v2_root_is_the_kernels(
    signals: dict[str, Any], sample: str
) -> None:
    """MemTotal - (anon + file - inactive_file) of the root memory.stat, which agrees with
    /proc/meminfo's AnonPages + Buffers + Cached + SwapCached - Inactive(file)."""
    figures = signals["root"][sample]
    agent = figures["agent"]
    assert agent["capacity"] == figures["mem_total"]
    assert "memory.stat: anon + file - inactive_file" in agent["source"]
    kernel = figures["mem_total"] - figures["root_stat_working_set"]
    assert agent["available"] == pytest.approx(kernel, abs=PAGE_BATCH)
    meminfo = figures["mem_total"] - figures["meminfo_working_set"]
    assert agent["available"] == pytest.approx(meminfo, abs=4 * MiB)


def test_a_real_process_takes_its_memory_from_the_root(signals: dict[str, Any]) -> None:
    root = signals["root"]
    taken = root["before"]["agent"]["available"] - root["with_hog"]["agent"]["available"]
    # Its 32 MiB plus the interpreter's own few MiB.
    assert root["hog"] <= taken <= root["hog"] + 12 * MiB


@pytest.mark.parametrize("node_cgroup", ["nested", "outer"])
def test_a_node_cgroup_has_the_smallest_memory_max_up_to_the_root_as_capacity(
    signals: dict[str, Any], node_cgroup: str
) -> None:
    figures = signals["node_cgroup"][node_cgroup]
    limits = signals["node_cgroup"]["limits"]
    # outer.slice has memory.max 160Mi, node.slice below it 200Mi: 160Mi binds both.
    assert figures["agent"]["capacity"] == min(limits.values())
    assert "capacity the cgroup's memory limit" in figures["agent"]["source"]
    assert figures["inactive_file"] >= 7 * MiB  # the 8 MiB file on ext4 is page cache
    expected = figures["agent"]["capacity"] - figures["working_set"]
    assert figures["agent"]["available"] == pytest.approx(expected, abs=PAGE_BATCH)


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_kubepods_and_the_driver_are_detected(signals: dict[str, Any], driver: str) -> None:
    detected = signals[driver]["detected"]
    assert detected == {
        "version": "v2",
        "driver": driver,
        "kubepods": "/kubepods.slice" if driver == "systemd" else "/kubepods",
    }


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_allocatable_memory_comes_from_kubepods(signals: dict[str, Any], driver: str) -> None:
    figures = signals[driver]["allocatable"]
    assert figures["agent"]["capacity"] == figures["limit"]
    expected = figures["limit"] - figures["working_set"]
    assert figures["agent"]["available"] == pytest.approx(expected, abs=PAGE_BATCH)


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_pod_working_sets_are_the_kernels(signals: dict[str, Any], driver: str) -> None:
    pods = signals[driver]["pods"]
    for uid, pod in pods.items():
        assert pod["agent_qos"] == pod["qos"], uid
        assert pod["agent_memory"] == pytest.approx(pod["working_set"], abs=PAGE_BATCH), uid
    burstable = pods["1111-aaaa"]
    assert burstable["inactive_file"] >= 7 * MiB  # page cache is left out...
    assert 24 * MiB <= burstable["agent_memory"] <= 48 * MiB  # ...its 24 MiB of anon is in


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_the_clean_active_page_cache_is_the_kernels(signals: dict[str, Any], driver: str) -> None:
    """``activePageCache: reclaimable`` reads v2's active_file, file_dirty, file_writeback."""
    pods = signals[driver]["pods"]
    for pod in pods.values():
        low, high = pod["active_file"]
        assert (
            min(low, high) - PAGE_BATCH <= pod["agent_active_file"] <= max(low, high) + PAGE_BATCH
        )
    assert pods["3333-cccc"]["agent_active_file"] >= 6 * MiB  # the file read back twice
    allocatable = signals[driver]["allocatable"]
    low, high = allocatable["active_file"]
    assert min(low, high) - PAGE_BATCH <= allocatable["agent_active_file"]
    assert allocatable["agent_active_file"] <= max(low, high) + PAGE_BATCH


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_pod_processes_and_threads_are_counted_apart(signals: dict[str, Any], driver: str) -> None:
    """On v2 the pod cgroup holds no process itself: they are in the containers' leaves."""
    pods = signals[driver]["pods"]
    for uid, pod in pods.items():
        assert pod["agent_processes"] == pod["procs"], uid
        assert pod["agent_threads"] == pod["pids_current"] == pod["threads"], uid
    # Two processes in the burstable pod's container, one of them with 3 extra threads.
    assert (pods["1111-aaaa"]["agent_processes"], pods["1111-aaaa"]["agent_threads"]) == (2, 5)
    assert (pods["3333-cccc"]["agent_processes"], pods["3333-cccc"]["agent_threads"]) == (1, 2)
