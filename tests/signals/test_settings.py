"""The signal source settings: how an operator spells them, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.agent.config import load_config, snake_to_camel
from nodeagent.base.errors import ConfigError


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param("30s", 30.0, id="seconds"),
        pytest.param("1m30s", 90.0, id="compound"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("2h", 7200.0, id="hours"),
        pytest.param("45", 45.0, id="bare-number"),
        pytest.param("0", 0.0, id="disabled"),
    ],
)
def test_scan_interval_durations(value: str, seconds: float) -> None:
    config = load_config(overrides={"pod_storage_scan_interval": value}, environ={})
    assert config.pod_storage_scan_interval == seconds


@pytest.mark.parametrize("value", ["30 s", "soon", "-5s", "-1", "1d"])
def test_scan_interval_rejects_nonsense(value: str) -> None:
    with pytest.raises(ConfigError, match="podStorageScanInterval"):
        load_config(overrides={"pod_storage_scan_interval": value}, environ={})


def test_cgroups_are_normalised_and_paths_absolute(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("nodeCgroup: mynode.slice/\nkubepodsCgroup: /mynode.slice//kubepods\n")
    config = load_config(file, environ={})
    assert config.node_cgroup == "/mynode.slice"
    assert config.kubepods_cgroup == "/mynode.slice/kubepods"


@pytest.mark.parametrize("field", ["kubepods_cgroup", "containerfs_path"])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_optional_field_means_unset(field: str, value: str) -> None:
    variable = f"NODEAGENT_{field.upper()}"
    assert getattr(load_config(environ={variable: value}), field) is None
    assert getattr(load_config(overrides={field: value}, environ={}), field) is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        pytest.param("node_cgroup", "/../etc", r"\.\.", id="escaping-cgroup"),
        pytest.param("kubepods_cgroup", "/", "root cgroup", id="kubepods-at-the-root"),
        pytest.param("kubepods_cgroup", "/./", "root cgroup", id="kubepods-at-the-root-untidy"),
        pytest.param("nodefs_path", "var/lib/kubelet", "absolute", id="relative-path"),
        pytest.param("host_root", "host", "absolute", id="relative-host-root"),
    ],
)
def test_bad_paths_are_refused_with_the_field_named(field: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        load_config(overrides={field: value}, environ={})
    assert snake_to_camel(field) in str(raised.value)
