"""HTTP/1.1 keep-alive in the shared server, on the wire: which requests share a
connection, when the server ends one (the client says so, HTTP/1.0, a body left unread,
an error, idling, a silent client, the connection bound, stopping) and that every answer
carries its length. Each test talks to a real server over a real socket and waits on the
socket itself (a read that returns the end of the stream), never on a sleep."""

from __future__ import annotations

import http.client
import io
import select
import socket
import socketserver
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.serving import server as serving
from nodeagent.serving.server import Server
from nodeagent.serving.settings import ListenAddress
from nodeagent.serving.wsgi import StartResponse
from tests.waiting import eventually


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """Echoes the body; ``/status/NNN`` answers NNN, ``/ignore`` leaves the body unread,
    ``/chunks`` answers in a generator without a length, ``/raise`` fails."""
    path = environ["PATH_INFO"]
    if path == "/raise":
        raise RuntimeError("app bug")
    if path == "/chunks":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return (part for part in (b"one ", b"two"))
    body = b"" if path == "/ignore" else environ["wsgi.input"].read()
    status = path.removeprefix("/status/") + " X" if path.startswith("/status/") else "200 OK"
    start_response(status, [("Content-Type", "text/plain")])
    return [b"got:", body]


@contextmanager
def running(**kwargs: Any) -> Iterator[Server]:
    with Server(ListenAddress("127.0.0.1", 0), app, **kwargs) as server:
        yield server


@pytest.fixture
def port() -> Iterator[int]:
    with running() as server:
        yield server.port


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def exchange(raw: socket.socket, request: bytes) -> http.client.HTTPResponse:
    """Sends ``request`` and reads one whole answer (by its Content-Length)."""
    raw.sendall(request)
    response = http.client.HTTPResponse(raw)
    response.begin()
    response.body = response.read()  # type: ignore[attr-defined]
    return response


def bodies(answers: BinaryIO, count: int) -> list[bytes]:
    """The bodies of ``count`` answers read one after another from one stream."""
    out = []
    for _ in range(count):
        assert answers.readline().startswith(b"HTTP/1.1 200")
        length = 0
        while (line := answers.readline()) != b"\r\n":
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        out.append(answers.read(length))
    return out


def closed_by_server(raw: socket.socket) -> bool:
    """Whether the server ends the connection (the read returns the end of the stream)."""
    try:
        return raw.recv(1) == b""
    except ConnectionResetError:
        return True


def post(path: str, body: bytes = b"x", *, version: str = "HTTP/1.1", extra: str = "") -> bytes:
    head = f"POST {path} {version}\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


