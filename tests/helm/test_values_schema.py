"""values.schema.json against the agent's own configuration loader: the schema Helm
checks at ``helm install`` and the model the agent validates at start
(``nodeagent.config``) must agree, or a value would pass the install and crash-loop the
DaemonSet on every node, or be refused at install though the agent takes it.

* Its ``config`` section names exactly the agent's configuration fields, with the same
  closed sets (metrics auth modes, log formats, strategies, pressures, signals).
* Every threshold the schema accepts, the agent accepts (a property over generated
  threshold texts); the forms the kubelet documents are accepted by both and the
  malformed ones refused by both (a table).
* Each duration field takes what the agent takes: seconds or a Go duration.
* The shipped configurations (values.yaml, manifests/config.yaml, examples/) pass.

No Helm here: the schema is read with ``jsonschema`` (draft 7, as Helm 3 and 4 read it);
tests/helm/test_chart.py has Helm refuse values with it."""

from __future__ import annotations

import json
import tempfile
import typing
from enum import Enum
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nodeagent.agent.config import NodeAgentConfiguration, load_config, snake_to_camel
from nodeagent.base.errors import ConfigError
from nodeagent.k8s.pressure import KUBELET_CONDITION_TYPES, Pressure
from nodeagent.model import Signal
from tests.helm import chart

SCHEMA: dict[str, Any] = json.loads((chart.CHART / "values.schema.json").read_text())
VALUES: dict[str, Any] = yaml.safe_load((chart.CHART / "values.yaml").read_text())
CONFIG = SCHEMA["properties"]["config"]
FIELDS = {
    snake_to_camel(name): field for name, field in NodeAgentConfiguration.model_fields.items()
}
PSI = {s.value for s in Signal if ".pressure." in s.value}
EXAMPLES = sorted((chart.REPO / "examples").glob("*.yaml"))


def schema_errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(SCHEMA)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(values)]


def config_errors(config: dict[str, Any]) -> list[str]:
    return schema_errors({"config": config})


def agent_error(config: dict[str, Any], tmp_path: Path) -> str | None:
    """The agent's own verdict on ``config`` as a file: None, or its message."""
    file = tmp_path / "config.yaml"
    file.write_text(yaml.safe_dump(config))
    try:
        load_config(file, environ={})
    except ConfigError as exc:
        return str(exc)
    return None


def enum_values(field: str) -> set[str]:
    """The closed set a configuration field's annotation allows (``X | None`` unwrapped)."""
    annotation = FIELDS[field].annotation
    [kind] = [
        arg
        for arg in (typing.get_args(annotation) or (annotation,))
        if isinstance(arg, type) and issubclass(arg, Enum)
    ]
    return {member.value for member in kind}


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node


