"""The extender's verdicts are the NodePressure plugin's: each node is assessed once per
version (its score either side of the annotation going stale), and that assessment
answers at any later time exactly as the plugin would."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.base.errors import ConfigError
from nodeagent.extender import server
from nodeagent.extender.nodeview import NodeView
from nodeagent.k8s.pressure import PRESSURE_ANNOTATION
from nodeagent.kube.client import api_time
from nodeagent.scheduler.extenders import wire
from nodeagent.scheduler.framework import Handle
from nodeagent.scheduler.plugins import node_pressure
from tests.scheduler.builders import node_dict

NOW = 1_714_557_600.0
GiB = 2**30


def annotated(name: str, at: float, **fields: Any) -> dict[str, object]:
    signals = {"memory.available": {"available": 20 * GiB, "capacity": 32 * GiB}}
    text = json.dumps({"time": api_time(at), "signals": signals})
    return node_dict(name, annotations={PRESSURE_ANNOTATION: text}, **fields)


def plugin_score(args: node_pressure.Args, node: dict[str, object], now: float) -> int:
    plugin = node_pressure.new(args, Handle(now=now))
    return server.extender_score(plugin.node_score(wire.node_fields(node).to_node())[0])


NODES = {
    "fresh headroom": annotated("n", NOW),
    "published in the future": annotated("n", NOW + 3600),
    "no annotation": node_dict("n"),
    "pressure condition": annotated("n", NOW, conditions={"MemoryPressure": "True"}),
    "not JSON": node_dict("n", annotations={PRESSURE_ANNOTATION: "{"}),
    "no time": node_dict(
        "n",
        annotations={
            PRESSURE_ANNOTATION: json.dumps(
                {"signals": {"memory.available": {"available": GiB, "capacity": 2 * GiB}}}
            )
        },
    ),
}
ARGS = {
    "defaults": node_pressure.Args(),
    "never stale": node_pressure.Args(stale_after_seconds=0),
    "a minute": node_pressure.Args(stale_after_seconds=60, neutral_score=30),
}


class TestStanding:
    @pytest.mark.parametrize("node", NODES.values(), ids=NODES.keys())
    @pytest.mark.parametrize("args", ARGS.values(), ids=ARGS.keys())
    @given(offset=st.floats(min_value=-7200, max_value=7200, allow_nan=False))
    def test_answers_at_any_time_as_the_plugin_does(
        self, node: dict[str, object], args: node_pressure.Args, offset: float
    ) -> None:
        standing = server.PressureJudge(args, clock=lambda: NOW).standing(
            wire.node_fields(node).to_node()
        )
        assert standing.score(NOW + offset) == plugin_score(args, node, NOW + offset)

    def test_a_fresh_annotation_turns_neutral_after_the_limit(self) -> None:
        standing = server.PressureJudge(node_pressure.Args()).standing(
            wire.node_fields(annotated("n1", NOW)).to_node()
        )
        limit = NOW + node_pressure.Args().stale_after_seconds
        assert (standing.score(NOW), standing.score(limit), standing.score(limit + 1)) == (
            10,
            10,
            5,
        )
        assert server.extender_score(50) == 5 and server.extender_score(100) == 10
        assert server.extender_score(99) == 9

    def test_a_node_whose_judging_raises_is_neutral_and_logged(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        judge = server.PressureJudge(node_pressure.Args(neutral_score=30))

        def broken(node: object) -> tuple[int, str]:
            raise RuntimeError("plugin bug")

        monkeypatch.setattr(judge.plugin, "node_score", broken)
        with caplog.at_level(logging.ERROR):
            standing = judge.standing(wire.node_fields(annotated("n1", NOW)).to_node())
        assert (standing.score(NOW), standing.score(NOW + 10**6)) == (3, 3)
        assert "scoring node n1 failed" in caplog.text

    def test_a_taint_list_whose_judging_raises_passes_its_nodes_and_is_logged(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        view = NodeView()
        taint = {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}
        for name in ("a", "b"):
            view.upsert(node_dict(name, taints=[taint]))
        view.upsert(node_dict("c"))
        judge = server.PressureJudge(node_pressure.Args())
        service = server.ExtenderService(view, judge, server.ExtenderMetrics(view))

        def broken(*args: object) -> None:
            raise RuntimeError("plugin bug")

        monkeypatch.setattr(judge, "rejection", broken)
        with caplog.at_level(logging.ERROR):
            answer = json.loads(
                service.filter(wire.ExtenderArgs({"spec": {}}, None, ["a", "b", "c"]))
            )
        assert answer["NodeNames"] == ["a", "b", "c"]
        assert answer["FailedAndUnresolvableNodes"] == {}
        assert caplog.text.count("filtering the nodes tainted") == 1  # once per list


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