class TestKeptAlive:
    def test_requests_follow_one_another_on_one_connection(self, port: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.connect()
        first = connection.sock
        for i in range(5):
            assert connection.sock is first  # still the first connection
            connection.request("POST", "/echo", body=b"call %d" % i)
            response = connection.getresponse()
            assert (response.status, response.version) == (200, 11)
            assert response.read() == b"got:call %d" % i
        connection.close()

    def test_pipelined_requests_are_answered_in_order(self, port: int) -> None:
        with connect(port) as raw:
            raw.sendall(post("/echo", b"a") + post("/echo", b"b"))
            assert bodies(raw.makefile("rb"), 2) == [b"got:a", b"got:b"]

    def test_every_answer_has_its_length(self, port: int) -> None:
        with connect(port) as raw:
            response = exchange(raw, b"GET /chunks HTTP/1.1\r\nHost: t\r\n\r\n")
            assert response.getheader("Content-Length") == "7"
            assert response.body == b"one two"  # type: ignore[attr-defined]
            assert response.getheader("Connection") is None  # and the connection stays
            assert exchange(raw, post("/echo", b"again")).status == 200


class TestOneWritePerAnswer:
    """Status line, headers and body leave in one write (over TLS, one system call and
    no partial answer for the client to wake up for), whatever the app returned."""

    @pytest.mark.parametrize(
        ("request_bytes", "status", "body"),
        [
            (post("/echo", b"hello"), b"200", b"got:hello"),
            (b"GET /chunks HTTP/1.1\r\nHost: t\r\n\r\n", b"200", b"one two"),
            (post("/status/404"), b"404", b"got:x"),
            (post("/raise"), b"500", None),
        ],
        ids=["one chunk", "a generator", "an error status", "the app raised"],
    )
    def test_each_answer_is_one_write(
        self,
        monkeypatch: pytest.MonkeyPatch,
        port: int,
        request_bytes: bytes,
        status: bytes,
        body: bytes | None,
    ) -> None:
        writes: list[bytes] = []
        writer_type: Any = socketserver._SocketWriter  # type: ignore[attr-defined]
        write = writer_type.write

        def recorded(writer: Any, data: Any) -> int:
            writes.append(bytes(data))
            result: int = write(writer, data)
            return result

        monkeypatch.setattr(writer_type, "write", recorded)
        with connect(port) as raw:
            response = exchange(raw, request_bytes)
        assert str(response.status).encode() == status
        assert len(writes) == 1
        assert writes[0].startswith(b"HTTP/1.1 " + status)
        assert writes[0].endswith(response.body)  # type: ignore[attr-defined]
        if body is not None:
            assert response.body == body  # type: ignore[attr-defined]


class TestTheServerEndsTheConnection:
    @pytest.mark.parametrize(
        "request_bytes",
        [
            pytest.param(post("/echo", extra="Connection: close\r\n"), id="client-says-close"),
            pytest.param(post("/echo", version="HTTP/1.0"), id="http-1.0"),
            pytest.param(
                post("/echo", version="HTTP/1.0", extra="Connection: keep-alive\r\n"),
                id="http-1.0-keep-alive",
            ),
            pytest.param(post("/ignore", b"unread body"), id="body-left-unread"),
            pytest.param(
                b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5\r\nhello\r\n0\r\n\r\n",
                id="chunked-body",
            ),
            pytest.param(post("/status/404"), id="client-error"),
            pytest.param(post("/status/503"), id="server-error"),
            pytest.param(post("/raise"), id="app-raises"),
        ],
    )
    def test_after_the_answer(self, port: int, request_bytes: bytes) -> None:
        with connect(port) as raw:
            response = exchange(raw, request_bytes)
            assert response.getheader("Connection") == "close"
            assert response.getheader("Content-Length") is not None
            assert closed_by_server(raw)

    def test_a_malformed_request(self, port: int) -> None:
        with connect(port) as raw:
            headers = b"".join(b"X-%d: 1\r\n" % i for i in range(101))
            assert exchange(raw, b"GET / HTTP/1.1\r\n" + headers + b"\r\n").status == 431
            assert closed_by_server(raw)

    def test_when_idle_too_long(self, monkeypatch: pytest.MonkeyPatch, port: int) -> None:
        monkeypatch.setattr(serving, "IDLE_TIMEOUT_S", 0.2)
        with connect(port) as raw:
            assert exchange(raw, post("/echo")).status == 200
            assert closed_by_server(raw)  # within 0.2 s, not the socket's 10

    def test_when_a_new_client_stays_silent(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(serving._Handler, "timeout", 0.2)
        with running() as server, connect(server.port) as raw:
            assert closed_by_server(raw)

    def test_when_a_client_trickles_its_headers(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(serving, "REQUEST_HEAD_DEADLINE_S", 0.3)
        monkeypatch.setattr(serving, "IDLE_WAKE_S", 0.05)  # the loop checks deadlines on waking
        with running() as server, connect(server.port) as raw:
            raw.sendall(b"GET /echo HTTP/1.1\r\n")
            started = time.monotonic()
            # A header line every 50 ms: never silent for the 10 s read timeout.
            while not select.select([raw], [], [], 0.05)[0]:
                assert time.monotonic() - started < 5.0, "the trickle was not cut off"
                raw.sendall(b"X-Trickle: 1\r\n")
            assert closed_by_server(raw)

    def test_when_the_server_stops(self) -> None:
        with running() as server, connect(server.port) as raw:
            assert exchange(raw, post("/echo")).status == 200
            server.stop()
            assert closed_by_server(raw)

    def test_mid_request_silence_ends_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(serving._Handler, "timeout", 0.2)
        with running() as server, connect(server.port) as raw:
            assert exchange(raw, post("/echo")).status == 200
            answer = exchange(raw, b"POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nhalf")
            assert answer.status >= 400
            assert closed_by_server(raw)


class TestConnectionBound:
    def test_a_new_connection_takes_the_place_of_the_longest_idle(self) -> None:
        with (
            running(max_connections=2) as server,
            connect(server.port) as oldest,
            connect(server.port) as newer,
        ):
            assert exchange(oldest, post("/echo")).status == 200
            eventually(lambda: server.idle_connections == 1, what="the first connection idle")
            assert exchange(newer, post("/echo")).status == 200
            # The client has its answer before the server's thread marks the connection
            # idle: which one idles longest is the server's order, not the client's.
            eventually(lambda: server.idle_connections == 2, what="both connections idle")
            with connect(server.port) as third:
                assert exchange(third, post("/echo", b"3")).status == 200
                assert closed_by_server(oldest)
                assert exchange(newer, post("/echo", b"2")).status == 200


class TestRequestBody:
    """``wsgi.input`` stops at the Content-Length, however the app reads, so the next
    request on the connection is never swallowed; ``complete`` says whether the app read
    the body to its end (else the connection must end after the answer)."""

    @given(
        body=st.binary(max_size=64),
        following=st.binary(min_size=1, max_size=16),
        reads=st.lists(
            st.tuples(st.sampled_from(["read", "readline"]), st.integers(-1, 20)), max_size=8
        ),
    )
    def test_reads_stop_at_the_length(
        self, body: bytes, following: bytes, reads: list[tuple[str, int]]
    ) -> None:
        stream = io.BufferedReader(io.BytesIO(body + following))
        reader = serving._Body(stream, len(body))
        got = b"".join(getattr(reader, method)(size) for method, size in reads)
        got += reader.read()
        assert got == body
        assert reader.complete
        assert stream.read() == following

    def test_an_unknown_length_is_never_complete(self) -> None:
        reader = serving._Body(io.BufferedReader(io.BytesIO(b"5\r\nhello")), None)
        assert reader.read() == b"" and not reader.complete
