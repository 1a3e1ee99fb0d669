"""The binding pool: every submitted binding runs once on a worker and reports its
outcome; a completion that raises does not stop the worker; after shutdown, bindings
not started are dropped (not bound) and nothing is left counted in flight; a binding
whose cycle is a direct binder's alone takes no worker and ends (PostBind or
Unreserve, then its completion) on the thread that answers it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

from nodeagent.scheduler import api, framework
from nodeagent.scheduler.live.binder import Binding, BindingPool, BindResult, direct_binder
from nodeagent.scheduler.plugins.default_binder import DefaultBinder
from tests.scheduler import builders


class StubFramework:
    """PreBind/Bind/PostBind/Unreserve, recording binds; ``gate`` holds every Bind."""

    pre_bind: list[Any] = []  # noqa: RUF012  (run_* stand in for the plugins)
    bind: list[Any] = []  # noqa: RUF012

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.bound: list[str] = []
        self.gate = gate
        self.binding = threading.Event()
        self.lock = threading.Lock()

    def run_pre_bind(self, state: Any, pod: api.Pod, node: str) -> api.Status:
        return api.SUCCESS

    def run_bind(self, state: Any, pod: api.Pod, node: str) -> api.Status:
        self.binding.set()
        if self.gate is not None:
            self.gate.wait(5)
        with self.lock:
            self.bound.append(pod.name)
        return api.SUCCESS

    def run_post_bind(self, state: Any, pod: api.Pod, node: str) -> None:
        pass

    def run_unreserve(self, state: Any, pod: api.Pod, node: str) -> None:
        pass


def binding(fw: StubFramework, name: str) -> Binding:
    return Binding(builders.pod(name), "n1", cast(framework.Framework, fw), framework.CycleState())


def test_every_binding_runs_once_and_a_raising_completion_keeps_the_worker() -> None:
    fw = StubFramework()
    done: list[tuple[str, BindResult]] = []

    def on_done(b: Binding, result: BindResult, why: str) -> None:
        done.append((b.pod.name, result))
        if b.pod.name == "p0":
            raise RuntimeError("a completion bug")

    # one worker: p1.. run after p0's completion raised
    pool = BindingPool(1, on_done, max_workers=1)
    try:
        for i in range(20):
            pool.submit(binding(fw, f"p{i}"))
        assert pool.drain(5)
        assert sorted(fw.bound) == sorted(f"p{i}" for i in range(20))
        assert sorted(done) == sorted((f"p{i}", BindResult.BOUND) for i in range(20))
        assert pool.in_flight == 0
    finally:
        pool.shutdown()


def test_after_shutdown_bindings_not_started_are_dropped() -> None:
    gate = threading.Event()
    fw = StubFramework(gate)
    pool = BindingPool(1, lambda b, r, w: None, max_workers=1)
    for i in range(5):
        pool.submit(binding(fw, f"p{i}"))
    assert fw.binding.wait(5)
    assert pool.in_flight == 5
    pool.shutdown()
    gate.set()  # p0 was already binding: it finishes; p1..p4 never start
    assert pool.drain(5)
    assert fw.bound == ["p0"]


def test_the_pool_grows_while_every_worker_waits_up_to_its_bound() -> None:
    """Bindings that wait (PreBind waiting for the PV controller) do not queue behind
    each other: a busy pool adds a worker, up to ``max_workers``."""
    gate = threading.Event()
    fw = StubFramework(gate)
    pool = BindingPool(1, lambda b, r, w: None, max_workers=3)
    try:
        for i in range(5):
            pool.submit(binding(fw, f"p{i}"))
        assert len(pool._threads) == 3  # grown to its bound, not to five
        gate.set()
        assert pool.drain(5)
        assert sorted(fw.bound) == [f"p{i}" for i in range(5)]
    finally:
        pool.shutdown()


class AnsweringLater:
    """A direct binder (the binding process's shape): remembers each hand-over and
    answers when told, from the thread that tells it."""

    def __init__(self) -> None:
        self.handed: list[tuple[str, str, Callable[[BindResult, str], None]]] = []
        self.threads: set[str] = set()

    def bind(self, pod: api.Pod, node_name: str) -> api.Status:
        raise AssertionError("a direct binding never blocks a thread")

    def bind_async(
        self, pod: api.Pod, node_name: str, done: Callable[[BindResult, str], None]
    ) -> None:
        self.threads.add(threading.current_thread().name)
        self.handed.append((pod.name, node_name, done))


class DirectFramework:
    """DefaultBinder alone in the binding cycle, over :class:`AnsweringLater`;
    records which of PostBind and Unreserve ran."""

    def __init__(self, binder: AnsweringLater, *, pre_bind: bool = False) -> None:
        self.handle = SimpleNamespace(binder=binder, extenders=None)
        self.pre_bind = [object()] if pre_bind else []
        self.bind = [DefaultBinder(binder)]
        self.ended: list[tuple[str, str]] = []

    def run_post_bind(self, state: Any, pod: api.Pod, node: str) -> None:
        self.ended.append((pod.name, "PostBind"))

    def run_unreserve(self, state: Any, pod: api.Pod, node: str) -> None:
        self.ended.append((pod.name, "Unreserve"))


def test_a_direct_binding_takes_no_worker_and_ends_on_the_answering_thread() -> None:
    binder = AnsweringLater()
    fw = DirectFramework(binder)
    done: list[tuple[str, BindResult, str, str]] = []

    def on_done(b: Binding, result: BindResult, why: str) -> None:
        done.append((b.pod.name, result, why, threading.current_thread().name))

    pool = BindingPool(2, on_done)
    try:
        for name in ("bound", "final", "failed"):
            pool.submit(binding(cast(StubFramework, fw), name))
        assert binder.threads == {threading.current_thread().name}  # handed over here
        assert [h[0] for h in binder.handed] == ["bound", "final", "failed"]
        assert pool.in_flight == 3
        answers = {
            "bound": (BindResult.BOUND, ""),
            "final": (BindResult.FINAL, "409 already assigned"),
            "failed": (BindResult.FAILED, "binding rejected: 500"),
        }

        def answer() -> None:
            for name, _, reply in binder.handed:
                reply(*answers[name])

        answering = threading.Thread(target=answer, name="answers")
        answering.start()
        answering.join()
        assert pool.drain(5)
    finally:
        pool.shutdown()
    assert sorted(done) == sorted(
        (name, result, why, "answers") for name, (result, why) in answers.items()
    )
    # the rest of the binding cycle: PostBind after a binding, Unreserve after a refusal
    assert sorted(fw.ended) == [
        ("bound", "PostBind"),
        ("failed", "Unreserve"),
        ("final", "Unreserve"),
    ]


def test_a_binding_cycle_with_more_than_default_binder_waits_on_a_worker() -> None:
    assert direct_binder(cast(framework.Framework, DirectFramework(AnsweringLater()))) is not None
    with_pre_bind = DirectFramework(AnsweringLater(), pre_bind=True)
    assert direct_binder(cast(framework.Framework, with_pre_bind)) is None
    assert direct_binder(cast(framework.Framework, StubFramework())) is None
