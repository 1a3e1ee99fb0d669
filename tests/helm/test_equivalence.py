"""The chart renders the objects the kustomize trees render: for the base, each
component, all of them, the scheduler and the extender, ``helm template`` with the
values that mean the same choice gives, object for object and field for field, what
``kubectl kustomize`` gives, once the differences a Helm release must have are taken
out. Those are exactly, and only:

* Helm's labels (``helm.sh/chart``, ``app.kubernetes.io/managed-by``, ``/instance``,
  ``/version``), which the chart adds to every object and ``instance`` to selectors;
* the generated ConfigMaps' names: kustomize appends a hash of the content, the chart
  keeps the name and puts the content's checksum on the pod template instead (both make
  a changed configuration roll the pods; tests/controlplane/test_helm.py watches it);
* the agent's configuration, compared as the agent loads it (file plus its container's
  literal ``NODEAGENT_*`` variables, ``nodeagent.agent.config.load_config``): kustomize's
  components set variables, the chart writes the same fields into the file;
* the labels of those configuration ConfigMaps (kustomize's generator sets none, the
  chart labels them like every other object);
* the release's Namespace, which Helm needs before the release and so never renders;
* a namespace on a cluster-scoped object (kustomize sets one on kinds it does not know
  to be cluster-scoped, the ValidatingAdmissionPolicy's; the API server ignores it).

Anything else that differs (a field, a rule, an expression, an alert) fails here with
the two objects' diff: the two sources cannot drift."""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.agent.config import load_config
from tests.controlplane import objects as o
from tests.deploy.test_kustomize import COMPONENTS, render
from tests.helm import chart

HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    }
)
CHECKSUM = "checksum/config"
_KUSTOMIZE_HASH = re.compile(r"(?P<name>.+)-[a-z0-9]{10}")
WORKLOADS = frozenset({"DaemonSet", "Deployment"})
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)

Key = tuple[str, str, str]

COMPONENT_VALUES: dict[str, dict[str, Any]] = {
    "cgroup-notifications": {"agent": {"cgroupNotifications": True}},
    "hard-eviction-bypass": {"config": {"hardEvictionBypassesPdb": True}},
    "monitoring": {
        "monitoring": {
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True},
            "dashboard": {"enabled": True},
        }
    },
}
"""The chart's values for each optional kustomize component (node-confinement is in the
base, and on by default in the chart too)."""
OPTIONAL = sorted(COMPONENT_VALUES)
assert set(OPTIONAL) == set(COMPONENTS) - {"node-confinement"}


def merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(result.get(key), dict):
                result[key] = merged(result[key], value)
            else:
                result[key] = copy.deepcopy(value)
    return result


def _without_helm_labels(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_helm_labels(v) for k, v in value.items() if k not in HELM_LABELS}
    if isinstance(value, list):
        return [_without_helm_labels(item) for item in value]
    return value


def _unhashed(documents: list[dict[str, Any]]) -> None:
    """Kustomize's generated ConfigMaps, and the volumes naming them, without the hash."""
    renamed: dict[str, str] = {}
    for doc in documents:
        match = _KUSTOMIZE_HASH.fullmatch(doc["metadata"]["name"])
        if doc["kind"] == "ConfigMap" and match:
            renamed[doc["metadata"]["name"]] = match["name"]
            doc["metadata"]["name"] = match["name"]
    for doc in documents:
        if doc["kind"] in WORKLOADS:
            for volume in doc["spec"]["template"]["spec"].get("volumes", ()):
                config_map = volume.get("configMap")
                if config_map and config_map["name"] in renamed:
                    config_map["name"] = renamed[config_map["name"]]


def _without_checksums(documents: list[dict[str, Any]]) -> None:
    """The chart's config checksums, asserting each workload with a config has one."""
    for doc in documents:
        if doc["kind"] not in WORKLOADS:
            continue
        metadata = doc["spec"]["template"]["metadata"]
        volumes = doc["spec"]["template"]["spec"].get("volumes", ())
        if any(v["name"] == "config" and "configMap" in v for v in volumes):
            annotations = metadata["annotations"]
            assert re.fullmatch(r"[0-9a-f]{64}", annotations.pop(CHECKSUM)), doc["metadata"]
            if not annotations:
                del metadata["annotations"]


