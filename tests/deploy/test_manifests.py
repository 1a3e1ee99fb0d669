"""The Kubernetes manifests: schema-valid (kubernetes-validate --strict for built-in
kinds, a minimal strict schema for the Prometheus Operator's CRDs), wired together
(labels, ports, names), and holding the DaemonSet's promises (read-only host, dropped
capabilities, probes, NODE_NAME, critical priority, tolerations, the agent's own flags
and config)."""

from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from nodeagent.agent.config import add_config_flags, config_from_args, load_config
from nodeagent.k8s.pressure import DEFAULT_TAINT_KEYS, Taint
from nodeagent.serving.settings import MetricsAuth, parse_listen_address
from tests.deploy import files

KUBERNETES_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
"""The oldest Kubernetes the manifests support (``recursiveReadOnly`` came in 1.30) and
the newest schema kubernetes-validate ships."""

CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}

_DURATION = r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _LABELS},
}
_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": _LABELS, "matchExpressions": {"type": "array"}},
}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    # The subset of monitoring.coreos.com/v1 these manifests use, strict like
    # kubernetes-validate's: an unknown or misspelt field is an error.
    "ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "additionalProperties": False,
                "properties": {
                    "jobLabel": {"type": "string"},
                    "selector": _SELECTOR,
                    "namespaceSelector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string", "pattern": "^/"},
                                "scheme": {"enum": ["http", "https"]},
                                "bearerTokenFile": {"type": "string"},
                                "tlsConfig": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "insecureSkipVerify": {"type": "boolean"},
                                        "serverName": {"type": "string"},
                                        "ca": {"type": "object"},
                                        "caFile": {"type": "string"},
                                    },
                                },
                                "interval": {"type": "string", "pattern": _DURATION},
                                "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                                "relabelings": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "properties": {
                                            "sourceLabels": {
                                                "type": "array",
                                                "items": {
                                                    "type": "string",
                                                    "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$",
                                                },
                                            },
                                            "targetLabel": {"type": "string"},
                                            "regex": {"type": "string"},
                                            "replacement": {"type": "string"},
                                            "action": {
                                                "enum": [
                                                    "replace",
                                                    "keep",
                                                    "drop",
                                                    "labelmap",
                                                    "labeldrop",
                                                    "labelkeep",
                                                ]
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "required": ["groups"],
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "interval": {"type": "string", "pattern": _DURATION},
                                "rules": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["alert", "expr"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "alert": {"type": "string"},
                                            "expr": {"type": "string"},
                                            "for": {"type": "string", "pattern": _DURATION},
                                            "labels": _LABELS,
                                            "annotations": _LABELS,
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}


def _object_params() -> list[Any]:
    return [
        pytest.param(doc, id=f"{path.relative_to(files.MANIFESTS)}:{doc['kind']}")
        for path in files.object_files()
        for doc in files.documents(path)
    ]


# --- schemas ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("doc", _object_params())
def test_every_object_is_valid(doc: dict[str, Any], version: str) -> None:
    if doc["kind"] in CRD_KINDS:
        # No schema ships for CRDs: their strict subset is checked instead.
        jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])
    else:
        kubernetes_validate.validate(doc, version, strict=True)


def test_strict_validation_catches_a_misspelt_field() -> None:
    daemonset = copy.deepcopy(files.one("DaemonSet"))
    context = daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    context["readOnlyRootFileSystem"] = context.pop("readOnlyRootFilesystem")
    with pytest.raises(kubernetes_validate.ValidationError, match="readOnlyRootFileSystem"):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSIONS[-1], strict=True)


