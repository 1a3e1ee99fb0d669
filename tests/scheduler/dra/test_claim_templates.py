"""ResourceClaimTemplates: the reason a pod waits for its claim, the planner's claims made
from templates as the resourceclaim controller makes them, and the live informer."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.base.errors import ConfigError
from nodeagent.kube import client
from nodeagent.scheduler import (
    api,
    claim_templates,
    config,
    objects,
    planner,
    registry,
    resource_claims,
)
from nodeagent.scheduler.live import resources
from nodeagent.scheduler.plugins import dynamic_resources
from nodeagent.scheduler.resource_claims import ResourceCatalog
from tests.doubles.kube import FakeCluster, FakeKubeClient

DRIVER = "gpu.example.com"
SPEC = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}


def template_object(name: str = "one-gpu", namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": SPEC,
        },
    }


def pod_object(name: str, template: str = "one-gpu", node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
    }


def cluster_objects(devices: int, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "n1-gpu"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
            },
        },
        *extra,
    ]


# --- parsing ------------------------------------------------------------------------------


def test_template_parsed() -> None:
    template = claim_templates.parse_claim_template(template_object())
    assert template.key == "default/one-gpu"
    assert template.labels == {"team": "a"}
    assert template.annotations == {"note": "x"}
    assert template.spec == SPEC


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        ({"metadata": {"name": "t"}, "spec": {"spec": SPEC}}, "metadata.namespace"),
        ({"metadata": {"name": "t", "namespace": "d"}, "spec": {}}, "spec.spec is required"),
        (
            {
                "metadata": {"name": "t", "namespace": "d"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu"}]}}},
            },
            "ResourceClaimTemplate d/t: spec.spec:",
        ),
    ],
)
def test_bad_template_refused(obj: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        claim_templates.parse_claim_template(obj)


# --- the reason ---------------------------------------------------------------------------


def _pod(name: str = "p", template: str = "one-gpu") -> api.Pod:
    return objects.read_cluster([pod_object(name, template)]).pods[0]


def test_reason_untracked_is_kube_schedulers() -> None:
    pod = _pod()
    store = claim_templates.TemplateStore()
    reason = claim_templates.not_created_reason(pod, pod.resource_claims[0], store)
    assert reason == 'pod "default/p": ResourceClaim not created yet'


def test_reason_template_missing_or_present() -> None:
    pod = _pod()
    store = claim_templates.TemplateStore(tracked=True)
    entry = pod.resource_claims[0]
    assert claim_templates.not_created_reason(pod, entry, store) == (
        'pod "default/p": ResourceClaim not created yet: ResourceClaimTemplate'
        ' "default/one-gpu" not found, the resourceclaim controller cannot create it'
    )
    store.set(claim_templates.parse_claim_template(template_object()))
    assert claim_templates.not_created_reason(pod, entry, store) == (
        'pod "default/p": ResourceClaim not created yet: waiting for the resourceclaim'
        ' controller to create it from ResourceClaimTemplate "default/one-gpu"'
    )
    # a template of that name in another namespace is not the pod's
    store.set(claim_templates.parse_claim_template(template_object()), present=False)
    store.set(claim_templates.parse_claim_template(template_object(namespace="other")))
    assert "not found" in claim_templates.not_created_reason(pod, entry, store)


def test_plugin_pre_enqueue_says_why() -> None:
    """PreEnqueue (and PreFilter) carry the reason: what FailedScheduling and --explain show."""
    catalog = ResourceCatalog()
    catalog.templates.tracked = True
    claims, reason = dynamic_resources.pod_claims(_pod(), catalog)
    assert claims == []
    assert reason.endswith(
        'ResourceClaimTemplate "default/one-gpu" not found, the resourceclaim'
        " controller cannot create it"
    )


# --- the generated name -------------------------------------------------------------------


def test_generated_name_as_the_controller_bases_it() -> None:
    name = claim_templates.generated_name("train-0", "gpu")
    assert name.startswith("train-0-gpu-") and len(name) == len("train-0-gpu-") + 5
    assert name == claim_templates.generated_name("train-0", "gpu")  # repeatable
    other = claim_templates.generated_name("train-0", "gpu", [name])
    assert other != name and other.startswith("train-0-gpu-")


@given(st.text("abcdefgh-", min_size=1, max_size=63), st.text("abcdefgh-", min_size=1, max_size=63))
def test_generated_name_fits_63_characters(pod: str, claim: str) -> None:
    """The controller's truncation keeps both parts (in proportion) and room for the suffix."""
    name = claim_templates.generated_name(pod, claim)
    assert len(name) <= 63
    base = name[:-5]
    if len(f"{pod}-{claim}-") <= claim_templates.MAX_BASE_LENGTH:
        assert base == f"{pod}-{claim}-"
    else:
        assert len(base) <= claim_templates.MAX_BASE_LENGTH
        assert base.startswith(pod[: len(pod) * 57 // len(f"{pod}-{claim}-")])


# --- the planner ----------------------------------------------------------------------------


def _plan(items: list[dict[str, Any]]) -> tuple[dict[str, planner.Placement], ResourceCatalog]:
    cluster = objects.read_cluster(items)
    catalog = ResourceCatalog(cluster.resources)
    configuration = config.parse_configuration(None, registry.in_tree_registry())
    plan = planner.plan(cluster, configuration, seed=1, now=time.time(), resources=catalog)
    return {p.pod: p for p in plan.placements}, catalog


def test_planner_makes_the_claim_from_its_template() -> None:
    """A pod whose claim the controller has not made is planned from its template: the
    claim made as the controller makes it, allocated and reserved for the pod; the next
    pod sees its device taken."""
    got, catalog = _plan(cluster_objects(1, template_object(), pod_object("a"), pod_object("b")))
    assert (got["default/a"].node, got["default/a"].status) == ("n1", planner.Outcome.SCHEDULED)
    assert got["default/b"].status is planner.Outcome.UNSCHEDULABLE
    assert "cannot allocate all claims" in got["default/b"].message
    claims = {c.controller_uid: c for c in catalog.claims()}
    claim = claims["uid-a"]
    assert claim.name.startswith("a-gpu-")
    assert claim.allocated and [c.name for c in claim.reserved_for] == ["a"]
    meta = claim.raw["metadata"]
    assert meta["labels"] == {"team": "a"}
    assert meta["annotations"] == {"note": "x", claim_templates.POD_CLAIM_NAME_ANNOTATION: "gpu"}
    assert meta["ownerReferences"][0]["controller"] is True
    assert not claims["uid-b"].allocated


def test_planner_names_a_missing_template() -> None:
    got, _ = _plan(cluster_objects(1, template_object(), pod_object("a", template="nope")))
    assert got["default/a"].status is planner.Outcome.GATED
    assert got["default/a"].message == (
        'pod "default/a": ResourceClaim not created yet: ResourceClaimTemplate'
        ' "default/nope" not found, the resourceclaim controller cannot create it'
    )


def test_planner_without_templates_keeps_kube_schedulers_message() -> None:
    got, _ = _plan(cluster_objects(1, pod_object("a")))
    assert got["default/a"].status is planner.Outcome.GATED
    assert got["default/a"].message == 'pod "default/a": ResourceClaim not created yet'


def test_duplicate_template_refused() -> None:
    with pytest.raises(
        ConfigError, match="ResourceClaimTemplate default/one-gpu appears more than once"
    ):
        objects.read_cluster(cluster_objects(1, template_object(), template_object()))


# --- the live informer ----------------------------------------------------------------------


def _until(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    event = threading.Event()
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        event.wait(0.01)


def test_informer_tracks_templates() -> None:
    """Listed, then watched: added, replaced, deleted; tracked once listed; never part of
    the group's sync (the scheduler does not wait for it)."""
    cluster = FakeCluster()
    cluster.create(client.ResourceKind.RESOURCE_CLAIM_TEMPLATES.value, template_object())
    catalog = ResourceCatalog()
    informers = resources.ResourceInformers(
        FakeKubeClient(cluster), catalog, lambda *_: None, watch_timeout=5
    )
    assert informers.templates not in informers.informers
    informers.start()
    try:
        _until(lambda: catalog.templates.tracked and informers.synced)
        assert catalog.templates.get("default", "one-gpu") is not None
        kind = client.ResourceKind.RESOURCE_CLAIM_TEMPLATES.value
        cluster.create(kind, template_object("two"))
        _until(lambda: catalog.templates.get("default", "two") is not None)
        cluster.delete(kind, "default", "one-gpu")
        _until(lambda: catalog.templates.get("default", "one-gpu") is None)
        unreadable = {**template_object("two"), "spec": {}}  # no spec.spec: skipped, and
        cluster.replace(kind, "default", "two", unreadable)  # the old version gone with it
        _until(lambda: catalog.templates.get("default", "two") is None)
    finally:
        informers.stop(5.0)


def test_only_the_pods_that_may_wait_for_a_claim_are_rechecked() -> None:
    """A claim added releases its owner (made from a template) and the pods naming it:
    the live scheduler runs PreEnqueue for those alone, not for every pod held."""
    claim = resource_claims.parse_resource_claim(
        {
            "metadata": {
                "name": "a-gpu-x1",
                "namespace": "default",
                "uid": "c1",
                "ownerReferences": [
                    {"kind": "Pod", "name": "a", "uid": "uid-a", "controller": True}
                ],
            },
            "spec": SPEC,
        }
    )
    waits = resources.may_wait_for(claim)
    assert waits is not None
    owner = _pod("a")
    named = objects.read_cluster(
        [
            {
                **pod_object("b"),
                "spec": {
                    "containers": [{"name": "c", "image": "i"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "a-gpu-x1"}],
                },
            }
        ]
    ).pods[0]
    other = _pod("c")
    elsewhere = objects.read_cluster(
        [{**pod_object("a"), "metadata": {"name": "a", "namespace": "x", "uid": "uid-a"}}]
    ).pods[0]
    assert [waits(p) for p in (owner, named, other, elsewhere)] == [True, True, False, False]
    assert resources.may_wait_for(object()) is None