def _config_maps_mounted_as_config(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = {
        volume["configMap"]["name"]
        for doc in documents
        if doc["kind"] in WORKLOADS
        for volume in doc["spec"]["template"]["spec"].get("volumes", ())
        if volume["name"] == "config" and "configMap" in volume
    }
    return [d for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"] in names]


def _effective_agent_config(documents: list[dict[str, Any]], scratch: Path) -> None:
    """The agent's ConfigMap holds the configuration the agent loads, and its container
    keeps only the variables that are not configuration fields."""
    for daemonset in (d for d in documents if d["kind"] == "DaemonSet"):
        [container] = daemonset["spec"]["template"]["spec"]["containers"]
        literal = {e["name"]: e["value"] for e in container.get("env", ()) if "value" in e}
        container["env"] = [
            e for e in container.get("env", ()) if not e["name"].startswith("NODEAGENT_")
        ]
        [volume] = [
            v for v in daemonset["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"
        ]
        [config_map] = [
            d
            for d in documents
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"]
        ]
        file = scratch / "config.yaml"
        file.write_text(config_map["data"]["config.yaml"])
        loaded = load_config(file, environ=literal)
        config_map["data"]["config.yaml"] = loaded.model_dump(mode="json")


def _parsed_yaml_data(documents: list[dict[str, Any]]) -> None:
    """A ConfigMap's YAML files compared as data (the chart re-serializes them)."""
    for doc in documents:
        if doc["kind"] == "ConfigMap":
            for key, text in doc.get("data", {}).items():
                if key.endswith(".yaml") and isinstance(text, str):
                    doc["data"][key] = yaml.safe_load(text)


def comparable(
    documents: Sequence[dict[str, Any]], scratch: Path, *, helm: bool
) -> dict[Key, dict[str, Any]]:
    docs: list[dict[str, Any]] = [_without_helm_labels(copy.deepcopy(d)) for d in documents]
    if helm:
        _without_checksums(docs)
    else:
        _unhashed(docs)
        docs = [
            d
            for d in docs
            if not (d["kind"] == "Namespace" and d["metadata"]["name"] == chart.NAMESPACE)
        ]
    for config_map in _config_maps_mounted_as_config(docs):
        config_map["metadata"].pop("labels", None)
    for doc in docs:
        if doc["kind"] in CLUSTER_SCOPED:
            doc["metadata"].pop("namespace", None)
    _effective_agent_config(docs, scratch)
    _parsed_yaml_data(docs)
    by_key: dict[Key, dict[str, Any]] = {}
    for doc in docs:
        key = (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
        assert key not in by_key, f"{key} rendered twice"
        by_key[key] = doc
    return by_key


def differences(
    kustomized: Mapping[Key, dict[str, Any]], helmed: Mapping[Key, dict[str, Any]]
) -> list[str]:
    problems = [f"only kustomize renders {key}" for key in kustomized.keys() - helmed.keys()]
    problems += [f"only the chart renders {key}" for key in helmed.keys() - kustomized.keys()]
    for key in sorted(kustomized.keys() & helmed.keys()):
        if kustomized[key] != helmed[key]:
            diff = difflib.unified_diff(
                yaml.safe_dump(kustomized[key]).splitlines(),
                yaml.safe_dump(helmed[key]).splitlines(),
                "kustomize",
                "helm",
                lineterm="",
            )
            problems.append(f"{key} differs:\n" + "\n".join(diff))
    return problems


def kustomize_trees(tmp_path: Path, components: Iterable[str], *trees: str) -> list[dict[str, Any]]:
    documents = render(tmp_path / "kustomize", tuple(components))
    for tree in trees:
        documents += o.kustomize(o.MANIFESTS / tree)
    return documents


CASES = [
    pytest.param((), (), {}, id="base"),
    *(pytest.param((name,), (), COMPONENT_VALUES[name], id=name) for name in OPTIONAL),
    pytest.param(tuple(OPTIONAL), (), merged(*COMPONENT_VALUES.values()), id="all-components"),
    pytest.param((), ("scheduler",), {"scheduler": {"enabled": True}}, id="scheduler"),
    pytest.param((), ("extender",), {"extender": {"enabled": True}}, id="extender"),
    pytest.param(
        tuple(OPTIONAL),
        ("scheduler", "extender"),
        merged(
            *COMPONENT_VALUES.values(),
            {"scheduler": {"enabled": True}, "extender": {"enabled": True}},
        ),
        id="everything",
    ),
]


@pytest.mark.parametrize(("components", "trees", "values"), CASES)
def test_the_chart_renders_what_kustomize_renders(
    tmp_path: Path,
    components: tuple[str, ...],
    trees: tuple[str, ...],
    values: dict[str, Any],
) -> None:
    helmed = chart.render(tmp_path, values)
    kustomized = kustomize_trees(tmp_path, components, *trees)
    problems = differences(
        comparable(kustomized, tmp_path, helm=False), comparable(helmed, tmp_path, helm=True)
    )
    assert not problems, "\n\n".join(problems)


def test_the_comparison_sees_a_changed_field(tmp_path: Path) -> None:
    """The comparison is not blind: one changed value (the memory request) is caught and
    named in the diff."""
    helmed = chart.render(
        tmp_path, {"agent": {"resources": {"requests": {"cpu": "50m", "memory": "191Mi"}}}}
    )
    problems = differences(
        comparable(kustomize_trees(tmp_path, ()), tmp_path, helm=False),
        comparable(helmed, tmp_path, helm=True),
    )
    assert len(problems) == 1, problems
    assert "('DaemonSet', 'nodeagent-system', 'nodeagent') differs" in problems[0]
    assert "\n+            memory: 191Mi" in problems[0]


def test_the_comparison_sees_a_changed_threshold(tmp_path: Path) -> None:
    """The configurations are compared as loaded: a threshold written differently but
    meaning the same passes, a different one does not."""
    kustomized = comparable(kustomize_trees(tmp_path, ()), tmp_path, helm=False)
    same = chart.render(tmp_path, {"config": {"pollInterval": 1, "livenessTimeout": "0.5m"}})
    assert not differences(kustomized, comparable(same, tmp_path, helm=True))
    other = chart.render(tmp_path, {"config": {"evictionHard": {"memory.available": "301Mi"}}})
    [problem] = differences(kustomized, comparable(other, tmp_path, helm=True))
    assert "('ConfigMap', 'nodeagent-system', 'nodeagent-config') differs" in problem
    assert "301Mi" in problem
