"""Configuration loading: precedence, camelCase fields, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.agent.config import camel_to_snake, config_from_args, load_config
from nodeagent.base.errors import ConfigError
from nodeagent.cli import build_parser, main


def test_precedence_is_flag_over_environment_over_file(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("hostRoot: /from-file\nnodeCgroup: /file.slice\nkubepodsCgroup: /kp\n")
    config = load_config(
        file,
        environ={"NODEAGENT_NODE_CGROUP": "/env.slice", "NODEAGENT_HOST_ROOT": "/from-env"},
        overrides={"host_root": "/from-flag"},
    )
    assert config.host_root == Path("/from-flag")
    assert config.node_cgroup == "/env.slice"
    assert config.kubepods_cgroup == "/kp"


def test_unknown_field_is_named_with_the_allowed_ones(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("hostRot: /host\n")
    with pytest.raises(ConfigError) as raised:
        load_config(file, environ={})
    message = str(raised.value)
    assert "'hostRot'" in message
    assert "'/host'" in message
    assert "hostRoot" in message


def test_config_error_exits_with_code_2_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("- not\n- a mapping\n")
    assert main(["signals", "--config", str(file)]) == 2
    assert "expected a mapping" in capsys.readouterr().err


SIGNAL_SOURCE_FIELDS = [
    pytest.param("hostRoot", "/host", Path("/host"), id="hostRoot"),
    pytest.param("nodeCgroup", "mynode.slice", "/mynode.slice", id="nodeCgroup"),
    pytest.param("kubepodsCgroup", "/mynode.slice/kubepods", "/mynode.slice/kubepods", id="kp"),
    pytest.param("nodefsPath", "/data/kubelet", Path("/data/kubelet"), id="nodefsPath"),
    pytest.param("imagefsPath", "/var/lib/containers", Path("/var/lib/containers"), id="imagefs"),
    pytest.param("containerfsPath", "/data/layers", Path("/data/layers"), id="containerfsPath"),
]
"""The fields issue 2 names, as an operator writes them, and what the agent reads."""


@pytest.mark.parametrize(("camel", "text", "expected"), SIGNAL_SOURCE_FIELDS)
def test_every_signal_source_field_is_a_yaml_key_a_flag_and_a_variable(
    tmp_path: Path, camel: str, text: str, expected: object
) -> None:
    snake = camel_to_snake(camel)
    file = tmp_path / "c.yaml"
    file.write_text(f"{camel}: {text}\n")
    from_file = load_config(file, environ={})
    from_env = load_config(environ={f"NODEAGENT_{snake.upper()}": text})
    flag = "--" + snake.replace("_", "-")
    from_flag = config_from_args(build_parser().parse_args(["signals", flag, text]))
    assert getattr(from_file, snake) == expected
    assert getattr(from_env, snake) == expected
    assert getattr(from_flag, snake) == expected


def test_a_field_given_twice_is_an_error_not_a_silent_overwrite(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("evictionHard:\n  memory.available: 1Gi\n  memory.available: 500Mi\n")
    with pytest.raises(ConfigError) as raised:
        load_config(file, environ={})
    assert "'memory.available' is given twice" in str(raised.value)


def test_a_config_file_that_is_not_utf8_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "c.yaml"
    file.write_bytes(b"hostRoot: /h\xff\xfe\n")
    assert main(["signals", "--config", str(file)]) == 2
    assert "not UTF-8" in capsys.readouterr().err
