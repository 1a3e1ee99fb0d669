"""``nodeagent extender``: serve kube-scheduler's extender protocol with the agent's
pressure verdicts, until SIGTERM or SIGINT.

    nodeagent extender [--kubeconfig FILE] [--listen ADDR] [--metrics-auth kubernetes|none]
                       [--tls-cert-file F --tls-private-key-file F] [--client-ca-file F]
                       [--config FILE]

In a pod it uses the service account (nodes get/list/watch, and with ``--metrics-auth
kubernetes``, the default, TokenReviews and SubjectAccessReviews for ``/metrics``
callers; docs/security.md); ``--client-ca-file`` makes ``/filter`` and ``/prioritize``
require kube-scheduler's client certificate. ``--config`` is a
KubeSchedulerConfiguration whose first profile's ``NodePressure`` ``pluginConfig`` sets
the verdicts' arguments (taint keys, condition types, staleness, neutral score). Exit
codes: 0 after a clean stop, 2 for a configuration that cannot work.
"""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path
from typing import Any

from nodeagent.base import heap, logs
from nodeagent.base.errors import ConfigError
from nodeagent.base.logs import LogFormat, LogLevel
from nodeagent.commands.stopping import on_stop_signals
from nodeagent.extender import server
from nodeagent.extender.nodeview import NodeView
from nodeagent.kube import http, informer
from nodeagent.scheduler import config, registry
from nodeagent.scheduler.plugins import node_pressure
from nodeagent.serving import settings as serving_settings
from nodeagent.serving.server import Protection
from nodeagent.serving.settings import parse_listen_address

DEFAULT_LISTEN = "0.0.0.0:9814"
"""Next to the agent's 9813: ``/filter``, ``/prioritize``, ``/healthz``, ``/readyz``,
``/metrics``."""

log = logging.getLogger("nodeagent.extender")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "extender",
        description=(
            "A scheduler extender for a stock kube-scheduler: fails nodes under the agent's"
            " pressure taints and scores nodes by published headroom (the NodePressure"
            " plugin's verdicts), from a watched view of the nodes."
        ),
    )
    parser.add_argument("--kubeconfig", type=Path, metavar="FILE", help="default: in-cluster")
    parser.add_argument(
        "--listen", default=DEFAULT_LISTEN, metavar="ADDR", help=f"default {DEFAULT_LISTEN}"
    )
    serving_settings.add_flags(parser, what="/metrics and / (not the verbs)")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a KubeSchedulerConfiguration; its first profile's NodePressure args are used",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        default=server.DEFAULT_MAX_REQUEST_BYTES,
        metavar="N",
        help=f"refuse bigger request bodies (default {server.DEFAULT_MAX_REQUEST_BYTES})",
    )
    parser.add_argument("--log-format", choices=list(LogFormat), default=LogFormat.TEXT)
    parser.add_argument("--log-level", choices=list(LogLevel), default=LogLevel.INFO)
    parser.set_defaults(handler=run)


def pressure_args(path: Path | None) -> node_pressure.Args:
    """NodePressure's args from the first profile of the configuration at ``path``."""
    configuration = config.load_configuration(path, registry.in_tree_registry())
    args = configuration.profiles[0].plugin_args.get(node_pressure.NAME)
    return args if isinstance(args, node_pressure.Args) else node_pressure.Args()


def run(args: argparse.Namespace) -> int:
    logs.configure(LogFormat(args.log_format), LogLevel(args.log_level))
    try:
        address = parse_listen_address(args.listen)
    except ValueError as exc:
        raise ConfigError(f"--listen {args.listen!r}: {exc}", field="--listen") from exc
    if args.max_request_bytes <= 0:
        raise ConfigError(
            f"--max-request-bytes {args.max_request_bytes}: must be positive",
            field="--max-request-bytes",
        )
    security = serving_settings.from_flags(args)
    judge = server.PressureJudge(pressure_args(args.config))
    protection = Protection.connect(
        security,
        configuration=lambda: http.load_configuration(args.kubeconfig),
        hosts=(address.host,),
    )
    kube = http.HTTPKubeClient.connect(http.load_configuration(args.kubeconfig))
    view = NodeView(synced=lambda: nodes.synced)
    nodes = informer.Informer(informer.nodes(kube), view.handlers(), name="extender-nodes")
    endpoint, _ = server.make_server(
        view,
        judge,
        address,
        protection=protection,
        max_request_bytes=args.max_request_bytes,
        watching=lambda: nodes.alive,
    )
    stop = threading.Event()

    with on_stop_signals(stop.set):
        try:
            endpoint.start()
            nodes.start()
            log.info("extender serving on %s (/filter, /prioritize)", endpoint.url)
            while not stop.is_set():
                if nodes.wait_synced(0.5):
                    # The listed nodes, and from then on each few seconds' worth of
                    # watched ones, out of the collector's reach.
                    heap.freeze()
                    log.info("node view synced: %d nodes", len(view))
                    break
            heap.freeze_until(stop, server.FREEZE_EVERY_S)
        finally:
            nodes.stop()
            endpoint.stop()
            kube.close()
    return 0
