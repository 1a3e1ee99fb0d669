"""Configuration loading: precedence, camelCase fields, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.cli import main
from nodeagent.config import load_config
from nodeagent.errors import ConfigError


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
