"""A scripted extender on a real socket, for testing the scheduler's calls to extenders.

Each verb answers with a function of the decoded request (``(status, JSON)``); every call
is recorded with its path, headers and body, so tests check what went over the wire."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[dict[str, Any]], tuple[int, Any]]


@dataclass(frozen=True)
class Call:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class StubExtender:
    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.answers: dict[str, Answer] = {}
        self.delays: dict[str, float] = {}
        self.calls: list[Call] = []
        self._context = context
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                verb = self.path.rsplit("/", 1)[-1]
                with stub._lock:
                    stub.calls.append(Call(self.path, dict(self.headers), body))
                time.sleep(stub.delays.get(verb, 0.0))
                answer = stub.answers.get(verb)
                status, reply = (404, {"error": "no such verb"}) if answer is None else answer(body)
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the caller timed out and left

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        if context is not None:
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        scheme = "https" if self._context is not None else "http"
        return f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}/scheduler"

    def verbs(self) -> list[str]:
        return [call.path.rsplit("/", 1)[-1] for call in self.calls]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@contextmanager
def running(context: ssl.SSLContext | None = None) -> Iterator[StubExtender]:
    stub = StubExtender(context)
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()


def keep_all(body: dict[str, Any]) -> tuple[int, Any]:
    """A filter that keeps every node, in the form it was sent."""
    return 200, {"NodeNames": body["NodeNames"], "Nodes": body["Nodes"], "Error": ""}
