"""The chart as Helm sees it, offline: ``helm lint --strict`` clean; what ``helm
template`` renders valid for the oldest and newest Kubernetes schemas
(kubernetes-validate --strict, the Prometheus Operator kinds against their strict
subset); the schema refusing bad values with a message that names them; each value
doing what values.yaml says, and the combinations that could only fail on the nodes
refused before anything is applied. The real API server's verdict is
tests/controlplane/test_helm.py's."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from nodeagent.agent.config import NodeAgentConfiguration, load_config
from tests.deploy.test_manifests import CRD_KINDS, CRD_SCHEMAS, KUBERNETES_VERSIONS
from tests.helm import chart
from tests.helm.chart import container, one

ALL_ON: dict[str, Any] = {
    "config": {"hardEvictionBypassesPdb": True},
    "agent": {"cgroupNotifications": True},
    "monitoring": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    },
    "scheduler": {"enabled": True},
    "extender": {"enabled": True},
}
"""Every optional component on."""

CUSTOMIZED: dict[str, Any] = {
    "image": {"repository": "registry.example.com/nodeagent", "tag": "0.1.1"},
    "imagePullSecrets": [{"name": "registry"}],
    "config": {
        "evictionHard": {"memory.available": "500Mi", "memory.pressure.full.avg10": "40"},
        "taintKeys": {"memory": "example.com/memory-pressure"},
        "metricsAddress": "0.0.0.0:9900",
        "metricsAuth": "none",
    },
    "agent": {
        "nodeSelector": {"example.com/pool": "general"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "resources": {"requests": {"cpu": "20m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}},
        "extraArgs": ["--log-level=debug"],
        "extraEnv": [{"name": "TZ", "value": "UTC"}],
        "podAnnotations": {"example.com/team": "platform"},
        "tls": {"secretName": "agent-tls", "clientCAConfigMap": "agent-client-ca"},
    },
    "monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "scheduler": {
        "enabled": True,
        "namespace": "",
        "createNamespace": False,
        "replicas": 3,
        "metricsAuth": "none",
        "tls": {"secretName": "scheduler-tls"},
    },
    "extender": {
        "enabled": True,
        "port": 9443,
        "tls": {"secretName": "extender-serving", "clientCAConfigMap": "scheduler-client-ca"},
    },
}
"""Most values away from their defaults at once, in another release and namespace."""

VALUE_SETS = {"defaults": {}, "all-on": ALL_ON, "customized": CUSTOMIZED}


def render(tmp_path: Path, values: dict[str, Any], **kwargs: Any) -> list[dict[str, Any]]:
    return chart.render(tmp_path, values, **kwargs)


def agent_config(tmp_path: Path, documents: Sequence[dict[str, Any]]) -> NodeAgentConfiguration:
    """The configuration the rendered DaemonSet's agent loads (its file and literal
    environment; the chart passes it --config and --host-root)."""
    daemonset = one(documents, "DaemonSet")
    [volume] = [
        v for v in daemonset["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"
    ]
    config_map = one(documents, "ConfigMap", volume["configMap"]["name"])
    file = tmp_path / "agent-config.yaml"
    file.write_text(config_map["data"]["config.yaml"])
    environ = {e["name"]: e["value"] for e in container(daemonset).get("env", ()) if "value" in e}
    return load_config(file, overrides={"host_root": "/host"}, environ=environ)


def hard_thresholds(config: NodeAgentConfiguration) -> dict[str, str]:
    """``evictionHard`` as the configuration file spells it (the kubelet's text)."""
    hard: dict[str, str] = config.model_dump(mode="json")["eviction_hard"]
    return hard


def checksum(workload: dict[str, Any]) -> str:
    value: str = workload["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    return value


class TestHelmAccepts:
    @pytest.mark.parametrize("name", sorted(VALUE_SETS))
    def test_lint_strict(self, tmp_path: Path, name: str) -> None:
        done = chart.run(
            "lint",
            "--strict",
            str(chart.CHART),
            f"--values={chart.values_file(tmp_path, VALUE_SETS[name])}",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout

    @pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
    @pytest.mark.parametrize("name", sorted(VALUE_SETS))
    def test_rendered_objects_are_strictly_valid(
        self, tmp_path: Path, name: str, version: str
    ) -> None:
        documents = render(tmp_path, VALUE_SETS[name], namespace="ops", release="edge")
        assert documents
        for doc in documents:
            if doc["kind"] in CRD_KINDS:
                jsonschema.validate(doc, CRD_SCHEMAS[doc["kind"]])
            else:
                kubernetes_validate.validate(doc, version, strict=True)

    @pytest.mark.parametrize("name", sorted(VALUE_SETS))
    def test_the_agent_loads_the_rendered_configuration(self, tmp_path: Path, name: str) -> None:
        config = agent_config(tmp_path, render(tmp_path, VALUE_SETS[name]))
        assert str(config.host_root) == "/host"


class TestTheSchemaRefuses:
    """What values.schema.json stops before anything is rendered, naming the value."""

    @pytest.mark.parametrize("command", ["template", "lint"])
    def test_a_malformed_threshold(self, tmp_path: Path, command: str) -> None:
        message = chart.refusal(
            tmp_path, {"config": {"evictionHard": {"memory.available": "lots"}}}, command=command
        )
        assert "/config/evictionHard/memory.available" in message
        assert "'lots'" in message

    def test_a_misspelt_signal(self, tmp_path: Path) -> None:
        message = chart.refusal(tmp_path, {"config": {"evictionSoft": {"memory.availabe": "1Gi"}}})
        assert "additional properties 'memory.availabe' not allowed" in message

    @pytest.mark.parametrize("section", ["config", "scheduler", "extender"])
    def test_an_unknown_metrics_auth_mode(self, tmp_path: Path, section: str) -> None:
        message = chart.refusal(tmp_path, {section: {"metricsAuth": "tokens"}})
        assert f"/{section}/metricsAuth" in message
        assert "'kubernetes', 'none'" in message

    def test_a_misspelt_key(self, tmp_path: Path) -> None:
        message = chart.refusal(tmp_path, {"agent": {"nodeselector": {"a": "b"}}})
        assert "additional properties 'nodeselector' not allowed" in message

    def test_a_misspelt_configuration_field(self, tmp_path: Path) -> None:
        message = chart.refusal(tmp_path, {"config": {"pollIntervall": "2s"}})
        assert "additional properties 'pollIntervall' not allowed" in message


class TestTheTemplatesRefuse:
    """What only the templates can see (combinations), refused with the way out."""

    @pytest.mark.parametrize(
        ("values", "says"),
        [
            (
                {"config": {"kernelMemcgNotification": True}},
                "config.kernelMemcgNotification: true needs agent.cgroupNotifications: true",
            ),
            (
                {"config": {"psiTriggers": ["node/memory some 150ms 1s"]}},
                'config.psiTriggers: "node/memory some 150ms 1s" is a cgroup\'s PSI trigger',
            ),
            ({"config": {"hostRoot": "/"}}, "config.hostRoot: the chart sets it"),
            (
                {"config": {"tlsCertFile": "/x.crt"}, "agent": {"tls": {"secretName": "t"}}},
                "agent.tls.secretName sets config.tlsCertFile",
            ),
            (
                {"config": {"metricsAddress": "127.0.0.1:0"}},
                'config.metricsAddress "127.0.0.1:0": the DaemonSet needs a fixed port',
            ),
            (
                {"scheduler": {"enabled": True, "namespace": chart.NAMESPACE}},
                "scheduler.createNamespace: the scheduler's namespace is the release's",
            ),
        ],
        ids=["memcg", "cgroup-psi", "hostRoot", "tls-twice", "port-0", "scheduler-namespace"],
    )
    def test_a_combination_that_would_fail_on_the_nodes(
        self, tmp_path: Path, values: dict[str, Any], says: str
    ) -> None:
        assert says in chart.refusal(tmp_path, values)


class TestValues:
    def test_a_changed_threshold_changes_the_pod_template_and_nothing_else_does(
        self, tmp_path: Path
    ) -> None:
        """The config checksum follows the configuration only: a changed threshold rolls
        the agents, a changed resource request changes the template but not the checksum,
        and the same values render the same checksum (no roll on a no-op upgrade)."""
        base = one(render(tmp_path, {}), "DaemonSet")
        again = one(render(tmp_path, {}), "DaemonSet")
        changed = render(tmp_path, {"config": {"evictionHard": {"memory.available": "400Mi"}}})
        resized = one(
            render(tmp_path, {"agent": {"resources": {"requests": {"memory": "200Mi"}}}}),
            "DaemonSet",
        )
        assert checksum(again) == checksum(base)
        assert checksum(one(changed, "DaemonSet")) != checksum(base)
        assert checksum(resized) == checksum(base)
        hard = hard_thresholds(agent_config(tmp_path, changed))
        assert hard["memory.available"] == "400Mi"
        # everything else the user did not touch stays as values.yaml has it
        assert hard["nodefs.available"] == "12%"

    def test_another_release_prefixes_every_cluster_wide_name(self, tmp_path: Path) -> None:
        documents = render(tmp_path, ALL_ON, release="edge", namespace="ops")
        cluster_wide = [d for d in documents if "namespace" not in d["metadata"]]
        assert {d["metadata"]["name"] for d in cluster_wide if d["kind"] != "Namespace"} == {
            "edge-nodeagent",
            "edge-nodeagent-auth-delegator",
            "edge-nodeagent-hard-eviction-bypass",
            "edge-nodeagent-node-confinement",
            "edge-nodeagent-metrics-reader",
            "edge-nodeagent-scheduler",
            "edge-nodeagent-scheduler-auth-delegator",
            "edge-nodeagent-extender",
            "edge-nodeagent-extender-auth-delegator",
        }
        policy = one(documents, "ValidatingAdmissionPolicy")
        [match] = policy["spec"]["matchConditions"]
        assert "'system:serviceaccount:ops:edge-nodeagent'" in match["expression"]
        for binding in (d for d in documents if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
            for subject in binding["subjects"]:
                assert subject["namespace"] in ("ops", "nodeagent-scheduler"), binding

    def test_the_pressure_keys_the_agent_writes_are_the_ones_the_policy_allows(
        self, tmp_path: Path
    ) -> None:
        documents = render(
            tmp_path,
            {
                "config": {
                    "taintKeys": {"memory": "example.com/memory"},
                    "conditionTypes": {"disk": "ExampleDiskPressure"},
                }
            },
        )
        variables = {
            v["name"]: v["expression"]
            for v in one(documents, "ValidatingAdmissionPolicy")["spec"]["variables"]
        }
        config = agent_config(tmp_path, documents)
        for key in config.taint_keys.values():
            assert f"'{key}'" in variables["ownTaintKeys"]
        for kind in config.condition_types.values():
            assert f"'{kind}'" in variables["ownConditionTypes"]
        assert "'example.com/memory'" in variables["ownTaintKeys"]
        assert "'nodeagent.io/disk-pressure'" in variables["ownTaintKeys"]

    def test_node_confinement_off_drops_the_policy_and_its_binding_only(
        self, tmp_path: Path
    ) -> None:
        on = {(d["kind"], d["metadata"]["name"]) for d in render(tmp_path, {})}
        off = {
            (d["kind"], d["metadata"]["name"])
            for d in render(tmp_path, {"agent": {"nodeConfinement": False}})
        }
        assert on - off == {
            ("ValidatingAdmissionPolicy", "nodeagent-node-confinement"),
            ("ValidatingAdmissionPolicyBinding", "nodeagent-node-confinement"),
        }
        assert off <= on

    def test_cgroup_notifications_make_the_host_cgroupfs_writable_and_arm_them(
        self, tmp_path: Path
    ) -> None:
        documents = render(tmp_path, {"agent": {"cgroupNotifications": True}})
        mounts = {m["mountPath"]: m for m in container(one(documents, "DaemonSet"))["volumeMounts"]}
        assert mounts["/host/sys/fs/cgroup"]["readOnly"] is False
        assert "recursiveReadOnly" not in mounts["/host/sys/fs/cgroup"]
        assert all(m["readOnly"] for path, m in mounts.items() if path.startswith("/host/proc"))
        assert agent_config(tmp_path, documents).kernel_memcg_notification is True

    def test_hard_eviction_bypass_grants_pods_delete_to_the_agent_only_with_it_on(
        self, tmp_path: Path
    ) -> None:
        def delete_grants(documents: list[dict[str, Any]]) -> list[str]:
            return [
                d["metadata"]["name"]
                for d in documents
                if d["kind"] == "ClusterRole"
                and d["metadata"]["name"].startswith("nodeagent")
                and "scheduler" not in d["metadata"]["name"]
                for rule in d["rules"]
                if "pods" in rule.get("resources", ()) and "delete" in rule["verbs"]
            ]

        assert delete_grants(render(tmp_path, {})) == []
        on = render(tmp_path, {"config": {"hardEvictionBypassesPdb": True}})
        assert delete_grants(on) == ["nodeagent-hard-eviction-bypass"]
        assert agent_config(tmp_path, on).hard_eviction_bypasses_pdb is True

    def test_metrics_auth_none_serves_and_scrapes_plain_http(self, tmp_path: Path) -> None:
        documents = render(
            tmp_path,
            {
                "config": {"metricsAuth": "none"},
                "monitoring": {"serviceMonitor": {"enabled": True}},
            },
        )
        agent = container(one(documents, "DaemonSet"))
        assert agent["livenessProbe"]["httpGet"]["scheme"] == "HTTP"
        assert agent["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
        [endpoint] = one(documents, "ServiceMonitor")["spec"]["endpoints"]
        assert endpoint["scheme"] == "http"
        assert "bearerTokenFile" not in endpoint and "tlsConfig" not in endpoint

    def test_tls_secrets_are_mounted_and_configured(self, tmp_path: Path) -> None:
        documents = render(tmp_path, CUSTOMIZED, release="edge", namespace="ops")
        daemonset = one(documents, "DaemonSet")
        agent = container(daemonset)
        mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
        volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
        assert volumes["tls"]["secret"]["secretName"] == "agent-tls"
        assert volumes["client-ca"]["configMap"]["name"] == "agent-client-ca"
        config = agent_config(tmp_path, documents)
        assert config.tls_cert_file == f"{mounts['tls']}/tls.crt"
        assert config.tls_private_key_file == f"{mounts['tls']}/tls.key"
        assert config.client_ca_file == f"{mounts['client-ca']}/ca.crt"
        # metricsAuth none, but a certificate: the agent serves HTTPS, so do the probes
        assert agent["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
        extender = container(one(documents, "Deployment", "edge-nodeagent-extender"))
        assert "--client-ca-file=/etc/nodeagent-extender/client-ca/ca.crt" in extender["args"]
        assert "--listen=0.0.0.0:9443" in extender["args"]
        scheduler = container(one(documents, "Deployment", "edge-nodeagent-scheduler"))
        assert "--metrics-auth=none" in scheduler["args"]
        assert scheduler["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"

    def test_pod_placement_image_and_extras_reach_the_pod(self, tmp_path: Path) -> None:
        daemonset = one(render(tmp_path, CUSTOMIZED), "DaemonSet")
        spec = daemonset["spec"]["template"]["spec"]
        agent = container(daemonset)
        # kubernetes.io/os: linux always; the resources merge with the defaults (Helm
        # merges maps), the tolerations replace them (and lists)
        assert spec["nodeSelector"] == {"kubernetes.io/os": "linux", "example.com/pool": "general"}
        assert spec["tolerations"] == CUSTOMIZED["agent"]["tolerations"]
        assert spec["priorityClassName"] == "system-cluster-critical"
        assert spec["imagePullSecrets"] == [{"name": "registry"}]
        assert agent["image"] == "registry.example.com/nodeagent:0.1.1"
        assert agent["resources"] == {
            "requests": {"cpu": "20m", "memory": "256Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        }
        assert agent["args"][-1] == "--log-level=debug"
        assert agent["env"][-1] == {"name": "TZ", "value": "UTC"}
        assert agent["ports"] == [{"name": "metrics", "containerPort": 9900, "protocol": "TCP"}]
        annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
        assert annotations["example.com/team"] == "platform"

    def test_the_priority_class_quota_follows_the_priority_class(self, tmp_path: Path) -> None:
        quota = one(render(tmp_path, CUSTOMIZED), "ResourceQuota")
        [expression] = quota["spec"]["scopeSelector"]["matchExpressions"]
        assert expression["values"] == ["system-cluster-critical"]
        without = render(tmp_path, {"agent": {"priorityClassName": ""}})
        assert not [d for d in without if d["kind"] == "ResourceQuota"]

    def test_the_extender_alone(self, tmp_path: Path) -> None:
        documents = render(tmp_path, {"agent": {"enabled": False}, "extender": {"enabled": True}})
        assert {d["kind"] for d in documents} == {
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service",
            "PodDisruptionBudget",
        }

    def test_the_scheduler_lease_follows_its_namespace(self, tmp_path: Path) -> None:
        documents = render(tmp_path, CUSTOMIZED, namespace="ops")
        config_map = one(documents, "ConfigMap", "nodeagent-scheduler-config")
        config = yaml.safe_load(config_map["data"]["config.yaml"])
        assert config["leaderElection"]["resourceNamespace"] == "ops"
        values = copy.deepcopy(CUSTOMIZED)
        values["scheduler"]["config"] = {"leaderElection": {"resourceNamespace": "leases"}}
        config_map = one(render(tmp_path, values), "ConfigMap", "nodeagent-scheduler-config")
        config = yaml.safe_load(config_map["data"]["config.yaml"])
        assert config["leaderElection"]["resourceNamespace"] == "leases"
        assert config["leaderElection"]["leaseDuration"] == "15s"


class TestNotes:
    def test_the_notes_say_how_to_check_the_agent_and_where_its_metrics_are(
        self, tmp_path: Path
    ) -> None:
        done = chart.run(
            "install",
            "edge",
            str(chart.CHART),
            "--namespace=ops",
            "--dry-run=client",
            f"--values={chart.values_file(tmp_path, ALL_ON)}",
        )
        assert done.returncode == 0, done.stderr
        notes = done.stdout.split("NOTES:", 1)[1]
        assert "kubectl -n ops rollout status daemonset/edge-nodeagent" in notes
        assert "https://<pod IP>:9813/metrics" in notes
        assert "--clusterrole=edge-nodeagent-metrics-reader" in notes
        assert "urlPrefix: https://edge-nodeagent-extender.ops.svc:9814" in notes
        assert "spec.schedulerName: nodeagent-scheduler" in notes
