"""What the agent publishes on its Node: conditions, taints and the pressure annotation.

Each part is a pure planner (desired state + what the Node shows + ``now`` -> the patch
to send, or nothing) and one thin apply in :class:`NodeStatusActuator`.

**Conditions** (``nodes/status``, strategic merge patch). The patch carries only the
agent's own condition types; the API server merges ``status.conditions`` by ``type``, so
``Ready`` and the kubelet's ``MemoryPressure`` & co. are never touched.
``lastTransitionTime`` moves only when the status changes, and is the time the agent
first *decided* the change (not the time a write finally succeeded after an outage).
``lastHeartbeatTime`` is refreshed at most every ``conditionHeartbeatPeriod`` while
nothing changes, so at rest the API sees one small patch per period. A change of status
or reason is written at once; a message-only change (the engine's message names the
observed value, which moves every cycle) rides on the next write.

**Taints** (``nodes``, strategic merge patch). ``spec.taints`` has no merge key, so the
patch carries the complete list: every foreign taint as it is, plus the desired taints
for the agent's own keys. ``metadata.resourceVersion`` in the patch makes it a
compare-and-swap: if anyone changed the Node since it was read, the server answers 409,
and the actuator re-reads and re-plans (``PatchNodeTaints`` in the node controller works
the same way).

**Annotation** ``nodeagent.io/pressure``: compact JSON of per-signal headroom (see
:data:`nodeagent.PRESSURE_ANNOTATION`), rewritten with the heartbeat period or at
once when a signal's headroom moves by ``pressureAnnotationMinChange`` of its capacity.

**Start-up adoption** (node-problem-detector#304 is the failure to avoid): the actuator
first reads the Node and takes what it finds (conditions with their times, taints,
annotation) as the published state, so a restarted agent writes nothing until the
engine wants something different or a heartbeat is due.

Failures leave the published state as it was, so the next apply converges to the
*latest* desired state; nothing is queued and nothing is lost.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nodeagent.base import errors
from nodeagent.base.clock import Clock
from nodeagent.k8s.pressure import PRESSURE_ANNOTATION, Taint
from nodeagent.kube import client
from nodeagent.model import Decision, NodeCondition, Signal

log = logging.getLogger(__name__)

TAINT_CONFLICT_ATTEMPTS = 5


def _status_text(status: bool) -> str:
    return "True" if status else "False"


@dataclass(frozen=True, slots=True)
class PublishedCondition:
    """A node condition as it is (or will be) on the Node object."""

    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str
    last_heartbeat_time: str

    @classmethod
    def from_api(cls, condition: Mapping[str, Any]) -> PublishedCondition:
        return cls(
            type=str(condition.get("type", "")),
            status=str(condition.get("status", "Unknown")),
            reason=str(condition.get("reason", "")),
            message=str(condition.get("message", "")),
            last_transition_time=str(condition.get("lastTransitionTime") or ""),
            last_heartbeat_time=str(condition.get("lastHeartbeatTime") or ""),
        )

    def to_api(self) -> dict[str, str]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.last_transition_time,
            "lastHeartbeatTime": self.last_heartbeat_time,
        }


@dataclass(frozen=True, slots=True)
class SignalHeadroom:
    """One signal's entry in the pressure annotation."""

    available: int
    capacity: int
    threshold: int
    """The lowest threshold the agent enforces for the signal, as an amount."""

    @property
    def headroom_fraction(self) -> float:
        return (self.available - self.threshold) / self.capacity if self.capacity else 0.0


@dataclass(frozen=True, slots=True)
class NodeState:
    """The parts of the Node the agent reads back."""

    name: str
    uid: str = ""
    resource_version: str = ""
    conditions: Mapping[str, PublishedCondition] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    annotation: str | None = None

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> NodeState:
        meta = node.get("metadata") or {}
        conditions = {
            str(c.get("type")): PublishedCondition.from_api(c)
            for c in (node.get("status") or {}).get("conditions") or ()
            if isinstance(c, Mapping)
        }
        return cls(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            conditions=conditions,
            taints=tuple((node.get("spec") or {}).get("taints") or ()),
            annotation=(meta.get("annotations") or {}).get(PRESSURE_ANNOTATION),
        )


# --- pure planners ----------------------------------------------------------------------


def plan_conditions(
    desired: Sequence[NodeCondition],
    published: Mapping[str, PublishedCondition],
    *,
    now: str,
    now_seconds: float,
    heartbeat_period: float,
    decided_at: Mapping[str, str] | None = None,
) -> tuple[PublishedCondition, ...]:
    """The conditions to write now, or ``()`` when nothing is due.

    ``now`` is the wall time as an API timestamp and ``now_seconds`` the same instant in
    Unix seconds; ``decided_at`` maps a condition type to the time its new status was
    first decided (used as lastTransitionTime when a write was delayed by an outage).
    When anything is due, every desired condition is written, so one patch refreshes all
    heartbeats together.
    """
    due = False
    for condition in desired:
        current = published.get(condition.type)
        if current is None:
            due = True
            break
        if current.status != _status_text(condition.status) or current.reason != condition.reason:
            due = True
            break
        heartbeat = client.parse_api_time(current.last_heartbeat_time)
        if heartbeat is None or now_seconds - heartbeat >= heartbeat_period:
            due = True
            break
    if not due:
        return ()
    planned = []
    for condition in desired:
        status = _status_text(condition.status)
        current = published.get(condition.type)
        if current is not None and current.status == status and current.last_transition_time:
            transition = current.last_transition_time
        else:
            transition = (decided_at or {}).get(condition.type, now)
        planned.append(
            PublishedCondition(
                condition.type, status, condition.reason, condition.message, transition, now
            )
        )
    return tuple(planned)


