"""The binding process, for real: a spawned child connected by kubeconfig to the fake API
server over HTTP binds what the scheduler hands it; 409 is final; 5xx is retried by the
child's client and reported to the scheduler's metrics; a child that dies fails what it
had in flight and is replaced; children that die before answering anything are not
restarted in a loop; the leader check stays in the scheduler; a lost lease kills the
child; a hanging events API delays no binding; and the live scheduler binds every pod
through it."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kube import client, http, retry
from nodeagent.kube.address import Address
from nodeagent.scheduler import api, objects
from nodeagent.scheduler.api import BindResult, FinalBindError
from nodeagent.scheduler.live import bind_process
from nodeagent.scheduler.live.bind_process import ProcessBinder, Reporting
from nodeagent.scheduler.live.scheduler import LiveScheduler
from tests.fakeapi.fixtures import write_kubeconfig
from tests.fakeapi.server import FakeAPIServer
from tests.scheduler.live import harness as h
from tests.waiting import eventually

Binder = tuple[ProcessBinder, client.RecordingObserver]


def spec(api_server: FakeAPIServer, tmp_path: Path) -> http.ConnectionSpec:
    return http.ConnectionSpec(
        write_kubeconfig(tmp_path / "kubeconfig", api_server.url),
        qps=1000.0,
        burst=1000,
        retry_policy=h.FAST_RETRY,
        timeout=(2.0, 5.0),
    )


@dataclass(frozen=True)
class UnreadableCA:
    """A server whose CA file the child cannot read: it dies before answering anything."""

    ca_file: Path
    qps: float = 10.0
    burst: int = 10
    retry_policy: retry.RetryPolicy = h.FAST_RETRY
    timeout: tuple[float, float] = (1.0, 1.0)

    def resolve(self) -> tuple[Address, Callable[[], dict[str, str]]]:
        return Address("127.0.0.1", 6443, https=True, ca_file=str(self.ca_file)), dict


@dataclass(frozen=True)
class Rotating:
    """A server reached with a token that changes when ``token[0]`` does."""

    spec: http.ConnectionSpec
    token: list[str]
    qps: float = 1000.0
    burst: int = 1000
    retry_policy: retry.RetryPolicy = h.FAST_RETRY
    timeout: tuple[float, float] = (2.0, 5.0)

    def resolve(self) -> tuple[Address, Callable[[], dict[str, str]]]:
        address, _ = self.spec.resolve()
        return address, lambda: {"Authorization": f"Bearer {self.token[0]}"}


def pending(api_server: FakeAPIServer, name: str) -> api.Pod:
    return objects.parse_pod(api_server.cluster.create("pods", h.pod(name)))


@pytest.fixture
def binder(fake_api: FakeAPIServer, tmp_path: Path) -> Iterator[Binder]:
    recorder = client.RecordingObserver()
    binder = ProcessBinder(spec(fake_api, tmp_path), lambda: True, observer=recorder)
    binder.start()
    try:
        yield binder, recorder
    finally:
        binder.close()


def test_binds_over_http_and_a_409_is_final(fake_api: FakeAPIServer, binder: Binder) -> None:
    process_binder, recorder = binder
    fake_api.cluster.create("nodes", h.node("n1"))
    pod = pending(fake_api, "p1")
    assert process_binder.bind(pod, "n1").is_success
    assert h.node_of(fake_api, "p1") == "n1"
    with pytest.raises(FinalBindError, match="already assigned"):
        process_binder.bind(pod, "n2")
    assert h.node_of(fake_api, "p1") == "n1"
    assert recorder.requests == [
        ("create", "pods/binding", "201"),
        ("create", "pods/binding", "409"),
    ]
    assert process_binder.starts == 1


def test_the_child_records_one_scheduled_event_per_bound_pod(
    fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    recorder = client.RecordingObserver()
    process_binder = ProcessBinder(
        spec(fake_api, tmp_path),
        lambda: True,
        observer=recorder,
        reporting=Reporting("my-scheduler", "replica-1"),
    )
    try:
        fake_api.cluster.create("nodes", h.node("n1"))
        first = pending(fake_api, "p1")
        assert process_binder.bind(first, "n1").is_success
        with pytest.raises(FinalBindError):
            process_binder.bind(first, "n1")  # a 409 records nothing
        [event] = eventually(lambda: h.events_for(fake_api, "p1", "Scheduled"))
        assert event["message"] == "Successfully assigned default/p1 to n1"
        assert event["type"] == "Normal"
        assert event["involvedObject"]["uid"] == first.uid
        assert event["source"] == {"component": "my-scheduler", "host": "replica-1"}
        # the event's request reaches the scheduler's metrics with a later answer
        more = (pending(fake_api, f"q{i}") for i in itertools.count())

        def shipped() -> bool:
            assert process_binder.bind(next(more), "n1").is_success
            return ("create", "events", "201") in recorder.requests

        eventually(shipped, what="the event's request observed")
    finally:
        process_binder.close()
    # every bound pod's event is written before the child exits, and only those
    scheduled = [e for e in fake_api.cluster.list("events").items if e["reason"] == "Scheduled"]
    assert sorted(e["involvedObject"]["name"] for e in scheduled) == sorted(
        name for _, name, _ in fake_api.cluster.bindings
    )


def test_bindings_go_on_while_the_events_api_hangs_and_the_events_follow(
    fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    process_binder = ProcessBinder(
        spec(fake_api, tmp_path),
        lambda: True,
        reporting=Reporting("my-scheduler", "replica-1"),
    )
    names = [f"p{i}" for i in range(12)]  # more than the event writers
    try:
        fake_api.cluster.create("nodes", h.node("n1"))
        with fake_api.hold("/events$"):
            for name in names:
                assert process_binder.bind(pending(fake_api, name), "n1").is_success
            assert fake_api.cluster.list("events").items == ()
        eventually(
            lambda: len(fake_api.cluster.list("events").items) == len(names),
            what="every held event written once the API answers",
        )
    finally:
        process_binder.close()
    events = fake_api.cluster.list("events").items
    assert sorted(e["involvedObject"]["name"] for e in events) == sorted(names)
    assert {e["reason"] for e in events} == {"Scheduled"}


def test_what_the_child_logs_the_scheduler_logs(
    fake_api: FakeAPIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    process_binder = ProcessBinder(
        spec(fake_api, tmp_path),
        lambda: True,
        reporting=Reporting("my-scheduler", "replica-1"),
    )
    fake_api.fail_next(10, status=403, method="POST", path="/events$")  # not retried
    try:
        with caplog.at_level(logging.WARNING):
            assert process_binder.bind(pending(fake_api, "p1"), "n1").is_success
            [record] = eventually(
                lambda: [r for r in caplog.records if "binding process" in r.getMessage()],
                what="the child's warning, logged here",
            )
    finally:
        process_binder.close()
    assert record.name == "nodeagent.scheduler.live.bind_child"
    assert record.levelno == logging.WARNING
    assert "record event Scheduled on default/p1" in record.getMessage()
    assert "403" in record.getMessage()


def test_a_5xx_is_retried_in_the_child_and_the_retry_reaches_the_metrics(
    fake_api: FakeAPIServer, binder: Binder
) -> None:
    process_binder, recorder = binder
    pod = pending(fake_api, "p1")
    fake_api.fail_next(1, status=503, method="POST", path="/binding$")
    assert process_binder.bind(pod, "n1").is_success
    assert h.node_of(fake_api, "p1") == "n1"
    assert recorder.requests == [
        ("create", "pods/binding", "503"),
        ("create", "pods/binding", "201"),
    ]
    assert [r[:2] for r in recorder.retries] == [("create", "pods/binding")]


def test_an_error_that_outlasts_the_retries_fails_the_binding_for_a_later_try(
    fake_api: FakeAPIServer, binder: Binder
) -> None:
    process_binder, _ = binder
    pod = pending(fake_api, "p1")
    fake_api.fail_next(5, status=500, method="POST", path="/binding$")
    status = process_binder.bind(pod, "n1")
    assert status.code is api.Code.ERROR
    assert "binding rejected" in status.message
    assert h.node_of(fake_api, "p1") == ""


def test_the_leader_check_stays_in_the_scheduler(fake_api: FakeAPIServer, tmp_path: Path) -> None:
    leading = threading.Event()
    process_binder = ProcessBinder(spec(fake_api, tmp_path), leading.is_set)
    try:
        pod = pending(fake_api, "p1")
        status = process_binder.bind(pod, "n1")
        assert "not the leader" in status.message
        assert process_binder.starts == 0  # nothing was even started
        leading.set()
        assert process_binder.bind(pod, "n1").is_success
    finally:
        process_binder.close()
    assert len(fake_api.requests_to("POST", "/binding$")) == 1


def test_a_child_that_dies_fails_what_it_held_and_is_replaced(
    fake_api: FakeAPIServer, binder: Binder
) -> None:
    process_binder, _ = binder
    assert process_binder.bind(pending(fake_api, "first"), "n1").is_success  # it worked
    fake_api.add_latency(3.0, method="POST", path="/binding$")
    held = pending(fake_api, "held")
    outcome: list[api.Status] = []
    waiter = threading.Thread(target=lambda: outcome.append(process_binder.bind(held, "n1")))
    waiter.start()
    eventually(lambda: len(fake_api.requests_to("POST", "/binding$")) == 2, what="POST sent")
    child = process_binder._child
    assert child is not None
    assert child.process.pid is not None
    os.kill(child.process.pid, signal.SIGKILL)
    waiter.join(5)
    assert outcome and outcome[0].code is api.Code.ERROR
    assert "exited before answering" in outcome[0].message
    fake_api.clear_faults()
    assert process_binder.bind(pending(fake_api, "next"), "n1").is_success
    assert process_binder.starts == 2


def test_children_that_die_before_answering_are_not_restarted_in_a_loop(
    fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    now = [0.0]
    target = UnreadableCA(tmp_path / "missing-ca.crt")
    process_binder = ProcessBinder(target, lambda: True, clock=lambda: now[0])
    try:
        pod = pending(fake_api, "p1")
        assert "exited before answering" in process_binder.bind(pod, "n1").message
        eventually(
            lambda: process_binder._child is not None and process_binder._child.exited.is_set()
        )
        # the second start waits for the first delay; a binding meanwhile is refused
        assert "restarting in 1.0 s" in process_binder.bind(pod, "n1").message
        assert process_binder.starts == 1
        now[0] = 1.0
        assert "exited before answering" in process_binder.bind(pod, "n1").message
        assert process_binder.starts == 2
        eventually(
            lambda: process_binder._child is not None and process_binder._child.exited.is_set()
        )
        now[0] = 2.5  # the delay doubled: 2 s from the second start
        assert "restarting in 0.5 s" in process_binder.bind(pod, "n1").message
        assert process_binder.starts == 2
    finally:
        process_binder.close()
    assert fake_api.requests_to("POST", "/binding$") == []


def test_a_binding_the_child_never_answers_fails_after_the_answer_timeout(
    fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    process_binder = ProcessBinder(spec(fake_api, tmp_path), lambda: True, answer_timeout=0.5)
    answers: list[tuple[BindResult, str]] = []
    try:
        with fake_api.hold("/binding$"):
            process_binder.bind_async(
                pending(fake_api, "p1"), "n1", lambda *answer: answers.append(answer)
            )
            process_binder.flush()
            [(result, why)] = eventually(lambda: answers, what="the timeout's answer")
            assert result is BindResult.FAILED
            assert "did not answer within 0.5 s" in why
        # the child's late answer finds nobody waiting; the next binding is answered
        assert process_binder.bind(pending(fake_api, "p2"), "n1").is_success
    finally:
        process_binder.close()
    assert len(answers) == 1
    assert process_binder.starts == 1


def test_a_kubeconfig_the_scheduler_cannot_read_starts_nothing(
    fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    process_binder = ProcessBinder(http.ConnectionSpec(tmp_path / "no-kubeconfig"), lambda: True)
    try:
        status = process_binder.bind(pending(fake_api, "p1"), "n1")
        assert status.code is api.Code.ERROR
        assert "binding process not started" in status.message
        assert "no-kubeconfig" in status.message
        assert process_binder.starts == 0
    finally:
        process_binder.close()


def test_rotated_credentials_reach_the_child(
    fake_api: FakeAPIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bind_process, "CREDENTIALS_CHECK", 0.05)
    token = ["first"]
    process_binder = ProcessBinder(Rotating(spec(fake_api, tmp_path), token), lambda: True)
    more = (pending(fake_api, f"p{i}") for i in itertools.count())
    try:
        assert process_binder.bind(next(more), "n1").is_success
        token[0] = "second"

        def sent_with_the_new_token() -> bool:
            assert process_binder.bind(next(more), "n1").is_success
            return fake_api.requests_to("POST", "/binding$")[-1].authorization == "Bearer second"

        eventually(sent_with_the_new_token, what="a binding with the rotated token")
    finally:
        process_binder.close()
    tokens = [r.authorization for r in fake_api.requests_to("POST", "/binding$")]
    assert tokens[0] == "Bearer first"
    # once rotated, never the old one again
    assert "Bearer first" not in tokens[tokens.index("Bearer second") :]
    assert process_binder.starts == 1


def test_a_lost_lease_kills_the_child_and_nothing_it_held_goes_out(
    fake_api: FakeAPIServer, binder: Binder
) -> None:
    process_binder, _ = binder
    assert process_binder.bind(pending(fake_api, "before"), "n1").is_success
    process_binder.abandon()
    child = process_binder._child
    assert child is not None
    assert child.exited.wait(5)
    status = process_binder.bind(pending(fake_api, "after"), "n1")
    assert status.code is api.Code.ERROR
    assert process_binder.starts == 1
    assert h.node_of(fake_api, "after") == ""


def test_a_child_whose_scheduler_is_gone_finishes_what_it_sent_and_exits(
    fake_api: FakeAPIServer, binder: Binder
) -> None:
    process_binder, _ = binder
    assert process_binder.bind(pending(fake_api, "p1"), "n1").is_success
    child = process_binder._child
    assert child is not None
    child.sock.shutdown(socket.SHUT_WR)  # as when the scheduler dies: end of stream
    assert child.exited.wait(10)
    assert child.process.returncode == 0


def test_close_lets_the_child_finish_and_exit(fake_api: FakeAPIServer, binder: Binder) -> None:
    process_binder, _ = binder
    assert process_binder.bind(pending(fake_api, "p1"), "n1").is_success
    started = time.monotonic()
    process_binder.close()
    child = process_binder._child
    assert child is not None and child.exited.is_set()
    assert child.process.returncode == 0
    assert time.monotonic() - started < 10  # finished, not killed by a timeout


def test_the_live_scheduler_binds_every_pod_through_it(
    fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    for i in range(3):
        fake_api.cluster.create("nodes", h.node(f"n{i}"))
    for i in range(30):
        fake_api.cluster.create("pods", h.pod(f"p{i}"))
    scheduler = LiveScheduler(
        h.connect(fake_api),
        h.settings(),
        seed=1,
        watch_timeout=30,
        bind_target=spec(fake_api, tmp_path),
    )
    assert scheduler.start(sync_timeout=10)
    try:
        eventually(lambda: all(h.node_of(fake_api, f"p{i}") for i in range(30)), what="all bound")
        eventually(lambda: scheduler.bound_count == 30, what="all confirmed")
    finally:
        scheduler.stop()
    assert len(fake_api.requests_to("POST", "/binding$")) == 30
    metrics: Any = scheduler.metrics
    assert metrics.binding_process_starts._value.get() == 1
    assert metrics._request_child("create", "pods/binding", "201")._value.get() == 30
    assert scheduler.process_binder is not None
