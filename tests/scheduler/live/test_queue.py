"""The scheduling queue against kube-scheduler's ``PriorityQueue``: QueueSort order,
backoff 1, 2, 4, 8, 10, 10 s, unschedulable pods moved only by events their rejecting
plugins registered for, the 5-minute flush, gates, events during a cycle, deletions."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from nodeagent.base.clock import FakeClock
from nodeagent.scheduler import api
from nodeagent.scheduler.live.events import ClusterEvent
from nodeagent.scheduler.live.queue import SchedulingQueue, Where
from nodeagent.scheduler.plugins import priority_sort, scheduling_gates

E = ClusterEvent


def pod(name: str, *, priority: int = 0, gates: tuple[str, ...] = ()) -> api.Pod:
    return api.Pod("default", name, uid=f"u-{name}", priority=priority, scheduling_gates=gates)


def make(clock: FakeClock) -> SchedulingQueue:
    return SchedulingQueue(
        less=priority_sort.PrioritySort().less,
        pre_enqueue=scheduling_gates.SchedulingGates().pre_enqueue,
        clock=clock.now,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=100.0)


def test_pops_by_priority_then_arrival(clock: FakeClock) -> None:
    queue = make(clock)
    for name, priority in (("a", 0), ("b", 10), ("c", 0), ("d", 10)):
        queue.add(pod(name, priority=priority))
        clock.advance(0.001)
    popped = [queue.pop(0) for _ in range(4)]
    assert [p.pod.name for p in popped if p] == ["b", "d", "a", "c"]
    assert queue.pop(0) is None


@pytest.mark.parametrize(
    ("attempts", "seconds"), [(0, 0), (1, 1), (2, 2), (3, 4), (4, 8), (5, 10), (6, 10), (60, 10)]
)
def test_backoff_doubles_from_initial_up_to_max(
    clock: FakeClock, attempts: int, seconds: float
) -> None:
    assert make(clock).backoff_duration(attempts) == seconds


def test_error_waits_out_its_backoff_and_is_not_popped_early(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None and queue.failed(info)
    assert queue.pending()["backoff"] == 1
    assert queue.pop(0) is None, "error backoff is never popped early"
    clock.advance(0.99)
    queue.flush()
    assert queue.pop(0) is None
    clock.advance(0.02)
    queue.flush()
    again = queue.pop(0)
    assert again is info and again.attempts == 2


def test_rejected_pod_waits_for_an_event_its_rejector_registered(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    assert queue.unschedulable(info, {"TaintToleration"}) is Where.UNSCHEDULABLE
    assert queue.on_event(E.NODE_LABEL_CHANGE) == 0
    assert queue.on_event(E.ASSIGNED_POD_DELETE) == 0
    assert queue.where("u-a") is Where.UNSCHEDULABLE
    assert queue.on_event(E.NODE_TAINT_CHANGE) == 1
    assert queue.where("u-a") is Where.BACKOFF, "still inside its 1 s backoff"
    # activeQ is empty: pop takes the backoffQ head (SchedulerPopFromBackoffQ)
    assert queue.pop(0) is info


def test_moved_after_its_backoff_goes_straight_to_active(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    queue.unschedulable(info, {"NodeResourcesFit"})
    clock.advance(5)
    queue.on_event(E.NODE_ADD)
    assert queue.where("u-a") is Where.ACTIVE


def test_an_event_during_the_cycle_is_not_lost(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    queue.on_event(E.NODE_ADD)  # arrives while the pod is being scheduled
    assert queue.unschedulable(info, {"NodeResourcesFit"}) in (Where.BACKOFF, Where.ACTIVE)


def test_unschedulable_pods_are_retried_after_five_minutes(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    queue.unschedulable(info, {"NodeAffinity"})
    clock.advance(299)
    queue.flush()
    assert queue.where("u-a") is Where.UNSCHEDULABLE
    clock.advance(1)
    queue.flush()
    assert queue.where("u-a") is Where.ACTIVE


def test_gated_pods_wait_for_their_gates_to_go(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a", gates=("example.com/wait",)))
    assert queue.pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 1}
    assert queue.pop(0) is None
    queue.on_event(E.NODE_ADD)
    assert queue.where("u-a") is Where.GATED
    queue.update(pod("a"))
    info = queue.pop(0)
    assert info is not None and info.pod.name == "a"


def test_deleted_pods_are_never_requeued(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    queue.assumed(info)
    queue.delete("u-a")
    assert not queue.failed(info), "a pod deleted during its bind is not retried"
    assert len(queue) == 0


def test_status_only_updates_do_not_requeue(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    queue.unschedulable(info, {"NodeAffinity"})
    queue.update(pod("a"), relevant=False)
    assert queue.where("u-a") is Where.UNSCHEDULABLE
    queue.update(pod("a"), relevant=True)
    assert queue.where("u-a") in (Where.ACTIVE, Where.BACKOFF)


Op = st.sampled_from(["add", "pop_fail", "pop_reject", "pop_bind", "event", "tick", "delete"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(Op, st.integers(0, 5)), max_size=60))
def test_counts_stay_consistent_and_nothing_is_lost(ops: list[tuple[str, int]]) -> None:
    """Whatever happens, every known pod is in exactly one place, the per-queue counts
    match, and with time passing every pending pod is eventually popped again."""
    clock = FakeClock(start=0.0)
    queue = make(clock)
    alive: set[str] = set()
    for op, n in ops:
        if op == "add":
            queue.add(pod(f"p{n}", priority=n % 3))
            alive.add(f"u-p{n}")
        elif op.startswith("pop"):
            info = queue.pop(0)
            if info is None:
                continue
            if op == "pop_fail":
                queue.failed(info)
            elif op == "pop_reject":
                queue.unschedulable(info, {"NodeResourcesFit"} if n % 2 else {"NodeAffinity"})
            else:
                queue.assumed(info)
                queue.bound(info)
                alive.discard(info.uid)
        elif op == "event":
            queue.on_event(list(E)[n])
        elif op == "tick":
            clock.advance(n * 3)
            queue.flush()
        else:
            queue.delete(f"u-p{n}")
            alive.discard(f"u-p{n}")
        pending = queue.pending()
        assert sum(pending.values()) == len(queue) == len(alive)
    clock.advance(1000)
    queue.flush()
    seen = set()
    while (info := queue.pop(0)) is not None:
        seen.add(info.uid)
        queue.assumed(info)
        queue.bound(info)
    assert seen == alive
