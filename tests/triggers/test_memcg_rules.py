"""Where a cgroup v1 usage threshold is armed, and when it is re-armed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.triggers import memcg

Gi = 1 << 30
Mi = 1 << 20


def test_usage_threshold_matches_the_kubelet_example() -> None:
    # kubelet-eviction.md §12: available 3Gi, working set 1Gi, usage 2Gi, threshold 1Gi -> 4Gi
    assert memcg.usage_threshold(usage=2 * Gi, available=3 * Gi, threshold=1 * Gi) == 4 * Gi


@given(
    capacity=st.integers(min_value=1, max_value=1 << 45),
    working_set_share=st.floats(min_value=0, max_value=1),
    inactive_file=st.integers(min_value=0, max_value=1 << 40),
    threshold_share=st.floats(min_value=0, max_value=1),
)
def test_usage_threshold_is_the_kubelet_formula(
    capacity: int, working_set_share: float, inactive_file: int, threshold_share: float
) -> None:
    working_set = int(capacity * working_set_share)
    threshold = int(capacity * threshold_share)
    usage = working_set + inactive_file
    available = capacity - working_set
    armed = memcg.usage_threshold(usage=usage, available=available, threshold=threshold)
    assert armed == max(0, capacity - threshold + inactive_file)
    # Usage reaching the armed value (page cache unchanged) is available reaching the threshold.
    assert capacity - (armed - inactive_file) == threshold


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
