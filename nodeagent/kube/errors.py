"""Translation of API failures into :mod:`nodeagent.base.errors`, and the few extra kinds the
client layer needs.

The tree in :mod:`nodeagent.base.errors` names what callers *do* about a failure (re-read on
``Conflict``, move on after ``TooManyRequests``, retry ``ServerError``). This module adds
the distinctions the client itself acts on:

    KubeAPIError
    ├── NotFound
    ├── Conflict
    ├── Gone               410: a watch or list resourceVersion is too old; re-list
    ├── Invalid            400/422: the request itself is wrong; never retried
    ├── Forbidden          401/403: RBAC; never retried
    ├── TooManyRequests
    │   ├── EvictionBlocked   429 on an Eviction: a PodDisruptionBudget says no (an answer)
    │   └── RateLimited       429 elsewhere: API priority and fairness (a fault, retried)
    └── ServerError        5xx, timeouts and connection failures (retried)

``from_status`` builds the right instance from an HTTP status and a ``Status`` body; the
real client (:mod:`nodeagent.kube.http`) and the in-memory fake
(:mod:`tests.doubles.kube`) both raise through it, so callers cannot tell them apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nodeagent.base import errors

PDB_REFUSAL_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
"""The message kube-apiserver puts in the 429 Status of a refused Eviction."""


class Gone(errors.KubeAPIError):
    """410: the requested resourceVersion has been compacted away."""


class Invalid(errors.KubeAPIError):
    """400 or 422: the request is malformed or fails validation (a bug, not a fault)."""


class Forbidden(errors.KubeAPIError):
    """401 or 403: the service account lacks a permission (see docs/kubernetes.md)."""


class EvictionBlocked(errors.TooManyRequests):
    """An Eviction refused because it would violate a PodDisruptionBudget."""


class RateLimited(errors.TooManyRequests):
    """Server-side throttling; retried after ``retry_after`` seconds when the server says."""

    def __init__(self, message: str, *, status: int | None = 429, retry_after: float | None):
        super().__init__(message, status=status)
        self.retry_after = retry_after


class Unavailable(errors.ServerError):
    """A 5xx answer or no answer at all; ``retry_after`` when the server sent one."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


def retry_after(exc: BaseException) -> float | None:
    """The server's ``Retry-After`` hint carried by a retryable error, if any."""
    if isinstance(exc, RateLimited | Unavailable):
        return exc.retry_after
    return None


def is_retryable(exc: BaseException) -> bool:
    """Faults worth another try: 5xx, connection failures and rate limiting.

    A PodDisruptionBudget refusal is an answer, so it is *not* retryable here."""
    return isinstance(exc, errors.ServerError | RateLimited)


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the API server only sends the delta-seconds form)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def status_message(body: bytes | str | None) -> tuple[str, str, Mapping[str, Any]]:
    """``(reason, message, details)`` of a ``Status`` body; tolerant of non-JSON bodies."""
    if not body:
        return "", "", {}
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        document = json.loads(text)
    except ValueError:
        return "", text.strip()[:500], {}
    if not isinstance(document, dict):
        return "", text.strip()[:500], {}
    details = document.get("details")
    return (
        str(document.get("reason", "")),
        str(document.get("message", "")),
        details if isinstance(details, dict) else {},
    )


def _is_disruption_budget(message: str, details: Mapping[str, Any]) -> bool:
    causes = details.get("causes") or []
    if any(isinstance(c, dict) and c.get("reason") == "DisruptionBudget" for c in causes):
        return True
    return "disruption budget" in message


def from_status(
    status: int,
    body: bytes | str | None,
    *,
    what: str,
    retry_after_header: str | None = None,
    eviction: bool = False,
) -> errors.KubeAPIError:
    """The error for an HTTP ``status`` answered to the request described by ``what``.

    ``eviction`` marks a POST to ``pods/NAME/eviction``, where a 429 naming a disruption
    budget is a refusal rather than throttling.
    """
    reason, message, details = status_message(body)
    text = f"{what}: {status} {reason or 'error'}" + (f": {message}" if message else "")
    delay = parse_retry_after(retry_after_header)
    if delay is None and isinstance(details.get("retryAfterSeconds"), int | float):
        delay = float(details["retryAfterSeconds"])
    if status == 404:
        return errors.NotFound(text, status=status)
    if status == 409:
        return errors.Conflict(text, status=status)
    if status == 410:
        return Gone(text, status=status)
    if status in (400, 422):
        return Invalid(text, status=status)
    if status in (401, 403):
        return Forbidden(text, status=status)
    if status == 429:
        if eviction and _is_disruption_budget(message, details):
            return EvictionBlocked(text, status=status)
        return RateLimited(text, status=status, retry_after=delay)
    if status >= 500:
        return Unavailable(text, status=status, retry_after=delay)
    return errors.KubeAPIError(text, status=status)


def failure_status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``Status`` body as kube-apiserver sends with a failed request (the shape
    :func:`from_status` reads); the fakes answer with it."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
