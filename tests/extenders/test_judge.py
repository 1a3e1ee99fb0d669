"""The extender's verdicts are the NodePressure plugin's, with a per-version score cache
that notices staleness within SCORE_TTL and stays bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent import model
from nodeagent.errors import ConfigError
from nodeagent.kube.client import api_time
from nodeagent.scheduler.extenders import server, wire
from nodeagent.scheduler.framework import Handle
from nodeagent.scheduler.plugins import node_pressure
from tests.scheduler.builders import node_dict

NOW = 1_714_557_600.0
GiB = 2**30


def annotated(name: str, at: float) -> dict[str, object]:
    signals = {"memory.available": {"available": 20 * GiB, "capacity": 32 * GiB}}
    text = json.dumps({"time": api_time(at), "signals": signals})
    return node_dict(name, annotations={model.PRESSURE_ANNOTATION: text})


def test_scores_are_the_plugins_and_turn_neutral_when_stale() -> None:
    judge = server.PressureJudge(node_pressure.Args())
    node = wire.node_fields(annotated("n1", NOW)).to_node()
    plugin = node_pressure.new(node_pressure.Args(), Handle(now=NOW))
    assert judge.score(node, "7", NOW) == plugin.node_score(node)[0] == 100
    assert judge.score(node, "7", NOW + server.SCORE_TTL / 2) == 100  # cached
    stale = NOW + node_pressure.Args().stale_after_seconds + 1
    assert judge.score(node, "7", stale) == 50  # recomputed after the TTL: stale
    assert server.extender_score(50) == 5 and server.extender_score(100) == 10
    assert server.extender_score(99) == 9


def test_the_score_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "MAX_CACHED_SCORES", 3)
    judge = server.PressureJudge(node_pressure.Args())
    for i in range(10):
        judge.score(wire.node_fields(annotated(f"n{i}", NOW)).to_node(), "1", NOW)
        assert len(judge._scores) <= 3


def test_a_mistyped_node_is_a_protocol_error() -> None:
    with pytest.raises(wire.ProtocolError, match="Node"):
        wire.node_fields({"metadata": {"name": 5}})
    bad = node_dict("n1", taints=[{"key": "k", "effect": "Sometimes"}])
    with pytest.raises(wire.ProtocolError, match=r"spec.taints\[0\].effect 'Sometimes'"):
        wire.node_fields(bad).to_node()


def test_the_commands_config_sets_the_plugins_args(tmp_path: Path) -> None:
    from nodeagent.commands import extender as command

    path = tmp_path / "sched.yaml"
    path.write_text(
        "profiles:\n- pluginConfig:\n  - name: NodePressure\n"
        "    args: {neutralScore: 30, staleAfterSeconds: 60}\n"
    )
    args = command.pressure_args(path)
    assert (args.neutral_score, args.stale_after_seconds) == (30, 60)
    assert server.extender_score(server.PressureJudge(args).neutral) == 3
    assert command.pressure_args(None) == node_pressure.Args()
    path.write_text(
        "profiles:\n- pluginConfig:\n  - name: NodePressure\n    args: {neutralScore: 300}\n"
    )
    with pytest.raises(ConfigError, match=r"neutralScore"):
        command.pressure_args(path)
