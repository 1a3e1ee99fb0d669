"""Picking up where a previous agent left off. Pure.

The engine's memory (when each pressure was last seen, when it was last acted on) lives
in the process and dies with it, while the conditions and taints it produced stay on the
Node. A restarted agent that started from empty memory would see "no pressure for ever"
and clear a condition that must hold for the transition period, or flip a
``NoSchedule`` taint to ``PreferNoSchedule``: the flapping node-problem-detector#304
describes. So once the actuator has read the Node (``adopt()``), the loop folds what it
found into the engine's state:

* a condition of the agent's that is ``True`` counts as pressure seen *now*: the agent
  cannot know how long before the restart it was last seen, and holding it one transition
  period too long is the safe side (it clears only after a period without pressure);
* an agent ``NoSchedule`` taint counts as an action taken now (with ``softPressureTaint``
  it stays ``NoSchedule`` rather than being downgraded while the pressure holds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from nodeagent.actuators.node_status import NodeState
from nodeagent.eviction.engine import NO_SCHEDULE, EngineState
from nodeagent.k8s.pressure import Pressure


def adopted_pressures(node: NodeState, condition_types: Mapping[Pressure, str]) -> set[Pressure]:
    """Pressures whose agent condition is ``True`` on the Node."""
    return {
        pressure
        for pressure, kind in condition_types.items()
        if (condition := node.conditions.get(kind)) is not None and condition.status == "True"
    }


def adopted_actions(node: NodeState, taint_keys: Mapping[Pressure, str]) -> set[Pressure]:
    """Pressures whose agent taint is on the Node with ``NoSchedule``."""
    tainted = {(str(t.get("key", "")), str(t.get("effect", ""))) for t in node.taints}
    return {pressure for pressure, key in taint_keys.items() if (key, NO_SCHEDULE) in tainted}


def seed_engine_state(
    state: EngineState,
    node: NodeState,
    *,
    condition_types: Mapping[Pressure, str],
    taint_keys: Mapping[Pressure, str],
    now: float,
) -> EngineState:
    """``state`` with the Node's published pressure folded in as seen at ``now``; times
    already later in ``state`` are kept."""

    def stamped(times: Mapping[Pressure, float], pressures: set[Pressure]) -> dict[Pressure, float]:
        merged = dict(times)
        for pressure in pressures:
            merged[pressure] = max(merged.get(pressure, now), now)
        return merged

    return replace(
        state,
        pressure_observed=stamped(
            state.pressure_observed, adopted_pressures(node, condition_types)
        ),
        acted_observed=stamped(state.acted_observed, adopted_actions(node, taint_keys)),
    )
