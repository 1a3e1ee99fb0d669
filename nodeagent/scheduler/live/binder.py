"""The binding cycle, off the scheduling thread (kube-scheduler's ``bindingCycle``).

The scheduling cycle ends once the pod is assumed, reserved and permitted; the rest -
PreBind, Bind (DefaultBinder: ``POST pods/NAME/binding``), PostBind - runs on a bounded
worker pool, so the next pod is scheduled while earlier bindings are in flight. The
workers share the client's connection pool (one pool connection per worker).

Outcomes of a binding:

* success: the assumption waits for the watch to confirm it; PostBind; ``Scheduled``;
* a **409** (the pod is already bound, is being deleted, or was recreated) or **404**
  (deleted) is an answer about the pod (``FINAL``): Unreserve, forget the assumption
  and back off without a status write; the watch removes a pod bound or deleted
  meanwhile from the queue, and any other is placed again (kube-scheduler's
  handleSchedulingFailure). The API never binds a pod twice, so the retry can only fail
  or bind one that was not;
* anything else (5xx and throttling after the client's own retries, a plugin error):
  Unreserve, forget, back to the queue with backoff, and ``PodScheduled=False``.

:class:`APIBinder` refuses to send a binding unless :attr:`APIBinder.may_bind` says so
(the leader check), right before the request: a replica that lost its lease never
binds, whatever was in flight.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from nodeagent.base import errors
from nodeagent.kube import client
from nodeagent.scheduler import api
from nodeagent.scheduler.api import BindResult, FinalBindError
from nodeagent.scheduler.framework import CycleState, Framework, PreBindPreFlight
from nodeagent.scheduler.plugins.default_binder import DefaultBinder

__all__ = [
    "APIBinder",
    "AsyncBinder",
    "BindResult",
    "Binding",
    "BindingPool",
    "direct_binder",
    "run_binding_cycle",
]

log = logging.getLogger(__name__)

MAX_BINDING_THREADS = 256
"""The most binding cycles in flight at once on threads: the pool starts with its
``workers`` and grows while every one of them is busy."""


class APIBinder:
    """The framework's :class:`~nodeagent.scheduler.framework.Binder` over the API."""

    def __init__(self, kube: client.ClusterClient, may_bind: Callable[[], bool]) -> None:
        self._kube = kube
        self.may_bind = may_bind

    def bind(self, pod: api.Pod, node_name: str) -> api.Status:
        if not self.may_bind():
            return api.error("not the leader: binding withheld")
        try:
            self._kube.bind_pod(pod.namespace, pod.name, uid=pod.uid, node_name=node_name)
        except (errors.Conflict, errors.NotFound) as exc:
            raise FinalBindError(str(exc)) from exc
        except errors.KubeAPIError as exc:
            return api.error(f"binding rejected: {exc}")
        return api.SUCCESS


@dataclass(frozen=True, slots=True)
class Binding:
    """One scheduling cycle's decision, ready to bind."""

    pod: api.Pod
    node: str
    framework: Framework
    state: CycleState
    submitted: float = 0.0
    """Monotonic seconds when the scheduling cycle handed it over."""


@runtime_checkable
class AsyncBinder(Protocol):
    """A binder that answers later instead of blocking its caller (the binding
    process): ``done(result, why)`` is called once, on a thread of the binder's."""

    def bind_async(
        self, pod: api.Pod, node_name: str, done: Callable[[BindResult, str], None]
    ) -> None: ...


def direct_binder(fw: Framework) -> AsyncBinder | None:
    """The binder ``fw``'s bindings go to without a worker thread: when the binding
    cycle is DefaultBinder's alone (no PreBind plugin, or only ones that may skip, no
    binder extender, DefaultBinder the first Bind plugin) and the binder answers
    asynchronously. A worker thread would only wait for its answer."""
    skippable = all(isinstance(p, PreBindPreFlight) for p in fw.pre_bind)
    if not skippable or not fw.bind or not isinstance(fw.bind[0], DefaultBinder):
        return None
    extenders = fw.handle.extenders
    if extenders is not None and any(e.is_binder for e in extenders.items):
        return None
    binder = fw.handle.binder
    return binder if isinstance(binder, AsyncBinder) else None


def run_binding_cycle(binding: Binding) -> tuple[BindResult, str]:
    """PreBind, Bind, PostBind; Unreserve on failure. Returns the result and, for a
    failure, why."""
    fw, state, pod, node = binding.framework, binding.state, binding.pod, binding.node
    try:
        status = fw.run_pre_bind(state, pod, node)
        if status.is_success:
            status = fw.run_bind(state, pod, node)
    except FinalBindError as exc:
        return conclude(binding, BindResult.FINAL, str(exc))
    except Exception as exc:  # a plugin bug: the pod backs off, the worker lives on
        log.exception("binding cycle of %s failed", pod.key)
        status = api.error(f"binding cycle raised {exc!r}")
    if not status.is_success:
        return conclude(binding, BindResult.FAILED, status.message)
    return conclude(binding, BindResult.BOUND, "")


