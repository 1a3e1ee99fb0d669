"""``nodeagent simulate``: replay a recorded trace through the eviction engine.

The operator's tool to tune thresholds before a rollout, and the project's acceptance
harness: one evaluation cycle per trace line, one decision printed per cycle, as JSON
lines (default) or a table. The trace format is in docs/eviction.md; examples are in
examples/*.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from nodeagent.agent.config import add_config_flags, config_from_args
from nodeagent.eviction import replay, trace
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.eviction.settings import EvictionStrategy

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        description="Replay a trace (one JSON object per line, one evaluation cycle per "
        "line) and print the decision of every cycle.",
    )
    add_config_flags(parser)
    parser.add_argument(
        "--trace", required=True, metavar="FILE", help="the trace, JSON lines ('-': stdin)"
    )
    parser.add_argument(
        "--strategy",
        choices=[s.value for s in EvictionStrategy],
        help="override evictionStrategy: kubelet (one pod per cycle) or relief (enough "
        "pods in one cycle to end the pressure)",
    )
    parser.add_argument(
        "--model-reclaim",
        action="store_true",
        help="evicted pods leave later lines and their usage is credited back (default: "
        "the trace is authoritative)",
    )
    parser.add_argument("--output", choices=("jsonl", "table"), default="jsonl")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    policy = EvictionPolicy.from_settings(config_from_args(args))
    if args.strategy:
        policy = replace(policy, strategy=EvictionStrategy(args.strategy))
    for warning in policy.warnings:
        print(f"nodeagent: warning: {warning}", file=sys.stderr)
    try:
        with _open(args.trace) as lines:
            samples = trace.parse_trace(lines)
            cycles = replay.replay(policy, samples, model_reclaim=args.model_reclaim)
            if args.output == "table":
                for row in replay.table_lines(policy, cycles):
                    print(row)
            else:
                for cycle in cycles:
                    print(json.dumps(replay.decision_record(cycle.decision)))
    except BrokenPipeError:
        raise  # the reader left (`| head`): cli.main ends quietly
    except OSError as exc:
        print(f"nodeagent: cannot read trace {args.trace}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnicodeDecodeError as exc:
        sys.stdout.flush()
        print(
            f"nodeagent: cannot read trace {args.trace}: not UTF-8 text ({exc.reason})",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except trace.TraceError as exc:
        sys.stdout.flush()
        print(f"nodeagent: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


@contextlib.contextmanager
def _open(name: str) -> Iterator[TextIO]:
    if name == "-":
        yield sys.stdin
        return
    with Path(name).open(encoding="utf-8") as file:
        yield file
