"""``nodeagent run``: the agent, until SIGTERM or SIGINT.

    nodeagent run [--config FILE] [--node-name NAME] [--kubeconfig FILE] [--dry-run]
                  [--standalone] [--log-format text|json] [any configuration field flag]

In a pod it uses the service account and ``$NODE_NAME``; elsewhere a kubeconfig; with no
cluster configured (or ``--standalone``) it runs the same loop on the local machine and
logs what it would do. Exit codes: 0 after a clean stop, 2 for a configuration that
cannot work (nothing was applied).
"""

from __future__ import annotations

import argparse
from typing import Any

from nodeagent.agent.config import add_config_flags, config_from_args
from nodeagent.base import logs
from nodeagent.commands.stopping import on_stop_signals

SWITCHES = {
    "dry_run": "decide, log, count and emit events marked dry-run, but change no node or pod",
    "standalone": "run without Kubernetes: pods from cgroups, every action only logged",
}
"""Configuration fields that ``run`` also takes as plain switches (``--dry-run``)."""


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "run",
        description="Watch the node's pressure signals, keep the agent's node conditions "
        "and taints, and evict pods as the kubelet would, but within milliseconds. "
        "Without a cluster (or with --standalone) it only logs what it would do.",
        conflict_handler="resolve",
    )
    add_config_flags(parser)
    for name, text in SWITCHES.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=f"cfg_{name}",
            action="store_const",
            const=True,
            default=None,
            help=text,
        )
    parser.add_argument(
        "--no-dry-run",
        dest="cfg_dry_run",
        action="store_const",
        const=False,
        help="act even when standalone: node-level reclaim removes dead containers and "
        "unused images (pods cannot be evicted without the API)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # The agent's runtime brings the Kubernetes client, grpc and the rest: not for --help.
    from nodeagent.agent import runtime  # noqa: PLC0415

    config = config_from_args(args)
    logs.configure(config.log_format, config.log_level)
    agent = runtime.Agent.build(config)

    with on_stop_signals(agent.request_stop):
        try:
            agent.start()
            agent.run()
        finally:
            agent.close()
    return 0
