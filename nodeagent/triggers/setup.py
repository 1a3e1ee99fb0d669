"""Arming the node's triggers from the configuration and the collector's paths.

The loop calls three things: :func:`arm_static_triggers` once at start (PSI triggers and
``memory.events`` watches, which do not depend on observations),
:func:`rearm_memory_thresholds` after each memory collection (cgroup v1 usage
thresholds, which move with the page cache and the thresholds), and
:func:`arm_memory_poll` after it (the adaptive poll, wherever no usage threshold is
active for a memory signal: always on cgroup v2). Paths come from the
signals collector, which resolves them below the host root; this module only decides
what to arm where.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from nodeagent.triggers import memcg, psi
from nodeagent.triggers.api import (
    Mechanism,
    MechanismState,
    MechanismStatus,
    MemoryProbe,
    Triggers,
)
from nodeagent.triggers.settings import TriggerSettings

NODE_SCOPE = "node"
KUBEPODS_SCOPE = "kubepods"


@dataclass(frozen=True, slots=True)
class TriggerPaths:
    """Where the node's trigger files are, as the signals collector resolved them."""

    cgroup_version: int
    """1 (memory controller on cgroup v1, possibly hybrid) or 2 (unified)."""
    proc_pressure_dir: str
    """The system PSI files: ``<host root>/proc/pressure``."""
    memory_cgroup_dirs: Mapping[str, str]
    """Scope (``node``, ``kubepods``) to its memory cgroup directory: the v1 memcg, or
    the v2 cgroup."""
    pressure_cgroup_dirs: Mapping[str, str]
    """Scope to the cgroup2 directory holding its ``*.pressure`` files: the v2 cgroup,
    or on a hybrid v1 host the same path under the unified mount, when it exists."""

    def pressure_file(self, spec: psi.TriggerSpec) -> str | None:
        """The file ``spec`` is armed on, or ``None`` when its scope has no directory."""
        if spec.scope == psi.SYSTEM_SCOPE:
            return os.path.join(self.proc_pressure_dir, spec.resource)
        directory = self.pressure_cgroup_dirs.get(spec.scope)
        return None if directory is None else os.path.join(directory, f"{spec.resource}.pressure")


def psi_trigger_name(spec: psi.TriggerSpec) -> str:
    """The status name of a PSI trigger: ``psi:`` and the spec as configured."""
    return f"psi:{spec}"


def memory_events_name(scope: str) -> str:
    return f"memory.events:{scope}"


def arm_static_triggers(
    triggers: Triggers, settings: TriggerSettings, paths: TriggerPaths
) -> dict[str, MechanismStatus]:
    """Arm every configured PSI trigger and, on cgroup v2, the ``memory.events``
    watches of the node and kubepods cgroups; return each one's status.

    A PSI trigger whose cgroup scope has no known directory gets a status saying so
    instead of an armed trigger (the triggers object has nothing to arm).
    """
    statuses: dict[str, MechanismStatus] = {}
    for spec in settings.psi_triggers:
        name = psi_trigger_name(spec)
        path = paths.pressure_file(spec)
        if path is None:
            statuses[name] = MechanismStatus(
                Mechanism.PSI,
                MechanismState.UNAVAILABLE,
                "",
                f"no cgroup2 directory is known for the {spec.scope!r} cgroup",
            )
            continue
        statuses[name] = triggers.arm_psi(name, path, spec)
    if paths.cgroup_version == 2 and settings.memory_events_notification:
        for scope, directory in paths.memory_cgroup_dirs.items():
            name = memory_events_name(scope)
            statuses[name] = triggers.watch_memory_events(name, directory)
    return statuses


def memory_threshold_name(scope: str, threshold: str) -> str:
    """``memcg:<scope>:<threshold>``, e.g. ``memcg:node:memory.available<100Mi hard``."""
    return f"memcg:{scope}:{threshold}"


