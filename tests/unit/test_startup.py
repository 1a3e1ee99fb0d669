"""Start-up of the command line: what each command imports, and ``--help`` from bytecode.

``nodeagent --version`` once took seconds because every subcommand imported every other's
dependencies, and building the parser parsed the settings modules' source for the field
docs. These tests fail when a heavy import creeps back into a command that has no use for
it, and when ``--help`` needs the source files again.
"""

from __future__ import annotations

import compileall
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodeagent import cli
from nodeagent.agent.config import NodeAgentConfiguration

ROOT = Path(__file__).resolve().parents[2]

# Run the CLI as the console script does, then write the names of the imported modules.
MODULES_AFTER = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.__stderr__))
from nodeagent.cli import main
sys.exit(main(sys.argv[1:]))
"""
BUILD_PARSER_ONLY = """
import json, sys
from nodeagent import cli
cli.build_parser()
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

DEPENDENCIES = ("kubernetes", "numpy", "grpc", "pydantic", "pydantic_settings", "yaml")
"""What the bare command line must not import: nodeagent's heavy third-party
dependencies (together most of a second)."""
OWN_HEAVY = ("nodeagent.scheduler", "nodeagent.agent.runtime", "nodeagent.kube.http")


def run_python(
    code: str, *argv: str, cwd: Path, path: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    # cwd: `python -c` puts the working directory first on the path; it must not be a
    # checkout other than `path`.
    env = {**os.environ, "PYTHONPATH": str(path), "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def imported(result: subprocess.CompletedProcess[str]) -> set[str]:
    """The module names the child printed last on stderr."""
    return set(json.loads(result.stderr.strip().splitlines()[-1]))


def offending(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


class TestStartupImports:
    """Each command imports what it uses, and nothing it does not."""

    def test_building_the_parser_imports_no_subcommand(self, tmp_path: Path) -> None:
        modules = imported(run_python(BUILD_PARSER_ONLY, cwd=tmp_path))
        assert offending(modules, (*DEPENDENCIES, *OWN_HEAVY, "nodeagent.commands")) == []
        assert "nodeagent.agent.config" not in modules

    @pytest.mark.parametrize(
        "argv",
        [
            pytest.param(["--version"], id="version"),
            pytest.param(["--help"], id="help"),
            pytest.param([], id="no-command"),
            pytest.param(["no-such-command"], id="unknown-command"),
        ],
    )
    def test_the_bare_command_line_imports_no_dependency(
        self, argv: list[str], tmp_path: Path
    ) -> None:
        result = run_python(MODULES_AFTER, *argv, cwd=tmp_path)
        assert result.returncode in (0, 2)
        modules = imported(result)
        assert offending(modules, (*DEPENDENCIES, *OWN_HEAVY, "nodeagent.commands")) == []

    @pytest.mark.parametrize(
        ("argv", "unused"),
        [
            # grpc: the collector's modules share value types with the CRI client
            pytest.param(["signals", "--help"], ("kubernetes", "numpy", *OWN_HEAVY), id="signals"),
            pytest.param(["run", "--help"], ("kubernetes", "numpy", "grpc", *OWN_HEAVY), id="run"),
            pytest.param(
                ["config", "check", "--help"],
                ("kubernetes", "grpc", *OWN_HEAVY),
                id="config-check",
            ),
            pytest.param(["simulate", "--help"], ("kubernetes", "grpc", *OWN_HEAVY), id="simulate"),
        ],
    )
    def test_a_commands_help_imports_only_what_the_command_uses(
        self, argv: list[str], unused: tuple[str, ...], tmp_path: Path
    ) -> None:
        result = run_python(MODULES_AFTER, *argv, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert offending(imported(result), unused) == []

    def test_signals_reads_the_node_without_the_cluster_or_the_scheduler(
        self, tmp_path: Path
    ) -> None:
        host = tmp_path / "host"
        host.mkdir()
        result = run_python(
            MODULES_AFTER,
            "signals",
            "--output",
            "json",
            "--host-root",
            str(host),
            "--container-runtime-endpoint",
            f"unix://{tmp_path}/no-runtime.sock",
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        assert "memory.available" in json.loads(result.stdout)["signals"]
        modules = imported(result)
        assert offending(modules, ("kubernetes", "numpy", *OWN_HEAVY)) == []
        assert "grpc" in modules  # it asks the runtime where imagefs is


def help_texts() -> list[list[str]]:
    """Every ``--help`` there is: the top level, each command, each ``config`` tool."""
    argvs = [["--help"]] + [[command.name, "--help"] for command in cli.COMMANDS]
    return [*argvs, ["config", "check", "--help"]]


class TestHelpFromBytecode:
    """``--help`` needs no source: an image may ship bytecode only (and parsing source to
    find field docs once crashed a CI run inside ``inspect.findsource``)."""

    @pytest.fixture(scope="class")
    @classmethod
    def bytecode_only(cls, tmp_path_factory: pytest.TempPathFactory) -> Path:
        root = tmp_path_factory.mktemp("bytecode")
        package = root / "nodeagent"
        shutil.copytree(ROOT / "nodeagent", package, ignore=shutil.ignore_patterns("*.pyc"))
        # legacy: each .pyc beside its module, where the import system finds it alone
        assert compileall.compile_dir(package, quiet=1, legacy=True)
        for source in package.rglob("*.py"):
            source.unlink()
        assert not list(package.rglob("*.py"))
        return root

    @pytest.mark.parametrize("argv", help_texts(), ids=" ".join)
    def test_help_is_the_same_without_source(
        self,
        argv: list[str],
        bytecode_only: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setenv("COLUMNS", "100")
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 0
        from_source = capsys.readouterr().out
        shipped = run_python(MODULES_AFTER, *argv, cwd=bytecode_only, path=bytecode_only)
        assert shipped.returncode == 0, shipped.stderr
        assert shipped.stdout == from_source

    def test_field_help_comes_through_without_source(self, bytecode_only: Path) -> None:
        shipped = run_python(
            MODULES_AFTER, "signals", "--help", cwd=bytecode_only, path=bytecode_only
        )
        summary = NodeAgentConfiguration.model_fields["host_root"].description
        assert summary
        words = " ".join(shipped.stdout.split())
        assert "[hostRoot] " + " ".join(summary.split("\n\n")[0].split()) in words


class TestCommandIndex:
    """The commands listed by the CLI are the ones their modules register."""

    @pytest.mark.parametrize("command", cli.COMMANDS, ids=lambda c: c.name)
    def test_each_module_registers_its_command(
        self, command: cli.Command, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as exited:
            cli.build_parser().parse_args([command.name, "--help"])
        assert exited.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: nodeagent {command.name} ")

    def test_the_top_level_help_lists_each_command_once(self) -> None:
        parser = cli.build_parser()
        parser.parse_known_args(["run"])  # a loaded command must not be listed twice
        text = " ".join(parser.format_help().split())
        for command in cli.COMMANDS:
            assert text.count(command.summary) == 1

    def test_an_unknown_command_names_the_known_ones(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as exited:
            cli.main(["bogus"])
        assert exited.value.code == 2
        error = capsys.readouterr().err
        assert "invalid choice: 'bogus'" in error
        for command in cli.COMMANDS:
            assert repr(command.name) in error


class TestFieldDescriptions:
    """Every configuration field's flag help comes from its description: a field
    documented only by an attribute docstring (which Python drops from bytecode) would
    get an empty help line."""

    @pytest.mark.parametrize("name", list(NodeAgentConfiguration.model_fields))
    def test_every_field_has_a_description(self, name: str) -> None:
        description = NodeAgentConfiguration.model_fields[name].description
        assert description is not None and description.strip()


IMPORT_A_COMMAND = """
import gc, json, sys
from nodeagent import cli
collections = []
gc.callbacks.append(lambda phase, info: phase == "stop" and collections.append(info))
if sys.argv[1] == "disabled":
    gc.disable()
frozen = gc.get_freeze_count()
cli._import("nodeagent.commands.signals")
print(json.dumps({
    "collections": len(collections),
    "enabled": gc.isenabled(),
    "newly_frozen": gc.get_freeze_count() - frozen,
    "imported": "nodeagent.agent.config" in sys.modules,
}))
"""


class TestImportingACommand:
    """A subcommand's module is imported with the collector off (its imports build
    objects for the life of the process: collecting among them frees nothing), and what
    it built is frozen; a collector the caller had turned off stays off."""

    def run(self, mode: str, tmp_path: Path) -> dict[str, Any]:
        result = run_python(IMPORT_A_COMMAND, mode, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        answer: dict[str, Any] = json.loads(result.stdout)
        return answer

    def test_no_collection_during_the_import_and_its_objects_frozen(self, tmp_path: Path) -> None:
        answer = self.run("enabled", tmp_path)
        assert answer["imported"] and answer["collections"] == 0
        assert answer["enabled"] and answer["newly_frozen"] > 10_000

    def test_a_disabled_collector_stays_off_and_nothing_is_frozen(self, tmp_path: Path) -> None:
        answer = self.run("disabled", tmp_path)
        assert answer["imported"] and answer["collections"] == 0
        assert not answer["enabled"] and answer["newly_frozen"] == 0