def conditions_patch(conditions: Sequence[PublishedCondition]) -> dict[str, Any]:
    """Strategic merge patch for ``nodes/status`` touching only these condition types."""
    return {"status": {"conditions": [c.to_api() for c in conditions]}}


def _taint_identity(taint: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(taint.get("key", "")), str(taint.get("effect", "")), str(taint.get("value") or ""))


def plan_taints(
    desired: Sequence[Taint],
    current: Sequence[Mapping[str, Any]],
    owned_keys: Collection[str],
) -> list[dict[str, Any]] | None:
    """The complete new taint list, or ``None`` when the Node already matches.

    Foreign taints (keys the agent does not own) are kept as they are, in their order;
    the agent's own are replaced by ``desired`` (an existing identical taint keeps its
    ``timeAdded``).
    """
    owned = set(owned_keys) | {t.key for t in desired}
    foreign = [dict(t) for t in current if str(t.get("key", "")) not in owned]
    existing_own = {_taint_identity(t): t for t in current if str(t.get("key", "")) in owned}
    wanted: list[dict[str, Any]] = []
    seen = set()
    for taint in desired:
        identity = (taint.key, taint.effect, taint.value)
        if identity in seen:
            continue
        seen.add(identity)
        entry = dict(existing_own.get(identity) or {})
        entry.update({"key": taint.key, "effect": taint.effect})
        if taint.value:
            entry["value"] = taint.value
        else:
            entry.pop("value", None)
        wanted.append(entry)
    if set(existing_own) == seen and len(existing_own) == len(
        [t for t in current if str(t.get("key", "")) in owned]
    ):
        return None
    return foreign + wanted


def annotation_value(headroom: Mapping[Signal, SignalHeadroom], now: str) -> str:
    """The annotation's JSON, compact and with sorted keys (stable for comparisons)."""
    signals = {
        str(signal): {"available": h.available, "capacity": h.capacity, "threshold": h.threshold}
        for signal, h in sorted(headroom.items(), key=lambda item: str(item[0]))
    }
    return json.dumps({"time": now, "signals": signals}, separators=(",", ":"), sort_keys=True)


def annotation_due(
    published: str | None,
    headroom: Mapping[Signal, SignalHeadroom],
    *,
    now_seconds: float,
    refresh_period: float,
    min_change: float,
) -> bool:
    """Whether the annotation must be rewritten: never written, stale, or headroom moved
    materially (or crossed its threshold) for some signal."""
    if published is None:
        return True
    try:
        document = json.loads(published)
        previous = document["signals"]
        written = client.parse_api_time(document["time"])
    except (ValueError, KeyError, TypeError):
        return True
    if written is None or now_seconds - written >= refresh_period:
        return True
    if set(previous) != {str(s) for s in headroom}:
        return True
    for signal, now in headroom.items():
        try:
            before = SignalHeadroom(
                int(previous[str(signal)]["available"]),
                int(previous[str(signal)]["capacity"]),
                int(previous[str(signal)]["threshold"]),
            )
        except (KeyError, TypeError, ValueError):
            return True
        moved = abs(now.headroom_fraction - before.headroom_fraction)
        crossed = (now.available < now.threshold) != (before.available < before.threshold)
        if moved >= min_change or crossed:
            return True
    return False


# --- the apply ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeStatusResult:
    """What one apply wrote (or, in dry-run, would have written)."""

    conditions: tuple[PublishedCondition, ...] = ()
    taints: tuple[Mapping[str, Any], ...] | None = None
    annotation: str | None = None
    errors: tuple[str, ...] = ()

    @property
    def wrote(self) -> bool:
        return bool(self.conditions) or self.taints is not None or self.annotation is not None


