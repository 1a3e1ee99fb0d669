"""The WSGI types and the plain-text answer every nodeagent server shares."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

_TEXT = [("Content-Type", "text/plain; charset=utf-8")]


def respond(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    """A one-line ``text/plain`` answer with its length."""
    data = (body + "\n").encode()
    start_response(status, [*_TEXT, ("Content-Length", str(len(data)))])
    return [data]
