"""The collector and a long-lived process's heap: what a process builds once and keeps
(informers' listed objects, imported modules, a client) taken out of the cyclic
collector's reach, for every command that keeps such a heap (the scheduler, its
binding process, the extender, the command line's imports).

CPython's full collection walks every container the process holds. A scheduler that
has listed 5000 nodes and 10,000 pods holds millions of them, and each full collection
walks them all again though none of them is garbage: collection time grows with the
heap, not with what is freed. :func:`gc.freeze` moves every object alive now to a
permanent generation the collector never walks; an object frozen is still freed when
its last reference goes (reference counting is untouched). The one thing lost: a
reference cycle that was alive at the freeze and becomes garbage later is never
collected. Freeze after building what lives as long as the process, not in a process
that builds and drops cyclic structures by the thousand (a test run)."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator


def freeze() -> None:
    """Freeze what the heap holds now. No collection first: on a heap just built it
    would walk everything to free next to nothing (0.1 s for the scheduler's 5000 nodes
    and 10,000 pods); what little cyclic garbage the build left is kept, once. (Nor a
    count of what is frozen: :func:`gc.get_freeze_count` walks every frozen object,
    0.07 s for the scheduler's, on its way to the first binding.)"""
    gc.freeze()


@contextlib.contextmanager
def building() -> Iterator[None]:
    """The collector off while the block builds what lives as long as the process
    (an informer's initial list: a collection in the middle walks everything listed so
    far and frees nothing; four of them cost the scheduler 0.33 s listing 5000 nodes and
    10,000 pods), then what it built frozen (:func:`freeze`), and the collector back
    as it was, however the block ends. A collector that was off stays off, and then
    nothing is frozen."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:  # a collector someone turned off walks nothing: no need
            freeze()
            gc.enable()


def freeze_until(stop: threading.Event, every: float) -> None:
    """:func:`freeze` every ``every`` seconds until ``stop``: for a process whose
    long-lived data keeps arriving (a watch replacing stored objects), so a full
    collection walks only the last few seconds' objects, never the whole store. A
    replaced object is still freed when its last reference goes."""
    while not stop.wait(every):
        freeze()
