"""Reading Kubernetes objects: effective requests (component-helpers' ``PodRequests``),
quantities, defaulting, priorities, input formats, and errors that name the field."""

from __future__ import annotations

import json

import pytest

from nodeagent.base.errors import ConfigError
from nodeagent.k8s import resources
from nodeagent.scheduler import api, objects
from tests.scheduler import builders as b

GI = 1024**3
G = 10**9


def test_worked_example_init_containers_dominate_only_where_larger() -> None:
    # Upstream comment: IC1 2cpu/1G, IC2 2cpu/3G; C1 2cpu/1G, C2 1cpu/1G => 3 cpu, 3G.
    pod = b.pod(
        init_containers=[
            b.container("ic1", requests={"cpu": "2", "memory": "1G"}),
            b.container("ic2", requests={"cpu": "2", "memory": "3G"}),
        ],
        containers=[
            b.container("c1", requests={"cpu": "2", "memory": "1G"}),
            b.container("c2", requests={"cpu": "1", "memory": "1G"}),
        ],
    )
    assert pod.requests == {"cpu": 3000, "memory": 3 * G}


@pytest.mark.parametrize(
    ("init", "containers", "expected_cpu"),
    [
        pytest.param([], [1000], 1000, id="one-container"),
        pytest.param([(500, True)], [1000], 1500, id="sidecar-adds-to-containers"),
        pytest.param([(500, True), (2000, False)], [1000], 2500, id="init-beside-earlier-sidecar"),
        pytest.param([(2000, False), (500, True)], [1000], 2000, id="init-before-sidecar-alone"),
        pytest.param([(3000, False)], [1000], 3000, id="init-larger-than-containers"),
    ],
)
def test_sidecars_and_init_containers(
    init: list[tuple[int, bool]], containers: list[int], expected_cpu: int
) -> None:
    regular = tuple(resources.ContainerResources({"cpu": cpu}) for cpu in containers)
    inits = tuple(resources.ContainerResources({"cpu": cpu}, {}, sidecar) for cpu, sidecar in init)
    pod = resources.PodResources(regular, inits)
    assert resources.pod_requests(pod)["cpu"] == expected_cpu


def test_overhead_is_added_and_pod_level_requests_replace_the_aggregate() -> None:
    pod = b.pod(
        requests={"cpu": "1", "memory": "1Gi"},
        overhead={"cpu": "250m"},
        resources={"requests": {"memory": "3Gi"}},
    )
    assert pod.requests == {"cpu": 1250, "memory": 3 * GI}


def test_non_zero_defaults_apply_per_container_for_scoring_only() -> None:
    pod = b.pod(
        containers=[
            b.container("a", requests={}),
            b.container("b", requests={"cpu": "0"}),
            b.container("c", requests={"memory": "1Gi"}),
        ]
    )
    assert pod.requests == {"cpu": 0, "memory": GI}
    assert pod.nonzero_cpu == 100 + 0 + 100  # an explicit 0 stays 0
    assert pod.nonzero_memory == 200 * 1024 * 1024 * 2 + GI


def test_limits_default_requests_like_the_api_server() -> None:
    raw = b.pod_dict()
    raw["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2", "example.com/gpu": "1"}}
    assert objects.parse_pod(raw).requests == {"cpu": 2000, "example.com/gpu": 1}


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        pytest.param("cpu", "100m", 100, id="milli"),
        pytest.param("cpu", "0.0005", 1, id="cpu-rounds-up"),
        pytest.param("cpu", "2", 2000, id="cores"),
        pytest.param("memory", "1Gi", GI, id="binary"),
        pytest.param("memory", "1G", G, id="decimal"),
        pytest.param("memory", "1.5", 2, id="value-rounds-up"),
        pytest.param("memory", "1e3", 1000, id="exponent"),
        pytest.param("pods", 110, 110, id="integer"),
    ],
)
def test_quantities(name: str, text: object, expected: int) -> None:
    assert objects.parse_quantity(name, text, objects.FieldPath("test")) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("lots", "expected a Kubernetes quantity", id="not-a-quantity"),
        pytest.param("-1", "expected a non-negative quantity", id="negative"),
        pytest.param("-100m", "expected a non-negative quantity", id="negative-milli"),
    ],
)
def test_bad_quantity_names_the_pod_and_field(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        b.pod("web", requests={"cpu": text})
    message = str(caught.value)
    assert f"Pod default/web: spec.containers[0].resources.requests.cpu = {text!r}" in message
    assert expected in message


def test_bad_taint_effect_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"spec\.taints\[0\]\.effect"):
        b.node("n1", taints=[{"key": "k", "effect": "Sometimes"}])


def test_node_without_allocatable_uses_capacity() -> None:
    raw = b.node_dict("n1")
    raw["status"]["capacity"] = raw["status"].pop("allocatable")
    assert objects.parse_node(raw).allocatable["cpu"] == 4000


