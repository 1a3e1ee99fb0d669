"""The Grafana dashboard: valid JSON of the expected shape, every query valid PromQL
(promtool checks them as recording rules) over metrics the agent actually exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.deploy import files
from tests.deploy.test_alerts import exported_names
from tests.observability import tools

# Grafana's variables, replaced by what they expand to so promtool can parse the query.
VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$node": ".*"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(files.DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def expressions() -> list[str]:
    return [target["expr"] for panel in panels() for target in panel["targets"]]


def test_dashboard_shape() -> None:
    board = dashboard()
    assert board["uid"] == "nodeagent"
    names = [variable["name"] for variable in board["templating"]["list"]]
    assert names == ["datasource", "node"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        grid = panel["gridPos"]
        assert grid["x"] >= 0
        assert grid["x"] + grid["w"] <= 24


def test_dashboard_covers_signals_pressure_evictions_and_latency() -> None:
    text = " ".join(expressions())
    for needed in (
        "nodeagent_signal_available_bytes",
        "nodeagent_signal_threshold_bytes",
        "nodeagent_node_pressure",
        "nodeagent_evictions_total",
        "nodeagent_detection_latency_seconds_bucket",
        "nodeagent_decision_latency_seconds_bucket",
        "nodeagent_evaluation_duration_seconds_bucket",
    ):
        assert needed in text


def test_every_query_uses_metrics_the_agent_exports() -> None:
    exported = exported_names()
    for expr in expressions():
        for name in re.findall(r"\b(?:nodeagent|process)_[a-z0-9_]+", expr):
            assert name in exported, f"unknown metric {name} in {expr}"


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    promtool = tools.require("promtool")
    rules = []
    for index, expr in enumerate(expressions()):
        expanded = expr
        for variable, value in VARIABLES.items():
            expanded = expanded.replace(variable, value)
        assert "$" not in expanded, f"unexpanded variable in {expr}"
        rules.append({"record": f"dashboard:query_{index}", "expr": expanded})
    file = tmp_path / "queries.yaml"
    file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = tools.run([promtool, "check", "rules", str(file)])
    assert done.returncode == 0, done.stdout + done.stderr
