"""Pipelined POSTs (:mod:`nodeagent.kube.pipeline`) against a scripted HTTP/1.1 server on
loopback: every call ends exactly once, whatever the server does to each request
(answer, refuse, close after answering, drop the connection, answer in chunks, say
nothing, talk nonsense); what it never read is sent again without costing an attempt;
what it may have read is a fault, retried by the policy; answers are matched to their
requests in order; requests really are pipelined on few connections."""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.base import errors
from nodeagent.kube import client, pipeline, ratelimit, retry
from nodeagent.kube import errors as kube_errors
from nodeagent.kube.address import Address

NO_WAIT = retry.RetryPolicy(attempts=3, initial_delay=0.001, max_delay=0.002)
LIMITS = pipeline.Limits(connections=2, depth=8, read_timeout=0.3)


class Act(Enum):
    OK = "201"
    CONFLICT = "409"
    UNAVAILABLE = "503"
    CLOSE_AFTER = "201, then Connection: close"
    CHUNKED = "201 in chunks"
    DROP = "connection dropped unanswered"
    GARBAGE = "not HTTP"
    SILENT = "no answer at all"


@dataclass
class Seen:
    path: str
    authorization: str
    connection: int


@dataclass
class Script:
    """What the server does with the n-th request to each path (then OK)."""

    acts: dict[str, list[Act]] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds before each answer (lets the client pipeline behind it)."""
    seen: list[Seen] = field(default_factory=list)
    max_owed: int = 0
    """The most requests one connection had received and not yet answered."""
    received: int = 0
    connections: int = 0

    def act(self, path: str) -> Act:
        queued = self.acts.get(path)
        return queued.pop(0) if queued else Act.OK


class _ServerSide(asyncio.Protocol):
    def __init__(self, script: Script) -> None:
        self.script = script
        script.connections += 1
        self.number = script.connections
        self.buffer = b""
        self.owed: collections.deque[Seen] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.answering = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, rest = self.buffer.split(b"\r\n\r\n", 1)
            lines = head.decode().split("\r\n")
            headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
            length = int(headers.get("content-length", "0"))
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            path = lines[0].split(" ")[1]
            self.owed.append(Seen(path, headers.get("authorization", ""), self.number))
            self.script.received += 1
            self.script.max_owed = max(self.script.max_owed, len(self.owed))
        if not self.answering:
            self.answering = True
            asyncio.get_running_loop().call_later(self.script.delay, self.answer)

    def answer(self) -> None:
        self.answering = False
        transport = self.transport
        while self.owed and transport is not None and not self.closed:
            # a request is processed when it is answered: what a close or a drop
            # leaves owed was never processed
            request = self.owed.popleft()
            self.script.seen.append(request)
            act = self.script.act(request.path)
            if act is Act.SILENT:
                self.owed.clear()
                return
            if act is Act.DROP:
                self.closed = True
                transport.abort()
                return
            if act is Act.GARBAGE:
                transport.write(b"SMTP ready\r\n\r\n")
                continue
            status = {Act.CONFLICT: 409, Act.UNAVAILABLE: 503}.get(act, 201)
            body = b'{"kind":"Status","reason":"x","message":"scripted"}'
            head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            if act is Act.UNAVAILABLE:
                head += "Retry-After: 0\r\n"
            if act is Act.CLOSE_AFTER:
                head += "Connection: close\r\n"
            if act is Act.CHUNKED:
                chunks = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
                transport.write(head.encode() + b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
            else:
                transport.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            if act is Act.CLOSE_AFTER:
                self.closed = True
                transport.close()  # what came after it is never read
                return


@dataclass
class Outcome:
    errors: dict[str, list[type[BaseException] | None]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    observer: client.RecordingObserver = field(default_factory=client.RecordingObserver)
    messages: dict[str, list[str]] = field(default_factory=lambda: collections.defaultdict(list))


def run(
    script: Script,
    paths: list[str],
    *,
    limits: pipeline.Limits = LIMITS,
    policy: retry.RetryPolicy = NO_WAIT,
    limiter: ratelimit.TokenBucket | None = None,
    credentials: Callable[[], dict[str, str]] = dict,
    port: int | None = None,
    timeout: float = 10.0,
) -> Outcome:
    """POST once to each of ``paths`` against ``script`` and wait for every outcome."""
    outcome = Outcome()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _ServerSide(script), "127.0.0.1", 0)
        address = Address("127.0.0.1", port or server.sockets[0].getsockname()[1], https=False)
        poster = pipeline.Poster(
            address,
            credentials,
            limits=limits,
            retry_policy=policy,
            limiter=limiter,
            observer=outcome.observer,
        )
        finished = asyncio.Event()
        left = len(paths)

        def done(path: str, error: errors.KubeAPIError | None) -> None:
            nonlocal left
            outcome.errors[path].append(None if error is None else type(error))
            if error is not None:
                outcome.messages[path].append(str(error))
            left -= 1
            if left == 0:
                finished.set()

        for path in paths:
            poster.post(
                "create",
                "things",
                what=f"post {path}",
                path=path,
                body=b"{}",
                done=functools.partial(done, path),
            )
        try:
            await asyncio.wait_for(finished.wait(), timeout)
        finally:
            poster.close()
            server.close()

    asyncio.run(main())
    return outcome


def paths(count: int) -> list[str]:
    return [f"/p{i}" for i in range(count)]


class TestPipelining:
    def test_many_calls_share_few_connections_with_several_owed_at_once(self) -> None:
        script = Script(delay=0.05)
        outcome = run(script, paths(40))
        assert all(outcome.errors[p] == [None] for p in paths(40))
        assert script.connections <= 2
        assert script.max_owed > 1  # pipelined: written before the first answer came
        assert script.max_owed <= 8  # never deeper than the limit
        assert len(script.seen) == 40

    def test_answers_go_to_their_own_calls_in_order(self) -> None:
        every = paths(30)
        acts = {p: [Act.CONFLICT] for p in every[::3]}
        outcome = run(Script(acts=acts, delay=0.01), every)
        for i, path in enumerate(every):
            assert outcome.errors[path] == [errors.Conflict if i % 3 == 0 else None], path

    def test_chunked_answers_are_read(self) -> None:
        every = paths(6)
        outcome = run(Script(acts={p: [Act.CHUNKED] for p in every}), every)
        assert all(outcome.errors[p] == [None] for p in every)

    def test_the_credentials_go_with_every_request(self) -> None:
        script = Script()
        run(script, paths(5), credentials=lambda: {"Authorization": "Bearer abc"})
        assert {s.authorization for s in script.seen} == {"Bearer abc"}


class TestWhatTheServerNeverRead:
    def test_requests_behind_a_connection_close_are_sent_again_for_free(self) -> None:
        # one attempt only: a call charged for its first send would fail
        script = Script(acts={"/p0": [Act.CLOSE_AFTER]}, delay=0.05)
        every = paths(10)
        outcome = run(script, every, policy=retry.NO_RETRY)
        assert all(outcome.errors[p] == [None] for p in every)
        assert script.connections >= 2
        assert outcome.observer.retries == []
        assert ("create", "things", "error") not in outcome.observer.requests
        # each path answered once: p0 once, the rest once each on a later connection
        answered = collections.Counter(c for c in outcome.observer.requests)
        assert answered[("create", "things", "201")] == 10


class TestFaults:
    def test_a_dropped_connection_fails_what_it_owed_and_the_policy_retries_it(self) -> None:
        script = Script(acts={"/p1": [Act.DROP]}, delay=0.02)
        every = paths(4)
        outcome = run(script, every)
        assert all(outcome.errors[p] == [None] for p in every)
        assert ("create", "things", "error") in outcome.observer.requests
        assert ("create", "things", "Unavailable") in outcome.observer.retries

    def test_a_5xx_is_retried_and_its_retry_after_honoured(self) -> None:
        outcome = run(Script(acts={"/p0": [Act.UNAVAILABLE, Act.UNAVAILABLE]}), ["/p0"])
        assert outcome.errors["/p0"] == [None]
        assert [r[2] for r in outcome.observer.requests] == ["503", "503", "201"]
        assert len(outcome.observer.retries) == 2

    def test_a_5xx_that_outlasts_the_attempts_ends_the_call(self) -> None:
        acts = {"/p0": [Act.UNAVAILABLE] * 3}
        outcome = run(Script(acts=acts), ["/p0"])
        assert outcome.errors["/p0"] == [kube_errors.Unavailable]

    def test_a_409_is_an_answer_and_not_retried(self) -> None:
        outcome = run(Script(acts={"/p0": [Act.CONFLICT]}), ["/p0"])
        assert outcome.errors["/p0"] == [errors.Conflict]
        assert outcome.observer.retries == []

    def test_an_answer_that_is_not_http_is_a_fault(self) -> None:
        outcome = run(Script(acts={"/p0": [Act.GARBAGE]}), ["/p0"])
        assert outcome.errors["/p0"] == [None]  # retried on a fresh connection
        assert ("create", "things", "error") in outcome.observer.requests

    def test_a_server_that_says_nothing_is_given_up_on_after_the_read_timeout(self) -> None:
        started = time.monotonic()
        outcome = run(Script(acts={"/p0": [Act.SILENT]}), ["/p0"])
        assert outcome.errors["/p0"] == [None]  # the retry, on a new connection, answered
        assert ("create", "things", "error") in outcome.observer.requests
        assert time.monotonic() - started >= 0.3

    def test_the_error_says_why_the_connection_was_given_up(self) -> None:
        silent = run(Script(acts={"/p0": [Act.SILENT]}), ["/p0"], policy=retry.NO_RETRY)
        garbage = run(Script(acts={"/p0": [Act.GARBAGE]}), ["/p0"], policy=retry.NO_RETRY)
        assert silent.messages["/p0"] == ["post /p0: no answer: no answer within 0.3 s"]
        [message] = garbage.messages["/p0"]
        assert message.startswith("post /p0: no answer: unreadable answer:")

    def test_nobody_listening_ends_every_call_as_unavailable(self) -> None:
        outcome = run(Script(), paths(3), port=1)
        assert all(outcome.errors[p] == [kube_errors.Unavailable] for p in paths(3))
        assert [r[2] for r in outcome.observer.requests] == ["error"] * 9


class TestBudget:
    def test_the_token_bucket_spaces_the_requests(self) -> None:
        bucket = ratelimit.TokenBucket(50.0, 1)
        started = time.monotonic()
        outcome = run(Script(), paths(6), limiter=bucket)
        assert all(outcome.errors[p] == [None] for p in paths(6))
        assert time.monotonic() - started >= 5 / 50 * 0.9


RECOVERABLE = [Act.OK, Act.CONFLICT, Act.UNAVAILABLE, Act.CLOSE_AFTER, Act.CHUNKED, Act.DROP]


def scripted_verdict(acts: list[Act], attempts: int = 3) -> type[BaseException] | None:
    """What a call ends with when the server processes its requests with ``acts`` (then
    OK), the policy allowing ``attempts``."""
    for tried, act in enumerate([*acts, Act.OK], start=1):
        if act in (Act.OK, Act.CHUNKED, Act.CLOSE_AFTER):
            return None
        if act is Act.CONFLICT:
            return errors.Conflict
        if tried == attempts:
            return kube_errors.Unavailable
    raise AssertionError("unreachable")


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(RECOVERABLE), max_size=3), min_size=1, max_size=12),
    st.sampled_from([0.0, 0.01]),
)
def test_every_call_ends_exactly_once_with_what_the_server_said(
    scripted: list[list[Act]], delay: float
) -> None:
    every = paths(len(scripted))
    acts = {p: list(a) for p, a in zip(every, scripted, strict=True)}
    script = Script(acts={p: list(a) for p, a in acts.items()}, delay=delay)
    outcome = run(script, every)
    drops = any(Act.DROP in a for a in scripted)
    for path in every:
        [verdict] = outcome.errors[path]  # ended, and once
        expected = scripted_verdict(acts[path])
        if drops:
            # a request behind another's dropped connection may have been processed:
            # it is a fault that costs an attempt, and enough of them end the call
            assert verdict in (expected, kube_errors.Unavailable), path
        else:
            assert verdict is expected, (path, acts[path])
        processed = sum(s.path == path for s in script.seen)
        assert processed <= len(acts[path]) + 1, path


@pytest.mark.parametrize("depth", [1, 4])
def test_the_depth_bounds_what_one_connection_owes(depth: int) -> None:
    script = Script(delay=0.02)
    run(script, paths(20), limits=pipeline.Limits(connections=1, depth=depth))
    assert script.max_owed <= depth
    assert script.connections == 1


def test_close_ends_what_is_owed_once_and_sends_nothing_more() -> None:
    script = Script(delay=30.0)  # answers nothing while the test runs
    ended: list[tuple[str, type[BaseException] | None]] = []
    observer = client.RecordingObserver()

    def end(path: str, error: errors.KubeAPIError | None) -> None:
        ended.append((path, None if error is None else type(error)))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _ServerSide(script), "127.0.0.1", 0)
        address = Address("127.0.0.1", server.sockets[0].getsockname()[1], https=False)
        limits = pipeline.Limits(connections=1, depth=2)  # two owed, two not written
        poster = pipeline.Poster(
            address, dict, limits=limits, retry_policy=NO_WAIT, observer=observer
        )
        for path in paths(4):
            poster.post(
                "create",
                "things",
                what=path,
                path=path,
                body=b"{}",
                done=functools.partial(end, path),
            )
        while script.received < 2:
            await asyncio.sleep(0.01)
        poster.close()
        await asyncio.sleep(0.1)  # a retry, had one been scheduled, would run now
        assert poster.pending == 0
        server.close()

    asyncio.run(main())
    assert sorted(ended) == [("/p0", kube_errors.Unavailable), ("/p1", kube_errors.Unavailable)]
    assert observer.retries == []
    assert script.received == 2
