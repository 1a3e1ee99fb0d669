"""The ``extenders:`` list of a ``KubeSchedulerConfiguration``, read as kube-scheduler reads it.

Field names, defaults and validation are kube-scheduler's (``validateExtenders``): ``urlPrefix``,
the four verbs (an empty verb means the extender does not offer that call), ``weight``
(must be positive when ``prioritizeVerb`` is set), ``enableHTTPS`` and ``tlsConfig``,
``httpTimeout`` (0 means 5 s), ``nodeCacheCapable``, ``managedResources`` (valid extended
resource names, each managed by one extender) and ``ignorable``; at most one extender may
bind. Every error names the field path as written (``extenders[1].weight``), the value
and what is allowed.

The models have a base of their own rather than the scheduler configuration's
``ConfigModel``: :mod:`nodeagent.scheduler.config` imports this module, and the two
bases are the same three settings.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from nodeagent.base import durations
from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import api

DEFAULT_HTTP_TIMEOUT = 5.0
"""Seconds; kube-scheduler's ``DefaultExtenderTimeout``, used when ``httpTimeout`` is 0."""

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def _invalid(message: str) -> PydanticCustomError:
    """A field error reported as ``path (value ...): message`` by the configuration."""
    return PydanticCustomError("invalid_extender_field", message)


def _base64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _invalid(f"{what} must be base64, as Go encodes []byte ({exc})") from exc


class TLSConfig(_Model):
    """``tlsConfig``: client TLS towards the extender (``*Data`` fields are base64)."""

    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    cert_data: str = ""
    key_data: str = ""
    ca_data: str = ""

    @field_validator("cert_data", "key_data", "ca_data")
    @classmethod
    def _is_base64(cls, value: str) -> str:
        if value:
            _base64(value, "PEM data")
        return value

    def pem(self, name: str) -> bytes:
        """The decoded ``certData``/``keyData``/``caData``."""
        return _base64(getattr(self, name), name)


class ManagedResource(_Model):
    name: str
    ignored_by_scheduler: bool = False
    """Also ignored by the NodeResourcesFit Filter of every profile: the extender alone
    decides whether the node has it."""


class ExtenderConfig(_Model):
    """One entry of ``extenders:``."""

    url_prefix: str = Field(min_length=1)
    filter_verb: str = ""
    preempt_verb: str = ""
    prioritize_verb: str = ""
    bind_verb: str = ""
    weight: int = 0
    """Multiplies the extender's 0..10 scores (then x MaxNodeScore/10)."""
    enable_https: bool = Field(default=False, alias="enableHTTPS")
    tls_config: TLSConfig | None = None
    http_timeout: float = 0.0
    """Seconds (Go durations accepted: ``30s``); 0 means 5 s."""
    node_cache_capable: bool = False
    """Send node names instead of whole Node objects (the extender keeps its own cache)."""
    managed_resources: tuple[ManagedResource, ...] = ()
    ignorable: bool = False
    """A failing (unreachable, erroring) extender is skipped instead of failing the pod."""

    @field_validator("url_prefix")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise _invalid("must be an http:// or https:// URL, e.g. http://127.0.0.1:8888/")
        return value

    @field_validator("http_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        try:
            return durations.parse_seconds(value)
        except durations.DurationError as exc:
            raise _invalid(str(exc)) from exc

    @property
    def name(self) -> str:
        """How kube-scheduler names an extender (its URL prefix)."""
        return self.url_prefix

    @property
    def timeout(self) -> float:
        return self.http_timeout or DEFAULT_HTTP_TIMEOUT

    @property
    def managed_resource_names(self) -> frozenset[str]:
        return frozenset(resource.name for resource in self.managed_resources)


def _extended_resource_problem(name: str) -> str | None:
    """kube-scheduler's ``validateExtendedResourceName``: a qualified name outside the
    kubernetes.io domain, not starting with ``requests.``."""
    prefix, _, short = name.rpartition("/")
    if not short or len(short) > 63 or not _QUALIFIED_NAME.match(short):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', start and"
            " end with an alphanumeric character, and be at most 63 characters"
        )
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase DNS subdomain"
    if not api.is_extended_resource(name):
        return "is an invalid extended resource name (e.g. example.com/gpu)"
    return None


def validate_extenders(extenders: Sequence[ExtenderConfig], source: str) -> None:
    """kube-scheduler's ``validateExtenders``: one problem per line, all at once."""
    problems: list[str] = []
    binders = 0
    managed: set[str] = set()
    for i, extender in enumerate(extenders):
        where = f"extenders[{i}]"
        if extender.prioritize_verb and extender.weight <= 0:
            problems.append(
                f"{where}.weight (value {extender.weight}): must be positive when"
                " prioritizeVerb is set"
            )
        if extender.bind_verb:
            binders += 1
        for j, resource in enumerate(extender.managed_resources):
            path = f"{where}.managedResources[{j}].name"
            problem = _extended_resource_problem(resource.name)
            if problem:
                problems.append(f"{path} (value {resource.name!r}): {problem}")
            if resource.name in managed:
                problems.append(
                    f"{path} (value {resource.name!r}): duplicate extender managed resource name"
                )
            managed.add(resource.name)
        tls = extender.tls_config
        if tls is not None:
            for kind in ("cert", "key"):
                if getattr(tls, f"{kind}_file") and getattr(tls, f"{kind}_data"):
                    problems.append(
                        f"{where}.tlsConfig: {kind}File and {kind}Data are exclusive; set one"
                    )
            if bool(tls.cert_file or tls.cert_data) != bool(tls.key_file or tls.key_data):
                problems.append(
                    f"{where}.tlsConfig: a client certificate needs its key (certFile/certData"
                    " with keyFile/keyData)"
                )
    if binders > 1:
        problems.append(
            f"extenders (found {binders} extenders implementing bind): only one extender can"
            " implement bind"
        )
    if problems:
        field = "extenders" if binders > 1 else problems[0].split(" ", 1)[0]
        raise ConfigError(f"{source}:\n" + "\n".join(problems), field=field)


def ignored_resources(extenders: Sequence[ExtenderConfig]) -> tuple[str, ...]:
    """Resources marked ``ignoredByScheduler``: kube-scheduler adds them to every
    profile's NodeResourcesFit ``ignoredResources``."""
    return tuple(
        resource.name
        for extender in extenders
        for resource in extender.managed_resources
        if resource.ignored_by_scheduler
    )
