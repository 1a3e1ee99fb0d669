"""manifests/extender/: valid (kubernetes-validate --strict, here and as kustomize renders
them), least privilege (nodes get/list/watch only), wired together (Service, probes,
TLS Secret, the command's flags), and the kube-scheduler entry is one our own
configuration reader accepts, with the settings the docs promise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from nodeagent import cli
from nodeagent.commands import extender as extender_command
from nodeagent.extender import server
from nodeagent.scheduler import config, registry
from nodeagent.serving.settings import parse_listen_address
from tests.deploy import files
from tests.deploy.test_manifests import KUBERNETES_VERSIONS, permissions
from tests.observability import tools


def extender_objects() -> list[dict[str, Any]]:
    spec = yaml.safe_load((files.EXTENDER / "kustomization.yaml").read_text())
    return [doc for name in spec["resources"] for doc in files.documents(files.EXTENDER / name)]


def by_kind(kind: str, docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    [found] = [
        doc
        for doc in docs or extender_objects()
        if doc["kind"] == kind and not doc["metadata"]["name"].endswith("-auth-delegator")
    ]
    return found


def container(docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    [only] = by_kind("Deployment", docs)["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = only
    return result


def test_rbac_reads_nodes_and_nothing_else() -> None:
    role = by_kind("ClusterRole")
    assert permissions(role) == {("", "nodes", verb) for verb in ("get", "list", "watch")}
    binding = by_kind("ClusterRoleBinding")
    account = by_kind("ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]
    pod = by_kind("Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_the_command_line_is_one_nodeagent_accepts() -> None:
    c = container()
    assert c["command"] == ["nodeagent", "extender"]
    args = cli.build_parser().parse_args(["extender", *c["args"]])
    assert args.handler is extender_command.run
    address = parse_listen_address(args.listen)
    [port] = c["ports"]
    assert port["containerPort"] == address.port
    mount = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["tls"]
    assert str(args.tls_cert_file) == f"{mount}/tls.crt"
    assert str(args.tls_private_key_file) == f"{mount}/tls.key"
    volumes = {v["name"]: v for v in by_kind("Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "nodeagent-extender-tls"


def test_probes_and_service_use_the_https_port() -> None:
    c = container()
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    service = by_kind("Service")
    [port] = service["spec"]["ports"]
    assert port["targetPort"] == c["ports"][0]["name"]
    labels = by_kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert (
        by_kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    )


def test_hardened_container() -> None:
    c = container()
    context = c["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert by_kind("Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
    assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"]


def test_the_kube_scheduler_entry() -> None:
    path = files.EXTENDER / "kube-scheduler-config.yaml"
    configuration = config.load_configuration(path, registry.in_tree_registry())
    [entry] = configuration.extenders
    assert entry.node_cache_capable and entry.ignorable
    assert {f"/{entry.filter_verb}", f"/{entry.prioritize_verb}"} == {
        f"/{verb}" for verb in server.VERBS
    }
    assert entry.weight > 0 and not entry.bind_verb and not entry.preempt_verb
    service = by_kind("Service")
    meta = service["metadata"]
    host = f"{meta['name']}.{meta['namespace']}.svc"
    assert entry.url_prefix == f"https://{host}:{service['spec']['ports'][0]['port']}"
    assert entry.tls_config is not None and entry.tls_config.server_name == host
    assert entry.tls_config.ca_file  # verified: enableHTTPS without a CA would not be


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kustomize_renders_valid_objects(tmp_path: Path, version: str) -> None:
    kubectl = tools.require("kubectl")
    done = tools.run([kubectl, "kustomize", str(files.EXTENDER)], timeout=60)
    assert done.returncode == 0, done.stderr
    rendered = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert {doc["kind"] for doc in rendered} == {doc["kind"] for doc in extender_objects()}
    for doc in rendered:
        assert doc["metadata"].get("namespace", "nodeagent-system") == "nodeagent-system"
        kubernetes_validate.validate(doc, version, strict=True)
    assert container(rendered)["image"] == "nodeagent:0.1.0"
