"""The agent's Prometheus metrics, on a registry of its own.

Two kinds of figures, kept apart on purpose:

* **State** (signals, thresholds, pressure, conditions, PSI, degraded sources) is what
  the last collection and the last decision said. The loop hands over those immutable
  values (:meth:`AgentMetrics.observe_collection`, :meth:`AgentMetrics.observe_decision`),
  which costs one reference assignment, and a custom collector turns them into metric
  families only when Prometheus scrapes. The loop may run every 100 ms and Prometheus
  scrape every 15 s, so nothing is formatted that nobody reads, and a series vanishes
  the moment its source does (a signal that becomes unavailable, a threshold no
  longer met) without bookkeeping of label sets.
* **Events** (evictions, API requests and retries, latencies) are counted as they
  happen with ordinary prometheus_client counters and histograms.

Units follow Prometheus conventions: base units in the name (``_bytes``, ``_seconds``),
ratios in 0-1 (``_ratio``), ``_total`` for counters. The kubelet's signals measure bytes,
inodes or PIDs, so their gauges are split by unit (``nodeagent_signal_available_bytes``,
``..._inodes``, ``..._pids``) and a dashboard panel can carry one unit; PSI signals
(``memory.pressure.some.avg10`` ...) are stall shares, exported as ratios
(``nodeagent_signal_stall_ratio``, ``nodeagent_signal_threshold_ratio``). Label values
are bounded: signal names, QoS classes, outcomes, verbs and resources are closed sets,
and a degraded source shows only its current reason.

Nothing here is global: every :class:`AgentMetrics` owns its
:class:`prometheus_client.CollectorRegistry`, so tests and a replay can run several.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum

import prometheus_client
from prometheus_client import core, registry

from nodeagent import __version__, model
from nodeagent.eviction import observations as engine_observations
from nodeagent.eviction import thresholds as engine_thresholds
from nodeagent.k8s.pods import QOSClass
from nodeagent.k8s.pressure import Pressure

PREFIX = "nodeagent"


class Unit(StrEnum):
    """What a signal counts; the suffix of its metric names."""

    BYTES = "bytes"
    INODES = "inodes"
    PIDS = "pids"


RESOURCE_UNIT: Mapping[model.Resource, Unit] = {
    model.Resource.MEMORY: Unit.BYTES,
    model.Resource.EPHEMERAL_STORAGE: Unit.BYTES,
    model.Resource.INODES: Unit.INODES,
    model.Resource.PIDS: Unit.PIDS,
}


def signal_unit(signal: model.Signal) -> Unit | None:
    """The unit of ``signal``'s available, capacity and threshold amounts, or None for a
    PSI signal: a stall share, exported as a ratio."""
    if signal in engine_thresholds.PSI_SIGNALS:
        return None
    return RESOURCE_UNIT[model.SIGNAL_RESOURCE[signal]]


def reclaim_unit(signal: model.EvictionSignal) -> Unit:
    """The unit of what evicting a pod for ``signal`` frees: that of the resource it
    starves (bytes of memory for ``memory.pressure.*``, as the engine ranks by memory)."""
    return RESOURCE_UNIT[model.SIGNAL_RESOURCE[signal]]


class NodeReclaimOutcome(StrEnum):
    """How a node-level reclaim ended."""

    ENOUGH = "enough"
    NOT_ENOUGH = "not_enough"
    DRY_RUN = "dry_run"


class EvictionOutcome(StrEnum):
    """What became of one eviction the engine asked for."""

    EVICTED = "evicted"
    BLOCKED_BY_PDB = "blocked_by_pdb"
    """The Eviction API answered 429: a PodDisruptionBudget forbids it now."""
    FAILED = "failed"
    DRY_RUN = "dry_run"
    """Decided and counted, but nothing was sent (``--dry-run``)."""


API_ERROR_CODE = "error"
"""The ``code`` label of a request that got no HTTP answer (connection refused,
timeout), as :class:`nodeagent.kube.client.ApiCallObserver` reports it."""

MAX_REASON_LENGTH = 160
"""Longer reasons are cut: a label value is for reading, the log has the rest."""

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Seconds; from a kernel notification (sub-millisecond) to the kubelet's 10 s cadence."""

