"""Configuration fields of the actuators and of the Kubernetes client they use.

Durations accept a number of seconds or a Go-style duration (``90``, ``"90s"``,
``"1m30s"``, ``"5m"``, ``"500ms"``), like the kubelet's own fields. Lists accept YAML
lists, JSON lists, or comma-separated strings (so flags and environment variables can set
them: ``--protected-namespaces=kube-system,monitoring``; ``protectedLabels`` separates
its selectors with ``;``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, field_validator
from pydantic_settings import NoDecode

from nodeagent.base import durations
from nodeagent.kube import selectors


def duration_seconds(value: Any) -> Any:
    """``"1m30s"`` -> 90.0; numbers pass through as seconds; anything else is left for
    pydantic to reject with the field's name."""
    if isinstance(value, str):
        return durations.parse_seconds(value)
    return value


def string_list(value: Any) -> Any:
    """A comma-separated or JSON list string becomes a list; lists pass through."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def selector_list(value: Any) -> Any:
    """Like :func:`string_list`, but selectors are separated by ``;`` because a comma
    already means "and" inside one selector."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(";") if part.strip()]
    return value


Seconds = Annotated[float, BeforeValidator(duration_seconds), Field(ge=0)]
StringList = Annotated[list[str], BeforeValidator(string_list), NoDecode]
SelectorList = Annotated[list[str], BeforeValidator(selector_list), NoDecode]


class ActuationSettings(BaseModel):
    """How decisions are applied to the cluster: safety limits, pacing of writes, dry run,
    and the API client's budget."""

    dry_run: bool | None = Field(
        default=None,
        description="Decide, log, count and emit events marked as dry-run, but change no node"
        " and no pod: no condition, taint, annotation, eviction or deletion is written, and"
        " node-level reclaim removes no container or image. Default: off in a cluster, on when"
        " standalone (``--standalone --no-dry-run`` lets node-level reclaim act; pods still"
        " cannot be evicted without the API).",
    )

    # --- conditions, taints, annotation ----------------------------------------------------
    condition_heartbeat_period: Seconds = Field(
        default=300.0,
        description="Seconds (default 5m) between writes of the agent's node conditions while"
        " nothing changes: the heartbeat that tells readers the agent is alive. Changes of"
        " status or reason are written at once; a message-only change waits for the next"
        " heartbeat.",
    )
    pressure_annotation: bool = Field(
        default=True,
        description="Publish per-signal headroom in the ``nodeagent.io/pressure`` node"
        " annotation (the scheduler's NodePressure plugin reads it).",
    )
    pressure_annotation_refresh_period: Seconds = Field(
        default=300.0,
        description="Seconds (default 5m) between rewrites of the annotation while headroom is"
        " steady.",
    )
    pressure_annotation_min_change: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="Fraction of capacity (default 0.05 = 5 points) that a signal's headroom"
        " must move before the annotation is rewritten early.",
    )

    # --- evictions -------------------------------------------------------------------------
    hard_eviction_bypasses_pdb: bool = Field(
        default=False,
        description="When a PodDisruptionBudget refuses the Eviction of a pod chosen for a"
        " *hard* threshold, delete the pod with the 1 s grace instead (needs ``pods delete``)."
        " Off by default: PDBs are honoured and the next candidate is tried.",
    )
    evict_daemon_set_pods: bool = Field(
        default=False,
        description="Allow evicting DaemonSet pods. Off by default: the controller recreates"
        " them on the same node at once, so evicting them relieves nothing (kubernetes#65240).",
    )
    protected_namespaces: StringList = Field(
        default_factory=lambda: ["kube-system"],
        description="Namespaces whose pods are never evicted (default ``kube-system``).",
    )
    protected_labels: SelectorList = Field(
        default_factory=list,
        description="Label selectors (``app=db``, ``tier in (critical)``,"
        " ``nodeagent.io/protect``); a pod matching any of them is never evicted. As one"
        " string (flag, environment), separate selectors with ``;``: a comma inside a selector"
        ' means "and".',
    )
    eviction_priority_threshold: int | None = Field(
        default=None,
        description="Pods with ``spec.priority`` at or above this are never evicted. Unset:"
        " only the kubelet's rule (critical pods, priority >= 2e9, static and mirror pods).",
    )
    max_evictions_per_interval: int = Field(
        default=5,
        ge=1,
        description="At most this many evictions (and bypass deletions) are started within any"
        " ``evictionCapInterval``, whatever the engine asks: a bound on the damage a wrong"
        " signal can do.",
    )
    eviction_cap_interval: Seconds = Field(
        default=10.0,
        description="Seconds (default 10s, the kubelet's monitoring period) over which"
        " ``maxEvictionsPerInterval`` is counted.",
    )
    eviction_deadline_margin: Seconds = Field(
        default=30.0,
        description="Seconds added to a pod's grace period before an eviction in flight is"
        " forgotten even though the pod is still listed (the kubelet may be stuck; the engine"
        " may then choose it again).",
    )

    # --- events ----------------------------------------------------------------------------
    event_aggregation_window: Seconds = Field(
        default=600.0,
        description="Seconds (default 10m, as the kubelet's event correlator) during which a"
        " repeated event (same object, reason and message) bumps the existing Event's count"
        " instead of creating a new one.",
    )
    event_refresh_interval: Seconds = Field(
        default=60.0,
        description="Seconds: a repeated event is written at most this often; repeats in"
        " between are counted and flushed with the next write, so a held pressure does not"
        " spam the API.",
    )

    # --- API client ------------------------------------------------------------------------
    kube_api_qps: float = Field(
        default=5.0,
        gt=0,
        description="Sustained requests per second this agent may send to the API server.",
    )
    kube_api_burst: int = Field(
        default=10,
        ge=1,
        description="Requests that may go at once before ``kubeApiQps`` pacing applies.",
    )
    kube_api_retries: int = Field(
        default=5,
        ge=1,
        description="Attempts per API call, the first included, on 5xx, connection errors and"
        " throttling (exponential backoff with full jitter, Retry-After honoured).",
    )
    kube_api_retry_max_delay: Seconds = Field(
        default=10.0,
        description="Seconds: the largest backoff between two attempts.",
    )
    kube_api_timeout: Seconds = Field(
        default=30.0,
        description="Seconds to wait for an answer to one request (connecting: at most 5 s).",
    )
    pod_watch_timeout: int = Field(
        default=1800,
        ge=30,
        description="Seconds a pod watch stays open before it is renewed from its last"
        " resourceVersion (jittered up to twice this, so nodes do not reconnect together).",
    )

    @field_validator("protected_labels")
    @classmethod
    def _selectors_parse(cls, value: list[str]) -> list[str]:
        for selector in value:
            try:
                selectors.parse_label_selector(selector)
            except selectors.SelectorError as exc:
                raise ValueError(str(exc)) from exc
        return value
