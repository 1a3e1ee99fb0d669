"""cgroup v1 memcg usage thresholds on the real kernel: a process allocating past the
threshold wakes the TriggerSet within milliseconds; re-arming, disarming, removal; a
threshold the kernel has counted as crossed (it then stays silent while usage stays
above it) never costs a notification the loop needs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.triggers.api import Mechanism, MechanismState
from nodeagent.triggers.triggerset import TriggerSet
from tests.triggers import loadgen

pytestmark = pytest.mark.kernel

Mi = 1 << 20


@pytest.fixture
def triggers() -> Iterator[TriggerSet]:
    with TriggerSet() as trigger_set:
        yield trigger_set


def test_crossing_wakes_within_200ms(triggers: TriggerSet, memcg: Path) -> None:
    threshold = loadgen.read_usage(str(memcg)) + 24 * Mi
    status = triggers.arm_memory_threshold("node", str(memcg), threshold)
    assert status.state is MechanismState.ACTIVE
    hog = loadgen.start_allocator(memcg, threshold)
    try:
        wakes = triggers.wait(10.0)
        crossing = loadgen.read_report(hog)
    finally:
        loadgen.stop(hog)
    assert [(wake.trigger, wake.mechanism) for wake in wakes] == [
        ("node", Mechanism.MEMCG_THRESHOLD)
    ]
    # The notification can even precede the allocator's own read of usage.
    assert -0.05 < wakes[0].time - crossing["crossed_at"] < 0.2


def test_no_wake_below_the_threshold_then_wake_when_usage_falls_back(
    triggers: TriggerSet, memcg: Path
) -> None:
    threshold = loadgen.read_usage(str(memcg)) + 24 * Mi
    triggers.arm_memory_threshold("far", str(memcg), threshold + 512 * Mi)
    triggers.arm_memory_threshold("near", str(memcg), threshold)
    hog = loadgen.start_allocator(memcg, threshold)
    try:
        assert {wake.trigger for wake in triggers.wait(10.0)} == {"near"}
        loadgen.read_report(hog)
    finally:
        loadgen.stop(hog)
    # The hog's memory is freed: usage crosses the threshold downwards, which notifies too.
    assert {wake.trigger for wake in triggers.wait(2.0)} == {"near"}


def fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_rearming_is_idempotent_within_hysteresis(triggers: TriggerSet, memcg: Path) -> None:
    # The default policy: re-arm when armed over 512 KiB too high, or 16 MiB too low.
    baseline = eventfds()
    triggers.arm_memory_threshold("node", str(memcg), 1024 * Mi)
    (fd,) = eventfds() - baseline
    triggers.arm_memory_threshold("node", str(memcg), 1024 * Mi + 8 * Mi)  # early by 8Mi: keep
    triggers.arm_memory_threshold("node", str(memcg), 1024 * Mi - 256 * 1024)  # late by 256Ki
    assert eventfds() - baseline == {fd}
    triggers.arm_memory_threshold("node", str(memcg), 1000 * Mi)  # late by 24Mi: re-arm
    (new_fd,) = eventfds() - baseline
    assert triggers.status()["node"].detail == f"crosses {1000 * Mi}"
    assert new_fd != fd
    assert not fd_is_open(fd)


def test_rearmed_threshold_fires_at_the_new_value(triggers: TriggerSet, memcg: Path) -> None:
    threshold = loadgen.read_usage(str(memcg)) + 24 * Mi
    triggers.arm_memory_threshold("node", str(memcg), threshold + 400 * Mi)
    triggers.arm_memory_threshold("node", str(memcg), threshold)
    hog = loadgen.start_allocator(memcg, threshold)
    try:
        assert [wake.trigger for wake in triggers.wait(10.0)] == ["node"]
    finally:
        loadgen.stop(hog)


def test_a_threshold_reached_before_its_signal_meets_it_is_rearmed(
    triggers: TriggerSet, memcg: Path
) -> None:
    """Page cache that grew leaves an armed value below the wanted one, within the
    hysteresis: usage reaches it early, and the kernel notifies once and counts it
    crossed. Re-armed from a collection that shows usage past it with the threshold not
    met, it notifies again at the real crossing."""
    armed = loadgen.read_usage(str(memcg)) + 24 * Mi
    triggers.arm_memory_threshold("node", str(memcg), armed)
    early = loadgen.start_allocator(memcg, armed)
    try:
        assert [wake.trigger for wake in triggers.wait(10.0)] == ["node"]
        loadgen.read_report(early)
        usage = loadgen.read_usage(str(memcg))
        wanted = armed + 12 * Mi  # within the 16 MiB hysteresis: early, not re-armed for that
        assert armed <= usage < wanted
        triggers.arm_memory_threshold("node", str(memcg), wanted, observed_usage=usage)
        assert triggers.wait(0.2) == []
        crossing = loadgen.start_allocator(memcg, wanted)
        try:
            assert [wake.trigger for wake in triggers.wait(10.0)] == ["node"]
        finally:
            loadgen.stop(crossing)
    finally:
        loadgen.stop(early)


@pytest.mark.parametrize(
    ("told", "wakes"),
    [
        pytest.param(True, ["node"], id="told-the-usage-it-was-placed-from"),
        # the kernel's own behaviour, which the loop could not tell from no crossing
        pytest.param(False, [], id="not-told"),
    ],
)
def test_a_threshold_usage_passed_while_it_was_armed_notifies_at_once(
    triggers: TriggerSet, memcg: Path, told: bool, wakes: list[str]
) -> None:
    """Usage can pass the value between the collection it was placed from and the
    registration (an RCU grace period, ~20 ms): the kernel takes it as already crossed."""
    observed = loadgen.read_usage(str(memcg))
    threshold = observed + 24 * Mi
    hog = loadgen.start_allocator(memcg, threshold)
    try:
        loadgen.read_report(hog)
        triggers.arm_memory_threshold(
            "node", str(memcg), threshold, observed_usage=observed if told else None
        )
        assert [wake.trigger for wake in triggers.wait(0.5)] == wakes
        assert triggers.wait(0.2) == []  # once
    finally:
        loadgen.stop(hog)


def test_disarm_and_close_release_the_eventfds(memcg: Path) -> None:
    baseline = eventfds()
    triggers = TriggerSet()
    (waker,) = eventfds() - baseline
    triggers.arm_memory_threshold("node", str(memcg), 1024 * Mi)
    (fd,) = eventfds() - baseline - {waker}
    triggers.disarm("node")
    assert not fd_is_open(fd)
    triggers.arm_memory_threshold("node", str(memcg), 1024 * Mi)
    triggers.close()
    assert eventfds() == baseline


def test_cgroup_removal_wakes_and_degrades(triggers: TriggerSet, memcg_root: Path) -> None:
    baseline = eventfds()
    with loadgen.temporary_cgroup(memcg_root) as cgroup:
        triggers.arm_memory_threshold("node", str(cgroup), 1024 * Mi)
    assert [wake.trigger for wake in triggers.wait(2.0)] == ["node"]
    status = triggers.status()["node"]
    assert status.state is MechanismState.UNAVAILABLE
    assert status.detail == "cgroup removed"
    assert eventfds() == baseline


def eventfds() -> set[int]:
    """The eventfds this process holds, from /proc/self/fd."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target == "anon_inode:[eventfd]":
            found.add(int(name))
    return found