def _cluster_docs() -> list[dict[str, object]]:
    return [
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        {"kind": "PriorityClass", "metadata": {"name": "base"}, "value": 7, "globalDefault": True},
        b.node_dict("n1"),
        b.pod_dict("classy", priorityClassName="high"),
        b.pod_dict("plain"),
        b.pod_dict("explicit", priority=5, priorityClassName="high"),
        {**b.pod_dict("done"), "status": {"phase": "Succeeded"}},
        {"kind": "Service", "metadata": {"name": "ignored"}},
    ]


def test_priorities_resolve_from_classes_and_finished_pods_are_dropped() -> None:
    cluster = objects.read_cluster(_cluster_docs())
    priorities = {p.name: p.priority for p in cluster.pods}
    assert priorities == {"classy": 1000, "plain": 7, "explicit": 5}


@pytest.mark.parametrize(
    "render",
    [
        pytest.param(lambda docs: json.dumps({"kind": "List", "items": docs}), id="json-list"),
        pytest.param(lambda docs: "\n---\n".join(json.dumps(d) for d in docs), id="multi-document"),
        pytest.param(
            lambda docs: (
                json.dumps({"kind": "PodList", "items": [d for d in docs if d["kind"] == "Pod"]})
                + "\n---\n"
                + json.dumps({"kind": "List", "items": [d for d in docs if d["kind"] != "Pod"]})
            ),
            id="typed-lists",
        ),
    ],
)
def test_input_formats(render: object) -> None:
    text = render(_cluster_docs())  # type: ignore[operator]
    cluster = objects.load_cluster(text)
    assert [n.name for n in cluster.nodes] == ["n1"]
    assert sorted(p.name for p in cluster.pods) == ["classy", "explicit", "plain"]


def test_unknown_priority_class_and_duplicate_objects_are_errors() -> None:
    with pytest.raises(ConfigError, match="priorityClassName"):
        objects.read_cluster([b.pod_dict("p", priorityClassName="missing")])
    with pytest.raises(ConfigError, match="Node n1 appears more than once"):
        objects.read_cluster([b.node_dict("n1"), b.node_dict("n1")])
    with pytest.raises(ConfigError, match="Pod default/p appears more than once"):
        objects.read_cluster([b.node_dict("n1"), b.pod_dict("p"), b.pod_dict("p")])
    with pytest.raises(ConfigError, match="not valid YAML"):
        objects.load_cluster("items: [")


@pytest.mark.parametrize(
    ("image", "normalized"),
    [
        pytest.param("nginx", "nginx:latest", id="bare"),
        pytest.param("nginx:1.25", "nginx:1.25", id="tagged"),
        pytest.param("registry:5000/team/app", "registry:5000/team/app:latest", id="port-no-tag"),
        pytest.param("registry:5000/team/app:2", "registry:5000/team/app:2", id="port-and-tag"),
    ],
)
def test_image_names_are_normalized(image: str, normalized: str) -> None:
    assert objects.normalized_image_name(image) == normalized


def test_host_ports_default_protocol_and_address() -> None:
    pod = b.pod(containers=[b.container(host_ports=[8080])])
    assert pod.host_ports == (api.HostPort(8080, "TCP", "0.0.0.0"),)


@pytest.mark.parametrize(
    ("document", "mentions"),
    [
        pytest.param(
            {**b.node_dict("n1"), "spec": {"unschedulable": "false"}},
            "Node n1: spec.unschedulable = 'false': expected true or false",
            id="quoted-boolean",
        ),
        pytest.param(
            {
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": "shop"},
                "status": {"disruptionsAllowed": "x"},
            },
            "PodDisruptionBudget shop/web: status.disruptionsAllowed = 'x': expected an integer",
            id="pdb-allowed",
        ),
        pytest.param(
            b.pod_dict("p", priorityClassName={"name": "high"}),
            "Pod default/p: spec.priorityClassName = {'name': 'high'}: no PriorityClass",
            id="priority-class-not-a-name",
        ),
    ],
)
def test_malformed_fields_are_config_errors(document: dict[str, object], mentions: str) -> None:
    with pytest.raises(ConfigError) as caught:
        objects.read_cluster([document])
    assert mentions in str(caught.value)


def test_disruption_budgets_are_read() -> None:
    budget = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1},
    }
    cluster = objects.read_cluster([budget, b.node_dict("n1")])
    assert cluster.disruption_budgets == (
        api.DisruptionBudget("shop", "web", api.LabelSelector((("app", "web"),)), 1),
    )


