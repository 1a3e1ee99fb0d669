"""Trigger configuration: defaults, the three sources, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.agent.config import load_config
from nodeagent.base.errors import ConfigError
from nodeagent.triggers import psi


def test_defaults() -> None:
    config = load_config(environ={})
    assert config.poll_interval == 1.0
    assert config.filesystem_poll_interval == 0.5
    assert config.kernel_memcg_notification
    assert config.memory_events_notification
    assert config.psi_kernel_triggers
    assert [str(spec) for spec in config.psi_triggers] == [
        "memory some 150ms 1s",
        "io full 150ms 1s",
    ]
    assert config.memory_threshold_hysteresis == 16 << 20


def test_file_fields_are_camel_case(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(
        "pollInterval: 10s\n"
        "filesystemPollInterval: 250ms\n"
        "kernelMemcgNotification: false\n"
        "psiTriggers: ['node/memory full 100ms 2s']\n"
        "memoryThresholdHysteresis: 64Mi\n"
    )
    config = load_config(file, environ={})
    assert config.poll_interval == 10.0
    assert config.filesystem_poll_interval == 0.25
    assert not config.kernel_memcg_notification
    assert config.psi_triggers == (
        psi.TriggerSpec(psi.Resource.MEMORY, psi.Line.FULL, 100_000, 2_000_000, "node"),
    )
    assert config.memory_threshold_hysteresis == 64 << 20


@pytest.mark.parametrize(
    ("environ", "overrides", "expected"),
    [
        pytest.param(
            {"NODEAGENT_PSI_TRIGGERS": "memory some 150ms 1s, io full 1s 2s"},
            {},
            ["memory some 150ms 1s", "io full 1s 2s"],
            id="env-comma-separated",
        ),
        pytest.param(
            {"NODEAGENT_PSI_TRIGGERS": '["cpu some 1s 2s"]'}, {}, ["cpu some 1s 2s"], id="env-json"
        ),
        pytest.param({}, {"psi_triggers": ""}, [], id="flag-empty-disables"),
        pytest.param(
            {"NODEAGENT_PSI_TRIGGERS": "cpu some 1s 2s"},
            {"psi_triggers": "io some 1s 2s"},
            ["io some 1s 2s"],
            id="flag-beats-env",
        ),
    ],
)
def test_psi_triggers_from_environment_and_flags(
    environ: dict[str, str], overrides: dict[str, str], expected: list[str]
) -> None:
    config = load_config(environ=environ, overrides=overrides)
    assert [str(spec) for spec in config.psi_triggers] == expected
    assert config.model_dump()["psi_triggers"] == expected


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        pytest.param("poll_interval", "1 sec", "duration", id="bad-duration"),
        pytest.param("poll_interval", "0s", "above 0s", id="zero-interval"),
        pytest.param("poll_interval", "2h", "at most 1h", id="interval-too-long"),
        pytest.param("filesystem_poll_interval", "-1s", "duration", id="negative-interval"),
        pytest.param("psi_triggers", "memory sum 1s 2s", "'some' or 'full'", id="bad-line"),
        pytest.param("psi_triggers", "memory some 1s 11s", "10s", id="window-too-long"),
        pytest.param("memory_threshold_hysteresis", "16MB?", "quantity", id="bad-quantity"),
        pytest.param("memory_threshold_hysteresis", "0.5", "whole", id="fractional-bytes"),
        pytest.param("memory_threshold_hysteresis", "Infinity", "quantity", id="infinite-bytes"),
        pytest.param("memory_threshold_hysteresis", " 16Mi", "quantity", id="padded-quantity"),
    ],
)
def test_errors_name_field_and_value(field: str, value: str, complaint: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(environ={}, overrides={field: value})
    message = str(raised.value)
    camel = field.split("_", maxsplit=1)[0] + "".join(
        part.capitalize() for part in field.split("_")[1:]
    )
    assert repr(camel) in message
    assert repr(value) in message
    assert complaint in message
