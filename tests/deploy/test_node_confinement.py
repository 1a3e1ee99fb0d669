"""The node-confinement ValidatingAdmissionPolicy (manifests/components/node-confinement),
evaluated as kube-apiserver evaluates it: every CEL expression compiled and run by a CEL
evaluator (cel-python) on AdmissionRequest fixtures, matchConditions first, then the
variables in order, then every validation (all must hold; an evaluation error fails
closed, as ``failurePolicy: Fail``).

The agent's own writes (its conditions, taints and annotation on its own Node) pass;
another Node, a token bound to no node, labels, other annotations, kubelet conditions,
other owners' taints and cordoning are refused; other users are not matched at all."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.k8s.pressure import DEFAULT_CONDITION_TYPES, DEFAULT_TAINT_KEYS, PRESSURE_ANNOTATION
from tests.deploy import files
from tests.deploy.test_manifests import KUBERNETES_VERSIONS

CONFINEMENT = files.COMPONENTS / "node-confinement"
AGENT = "system:serviceaccount:nodeagent-system:nodeagent"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
OWN_TAINT = {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}


def policy_document() -> dict[str, Any]:
    [doc] = files.documents(CONFINEMENT / "policy.yaml")
    return doc


@dataclass(frozen=True)
class Admission:
    matched: bool
    denials: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.denials


class Policy:
    """One ValidatingAdmissionPolicy's CEL, compiled once."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        env = celpy.Environment()

        def compiled(expression: str) -> Any:
            return env.program(env.compile(expression))

        self.match = [(c["name"], compiled(c["expression"])) for c in spec["matchConditions"]]
        self.variables = [(v["name"], compiled(v["expression"])) for v in spec["variables"]]
        self.validations = [
            (
                compiled(v["expression"]),
                compiled(v["messageExpression"]) if "messageExpression" in v else None,
                v.get("message", ""),
            )
            for v in spec["validations"]
        ]

    def admit(self, request: dict[str, Any], new: dict[str, Any], old: dict[str, Any]) -> Admission:
        activation: dict[str, Any] = {
            "request": json_to_cel(request),
            "object": json_to_cel(new),
            "oldObject": json_to_cel(old),
        }
        for name, condition in self.match:
            value = condition.evaluate(activation)
            assert not isinstance(value, CELEvalError), (name, value)
            if not value:
                return Admission(matched=False)
        # each variable sees the ones before it, as kube-apiserver composes them
        variables = celpy.celtypes.MapType()
        for name, program in self.variables:
            activation["variables"] = variables
            value = program.evaluate(activation)
            assert not isinstance(value, CELEvalError), (name, value)
            variables = celpy.celtypes.MapType(
                {**variables, celpy.celtypes.StringType(name): value}
            )
        activation["variables"] = variables
        denials = []
        for validation, message_expression, message in self.validations:
            value = validation.evaluate(activation)
            assert not isinstance(value, CELEvalError), value  # Fail would deny
            if not value:
                denials.append(
                    str(message_expression.evaluate(activation)) if message_expression else message
                )
        return Admission(matched=True, denials=tuple(denials))


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(policy_document()["spec"])


