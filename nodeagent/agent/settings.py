"""Configuration fields of the agent loop: which node, which cluster, and how it logs.

How often the loop looks is the triggers' business (``pollInterval``,
``filesystemPollInterval``), what it decides the engine's, how it acts the actuators'
(``dryRun`` among them); this mixin only says who the agent is and where it reports.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from nodeagent.base import durations
from nodeagent.base.logs import LogFormat, LogLevel
from nodeagent.serving.settings import (
    DEFAULT_METRICS_ADDRESS,
    ListenAddress,
    MetricsAuth,
    parse_listen_address,
)

NODE_NAME_ENV = "NODE_NAME"
"""The variable a DaemonSet sets from the downward API (``spec.nodeName``)."""

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class AgentSettings(BaseModel):
    """The agent loop: node identity, cluster access, logging."""

    node_name: str | None = Field(
        default=None,
        description="The Node this agent guards (its ``metadata.name``). Default:"
        " ``$NODE_NAME`` (set by the DaemonSet from the downward API), else the host name in"
        " lower case, which is the kubelet's own default.",
    )

    kubeconfig: Path | None = Field(
        default=None,
        description="A kubeconfig file for the cluster. Default: the pod's service account"
        " when running in a pod, else ``$KUBECONFIG`` or ``~/.kube/config``; with none of them"
        " the agent runs standalone.",
    )

    kube_context: str | None = Field(
        default=None,
        description="The kubeconfig context to use (default: its current context).",
    )

    standalone: bool = Field(
        default=False,
        description="Run without Kubernetes even when a cluster is configured: the same loop,"
        " with the pods found from their cgroups (UID and QoS class only) and every action"
        " logged instead of applied, as in ``dryRun``. Implied when no cluster is configured.",
    )

    log_format: LogFormat = Field(
        default=LogFormat.TEXT,
        description="``text`` (default) or ``json``; both carry the same fields.",
    )

    log_level: LogLevel = Field(
        default=LogLevel.INFO,
        description="``debug``, ``info`` (default: one line per decision worth reading, every"
        " action and every change of a degraded source), ``warning`` or ``error``.",
    )

    decision_log_interval: float = Field(
        default=10.0,
        description="Seconds (default 10, the kubelet's cadence). A decision line is written"
        " whenever the decision changes (a threshold met or cleared, grace satisfied,"
        " pressure, taints, an eviction) and, while a threshold stays met without change, at"
        " most this often; a quiet node logs nothing.",
    )

    @model_validator(mode="before")
    @classmethod
    def _node_name_from_downward_api(cls, data: Any) -> Any:
        """``$NODE_NAME`` fills ``nodeName`` when no flag, ``NODEAGENT_NODE_NAME`` or file
        set it: the DaemonSet's downward API spelling, below the agent's own sources."""
        if isinstance(data, dict) and data.get("node_name") is None:
            from_env = os.environ.get(NODE_NAME_ENV, "").strip()
            if from_env:
                return {**data, "node_name": from_env}
        return data

    @field_validator("node_name")
    @classmethod
    def _valid_node_name(cls, value: str | None) -> str | None:
        if value is not None and not _NODE_NAME.fullmatch(value):
            raise ValueError(
                "must be a Node name: lower-case letters, digits, '-' and '.', starting and "
                "ending with a letter or digit, at most 253 characters"
            )
        return value

    @field_validator("decision_log_interval", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        if isinstance(value, str | int | float):
            return durations.positive_seconds(value, "10s")
        return value


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
        return durations.positive_seconds(value)

    @property
    def metrics_listen_address(self) -> ListenAddress:
        """``metrics_address``, parsed."""
        return parse_listen_address(self.metrics_address)
