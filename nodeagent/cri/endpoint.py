"""Where the container runtime listens: the ``containerRuntimeEndpoint`` setting's default
and its grammar.

Apart from :mod:`nodeagent.cri.client` so that the configuration can check the setting
without importing gRPC (some 30 ms of CPU: ``nodeagent config check`` or a
``--help`` never talks to the runtime).
"""

from __future__ import annotations

__all__ = ["DEFAULT_ENDPOINT", "grpc_target"]

DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
"""The kubelet's default ``containerRuntimeEndpoint``."""


def grpc_target(endpoint: str) -> str:
    """The gRPC target for a ``containerRuntimeEndpoint``: ``unix:///path`` as is, a bare
    absolute path as ``unix://``, ``tcp://host:port`` as ``host:port``."""
    if endpoint.startswith("unix://"):
        return endpoint
    if endpoint.startswith("/"):
        return "unix://" + endpoint
    if endpoint.startswith("tcp://"):
        return endpoint.removeprefix("tcp://")
    raise ValueError(
        f"{endpoint!r} is not a CRI endpoint: use unix:///path/to/socket or tcp://host:port"
    )
