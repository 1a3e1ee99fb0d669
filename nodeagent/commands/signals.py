"""`nodeagent signals` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nodeagent.config import add_config_flags, config_from_args


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("signals", help="print the node's pressure signals")
    add_config_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config_from_args(args)
    print("not implemented yet", file=sys.stderr)
    return 1
