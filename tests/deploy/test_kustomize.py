"""``kubectl kustomize`` renders the base and every component offline, and what it
renders is as valid as the files it started from (kubernetes-validate --strict), with
each component changing only what it says it changes."""

from __future__ import annotations

import json
import shutil
from itertools import combinations
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from nodeagent.agent.config import NodeAgentConfiguration, load_config
from nodeagent.triggers import psi
from tests.deploy import files
from tests.deploy.test_manifests import CRD_KINDS, CRD_SCHEMAS
from tests.observability import tools

COMPONENTS = sorted(path.name for path in files.COMPONENTS.iterdir() if path.is_dir())


def render(tmp_path: Path, components: tuple[str, ...]) -> list[dict[str, Any]]:
    """Render the base with ``components`` through an overlay, as an operator would."""
    kubectl = tools.require("kubectl")
    tree = tmp_path / "tree"
    shutil.copytree(files.MANIFESTS, tree / "manifests")
    overlay = tree / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["../manifests"],
                "components": [f"../manifests/components/{name}" for name in components],
            }
        )
    )
    done = tools.run([kubectl, "kustomize", str(overlay)], timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def agent(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [daemonset] = by_kind(docs, "DaemonSet")
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = container
    return result


@pytest.mark.parametrize(
    "components",
    [
        pytest.param(combo, id="+".join(combo) or "base")
        for size in (0, 1, len(COMPONENTS))
        for combo in combinations(COMPONENTS, size)
    ],
)
def test_rendered_objects_are_valid(tmp_path: Path, components: tuple[str, ...]) -> None:
    docs = render(tmp_path, components)
    assert docs
    for doc in docs:
        assert doc["metadata"].get("namespace", "nodeagent-system") == "nodeagent-system"
        if doc["kind"] in CRD_KINDS:
            jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])
        else:
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_config_map_carries_the_config_under_a_hashed_name(tmp_path: Path) -> None:
    docs = render(tmp_path, ())
    [config_map] = [d for d in by_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    assert config_map["data"]["config.yaml"] == (files.MANIFESTS / "config.yaml").read_text()
    name = config_map["metadata"]["name"]
    assert name.startswith("nodeagent-config-")
    [daemonset] = by_kind(docs, "DaemonSet")
    volumes = daemonset["spec"]["template"]["spec"]["volumes"]
    assert {"name": "config", "configMap": {"name": name}} in volumes


def test_cgroup_notifications_makes_only_the_cgroup_mount_writable(tmp_path: Path) -> None:
    base = {m["mountPath"]: m for m in agent(render(tmp_path / "a", ()))["volumeMounts"]}
    changed = {
        m["mountPath"]: m
        for m in agent(render(tmp_path / "b", ("cgroup-notifications",)))["volumeMounts"]
    }
    different = {path for path in base if base[path] != changed[path]}
    assert different == {"/host/sys/fs/cgroup"}
    assert changed["/host/sys/fs/cgroup"]["readOnly"] is False


def test_hard_eviction_bypass_turns_the_option_on(tmp_path: Path) -> None:
    env = {e["name"]: e for e in agent(render(tmp_path, ("hard-eviction-bypass",)))["env"]}
    assert env["NODEAGENT_HARD_EVICTION_BYPASSES_PDB"]["value"] == "true"
    assert "NODE_NAME" in env


def test_monitoring_ships_the_dashboard_for_grafanas_sidecar(tmp_path: Path) -> None:
    docs = render(tmp_path, ("monitoring",))
    [dashboard] = [
        d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "nodeagent-dashboard"
    ]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["nodeagent-dashboard.json"]) == json.loads(
        files.DASHBOARD.read_text()
    )
    assert {d["kind"] for d in docs} >= {"Service", "ServiceMonitor", "PrometheusRule"}


def rendered_config(tmp_path: Path, docs: list[dict[str, Any]]) -> NodeAgentConfiguration:
    """The configuration the rendered DaemonSet's agent loads: its ConfigMap's file and
    its container's literal environment (which beats the file)."""
    [config_map] = [d for d in by_kind(docs, "ConfigMap") if "config.yaml" in d["data"]]
    file = tmp_path / "config.yaml"
    file.write_text(config_map["data"]["config.yaml"])
    environ = {e["name"]: e["value"] for e in agent(docs)["env"] if "value" in e}
    return load_config(file, environ=environ)


@pytest.mark.parametrize(
    ("components", "writable"),
    [
        pytest.param((), False, id="base"),
        pytest.param(("cgroup-notifications",), True, id="cgroup-notifications"),
    ],
)
def test_the_agent_arms_cgroup_notifications_only_where_it_can_write(
    tmp_path: Path, components: tuple[str, ...], writable: bool
) -> None:
    """A cgroup v1 memory threshold is armed by writing cgroup.event_control, a cgroup
    PSI trigger by writing memory.pressure: on the read-only host cgroupfs both fail,
    and every cgroup v1 node would report itself degraded (an alert) for a mechanism
    the deployment never allowed. The base turns them off; the component back on."""
    docs = render(tmp_path, components)
    [cgroup_mount] = [
        m for m in agent(docs)["volumeMounts"] if m["mountPath"] == "/host/sys/fs/cgroup"
    ]
    assert cgroup_mount["readOnly"] is not writable
    config = rendered_config(tmp_path, docs)
    assert config.kernel_memcg_notification is writable
    if not writable:
        assert all(spec.scope == psi.SYSTEM_SCOPE for spec in config.psi_triggers)