def node(name: str = "n1") -> dict[str, Any]:
    """A Node as the API server holds it: the kubelet's conditions, a cloud label, another
    owner's taint and annotation, and the agent's annotation."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "41",
            "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "a"},
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                PRESSURE_ANNOTATION: '{"signals": {}}',
            },
        },
        "spec": {
            "podCIDR": "10.0.1.0/24",
            "taints": [{"key": "example.com/maintenance", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi"},
            "conditions": [
                {"type": t, "status": "False", "reason": "KubeletHasSufficient"}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
            ]
            + [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "NodeAgentMemoryPressure", "status": "False", "reason": "NoPressure"},
            ],
        },
    }


def request(
    *,
    username: str = AGENT,
    bound_to: str | None = "n1",
    name: str = "n1",
    sub_resource: str = "",
) -> dict[str, Any]:
    """An AdmissionRequest for an UPDATE (a PATCH arrives as one) of ``name``."""
    extra = {NODE_NAME_KEY: [bound_to], "authentication.kubernetes.io/node-uid": ["u"]}
    user: dict[str, Any] = {
        "username": username,
        "uid": "sa-uid",
        "groups": ["system:serviceaccounts"],
    }
    if bound_to is not None:
        user["extra"] = extra
    return {
        "uid": "r1",
        "kind": {"group": "", "version": "v1", "kind": "Node"},
        "resource": {"group": "", "version": "v1", "resource": "nodes"},
        "subResource": sub_resource,
        "name": name,
        "operation": "UPDATE",
        "userInfo": user,
    }


Change = Callable[[dict[str, Any]], None]


def add_own_taint(n: dict[str, Any]) -> None:
    n["spec"]["taints"].append(dict(OWN_TAINT, timeAdded="2026-11-26T20:00:00Z"))


def set_own_condition(n: dict[str, Any]) -> None:
    own = n["status"]["conditions"][-1]
    own.update(status="True", reason="MemoryThresholdMet")


def set_own_annotation(n: dict[str, Any]) -> None:
    n["metadata"]["annotations"][PRESSURE_ANNOTATION] = '{"signals": {"memory": 1}}'


def add_label(n: dict[str, Any]) -> None:
    n["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""


def change_label(n: dict[str, Any]) -> None:
    n["metadata"]["labels"]["topology.kubernetes.io/zone"] = "b"


def remove_label(n: dict[str, Any]) -> None:
    del n["metadata"]["labels"]["topology.kubernetes.io/zone"]


def add_annotation(n: dict[str, Any]) -> None:
    n["metadata"]["annotations"]["example.com/owner"] = "me"


def remove_annotation(n: dict[str, Any]) -> None:
    del n["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"]


def kubelet_not_ready(n: dict[str, Any]) -> None:
    n["status"]["conditions"][3].update(status="False", reason="KubeletNotReady")


def kubelet_memory_pressure(n: dict[str, Any]) -> None:
    n["status"]["conditions"][0]["status"] = "True"


def add_foreign_condition(n: dict[str, Any]) -> None:
    n["status"]["conditions"].append({"type": "NetworkUnavailable", "status": "True"})


def remove_foreign_taint(n: dict[str, Any]) -> None:
    n["spec"]["taints"] = [OWN_TAINT]


def add_foreign_taint(n: dict[str, Any]) -> None:
    n["spec"]["taints"].append({"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"})


def cordon(n: dict[str, Any]) -> None:
    n["spec"]["unschedulable"] = True


def apply(
    change: Change, base: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    old = base or node()
    new = copy.deepcopy(old)
    change(new)
    return new, old


@pytest.mark.parametrize(
    ("change", "sub_resource"),
    [
        pytest.param(add_own_taint, "", id="own-taint"),
        pytest.param(set_own_condition, "status", id="own-condition"),
        pytest.param(set_own_annotation, "", id="own-annotation"),
    ],
)
def test_the_agents_own_changes_on_its_own_node_are_allowed(
    policy: Policy, change: Change, sub_resource: str
) -> None:
    new, old = apply(change)
    assert policy.admit(request(sub_resource=sub_resource), new, old) == Admission(True)


def test_removing_its_own_taint_is_allowed(policy: Policy) -> None:
    tainted, _ = apply(add_own_taint)
    new, old = apply(lambda n: n["spec"].__setitem__("taints", n["spec"]["taints"][:1]), tainted)
    assert policy.admit(request(), new, old).allowed


def test_another_node_is_denied(policy: Policy) -> None:
    new, old = apply(add_own_taint, node("n2"))
    admission = policy.admit(request(bound_to="n1", name="n2"), new, old)
    assert admission.matched and not admission.allowed
    assert "only the Node its pod runs on (n1), not n2" in admission.denials[0]


def test_a_token_bound_to_no_node_is_denied(policy: Policy) -> None:
    new, old = apply(add_own_taint)
    admission = policy.admit(request(bound_to=None), new, old)
    assert not admission.allowed
    assert "its token is bound to no node" in admission.denials[0]


@pytest.mark.parametrize(
    ("change", "denial"),
    [
        pytest.param(add_label, "labels", id="add-label"),
        pytest.param(change_label, "labels", id="change-label"),
        pytest.param(remove_label, "labels", id="remove-label"),
        pytest.param(add_annotation, "own annotation", id="add-annotation"),
        pytest.param(remove_annotation, "own annotation", id="remove-annotation"),
        pytest.param(kubelet_not_ready, "never the kubelet's", id="kubelet-ready"),
        pytest.param(kubelet_memory_pressure, "never the kubelet's", id="kubelet-pressure"),
        pytest.param(add_foreign_condition, "never the kubelet's", id="foreign-condition"),
        pytest.param(remove_foreign_taint, "own taints", id="remove-foreign-taint"),
        pytest.param(add_foreign_taint, "own taints", id="add-foreign-taint"),
        pytest.param(cordon, "cordon", id="cordon"),
    ],
)
def test_anything_else_on_its_own_node_is_denied(
    policy: Policy, change: Change, denial: str
) -> None:
    for sub_resource in ("", "status"):
        new, old = apply(change)
        admission = policy.admit(request(sub_resource=sub_resource), new, old)
        assert admission.matched
        assert len(admission.denials) == 1, admission.denials
        assert denial in admission.denials[0]


def test_an_own_change_does_not_carry_a_forbidden_one_through(policy: Policy) -> None:
    def both(n: dict[str, Any]) -> None:
        add_own_taint(n)
        add_label(n)

    new, old = apply(both)
    assert not policy.admit(request(), new, old).allowed


@pytest.mark.parametrize(
    "username",
    [
        pytest.param("system:node:n1", id="kubelet"),
        pytest.param("system:serviceaccount:kube-system:node-controller", id="controller"),
        pytest.param("system:serviceaccount:other:nodeagent", id="namesake-elsewhere"),
        pytest.param("admin", id="admin"),
    ],
)
def test_other_users_are_not_matched(policy: Policy, username: str) -> None:
    new, old = apply(add_label, node("n2"))
    assert policy.admit(request(username=username, name="n2"), new, old) == Admission(False)


def test_the_agents_actual_writes_pass(policy: Policy) -> None:
    """The agent's real node-status actuator, against the in-memory API: every Node
    update it sends, seen as admission sees it (old and new object), is allowed."""
    from nodeagent.actuators.node_status import NodeStatusActuator
    from nodeagent.base.clock import FakeClock
    from tests.actuators.builders import decision
    from tests.doubles import kube as fake

    cluster = fake.FakeCluster()
    cluster.create("nodes", node())
    kube = fake.FakeKubeClient(cluster)
    writes: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    def recorded(method: str, sub_resource: str) -> Any:
        real = getattr(kube, method)

        def call(name: str, patch: Mapping[str, Any]) -> Any:
            old = cluster.get("nodes", "", name)
            result = real(name, patch)
            writes.append((sub_resource, cluster.get("nodes", "", name), old))
            return result

        return call

    kube.patch_node = recorded("patch_node", "")  # type: ignore[method-assign]
    kube.patch_node_status = recorded("patch_node_status", "status")  # type: ignore[method-assign]
    clock = FakeClock(start=100.0, wall_offset=1_800_000_000.0)
    actuator = NodeStatusActuator(
        kube,
        "n1",
        clock=clock,
        condition_types=DEFAULT_CONDITION_TYPES.values(),
        taint_keys=DEFAULT_TAINT_KEYS.values(),
    )
    for memory, disk in ((True, True), (False, True), (False, False)):
        result = actuator.apply(decision(memory=memory, disk=disk))
        assert not result.errors
        clock.advance(600.0)
    assert writes
    for sub_resource, new, old in writes:
        assert policy.admit(request(sub_resource=sub_resource), new, old).allowed


# --- the manifest itself ---------------------------------------------------------------------


def test_the_policys_own_keys_are_the_agents_defaults() -> None:
    spec = policy_document()["spec"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    env = celpy.Environment()

    def value(name: str) -> Any:
        return env.program(env.compile(variables[name])).evaluate({})

    assert list(value("ownConditionTypes")) == list(DEFAULT_CONDITION_TYPES.values())
    assert list(value("ownTaintKeys")) == list(DEFAULT_TAINT_KEYS.values())
    assert str(value("ownAnnotation")) == PRESSURE_ANNOTATION


def test_it_matches_the_agents_service_account_and_fails_closed() -> None:
    spec = policy_document()["spec"]
    account = files.one("ServiceAccount", "nodeagent")["metadata"]
    expected = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert expected == AGENT
    assert f"'{expected}'" in spec["matchConditions"][0]["expression"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["nodes", "nodes/status"],
        }
    ]
    [binding] = files.documents(CONFINEMENT / "binding.yaml")
    assert binding["spec"] == {
        "policyName": policy_document()["metadata"]["name"],
        "validationActions": ["Deny"],
    }


def test_the_component_is_on_in_the_agents_base() -> None:
    base = yaml.safe_load((files.MANIFESTS / "kustomization.yaml").read_text())
    assert "components/node-confinement" in base["components"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_policy_and_binding_are_valid_objects(version: str) -> None:
    for path in ("policy.yaml", "binding.yaml"):
        for doc in files.documents(CONFINEMENT / path):
            kubernetes_validate.validate(doc, version, strict=True)


# --- properties ------------------------------------------------------------------------------

_KEY = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-./", min_size=1, max_size=12)
_FOREIGN_KEY = _KEY.map(lambda k: "example.com/" + k)
_VALUE = st.text(alphabet="abcdefghij0123456789", max_size=6)
_EFFECT = st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"])
_STATUS = st.sampled_from(["True", "False", "Unknown"])


@st.composite
def own_changes(draw: st.DrawFn) -> Change:
    """Any mix of what the agent owns: its taints (added, removed, re-effected), its
    conditions (any status) and its annotation (any value)."""
    taints = draw(st.dictionaries(st.sampled_from(list(DEFAULT_TAINT_KEYS.values())), _EFFECT))
    conditions = draw(
        st.dictionaries(st.sampled_from(list(DEFAULT_CONDITION_TYPES.values())), _STATUS)
    )
    annotation = draw(st.none() | _VALUE)

    def change(n: dict[str, Any]) -> None:
        others = [t for t in n["spec"]["taints"] if not t["key"].startswith("nodeagent.io/")]
        n["spec"]["taints"] = others + [{"key": k, "effect": e} for k, e in taints.items()]
        kept = [c for c in n["status"]["conditions"] if not c["type"].startswith("NodeAgent")]
        n["status"]["conditions"] = kept + [{"type": t, "status": s} for t, s in conditions.items()]
        if annotation is None:
            n["metadata"]["annotations"].pop(PRESSURE_ANNOTATION, None)
        else:
            n["metadata"]["annotations"][PRESSURE_ANNOTATION] = annotation

    return change


@st.composite
def foreign_changes(draw: st.DrawFn) -> Change:
    """One change to something the agent does not own."""
    key, value = draw(_FOREIGN_KEY), draw(_VALUE)
    kind = draw(st.sampled_from(["label", "annotation", "taint", "condition", "kubelet-condition"]))

    def change(n: dict[str, Any]) -> None:
        if kind == "label":
            n["metadata"]["labels"][key] = value
        elif kind == "annotation":
            n["metadata"]["annotations"][key] = value
        elif kind == "taint":
            n["spec"]["taints"].append({"key": key, "effect": "NoExecute"})
        elif kind == "condition":
            n["status"]["conditions"].append({"type": key, "status": "True"})
        else:
            ready = next(c for c in n["status"]["conditions"] if c["type"] == "Ready")
            ready["status"] = "Unknown" if ready["status"] != "Unknown" else "False"

    return change


@settings(max_examples=60)
@given(own=own_changes(), sub_resource=st.sampled_from(["", "status"]))
def test_any_mix_of_its_own_keys_is_allowed(policy: Policy, own: Change, sub_resource: str) -> None:
    new, old = apply(own)
    assert policy.admit(request(sub_resource=sub_resource), new, old).allowed


@settings(max_examples=60)
@given(own=own_changes(), foreign=foreign_changes())
def test_any_foreign_change_is_denied_even_among_own_ones(
    policy: Policy, own: Change, foreign: Change
) -> None:
    def both(n: dict[str, Any]) -> None:
        own(n)
        foreign(n)

    new, old = apply(both)
    admission = policy.admit(request(), new, old)
    assert admission.matched and not admission.allowed
