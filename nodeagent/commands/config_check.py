"""`nodeagent config_check` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    config = subparsers.add_parser("config", help="configuration tools")
    tools = config.add_subparsers(dest="config_command", required=True, metavar="TOOL")
    parser = tools.add_parser("check", help="not implemented yet")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print("not implemented yet", file=sys.stderr)
    return 1
