"""The resolved eviction policy: built once from the configuration, never changed.

:meth:`EvictionPolicy.from_settings` applies the kubelet's defaulting rules (default hard
thresholds only when ``evictionHard`` is unset, or merged in on request; a zero
transition period means the default), combines the statements the settings parsed
into thresholds, derives the ``allocatableMemory.available`` copies, and precomputes the
containerfs copies for each filesystem layout, so that the engine's per-cycle work is
arithmetic only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy

from nodeagent.base.errors import ConfigError
from nodeagent.eviction import observations as engine_observations
from nodeagent.eviction import thresholds as thr
from nodeagent.eviction.page_cache import ActivePageCache
from nodeagent.eviction.settings import EvictionSettings, EvictionStrategy
from nodeagent.k8s import quantities as units
from nodeagent.k8s.pressure import DEFAULT_CONDITION_TYPES, DEFAULT_TAINT_KEYS, Pressure
from nodeagent.model import FsLayout, NodeObservations, Signal

__all__ = [
    "DEFAULT_PRESSURE_TRANSITION_PERIOD",
    "EvictionPolicy",
    "policy_record",
    "threshold_record",
]

DEFAULT_PRESSURE_TRANSITION_PERIOD = 300.0
"""Seconds (the kubelet's 5m)."""

_SETTING_OF = {
    "evictionSoft": "eviction_soft",
    "evictionMinimumReclaim": "eviction_minimum_reclaim",
}
"""The settings a threshold error from :func:`thr.build_threshold_config` can name."""


@dataclass(frozen=True, slots=True)
class EvictionPolicy:
    """Everything the engine needs to decide, resolved and immutable.

    ``thresholds`` holds the configured thresholds and their allocatable copies; the
    containerfs copies depend on the node's filesystem layout and come from
    :meth:`thresholds_for`.
    """

    thresholds: tuple[thr.Threshold, ...]
    max_pod_grace_period_seconds: int = 0
    pressure_transition_period: float = DEFAULT_PRESSURE_TRANSITION_PERIOD
    """Seconds a condition stays on after its last active threshold."""
    strategy: EvictionStrategy = EvictionStrategy.KUBELET
    condition_types: Mapping[Pressure, str] = field(
        default_factory=lambda: dict(DEFAULT_CONDITION_TYPES)
    )
    taint_keys: Mapping[Pressure, str] = field(default_factory=lambda: dict(DEFAULT_TAINT_KEYS))
    soft_pressure_taint: bool = False
    local_storage_capacity_isolation: bool = True
    """Evict pods over their emptyDir, pod or container ephemeral-storage limits."""
    active_page_cache: ActivePageCache = ActivePageCache.WORKING_SET
    """Whether the clean active page cache is used memory (the kubelet's accounting) or
    available (:mod:`nodeagent.eviction.page_cache`)."""
    warnings: tuple[str, ...] = ()
    """Configuration the policy had to ignore or reinterpret, for the operator."""
    _by_layout: Mapping[FsLayout, tuple[thr.Threshold, ...]] = field(
        init=False, repr=False, compare=False
    )
    _signals_by_layout: Mapping[FsLayout, tuple[Signal, ...]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        by_layout = {
            layout: thr.derive_containerfs_thresholds(self.thresholds, layout)
            for layout in FsLayout
        }
        object.__setattr__(self, "_by_layout", by_layout)
        object.__setattr__(
            self,
            "_signals_by_layout",
            {
                layout: tuple(dict.fromkeys(t.signal for t in thresholds))
                for layout, thresholds in by_layout.items()
            },
        )

    @classmethod
    def from_settings(cls, settings: EvictionSettings) -> EvictionPolicy:
        """Resolve validated settings; raises :class:`ConfigError` naming field and value."""
        hard: thr.ThresholdStatements = thr.DEFAULT_EVICTION_HARD
        if settings.eviction_hard is not None:
            hard = settings.eviction_hard
            if settings.merge_default_eviction_settings:
                hard = {**thr.DEFAULT_EVICTION_HARD, **hard}
        try:
            thresholds = thr.build_threshold_config(
                hard=hard,
                soft=settings.eviction_soft,
                grace_periods=settings.eviction_soft_grace_period,
                minimum_reclaims=settings.eviction_minimum_reclaim,
                enforce_pods_allocatable="pods" in settings.enforce_node_allocatable,
            )
        except thr.ThresholdError as exc:
            # Validation runs the same checks; this names the field for settings changed
            # or built without it (assignment, model_construct).
            value = settings.model_dump()[_SETTING_OF[exc.field]]
            message = f"config field {exc.field!r} (value {value!r}): {exc}"
            raise ConfigError(message, field=exc.field) from exc
        transition = settings.eviction_pressure_transition_period
        return cls(
            thresholds=thresholds,
            max_pod_grace_period_seconds=settings.eviction_max_pod_grace_period,
            pressure_transition_period=transition or DEFAULT_PRESSURE_TRANSITION_PERIOD,
            strategy=settings.eviction_strategy,
            condition_types=dict(settings.condition_types),
            taint_keys=dict(settings.taint_keys),
            soft_pressure_taint=settings.soft_pressure_taint,
            local_storage_capacity_isolation=settings.local_storage_capacity_isolation,
            active_page_cache=settings.active_page_cache,
            warnings=_warnings(settings, thresholds),
        )

    def thresholds_for(self, layout: FsLayout) -> tuple[thr.Threshold, ...]:
        """The thresholds in force on a node with this filesystem layout."""
        return self._by_layout[layout]

    def signals_for(self, layout: FsLayout) -> tuple[Signal, ...]:
        """The signals those thresholds watch, in configuration order."""
        return self._signals_by_layout[layout]

    def enforced_thresholds(self, observations: NodeObservations) -> dict[Signal, int]:
        """Per observed signal, the lowest (most lenient) threshold resolved against this
        observation's capacity, in available units: what the pressure annotation
        publishes as ``threshold``."""
        layout = observations.fs_layout
        observed = engine_observations.observe(observations, self.signals_for(layout))
        lowest: dict[Signal, int] = {}
        for threshold in self.thresholds_for(layout):
            value = observed.get(threshold.signal)
            if value is None:
                continue
            quantity = thr.threshold_quantity(threshold, value.capacity)
            lowest[threshold.signal] = min(quantity, lowest.get(threshold.signal, quantity))
        return lowest


def threshold_record(threshold: thr.Threshold) -> dict[str, Any]:
    """A threshold as ``config check --output json`` prints it (percentages as fractions)."""
    record: dict[str, Any] = {
        "signal": str(threshold.signal),
        "operator": str(threshold.operator),
        "value": _value_record(threshold.value),
        "gracePeriodSeconds": units.json_number(threshold.grace_period),
        "minReclaim": (
            None if threshold.min_reclaim is None else _value_record(threshold.min_reclaim)
        ),
        "hard": threshold.hard,
    }
    if threshold.derived_from is not None:
        record["derivedFrom"] = str(threshold.derived_from)
    return record


def policy_record(policy: EvictionPolicy, layout: FsLayout = FsLayout.SINGLE) -> dict[str, Any]:
    """The effective policy on a node with ``layout``, as JSON-ready data."""
    return {
        "thresholds": [threshold_record(t) for t in policy.thresholds_for(layout)],
        "fsLayout": str(layout),
        "pressureTransitionPeriodSeconds": units.json_number(policy.pressure_transition_period),
        "maxPodGracePeriodSeconds": policy.max_pod_grace_period_seconds,
        "strategy": str(policy.strategy),
        "conditionTypes": {str(p): name for p, name in policy.condition_types.items()},
        "taintKeys": {str(p): key for p, key in policy.taint_keys.items()},
        "softPressureTaint": policy.soft_pressure_taint,
        "localStorageCapacityIsolation": policy.local_storage_capacity_isolation,
        "activePageCache": str(policy.active_page_cache),
        "warnings": list(policy.warnings),
    }


def _value_record(value: thr.ThresholdValue) -> dict[str, Any]:
    if isinstance(value, thr.Quantity):
        return {"quantity": value.value}
    if isinstance(value, thr.Percentage):
        # The shortest decimal that is the same float32: 0.1, not 0.10000000149011612.
        return {"percentage": float(str(numpy.float32(value.fraction)))}
    return {"percentage": value.hundredths / thr.PSI_CAPACITY}


def _warnings(settings: EvictionSettings, thresholds: tuple[thr.Threshold, ...]) -> tuple[str, ...]:
    notes = []
    configured_containerfs = sorted(
        {t.signal for t in thresholds if t.signal.startswith("containerfs.")}
    )
    for signal in configured_containerfs:
        source = signal.replace("containerfs", "nodefs or imagefs")
        notes.append(
            f"{signal} thresholds are ignored: as in the kubelet, they are copied from "
            f"{source} according to the node's filesystem layout"
        )
    for signal, value in settings.eviction_soft.items():
        if value is not None and settings.eviction_soft_grace_period.get(signal) == 0:
            notes.append(
                f"soft threshold {signal}: {value} has a grace period of 0s and so acts as a "
                f"hard threshold (1 s pod grace), as in the kubelet"
            )
    if settings.eviction_max_pod_grace_period < 0:
        notes.append(
            f"evictionMaxPodGracePeriod {settings.eviction_max_pod_grace_period}: soft "
            f"evictions give each pod its own terminationGracePeriodSeconds (what the "
            f"kubelet's flag help promises; the kubelet itself kills at once, #118172)"
        )
    memory_psi = any(
        t.signal.startswith("memory.pressure.") for t in thresholds if t.derived_from is None
    )
    if settings.active_page_cache is ActivePageCache.RECLAIMABLE and not memory_psi:
        notes.append(
            "activePageCache: reclaimable counts the clean active page cache as available, and"
            " no memory.pressure threshold is set: a hot cache larger than memory would thrash"
            " (refault what the kernel drops) without any eviction; add e.g."
            " memory.pressure.some.avg10>20 to evictionSoft with a grace period"
        )
    if settings.eviction_pressure_transition_period == 0:
        notes.append("evictionPressureTransitionPeriod 0s means the default 5m0s (as the kubelet)")
    return tuple(notes)
