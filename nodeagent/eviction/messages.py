"""The words the agent publishes: eviction messages and condition reasons and messages.

Eviction messages follow the kubelet's text (``evictionMessage`` in its ``helpers.go``) so
that tooling and people who grep for ``The node was low on resource`` keep working::

    The node was low on resource: memory. Threshold quantity: 500Mi, available: 480Mi.
    Pod web-1 was using 600Mi, request is 100Mi, has larger consumption of memory.

Quantities print as Kubernetes canonical quantities (1.5 GiB is ``1536Mi``). The kubelet
adds one sentence per container over its request; the agent sees pod totals, so it
writes the kubelet's pod-level sentence instead, under the same condition (usage above
request, for memory and ephemeral storage only). PSI evictions, which the kubelet does
not have, say what stalled: ``The node was under memory pressure. Threshold:
memory.pressure.some.avg10 > 20%, observed: 35.5%.``

Condition reasons are stable per state (threshold met now / held by the transition
period / clear), so a consumer can tell a new episode from a lingering one by the reason
alone; the message carries the figures.
"""

from __future__ import annotations

from nodeagent.base import durations
from nodeagent.eviction.observations import stall_percent
from nodeagent.eviction.thresholds import PSI_SIGNALS, Quantity, Threshold
from nodeagent.k8s import quantities as units
from nodeagent.k8s.pressure import Pressure
from nodeagent.k8s.quantities import QuantityFormat
from nodeagent.model import SIGNAL_RESOURCE, PodInfo, Resource, SignalValue

__all__ = [
    "condition_reason",
    "container_storage_limit_message",
    "empty_dir_limit_message",
    "eviction_message",
    "pod_storage_limit_message",
    "threshold_met_text",
    "threshold_sentence",
]

_PRESSURE_NAMES = {Pressure.MEMORY: "Memory", Pressure.DISK: "Disk", Pressure.PID: "PID"}
_CLEAR_REASONS = {
    Pressure.MEMORY: "SufficientMemory",
    Pressure.DISK: "NoDiskPressure",
    Pressure.PID: "SufficientPID",
}


def condition_reason(pressure: Pressure, *, met: bool, held: bool) -> str:
    """``MemoryThresholdMet`` / ``MemoryPressureTransition`` / ``SufficientMemory``."""
    if met:
        return f"{_PRESSURE_NAMES[pressure]}ThresholdMet"
    if held:
        return f"{_PRESSURE_NAMES[pressure]}PressureTransition"
    return _CLEAR_REASONS[pressure]


def threshold_met_text(threshold: Threshold, observed: SignalValue, quantity: int) -> str:
    """One clause of a condition message for an active threshold, e.g.
    ``memory.available 480Mi is below the hard threshold 500Mi``."""
    kind = "hard" if threshold.hard else "soft"
    grace = (
        ""
        if threshold.hard
        else f" (grace period {durations.format_go_duration(threshold.grace_period)})"
    )
    if threshold.signal in PSI_SIGNALS:
        stalled = stall_percent(observed)
        limit = (observed.capacity - quantity) / 100
        if stalled > limit:
            return (
                f"{threshold.signal} {stalled:g}% is above the {kind} threshold {limit:g}%{grace}"
            )
        return (
            f"{threshold.signal} {stalled:g}% has not yet fallen below {threshold.value} "
            f"minus the minimum reclaim {threshold.min_reclaim} ({kind} threshold{grace})"
        )
    available = units.format_quantity(observed.available)
    bar = _quantity_text(threshold, quantity)
    if observed.available < quantity:
        return f"{threshold.signal} {available} is below the {kind} threshold {bar}{grace}"
    return (
        f"{threshold.signal} {available} has not yet recovered to {bar} plus the minimum "
        f"reclaim {threshold.min_reclaim} ({kind} threshold{grace})"
    )


def threshold_sentence(threshold: Threshold, observed: SignalValue, quantity: int) -> str:
    """The lead and threshold sentences every eviction message of a cycle shares."""
    if threshold.signal in PSI_SIGNALS:
        resource = threshold.signal.partition(".")[0]
        return (
            f"The node was under {resource} pressure. Threshold: {threshold.signal} > "
            f"{threshold.value}, observed: {stall_percent(observed):g}%. "
        )
    return (
        f"The node was low on resource: {SIGNAL_RESOURCE[threshold.signal]}. Threshold quantity: "
        f"{_quantity_text(threshold, quantity)}, available: "
        f"{units.format_quantity(observed.available)}. "
    )


def eviction_message(lead: str, resource: Resource, pod: PodInfo, used: int | None) -> str:
    """``lead`` plus, when the pod uses more than it requested, the kubelet's sentence."""
    if used is None or resource not in _REQUESTED:
        return lead
    request = pod.requests.get(resource, 0)  # resource names double as request names
    if used <= request:
        return lead
    return (
        f"{lead}Pod {pod.name} was using {units.format_quantity(used)}, request is "
        f"{units.format_quantity(request)}, has larger consumption of {resource}. "
    )


def empty_dir_limit_message(
    volume: str, size_limit: int, written: QuantityFormat = QuantityFormat.BINARY_SI
) -> str:
    """The kubelet's message for an emptyDir over its ``sizeLimit`` (printed in the
    format it was ``written`` in, as ``Quantity.String()`` does)."""
    return (
        f"Usage of EmptyDir volume {_go_quoted(volume)} exceeds the limit "
        f"{_go_quoted(units.format_quantity(size_limit, written))}. "
    )


def pod_storage_limit_message(
    limit: int, written: QuantityFormat = QuantityFormat.BINARY_SI
) -> str:
    """The kubelet's message for a pod over its pod-level ephemeral-storage limit."""
    return (
        "Pod ephemeral local storage usage exceeds the total limit of containers "
        f"{units.format_quantity(limit, written)}. "
    )


def container_storage_limit_message(
    container: str, limit: int, written: QuantityFormat = QuantityFormat.BINARY_SI
) -> str:
    """The kubelet's message for a container over its own ephemeral-storage limit."""
    return (
        f"Container {container} exceeded its local ephemeral storage limit "
        f"{_go_quoted(units.format_quantity(limit, written))}. "
    )


def _go_quoted(text: str) -> str:
    """Go's ``%q`` for the names and quantities it quotes here (DNS labels and quantity
    text: printable ASCII without quotes or backslashes, so plain double quotes)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_REQUESTED = frozenset({Resource.MEMORY, Resource.EPHEMERAL_STORAGE})


def _quantity_text(threshold: Threshold, quantity: int) -> str:
    """A configured quantity prints in the format it was written in; a resolved
    percentage prints as the kubelet prints amounts it computed (binary)."""
    if isinstance(threshold.value, Quantity):
        return units.format_quantity(quantity, threshold.value.format)
    return units.format_quantity(quantity)