RECLAIM_BUCKETS: Mapping[Unit, tuple[float, ...]] = {
    Unit.BYTES: tuple(float(2**power) for power in range(20, 37, 2)),  # 1 MiB .. 64 GiB
    Unit.INODES: (10.0, 100.0, 1e3, 1e4, 1e5, 1e6),
    Unit.PIDS: (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0),
}


def _cut(reason: str) -> str:
    reason = " ".join(reason.split())
    return reason if len(reason) <= MAX_REASON_LENGTH else reason[: MAX_REASON_LENGTH - 1] + "…"


def _stall_ratio(available: int) -> float:
    """A PSI signal's amount in the engine's units (hundredths of a percent *not*
    stalled) as a stall share in 0-1."""
    capacity = engine_thresholds.PSI_CAPACITY
    value = model.SignalValue(available=available, capacity=capacity)
    return engine_observations.stall_percent(value) / 100


def _split_psi_scope(key: str) -> tuple[str, str]:
    """``"memory"`` -> (``system``, ``memory``); ``"node/memory"`` -> (``node``, ``memory``)."""
    scope, _, resource = key.rpartition("/")
    return scope or "system", resource


class _StateCollector(registry.Collector):
    """Renders the last collection and decision at scrape time."""

    def __init__(self) -> None:
        self.observations: model.NodeObservations | None = None
        self.thresholds: Mapping[model.Signal, int] = {}
        self.decision: model.Decision | None = None
        self.decided_at: float | None = None
        self.degraded: dict[str, str] = {}

    def describe(self) -> Iterable[core.Metric]:
        # Empty families: lets the registry reject a name clash at registration.
        return self._families(None, {}, None, None, {})

    def collect(self) -> Iterable[core.Metric]:
        # Each attribute is read once: the loop may swap them while this runs.
        return self._families(
            self.observations, self.thresholds, self.decision, self.decided_at, self.degraded
        )

    def _families(
        self,
        observations: model.NodeObservations | None,
        thresholds: Mapping[model.Signal, int],
        decision: model.Decision | None,
        decided_at: float | None,
        degraded: Mapping[str, str],
    ) -> Iterator[core.Metric]:
        yield from self._signal_families(observations, thresholds)
        yield from self._psi_families(observations)
        yield from self._decision_families(decision, decided_at)
        components = core.GaugeMetricFamily(
            f"{PREFIX}_component_degraded",
            "1 for each part of the agent running in a degraded mode (a kernel notification "
            "mechanism missing, polling instead), with the reason.",
            labels=["component", "reason"],
        )
        for component, reason in sorted(dict(degraded).items()):
            components.add_metric([component, reason], 1.0)
        yield components

    @staticmethod
    def _signal_families(
        observations: model.NodeObservations | None, thresholds: Mapping[model.Signal, int]
    ) -> Iterator[core.Metric]:
        available: dict[Unit, core.GaugeMetricFamily] = {}
        capacity: dict[Unit, core.GaugeMetricFamily] = {}
        threshold: dict[Unit, core.GaugeMetricFamily] = {}
        for unit in Unit:
            available[unit] = core.GaugeMetricFamily(
                f"{PREFIX}_signal_available_{unit}",
                f"Amount available of each eviction signal counted in {unit}, at the last "
                "collection (kubelet signal names).",
                labels=["signal"],
            )
            capacity[unit] = core.GaugeMetricFamily(
                f"{PREFIX}_signal_capacity_{unit}",
                f"Capacity of each eviction signal counted in {unit}, at the last collection.",
                labels=["signal"],
            )
            threshold[unit] = core.GaugeMetricFamily(
                f"{PREFIX}_signal_threshold_{unit}",
                f"Threshold the agent enforces on each signal counted in {unit}, resolved "
                "to an amount: pressure starts when available drops below it.",
                labels=["signal"],
            )
        stall = core.GaugeMetricFamily(
            f"{PREFIX}_signal_stall_ratio",
            "Stall share of each PSI signal with a threshold, as the engine observed it at "
            "the last collection (the node cgroup's pressure file, else the system's).",
            labels=["signal"],
        )
        stall_threshold = core.GaugeMetricFamily(
            f"{PREFIX}_signal_threshold_ratio",
            "Threshold the agent enforces on each PSI signal, as a stall share: pressure "
            "starts when the stall rises above it.",
            labels=["signal"],
        )
        unavailable = core.GaugeMetricFamily(
            f"{PREFIX}_signal_unavailable",
            "1 for each signal that could not be read at the last collection, with the "
            "reason; thresholds on it cannot fire.",
            labels=["signal", "reason"],
        )
        active_file = core.GaugeMetricFamily(
            f"{PREFIX}_signal_active_file_bytes",
            "Clean active page cache of the cgroup behind each memory signal at the last"
            " collection, which activePageCache: reclaimable counts as available (read only"
            " then; the kubelet counts it as used).",
            labels=["signal"],
        )
        pods = core.GaugeMetricFamily(
            f"{PREFIX}_observed_pods", "Pods with usage figures at the last collection."
        )
        swap_available = core.GaugeMetricFamily(
            f"{PREFIX}_swap_available_bytes", "Swap free at the last collection."
        )
        swap_capacity = core.GaugeMetricFamily(
            f"{PREFIX}_swap_capacity_bytes", "Swap size at the last collection."
        )
        if observations is not None:
            for signal, observed in observations.signals.items():
                if isinstance(observed, model.Unavailable):
                    unavailable.add_metric([signal.value, _cut(observed.reason)], 1.0)
                    continue
                measured_in = signal_unit(signal)
                if measured_in is not None:
                    available[measured_in].add_metric([signal.value], float(observed.available))
                    capacity[measured_in].add_metric([signal.value], float(observed.capacity))
            for signal, amount in observations.active_file.items():
                active_file.add_metric([signal.value], float(amount))
            pods.add_metric([], float(len(observations.pods)))
            if observations.swap is not None:
                swap_available.add_metric([], float(observations.swap.available))
                swap_capacity.add_metric([], float(observations.swap.capacity))
        stall_signals = []
        for signal, amount in thresholds.items():
            measured_in = signal_unit(signal)
            if measured_in is not None:
                threshold[measured_in].add_metric([signal.value], float(amount))
            else:
                stall_signals.append(signal)
                stall_threshold.add_metric([signal.value], _stall_ratio(amount))
        if observations is not None and stall_signals:
            engine_view = engine_observations.observe(observations, stall_signals)
            for signal, value in engine_view.items():
                stall.add_metric([signal.value], _stall_ratio(value.available))
        for unit in Unit:
            yield available[unit]
            yield capacity[unit]
            yield threshold[unit]
        yield stall
        yield stall_threshold
        yield active_file
        yield unavailable
        yield pods
        yield swap_available
        yield swap_capacity

    @staticmethod
    def _psi_families(observations: model.NodeObservations | None) -> Iterator[core.Metric]:
        stall = core.GaugeMetricFamily(
            f"{PREFIX}_psi_stall_ratio",
            "Share of wall time that tasks stalled on a resource (PSI avg10/avg60/avg300 "
            "as a ratio), by scope (system, node cgroup) and kind (some, full).",
            labels=["scope", "resource", "kind", "window"],
        )
        stall_total = core.CounterMetricFamily(
            f"{PREFIX}_psi_stall_seconds",
            "Cumulative time tasks stalled on a resource (PSI total).",
            labels=["scope", "resource", "kind"],
        )
        if observations is not None:
            for key, stats in observations.psi.items():
                scope, resource = _split_psi_scope(key)
                for kind, line in (("some", stats.some), ("full", stats.full)):
                    if line is None:
                        continue
                    for window, percent in (
                        ("10s", line.avg10),
                        ("60s", line.avg60),
                        ("300s", line.avg300),
                    ):
                        stall.add_metric([scope, resource, kind, window], percent / 100.0)
                    stall_total.add_metric([scope, resource, kind], line.total / 1e6)
        yield stall
        yield stall_total

    @staticmethod
    def _decision_families(
        decision: model.Decision | None, decided_at: float | None
    ) -> Iterator[core.Metric]:
        met = core.GaugeMetricFamily(
            f"{PREFIX}_threshold_met",
            "1 for each eviction threshold whose comparison held at the last evaluation "
            "(absent when not met), by kind (hard, soft) and whether a soft threshold's "
            "grace period is satisfied.",
            labels=["signal", "kind", "grace_satisfied"],
        )
        pressure = core.GaugeMetricFamily(
            f"{PREFIX}_node_pressure",
            "1 while the node is under this pressure (memory, disk, pid), including the "
            "transition period after the last threshold was met.",
            labels=["pressure"],
        )
        condition = core.GaugeMetricFamily(
            f"{PREFIX}_node_condition",
            "Status (1 True, 0 False) of each node condition the agent maintains.",
            labels=["condition"],
        )
        taint = core.GaugeMetricFamily(
            f"{PREFIX}_node_taint",
            "1 for each taint the agent wants on its node.",
            labels=["key", "effect"],
        )
        candidates = core.GaugeMetricFamily(
            f"{PREFIX}_eviction_candidates",
            "Pods the last evaluation could evict for the signal it acted on.",
        )
        last = core.GaugeMetricFamily(
            f"{PREFIX}_last_evaluation_timestamp_seconds",
            "Unix time of the last completed evaluation cycle.",
        )
        if decision is not None:
            for threshold in decision.thresholds_met:
                met.add_metric(
                    [
                        threshold.signal.value,
                        "hard" if threshold.hard else "soft",
                        "true" if threshold.grace_satisfied else "false",
                    ],
                    1.0,
                )
            for kind in Pressure:
                pressure.add_metric([kind.value], 1.0 if decision.pressure.get(kind) else 0.0)
            for node_condition in decision.conditions:
                condition.add_metric([node_condition.type], 1.0 if node_condition.status else 0.0)
            for node_taint in decision.taints:
                taint.add_metric([node_taint.key, node_taint.effect], 1.0)
            candidates.add_metric([], float(len(decision.candidates)))
        if decided_at is not None:
            last.add_metric([], decided_at)
        yield met
        yield pressure
        yield condition
        yield taint
        yield candidates
        yield last


