"""The binding pool: every submitted binding runs once on a worker and reports its
outcome; a completion that raises does not stop the worker; after shutdown, bindings
not started are dropped (not bound) and nothing is left counted in flight."""

from __future__ import annotations

import threading
from typing import Any, cast

from nodeagent.scheduler import api, framework
from nodeagent.scheduler.live.binder import Binding, BindingPool, BindResult
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

    pool = BindingPool(1, on_done)  # one worker: p1.. run after p0's completion raised
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
    pool = BindingPool(1, lambda b, r, w: None)
    for i in range(5):
        pool.submit(binding(fw, f"p{i}"))
    assert fw.binding.wait(5)
    assert pool.in_flight == 5
    pool.shutdown()
    gate.set()  # p0 was already binding: it finishes; p1..p4 never start
    assert pool.drain(5)
    assert fw.bound == ["p0"]