class TestTheSchemaNamesTheAgentsFields:
    def test_config_holds_exactly_the_configuration_fields(self) -> None:
        assert set(CONFIG["properties"]) == set(FIELDS)
        assert CONFIG["additionalProperties"] is False

    @pytest.mark.parametrize("field", ["metricsAuth", "logFormat", "logLevel", "evictionStrategy"])
    def test_closed_sets_are_the_agents(self, field: str) -> None:
        assert set(resolve(CONFIG["properties"][field])["enum"]) == enum_values(field)

    def test_the_scheduler_and_extender_metrics_auth_modes_are_the_agents(self) -> None:
        for component in ("scheduler", "extender"):
            node = resolve(SCHEMA["properties"][component]["properties"]["metricsAuth"])
            assert set(node["enum"]) == enum_values("metricsAuth")

    def test_the_kubelets_conditions_are_never_the_agents(self, tmp_path: Path) -> None:
        refused = set(CONFIG["properties"]["conditionTypes"]["properties"]["memory"]["not"]["enum"])
        assert refused >= set(KUBELET_CONDITION_TYPES.values()) | {"Ready"}
        for name in refused:
            assert agent_error({"conditionTypes": {"memory": name}}, tmp_path), name

    @pytest.mark.parametrize("field", ["conditionTypes", "taintKeys"])
    def test_pressure_maps_take_the_three_pressures(self, field: str) -> None:
        assert set(CONFIG["properties"][field]["properties"]) == {p.value for p in Pressure}

    @pytest.mark.parametrize(
        ("field", "grammar", "psi_grammar"),
        [
            ("evictionHard", "threshold", "stallThreshold"),
            ("evictionSoft", "threshold", "stallThreshold"),
            ("evictionSoftGracePeriod", "goDuration", "goDuration"),
            ("evictionMinimumReclaim", "reclaim", "stallReclaim"),
        ],
    )
    def test_signal_maps_take_every_signal_and_nothing_else(
        self, field: str, grammar: str, psi_grammar: str
    ) -> None:
        node = resolve(CONFIG["properties"][field])
        assert node["additionalProperties"] is False
        assert set(node["properties"]) == {s.value for s in Signal}
        for signal, entry in node["properties"].items():
            expected = psi_grammar if signal in PSI else grammar
            assert entry == {"$ref": f"#/definitions/{expected}"}, signal

    @pytest.mark.parametrize("field", sorted(FIELDS))
    def test_duration_fields_take_what_the_agent_takes(self, field: str, tmp_path: Path) -> None:
        """Seconds or a Go duration where the agent takes both; a Go duration only where
        it takes only that (the kubelet's own fields); no duration for a plain number."""
        node = CONFIG["properties"][field]
        declared = node.get("$ref", "").rsplit("/", 1)[-1] or node.get("type")
        if declared in ("duration", "positiveDuration"):
            taken: tuple[Any, ...] = ("90s", "1m30s", 90, 1.5, "2")
            refused: tuple[Any, ...] = ("ninety seconds",)
            if declared == "positiveDuration":
                refused += (0,)
        elif declared == "goDuration":
            taken, refused = ("90s", "1m30s", "0s"), (90, "90", "ninety seconds")
        elif declared == "number":
            taken, refused = (), ("90s",)
        else:
            return
        for value in taken:
            assert not config_errors({field: value}), (field, value)
            assert agent_error({field: value}, tmp_path) is None, (field, value)
        for value in refused:
            assert config_errors({field: value}), (field, value)
            assert agent_error({field: value}, tmp_path), (field, value)

    def test_every_duration_the_agent_takes_is_one_in_the_schema(self, tmp_path: Path) -> None:
        """A number field of the agent's that takes ``90s`` is a duration in the schema."""
        numbers = {f for f, field in FIELDS.items() if "float" in str(field.annotation)}
        takes_90s = {f for f in numbers if agent_error({f: "90s"}, tmp_path) is None}
        declared = {
            field
            for field, node in CONFIG["properties"].items()
            if node.get("$ref", "").rsplit("/", 1)[-1]
            in ("duration", "positiveDuration", "goDuration")
        }
        assert takes_90s == declared


class TestShippedConfigurationsPass:
    def test_the_charts_defaults(self) -> None:
        assert not schema_errors(VALUES)

    def test_the_kustomize_trees_configuration(self, tmp_path: Path) -> None:
        config = yaml.safe_load((chart.REPO / "manifests" / "config.yaml").read_text())
        assert not config_errors(config)

    @pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
    def test_the_examples(self, path: Path) -> None:
        document = yaml.safe_load(path.read_text())
        if document.get("kind") == "KubeletConfiguration":
            pytest.skip("a kubelet's configuration, not the agent's")
        assert not config_errors(document)


# Threshold texts, from the kubelet's documentation and its ParseThresholdConfig cases.
VALID_THRESHOLDS = [
    ("memory.available", "100Mi"),
    ("memory.available", "1.5Gi"),
    ("memory.available", "1e9"),
    ("memory.available", "500M"),
    ("memory.available", 1073741824),
    ("nodefs.available", "10%"),
    ("nodefs.available", "0%"),
    ("nodefs.available", "100%"),
    ("nodefs.available", "7.5%"),
    ("nodefs.inodesFree", "5%"),
    ("pid.available", "1k"),
    ("allocatableMemory.available", "250Mi"),
    ("memory.pressure.some.avg10", "20"),
    ("memory.pressure.some.avg10", ">20"),
    ("io.pressure.full.avg60", "12.5%"),
    ("memory.pressure.full.avg300", 20),
]
MALFORMED_THRESHOLDS = [
    ("memory.available", "abc"),
    ("memory.available", "-100Mi"),
    ("memory.available", "0"),
    ("memory.available", "0Mi"),
    ("memory.available", "100MB"),
    ("memory.available", "101%"),
    ("memory.available", "10 %"),
    ("memory.available", ""),
    ("memory.available", 0),
    ("memory.available", True),
    ("memory.availabe", "100Mi"),
    ("cpu.available", "1"),
    ("memory.pressure.some.avg10", "100"),
    ("memory.pressure.some.avg10", "20.125"),
    ("memory.pressure.some.avg10", "<20"),
    ("memory.pressure.some.avg10", "20Mi"),
]


def _thresholds(field: str, signal: str, value: Any) -> dict[str, Any]:
    config: dict[str, Any] = {field: {signal: value}}
    if field == "evictionSoft":
        config["evictionSoftGracePeriod"] = {signal: "30s"}
    return config


