"""Where the deployment files are, and how the tests read them."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from kubernetes.utils import parse_quantity

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
COMPONENTS = MANIFESTS / "components"
MONITORING = COMPONENTS / "monitoring"
SYSTEMD = REPO / "systemd"
DASHBOARD = MONITORING / "nodeagent-dashboard.json"
CONTAINERFILE = REPO / "Containerfile"

KUSTOMIZE_FILES = {"kustomization.yaml"}
CONFIG_FILES = {"config.yaml", "kube-scheduler-config.yaml"}
"""Not Kubernetes objects: kustomize's own files, the agent's configuration and the
extender's entry for kube-scheduler's configuration."""
EXTENDER = MANIFESTS / "extender"


def documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document of ``path``."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def object_files() -> list[Path]:
    """Every manifest file holding Kubernetes objects, base and components."""
    return sorted(
        path
        for path in MANIFESTS.rglob("*.yaml")
        if path.name not in KUSTOMIZE_FILES | CONFIG_FILES
    )


def objects() -> list[dict[str, Any]]:
    return [doc for path in object_files() for doc in documents(path)]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    """The single object of ``kind`` (and ``name``) among the manifests."""
    found = [
        doc
        for doc in objects()
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def agent_container() -> dict[str, Any]:
    [container] = one("DaemonSet", "nodeagent")["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = container
    return result


def quantity(text: str | int) -> Decimal:
    """A Kubernetes quantity (``128Mi``, ``25m``) as a number."""
    value: Decimal = parse_quantity(text)  # type: ignore[no-untyped-call]
    return value
