"""manifests/scheduler/: rendered by kustomize and valid (kubernetes-validate --strict),
RBAC exactly what the live scheduler calls, the shipped KubeSchedulerConfiguration
loadable and consistent with the Deployment (lease namespace, config path, probes)."""

from __future__ import annotations

import ast
from pathlib import Path

import kubernetes_validate
import yaml

from nodeagent.scheduler import registry
from nodeagent.scheduler.live import settings as live_settings
from tests.deploy import files
from tests.deploy.test_manifests import KUBERNETES_VERSIONS, permissions
from tests.observability import tools

SCHEDULER = files.MANIFESTS / "scheduler"
LIVE = files.REPO / "nodeagent" / "scheduler" / "live"

PERMISSION_OF = {
    # ClusterClient / KubeClient method -> (API group, resource, verb)
    "list_pods": ("", "pods", "list"),
    "watch_pods": ("", "pods", "watch"),
    "list_nodes": ("", "nodes", "list"),
    "watch_nodes": ("", "nodes", "watch"),
    "list_disruption_budgets": ("policy", "poddisruptionbudgets", "list"),
    "watch_disruption_budgets": ("policy", "poddisruptionbudgets", "watch"),
    "bind_pod": ("", "pods/binding", "create"),
    "patch_pod_status": ("", "pods/status", "patch"),
    "delete_pod": ("", "pods", "delete"),
    "create_event": ("", "events", "create"),
    "patch_event": ("", "events", "patch"),
    "get_lease": ("coordination.k8s.io", "leases", "get"),
    "create_lease": ("coordination.k8s.io", "leases", "create"),
    "replace_lease": ("coordination.k8s.io", "leases", "update"),
}
STORAGE = {  # the storage kinds the volume plugins read: (API group, resource)
    ("", "persistentvolumes"),
    ("", "persistentvolumeclaims"),
    ("storage.k8s.io", "storageclasses"),
    ("storage.k8s.io", "csinodes"),
    ("storage.k8s.io", "csidrivers"),
    ("storage.k8s.io", "csistoragecapacities"),
}
RESOURCE_KINDS = ("resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates")
STORAGE_PERMISSIONS = {
    # methods taking the kind as an argument -> every permission they may need
    "list_storage": {(group, resource, "list") for group, resource in STORAGE},
    "watch_storage": {(group, resource, "watch") for group, resource in STORAGE},
    # VolumeBinding's PreBind: PUT the PV (claimRef) and the claim (selected node)
    "replace_storage": {
        ("", "persistentvolumes", "update"),
        ("", "persistentvolumeclaims", "update"),
    },
}
R = "resource.k8s.io"
STORAGE_PERMISSIONS.update(
    {
        # DynamicResources' informers and claim writes (the status writes also need
        # resourceclaims/binding: DRAResourceClaimGranularStatusAuthorization)
        "list_resources": {(R, r, "list") for r in RESOURCE_KINDS},
        "watch_resources": {(R, r, "watch") for r in RESOURCE_KINDS},
        "get_resource_claim": {(R, "resourceclaims", "get")},
        "replace_resource_claim": {
            (R, "resourceclaims", "update"),
            (R, "resourceclaims/status", "update"),
            (R, "resourceclaims/binding", "update"),
        },
        "patch_resource_claim_status": {
            (R, "resourceclaims/status", "patch"),
            (R, "resourceclaims/binding", "patch"),
        },
        # DRAExtendedResource: PreBind creates a pod's extended-resource claim,
        # Unreserve and PostFilter delete it
        "create_resource_claim": {(R, "resourceclaims", "create")},
        "delete_resource_claim": {(R, "resourceclaims", "delete")},
    }
)
LEASE_METHODS = {"get_lease", "create_lease", "replace_lease"}
INFORMERS = {
    "pods": ("list_pods", "watch_pods"),
    "nodes": ("list_nodes", "watch_nodes"),
    "disruption_budgets": ("list_disruption_budgets", "watch_disruption_budgets"),
}


def called_methods() -> set[str]:
    """Client methods the live scheduler's code calls (``self._kube.X`` / ``kube.X``),
    its informers' list and watch, and the event recorder's."""
    methods: set[str] = {"create_event", "patch_event"}  # the shared EventRecorder
    for path in LIVE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and (
                node.attr in PERMISSION_OF or node.attr in STORAGE_PERMISSIONS
            ):
                methods.add(node.attr)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "informer"
                and node.func.attr in INFORMERS
            ):
                methods.update(INFORMERS[node.func.attr])
    return methods


def test_roles_grant_exactly_what_the_scheduler_calls() -> None:
    called = called_methods()
    cluster = permissions(files.one("ClusterRole", "nodeagent-scheduler"))
    lease = permissions(files.one("Role", "nodeagent-scheduler-leader-election"))
    storage = {p for m in called & STORAGE_PERMISSIONS.keys() for p in STORAGE_PERMISSIONS[m]}
    plain = called - LEASE_METHODS - STORAGE_PERMISSIONS.keys()
    assert cluster == {PERMISSION_OF[m] for m in plain} | storage
    assert {"list_storage", "watch_storage", "replace_storage"} <= called
    assert {"list_resources", "watch_resources", "replace_resource_claim"} <= called
    assert lease == {PERMISSION_OF[m] for m in called & LEASE_METHODS}
    assert called >= LEASE_METHODS and "bind_pod" in called


def test_shipped_config_loads_and_matches_the_deployment() -> None:
    settings = live_settings.load(SCHEDULER / "config.yaml", registry.in_tree_registry())
    assert settings.profiles == ("nodeagent-scheduler",)
    election = settings.leader_election
    assert election.leader_elect
    deployment = files.one("Deployment", "nodeagent-scheduler")
    assert deployment["spec"]["replicas"] == 2
    assert election.resource_namespace == deployment["metadata"]["namespace"]
    assert (
        files.one("Role", "nodeagent-scheduler-leader-election")["metadata"]["namespace"]
        == election.resource_namespace
    )
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["nodeagent", "scheduler"]
    (config_arg,) = [a for a in container["args"] if a.startswith("--config=")]
    (mount,) = container["volumeMounts"]
    assert Path(config_arg.split("=", 1)[1]).parent == Path(mount["mountPath"])
    port = container["ports"][0]["containerPort"]
    assert port == settings.metrics_address.port
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["serviceAccountName"] == "nodeagent-scheduler"


def test_rendered_scheduler_is_valid() -> None:
    kubectl = tools.require("kubectl")
    done = tools.run([kubectl, "kustomize", str(SCHEDULER)], timeout=60)
    assert done.returncode == 0, done.stderr
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = sorted(d["kind"] for d in rendered)
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",  # system:auth-delegator, for /metrics callers
            "ConfigMap",
            "Deployment",
            "Namespace",
            "Role",
            "RoleBinding",
            "ServiceAccount",
        ]
    )
    for doc in rendered:
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    (config_map,) = [d for d in rendered if d["kind"] == "ConfigMap"]
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    volume = deployment["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    assert volume == config_map["metadata"]["name"] != "nodeagent-scheduler-config"
    assert yaml.safe_load(config_map["data"]["config.yaml"])["kind"] == (
        "KubeSchedulerConfiguration"
    )