@pytest.mark.parametrize("field", ["evictionHard", "evictionSoft"])
class TestThresholdsAgree:
    @pytest.mark.parametrize(("signal", "value"), VALID_THRESHOLDS)
    def test_the_documented_forms_pass_both(
        self, field: str, signal: str, value: Any, tmp_path: Path
    ) -> None:
        config = _thresholds(field, signal, value)
        assert not config_errors(config)
        assert agent_error(config, tmp_path) is None

    @pytest.mark.parametrize(("signal", "value"), MALFORMED_THRESHOLDS)
    def test_malformed_thresholds_fail_both(
        self, field: str, signal: str, value: Any, tmp_path: Path
    ) -> None:
        config = _thresholds(field, signal, value)
        assert config_errors(config)
        assert agent_error(config, tmp_path)


@pytest.mark.parametrize(
    ("config", "wrong"),
    [
        ({"evictionSoftGracePeriod": {"memory.available": "30"}}, "a duration without a unit"),
        ({"evictionSoftGracePeriod": {"memory.available": "-1m"}}, "a negative grace period"),
        ({"evictionMinimumReclaim": {"nodefs.available": "0%"}}, "a reclaim of no percent"),
        ({"evictionMinimumReclaim": {"nodefs.available": "-1Gi"}}, "a negative reclaim"),
        ({"evictionPressureTransitionPeriod": "5 minutes"}, "a malformed duration"),
        ({"psiTriggers": ["memory sometimes 150ms 1s"]}, "an unknown PSI line"),
        ({"conditionTypes": {"memory": "Node Agent"}}, "a condition type with a space"),
        ({"taintKeys": {"cpu": "x/y"}}, "an unknown pressure"),
        ({"taintKeys": {"disk": "node.kubernetes.io/disk-pressure"}}, "the kubelet's taint"),
        ({"conditionTypes": {"pid": "PIDPressure"}}, "the kubelet's condition"),
        ({"enforceNodeAllocatable": ["everything"]}, "an unknown enforcement"),
        ({"maxEvictionsPerInterval": 0}, "no eviction per interval"),
        ({"metricsAddress": "9813"}, "an address without its host part"),
        ({"metricsAuth": "tokens"}, "an unknown metrics-auth mode"),
        ({"logFormat": "xml"}, "an unknown log format"),
        ({"dryrun": True}, "a misspelt field"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_both_refuse(config: dict[str, Any], wrong: str, tmp_path: Path) -> None:
    assert config_errors(config), wrong
    assert agent_error(config, tmp_path), wrong


def test_a_quantitys_exponent_has_at_most_two_digits() -> None:
    """``1e99`` is already more bytes than any node has; ``1e400000`` would have the agent
    compute a number of 400,000 digits at start (MemoryError, not a configuration
    error), so the schema stops it at install."""
    assert not config_errors({"evictionHard": {"memory.available": "1e99"}})
    assert config_errors({"evictionHard": {"memory.available": "1e400000"}})


_QUANTITY_ALPHABET = "0123456789.%>+-eEKMGTPmiunk "


def string_pattern(field: str, signal: str) -> str:
    """The pattern of the string form the schema gives ``field``'s entry for ``signal``."""
    entry = resolve(resolve(CONFIG["properties"][field])["properties"][signal])
    [text] = [branch for branch in entry.get("anyOf", [entry]) if branch.get("type") == "string"]
    pattern: str = text["pattern"]
    return pattern


@st.composite
def threshold_entries(draw: st.DrawFn) -> tuple[str, str, str]:
    """A field, a signal and a text: half of them drawn from the schema's own pattern
    (all accepted by it), half from the characters quantities are made of."""
    field = draw(st.sampled_from(["evictionHard", "evictionSoft", "evictionMinimumReclaim"]))
    signal = draw(st.sampled_from([s.value for s in Signal]))
    text = draw(
        st.one_of(
            st.from_regex(string_pattern(field, signal), fullmatch=True),
            st.text(alphabet=_QUANTITY_ALPHABET, min_size=1, max_size=8),
        )
    )
    return field, signal, text


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entry=threshold_entries())
@example(entry=("evictionHard", "memory.available", "0.0"))
@example(entry=("evictionHard", "memory.available", "1e-3"))
@example(entry=("evictionMinimumReclaim", "memory.pressure.some.avg10", "100"))
def test_what_the_schema_accepts_the_agent_accepts(entry: tuple[str, str, str]) -> None:
    """Soundness: a threshold ``helm install`` lets through never stops the agent at
    start. (The schema may refuse a rarer form the agent would take, such as ``+5Mi``.)"""
    field, signal, text = entry
    config = _thresholds(field, signal, text)
    if config_errors(config):
        return
    with tempfile.TemporaryDirectory() as scratch:
        assert agent_error(config, Path(scratch)) is None, config