def rearm_memory_thresholds(
    triggers: Triggers,
    settings: TriggerSettings,
    paths: TriggerPaths,
    *,
    scope: str,
    usage: int,
    available: int,
    thresholds: Mapping[str, int],
) -> dict[str, MechanismStatus]:
    """Keep one cgroup v1 usage threshold armed per memory threshold of ``scope``.

    ``usage`` is the scope's ``memory.usage_in_bytes`` and ``available`` its
    ``memory.available`` (or ``allocatableMemory.available``) from the same collection;
    ``thresholds`` maps a stable description of each threshold (``memory.available<100Mi
    hard``) to its quantity in bytes, resolved against the observed capacity. Thresholds
    no longer configured are disarmed. Does nothing on cgroup v2, or when disabled.
    """
    prefix = memory_threshold_name(scope, "")
    wanted = {memory_threshold_name(scope, label): value for label, value in thresholds.items()}
    directory = paths.memory_cgroup_dirs.get(scope)
    enabled = paths.cgroup_version == 1 and settings.kernel_memcg_notification
    for name in list(triggers.status()):
        if name.startswith(prefix) and (name not in wanted or not enabled):
            triggers.disarm(name)
    if not enabled or directory is None:
        return {}
    return {
        name: triggers.arm_memory_threshold(
            name,
            directory,
            memcg.usage_threshold(usage=usage, available=available, threshold=threshold),
            observed_usage=usage,
        )
        for name, threshold in wanted.items()
    }


def memory_poll_name(scope: str) -> str:
    """``memory-poll:<scope>``."""
    return f"memory-poll:{scope}"


def kernel_thresholds_active(statuses: Mapping[str, MechanismStatus], scope: str) -> bool:
    """Whether ``scope`` has memcg usage thresholds armed and every one is active: then
    the kernel notifies at each memory threshold and no memory poll is needed."""
    prefix = memory_threshold_name(scope, "")
    armed = [status for name, status in statuses.items() if name.startswith(prefix)]
    return bool(armed) and all(status.state is MechanismState.ACTIVE for status in armed)


def arm_memory_poll(
    triggers: Triggers,
    settings: TriggerSettings,
    *,
    scope: str,
    source: str,
    probe: MemoryProbe | None,
    thresholds: Collection[int],
    observed: int | None = None,
    observed_at: float | None = None,
    unheard: bool = False,
) -> MechanismStatus | None:
    """Keep the adaptive poll of ``scope``'s memory signal armed while it is needed.

    Needed when the signal has thresholds (bytes of available, resolved against its
    capacity), a ``probe`` can read it, the poll is enabled, and the kernel does not
    already notify at each threshold (:func:`kernel_thresholds_active`), or cannot be
    counted on to (``unheard``: a memcg threshold of the scope woke a cycle that found
    none of its thresholds met, and the kernel, having counted that crossing, will not
    notify again while usage stays above it). Otherwise disarmed. ``observed`` is the
    signal's available bytes in the collection just made (a read the poll need not
    repeat), read at ``observed_at`` (monotonic seconds).
    Returns the status, or ``None`` when disarmed.
    """
    name = memory_poll_name(scope)
    statuses = triggers.status()
    wanted = (
        settings.adaptive_memory_poll
        and probe is not None
        and bool(thresholds)
        and (unheard or not kernel_thresholds_active(statuses, scope))
    )
    if not wanted or probe is None:
        if name in statuses:
            triggers.disarm(name)
        return None
    return triggers.arm_memory_poll(
        name,
        source,
        probe,
        tuple(sorted(set(thresholds))),
        observed=observed,
        observed_at=observed_at,
    )


def degraded_components(statuses: Mapping[str, MechanismStatus]) -> dict[str, str | None]:
    """``trigger/<name>`` to why that trigger is not fully active, or ``None`` when it
    is: the shape the metrics layer's ``set_degraded(component, reason)`` takes."""
    return {
        f"trigger/{name}": None
        if status.state is MechanismState.ACTIVE
        else f"{status.state}: {status.detail}"
        for name, status in statuses.items()
    }
