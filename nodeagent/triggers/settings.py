"""Configuration fields of the event-driven triggers and the polls behind them.

The poll is the safety net and the triggers make it early: every field here either sets
how often the loop looks without being asked, or which kernel notifications may ask it
to look sooner. Durations are written as in the kubelet's configuration (``500ms``,
``2s``) or as plain seconds; byte amounts as Kubernetes quantities (``16Mi``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, PlainSerializer, PlainValidator
from pydantic_settings import NoDecode

from nodeagent.base import durations
from nodeagent.k8s import quantities as units
from nodeagent.triggers import adaptive, memcg, psi


def _parse_specs(value: Any) -> tuple[psi.TriggerSpec, ...]:
    """A list of specs, or one string of them separated by commas (flags, environment);
    an empty string is an empty list."""
    if isinstance(value, str):
        text = value.strip()
        items: Any = json.loads(text) if text.startswith("[") else text.split(",")
    else:
        items = value
    if not isinstance(items, list | tuple):
        raise ValueError(f"expected a list of PSI triggers, got {value!r}")
    specs = []
    for item in items:
        if isinstance(item, psi.TriggerSpec):
            specs.append(item)
        elif isinstance(item, str):
            if item.strip():
                specs.append(psi.TriggerSpec.parse(item))
        else:
            raise ValueError(f"expected a PSI trigger such as 'memory some 150ms 1s', got {item!r}")
    return tuple(specs)


def _parse_bytes(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected a byte quantity such as 16Mi, got {value!r}")
    try:
        amount = units.quantity_value(value)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise ValueError(f"expected a byte quantity such as 16Mi, got {value!r}") from exc
    if not amount.is_finite() or amount != amount.to_integral_value() or amount < 0:
        raise ValueError(f"expected a whole, non-negative number of bytes, got {value!r}")
    return int(amount)


def _parse_interval(value: Any) -> float:
    seconds = durations.parse_seconds(value)
    if not 0 < seconds <= MAX_INTERVAL_S:
        raise ValueError(f"expected an interval above 0s and at most 1h, got {value!r}")
    return seconds


MAX_INTERVAL_S = 3600.0

Interval = Annotated[float, BeforeValidator(_parse_interval)]
"""Seconds above 0 and at most an hour, written as ``500ms``, ``2s``, ``1m30s`` or a
number."""

PsiTriggerList = Annotated[
    tuple[psi.TriggerSpec, ...],
    NoDecode,
    PlainValidator(_parse_specs),
    PlainSerializer(lambda specs: [str(spec) for spec in specs]),
]

Bytes = Annotated[int, BeforeValidator(_parse_bytes)]

DEFAULT_PSI_TRIGGERS = ("memory some 150ms 1s", "io full 150ms 1s")


class TriggerSettings(BaseModel):
    """How often the loop polls, and which kernel notifications wake it sooner."""

    poll_interval: Interval = Field(
        default=1.0,
        description="Seconds between two collections when no trigger fires (default 1s). The"
        " safety net under the triggers: a threshold crossed while the kernel stays silent"
        " (cgroup v2 without memory.high, a memcg threshold that moved with the page cache) is"
        " seen within this interval. Set 10s to poll at the kubelet's cadence.",
    )

    filesystem_poll_interval: Interval = Field(
        default=0.5,
        description="Seconds between two statvfs reads of nodefs/imagefs/containerfs (default"
        " 500ms). The kernel has no notification for free space, so this poll is the only"
        " detector; a statvfs costs microseconds, so a short interval is cheap.",
    )

    kernel_memcg_notification: bool = Field(
        default=True,
        description="cgroup v1: arm a usage threshold (``cgroup.event_control`` + eventfd) on"
        " the node and kubepods memory cgroups for every memory threshold, as the kubelet's"
        " option of the same name does (default on here; off in the kubelet).",
    )

    memory_events_notification: bool = Field(
        default=True,
        description="cgroup v2: watch ``memory.events`` of the node and kubepods cgroups with"
        " inotify, where that cgroup has a ``memory.max`` limit; the kernel changes it when"
        " the cgroup reaches the limit or OOMs (never at an eviction threshold below the"
        " limit).",
    )

    adaptive_memory_poll: bool = Field(
        default=True,
        description="Read ``memory.available`` and ``allocatableMemory.available`` between"
        " polls, more often the nearer they are to a threshold and the faster they fall (from"
        " ``memoryPollFloor`` up to ``pollInterval``), wherever the kernel has no usage"
        " threshold for them: always on cgroup v2, on v1 where eventfd thresholds cannot be"
        " armed. Reads only the files those two signals need.",
    )

    memory_poll_floor: Interval = Field(
        default=adaptive.DEFAULT_FLOOR_S,
        description="Shortest interval of the adaptive memory poll (default 30ms), used when"
        " memory is at or near a threshold. Capped at ``pollInterval``.",
    )

    memory_poll_assumed_rate: Bytes = Field(
        default=adaptive.DEFAULT_MIN_RATE,
        gt=0,
        description="The rate (bytes per second) at which the adaptive memory poll assumes"
        " memory may start falling even when it is not (default 512Mi): with 100Mi above a"
        " threshold it reads every 98ms, with 24Mi at the floor. Observed faster falls shorten"
        " the interval further.",
    )

    psi_triggers: PsiTriggerList = Field(
        default=tuple(psi.TriggerSpec.parse(spec) for spec in DEFAULT_PSI_TRIGGERS),
        description="PSI triggers that wake the loop, each ``[<cgroup>/]<memory|io|cpu>"
        " <some|full> <stall> <window>``: the system files in /proc/pressure without a cgroup,"
        " the node or kubepods cgroup's ``<resource>.pressure`` with ``node/`` or"
        " ``kubepods/``. Default ``memory some 150ms 1s`` and ``io full 150ms 1s``; an empty"
        " list disables them. A flag or environment variable takes them separated by commas."
        " Windows run from 500ms to 10s; without CAP_SYS_RESOURCE the kernel accepts only"
        " multiples of 2s, and a refused window is widened to the next one, the stall scaled"
        " with it (logged).",
    )

    psi_kernel_triggers: bool = Field(
        default=True,
        description="Arm PSI triggers in the kernel (default). ``false`` evaluates the same"
        " triggers in the agent by reading each pressure file's stall total every"
        " ``pollInterval``, as happens anyway where the kernel refuses triggers.",
    )

    memory_threshold_hysteresis: Bytes = Field(
        default=memcg.DEFAULT_HYSTERESIS_BYTES,
        description="How far below its ideal value an armed memcg threshold may drift before"
        " it is re-armed (default 16Mi). Thresholds that drift *above* it (page cache"
        " reclaimed under pressure) are re-armed at once, since they would notify late.",
    )
