"""The extender keeps the watched Nodes out of the collector's reach: it freezes the heap
every few seconds until it stops (:func:`nodeagent.base.heap.freeze_until`), so a full
collection never walks thousands of stored Nodes in the middle of a call."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from nodeagent.base import heap


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.001)
    return False


class TestFreezing:
    def test_objects_made_after_a_freeze_are_frozen_by_the_next(self) -> None:
        gc.freeze()
        nodes = [{"spec": {"taints": [i]}} for i in range(100)]  # as watched and kept
        stored = {id(node) for node in nodes}

        def collectable() -> int:  # of the stored objects, those a collection walks
            return sum(id(obj) in stored for obj in gc.get_objects())

        assert collectable() == len(nodes)
        stop = threading.Event()
        freezer = threading.Thread(target=heap.freeze_until, args=(stop, 0.01))
        freezer.start()
        try:
            assert wait_for(lambda: collectable() == 0)
        finally:
            stop.set()
            freezer.join(timeout=10)
        assert not freezer.is_alive()

    def test_it_returns_when_stopped(self) -> None:
        stop = threading.Event()
        stop.set()
        started = time.monotonic()
        heap.freeze_until(stop, every=60.0)
        assert time.monotonic() - started < 5.0
