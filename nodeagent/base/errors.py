"""The agent's exception tree.

    NodeAgentError
    ├── ConfigError          bad configuration: the CLI prints it and exits with code 2
    ├── SignalReadError      a kernel file or filesystem could not be read (one signal degrades)
    └── KubeAPIError         the Kubernetes API refused or failed a call
        ├── NotFound         404
        ├── Conflict         409 (resourceVersion mismatch): re-read and retry
        ├── TooManyRequests  429 (a PodDisruptionBudget blocks an eviction, or rate limiting)
        └── ServerError      5xx and connection failures: retried with backoff

Foreign exceptions (OSError, ``kubernetes.client.ApiException``, pydantic's
ValidationError) are translated where they enter, with ``raise ... from``, so callers
handle one vocabulary. Expected outcomes (a threshold met, a pod not evictable) are
values, never exceptions.
"""

from __future__ import annotations


class NodeAgentError(Exception):
    """Base of every error nodeagent raises on purpose."""


class ConfigError(NodeAgentError):
    """Invalid configuration. The message names the field, the value and what is allowed."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SignalReadError(NodeAgentError):
    """A signal's source could not be read; the message says which file and why."""


class KubeAPIError(NodeAgentError):
    """A Kubernetes API call failed."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFound(KubeAPIError):
    """The object does not exist (404)."""


class Conflict(KubeAPIError):
    """The object changed since it was read (409)."""


class TooManyRequests(KubeAPIError):
    """429: an eviction blocked by a PodDisruptionBudget, or client rate limiting."""


class ServerError(KubeAPIError):
    """5xx, timeouts and connection failures: transient, retried with backoff."""
