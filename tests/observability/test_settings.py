"""ObservabilitySettings through the real loader: defaults, file/env/flag, and errors
that name the field, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.agent.config import load_config
from nodeagent.base.errors import ConfigError
from nodeagent.serving.settings import DEFAULT_METRICS_PORT, ListenAddress, parse_listen_address


def test_defaults() -> None:
    config = load_config(environ={})
    assert config.metrics_listen_address == ListenAddress("0.0.0.0", DEFAULT_METRICS_PORT)
    assert config.liveness_timeout == 30.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0.0.0.0:9813", ListenAddress("0.0.0.0", 9813), id="ipv4-any"),
        pytest.param("127.0.0.1:0", ListenAddress("127.0.0.1", 0), id="port-zero"),
        pytest.param(":9813", ListenAddress("0.0.0.0", 9813), id="empty-host"),
        pytest.param("[::]:9813", ListenAddress("::", 9813), id="ipv6-any"),
        pytest.param("[::1]:65535", ListenAddress("::1", 65535), id="ipv6-loopback"),
        pytest.param("localhost:80", ListenAddress("localhost", 80), id="name"),
    ],
)
def test_listen_addresses(text: str, expected: ListenAddress) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("9813", id="no-colon"),
        pytest.param("0.0.0.0:", id="no-port"),
        pytest.param("0.0.0.0:http", id="named-port"),
        pytest.param("0.0.0.0:65536", id="port-too-big"),
        pytest.param("::1:9813", id="ipv6-without-brackets"),
        pytest.param("[nope]:9813", id="bracketed-non-ipv6"),
    ],
)
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen_address(text)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param(30, 30.0, id="int"),
        pytest.param(2.5, 2.5, id="float"),
        pytest.param("45", 45.0, id="numeric-string"),
        pytest.param("30s", 30.0, id="seconds"),
        pytest.param("1m30s", 90.0, id="minutes-seconds"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("1h", 3600.0, id="hours"),
    ],
)
def test_liveness_timeout_takes_seconds_or_a_duration(value: object, seconds: float) -> None:
    assert load_config(environ={}, overrides={"liveness_timeout": value}).liveness_timeout == (
        seconds
    )


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("30 s", id="space"),
        pytest.param("1x", id="unknown-unit"),
        pytest.param("1m30", id="trailing-number"),
        pytest.param(True, id="bool"),
        pytest.param(0, id="zero"),
        pytest.param("-5s", id="negative"),
        # A timeout that never runs out would keep a wedged agent alive forever.
        pytest.param("inf", id="infinite"),
        pytest.param("nan", id="nan"),
    ],
)
def test_bad_liveness_timeouts_are_config_errors(value: object) -> None:
    with pytest.raises(ConfigError, match="livenessTimeout"):
        load_config(environ={}, overrides={"liveness_timeout": value})


def test_file_environment_and_flag(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("metricsAddress: 127.0.0.1:9900\nlivenessTimeout: 1m\n")
    assert load_config(file, environ={}).metrics_address == "127.0.0.1:9900"
    assert load_config(file, environ={}).liveness_timeout == 60.0
    from_env = load_config(file, environ={"NODEAGENT_METRICS_ADDRESS": "[::]:9901"})
    assert from_env.metrics_listen_address == ListenAddress("::", 9901)
    from_flag = load_config(file, environ={}, overrides={"liveness_timeout": "45s"})
    assert from_flag.liveness_timeout == 45.0


@pytest.mark.parametrize(
    ("yaml_text", "field", "value"),
    [
        pytest.param("metricsAddress: '9813'\n", "metricsAddress", "'9813'", id="address"),
        pytest.param("livenessTimeout: 0\n", "livenessTimeout", "0", id="zero-timeout"),
        pytest.param("livenessTimeout: soon\n", "livenessTimeout", "'soon'", id="bad-timeout"),
    ],
)
def test_errors_name_field_and_value(
    tmp_path: Path, yaml_text: str, field: str, value: str
) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(yaml_text)
    with pytest.raises(ConfigError) as raised:
        load_config(file, environ={})
    message = str(raised.value)
    assert repr(field) in message
    assert f"(value {value})" in message
