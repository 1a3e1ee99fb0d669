"""The loop arms the adaptive memory poll where the kernel has no usage threshold."""

from __future__ import annotations

from pathlib import Path

from nodeagent.triggers.api import Mechanism
from tests.agent.rig import Rig
from tests.doubles.host import GIB
from tests.signals.counting import CountingReader


def test_no_memory_poll_while_memcg_thresholds_notify(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.cycle()
    assert "memcg:node:memory.available<1Gi hard" in rig.triggers.armed
    assert not [name for name in rig.triggers.armed if name.startswith("memory-poll")]


def test_memory_poll_replaces_memcg_thresholds_when_they_are_off(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings={"kernel_memcg_notification": False})
    rig.cycle()
    mechanism, _, thresholds = rig.triggers.armed["memory-poll:node"]
    assert mechanism is Mechanism.MEMORY_POLL
    assert thresholds == (1 * GIB,)
    probe = rig.triggers.probes["memory-poll:node"]
    assert probe() == 12 * GIB  # 16Gi - 4Gi, read again from the host's files
    assert rig.triggers.observed["memory-poll:node"] == 12 * GIB  # the collection's value
    rig.set_node_usage(15 * GIB + GIB // 2)
    assert probe() == GIB // 2
    # A crossing the poll reports wakes the loop, which collects and decides at once.
    rig.triggers.fire("memory-poll:node")
    result = rig.cycle()
    assert result is not None and result.trigger == "memory-poll:memory-poll:node"
    assert result.decision.thresholds_met  # memory.available<1Gi, from the fresh read


def test_memory_poll_follows_the_thresholds_and_can_be_disabled(tmp_path: Path) -> None:
    rig = Rig(
        tmp_path,
        settings={"kernel_memcg_notification": False, "adaptive_memory_poll": False},
    )
    rig.cycle()
    assert "memory-poll:node" not in rig.triggers.armed


def test_a_filesystem_poll_reads_no_file_and_re_arms_nothing(tmp_path: Path) -> None:
    """The 500 ms filesystem poll is statvfs alone: memory, PSI, PIDs and the pods'
    cgroups are read by the node poll and the kernel triggers, and a filesystem cycle
    hands no (carried-over) memory value to the adaptive poll."""
    rig = Rig(tmp_path, settings={"kernel_memcg_notification": False})
    rig.pods.set([])
    assert rig.cycle() is not None  # the first cycle reads everything
    files = CountingReader()
    rig.collector._reader = files  # the collector's one reader, counted from here
    rig.triggers.observed.clear()
    fs_only = rig.cycle()
    assert fs_only is not None and fs_only.trigger == "poll:filesystems"
    assert files.asked == []
    assert rig.triggers.observed == {}
    node = rig.cycle()
    assert node is not None and "node" in node.trigger
    read = "\n".join(files.asked)
    for name in ("memory.stat", "meminfo", "pid_max"):
        assert name in read
    assert rig.triggers.observed["memory-poll:node"] == 12 * GIB


class TestAMemcgWakeThatMeetsNothing:
    """Issue 22: a memcg threshold's wake whose cycle reads the signal at, not below, its
    threshold leaves the kernel silent while usage stays above the armed value (it has
    counted the crossing). The memory poll watches the signal until it meets a threshold
    or is back above them all."""

    NAME = "memcg:node:memory.available<1Gi hard"

    def test_the_memory_poll_watches_until_the_threshold_is_met(self, tmp_path: Path) -> None:
        rig = Rig(tmp_path)
        rig.cycle()
        rig.set_node_usage(15 * GIB)  # available exactly 1Gi: the threshold not met
        rig.triggers.fire(self.NAME)
        result = rig.cycle()
        assert result is not None and not result.decision.thresholds_met
        assert "memory-poll:node" in rig.triggers.armed  # beside the memcg threshold
        assert self.NAME in rig.triggers.armed
        probe = rig.triggers.probes["memory-poll:node"]
        rig.set_node_usage(15 * GIB + 4096)
        assert probe() == GIB - 4096  # it reads what the kernel will not tell
        rig.triggers.fire("memory-poll:node")
        met = rig.cycle()
        assert met is not None and met.decision.thresholds_met
        assert "memory-poll:node" not in rig.triggers.armed  # met: the engine acts

    def test_usage_back_below_ends_the_watch(self, tmp_path: Path) -> None:
        rig = Rig(tmp_path)
        rig.cycle()
        rig.set_node_usage(15 * GIB)
        rig.triggers.fire(self.NAME)
        rig.cycle()
        assert "memory-poll:node" in rig.triggers.armed
        rig.set_node_usage(4 * GIB)
        rig.triggers.fire(self.NAME)  # the kernel notifies the way down too
        rig.cycle()
        assert "memory-poll:node" not in rig.triggers.armed

    def test_a_wake_that_meets_the_threshold_needs_no_watch(self, tmp_path: Path) -> None:
        rig = Rig(tmp_path)
        rig.cycle()
        rig.set_node_usage(15 * GIB + GIB // 2)
        rig.triggers.fire(self.NAME)
        result = rig.cycle()
        assert result is not None and result.decision.thresholds_met
        assert "memory-poll:node" not in rig.triggers.armed
