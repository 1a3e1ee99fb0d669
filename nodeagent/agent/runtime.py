"""Wiring: from a configuration to a running agent, and back to a clean exit.

:meth:`Agent.build` makes every part from the configuration and decides the mode:

* **cluster**: a kubeconfig or an in-cluster service account is available (and
  ``standalone`` is off). Pods come from the API (list + watch of
  ``spec.nodeName=<node>``); conditions, taints, the annotation, evictions and events go
  to the API, or are only logged and marked with ``dryRun``.
* **standalone**: no cluster, or ``standalone: true``. The same loop, with pods found
  from their cgroups and a stand-in for the API (:class:`LocalNodeClient`) under
  dry-run actuators: every decision is logged, counted and exported exactly as in a
  cluster, and nothing leaves the machine. ``nodeagent run`` works on any Linux host.

Threads: the loop (the caller's), evictions, node status, the pod cache's list + watch, the per-pod
storage walk and the metrics server. :meth:`Agent.request_stop` (signal-handler safe)
ends the loop's wait at once; :meth:`Agent.close` stops the rest within a few seconds,
never waiting on a request stuck on a dead API.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.actuators.events import AgentEventRecorder, EventQueue
from nodeagent.actuators.evictor import Evictor
from nodeagent.actuators.node_status import NodeStatusActuator
from nodeagent.actuators.safety import SafetyPolicy
from nodeagent.agent.actuation import Actuation
from nodeagent.agent.config import NodeAgentConfiguration
from nodeagent.agent.loop import AgentLoop
from nodeagent.agent.metrics import AgentMetrics
from nodeagent.agent.podcache import PodCache
from nodeagent.agent.pods import CachedPods, CgroupPods, PodSource
from nodeagent.base import errors
from nodeagent.base.clock import Clock, RealClock
from nodeagent.base.logs import FIELDS
from nodeagent.cri.client import ContainerRuntime, GrpcRuntime
from nodeagent.eviction.page_cache import ActivePageCache
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.kube import client, http, retry
from nodeagent.reclaim.reclaimer import NodeReclaimer
from nodeagent.serving import settings as serving_settings
from nodeagent.serving.endpoints import ObservabilityServer
from nodeagent.serving.health import Health
from nodeagent.serving.sdnotify import SystemdNotifier
from nodeagent.serving.server import Protection
from nodeagent.serving.settings import MetricsAuth
from nodeagent.signals.collector import SignalCollector
from nodeagent.signals.housekeeping import HousekeepingSchedule, HousekeptCollector
from nodeagent.triggers.api import Triggers
from nodeagent.triggers.triggerset import TriggerSet

log = logging.getLogger("nodeagent.agent")

SWITCH_INTERVAL = 0.001
"""Seconds a thread may hold the interpreter while another waits for it (Python's
default is 5 ms). The eviction thread wakes while the loop is still logging and counting
the cycle that decided: with the default it could wait 5 ms for its turn, a fifth of the
time a pod ramping at 4 GiB/s leaves past ``memory.available<100Mi``."""

SHUTDOWN_STEP_TIMEOUT = 2.0
"""Seconds each stopping part may take (pod watch, actuation, storage walk); the total
stays within a few seconds, as a DaemonSet's rolling update expects."""


class LocalNodeClient:
    """The Kubernetes API as a standalone agent sees it: its Node, with nothing on it.

    Only reads and event writes reach it, since standalone actuators run in dry-run: it
    answers the Node read with an empty Node, lists no pods, and accepts events without
    keeping them (a long standalone run must not grow)."""

    def __init__(self, node_name: str) -> None:
        self._node: client.KubeObject = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name, "resourceVersion": "1"},
            "spec": {},
            "status": {},
        }

    def get_node(self, name: str) -> client.KubeObject:
        return dict(self._node)

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        return dict(self._node)

    def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        return dict(self._node)

    def list_pods(self, *, field_selector: str = "", label_selector: str = "") -> client.ObjectList:
        return client.ObjectList((), "1")

    def watch_pods(
        self,
        *,
        resource_version: str,
        field_selector: str = "",
        label_selector: str = "",
        timeout_seconds: int = 1800,
    ) -> client.WatchStream:
        raise errors.KubeAPIError("standalone: there is no API to watch")

    def evict_pod(
        self, namespace: str, name: str, *, grace_period_seconds: int | None, uid: str | None = None
    ) -> None:
        return None

    def delete_pod(
        self, namespace: str, name: str, *, grace_period_seconds: int | None, uid: str | None = None
    ) -> None:
        return None

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> client.KubeObject:
        return dict(event)

    def post_event(self, namespace: str, body: bytes) -> None:
        return None

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> client.KubeObject:
        return dict(patch)


