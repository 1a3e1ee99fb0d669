"""The chart (charts/nodeagent) as an operator drives it: the real ``helm`` that
``tests/helm/build.sh`` builds from the pinned helm.sh/helm/v4 module, run in a Helm home
of its own (no repository, plugin or registry login of this machine's is read).

The tests that need Helm skip, in one line saying why, when it is neither built nor
buildable (no Go toolchain)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHART = REPO / "charts" / "nodeagent"
BUILD_SCRIPT = HERE / "build.sh"
MODULE = "helm.sh/helm/v4"
RELEASE = "nodeagent"
NAMESPACE = "nodeagent-system"
"""The release and namespace whose names are the kustomize trees' own."""


def pinned_version() -> str:
    """The helm.sh/helm/v4 release go.mod pins (``v4.3.2``)."""
    for line in (HERE / "go.mod").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == MODULE:
            return words[1]
    raise AssertionError(f"go.mod requires no {MODULE}")


def binary() -> Path:
    """Where build.sh puts ``helm`` (the same rule as the script's)."""
    override = os.environ.get("NODEAGENT_HELM_DIR")
    if override:
        return Path(override) / "helm"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "nodeagent" / "helm" / pinned_version() / "helm"


def unavailable() -> str | None:
    """Why ``helm`` cannot run here, in one line; None when it can."""
    if os.access(binary(), os.X_OK):
        return None
    if shutil.which("go") is None:
        return "no Go toolchain: helm cannot be built from its module (tests/helm/build.sh)"
    return f"helm not built in {binary().parent}: run {BUILD_SCRIPT.relative_to(REPO)}"


def require() -> Path:
    """``helm``'s path, or skip the test saying why."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    return binary()


_HOME = tempfile.TemporaryDirectory(prefix="nodeagent-helm-home-")
"""Helm's config, cache and data for this process, removed at its exit."""


def run(
    *args: str, kubeconfig: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` without raising: tests assert on the exit code and the output."""
    home = _HOME.name
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "HELM_CACHE_HOME": f"{home}/cache",
        "HELM_CONFIG_HOME": f"{home}/config",
        "HELM_DATA_HOME": f"{home}/data",
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [str(require()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )


def values_file(directory: Path, values: Mapping[str, Any], name: str = "values") -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return path


def template_args(
    values: Mapping[str, Any], directory: Path, *, release: str, namespace: str
) -> list[str]:
    args = [release, str(CHART), f"--namespace={namespace}"]
    if values:
        args.append(f"--values={values_file(directory, values)}")
    return args


def render(
    directory: Path,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    extra: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """``helm template``'s objects for ``values``; fails the test with Helm's message."""
    done = run(
        "template",
        *template_args(values or {}, directory, release=release, namespace=namespace),
        *extra,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def refusal(directory: Path, values: Mapping[str, Any], *, command: str = "template") -> str:
    """Helm's error for ``values`` (``helm template`` or ``lint``), asserting it failed."""
    if command == "lint":
        done = run("lint", "--strict", str(CHART), f"--values={values_file(directory, values)}")
    else:
        done = run(
            "template",
            *template_args(values, directory, release=RELEASE, namespace=NAMESPACE),
        )
    assert done.returncode != 0, f"helm {command} accepted {values}:\n{done.stdout[:2000]}"
    return done.stderr + done.stdout


def one(documents: Sequence[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        doc
        for doc in documents
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(workload: Mapping[str, Any]) -> dict[str, Any]:
    [first] = workload["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = first
    return result
