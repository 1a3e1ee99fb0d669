"""The systemd unit: ``systemd-analyze verify`` prints nothing at all (it reports
unknown keys and bad values only as warnings, exit code 0), the offline security
exposure stays at or below 2.1, and the unit, its environment file and its config
say what the agent needs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodeagent.config import NodeAgentConfiguration, load_config
from tests.deploy import files
from tests.observability import tools

UNIT = files.SYSTEMD / "nodeagent.service"
SECURITY_THRESHOLD = 21
"""``systemd-analyze security`` exposure x 10: the unit scores 2.1 ("OK"); any
weakened setting raises it and fails the test."""


def directives(text: str) -> dict[str, list[str]]:
    """``Key=value`` lines by key, in order (keys may repeat)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def unit() -> dict[str, list[str]]:
    return directives(UNIT.read_text())


def unit_copy(directory: Path, text: str | None = None) -> Path:
    """The unit with ExecStart pointing at an executable stub: verify checks that the
    binary exists, and the agent is not installed at /usr/local/bin here."""
    stub = directory / "nodeagent"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    text = UNIT.read_text() if text is None else text
    copy = directory / "nodeagent.service"
    copy.write_text(
        re.sub(r"^ExecStart=\S+", f"ExecStart={stub}", text, count=1, flags=re.MULTILINE)
    )
    return copy


def verify(path: Path) -> str:
    analyze = tools.require("systemd-analyze")
    done = tools.run([analyze, "verify", str(path)])
    return (done.stdout + done.stderr).strip() + ("" if done.returncode == 0 else " (rc != 0)")


def test_verify_prints_nothing(tmp_path: Path) -> None:
    assert verify(unit_copy(tmp_path)) == ""


def test_verify_output_catches_a_misspelt_key(tmp_path: Path) -> None:
    typo = UNIT.read_text().replace("NoNewPrivileges=", "NoNewPrivilege=")
    assert "Unknown key" in verify(unit_copy(tmp_path, typo))


def test_security_exposure_is_at_most_the_threshold(tmp_path: Path) -> None:
    analyze = tools.require("systemd-analyze")
    copy = unit_copy(tmp_path)
    done = tools.run(
        [analyze, "security", "--offline=true", f"--threshold={SECURITY_THRESHOLD}", str(copy)]
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    weaker = tmp_path / "weaker"
    weaker.mkdir()
    text = UNIT.read_text().replace("ProtectHome=yes", "ProtectHome=no")
    done = tools.run(
        [
            analyze,
            "security",
            "--offline=true",
            f"--threshold={SECURITY_THRESHOLD}",
            str(unit_copy(weaker, text)),
        ]
    )
    assert done.returncode != 0


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("Type", "notify", id="notify"),
        pytest.param("NotifyAccess", "main", id="notify-access"),
        pytest.param("Restart", "always", id="restart"),
        pytest.param("ProtectSystem", "strict", id="protect-system"),
        pytest.param("ProtectHome", "yes", id="protect-home"),
        pytest.param("NoNewPrivileges", "yes", id="no-new-privileges"),
        pytest.param("EnvironmentFile", "-/etc/nodeagent/nodeagent.env", id="environment-file"),
        pytest.param("CapabilityBoundingSet", "CAP_DAC_READ_SEARCH CAP_SYS_RESOURCE", id="caps"),
    ],
)
def test_unit_settings(key: str, expected: str) -> None:
    assert unit()[key] == [expected]


def test_protected_from_the_oom_killer_and_from_reclaim() -> None:
    settings = unit()
    assert int(settings["OOMScoreAdjust"][0]) <= -900
    assert settings["MemoryMin"][0].endswith("M")
    assert int(settings["MemoryMin"][0][:-1]) > 0


def test_watchdog_is_fed_by_the_loop_within_its_timeout() -> None:
    settings = unit()
    watchdog = int(settings["WatchdogSec"][0].removesuffix("s"))
    config = load_config(files.SYSTEMD / "config.yaml", environ={})
    # One ping per cycle at most every WatchdogSec/2: the poll interval must fit.
    assert config.poll_interval < watchdog / 2
    assert config.liveness_timeout <= watchdog


def test_exec_start_runs_the_agent_with_the_shipped_config() -> None:
    [exec_start] = unit()["ExecStart"]
    binary, command, *flags = exec_start.split()
    assert (Path(binary).name, command) == ("nodeagent", "run")
    assert flags == ["--config=/etc/nodeagent/config.yaml"]
    config = load_config(files.SYSTEMD / "config.yaml", environ={})
    assert str(config.host_root) == "/"


def test_environment_file_names_real_settings() -> None:
    fields = {f"NODEAGENT_{name.upper()}" for name in NodeAgentConfiguration.model_fields}
    text = (files.SYSTEMD / "nodeagent.env").read_text()
    names = re.findall(r"^#?\s*([A-Z_][A-Z0-9_]*)=", text, flags=re.MULTILINE)
    assert names
    for name in names:
        assert name in fields | {"NODE_NAME", "KUBECONFIG"}, name
