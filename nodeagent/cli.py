"""The command line: the only place that reads argv, prints for humans and exits.

Each subcommand lives in :mod:`nodeagent.commands` as a module with ``register`` (adds
its parser) and ``run`` (does the work, returns the exit code). Exit codes: 0 success,
1 failure at run time, 2 bad usage or configuration (nothing was applied).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from nodeagent import __version__
from nodeagent.commands import (
    config_check,
    extender,
    run,
    schedule,
    scheduler,
    signals,
    simulate,
)
from nodeagent.errors import ConfigError

COMMANDS = (signals, config_check, simulate, run, schedule, scheduler, extender)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodeagent",
        description="Node pressure and eviction agent for Kubernetes, and its scheduler.",
    )
    parser.add_argument("--version", action="version", version=f"nodeagent {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
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
