"""The PrometheusRule's alerts: promtool accepts them, and promtool's unit tests
(tests/deploy/alerts_test.yaml) see every alert firing and not firing."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import files
from tests.observability import samples, tools

TESTS = Path(__file__).with_name("alerts_test.yaml")


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = files.one("PrometheusRule")["spec"]["groups"]
    return groups


def alert_names() -> set[str]:
    return {rule["alert"] for group in rule_groups() for rule in group["rules"]}


def write_rules(directory: Path, groups: list[dict[str, Any]]) -> None:
    (directory / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(TESTS, directory / TESTS.name)


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    promtool = tools.require("promtool")
    write_rules(tmp_path, rule_groups())
    done = tools.run([promtool, "check", "rules", str(tmp_path / "rules.yaml")])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in done.stdout


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    promtool = tools.require("promtool")
    write_rules(tmp_path, rule_groups())
    done = tools.run([promtool, "test", "rules", str(tmp_path / TESTS.name)])
    assert done.returncode == 0, done.stdout + done.stderr


def test_unit_tests_fail_when_an_alert_changes(tmp_path: Path) -> None:
    """The unit tests pin behaviour: waiting twice as long before alerting breaks them."""
    promtool = tools.require("promtool")
    groups = rule_groups()
    for rule in groups[0]["rules"]:
        if rule["alert"] == "NodeAgentPressureHeld":
            rule["for"] = "30m"
    write_rules(tmp_path, groups)
    done = tools.run([promtool, "test", "rules", str(tmp_path / TESTS.name)])
    assert done.returncode != 0
    assert "NodeAgentPressureHeld" in done.stdout + done.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    assert firing == alert_names()
    assert silent == alert_names()


def test_alerts_use_only_metrics_the_agent_exports() -> None:
    exported = exported_names()
    for group in rule_groups():
        for rule in group["rules"]:
            for name in re.findall(r"\bnodeagent_[a-z0-9_]+", rule["expr"]):
                assert name in exported, f"{rule['alert']} uses unknown metric {name}"


SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "info": ("_info",),
    "summary": ("_sum", "_count", ""),
}


def exported_names() -> set[str]:
    """Every series name AgentMetrics can serve (a family may have no sample yet)."""
    return {
        family.name + suffix
        for family in samples.fed_metrics().registry.collect()
        for suffix in SAMPLE_SUFFIXES[family.type]
    }


@pytest.mark.parametrize("severity", ["critical", "warning", "info"])
def test_severities_are_the_usual_ones(severity: str) -> None:
    used = {rule["labels"]["severity"] for group in rule_groups() for rule in group["rules"]}
    assert used <= {"critical", "warning", "info"}
    assert severity in used
