"""``nodeagent config check``: validate a configuration and print the effective thresholds.

What the engine will enforce, after the kubelet's defaulting rules: default hard
thresholds (or only the given ones), ``0%``/``100%`` dropped, the derived
``allocatableMemory.available`` and containerfs thresholds, percentages as float32
fractions. With ``--kubelet-config`` it also reports where the node's kubelet would act
before the agent (then the agent's threshold never fires).

Exit codes: 0 valid; 1 with ``--strict`` when a warning was printed; 2 invalid (the
message, on stderr, names the field and the value).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from nodeagent.agent.config import (
    add_config_flags,
    camel_to_snake,
    config_from_args,
    describe_validation_error,
)
from nodeagent.base import durations
from nodeagent.base.errors import ConfigError
from nodeagent.eviction import compare
from nodeagent.eviction.page_cache import ActivePageCache
from nodeagent.eviction.policy import EvictionPolicy, policy_record
from nodeagent.eviction.settings import EvictionSettings, kubelet_eviction_fields
from nodeagent.eviction.thresholds import Operator, Threshold
from nodeagent.model import FsLayout

EXIT_OK = 0
EXIT_WARNINGS = 1


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    config = subparsers.add_parser("config")
    tools = config.add_subparsers(dest="config_command", required=True, metavar="TOOL")
    parser = tools.add_parser(
        "check",
        help="validate the configuration and print the effective eviction thresholds",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    add_config_flags(parser)
    parser.add_argument(
        "--kubelet-config",
        type=Path,
        metavar="FILE",
        help="the node's KubeletConfiguration: warn where the kubelet would act first",
    )
    parser.add_argument(
        "--fs-layout",
        choices=[layout.value for layout in FsLayout],
        default=FsLayout.SINGLE.value,
        help="the node's filesystem layout, which decides the containerfs thresholds",
    )
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.add_argument("--strict", action="store_true", help="exit 1 when there is any warning")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    policy = EvictionPolicy.from_settings(config_from_args(args))
    layout = FsLayout(args.fs_layout)
    findings: tuple[compare.Finding, ...] = ()
    if args.kubelet_config is not None:
        kubelet = load_kubelet_policy(args.kubelet_config)
        findings = compare.compare_with_kubelet(policy, kubelet, layout)
    record = policy_record(policy, layout)
    if args.kubelet_config is not None:
        record["kubelet"] = [
            {"severity": str(f.severity), "signal": str(f.signal), "message": f.message}
            for f in findings
        ]
    if args.output == "json":
        print(json.dumps(record, indent=2))
    else:
        print(_text(policy, layout, findings))
    warned = bool(policy.warnings) or any(f.severity is compare.Severity.WARNING for f in findings)
    return EXIT_WARNINGS if args.strict and warned else EXIT_OK


def load_kubelet_policy(path: Path) -> EvictionPolicy:
    """The eviction policy of a KubeletConfiguration file, read as the kubelet reads it
    (and only from the file: no NODEAGENT_* variables or flags apply to it)."""
    try:
        document = yaml.safe_load(path.read_bytes())  # YAML detects and checks the encoding
    except OSError as exc:
        raise ConfigError(f"cannot read kubelet config {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"kubelet config {path} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise ConfigError(f"kubelet config {path}: expected a KubeletConfiguration mapping")
    if document.get("kind") != "KubeletConfiguration":
        # The kubelet refuses a file without its kind; a mistaken file (the agent's own
        # config) would otherwise compare the agent with itself.
        raise ConfigError(
            f"kubelet config {path} is not a KubeletConfiguration (kind: "
            f"{document.get('kind')}); expected apiVersion: kubelet.config.k8s.io/v1beta1, "
            f"kind: KubeletConfiguration"
        )
    fields = {camel_to_snake(k): v for k, v in kubelet_eviction_fields(document).items()}
    try:
        return EvictionPolicy.from_settings(EvictionSettings.model_validate(fields))
    except ValidationError as exc:
        raise ConfigError(f"kubelet config {path}:\n{describe_validation_error(exc)}") from exc
    except ConfigError as exc:
        raise ConfigError(f"kubelet config {path}:\n{exc}", field=exc.field) from exc


def _text(policy: EvictionPolicy, layout: FsLayout, findings: tuple[compare.Finding, ...]) -> str:
    rows: list[tuple[str, ...]] = [
        ("SIGNAL", "OP", "VALUE", "GRACE", "MIN RECLAIM", "KIND", "FROM")
    ]
    rows += [_row(t) for t in policy.thresholds_for(layout)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines += [
        "",
        f"filesystem layout: {layout}",
        "pressure transition period: "
        + durations.format_go_duration(policy.pressure_transition_period),
        f"max pod grace period (soft): {_max_pod_grace(policy.max_pod_grace_period_seconds)}",
        f"strategy: {policy.strategy}",
        "local-storage limits (localStorageCapacityIsolation): "
        + ("enforced" if policy.local_storage_capacity_isolation else "off"),
        f"active page cache (activePageCache): {policy.active_page_cache} ("
        + (
            "its clean part counts as available"
            if policy.active_page_cache is ActivePageCache.RECLAIMABLE
            else "used memory, as the kubelet counts it"
        )
        + ")",
    ]
    lines += [f"warning: {w}" for w in policy.warnings]
    lines += [f"{f.severity}: {f.message}" for f in findings]
    return "\n".join(lines)


def _max_pod_grace(seconds: int) -> str:
    return f"{seconds}s" if seconds >= 0 else "each pod's terminationGracePeriodSeconds"


def _row(threshold: Threshold) -> tuple[str, ...]:
    return (
        str(threshold.signal),
        ">" if threshold.operator is Operator.GREATER_THAN else "<",
        str(threshold.value),
        durations.format_go_duration(threshold.grace_period),
        "-" if threshold.min_reclaim is None else str(threshold.min_reclaim),
        "hard" if threshold.hard else "soft",
        str(threshold.derived_from or "config"),
    )
