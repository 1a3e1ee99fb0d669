"""Where to arm a cgroup v1 memory-usage threshold, and when to move it.

The kernel can notify when a memcg's ``memory.usage_in_bytes`` crosses a value, in
either direction: upwards when a check finds usage at or above it (``threshold <=
usage``). Eviction thresholds are on *available* memory, and the kernel counts
reclaimable page cache (inactive_file) as usage, so the kubelet arms at
``capacity - threshold + inactive_file`` (``UpdateThreshold``). With
``inactive_file = usage - working_set`` and ``working_set = capacity - available`` that is
``usage + available - threshold``: the usage at which available would reach the
threshold if the page cache stayed as it is now.

*Reach* is not *cross*. A threshold is met when available is strictly below it, so a
threshold armed at the kubelet's value notifies at a usage where the threshold is not
yet met; usage moves in whole charge batches (64 pages), and when one lands exactly on
that value the loop reads available equal to the threshold, decides nothing, and the
kernel, which has counted the crossing, stays silent while usage climbs on to the limit.
(The kubelet arms there too; its 10 s housekeeping hides the miss.) So the value is one
byte higher, the least usage at which available is below the threshold.

The page cache does not stay. Under pressure the kernel reclaims it, which lowers the
right value while usage stays flat: an armed value that is now too high would notify
late, or never. So the value is re-armed after each collection, by this policy: always
when the armed value is above the wanted one by more than the kernel's own resolution
(it checks thresholds every 128 page charges), and only past a hysteresis when below
(notifying early costs a spare evaluation). The periodic poll covers the rest.

An early notification costs more than the evaluation: a threshold the kernel has
counted as crossed stays silent for as long as usage stays above it, so it has used up
the notification the real crossing needed. It is re-armed whenever the collection shows
usage at or past it with the threshold not met (:meth:`RearmPolicy.needs_rearm`).

Pure; :mod:`nodeagent.triggers.kernel` registers the thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass

KERNEL_CHECK_PAGES = 128
"""The memcg event ratelimit: thresholds are compared every 128 page charge/uncharge
events (THRESHOLDS_EVENTS_TARGET), so a crossing is seen up to 512 KiB late."""

DEFAULT_HYSTERESIS_BYTES = 16 << 20
"""How far below its wanted value an armed threshold may sit before re-arming, unless
configured (``memoryThresholdHysteresis``). Registering a threshold waits for an RCU
grace period in the kernel (~20 ms measured, see docs/detection.md), so re-arming for
every small change of the page cache would stall the loop for nothing."""


def usage_threshold(*, usage: int, available: int, threshold: int) -> int:
    """The least ``memory.usage_in_bytes`` at which ``available`` is below ``threshold``.

    ``usage`` and ``available`` must come from the same collection. One byte above the
    kubelet's ``capacity - threshold + inactive_file`` (the usage at which available
    *equals* the threshold, which does not meet it): with available 3Gi, working set
    1Gi, usage 2Gi and threshold 1Gi, it is 4Gi + 1. Never below 0.
    """
    return max(0, usage + available - threshold + 1)


@dataclass(frozen=True, slots=True)
class RearmPolicy:
    """When an armed usage threshold is far enough from the wanted one to re-arm."""

    late_tolerance_bytes: int
    """Armed above the wanted value by more than this: re-arm (it would notify late)."""
    early_tolerance_bytes: int
    """Armed below the wanted value by more than this: re-arm (it would notify early)."""

    @classmethod
    def for_page_size(cls, page_size: int, *, hysteresis_bytes: int) -> RearmPolicy:
        return cls(
            late_tolerance_bytes=KERNEL_CHECK_PAGES * page_size,
            early_tolerance_bytes=max(hysteresis_bytes, KERNEL_CHECK_PAGES * page_size),
        )

    def needs_rearm(self, armed: int, wanted: int, *, usage: int | None = None) -> bool:
        """Whether a threshold armed at ``armed`` should move to ``wanted``, given the
        ``usage`` the wanted value was derived from (None: not known)."""
        if usage is not None and armed <= usage < wanted:
            return True  # spent: the kernel counted a crossing the threshold is still ahead of
        if armed > wanted:
            return armed - wanted > self.late_tolerance_bytes
        return wanted - armed > self.early_tolerance_bytes
