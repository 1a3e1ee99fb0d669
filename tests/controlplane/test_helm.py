"""The chart (charts/nodeagent) against the real control plane, with the real ``helm``
built from its module (tests/helm/build.sh):

* ``helm template`` for the default values, each optional component on, all of them on,
  and most values changed at once, every object accepted by the real apiserver in a
  server-side dry run with strict field validation;
* ``helm install``, then ``helm upgrade`` with a changed threshold: the configuration
  reaches the ConfigMap, the pod template's checksum changes, and the real DaemonSet
  controller replaces the agent's pod with one of the new template (a no-op upgrade
  rolls nothing); a bad value is refused by ``helm install`` before anything exists;
* the installed RBAC lets the agent's ServiceAccount make exactly the calls the agent
  makes (SubjectAccessReviews), and a token bound to its pod on a node does them for
  real, the release's own node-confinement policy refusing another node;
* ``helm uninstall`` leaves no cluster-scoped object behind."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.agent.config import NodeAgentConfiguration, load_config
from tests.controlplane import cluster
from tests.controlplane import objects as o
from tests.controlplane.cluster import ControlPlane, Nodes, Rest
from tests.controlplane.test_manifests import prepared
from tests.helm import chart
from tests.helm.test_chart import ALL_ON, CUSTOMIZED, hard_thresholds
from tests.helm.test_equivalence import COMPONENT_VALUES
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

__all__ = ["prepared"]  # the module fixture: monitoring CRDs and the trees' namespaces

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
AGENT = "app.kubernetes.io/component=agent"

DRY_RUNS = {
    "defaults": {},
    **{name: values for name, values in COMPONENT_VALUES.items()},
    "all-on": ALL_ON,
    "customized": CUSTOMIZED,
}


@pytest.fixture(scope="module")
def helm() -> Path:
    return chart.require()


@pytest.fixture
def isolated(prepared: ControlPlane) -> Iterator[tuple[str, str]]:
    """A release name and a namespace of the test's own on the session's control plane:
    other modules apply the kustomize trees there for real, and a dry run of the chart
    under their names would be an update (a DaemonSet's selector is immutable)."""
    name = f"d{uuid.uuid4().hex[:6]}"
    namespace = prepared.namespace(f"t-{name}")
    yield name, namespace
    prepared.admin.request("DELETE", f"/api/v1/namespaces/{namespace}")


class TestTheApiserverAcceptsEveryRendering:
    @pytest.mark.parametrize("name", sorted(DRY_RUNS))
    def test_server_side_dry_run(
        self,
        helm: Path,
        prepared: ControlPlane,
        isolated: tuple[str, str],
        tmp_path: Path,
        name: str,
    ) -> None:
        release, namespace = isolated
        documents = chart.render(tmp_path, DRY_RUNS[name], release=release, namespace=namespace)
        output = prepared.apply(documents, dry_run=True)
        assert output.count("(server dry run)") == len(documents), output

    def test_the_dry_run_sees_a_bad_expression(
        self, helm: Path, prepared: ControlPlane, isolated: tuple[str, str], tmp_path: Path
    ) -> None:
        """The policy's CEL is compiled by the apiserver: a taint key the schema lets
        through but CEL cannot hold would be refused here, not on the nodes."""
        release, namespace = isolated
        documents = chart.render(tmp_path, {}, release=release, namespace=namespace)
        [policy] = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"]
        policy["spec"]["variables"][1]["expression"] = "['unterminated"
        with pytest.raises(RuntimeError, match=r"ownConditionTypes|compil|Syntax"):
            prepared.apply([policy], dry_run=True)


@pytest.fixture(scope="module")
def plane(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own whose controller-manager also runs the
    DaemonSet controller (it rolls the agents' pods) and the ResourceQuota controller
    (quota admission refuses pods in a namespace whose quota has no status yet, and the
    chart ships one). Not the session's: there, other tests' DaemonSets (the kustomize
    tree's, applied as-is) would put pods on these tests' nodes, and these tests'
    DaemonSets on theirs."""
    reason = cluster.unavailable()
    if reason is not None:
        pytest.skip(reason)
    controllers = (*cluster.CONTROLLERS, "daemonset-controller", "resourcequota-controller")
    with cluster.running(tmp_path_factory.mktemp("helm-plane"), controllers=controllers) as own:
        yield own


@pytest.fixture
def namespace(plane: ControlPlane) -> str:
    return plane.namespace(f"t-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def nodes(plane: ControlPlane) -> Iterator[Nodes]:
    made = Nodes(plane)
    yield made
    made.delete_all()


class Release:
    """One Helm release of the chart in ``namespace``, driven as an operator would."""

    def __init__(self, plane: ControlPlane, namespace: str, directory: Path) -> None:
        self.plane, self.namespace, self.directory = plane, namespace, directory
        self.name = f"r{uuid.uuid4().hex[:6]}"
        self.fullname = f"{self.name}-nodeagent"

    def helm(self, *args: str) -> str:
        done = chart.run(
            *args, f"--namespace={self.namespace}", kubeconfig=self.plane.admin_kubeconfig
        )
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stderr}"
        return done.stdout

    def install(self, values: dict[str, Any]) -> str:
        file = chart.values_file(self.directory, values, "install")
        return self.helm("install", self.name, str(chart.CHART), f"--values={file}")

    def upgrade(self, *set_args: str) -> str:
        return self.helm("upgrade", self.name, str(chart.CHART), "--reuse-values", *set_args)

    def manifest(self) -> list[dict[str, Any]]:
        text = self.helm("get", "manifest", self.name)
        return [doc for doc in yaml.safe_load_all(text) if doc]

    def daemonset(self) -> dict[str, Any]:
        path = f"/apis/apps/v1/namespaces/{self.namespace}/daemonsets/{self.fullname}"
        result: dict[str, Any] = self.plane.admin.get(path)
        return result

    def agent_pods(self) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        items: list[dict[str, Any]] = self.plane.admin.get(path, labelSelector=AGENT)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def configuration(self, scratch: Path) -> NodeAgentConfiguration:
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{self.fullname}-config"
        file = scratch / "config.yaml"
        file.write_text(self.plane.admin.get(path)["data"]["config.yaml"])
        return load_config(file, environ={})


def checksum(template_owner: dict[str, Any]) -> str:
    value: str = template_owner["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    return value


def the_only_pod_with(release: Release, digest: str) -> dict[str, Any] | None:
    """The release's one live agent pod, once it is of the template with ``digest``."""
    pods = release.agent_pods()
    if len(pods) == 1 and pods[0]["metadata"]["annotations"].get("checksum/config") == digest:
        return pods[0]
    return None


def allowed(plane: ControlPlane, user: str, home: str, **attributes: str) -> bool:
    """A SubjectAccessReview for ServiceAccount ``user`` of namespace ``home`` (its
    groups as the apiserver gives them) doing ``attributes`` (verb, resource,
    subresource, group, namespace)."""
    review = plane.admin.create(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{home}",
                    "system:authenticated",
                ],
                "resourceAttributes": attributes,
            },
        },
    )
    return bool(review["status"].get("allowed"))


AGENT_CALLS = [
    {"verb": "list", "resource": "pods"},
    {"verb": "watch", "resource": "pods"},
    {"verb": "create", "resource": "pods", "subresource": "eviction", "namespace": "default"},
    {"verb": "get", "resource": "nodes"},
    {"verb": "patch", "resource": "nodes"},
    {"verb": "patch", "resource": "nodes", "subresource": "status"},
    {"verb": "create", "resource": "events", "namespace": "default"},
    {"verb": "patch", "resource": "events", "namespace": "default"},
    {"verb": "create", "resource": "tokenreviews", "group": "authentication.k8s.io"},
    {"verb": "create", "resource": "subjectaccessreviews", "group": "authorization.k8s.io"},
]
"""Every call the agent makes (docs/kubernetes.md's table), and the reviews of /metrics."""

NOT_THE_AGENTS = [
    {"verb": "delete", "resource": "pods", "namespace": "default"},
    {"verb": "get", "resource": "pods", "namespace": "default"},
    {"verb": "list", "resource": "nodes"},
    {"verb": "update", "resource": "nodes"},
    {"verb": "get", "resource": "secrets", "namespace": "default"},
    {"verb": "create", "resource": "pods", "namespace": "default"},
]


class TestInstallAndUpgrade:
    def test_a_changed_threshold_rolls_the_agents(
        self,
        plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        tmp_path: Path,
    ) -> None:
        release = Release(plane, namespace, tmp_path)
        node = self.node_of_its_own(nodes, release)
        release.install(self.values(release))
        try:
            first = release.daemonset()
            before = checksum(first)
            pod = eventually(
                lambda: the_only_pod_with(release, before),
                timeout=60,
                what=f"the DaemonSet controller's pod for {node}",
            )
            revision = pod["metadata"]["labels"]["controller-revision-hash"]
            assert hard_thresholds(release.configuration(tmp_path))["memory.available"] == "300Mi"

            release.upgrade("--set-string", "config.evictionHard.memory\\.available=400Mi")
            rolled = release.daemonset()
            after = checksum(rolled)
            assert after != before
            assert rolled["metadata"]["generation"] == first["metadata"]["generation"] + 1
            assert hard_thresholds(release.configuration(tmp_path))["memory.available"] == "400Mi"
            new = eventually(
                lambda: the_only_pod_with(release, after),
                timeout=60,
                what="the pod of the new template",
            )
            assert new["metadata"]["labels"]["controller-revision-hash"] != revision
            assert new["metadata"]["uid"] != pod["metadata"]["uid"]

            # the same values again: the template is unchanged and nothing rolls
            release.upgrade()
            assert release.daemonset()["metadata"]["generation"] == rolled["metadata"]["generation"]
        finally:
            release.helm("uninstall", release.name)
        assert self.cluster_wide_leftovers(release) == []

    def test_the_installed_rbac_lets_the_agent_act(
        self,
        plane: ControlPlane,
        namespace: str,
        nodes: Nodes,
        tmp_path: Path,
    ) -> None:
        release = Release(plane, namespace, tmp_path)
        release.install({})
        try:
            user = f"system:serviceaccount:{namespace}:{release.fullname}"
            refused = [c for c in AGENT_CALLS if not allowed(plane, user, namespace, **c)]
            assert refused == [], "the agent may not make these calls"
            granted = [c for c in NOT_THE_AGENTS if allowed(plane, user, namespace, **c)]
            assert granted == [], "the agent is granted calls it never makes"
            self.act_as_the_agent(plane, release, nodes)

            release.upgrade("--set", "config.hardEvictionBypassesPdb=true")
            delete = {"verb": "delete", "resource": "pods", "namespace": "default"}
            assert allowed(plane, user, namespace, **delete)
        finally:
            release.helm("uninstall", release.name)
        assert self.cluster_wide_leftovers(release) == []

    def test_a_bad_value_is_refused_before_anything_exists(
        self, plane: ControlPlane, namespace: str, tmp_path: Path
    ) -> None:
        release = Release(plane, namespace, tmp_path)
        done = chart.run(
            "install",
            release.name,
            str(chart.CHART),
            f"--namespace={namespace}",
            "--set-string=config.evictionHard.memory\\.available=lots",
            kubeconfig=plane.admin_kubeconfig,
        )
        assert done.returncode != 0
        assert "/config/evictionHard/memory.available" in done.stderr, done.stderr
        # no release record (Helm keeps one Secret per revision), no object
        records = plane.admin.get(
            f"/api/v1/namespaces/{namespace}/secrets",
            labelSelector=f"owner=helm,name={release.name}",
        )
        assert records["items"] == []
        assert self.cluster_wide_leftovers(release) == []

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def node_of_its_own(nodes: Nodes, release: Release) -> str:
        """A node only this release's DaemonSet selects (a label of its own)."""
        name = f"helm-{release.name}"
        nodes.create(o.node(name, labels={"nodeagent.test/release": release.name}))
        return name

    @staticmethod
    def values(release: Release) -> dict[str, Any]:
        return {"agent": {"nodeSelector": {"nodeagent.test/release": release.name}}}

    @staticmethod
    def cluster_wide_leftovers(release: Release) -> list[str]:
        paths = [
            f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{release.fullname}",
            f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{release.fullname}",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"
            f"{release.fullname}-auth-delegator",
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
            f"{release.fullname}-node-confinement",
        ]
        return [path for path in paths if release.plane.admin.request("GET", path)[0] != 404]

    @staticmethod
    def act_as_the_agent(plane: ControlPlane, release: Release, nodes: Nodes) -> None:
        """With the token the kubelet would mount in its pod on ``own``: the agent's
        calls answered, the release's node-confinement policy refusing ``other``."""
        own, other = f"own-{release.name}", f"other-{release.name}"
        nodes.create(o.node(own))
        nodes.create(o.node(other))
        installed = release.manifest()
        token = o.agent_pod_token(plane, installed, f"agent-{release.name}", own)
        agent = Rest(plane.url, plane.ca.certificate, token=token)
        namespace = release.namespace
        policy = f"{release.fullname}-node-confinement"

        assert agent.get(f"/api/v1/nodes/{own}")["metadata"]["name"] == own
        pods = agent.get("/api/v1/pods", fieldSelector=f"spec.nodeName={own}")["items"]
        assert [p["metadata"]["name"] for p in pods] == [f"agent-{release.name}"]
        condition = {
            "type": "NodeAgentMemoryPressure",
            "status": "False",
            "reason": "NoPressure",
            "message": "set by the installed agent's token",
        }
        status_patch = {"status": {"conditions": [condition]}}

        def patch_own_status() -> bool:
            status, _ = agent.request(
                "PATCH", f"/api/v1/nodes/{own}/status", status_patch, content_type=STRATEGIC
            )
            return status == 200

        # a new policy takes effect once the apiserver has loaded it
        def refused_by_the_policy() -> str | None:
            status, body = agent.request(
                "PATCH", f"/api/v1/nodes/{other}/status", status_patch, content_type=STRATEGIC
            )
            return str(body) if status == 403 and policy in str(body) else None

        assert eventually(refused_by_the_policy, what=f"{policy} enforced")
        assert eventually(patch_own_status, what="its own condition patched")
        taint = {
            "spec": {"taints": [{"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}]}
        }
        assert agent.request("PATCH", f"/api/v1/nodes/{own}", taint, content_type=MERGE)[0] == 200

        # a Node's events go to "default", as the kubelet's do; a pod's to its namespace
        for where, involved, reason in (
            ("default", {"kind": "Node", "name": own}, "EvictionThresholdMet"),
            (namespace, {"kind": "Pod", "name": "victim", "namespace": namespace}, "Evicted"),
        ):
            agent.create(
                f"/api/v1/namespaces/{where}/events",
                {
                    "metadata": {"generateName": "nodeagent-", "namespace": where},
                    "involvedObject": involved,
                    "reason": reason,
                    "message": "by the installed agent's token",
                    "type": "Warning",
                    "source": {"component": "nodeagent", "host": own},
                },
            )
        plane.admin.create(f"/api/v1/namespaces/{namespace}/pods", o.pod("victim", namespace))
        evicted = agent.create(
            f"/api/v1/namespaces/{namespace}/pods/victim/eviction",
            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "victim"}},
        )
        assert evicted["status"] == "Success", evicted
        status, _ = agent.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/agent-x")
        assert status == 403
