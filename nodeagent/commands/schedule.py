"""`nodeagent schedule`: plan where pending pods would go on a cluster snapshot, and why.

    kubectl get nodes,pods,priorityclasses -A -o yaml > cluster.yaml
    nodeagent schedule --cluster cluster.yaml --explain --output table

Exit codes: 0 when the plan was made (whether or not every pod fits: the plan says),
2 for an unreadable cluster file or an invalid scheduler configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from nodeagent.base.errors import ConfigError
from nodeagent.scheduler import config, objects, planner, registry


def _time(text: str) -> float:
    try:
        return objects.unix_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an RFC 3339 time such as 2024-05-01T10:00:00Z"
        ) from exc


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "schedule",
        description=(
            "Schedule the pending pods of a cluster snapshot (kubectl get nodes,pods -o yaml)"
            " with kube-scheduler's framework and nodeagent's NodePressure plugin."
        ),
    )
    parser.add_argument(
        "--cluster",
        type=Path,
        required=True,
        metavar="FILE",
        help="Nodes and Pods (and optionally PriorityClasses, PodDisruptionBudgets) as a"
        " List, multi-document YAML or JSON",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1); default:"
        " kube-scheduler's default profile plus NodePressure",
    )
    parser.add_argument(
        "--seed", type=int, help="seed for tie-breaking among equal scores (default: random)"
    )
    parser.add_argument(
        "--explain", action="store_true", help="include every node's verdict, reasons, scores"
    )
    parser.add_argument("--output", choices=("json", "table"), default="json")
    parser.add_argument(
        "--now",
        type=_time,
        metavar="TIME",
        help="plan as of this RFC 3339 time (judges the freshness of the nodes' pressure"
        " annotations; default: now)",
    )
    add_feature_gates_argument(parser)
    parser.set_defaults(handler=run)


def add_feature_gates_argument(parser: argparse.ArgumentParser) -> None:
    """kube-scheduler's ``--feature-gates`` flag (shared with ``nodeagent scheduler``)."""
    parser.add_argument(
        "--feature-gates",
        default="",
        metavar="GATES",
        help="kube-scheduler feature gates as Name=true,Other=false; known:"
        f" {', '.join(config.FeatureGate)} (all off by default)",
    )


def placement_json(placement: dict[str, Any]) -> str:
    """One placement, indented like ``json.dumps(indent=2)`` except its ``nodes`` (with
    --explain): one node per line, each encoded by json's C encoder (the indenting
    encoder is pure Python and was most of a large --explain run's time)."""
    nodes = placement.pop("nodes", None)
    text = json.dumps(placement, indent=2)
    if nodes is None:
        return text
    lines = ",\n".join(
        f"    {json.dumps(name)}: {json.dumps(verdict)}" for name, verdict in nodes.items()
    )
    body = "{\n" + lines + "\n  }" if nodes else "{}"
    return text[: -len("\n}")] + f',\n  "nodes": {body}\n}}'


def run(args: argparse.Namespace) -> int:
    plugins = registry.in_tree_registry()
    features = config.parse_feature_gates(args.feature_gates)
    configuration = config.load_configuration(args.config, plugins)
    try:
        text = args.cluster.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read cluster file {args.cluster}: {exc.strerror}") from exc
    cluster = objects.load_cluster(
        text,
        str(args.cluster),
        comparison_operators=features.taint_toleration_comparison_operators,
    )
    del text
    placements = planner.placements(
        cluster,
        configuration,
        plugins=plugins,
        seed=args.seed,
        explain_nodes=args.explain,
        now=time.time() if args.now is None else args.now,
        features=features,
    )
    out = sys.stdout
    if args.output == "table":
        widths = planner.TableWidths.of(cluster)
        out.write(planner.table_header(widths) + "\n")
        for placement in placements:
            out.write("\n".join(planner.table_rows(placement, widths)) + "\n")
    else:
        # One JSON document, written a placement at a time (a big --explain plan never
        # sits in memory whole).
        out.write('{\n  "placements": [')
        written = 0
        for placement in placements:
            body = placement_json(placement.to_dict()).replace("\n", "\n    ")
            out.write(("," if written else "") + "\n    " + body)
            written += 1
        out.write("\n  ]\n}\n" if written else "]\n}\n")
    out.flush()
    return 0
