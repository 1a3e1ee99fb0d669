"""The readers' /proc/meminfo figures against psutil's, on the real kernel.

psutil parses the same file independently, so it is the oracle for the facts both read:
``MemTotal`` (the capacity of ``memory.available`` on a node guarded as a whole) and
``SwapTotal`` / ``SwapFree`` (the observation's swap). The readers do not use psutil
themselves; nodeagent/signals/parse.py says why.
"""

from __future__ import annotations

import psutil
import pytest

from nodeagent.model import Signal
from nodeagent.signals.collector import SignalCollector, SignalGroup

pytestmark = pytest.mark.kernel


def test_memtotal_and_swap_agree_with_psutil() -> None:
    with SignalCollector() as collector:
        observations = collector.collect(0.0, {SignalGroup.MEMORY})
        swap = psutil.swap_memory()  # read between our two reads: swap moves slowly
        again = collector.collect(1.0, {SignalGroup.MEMORY})
    memory = observations.value(Signal.MEMORY_AVAILABLE)
    assert memory is not None
    assert memory.capacity == psutil.virtual_memory().total
    if swap.total == 0:
        assert observations.swap is None and again.swap is None
    else:
        assert observations.swap is not None and again.swap is not None
        assert observations.swap.capacity == swap.total
        low, high = sorted((observations.swap.available, again.swap.available))
        assert low - (1 << 20) <= swap.free <= high + (1 << 20)
