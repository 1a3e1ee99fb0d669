"""``nodeagent scheduler``: schedule pods in a live cluster, until SIGTERM.

    nodeagent scheduler [--kubeconfig FILE] [--config FILE] [--leader-elect true|false]
                        [--lease-name NAME] [--lease-namespace NS]
                        [--metrics-address ADDR] [--log-format json|text]
                        [--feature-gates Name=true,...] [--bind-process true|false]
                        [--metrics-auth kubernetes|none] [--tls-cert-file F
                        --tls-private-key-file F] [--client-ca-file F]

Pods opt in with ``spec.schedulerName: nodeagent-scheduler`` (or a profile's name from
``--config``). Cluster access as the agent's: the in-cluster service account, else the
kubeconfig; ``/metrics`` is served over HTTPS to callers the API server authorizes
(``--metrics-auth kubernetes``, the default; docs/security.md). Exit codes: 0 after a
clean stop, 1 when the lease was lost (the Deployment restarts it as a standby), 2 for a
configuration error (nothing was started).
"""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path
from typing import Any

from nodeagent.base import logs
from nodeagent.base.errors import ConfigError
from nodeagent.base.logs import LogFormat, LogLevel
from nodeagent.commands import schedule
from nodeagent.commands.stopping import on_stop_signals
from nodeagent.kube import http, retry
from nodeagent.scheduler import config, registry
from nodeagent.scheduler.live import settings as live_settings
from nodeagent.scheduler.live.metrics import SchedulerMetrics
from nodeagent.scheduler.live.scheduler import LiveScheduler
from nodeagent.serving import settings as serving_settings
from nodeagent.serving.endpoints import ObservabilityServer
from nodeagent.serving.server import Protection

log = logging.getLogger("nodeagent.scheduler")


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "scheduler",
        description="Watch the cluster and bind the pending pods whose schedulerName is one"
        " of the profiles (default profile: nodeagent-scheduler), with kube-scheduler's"
        " queue, framework and leader election, and the agent's NodePressure plugin.",
    )
    parser.add_argument("--kubeconfig", type=Path, metavar="FILE")
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="a KubeSchedulerConfiguration file"
    )
    parser.add_argument("--leader-elect", type=_bool, metavar="true|false")
    parser.add_argument("--lease-name", metavar="NAME")
    parser.add_argument("--lease-namespace", metavar="NS")
    parser.add_argument("--metrics-address", metavar="ADDR", help="default 0.0.0.0:9813")
    parser.add_argument(
        "--log-format", choices=[f.value for f in LogFormat], default=LogFormat.TEXT.value
    )
    parser.add_argument(
        "--log-level", choices=[level.value for level in LogLevel], default=LogLevel.INFO.value
    )
    parser.add_argument(
        "--bind-process",
        type=_bool,
        default=True,
        metavar="true|false",
        help="send the bindings' API requests from a process of their own (default true;"
        " false: from the scheduler's own binding threads)",
    )
    schedule.add_feature_gates_argument(parser)
    serving_settings.add_flags(parser, what="/metrics and /")
    parser.set_defaults(handler=run)


def build(args: argparse.Namespace) -> tuple[LiveScheduler, ObservabilityServer]:
    security = serving_settings.from_flags(args)
    settings = live_settings.load(
        args.config,
        registry.in_tree_registry(),
        kubeconfig=args.kubeconfig,
        leader_elect=args.leader_elect,
        lease_name=args.lease_name,
        lease_namespace=args.lease_namespace,
        metrics_address=args.metrics_address,
        features=config.parse_feature_gates(args.feature_gates),
    )
    metrics = SchedulerMetrics(settings.profiles)
    connection = http.ConnectionSpec(
        settings.kubeconfig,
        qps=settings.qps,
        burst=settings.burst,
        retry_policy=retry.RetryPolicy(),
        pool_size=settings.bind_workers + 8,
    )
    kube = connection.connect(observer=metrics)
    # the binding process has a budget of its own (the same qps/burst)
    bind_target: http.ConnectionSpec | None = connection if args.bind_process else None
    if bind_target is not None:
        try:
            bind_target.resolve()  # what it cannot reach (a proxy) is known now
        except ConfigError as exc:
            log.warning("binding from the scheduler's own process: %s", exc)
            bind_target = None
    scheduler = LiveScheduler(kube, settings, metrics=metrics, bind_target=bind_target)
    protection = Protection.connect(
        security,
        configuration=lambda: http.load_configuration(settings.kubeconfig),
        hosts=(settings.metrics_address.host,),
        observer=metrics,
    )
    server = ObservabilityServer(
        settings.metrics_address,
        registry=metrics.registry,
        health=scheduler,
        protection=protection,
    )
    return scheduler, server


def run(args: argparse.Namespace) -> int:
    logs.configure(LogFormat(args.log_format), LogLevel(args.log_level))
    scheduler, server = build(args)
    stop = threading.Event()

    code = 0
    with on_stop_signals(stop.set):
        try:
            server.start()
            if scheduler.start(stop=stop, freeze_heap=True):
                code = scheduler.wait(stop)
        finally:
            scheduler.stop()
            server.stop()
    return code