def test_crd_schema_catches_a_misspelt_field() -> None:
    monitor = copy.deepcopy(files.one("ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["scrapeInterval"] = "15s"
    with pytest.raises(jsonschema.ValidationError, match="scrapeInterval"):
        jsonschema.validate(monitor, CRD_SCHEMAS["ServiceMonitor"])


def test_every_object_is_in_a_kustomization() -> None:
    listed: set[Path] = set()
    for kustomization in files.MANIFESTS.rglob("kustomization.yaml"):
        spec = yaml.safe_load(kustomization.read_text())
        listed.update((kustomization.parent / name).resolve() for name in spec.get("resources", []))
    assert set(files.object_files()) == listed


# --- the DaemonSet ------------------------------------------------------------------------


def daemonset_pod() -> dict[str, Any]:
    pod: dict[str, Any] = files.one("DaemonSet", "nodeagent")["spec"]["template"]["spec"]
    return pod


def test_critical_priority_and_only_the_host_pid_namespace() -> None:
    pod = daemonset_pod()
    assert pod["priorityClassName"] == "system-node-critical"
    # test_host_mounts.py shows the writable-layer reader needs the host's PIDs.
    assert pod["hostPID"] is True
    assert pod["hostNetwork"] is False
    assert "hostIPC" not in pod
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}


def tolerated(tolerations: list[dict[str, str]], taint: Taint) -> bool:
    """Kubernetes' toleration matching (v1 ToleratesTaint)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.effect:
            continue
        key = toleration.get("key", "")
        if key and key != taint.key:
            continue
        if toleration.get("operator", "Equal") == "Exists":
            return True
        if key and toleration.get("value", "") == taint.value:
            return True
    return False


@pytest.mark.parametrize(
    "taint",
    [
        *(
            pytest.param(Taint(key, effect), id=f"{key}:{effect}")
            for key in DEFAULT_TAINT_KEYS.values()
            for effect in ("NoSchedule", "PreferNoSchedule")
        ),
        pytest.param(Taint("node.kubernetes.io/memory-pressure", "NoSchedule"), id="kubelet"),
        pytest.param(Taint("node.kubernetes.io/unreachable", "NoExecute"), id="noexecute"),
        pytest.param(Taint("dedicated", "NoSchedule", "gpu"), id="custom-with-value"),
        pytest.param(Taint("node-role.kubernetes.io/control-plane", "NoSchedule"), id="cp"),
    ],
)
def test_the_agent_tolerates_every_taint(taint: Taint) -> None:
    assert tolerated(daemonset_pod()["tolerations"], taint)


def test_container_security() -> None:
    context = files.agent_container()["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["privileged"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert set(context["capabilities"]["add"]) == {"DAC_READ_SEARCH", "SYS_RESOURCE"}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert daemonset_pod()["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_each_added_capability_and_root_are_explained_in_the_docs() -> None:
    operations = (files.REPO / "docs" / "operations.md").read_text()
    for capability in files.agent_container()["securityContext"]["capabilities"]["add"]:
        assert f"CAP_{capability}" in operations
    assert "runAsUser: 0" in operations
    assert "hostPID" in operations


def mounts_by_volume() -> dict[str, dict[str, Any]]:
    return {mount["name"]: mount for mount in files.agent_container()["volumeMounts"]}


def host_root_arg() -> str:
    [host_root] = [
        str(arg).split("=", 1)[1]
        for arg in files.agent_container()["args"]
        if str(arg).startswith("--host-root=")
    ]
    return host_root


def test_host_paths_are_read_only_under_the_host_root() -> None:
    host_root = host_root_arg()
    mounts = mounts_by_volume()
    host_paths = {}
    for volume in daemonset_pod()["volumes"]:
        if "hostPath" not in volume:
            continue
        path = volume["hostPath"]["path"]
        mount = mounts[volume["name"]]
        host_paths[path] = mount
        assert mount["mountPath"] == host_root + path
        assert mount["readOnly"] is True, f"{path} must be mounted read-only"
    assert set(host_paths) == {
        "/proc",
        "/sys/fs/cgroup",
        "/var/lib/kubelet",
        "/var/lib/containerd",
        "/var/log/pods",
        "/run/containerd",
    }
    # Mounts the kubelet and the runtime add later must be seen, never pinned; the
    # others are read-only all the way down (submounts too) where the runtime can.
    for path, mount in host_paths.items():
        if path in ("/var/lib/kubelet", "/var/lib/containerd"):
            assert mount["mountPropagation"] == "HostToContainer"
            assert "recursiveReadOnly" not in mount  # needs propagation None
        else:
            assert mount["recursiveReadOnly"] == "IfPossible"


def test_the_only_writable_mount_is_a_small_memory_tmp() -> None:
    mounts = mounts_by_volume()
    writable = [name for name, mount in mounts.items() if not mount.get("readOnly")]
    assert writable == ["tmp"]
    [tmp] = [v for v in daemonset_pod()["volumes"] if v["name"] == "tmp"]
    assert tmp["emptyDir"]["medium"] == "Memory"
    assert files.quantity(tmp["emptyDir"]["sizeLimit"]) <= 16 * 2**20


def test_node_name_comes_from_the_downward_api() -> None:
    env = {item["name"]: item for item in files.agent_container()["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_args_are_the_agents_own_flags_and_load_the_shipped_config() -> None:
    container = files.agent_container()
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    args, unknown = parser.parse_known_args(container["args"])
    assert unknown == []
    config_path = args.config
    mount = next(
        m for m in container["volumeMounts"] if str(config_path).startswith(m["mountPath"] + "/")
    )
    # Load it from the repository, where the ConfigMap is generated from.
    args.config = files.MANIFESTS / config_path.relative_to(mount["mountPath"])
    config = config_from_args(args)
    assert str(config.host_root) == host_root_arg()
    [volume] = [v for v in daemonset_pod()["volumes"] if v["name"] == mount["name"]]
    kustomization = yaml.safe_load((files.MANIFESTS / "kustomization.yaml").read_text())
    [generator] = kustomization["configMapGenerator"]
    assert generator["name"] == volume["configMap"]["name"]
    assert generator["files"] == [config_path.name]


def test_probes_and_port_match_the_configured_metrics_address() -> None:
    container = files.agent_container()
    config = load_config(files.MANIFESTS / "config.yaml", environ={})
    [port] = container["ports"]
    assert port["containerPort"] == parse_listen_address(config.metrics_address).port
    # HTTPS, since the shipped config serves metrics with metricsAuth kubernetes
    assert config.metrics_auth is MetricsAuth.KUBERNETES
    probe = {"port": port["name"], "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", **probe}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", **probe}
    # The kubelet restarts a wedged agent only after the agent itself says so.
    liveness = container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= config.liveness_timeout


def test_resources_are_bounded_and_memory_is_guaranteed() -> None:
    resources = files.agent_container()["resources"]
    for resource in ("cpu", "memory"):
        request = files.quantity(resources["requests"][resource])
        limit = files.quantity(resources["limits"][resource])
        assert 0 < request <= limit
    assert resources["requests"]["memory"] == resources["limits"]["memory"]


def test_rolling_update_never_runs_two_agents_on_a_node() -> None:
    spec = files.one("DaemonSet")["spec"]
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    assert spec["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0
    assert spec["minReadySeconds"] > 0


def test_namespace_admits_the_agent() -> None:
    namespace = files.one("Namespace", "nodeagent-system")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    quota = files.one("ResourceQuota")
    [expression] = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert expression["values"] == [daemonset_pod()["priorityClassName"]]


# --- RBAC ---------------------------------------------------------------------------------


def permissions(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def documented_permissions() -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """docs/kubernetes.md's RBAC table, "exactly what the code calls": the permissions
    the agent always needs, and those only an option needs (rows saying "only with")."""
    text = (files.REPO / "docs" / "kubernetes.md").read_text()
    section = text.split("## RBAC", 1)[1].split("\n## ", 1)[0]
    always: set[tuple[str, str, str]] = set()
    optional: set[tuple[str, str, str]] = set()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        group, resource = cells[0].strip('`"'), cells[1].strip("`")
        verbs = re.findall(r"`([a-z]+)`", cells[2])
        target = optional if "only with" in cells[3] else always
        target.update((group, resource, verb) for verb in verbs)
    assert always, "no RBAC table found in docs/kubernetes.md"
    return always, optional


def test_cluster_role_is_exactly_what_the_agent_calls() -> None:
    always, optional = documented_permissions()
    assert permissions(files.one("ClusterRole", "nodeagent")) == always
    assert permissions(files.one("ClusterRole", "nodeagent-hard-eviction-bypass")) == optional


def test_operations_guide_lists_the_same_permissions() -> None:
    always, optional = documented_permissions()
    text = (files.REPO / "docs" / "operations.md").read_text()
    section = text.split("### RBAC", 1)[1].split("\n## ", 1)[0]
    listed: set[tuple[str, str, str]] = set()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            listed.update(("", cells[0].strip("`"), verb.strip()) for verb in cells[1].split(","))
    assert listed == always | optional


@pytest.mark.parametrize(
    ("binding", "role"),
    [
        pytest.param("nodeagent", "nodeagent", id="base"),
        pytest.param(
            "nodeagent-hard-eviction-bypass", "nodeagent-hard-eviction-bypass", id="bypass"
        ),
    ],
)
def test_bindings_grant_the_role_to_the_agents_account(binding: str, role: str) -> None:
    bound = files.one("ClusterRoleBinding", binding)
    account = files.one("ServiceAccount", "nodeagent")
    assert bound["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": files.one("ClusterRole", role)["metadata"]["name"],
    }
    assert bound["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]
    assert daemonset_pod()["serviceAccountName"] == account["metadata"]["name"]


def test_bypass_component_turns_the_option_on() -> None:
    component = yaml.safe_load(
        (files.COMPONENTS / "hard-eviction-bypass" / "kustomization.yaml").read_text()
    )
    [patch] = component["patches"]
    [operation] = yaml.safe_load(patch["patch"])
    variable = operation["value"]
    config = load_config(environ={variable["name"]: variable["value"]})
    assert config.hard_eviction_bypasses_pdb is True


# --- monitoring wiring --------------------------------------------------------------------


def test_service_and_service_monitor_reach_the_agents_port() -> None:
    service = files.one("Service", "nodeagent")
    monitor = files.one("ServiceMonitor", "nodeagent")
    pod_labels = files.one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    [service_port] = service["spec"]["ports"]
    [container_port] = files.agent_container()["ports"]
    assert service_port["targetPort"] == container_port["name"]
    assert service_port["port"] == container_port["containerPort"]
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service_port["name"]
    assert endpoint["path"] == "/metrics"
    # HTTPS with Prometheus' own service-account token (the agent's metricsAuth kubernetes)
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    seconds = {m: int(re.sub(r"\D", "", endpoint[m])) for m in ("interval", "scrapeTimeout")}
    assert seconds["scrapeTimeout"] <= seconds["interval"]
    assert {"node"} <= {r["targetLabel"] for r in endpoint["relabelings"]}


# --- secure serving (docs/security.md) ----------------------------------------------------


def test_the_metrics_reader_role_grants_get_on_metrics_and_nothing_else() -> None:
    role = files.one("ClusterRole", "nodeagent-metrics-reader")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


@pytest.mark.parametrize(
    ("binding", "account"),
    [
        pytest.param("nodeagent-auth-delegator", "nodeagent", id="agent"),
        pytest.param("nodeagent-scheduler-auth-delegator", "nodeagent-scheduler", id="scheduler"),
        pytest.param("nodeagent-extender-auth-delegator", "nodeagent-extender", id="extender"),
    ],
)
def test_each_component_may_delegate_its_callers_reviews(binding: str, account: str) -> None:
    bound = files.one("ClusterRoleBinding", binding)
    sa = files.one("ServiceAccount", account)["metadata"]
    assert bound["roleRef"]["name"] == "system:auth-delegator"
    assert bound["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}
    ]


def _containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    found = []
    for doc in files.objects():
        if doc["kind"] in ("DaemonSet", "Deployment"):
            pod = doc["spec"]["template"]["spec"]
            found += [(doc["metadata"]["name"], pod, c) for c in pod["containers"]]
    return found


@pytest.mark.parametrize(
    ("name", "pod", "container"),
    [pytest.param(*found, id=found[0]) for found in _containers()],
)
def test_every_container_is_hardened(
    name: str, pod: dict[str, Any], container: dict[str, Any]
) -> None:
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    if name != "nodeagent":  # the agent runs as root for its two capabilities
        assert context["runAsNonRoot"] is True
        assert "add" not in context["capabilities"]
    probes = [container[p]["httpGet"] for p in ("livenessProbe", "readinessProbe")]
    assert all(probe["scheme"] == "HTTPS" for probe in probes)