class NodeStatusActuator:
    """Converges the Node to the engine's desired conditions, taints and annotation.

    Not thread-safe by design beyond one lock: the agent loop is its only caller.
    """

    def __init__(
        self,
        kube: client.KubeClient,
        node_name: str,
        *,
        clock: Clock,
        condition_types: Collection[str],
        taint_keys: Collection[str],
        heartbeat_period: float = 300.0,
        annotation: bool = True,
        annotation_refresh_period: float = 300.0,
        annotation_min_change: float = 0.05,
        dry_run: bool = False,
    ) -> None:
        self._kube = kube
        self.node_name = node_name
        self._clock = clock
        self.condition_types = frozenset(condition_types)
        self.taint_keys = frozenset(taint_keys)
        self._heartbeat = heartbeat_period
        self._annotation = annotation
        self._annotation_refresh = annotation_refresh_period
        self._annotation_min_change = annotation_min_change
        self.dry_run = dry_run
        self._state: NodeState | None = None
        self._decided_at: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    @property
    def state(self) -> NodeState | None:
        """The Node as last read or written (None before :meth:`adopt`)."""
        return self._state

    def adopt(self) -> NodeState:
        """Read the Node and take its current state as published. One GET, no write."""
        state = NodeState.from_node(self._kube.get_node(self.node_name))
        self._state = state
        return state

    def apply(
        self,
        decision: Decision,
        headroom: Mapping[Signal, SignalHeadroom] | None = None,
    ) -> NodeStatusResult:
        """Write whatever is due. API failures are reported in the result, not raised:
        the published state stays as it was and the next call tries again."""
        with self._lock:
            problems: list[str] = []
            if self._state is None:
                try:
                    self.adopt()
                except errors.KubeAPIError as exc:
                    return NodeStatusResult(errors=(f"read node: {exc}",))
            conditions = self._apply_conditions(decision.conditions, problems)
            taints, annotation = self._apply_metadata(decision.taints, headroom, problems)
            return NodeStatusResult(conditions, taints, annotation, tuple(problems))

    # --- conditions ---------------------------------------------------------------------
    def _apply_conditions(
        self, desired: Sequence[NodeCondition], problems: list[str]
    ) -> tuple[PublishedCondition, ...]:
        assert self._state is not None
        wall = self._clock.wall()
        now = client.api_time(wall)
        decided_at = self._remember_decisions(desired, now)
        planned = plan_conditions(
            desired,
            self._state.conditions,
            now=now,
            now_seconds=wall,
            heartbeat_period=self._heartbeat,
            decided_at=decided_at,
        )
        if not planned:
            return ()
        if self.dry_run:
            log.info("dry-run: would patch node %s conditions %s", self.node_name, planned)
            merged = {**self._state.conditions, **{c.type: c for c in planned}}
            self._state = replace(self._state, conditions=merged)
            return planned
        try:
            node = self._kube.patch_node_status(self.node_name, conditions_patch(planned))
        except errors.KubeAPIError as exc:
            problems.append(f"patch node status: {exc}")
            return ()
        self._state = NodeState.from_node(node)
        for condition in planned:
            self._decided_at.pop(condition.type, None)
        return planned

    def _remember_decisions(self, desired: Sequence[NodeCondition], now: str) -> dict[str, str]:
        """First time each pending status change was decided (kept across failed writes)."""
        assert self._state is not None
        for condition in desired:
            status = _status_text(condition.status)
            current = self._state.conditions.get(condition.type)
            if current is not None and current.status == status:
                self._decided_at.pop(condition.type, None)
                continue
            pending = self._decided_at.get(condition.type)
            if pending is None or pending[0] != status:
                self._decided_at[condition.type] = (status, now)
        return {kind: stamp for kind, (_, stamp) in self._decided_at.items()}

    # --- taints and annotation -----------------------------------------------------------
    def _apply_metadata(
        self,
        desired_taints: Sequence[Taint],
        headroom: Mapping[Signal, SignalHeadroom] | None,
        problems: list[str],
    ) -> tuple[tuple[Mapping[str, Any], ...] | None, str | None]:
        for _ in range(TAINT_CONFLICT_ATTEMPTS):
            assert self._state is not None
            state = self._state
            wall = self._clock.wall()
            taints = plan_taints(desired_taints, state.taints, self.taint_keys)
            annotation = None
            if (
                self._annotation
                and headroom
                and annotation_due(
                    state.annotation,
                    headroom,
                    now_seconds=wall,
                    refresh_period=self._annotation_refresh,
                    min_change=self._annotation_min_change,
                )
            ):
                annotation = annotation_value(headroom, client.api_time(wall))
            if taints is None and annotation is None:
                return None, None
            patch: dict[str, Any] = {}
            if taints is not None:
                patch["metadata"] = {"resourceVersion": state.resource_version}
                patch["spec"] = {"taints": taints}
            if annotation is not None:
                patch.setdefault("metadata", {})["annotations"] = {PRESSURE_ANNOTATION: annotation}
            if self.dry_run:
                log.info("dry-run: would patch node %s %s", self.node_name, patch)
                self._state = replace(
                    state,
                    taints=tuple(taints) if taints is not None else state.taints,
                    annotation=annotation if annotation is not None else state.annotation,
                )
                return (tuple(taints) if taints is not None else None), annotation
            try:
                node = self._kube.patch_node(self.node_name, patch)
            except errors.Conflict:
                try:
                    self.adopt()
                except errors.KubeAPIError as exc:
                    problems.append(f"re-read node after conflict: {exc}")
                    return None, None
                continue
            except errors.KubeAPIError as exc:
                problems.append(f"patch node: {exc}")
                return None, None
            self._state = NodeState.from_node(node)
            return (tuple(taints) if taints is not None else None), annotation
        problems.append(f"patch node: still conflicting after {TAINT_CONFLICT_ATTEMPTS} tries")
        return None, None
