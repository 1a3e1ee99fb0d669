"""The heap's freezing (nodeagent.base.heap): the collector off while a block builds, what it
built frozen afterwards, the collector restored however the block ends."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from nodeagent.base import heap


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    """The test process's heap back in the collector's reach afterwards."""
    yield
    gc.unfreeze()


class TestBuilding:
    def test_the_block_runs_with_the_collector_off_and_what_it_built_is_frozen(self) -> None:
        assert gc.isenabled()
        before = gc.get_freeze_count()
        with heap.building():
            assert not gc.isenabled()
            built = [{"object": i} for i in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= before + len(built)

    def test_a_failing_block_still_restores_the_collector(self) -> None:
        with pytest.raises(RuntimeError), heap.building():
            raise RuntimeError("list failed")
        assert gc.isenabled()

    def test_a_collector_that_was_off_stays_off_and_nothing_is_frozen(self) -> None:
        before = gc.get_freeze_count()
        gc.disable()
        try:
            with heap.building():
                built = [{"object": i} for i in range(1000)]
            assert not gc.isenabled()
            assert gc.get_freeze_count() == before, len(built)
        finally:
            gc.enable()
