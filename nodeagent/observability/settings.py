"""Configuration fields of the metrics and health endpoints.

One small HTTP server serves ``/metrics``, ``/healthz`` and ``/readyz`` on
``metricsAddress``; the probes share it so a DaemonSet needs one port and one
Service port, and so a wedged server fails the liveness probe too.

The default port, 9813, was chosen to stay clear of what already listens on a
Kubernetes node. Prometheus' registry of exporter ports (9100-9999) is fully
allocated, so no free number exists there; 9813 belongs to an ocserv VPN exporter that
has no business on a Kubernetes node. The brief's first idea, 9808, is the default
``/healthz`` port of the kubernetes-csi ``livenessprobe`` sidecar, which runs in the
node plugin of nearly every CSI driver, often with ``hostNetwork``; node_exporter
(9100), kubelet (10248/10250/10255), kube-proxy (10249/10256), Calico (9091/9099),
Cilium (9962-9965), NVIDIA DCGM (9400) and node-problem-detector (20256/20257) keep
theirs.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, field_validator

from nodeagent import durations
from nodeagent.serving.settings import MetricsAuth

DEFAULT_METRICS_PORT = 9813
"""The port of ``/metrics``, ``/healthz`` and ``/readyz`` (see the module docstring)."""

DEFAULT_METRICS_ADDRESS = f"0.0.0.0:{DEFAULT_METRICS_PORT}"


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """A TCP address to listen on. ``host`` is an IP literal (brackets stripped) or a
    name; port 0 asks the kernel for a free port (tests)."""

    host: str
    port: int

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if self.is_ipv6 else f"{self.host}:{self.port}"


_ADDRESS_HELP = (
    "expected HOST:PORT with PORT in 0-65535, e.g. '0.0.0.0:9813', '127.0.0.1:9813', "
    "'[::]:9813' or ':9813' (all interfaces)"
)


def parse_listen_address(text: str) -> ListenAddress:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (all IPv4 interfaces).

    Raises ValueError saying what is allowed.
    """
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(_ADDRESS_HELP)
    port = int(port_text)
    if port > 65535:
        raise ValueError(_ADDRESS_HELP)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address; {_ADDRESS_HELP}") from None
    elif ":" in host:
        raise ValueError(f"an IPv6 host must be in brackets; {_ADDRESS_HELP}")
    return ListenAddress(host=host or "0.0.0.0", port=port)


class ObservabilitySettings(BaseModel):
    """Metrics and health endpoints."""

    metrics_address: str = Field(
        default=DEFAULT_METRICS_ADDRESS,
        description="Where ``/metrics``, ``/healthz`` and ``/readyz`` listen, as ``HOST:PORT``"
        " (``[::]:PORT`` for IPv6, port 0 for any free port). Default ``0.0.0.0:9813``: every"
        " interface, so Prometheus can scrape the pod IP and the kubelet can probe it.",
    )

    liveness_timeout: float = Field(
        default=30.0,
        description="Seconds without an evaluation cycle after which ``/healthz`` fails (also"
        " ``30s``, ``1m``). Default 30 s: a 1 s loop misses thirty ticks before the agent is"
        " declared wedged, and the probe (3 failures 10 s apart) restarts it about a minute"
        " after it stopped. Keep it well above the poll interval. Under systemd the watchdog"
        " (``WatchdogSec``, fed by every cycle) does the same job.",
    )

    metrics_auth: MetricsAuth | None = Field(
        default=None,
        description="Who may read ``/metrics``: ``kubernetes`` serves HTTPS and lets in only"
        " callers the API server authenticates (a bearer token, by TokenReview, or a"
        " client certificate signed by ``clientCAFile``) and authorizes (a"
        " SubjectAccessReview for ``get`` on the path; the ``system:auth-delegator``"
        " binding lets the agent ask); ``/healthz``, ``/readyz`` and ``/livez`` stay"
        " open. ``none``: plain HTTP, open to anyone who reaches the port. Default:"
        " ``kubernetes`` in cluster mode, ``none`` standalone (there is no API to ask)."
        " See docs/security.md.",
    )

    tls_cert_file: str = Field(
        default="",
        description="Serving certificate (PEM, with its chain) for HTTPS; reloaded when the file"
        " changes. Default with ``metricsAuth: kubernetes``: a self-signed certificate"
        " made at start, its SHA-256 fingerprint logged.",
    )

    tls_private_key_file: str = Field(
        default="",
        description="The private key of ``tlsCertFile`` (PEM); both or neither.",
    )

    client_ca_file: str = Field(
        default="",
        description="CA bundle (PEM) that verifies client certificates: a certificate it signed"
        " authenticates its CN as the user and its O values as groups (then authorized"
        " like a token). Empty: bearer tokens only.",
    )

    @field_validator("metrics_address")
    @classmethod
    def _valid_address(cls, value: str) -> str:
        parse_listen_address(value)
        return value

    @field_validator("liveness_timeout", mode="before")
    @classmethod
    def _positive_duration(cls, value: Any) -> float:
        seconds = durations.parse_seconds(value)
        if seconds <= 0:
            raise ValueError("must be a positive duration")
        return seconds

    @property
    def metrics_listen_address(self) -> ListenAddress:
        """``metrics_address``, parsed."""
        return parse_listen_address(self.metrics_address)
