"""``nodeagent scheduler``'s settings: the KubeSchedulerConfiguration file, then flags.

The profiles, plugins and pluginConfig are read by :mod:`nodeagent.scheduler.config`
(the same reader as ``nodeagent schedule``); this module reads the fields only a running
scheduler uses, with kube-scheduler's defaults:

* ``podInitialBackoffSeconds`` (1), ``podMaxBackoffSeconds`` (10);
* ``leaderElection``: ``leaderElect`` (true), ``leaseDuration`` (15s), ``renewDeadline``
  (10s), ``retryPeriod`` (2s), ``resourceLock`` (``leases``, the only one supported),
  ``resourceName`` (``nodeagent-scheduler``: never kube-scheduler's own lease),
  ``resourceNamespace`` (``kube-system``);
* ``clientConnection``: ``qps`` (50), ``burst`` (100), ``kubeconfig``;
* ``parallelism`` (16): here the number of binding workers.

``--feature-gates`` (kube-scheduler's flag, as ``nodeagent schedule`` takes it) reaches
the framework's Handle through :attr:`LiveSettings.features`.

Without ``--config`` there is one profile, ``nodeagent-scheduler`` (never
``default-scheduler``, so it does not fight the cluster's own scheduler), with the
default plugins and NodePressure. Flags override the file. Every error names the field
path and raises :class:`~nodeagent.base.errors.ConfigError` (exit 2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from nodeagent.base import durations
from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import config
from nodeagent.scheduler.framework import Registry
from nodeagent.scheduler.live.leader import LeaderElectionSettings
from nodeagent.serving.settings import DEFAULT_METRICS_ADDRESS, ListenAddress, parse_listen_address

DEFAULT_PROFILE = config.NODEAGENT_PROFILE
DEFAULT_LEASE_NAME = "nodeagent-scheduler"
DEFAULT_LEASE_NAMESPACE = "kube-system"


class LeaderElectionDocument(config.ConfigModel):
    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_lock: str = "leases"
    resource_name: str = Field(default=DEFAULT_LEASE_NAME, min_length=1)
    resource_namespace: str = Field(default=DEFAULT_LEASE_NAMESPACE, min_length=1)

    @field_validator("lease_duration", "renew_deadline", "retry_period", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return durations.positive_seconds(value, "15s")

    @field_validator("resource_lock")
    @classmethod
    def _lock(cls, value: str) -> str:
        if value != "leases":
            raise ValueError("only 'leases' (coordination.k8s.io/v1 Lease) is supported")
        return value

    @model_validator(mode="after")
    def _order(self) -> LeaderElectionDocument:
        # client-go refuses these, for good reason: a leader must give up before a
        # standby may take over, and retry at least once within the deadline
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                f"leaseDuration {self.lease_duration:g}s: must be greater than renewDeadline"
                f" ({self.renew_deadline:g}s)"
            )
        if self.renew_deadline <= 1.2 * self.retry_period:
            raise ValueError(
                f"renewDeadline {self.renew_deadline:g}s: must be greater than 1.2 x"
                f" retryPeriod ({self.retry_period:g}s)"
            )
        return self


class ClientConnectionDocument(config.ConfigModel):
    kubeconfig: str = ""
    qps: float = Field(default=50.0, gt=0)
    burst: int = Field(default=100, ge=1)
    content_type: str = ""
    accept_content_types: str = ""


@dataclass(frozen=True, slots=True)
class LiveSettings:
    configuration: config.SchedulerConfiguration
    leader_election: LeaderElectionSettings
    kubeconfig: Path | None
    qps: float
    burst: int
    initial_backoff: float
    max_backoff: float
    bind_workers: int
    metrics_address: ListenAddress
    features: config.FeatureGates = dataclasses.field(default_factory=config.FeatureGates)

    @property
    def profiles(self) -> tuple[str, ...]:
        return tuple(p.scheduler_name for p in self.configuration.profiles)


def _section(model: type[config.ConfigModel], raw: Any, where: str, source: str) -> Any:
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: {where} (value {raw!r}): expected a mapping", field=where)
    try:
        return model.model_validate(raw or {})
    except ValidationError as exc:
        raise ConfigError(f"{source}: {config.describe_errors(exc, where)}", field=where) from exc


def read_document(path: Path | None) -> tuple[Mapping[str, Any], str]:
    """The configuration document and its name for messages."""
    if path is None:
        return config.default_document(), "defaults"
    return config.read_document(path) or {}, str(path)


def load(
    path: Path | None,
    registry: Registry,
    *,
    kubeconfig: Path | None = None,
    leader_elect: bool | None = None,
    lease_name: str | None = None,
    lease_namespace: str | None = None,
    metrics_address: str | None = None,
    features: config.FeatureGates | None = None,
) -> LiveSettings:
    document, source = read_document(path)
    configuration = config.parse_configuration(document, registry, source)
    election = _section(
        LeaderElectionDocument, document.get("leaderElection"), "leaderElection", source
    )
    connection = _section(
        ClientConnectionDocument, document.get("clientConnection"), "clientConnection", source
    )
    address_text = metrics_address or document.get("metricsBindAddress") or DEFAULT_METRICS_ADDRESS
    try:
        address = parse_listen_address(str(address_text))
    except ValueError as exc:
        field = "--metrics-address" if metrics_address else "metricsBindAddress"
        raise ConfigError(f"{field} (value {address_text!r}): {exc}", field=field) from exc
    kubeconfig = kubeconfig or (Path(connection.kubeconfig) if connection.kubeconfig else None)
    return LiveSettings(
        configuration=configuration,
        leader_election=LeaderElectionSettings(
            leader_elect=election.leader_elect if leader_elect is None else leader_elect,
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
            resource_name=lease_name or election.resource_name,
            resource_namespace=lease_namespace or election.resource_namespace,
        ),
        kubeconfig=kubeconfig,
        qps=connection.qps,
        burst=connection.burst,
        initial_backoff=float(document.get("podInitialBackoffSeconds") or 1),
        max_backoff=float(document.get("podMaxBackoffSeconds") or 10),
        bind_workers=int(document.get("parallelism") or 16),
        metrics_address=address,
        features=features or config.FeatureGates(),
    )