def conclude(binding: Binding, result: BindResult, why: str) -> tuple[BindResult, str]:
    """The binding cycle's end once Bind has answered: PostBind, or Unreserve."""
    fw, state, pod, node = binding.framework, binding.state, binding.pod, binding.node
    if result is BindResult.BOUND:
        fw.run_post_bind(state, pod, node)
        return result, ""
    fw.run_unreserve(state, pod, node)
    return result, why


class BindingPool:
    """Runs binding cycles on ``workers`` threads, more (up to ``max_workers``) while
    bindings outnumber the idle ones; ``on_done(binding, result, why)`` is called on the
    worker thread when one ends. A binding whose cycle is a direct
    binder's bind alone (:func:`direct_binder`: the binding process) takes no worker:
    it is handed over at once and its cycle ends on the thread that reads the answer.

    A plain queue and threads rather than an executor: :meth:`submit` is on the
    scheduling thread's path once per pod, and an executor's submit (a Future, its
    locks, its thread-count check) cost more than the cycle's own hand-off.

    With ``workers=0`` no thread is started: submitted bindings wait in :attr:`waiting`
    until a driver runs them, in any order it likes, with :meth:`run` (the deterministic
    simulation steps the binding cycles this way; the code that runs is the same)."""

    def __init__(
        self,
        workers: int,
        on_done: Callable[[Binding, BindResult, str], None],
        *,
        max_workers: int = MAX_BINDING_THREADS,
    ) -> None:
        self._queue: queue.SimpleQueue[Binding | None] = queue.SimpleQueue()
        self._on_done = on_done
        self._lock = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self._idle = 0
        """Workers waiting for a binding (guarded by ``_lock``)."""
        self._queued = 0
        """Bindings submitted to the workers and not taken yet (guarded by ``_lock``)."""
        self._max_workers = max(workers, max_workers)
        self.stepped = workers == 0
        self.waiting: list[Binding] = []
        """Submitted and not yet run (stepped pools only)."""
        self._direct: dict[Framework, AsyncBinder | None] = {}
        """Per framework, the binder its bindings go to without a worker
        (:func:`direct_binder`), once asked."""
        self._threads: list[threading.Thread] = []
        for _ in range(workers):
            self._spawn()

    def _spawn(self) -> None:
        thread = threading.Thread(
            target=self._work, name=f"binder_{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def submit(self, binding: Binding) -> None:
        with self._lock:
            self._in_flight += 1
            if self.stepped:
                self.waiting.append(binding)
                return
        fw = binding.framework
        if fw not in self._direct:
            self._direct[fw] = direct_binder(fw)
        direct = self._direct[fw]
        if direct is not None and (
            not fw.pre_bind or fw.pre_bind_skipped(binding.state, binding.pod, binding.node)
        ):
            direct.bind_async(binding.pod, binding.node, functools.partial(self._answered, binding))
            return
        with self._lock:
            # a binding may wait long in PreBind (VolumeBinding waits for the PV
            # controller, up to bindTimeoutSeconds): one more worker rather than a queue
            # behind the waiting ones, as kube-scheduler's goroutine per binding
            if (
                self._threads
                and self._queued >= self._idle
                and len(self._threads) < self._max_workers
            ):
                self._spawn()
            self._queued += 1
        self._queue.put(binding)

    def _answered(self, binding: Binding, result: BindResult, why: str) -> None:
        """A direct binder's answer: the rest of the binding cycle, on its thread."""
        try:
            if not self._closed:
                result, why = conclude(binding, result, why)
                self._on_done(binding, result, why)
        except Exception:
            log.exception("binding of %s: completion failed", binding.pod.key)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            binding = self._queue.get()
            with self._lock:
                self._idle -= 1
                if binding is not None:
                    self._queued -= 1
            if binding is None:
                return
            self.run(binding)

    def run(self, binding: Binding) -> None:
        """One binding cycle and its completion (a worker's job; a stepped pool's driver
        calls it for a binding it takes out of :attr:`waiting`)."""
        try:
            if not self._closed:  # after shutdown, what is left is dropped
                result, why = run_binding_cycle(binding)
                self._on_done(binding, result, why)
        except Exception:  # on_done's bug must not kill the worker
            log.exception("binding of %s: completion failed", binding.pod.key)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._lock.notify_all()

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the bindings in flight; True if none is
        left."""
        with self._lock:
            return self._lock.wait_for(lambda: self._in_flight == 0, timeout)

    def shutdown(self) -> None:
        """Stop the workers; bindings not started yet are dropped (not bound)."""
        self._closed = True
        with self._lock:
            self._in_flight -= len(self.waiting)
            self.waiting.clear()
        with self._lock:
            threads = len(self._threads)
        for _ in range(threads):
            self._queue.put(None)
