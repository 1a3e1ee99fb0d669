"""`nodeagent run` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("run", help="not implemented yet")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print("not implemented yet", file=sys.stderr)
    return 1