class StorageRefresher:
    """Walks the pods' disk usage every ``interval`` seconds in its own thread, so a
    slow walk never delays the loop (the collector swaps each result in atomically)."""

    def __init__(self, collector: SignalCollector, *, clock: Clock, interval: float) -> None:
        self._collector = collector
        self._clock = clock
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._interval <= 0:
            return
        self._thread = threading.Thread(target=self._run, name="pod-storage", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._collector.refresh_pod_storage(self._clock.now())
            except Exception:  # a walk must not kill the thread; the next one retries
                log.exception("walking the pods' disk usage failed")

    def stop(self, timeout: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def resolve_node_name(config: NodeAgentConfiguration) -> str:
    """``nodeName`` (or ``$NODE_NAME``), else the host name in lower case, as the
    kubelet names its Node by default."""
    return config.node_name or socket.gethostname().lower()


def connect(
    config: NodeAgentConfiguration, *, metrics: AgentMetrics, clock: Clock
) -> http.HTTPKubeClient:
    """The HTTP client, with the configured QPS, retries and timeouts."""
    return http.HTTPKubeClient.connect(
        http.load_configuration(config.kubeconfig, context=config.kube_context),
        qps=config.kube_api_qps,
        burst=config.kube_api_burst,
        retry_policy=retry.RetryPolicy(
            attempts=config.kube_api_retries, max_delay=config.kube_api_retry_max_delay
        ),
        observer=metrics,
        clock=clock,
        timeout=(min(5.0, config.kube_api_timeout), config.kube_api_timeout),
    )


def protection(
    config: NodeAgentConfiguration, *, standalone: bool, metrics: AgentMetrics
) -> Protection:
    """The metrics server's guard: ``metricsAuth`` (default ``kubernetes`` in cluster mode,
    ``none`` standalone), its certificate, and a review connection of its own to the
    configured API server."""
    auth = config.metrics_auth or (MetricsAuth.NONE if standalone else MetricsAuth.KUBERNETES)
    security = serving_settings.resolve(
        auth,
        config.tls_cert_file,
        config.tls_private_key_file,
        config.client_ca_file,
        config_keys=True,
    )
    return Protection.connect(
        security,
        configuration=lambda: http.load_configuration(
            config.kubeconfig, context=config.kube_context
        ),
        hosts=(config.metrics_listen_address.host,),
        observer=metrics,
    )


@dataclass(frozen=True, slots=True)
class Mode:
    """Where the agent runs and what it may change."""

    node_name: str
    standalone: bool
    dry_run: bool
    """Node-level reclaim only logs (``dryRun``; default: on standalone)."""
    api_dry_run: bool
    """The actuators only log: ``dryRun``, or standalone."""

    @classmethod
    def decide(cls, config: NodeAgentConfiguration, *, kube_given: bool) -> Mode:
        """Standalone when configured so, or when no client is given and no cluster is
        configured (a given client means cluster mode)."""
        node_name = resolve_node_name(config)
        standalone = config.standalone or (
            not kube_given and not http.cluster_configured(config.kubeconfig)
        )
        # Standalone, nothing reaches a cluster (there is none), so the actuators always
        # only log; dryRun then governs node-level reclaim alone (default: on).
        dry_run = standalone if config.dry_run is None else config.dry_run
        return cls(node_name, standalone, dry_run, dry_run or standalone)


@dataclass(frozen=True, slots=True)
class Clients:
    """The agent's connections: the Kubernetes API (or its standalone stand-in) and the
    container runtime."""

    kube: client.KubeClient
    container_runtime: ContainerRuntime

    @classmethod
    def build(
        cls,
        config: NodeAgentConfiguration,
        mode: Mode,
        *,
        kube: client.KubeClient | None,
        container_runtime: ContainerRuntime | None,
        metrics: AgentMetrics,
        clock: Clock,
    ) -> Clients:
        """``kube`` and ``container_runtime`` when given, else the configured ones."""
        if mode.standalone:
            kube = LocalNodeClient(mode.node_name)
        elif kube is None:
            kube = connect(config, metrics=metrics, clock=clock)
        container_runtime = container_runtime or GrpcRuntime(
            config.container_runtime_endpoint, timeout=config.container_runtime_request_timeout
        )
        return cls(kube, container_runtime)


@dataclass(frozen=True, slots=True)
class Readers:
    """What the loop reads: the node's signals (through housekeeping, when set) and its
    pods (from the API's list + watch in a cluster, from the cgroups standalone)."""

    collector: SignalCollector
    housekeeping: HousekeptCollector | None
    pods: PodSource
    pod_cache: PodCache | None
    """The list + watch behind ``pods`` in a cluster."""

    @classmethod
    def build(
        cls,
        config: NodeAgentConfiguration,
        mode: Mode,
        clients: Clients,
        *,
        pod_source: PodSource | None,
        clock: Clock,
    ) -> Readers:
        """``pod_source`` when given, else the pods as ``mode`` finds them."""
        collector = SignalCollector.from_settings(
            config,
            logger=logging.getLogger("nodeagent.signals"),
            image_fs_info=clients.container_runtime.image_fs_info,
            active_file=config.active_page_cache is ActivePageCache.RECLAIMABLE,
        )
        housekeeping = (
            HousekeptCollector(
                collector,
                schedule=HousekeepingSchedule.random_phase(config.stats_housekeeping_interval),
                clock=clock,
            )
            if config.stats_housekeeping_interval > 0
            else None
        )
        pod_cache: PodCache | None = None
        pods: PodSource
        if pod_source is not None:
            pods = pod_source
        elif mode.standalone:
            pods = CgroupPods(collector)
        else:
            pod_cache = PodCache(
                clients.kube, mode.node_name, watch_timeout=config.pod_watch_timeout
            )
            pods = CachedPods(pod_cache)
        return cls(collector, housekeeping, pods, pod_cache)


def build_actuation(
    config: NodeAgentConfiguration,
    policy: EvictionPolicy,
    mode: Mode,
    kube: client.KubeClient,
    *,
    clock: Clock,
    metrics: AgentMetrics,
    health: Health,
) -> Actuation:
    """Node status (conditions, taints, the pressure annotation), evictions and their
    events, writing to ``kube`` (or only logging, in ``mode``'s API dry run)."""
    recorder = AgentEventRecorder(
        kube,
        node_name=mode.node_name,
        clock=clock,
        aggregation_window=config.event_aggregation_window,
        refresh_interval=config.event_refresh_interval,
        dry_run=mode.api_dry_run,
    )
    # the evictor only queues its events; the node-status thread writes them
    events = EventQueue(recorder)
    return Actuation(
        node_status=NodeStatusActuator(
            kube,
            mode.node_name,
            clock=clock,
            condition_types=policy.condition_types.values(),
            taint_keys=policy.taint_keys.values(),
            heartbeat_period=config.condition_heartbeat_period,
            annotation=config.pressure_annotation,
            annotation_refresh_period=config.pressure_annotation_refresh_period,
            annotation_min_change=config.pressure_annotation_min_change,
            dry_run=mode.api_dry_run,
        ),
        evictor=Evictor(
            kube,
            clock=clock,
            recorder=events,
            policy=SafetyPolicy.from_settings(config),
            max_evictions=config.max_evictions_per_interval,
            cap_interval=config.eviction_cap_interval,
            deadline_margin=config.eviction_deadline_margin,
            hard_bypasses_pdb=config.hard_eviction_bypasses_pdb,
            dry_run=mode.api_dry_run,
        ),
        recorder=recorder,
        events=events,
        clock=clock,
        metrics=metrics,
        health=health,
        max_decision_age=max(2.0, 2 * config.poll_interval),
        cleanup_wait=config.eviction_deadline_margin,
    )


def build_reclaimer(
    config: NodeAgentConfiguration, runtime: ContainerRuntime, *, mode: Mode, clock: Clock
) -> NodeReclaimer | None:
    """Node-level reclaim through the container runtime, when ``nodeReclaim`` is on."""
    if not config.node_reclaim:
        return None
    return NodeReclaimer(
        runtime,
        clock=clock,
        dry_run=mode.dry_run,
        pinned_images=config.pinned_images,
        interval=config.node_reclaim_interval,
    )


def build_server(
    config: NodeAgentConfiguration, mode: Mode, *, metrics: AgentMetrics, health: Health
) -> ObservabilityServer:
    """The metrics and health server, guarded as :func:`protection` says."""
    return ObservabilityServer(
        config.metrics_listen_address,
        registry=metrics.registry,
        health=health,
        protection=protection(config, standalone=mode.standalone, metrics=metrics),
    )


@dataclass(slots=True)
class Agent:
    """Every running part of one agent; :meth:`build`, :meth:`start`, :meth:`run`,
    :meth:`close`."""

    config: NodeAgentConfiguration
    node_name: str
    standalone: bool
    dry_run: bool
    loop: AgentLoop
    collector: SignalCollector
    housekeeping: HousekeptCollector | None
    """What the loop reads through with ``statsHousekeepingInterval`` set (else None)."""
    triggers: Triggers
    actuation: Actuation
    pods: PodSource
    metrics: AgentMetrics
    health: Health
    notifier: SystemdNotifier
    storage: StorageRefresher
    kube: client.KubeClient
    container_runtime: ContainerRuntime
    server: ObservabilityServer | None
    pod_cache: PodCache | None
    stop_event: threading.Event

    @classmethod
    def build(
        cls,
        config: NodeAgentConfiguration,
        *,
        clock: Clock | None = None,
        kube: client.KubeClient | None = None,
        triggers: Triggers | None = None,
        serve_metrics: bool = True,
        notifier: SystemdNotifier | None = None,
        pod_source: PodSource | None = None,
        container_runtime: ContainerRuntime | None = None,
    ) -> Agent:
        """Make every part; nothing runs yet. Raises ConfigError (exit code 2) for a
        configuration that cannot work: bad thresholds, no cluster access, no host root.

        ``kube``, ``triggers``, ``pod_source`` and ``container_runtime`` replace the real
        ones (tests); a given ``kube`` means cluster mode unless ``standalone`` is set."""
        clock = clock or RealClock()
        policy = EvictionPolicy.from_settings(config)
        for warning in policy.warnings:
            log.warning("eviction policy: %s", warning)
        mode = Mode.decide(config, kube_given=kube is not None)
        metrics = AgentMetrics()
        health = Health(
            clock=clock, liveness_timeout=config.liveness_timeout, requires_api=not mode.standalone
        )
        clients = Clients.build(
            config,
            mode,
            kube=kube,
            container_runtime=container_runtime,
            metrics=metrics,
            clock=clock,
        )
        readers = Readers.build(config, mode, clients, pod_source=pod_source, clock=clock)
        actuation = build_actuation(
            config, policy, mode, clients.kube, clock=clock, metrics=metrics, health=health
        )
        triggers = triggers or TriggerSet.from_settings(
            config, logger=logging.getLogger("nodeagent.triggers")
        )
        notifier = notifier or SystemdNotifier.from_environ()
        reclaimer = build_reclaimer(config, clients.container_runtime, mode=mode, clock=clock)
        loop = AgentLoop(
            policy=policy,
            collector=readers.housekeeping or readers.collector,
            triggers=triggers,
            trigger_settings=config,
            pods=readers.pods,
            actuation=actuation,
            clock=clock,
            metrics=metrics,
            health=health,
            notifier=notifier,
            decision_log_interval=config.decision_log_interval,
            reclaimer=reclaimer,
        )
        server = (
            build_server(config, mode, metrics=metrics, health=health) if serve_metrics else None
        )
        return cls(
            config=config,
            node_name=mode.node_name,
            standalone=mode.standalone,
            dry_run=mode.dry_run,
            loop=loop,
            collector=readers.collector,
            housekeeping=readers.housekeeping,
            triggers=triggers,
            actuation=actuation,
            pods=readers.pods,
            metrics=metrics,
            health=health,
            notifier=notifier,
            storage=StorageRefresher(
                readers.collector, clock=clock, interval=config.pod_storage_scan_interval
            ),
            kube=clients.kube,
            container_runtime=clients.container_runtime,
            server=server,
            pod_cache=readers.pod_cache,
            stop_event=threading.Event(),
        )

    def start(self) -> None:
        """Start the background parts; the loop runs in :meth:`run`. A metrics address
        that cannot be bound raises ConfigError."""
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        if self.server is not None:
            self.server.start()
        if self.pod_cache is not None:
            self.pod_cache.start()
        self.actuation.start()
        self.storage.start()
        if self.housekeeping is not None:
            self.housekeeping.start()
        if self.loop.reclaimer is not None:
            self.loop.reclaimer.start(self.config.image_inventory_interval)
        self._log_start()

    def run(self) -> None:
        """The loop, on the calling thread, until :meth:`request_stop`."""
        self.loop.run(self.stop_event)

    def request_stop(self) -> None:
        """Ask the loop to stop; safe from a signal handler and from any thread."""
        self.stop_event.set()
        self.triggers.wake()

    def close(self) -> None:
        """Stop every part, once :meth:`run` has returned; returns within a few seconds
        whatever the API does."""
        self.notifier.stopping()
        if self.pod_cache is not None:
            self.pod_cache.stop(SHUTDOWN_STEP_TIMEOUT)
        self.actuation.stop(SHUTDOWN_STEP_TIMEOUT)
        self.storage.stop(SHUTDOWN_STEP_TIMEOUT)
        if self.housekeeping is not None:
            self.housekeeping.stop(SHUTDOWN_STEP_TIMEOUT)
        if self.loop.reclaimer is not None:
            self.loop.reclaimer.stop(SHUTDOWN_STEP_TIMEOUT)
        if self.server is not None:
            self.server.stop()
        self.triggers.close()
        self.collector.close()
        self.container_runtime.close()
        closer = getattr(self.kube, "close", None)
        if callable(closer):
            closer()
        self.notifier.close()
        log.info("stopped", extra={FIELDS: {"cycles": self.loop.cycles}})

    def _log_start(self) -> None:
        paths = self.collector.cgroups
        policy = self.loop.policy
        fields: dict[str, Any] = {
            "node": self.node_name,
            "mode": "standalone" if self.standalone else "cluster",
            "dryRun": self.dry_run,
            "cgroup": None if paths.version is None else str(paths.version),
            "nodeCgroup": paths.node_cgroup,
            "kubepodsCgroup": paths.kubepods_cgroup,
            "thresholds": [
                f"{t.describe()}{'' if t.hard else f' grace {t.grace_period:g}s'}"
                for t in policy.thresholds
            ],
            "pollInterval": self.config.poll_interval,
            "filesystemPollInterval": self.config.filesystem_poll_interval,
        }
        if self.server is not None:
            fields["metrics"] = self.server.url
        if self.housekeeping is not None:
            schedule = self.housekeeping.schedule
            fields["statsHousekeeping"] = {"interval": schedule.interval, "phase": schedule.phase}
        reclaimer = self.loop.reclaimer
        if reclaimer is not None:
            fields["nodeReclaim"] = self.config.container_runtime_endpoint
        log.info("nodeagent running", extra={FIELDS: fields})
        if self.standalone and not self.dry_run:
            log.warning(
                "standalone without dry run: node-level reclaim removes dead containers and "
                "unused images for real; pods cannot be evicted without the Kubernetes API, "
                "so evictions are only logged"
            )
