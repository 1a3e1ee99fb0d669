"""Every object manifests/ ships, rendered as ``kubectl apply -k`` renders it, accepted by
the real apiserver in a server-side dry run with strict field validation: a field the API
rejects (unknown, misspelt, invalid, refused by admission) fails here, which the offline
schema checks in tests/deploy can only approximate."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane import objects as o
from tests.controlplane.cluster import ControlPlane
from tests.deploy.test_kustomize import COMPONENTS, render
from tests.deploy.test_manifests import CRD_KINDS

pytestmark = pytest.mark.controlplane

MONITORING_GROUP = "monitoring.coreos.com"


def open_crd(kind: str, plural: str) -> dict[str, Any]:
    """A stand-in for the Prometheus operator's CRD: the kind exists, its spec is not
    checked (tests/deploy checks the subset these manifests use against a strict schema)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{MONITORING_GROUP}"},
        "spec": {
            "group": MONITORING_GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def prepared(control_plane: ControlPlane) -> ControlPlane:
    """The namespaces the manifests create, and the monitoring CRDs, made for real: a dry
    run creates nothing, so what the other objects need must exist already."""
    control_plane.apply(
        [
            open_crd("ServiceMonitor", "servicemonitors"),
            open_crd("PrometheusRule", "prometheusrules"),
        ]
    )
    control_plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        f"crd/servicemonitors.{MONITORING_GROUP}",
        f"crd/prometheusrules.{MONITORING_GROUP}",
    )
    namespaces = [
        doc
        for directory in (o.MANIFESTS, o.MANIFESTS / "scheduler")
        for doc in o.kustomize(directory)
        if doc["kind"] == "Namespace"
    ]
    assert {ns["metadata"]["name"] for ns in namespaces} == {
        "nodeagent-system",
        "nodeagent-scheduler",
    }
    control_plane.apply(namespaces)
    return control_plane


def dry_run(plane: ControlPlane, documents: list[dict[str, Any]]) -> str:
    return plane.apply(documents, dry_run=True)


class TestShippedObjects:
    @pytest.mark.parametrize("components", [(), tuple(COMPONENTS)], ids=["base", "all-components"])
    def test_the_agents_base_and_components_are_accepted(
        self, prepared: ControlPlane, tmp_path: Path, components: tuple[str, ...]
    ) -> None:
        documents = render(tmp_path, components)
        if components:
            assert {doc["kind"] for doc in documents} >= CRD_KINDS
        output = dry_run(prepared, documents)
        assert output.count("(server dry run)") == len(documents), output

    @pytest.mark.parametrize("directory", ["scheduler", "extender"])
    def test_the_scheduler_and_the_extender_are_accepted(
        self, prepared: ControlPlane, directory: str
    ) -> None:
        documents = o.kustomize(o.MANIFESTS / directory)
        output = dry_run(prepared, documents)
        assert output.count("(server dry run)") == len(documents), output


class TestTheDryRunCanFail:
    def test_a_misspelt_field_is_rejected(self, prepared: ControlPlane, tmp_path: Path) -> None:
        [daemonset] = [d for d in render(tmp_path, ()) if d["kind"] == "DaemonSet"]
        broken = copy.deepcopy(daemonset)
        context = broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]
        context["readOnlyRootFileSystem"] = context.pop("readOnlyRootFilesystem")
        with pytest.raises(RuntimeError, match="readOnlyRootFileSystem"):
            dry_run(prepared, [broken])

    def test_an_invalid_value_is_rejected(self, prepared: ControlPlane) -> None:
        [account] = [
            d for d in o.kustomize(o.MANIFESTS / "scheduler") if d["kind"] == "ServiceAccount"
        ]
        broken = copy.deepcopy(account)
        broken["metadata"]["name"] = "Not_A_DNS_Name"
        with pytest.raises(RuntimeError, match="Not_A_DNS_Name"):
            dry_run(prepared, [broken])
