"""Where a cgroup v1 usage threshold is armed, and when it is re-armed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.triggers import memcg

Gi = 1 << 30
Mi = 1 << 20


def test_usage_threshold_is_one_byte_past_the_kubelet_example() -> None:
    # The kubelet's TestUpdateThreshold: available 3Gi, working set 1Gi, usage 2Gi,
    # threshold 1Gi -> 4Gi, where available *equals* the threshold; the threshold is met one
    # byte later
    assert memcg.usage_threshold(usage=2 * Gi, available=3 * Gi, threshold=1 * Gi) == 4 * Gi + 1


@given(
    capacity=st.integers(min_value=1, max_value=1 << 45),
    working_set_share=st.floats(min_value=0, max_value=1),
    inactive_file=st.integers(min_value=0, max_value=1 << 40),
    threshold_share=st.floats(min_value=0, max_value=1),
)
def test_usage_threshold_is_the_least_usage_that_meets_the_threshold(
    capacity: int, working_set_share: float, inactive_file: int, threshold_share: float
) -> None:
    """The kernel notifies when usage reaches the armed value; the threshold is met when
    available is strictly below it. The two must be the same instant: notifying where
    the threshold is not yet met spends the notification (the kernel stays silent while
    usage stays above), which lost the first OOM race after a start (issue 22)."""
    working_set = int(capacity * working_set_share)
    threshold = int(capacity * threshold_share)
    usage = working_set + inactive_file
    available = capacity - working_set
    armed = memcg.usage_threshold(usage=usage, available=available, threshold=threshold)

    def available_at(usage: int) -> int:  # the page cache unchanged
        return capacity - (usage - inactive_file)

    assert armed == max(0, capacity - threshold + inactive_file + 1)
    if armed > 0:
        assert available_at(armed) < threshold  # reaching it meets the threshold
        assert available_at(armed - 1) >= threshold  # and not a byte sooner


def test_usage_threshold_is_never_negative() -> None:
    assert memcg.usage_threshold(usage=0, available=0, threshold=Gi) == 0


POLICY = memcg.RearmPolicy.for_page_size(4096, hysteresis_bytes=16 * Mi)


@pytest.mark.parametrize(
    ("armed", "wanted", "rearm"),
    [
        pytest.param(Gi, Gi, False, id="unchanged"),
        pytest.param(Gi + 512 * 1024, Gi, False, id="late-within-kernel-resolution"),
        pytest.param(Gi + 600 * 1024, Gi, True, id="late-beyond-kernel-resolution"),
        pytest.param(Gi - 16 * Mi, Gi, False, id="early-within-hysteresis"),
        pytest.param(Gi - 17 * Mi, Gi, True, id="early-beyond-hysteresis"),
    ],
)
def test_rearm_policy(armed: int, wanted: int, rearm: bool) -> None:
    assert POLICY.needs_rearm(armed, wanted) is rearm


def test_hysteresis_never_below_kernel_resolution() -> None:
    policy = memcg.RearmPolicy.for_page_size(4096, hysteresis_bytes=0)
    assert policy.early_tolerance_bytes == policy.late_tolerance_bytes == 128 * 4096


@pytest.mark.parametrize(
    ("armed", "usage", "wanted", "rearm"),
    [
        pytest.param(Gi, Gi - Mi, Gi + 8 * Mi, False, id="not-reached-early-within-hysteresis"),
        pytest.param(Gi, Gi, Gi + 8 * Mi, True, id="reached-threshold-not-met"),
        pytest.param(Gi, Gi + 4 * Mi, Gi + 8 * Mi, True, id="passed-threshold-not-met"),
        pytest.param(Gi, Gi + 8 * Mi, Gi + 8 * Mi, False, id="passed-threshold-met"),
        pytest.param(Gi, Gi + 9 * Mi, Gi + 8 * Mi, False, id="passed-far-threshold-met"),
        pytest.param(Gi + 256 * 1024, Gi + Mi, Gi, False, id="late-within-resolution-met"),
    ],
)
def test_a_threshold_usage_has_passed_is_spent_until_its_signal_meets_it(
    armed: int, usage: int, wanted: int, rearm: bool
) -> None:
    """The kernel counts a threshold usage has reached as crossed and stays silent while
    usage stays above it: one reached while the eviction threshold is not met yet (page
    cache that grew, within the hysteresis) would never notify for the real crossing."""
    assert POLICY.needs_rearm(armed, wanted, usage=usage) is rearm


@given(
    armed=st.integers(min_value=0, max_value=1 << 40),
    usage=st.integers(min_value=0, max_value=1 << 40),
    wanted=st.integers(min_value=0, max_value=1 << 40),
)
def test_a_spent_threshold_is_always_rearmed(armed: int, usage: int, wanted: int) -> None:
    if armed <= usage < wanted:
        assert POLICY.needs_rearm(armed, wanted, usage=usage)
    # without the usage, the policy is the tolerances alone
    assert POLICY.needs_rearm(armed, wanted) is (
        armed - wanted > POLICY.late_tolerance_bytes
        or wanted - armed > POLICY.early_tolerance_bytes
    )