class AgentMetrics:
    """Every metric the agent exports, on a registry of its own.

    Usage by the loop, once per cycle::

        metrics = AgentMetrics()
        metrics.observe_collection(observations, thresholds)
        metrics.observe_detection_latency(0.004, trigger="psi")
        decision = engine.evaluate(...)
        metrics.observe_decision_latency(0.0008)
        ...apply...
        metrics.record_eviction(signal, EvictionOutcome.EVICTED, qos, reclaimed=reclaim)
        metrics.observe_decision(decision, cycle_seconds=0.012)

    and by the Kubernetes client on each request, as its
    :class:`~nodeagent.kube.client.ApiCallObserver`: :meth:`api_request`,
    :meth:`api_retry`. Every method is cheap and thread-safe; none raises on values the
    agent can produce.
    """

    def __init__(self, *, process_metrics: bool = True) -> None:
        """``process_metrics`` adds prometheus_client's ``process_*``, ``python_info``
        and ``python_gc_*`` collectors (the agent's own RSS and CPU) to the registry."""
        self.registry = prometheus_client.CollectorRegistry()
        self._state = _StateCollector()
        self.registry.register(self._state)
        if process_metrics:
            prometheus_client.ProcessCollector(registry=self.registry)
            prometheus_client.PlatformCollector(registry=self.registry)
            prometheus_client.GCCollector(registry=self.registry)

        prometheus_client.Info(
            f"{PREFIX}_build", "Version of the running agent.", registry=self.registry
        ).info(
            {
                "version": __version__,
                "python_version": platform.python_version(),
                "python_implementation": platform.python_implementation(),
            }
        )
        self._evictions = prometheus_client.Counter(
            f"{PREFIX}_evictions",
            "Evictions the engine asked for, by signal, outcome (evicted, blocked_by_pdb, "
            "failed, dry_run) and the pod's QoS class.",
            ["signal", "outcome", "qos"],
            registry=self.registry,
        )
        self._reclaimed = {
            unit: prometheus_client.Histogram(
                f"{PREFIX}_eviction_reclaimed_{unit}",
                f"Amount (in {unit}) each eviction frees or, in dry-run, would free for "
                "the signal it relieves.",
                ["signal", "outcome"],
                buckets=RECLAIM_BUCKETS[unit],
                registry=self.registry,
            )
            for unit in Unit
        }
        self._detection_latency = prometheus_client.Histogram(
            f"{PREFIX}_detection_latency_seconds",
            "Time from what woke the loop (a kernel notification, or the poll tick) to a "
            "fresh collection of the signals, by trigger.",
            ["trigger"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._decision_latency = prometheus_client.Histogram(
            f"{PREFIX}_decision_latency_seconds",
            "Time from a completed collection to the engine's decision.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._cycle_duration = prometheus_client.Histogram(
            f"{PREFIX}_evaluation_duration_seconds",
            "Duration of whole evaluation cycles: collect, decide and apply.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._api_requests = prometheus_client.Counter(
            f"{PREFIX}_api_requests",
            "Requests to the Kubernetes API by verb, resource and HTTP status code "
            f"({API_ERROR_CODE} when no answer came).",
            ["verb", "resource", "code"],
            registry=self.registry,
        )
        self._api_retries = prometheus_client.Counter(
            f"{PREFIX}_api_retries",
            "Requests to the Kubernetes API retried after a transient failure, by reason "
            "(the client's error kind: Unavailable for a 5xx or no answer, RateLimited "
            "for a 429 from API priority and fairness).",
            ["verb", "resource", "reason"],
            registry=self.registry,
        )
        self._initialised_signals: set[model.Signal] = set()
        self._init_node_reclaim_metrics()

    # --- state -----------------------------------------------------------------------

    def observe_collection(
        self,
        observations: model.NodeObservations,
        thresholds: Mapping[model.Signal, int] | None = None,
    ) -> None:
        """Publish one collection: every signal's available and capacity (or why it is
        unavailable), PSI, swap, and the threshold enforced on each signal resolved to
        an amount (the figure the node's pressure annotation carries)."""
        thresholds = thresholds or {}
        for signal in thresholds.keys() - self._initialised_signals:
            self._initialise_eviction_series(signal)
        self._state.thresholds = thresholds
        self._state.observations = observations

    def observe_decision(self, decision: model.Decision, cycle_seconds: float) -> None:
        """Publish one evaluation: thresholds met, pressure, conditions and taints, and
        the cycle's duration."""
        self._state.decision = decision
        self._state.decided_at = time.time()
        self._cycle_duration.observe(cycle_seconds)

    def set_degraded(self, component: str, reason: str | None) -> None:
        """Mark ``component`` (e.g. ``trigger/psi-memory``) as running degraded for
        ``reason``, or healthy again with None. Signals need no call: an
        :class:`~nodeagent.model.Unavailable` observation is exported as such."""
        degraded = dict(self._state.degraded)
        if reason is None:
            degraded.pop(component, None)
        else:
            degraded[component] = _cut(reason)
        self._state.degraded = degraded

    # --- events ----------------------------------------------------------------------

    def record_eviction(
        self,
        signal: model.EvictionSignal,
        outcome: EvictionOutcome,
        qos: QOSClass,
        reclaimed: int = 0,
    ) -> None:
        """Count one eviction and, when it went through (or would have, in dry-run), the
        amount it frees for ``signal`` in the unit of the resource ``signal`` starves
        (:func:`reclaim_unit`; the engine's ``reclaim_estimate``)."""
        self._evictions.labels(signal.value, outcome.value, qos.value).inc()
        if outcome in (EvictionOutcome.EVICTED, EvictionOutcome.DRY_RUN):
            reclaimed_in = self._reclaimed[reclaim_unit(signal)]
            reclaimed_in.labels(signal.value, outcome.value).observe(max(reclaimed, 0))

    def observe_detection_latency(self, seconds: float, trigger: str) -> None:
        """Time from the wake-up cause (``trigger``: ``poll``, ``memcg``, ``psi``, ...)
        to a fresh collection."""
        self._detection_latency.labels(trigger).observe(seconds)

    def observe_decision_latency(self, seconds: float) -> None:
        """Time from a completed collection to the decision."""
        self._decision_latency.observe(seconds)

    def api_request(self, verb: str, resource: str, code: str | int) -> None:
        """One request to the API: ``verb`` as in RBAC (``get``, ``patch``, ``create``),
        ``resource`` with its subresource (``nodes/status``, ``pods/eviction``), ``code``
        the HTTP status or ``"error"`` when none came."""
        self._api_requests.labels(verb, resource, str(code)).inc()

    def api_retry(self, verb: str, resource: str, reason: str) -> None:
        """One retry of a request; ``reason`` is the kind of failure retried, as the
        client names it (``Unavailable``, ``RateLimited``)."""
        self._api_retries.labels(verb, resource, reason).inc()

    # --- node-level reclaim ------------------------------------------------------------

    def _init_node_reclaim_metrics(self) -> None:
        self._node_reclaims = prometheus_client.Counter(
            f"{PREFIX}_node_reclaims",
            "Node-level reclaims (dead containers, unused images) run before a disk "
            "eviction, by result: enough (no threshold met any more, pod eviction "
            "skipped), not_enough, or dry_run.",
            ["result"],
            registry=self.registry,
        )
        for result in NodeReclaimOutcome:
            self._node_reclaims.labels(result.value)
        self._node_reclaim_removed = prometheus_client.Counter(
            f"{PREFIX}_node_reclaim_removed",
            "Dead containers and unused images node-level reclaim removed, by kind.",
            ["kind"],
            registry=self.registry,
        )
        for kind in ("containers", "images"):
            self._node_reclaim_removed.labels(kind)
        self._node_reclaimed_bytes = prometheus_client.Counter(
            f"{PREFIX}_node_reclaimed_bytes",
            "Bytes node-level reclaim made available on the filesystems it freed, "
            "measured by re-reading them.",
            registry=self.registry,
        )
        self._node_reclaim_duration = prometheus_client.Histogram(
            f"{PREFIX}_node_reclaim_duration_seconds",
            "Duration of node-level reclaims: listing, removing through the container "
            "runtime, and re-reading the filesystems.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=self.registry,
        )

    def record_node_reclaim(self, result: model.NodeReclaimResult) -> None:
        """Count one node-level reclaim and what it removed and freed."""
        if result.dry_run:
            outcome = NodeReclaimOutcome.DRY_RUN
        elif result.enough:
            outcome = NodeReclaimOutcome.ENOUGH
        else:
            outcome = NodeReclaimOutcome.NOT_ENOUGH
        self._node_reclaims.labels(outcome.value).inc()
        self._node_reclaim_duration.observe(result.seconds)
        if not result.dry_run:
            self._node_reclaim_removed.labels("containers").inc(result.containers_removed)
            self._node_reclaim_removed.labels("images").inc(result.images_removed)
        self._node_reclaimed_bytes.inc(max(0, result.bytes_reclaimed))

    # --- helpers ---------------------------------------------------------------------

    def _initialise_eviction_series(self, signal: model.Signal) -> None:
        # A counter series born at its first increment is invisible to increase() and
        # rate() until its second: alerts on blocked evictions would miss the first
        # one. Every signal with a threshold gets its series at zero up front.
        for outcome in EvictionOutcome:
            for qos in QOSClass:
                self._evictions.labels(signal.value, outcome.value, qos.value)
        self._initialised_signals.add(signal)

    def exposition(self) -> bytes:
        """The registry in Prometheus' classic text format, as ``/metrics`` serves it."""
        return prometheus_client.generate_latest(self.registry)
