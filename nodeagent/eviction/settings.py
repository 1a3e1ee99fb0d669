"""Configuration fields of the eviction engine, spelled and shaped like the kubelet's.

An operator can copy the eviction part of a KubeletConfiguration (or the kubelet's flags)
unchanged: the threshold maps accept the YAML map form (``memory.available: 500Mi``) and
the kubelet's flag form (``memory.available<500Mi,nodefs.available<10%``; grace periods and
minimum reclaims as ``memory.available=1m30s``), whichever the source gives: YAML maps
from the file, strings from flags and ``NODEAGENT_*`` variables (which may also hold a
JSON object).

Every value is parsed here, once, by :mod:`nodeagent.eviction.thresholds`, and the
fields keep what it returns (threshold values per signal, grace periods in seconds), so
a bad threshold fails the configuration load with the field, the value and the rule it
breaks, before anything is applied, and nothing downstream parses the text again.
Dumped (``model_dump``), each field gives back canonical text that loads to the same
values. :class:`~nodeagent.eviction.policy.EvictionPolicy` then resolves the fields into
the immutable policy the engine runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError, PydanticKnownError
from pydantic_settings import NoDecode

from nodeagent.base import durations
from nodeagent.eviction import thresholds
from nodeagent.eviction.page_cache import ActivePageCache
from nodeagent.k8s.pressure import (
    DEFAULT_CONDITION_TYPES,
    DEFAULT_TAINT_KEYS,
    KUBELET_CONDITION_TYPES,
    Pressure,
)
from nodeagent.model import Signal

__all__ = [
    "KUBELET_CONFIGURATION_FIELDS",
    "EvictionSettings",
    "EvictionStrategy",
    "kubelet_eviction_fields",
]


class EvictionStrategy(StrEnum):
    KUBELET = "kubelet"
    """One pod per cycle, as the kubelet evicts."""
    RELIEF = "relief"
    """In one cycle, the shortest prefix of the ranked pods whose usage brings the signal
    back to threshold + minimum reclaim."""


KUBELET_CONFIGURATION_FIELDS = (
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "evictionPressureTransitionPeriod",
    "enforceNodeAllocatable",
    "mergeDefaultEvictionSettings",
    "localStorageCapacityIsolation",
)
"""The KubeletConfiguration fields the agent reads from a ``kind: KubeletConfiguration``
document; every other kubelet field is ignored."""


def kubelet_eviction_fields(document: Mapping[str, Any]) -> dict[str, Any]:
    """The eviction fields of a KubeletConfiguration document, as they are. A null field
    (``evictionSoft:`` with nothing under it) is unset, as the kubelet reads it, so it
    keeps its default."""
    return {
        key: document[key] for key in KUBELET_CONFIGURATION_FIELDS if document.get(key) is not None
    }


def _invalid(reason: str) -> PydanticCustomError:
    return PydanticCustomError("eviction_config", "{reason}", {"reason": reason})


def _signal_map(field: str, separator: str) -> Callable[[Any], Any]:
    """A YAML/JSON map, or the kubelet's flag string, to ``{str: str}``; anything else as
    it is."""

    def normalise(value: Any) -> Any:
        if isinstance(value, str):
            if value.lstrip().startswith("{"):
                try:
                    value = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise _invalid(f"not a valid JSON object: {exc}") from None
            else:
                try:
                    return thresholds.parse_flag_map(value, field=field, separator=separator)
                except thresholds.ThresholdError as exc:
                    raise _invalid(exc.message) from None
        if isinstance(value, Mapping):
            entries = {}
            for key, entry in value.items():
                if isinstance(entry, bool) or not isinstance(entry, str | int | float):
                    raise _invalid(f"{key}: expected a string such as '500Mi', got {entry!r}")
                entries[str(key)] = str(entry)
            return entries
        return value

    return normalise


def _parsed(
    field: str, separator: str, parse: Callable[[dict[str, str]], Any], *, optional: bool = False
) -> PlainValidator:
    """A validator that takes any form :func:`_signal_map` accepts and keeps ``parse``'s
    result; a :class:`~nodeagent.eviction.thresholds.ThresholdError` becomes the field's
    error, naming the rule broken. ``optional``: ``None`` stays ``None`` (unset)."""
    normalise = _signal_map(field, separator)

    def validate(value: Any) -> Any:
        if value is None and optional:
            return None
        entries = normalise(value)
        if not isinstance(entries, dict):
            raise PydanticKnownError("dict_type")
        try:
            return parse(entries)
        except thresholds.ThresholdError as exc:
            raise _invalid(exc.message) from None

    return PlainValidator(validate)


def _statements(field: str, *, optional: bool = False) -> PlainValidator:
    def parse(entries: dict[str, str]) -> thresholds.ThresholdStatements:
        return thresholds.parse_threshold_statements(entries, field=field)

    return _parsed(field, "<", parse, optional=optional)


def _statements_text(statements: thresholds.ThresholdStatements) -> dict[str, str]:
    # A dropped statement was 0% or 100%; 0% says the same.
    return {str(s): "0%" if value is None else str(value) for s, value in statements.items()}


def _values_text(values: Mapping[Signal, thresholds.ThresholdValue]) -> dict[str, str]:
    return {str(signal): str(value) for signal, value in values.items()}


def _durations_text(seconds: Mapping[Signal, float]) -> dict[str, str]:
    return {str(s): durations.format_go_duration(value) for s, value in seconds.items()}


_ParsedStatements = Annotated[
    dict[Signal, thresholds.ThresholdValue | None], PlainSerializer(_statements_text)
]
"""evictionHard/evictionSoft as parsed, dumped as ``{signal: value}`` text."""


def _comma_list(value: Any) -> Any:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _pressure_map(value: Any) -> Any:
    """``memory=X,disk=Y`` or a map; missing pressures keep their defaults (applied later)."""
    if isinstance(value, str):
        if value.lstrip().startswith("{"):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise _invalid(f"not a valid JSON object: {exc}") from None
        entries = {}
        for item in value.split(","):
            if not item.strip():
                continue
            name, sep, entry = item.partition("=")
            if not sep:
                raise _invalid(f"malformed pair {item.strip()!r}, expect pressure=name")
            entries[name.strip()] = entry.strip()
        return entries
    return value


_ALLOCATABLE_ENFORCEMENT = (
    "pods",
    "system-reserved",
    "kube-reserved",
    "system-reserved-compressible",
    "kube-reserved-compressible",
    "none",
)
_CONDITION_TYPE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?")
_TAINT_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


class EvictionSettings(BaseModel):
    """Eviction thresholds and policy, with the kubelet's field names."""

    eviction_hard: Annotated[
        _ParsedStatements | None,
        NoDecode,
        _statements("evictionHard", optional=True),
    ] = Field(
        default=None,
        validate_default=True,
        description="Hard thresholds, acted on at once: ``{memory.available: 500Mi,"
        " nodefs.available: 10%}`` or ``memory.available<500Mi,nodefs.available<10%``. Unset:"
        " the kubelet's defaults (``memory.available<100Mi, nodefs.available<10%,"
        " nodefs.inodesFree<5%, imagefs.available<15%, imagefs.inodesFree<5%``). Set at all:"
        " only what is given (as the kubelet does) unless mergeDefaultEvictionSettings."
        " ``0%``/``100%`` disable a signal. PSI signals take ``>``:"
        " ``memory.pressure.some.avg10>20`` (percent stalled).",
    )
    eviction_soft: Annotated[_ParsedStatements, NoDecode, _statements("evictionSoft")] = Field(
        default_factory=dict,
        validate_default=True,
        description="Soft thresholds, acted on once they have held for their grace period."
        " Default none.",
    )
    eviction_soft_grace_period: Annotated[
        dict[Signal, float],
        NoDecode,
        _parsed("evictionSoftGracePeriod", "=", thresholds.parse_grace_periods),
        PlainSerializer(_durations_text),
    ] = Field(
        default_factory=dict,
        validate_default=True,
        description="Grace period per soft threshold, Go durations: ``{memory.available:"
        " 1m30s}`` or ``memory.available=1m30s``. Every soft threshold needs one. Held as"
        " seconds.",
    )
    eviction_max_pod_grace_period: int = Field(
        default=0,
        description="Seconds: the most termination grace a pod gets when evicted for a *soft*"
        " threshold (it gets ``min(this, its terminationGracePeriodSeconds)``; hard evictions"
        " give 1 s). Default 0 (the kubelet's: soft evictions are immediate). Negative: the"
        " pod's own grace period (what the kubelet's flag help promises; the kubelet itself"
        " kills at once).",
    )
    eviction_minimum_reclaim: Annotated[
        dict[Signal, thresholds.ThresholdValue],
        NoDecode,
        _parsed("evictionMinimumReclaim", "=", thresholds.parse_minimum_reclaims),
        PlainSerializer(_values_text),
    ] = Field(
        default_factory=dict,
        validate_default=True,
        description="Per signal, how far past its threshold the signal must recover before the"
        " threshold stops being acted on (quantity, or percent of capacity):"
        " ``{nodefs.available: 500Mi}``. Default none.",
    )
    eviction_pressure_transition_period: Annotated[
        float, PlainSerializer(durations.format_go_duration)
    ] = Field(
        default="5m0s",
        validate_default=True,
        description="Go duration a pressure condition stays on after its last threshold"
        " stopped being met (anti-flapping). Default 5m0s; ``0s`` means the default, as in the"
        " kubelet. Held as seconds.",
    )
    enforce_node_allocatable: Annotated[list[str], NoDecode, BeforeValidator(_comma_list)] = Field(
        default_factory=lambda: ["pods"],
        validate_default=True,
        description="The kubelet's enforceNodeAllocatable. When it holds ``pods`` (the"
        " default), every hard ``memory.available`` threshold is also enforced on"
        " ``allocatableMemory.available`` (the kubepods cgroup).",
    )
    merge_default_eviction_settings: bool = Field(
        default=False,
        description="Fill the signals evictionHard leaves out with the kubelet's defaults"
        " (instead of dropping them). Default false, as in the kubelet.",
    )
    eviction_strategy: EvictionStrategy = Field(
        default=EvictionStrategy.KUBELET,
        description="``kubelet``: one pod per cycle. ``relief``: in one cycle, as many ranked"
        " pods as it takes to bring the signal back to threshold + minimum reclaim.",
    )
    condition_types: Annotated[dict[Pressure, str], NoDecode, BeforeValidator(_pressure_map)] = (
        Field(
            default_factory=lambda: dict(DEFAULT_CONDITION_TYPES),
            validate_default=True,
            description="Node condition type the agent writes per pressure (``memory``, ``disk``,"
            " ``pid``), e.g. ``memory=NodeAgentMemoryPressure``. Defaults:"
            " NodeAgent{Memory,Disk,PID}Pressure, distinct from the kubelet's own so neither"
            " overwrites the other.",
        )
    )
    taint_keys: Annotated[dict[Pressure, str], NoDecode, BeforeValidator(_pressure_map)] = Field(
        default_factory=lambda: dict(DEFAULT_TAINT_KEYS),
        validate_default=True,
        description="Taint key the agent sets per pressure. Defaults:"
        " nodeagent.io/{memory,disk,pid}-pressure.",
    )
    soft_pressure_taint: bool = Field(
        default=False,
        description="When true, pressure that so far comes only from soft thresholds still"
        " inside their grace period taints ``PreferNoSchedule`` instead of ``NoSchedule`` (an"
        " early warning that steers new pods away without refusing them); ``NoSchedule`` from"
        " the moment a threshold is acted on. Default false: ``NoSchedule`` whenever the"
        " condition is on, as the node lifecycle controller does for the kubelet's conditions.",
    )

    active_page_cache: ActivePageCache = Field(
        default=ActivePageCache.WORKING_SET,
        description="What the memory signals and the memory ranking make of the active page"
        " cache. ``workingSet`` (default): used memory, as the kubelet counts it"
        " (``usage - inactive_file``). ``reclaimable``: the clean active page cache"
        " (``active_file`` less dirty and writeback pages) counts as available in"
        " ``memory.available`` and ``allocatableMemory.available``, and a pod is ranked by"
        " its working set less its own, so a pod that keeps a file hot is neither the"
        " reason for nor the victim of an eviction, while the thresholds still cross at the"
        " same margin before an OOM kill. Pair it with a memory PSI threshold"
        " (``memory.pressure.some.avg10``) for a cache that thrashes. See docs/eviction.md.",
    )

    local_storage_capacity_isolation: bool = Field(
        default=True,
        description="The kubelet's localStorageCapacityIsolation: every cycle, whatever the"
        " thresholds, evict each pod whose emptyDir uses more than its ``sizeLimit``, whose"
        " ephemeral usage exceeds its pod-level ``ephemeral-storage`` limit, or one of whose"
        " containers exceeds its own; such a cycle evicts for no threshold. Default true, as"
        " in the kubelet.",
    )

    @field_validator("eviction_soft_grace_period")
    @classmethod
    def _every_soft_threshold_has_a_grace_period(
        cls, value: dict[Signal, float], info: ValidationInfo
    ) -> dict[Signal, float]:
        for signal, threshold in info.data.get("eviction_soft", {}).items():
            if threshold is not None and signal not in value:
                raise _invalid(
                    f"grace period must be specified for the soft eviction threshold "
                    f"{signal} (evictionSoft sets it, evictionSoftGracePeriod does not)"
                )
        return value

    @field_validator("eviction_minimum_reclaim")
    @classmethod
    def _psi_reclaims_within_their_thresholds(
        cls, value: dict[Signal, thresholds.ThresholdValue], info: ValidationInfo
    ) -> dict[Signal, thresholds.ThresholdValue]:
        for field in ("eviction_hard", "eviction_soft"):
            for signal, threshold in (info.data.get(field) or {}).items():
                try:
                    thresholds.check_stall_reclaim(signal, threshold, value.get(signal))
                except thresholds.ThresholdError as exc:
                    raise _invalid(exc.message) from None
        return value

    @field_validator("eviction_pressure_transition_period", mode="plain")
    @classmethod
    def _transition_period_parses(cls, value: Any) -> float:
        if not isinstance(value, str):
            raise PydanticKnownError("string_type")
        try:
            seconds = durations.parse_go_duration(value.strip())
        except durations.DurationError as exc:
            raise _invalid(f"{exc} (durations look like 30s, 5m, 1h)") from None
        if seconds < 0:
            raise _invalid("must not be negative")
        return seconds

    @field_validator("enforce_node_allocatable")
    @classmethod
    def _known_enforcement_keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if key not in _ALLOCATABLE_ENFORCEMENT:
                raise _invalid(
                    f"unknown value {key!r} (allowed: {', '.join(_ALLOCATABLE_ENFORCEMENT)})"
                )
        if "none" in value and len(value) > 1:
            raise _invalid("'none' cannot be combined with other values")
        return value

    @field_validator("condition_types")
    @classmethod
    def _condition_types_complete(cls, value: dict[Pressure, str]) -> dict[Pressure, str]:
        merged = {**DEFAULT_CONDITION_TYPES, **value}
        for pressure, name in merged.items():
            if _CONDITION_TYPE.fullmatch(name) is None:
                raise _invalid(f"{pressure}: {name!r} is not a valid condition type")
            if name in _KUBELET_CONDITIONS:
                raise _invalid(
                    f"{pressure}: {name!r} is the kubelet's own condition, which it rewrites on"
                    " every status update; the agent writes under a name of its own"
                )
        _distinct(merged)
        return merged

    @field_validator("taint_keys")
    @classmethod
    def _taint_keys_complete(cls, value: dict[Pressure, str]) -> dict[Pressure, str]:
        merged = {**DEFAULT_TAINT_KEYS, **value}
        for pressure, key in merged.items():
            if _TAINT_KEY.fullmatch(key) is None:
                raise _invalid(
                    f"{pressure}: {key!r} is not a valid taint key ([prefix/]name, "
                    f"alphanumerics, '-', '_', '.', name at most 63 characters)"
                )
            if key.startswith(_RESERVED_TAINT_PREFIX):
                raise _invalid(
                    f"{pressure}: {key!r} is reserved: the node lifecycle controller and the"
                    f" kubelet own the {_RESERVED_TAINT_PREFIX}* taints"
                )
        _distinct(merged)
        return merged


_KUBELET_CONDITIONS = frozenset({*KUBELET_CONDITION_TYPES.values(), "Ready", "NetworkUnavailable"})
"""Condition types the kubelet (or the network plugin) owns: never the agent's."""
_RESERVED_TAINT_PREFIX = "node.kubernetes.io/"


def _distinct(names: Mapping[Pressure, str]) -> None:
    if len(set(names.values())) != len(names):
        raise _invalid("each pressure needs its own name")
