"""The package's layers: which package may import which, checked over the source.

The agent and the scheduler are two programs in one house. What both use lives below
both (``base``, ``k8s``, ``kube``, ``serving``); each program's packages import downward
and never across, and the command line sits on top. An import that points up or across
fails here with the file, the line and the rule it breaks, so the layout stays what the
README's diagram says it is. Imports inside functions count as much as module-level ones.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nodeagent"

SHARED = frozenset({"base", "k8s", "kube", "serving"})
AGENT_PARTS = frozenset({"model", "cri", "signals", "triggers", "eviction", "actuators", "reclaim"})

MAY_IMPORT: Mapping[str, frozenset[str]] = {
    # below both programs
    "base": frozenset(),
    "k8s": frozenset({"base"}),
    "kube": frozenset({"base", "k8s"}),
    "serving": frozenset({"base", "k8s", "kube"}),
    # the agent: signals -> observations -> evaluation -> decisions -> actuators
    "model": frozenset({"base", "k8s"}),
    "cri": frozenset({"base"}),
    "signals": frozenset({"base", "k8s", "model", "cri"}),
    "triggers": frozenset({"base", "k8s"}),
    "eviction": frozenset({"base", "k8s", "model"}),
    "actuators": frozenset({"base", "k8s", "kube", "model"}),
    "reclaim": frozenset({"base", "k8s", "model", "cri", "eviction", "actuators"}),
    "agent": SHARED | AGENT_PARTS,
    # the scheduler, and the extender server that serves its NodePressure verdicts
    "scheduler": SHARED,
    "extender": SHARED | {"scheduler"},
    # the command line, over everything
    "commands": SHARED | AGENT_PARTS | {"agent", "scheduler", "extender"},
    "cli": frozenset({"base", "commands"}),
    "__main__": frozenset({"cli"}),
}
"""Package (or top-level module) -> what it may import besides itself and ``nodeagent``
(whose ``__init__`` holds only the version)."""


@dataclass(frozen=True)
class Import:
    source: Path
    line: int
    importer: str
    imported: str
    """The top-level package or module under ``nodeagent``; ``tests`` for the test tree."""


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "tests":
        return "tests"
    if parts[0] != "nodeagent":
        return None
    return parts[1] if len(parts) > 1 else ""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, text: str | None = None) -> Iterator[Import]:
    """The ``nodeagent`` and ``tests`` imports of one module (``text``: its source, else
    the file's)."""
    module = _module_name(path)
    importer = _layer(module)
    assert importer is not None
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    source = path.read_text() if text is None else text
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                targets = [".".join([*base, node.module] if node.module else base)]
            else:
                targets = [node.module or ""]
            if targets == ["nodeagent"]:  # from nodeagent import x: x is the module
                targets = [f"nodeagent.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            imported = _layer(target)
            if imported is not None and imported not in ("", "__version__"):
                yield Import(path, node.lineno, importer, imported)


def _all_imports() -> list[Import]:
    return [found for path in sorted(PACKAGE.rglob("*.py")) for found in _imports(path)]


def test_every_package_has_a_rule() -> None:
    layers = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    layers -= {"__init__", "__pycache__", "py"}
    assert layers <= set(MAY_IMPORT), f"no layering rule for {sorted(layers - set(MAY_IMPORT))}"


def test_no_import_points_up_or_across() -> None:
    broken = [
        f"{found.source.relative_to(ROOT)}:{found.line}: {found.importer} imports "
        f"{found.imported} (may import: {', '.join(sorted(MAY_IMPORT[found.importer])) or '-'})"
        for found in _all_imports()
        if found.imported != found.importer
        and found.imported not in MAY_IMPORT.get(found.importer, frozenset())
    ]
    assert not broken, "\n".join(broken)


def test_the_checker_sees_upward_and_relative_imports() -> None:
    probe = PACKAGE / "base" / "probe.py"
    text = "from nodeagent.agent import runtime\nimport nodeagent.kube.http\nfrom . import clock\n"
    found = [(f.importer, f.imported) for f in _imports(probe, text)]
    assert found == [("base", "agent"), ("base", "kube"), ("base", "base")]


def test_the_product_imports_no_test_double() -> None:
    assert not [found for found in _all_imports() if found.imported == "tests"]


def test_the_wheel_ships_no_test_double() -> None:
    """The packages setuptools installs (pyproject's ``packages.find``) hold the product
    only: the fakes live in ``tests/doubles``."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    packages = setuptools.find_packages(str(ROOT), **find["find"])
    assert "nodeagent.k8s" in packages and "nodeagent.extender" in packages
    assert not [p for p in packages if not p.startswith("nodeagent")]
    shipped = [
        path.stem
        for package in packages
        for path in (ROOT / package.replace(".", "/")).glob("*.py")
    ]
    assert not [name for name in shipped if "fake" in name or name == "fixtures"]
