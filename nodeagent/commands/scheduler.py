"""``nodeagent scheduler``: schedule pods in a live cluster, until SIGTERM.

    nodeagent scheduler [--kubeconfig FILE] [--config FILE] [--leader-elect true|false]
                        [--lease-name NAME] [--lease-namespace NS]
                        [--metrics-address ADDR] [--log-format json|text]
                        [--feature-gates Name=true,...]

Pods opt in with ``spec.schedulerName: nodeagent-scheduler`` (or a profile's name from
``--config``). Cluster access as the agent's: the in-cluster service account, else the
kubeconfig. Exit codes: 0 after a clean stop, 1 when the lease was lost (the Deployment
restarts it as a standby), 2 for a configuration error (nothing was started).
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path
from typing import Any

from nodeagent.agent import logs
from nodeagent.agent.settings import LogFormat, LogLevel
from nodeagent.commands import schedule
from nodeagent.commands.stopping import on_stop_signals
from nodeagent.kube import http, retry
from nodeagent.observability.server import ObservabilityServer
from nodeagent.scheduler import config, registry
from nodeagent.scheduler.live import settings as live_settings
from nodeagent.scheduler.live.metrics import SchedulerMetrics
from nodeagent.scheduler.live.scheduler import LiveScheduler


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "scheduler",
        help="schedule pods in a live cluster (kube-scheduler's framework, pressure-aware)",
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
    schedule.add_feature_gates_argument(parser)
    parser.set_defaults(handler=run)


def build(args: argparse.Namespace) -> tuple[LiveScheduler, ObservabilityServer]:
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
    kube = http.HTTPKubeClient.connect(
        http.load_configuration(settings.kubeconfig),
        qps=settings.qps,
        burst=settings.burst,
        retry_policy=retry.RetryPolicy(),
        observer=metrics,
        pool_size=settings.bind_workers + 8,
    )
    scheduler = LiveScheduler(kube, settings, metrics=metrics)
    server = ObservabilityServer(
        settings.metrics_address, registry=metrics.registry, health=scheduler
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
            if scheduler.start(stop=stop):
                code = scheduler.wait(stop)
        finally:
            scheduler.stop()
            server.stop()
    return code
