"""The command line: the only place that reads argv, prints for humans and exits.

Each subcommand lives in :mod:`nodeagent.commands` as a module with ``register`` (adds
its parser) and ``run`` (does the work, returns the exit code). Exit codes: 0 success,
1 failure at run time, 2 bad usage or configuration (nothing was applied).

The subcommands are listed here by name and one-line summary, and a subcommand's module
is imported only when argparse reaches that subcommand: the modules between them pull in
pydantic, the Kubernetes client, grpc, numpy and the scheduler, and ``nodeagent
--version`` or ``--help`` has no use for any of them (docs/operations.md, "Start-up").
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NamedTuple

from nodeagent import __version__
from nodeagent.base import heap
from nodeagent.base.errors import ConfigError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class Command(NamedTuple):
    """A subcommand as ``nodeagent --help`` lists it. (A named tuple, not a dataclass:
    ``dataclasses`` imports ``inspect``, a tenth of what ``--version`` costs.)"""

    name: str
    summary: str
    """The line ``nodeagent --help`` shows for it."""
    module: str
    """Registers the subcommand's parser and runs it; imported when the command is used."""


COMMANDS = (
    Command(
        "signals",
        "print the node's pressure signals and per-pod usage",
        "nodeagent.commands.signals",
    ),
    Command("config", "configuration tools", "nodeagent.commands.config_check"),
    Command(
        "simulate",
        "replay a recorded trace through the eviction engine",
        "nodeagent.commands.simulate",
    ),
    Command("run", "run the agent on this node", "nodeagent.commands.run"),
    Command(
        "schedule",
        "plan where pending pods would be scheduled, and why not elsewhere",
        "nodeagent.commands.schedule",
    ),
    Command(
        "scheduler",
        "schedule pods in a live cluster (kube-scheduler's framework, pressure-aware)",
        "nodeagent.commands.scheduler",
    ),
    Command(
        "extender",
        "serve kube-scheduler's extender protocol (filter, prioritize) by node pressure",
        "nodeagent.commands.extender",
    ),
)


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The subcommands, known by name and summary until one is chosen; then its module
    is imported and its ``register`` adds the real parser before argparse hands it the
    rest of the command line (its own ``--help`` included)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unloaded: dict[str, Command] = {}
        # What argparse checks a chosen name against, and lists when it is unknown.
        self.choices: dict[str, Command] = {}

    def add_command(self, command: Command) -> None:
        self._choices_actions.append(self._ChoicesPseudoAction(command.name, (), command.summary))
        self._unloaded[command.name] = command
        self.choices[command.name] = command

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        command = self._unloaded.pop(values[0], None)
        if command is not None:
            _import(command.module).register(self)
        super().__call__(parser, namespace, values, option_string)


def _import(module: str) -> ModuleType:
    """``module``, imported with the garbage collector off, and what the import built
    frozen (:func:`nodeagent.base.heap.building`).

    A subcommand's imports build tens of thousands of objects (classes, schemas,
    descriptors) that live as long as the process; collecting while they are built is
    a hundred young collections that free nothing (15-20 ms of ``nodeagent signals``),
    and left in the collected generations they would be walked again by every full
    collection of a long-running command. Only the first import of a module does this."""
    if module in sys.modules:
        return sys.modules[module]
    with heap.building():
        return importlib.import_module(module)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodeagent",
        description="Node pressure and eviction agent for Kubernetes, and its scheduler.",
    )
    parser.add_argument("--version", action="version", version=f"nodeagent {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", action=_Commands
    )
    assert isinstance(commands, _Commands)
    for command in COMMANDS:
        commands.add_command(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except ConfigError as exc:
        print(f"nodeagent: configuration error:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader stopped reading (`nodeagent simulate ... | head`): the work is done and
        # this is no error. Point stdout at /dev/null so the interpreter's final flush does
        # not raise again with a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return code
