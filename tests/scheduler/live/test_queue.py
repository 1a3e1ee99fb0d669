"""The scheduling queue against kube-scheduler's ``PriorityQueue``: QueueSort order,
backoff 1, 2, 4, 8, 10, 10 s, unschedulable pods moved only by events their rejecting
plugins' QueueingHints say may help (the default profile's hints), the 5-minute flush,
gates, events during a cycle, deletions, wasted retries counted."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from nodeagent.base.clock import FakeClock
from nodeagent.k8s.pressure import Taint
from nodeagent.scheduler import api, config, framework, registry
from nodeagent.scheduler.live.events import ClusterEvent, QueueingHints
from nodeagent.scheduler.live.queue import SchedulingQueue, Where
from nodeagent.scheduler.plugins import default_preemption, priority_sort, scheduling_gates

E = ClusterEvent
HINTS = QueueingHints(
    framework.build_frameworks(
        config.parse_configuration(None, registry.in_tree_registry()),
        registry.in_tree_registry(),
    )
)
ROOMY = api.Node("n1", allocatable={"cpu": 4000, "memory": 2**33, "pods": 110})
TAINTED = api.Node("n1", taints=(Taint("example.com/x", api.TaintEffect.NO_SCHEDULE),))


def pod(
    name: str,
    *,
    priority: int = 0,
    gates: tuple[str, ...] = (),
    tolerations: tuple[api.Toleration, ...] = (),
) -> api.Pod:
    return api.Pod(
        "default",
        name,
        uid=f"u-{name}",
        priority=priority,
        scheduling_gates=gates,
        tolerations=tolerations,
        requests={"cpu": 100},
    )


def make(clock: FakeClock, wasted: list[str] | None = None) -> SchedulingQueue:
    return SchedulingQueue(
        less=priority_sort.PrioritySort().less,
        pre_enqueue=scheduling_gates.SchedulingGates().pre_enqueue,
        clock=clock.now,
        hints=HINTS,
        on_wasted=None if wasted is None else wasted.append,
    )


def objects_of(event: ClusterEvent, n: int) -> tuple[object, object]:
    """Plausible old and new objects for ``event`` (what the informers would hand)."""
    bound = api.Pod("default", f"b{n}", uid=f"b{n}", node_name="n1", requests={"cpu": 500})
    if event is E.NODE_ADD:
        return None, ROOMY
    if event is E.NODE_DELETE:
        return ROOMY, None
    if event.value.startswith("Node"):
        return TAINTED, ROOMY
    if event in framework.POD_DELETE_EVENTS:
        return bound, None
    if event is E.ASSIGNED_POD_ADD:
        return None, bound
    if event.value.startswith(("AssignedPod", "UnscheduledPod")):
        return bound, api.Pod("default", f"b{n}", uid=f"b{n}", node_name="n1")
    return None, None


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
    assert queue.on_event(E.NODE_LABEL_CHANGE, ROOMY, ROOMY) == 0, "not registered"
    assert queue.on_event(E.ASSIGNED_POD_DELETE, *objects_of(E.ASSIGNED_POD_DELETE, 1)) == 0
    assert queue.on_event(E.NODE_TAINT_CHANGE, ROOMY, TAINTED) == 0, "the hint says Skip"
    assert queue.where("u-a") is Where.UNSCHEDULABLE
    assert queue.on_event(E.NODE_TAINT_CHANGE, TAINTED, ROOMY) == 1
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
    queue.on_event(E.NODE_ADD, None, api.Node("small", allocatable={"cpu": 50, "pods": 1}))
    assert queue.where("u-a") is Where.UNSCHEDULABLE, "it would not fit the new node"
    queue.on_event(E.NODE_ADD, None, ROOMY)
    assert queue.where("u-a") is Where.ACTIVE


def test_an_event_during_the_cycle_is_not_lost(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    queue.on_event(E.NODE_LABEL_CHANGE, ROOMY, ROOMY)  # while the pod is being scheduled
    queue.on_event(E.NODE_ADD, None, ROOMY)
    assert queue.unschedulable(info, {"NodeResourcesFit"}) in (Where.BACKOFF, Where.ACTIVE)


def test_an_event_during_the_cycle_that_cannot_help_is_ignored(clock: FakeClock) -> None:
    queue = make(clock)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    queue.on_event(E.NODE_LABEL_CHANGE, ROOMY, ROOMY)
    queue.on_event(E.NODE_TAINT_CHANGE, TAINTED, ROOMY)
    assert queue.unschedulable(info, {"NodeResourcesFit"}) is Where.UNSCHEDULABLE


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
    queue.on_event(E.NODE_ADD, None, ROOMY)
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
    queue.unschedulable(info, {"TaintToleration"})
    tolerant = pod("a", tolerations=(api.Toleration(operator="Exists"),))
    queue.update(pod("a"), relevant=False)
    assert queue.where("u-a") is Where.UNSCHEDULABLE
    queue.update(pod("a", priority=3), relevant=True)
    assert queue.where("u-a") is Where.UNSCHEDULABLE, "no rejector's hint wants this update"
    queue.update(tolerant, relevant=True)
    assert queue.where("u-a") in (Where.ACTIVE, Where.BACKOFF)


def test_a_retry_rejected_for_the_same_reason_is_counted_as_wasted(clock: FakeClock) -> None:
    wasted: list[str] = []
    queue = make(clock, wasted)
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    queue.unschedulable(info, {"NodeResourcesFit"})
    assert wasted == []
    queue.on_event(E.NODE_ADD, None, ROOMY)
    clock.advance(2)
    queue.flush()
    again = queue.pop(0)
    assert again is info
    queue.unschedulable(info, {"NodeResourcesFit"})
    assert wasted == ["NodeAdd"]
    clock.advance(300)
    queue.flush()
    assert queue.pop(0) is info
    queue.unschedulable(info, {"TaintToleration"})
    assert wasted == ["NodeAdd"], "another reason: not the same retry again"


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
            event = list(E)[(n * 7 + len(alive)) % len(E)]
            queue.on_event(event, *objects_of(event, n))
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


def test_a_preemptor_is_held_while_its_victims_are_deleted(clock: FakeClock) -> None:
    """Asynchronous preemption: DefaultPreemption's PreEnqueue gates the preemptor while
    its victims' deletions are on the way; an event that would move it gates it instead;
    the last answered deletion releases it (to backoffQ: it was tried), a failed one
    activates it at once."""
    handle = framework.Handle()
    preemption = default_preemption.new(None, handle)
    queue = SchedulingQueue(
        less=priority_sort.PrioritySort().less,
        pre_enqueue=preemption.pre_enqueue,
        clock=clock.now,
        hints=HINTS,
    )
    queue.add(pod("a"))
    info = queue.pop(0)
    assert info is not None
    handle.preemptions.start("u-a", 2)
    assert queue.unschedulable(info, {"NodeResourcesFit"}) is Where.UNSCHEDULABLE
    freed = api.Pod("default", "v1", uid="v1", node_name="n1", requests={"cpu": 500})
    assert queue.on_event(E.ASSIGNED_POD_DELETE, freed, None) == 1
    assert queue.where("u-a") is Where.GATED
    assert queue.pending()["gated"] == 1
    assert handle.preemptions.victim_done("u-a") is None, "one deletion still on the way"
    assert not queue.recheck_gate("u-a", E.ASSIGNED_POD_DELETE)
    assert handle.preemptions.victim_done("u-a") is True
    assert queue.recheck_gate("u-a", E.ASSIGNED_POD_DELETE)
    assert queue.where("u-a") is Where.BACKOFF
    # a failed deletion: activated at once
    clock.advance(20)
    queue.flush()
    again = queue.pop(0)
    assert again is info
    handle.preemptions.start("u-a", 1)
    queue.unschedulable(info, {"NodeResourcesFit"})
    assert handle.preemptions.victim_done("u-a", ok=False) is False
    assert queue.activate("u-a")
    assert queue.where("u-a") is Where.ACTIVE