def _template_pod(
    name: str, *, labels: dict[str, str], priority_class: str = ""
) -> dict[str, object]:
    spec: dict[str, object] = {
        "schedulerName": "custom",
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "app",
                "image": "nginx",
                "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
                "ports": [{"containerPort": 80, "hostPort": 8080}],
            }
        ],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}},
                "matchLabelKeys": ["rev"],
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def test_pods_of_one_template_read_as_each_read_alone() -> None:
    """The spec's reading is kept per distinct spec: a second pod of the template gets
    the same values a fresh reading gives, with its own name, labels and priority."""
    first = objects.parse_pod(_template_pod("a", labels={"app": "web", "rev": "1"}))
    second = objects.parse_pod(
        _template_pod("b", labels={"app": "web", "rev": "2"}, priority_class="high"),
        {"high": 1000},
    )
    objects._spec_readings.clear()
    alone = objects.parse_pod(
        _template_pod("b", labels={"app": "web", "rev": "2"}, priority_class="high"),
        {"high": 1000},
    )
    assert second == alone
    assert (second.name, second.uid, second.priority) == ("b", "uid-b", 1000)
    assert first.requests == second.requests == {"cpu": 250, "memory": 64 * 1024**2}
    assert first.host_ports == second.host_ports
    # matchLabelKeys reads the pod's own labels: not shared between the two
    assert first.spread_constraints != second.spread_constraints


def test_a_bad_spec_is_refused_for_every_pod_that_has_it() -> None:
    bad = _template_pod("a", labels={})
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"  # type: ignore[index]
    for name in ("a", "b"):
        bad["metadata"]["name"] = name  # type: ignore[index]
        with pytest.raises(ConfigError, match=f"Pod ns/{name}: spec.containers"):
            objects.parse_pod(bad)


def test_a_resize_in_the_status_is_read_per_pod() -> None:
    """A status with resources (a resize not yet actuated) changes the requests: read
    per pod, not as its template's."""
    plain = objects.parse_pod(_template_pod("a", labels={}))
    resized_doc = _template_pod("b", labels={})
    resized_doc["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}}
        ],
    }
    resized = objects.parse_pod(resized_doc)
    assert plain.requests["cpu"] == 250
    assert resized.requests["cpu"] == 500


def _with_token_volume(doc: dict[str, object], suffix: str, *, as_claim: bool = False) -> None:
    """The ServiceAccount admission plugin's volume and mount, as the API server stores
    them (``as_claim``: a claim volume that happens to have such a name)."""
    name = f"kube-api-access-{suffix}"
    spec = doc["spec"]
    assert isinstance(spec, dict)
    source: dict[str, object] = (
        {"persistentVolumeClaim": {"claimName": "data"}}
        if as_claim
        else {"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
    )
    spec["volumes"] = [{"name": name, **source}]
    spec["containers"][0]["volumeMounts"] = [{"name": name, "mountPath": "/var/run"}]


def test_the_service_account_token_volume_does_not_part_a_template() -> None:
    objects._spec_readings.clear()
    pods = []
    for suffix in ("x7k2p", "b4wqz"):
        doc = _template_pod(f"p-{suffix}", labels={})
        _with_token_volume(doc, suffix)
        pods.append(objects.parse_pod(doc))
    assert len(objects._spec_readings) == 1
    assert pods[0].volumes == pods[1].volumes == ()  # no plugin reads a projected volume


def test_a_claim_volume_named_like_the_token_volume_is_read_per_pod() -> None:
    objects._spec_readings.clear()
    names = []
    for suffix in ("x7k2p", "b4wqz"):
        doc = _template_pod(f"p-{suffix}", labels={})
        _with_token_volume(doc, suffix, as_claim=True)
        names.append([v.name for v in objects.parse_pod(doc).volumes])
    assert names == [["kube-api-access-x7k2p"], ["kube-api-access-b4wqz"]]


@pytest.mark.parametrize(
    ("condition", "shared"),
    [
        pytest.param("PodScheduled", True, id="unschedulable"),
        pytest.param("PodResizePending", False, id="resize-pending"),
        pytest.param("PodResizeInProgress", False, id="resize-in-progress"),
    ],
)
def test_only_a_resize_condition_keeps_a_pod_from_its_template(
    condition: str, shared: bool
) -> None:
    objects._spec_readings.clear()
    doc = _template_pod("a", labels={})
    doc["status"] = {
        "phase": "Pending",
        "conditions": [{"type": condition, "status": "False", "reason": "Infeasible"}],
    }
    objects.parse_pod(doc)
    assert len(objects._spec_readings) == (1 if shared else 0)


def test_a_spec_json_cannot_hold_is_read_and_not_kept() -> None:
    """A cluster file's YAML may hold values no API server sends (here an object of no
    JSON type, in a field the scheduler does not read): the pod is read all the same."""
    objects._spec_readings.clear()
    doc = _template_pod("a", labels={})
    doc["spec"]["containers"][0]["env"] = [{"name": "X", "value": object()}]  # type: ignore[index]
    pod = objects.parse_pod(doc)
    assert pod.requests == {"cpu": 250, "memory": 64 * 1024**2}
    assert not objects._spec_readings
