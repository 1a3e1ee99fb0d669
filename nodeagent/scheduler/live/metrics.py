"""The live scheduler's metrics, with kube-scheduler's names where one exists
(``pkg/scheduler/metrics/metrics.go``), so its dashboards and alerts work unchanged.

* ``scheduler_schedule_attempts_total{result,profile}``: scheduled, unschedulable, error;
* ``scheduler_scheduling_attempt_duration_seconds{result,profile}``: the scheduling cycle;
* ``scheduler_pending_pods{queue}``: active, backoff, unschedulable, gated;
* ``scheduler_queue_incoming_pods_total{queue,event}``: moves into activeQ/backoffQ;
* ``scheduler_queueing_hint_execution_duration_seconds{plugin,event,hint}``: each run
  of a plugin's QueueingHint function;
* ``nodeagent_scheduler_wasted_retries_total{event}``: pods rejected again by the same
  plugins after ``event`` moved them (retries for nothing; kube-scheduler has no
  such metric);
* ``scheduler_pod_scheduling_sli_duration_seconds{attempts}``: first seen to bound;
* ``scheduler_preemption_attempts_total``, ``scheduler_preemption_victims``;
* ``scheduler_binding_duration_seconds{result}``: the binding cycle;
* ``nodeagent_scheduler_bindings_in_flight``: binding cycles started and not ended (what
  kube-scheduler shows as ``scheduler_goroutines{operation="binding"}``);
* ``scheduler_resourceclaim_creates_total{status}``: the extended-resource claims
  DynamicResources created (success) or failed to;
* ``scheduler_dra_bindingconditions_allocations_total{profile,driver,status}`` and
  ``scheduler_dra_bindingconditions_wait_duration_seconds{profile,driver,status}``:
  PreBind's waits for devices' binding conditions, by how each ended;
* ``leader_election_master_status{name}``: 1 while leading;
* ``nodeagent_scheduler_api_requests_total{verb,resource,code}`` and ``..._retries_total``.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from nodeagent import __version__
from nodeagent.scheduler.resource_claims import BindingOutcome

DURATION_BUCKETS = tuple(0.001 * 2**i for i in range(16))
"""1 ms to 32 s, doubling (kube-scheduler's attempt-duration buckets)."""
SLI_BUCKETS = tuple(0.01 * 2**i for i in range(20))
"""10 ms to ~87 min, doubling (kube-scheduler's SLI buckets)."""
HINT_BUCKETS = tuple(0.00001 * 1.5**i for i in range(20))
"""10 us to ~22 ms, by 1.5 (kube-scheduler's QueueingHint buckets)."""
VICTIM_BUCKETS = tuple(float(2**i) for i in range(7))
"""1 to 64 victims."""
BINDING_CONDITION_BUCKETS = tuple(0.1 * 2**i for i in range(14))
"""100 ms to ~14 min, doubling (kube-scheduler's binding-conditions wait buckets)."""
RESULTS = ("scheduled", "unschedulable", "error")


class _PendingCollector(Collector):
    """``scheduler_pending_pods`` read from the queue at scrape time."""

    def __init__(self, pending: Callable[[], Mapping[str, int]]) -> None:
        self._pending = pending

    def collect(self) -> Any:
        family = GaugeMetricFamily(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type (active, backoff, unschedulable, gated).",
            labels=["queue"],
        )
        for queue, count in self._pending().items():
            family.add_metric([queue], count)
        yield family


class _BindingsCollector(Collector):
    """Binding cycles in flight, read from the binding pool at scrape time."""

    def __init__(self, in_flight: Callable[[], int]) -> None:
        self._in_flight = in_flight

    def collect(self) -> Any:
        yield GaugeMetricFamily(
            "nodeagent_scheduler_bindings_in_flight",
            "Binding cycles (PreBind, Bind, PostBind) started and not yet ended.",
            value=self._in_flight(),
        )


def _register_process(registry: prometheus_client.CollectorRegistry, *, process: bool) -> None:
    """The process, platform and GC collectors (with ``process``) and the build info."""
    if process:
        prometheus_client.ProcessCollector(registry=registry)
        prometheus_client.PlatformCollector(registry=registry)
        prometheus_client.GCCollector(registry=registry)
    prometheus_client.Info(
        "nodeagent_scheduler_build", "Version of the running scheduler.", registry=registry
    ).info({"version": __version__, "python_version": platform.python_version()})


def _attempt_families(
    registry: prometheus_client.CollectorRegistry,
) -> tuple[prometheus_client.Counter, prometheus_client.Histogram]:
    """Scheduling attempts: how many, by result and profile, and how long each took."""
    attempts = prometheus_client.Counter(
        "scheduler_schedule_attempts",
        "Number of attempts to schedule pods, by the result. 'unschedulable' means a "
        "pod could not be scheduled, while 'error' means an internal scheduler problem.",
        ["result", "profile"],
        registry=registry,
    )
    duration = prometheus_client.Histogram(
        "scheduler_scheduling_attempt_duration_seconds",
        "Scheduling attempt latency in seconds: the scheduling cycle up to the hand-off to"
        " the binding pool (the binding cycle is scheduler_binding_duration_seconds).",
        ["result", "profile"],
        buckets=DURATION_BUCKETS,
        registry=registry,
    )
    return attempts, duration


def _queue_families(
    registry: prometheus_client.CollectorRegistry,
) -> tuple[prometheus_client.Counter, prometheus_client.Histogram]:
    """The queue: pods moved into it, and each pod's time from entering it to bound."""
    incoming = prometheus_client.Counter(
        "scheduler_queue_incoming_pods",
        "Number of pods added to scheduling queues by event and queue type.",
        ["queue", "event"],
        registry=registry,
    )
    sli = prometheus_client.Histogram(
        "scheduler_pod_scheduling_sli_duration_seconds",
        "E2e latency for a pod being scheduled, from the time the pod enters the "
        "scheduling queue, by the number of attempts.",
        ["attempts"],
        buckets=SLI_BUCKETS,
        registry=registry,
    )
    return incoming, sli


def _hint_families(
    registry: prometheus_client.CollectorRegistry,
) -> tuple[prometheus_client.Histogram, prometheus_client.Counter]:
    """QueueingHints: how long each hint function ran, and the retries they did not
    spare (rejected again for the same reason)."""
    duration = prometheus_client.Histogram(
        "scheduler_queueing_hint_execution_duration_seconds",
        "Duration for running a queueing hint function of a plugin.",
        ["plugin", "event", "hint"],
        buckets=HINT_BUCKETS,
        registry=registry,
    )
    wasted = prometheus_client.Counter(
        "nodeagent_scheduler_wasted_retries",
        "Scheduling attempts that were rejected by the same plugins as the attempt before,"
        " by the event that moved the pod back to the queue (retries for nothing).",
        ["event"],
        registry=registry,
    )
    return duration, wasted


def _preemption_families(
    registry: prometheus_client.CollectorRegistry,
) -> tuple[prometheus_client.Counter, prometheus_client.Histogram]:
    """Preemption: the attempts, and how many victims each chose."""
    attempts = prometheus_client.Counter(
        "scheduler_preemption_attempts",
        "Total preemption attempts in the cluster till now.",
        registry=registry,
    )
    victims = prometheus_client.Histogram(
        "scheduler_preemption_victims",
        "Number of selected preemption victims.",
        buckets=VICTIM_BUCKETS,
        registry=registry,
    )
    return attempts, victims


def _binding_family(registry: prometheus_client.CollectorRegistry) -> prometheus_client.Histogram:
    """The binding cycle's duration, by result."""
    return prometheus_client.Histogram(
        "scheduler_binding_duration_seconds",
        "Binding cycle latency in seconds (PreBind, Bind, PostBind), by result.",
        ["result"],
        buckets=DURATION_BUCKETS,
        registry=registry,
    )


def _dra_families(
    registry: prometheus_client.CollectorRegistry,
) -> tuple[prometheus_client.Counter, prometheus_client.Counter, prometheus_client.Histogram]:
    """DynamicResources' writes and waits: claims created, and PreBind's waits for
    devices' binding conditions (counted per device, timed per allocated device)."""
    creates = prometheus_client.Counter(
        "scheduler_resourceclaim_creates",
        "Number of ResourceClaims creation requests within scheduler.",
        ["status"],
        registry=registry,
    )
    allocations = prometheus_client.Counter(
        "scheduler_dra_bindingconditions_allocations",
        "Number of allocations using devices with BindingConditions, counted per driver"
        " per scheduling attempt.",
        ["profile", "driver", "status"],
        registry=registry,
    )
    wait = prometheus_client.Histogram(
        "scheduler_dra_bindingconditions_wait_duration_seconds",
        "Time in seconds spent waiting for BindingConditions to be satisfied during PreBind.",
        ["profile", "driver", "status"],
        buckets=BINDING_CONDITION_BUCKETS,
        registry=registry,
    )
    return creates, allocations, wait


def _leader_family(registry: prometheus_client.CollectorRegistry) -> prometheus_client.Gauge:
    """Whether this scheduler holds the lease."""
    return prometheus_client.Gauge(
        "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
        "backup, 1 indicates master. 'name' is the string used to identify the lease.",
        ["name"],
        registry=registry,
    )


def _own_trouble_families(
    registry: prometheus_client.CollectorRegistry,
) -> tuple[prometheus_client.Counter, prometheus_client.Counter]:
    """The scheduler's own troubles: events dropped, binding processes replaced."""
    events_dropped = prometheus_client.Counter(
        "nodeagent_scheduler_events_dropped",
        "Kubernetes Events not written because the event queue was full.",
        registry=registry,
    )
    process_starts = prometheus_client.Counter(
        "nodeagent_scheduler_binding_process_starts",
        "Binding processes started (more than one: a binding process died and was"
        " replaced; its bindings in flight were retried).",
        registry=registry,
    )
    return events_dropped, process_starts


def _api_families(
    registry: prometheus_client.CollectorRegistry,
) -> tuple[prometheus_client.Counter, prometheus_client.Counter]:
    """Requests to the Kubernetes API, by their answer, and their retries."""
    requests = prometheus_client.Counter(
        "nodeagent_scheduler_api_requests",
        "Requests to the Kubernetes API by verb, resource and HTTP status code "
        "(error when no answer came).",
        ["verb", "resource", "code"],
        registry=registry,
    )
    retries = prometheus_client.Counter(
        "nodeagent_scheduler_api_retries",
        "Requests to the Kubernetes API retried after a transient failure, by reason.",
        ["verb", "resource", "reason"],
        registry=registry,
    )
    return requests, retries


class SchedulerMetrics:
    def __init__(self, profiles: tuple[str, ...], *, process_metrics: bool = True) -> None:
        # registered in this order, which is the order of the exposition
        self.registry = registry = prometheus_client.CollectorRegistry()
        _register_process(registry, process=process_metrics)
        self.attempts, self.attempt_duration = _attempt_families(registry)
        self.incoming, self.sli = _queue_families(registry)
        self.hint_duration, self.wasted = _hint_families(registry)
        self.preemption_attempts, self.preemption_victims = _preemption_families(registry)
        self.binding_duration = _binding_family(registry)
        self.claim_creates, self.binding_condition_allocations, self.binding_condition_wait = (
            _dra_families(registry)
        )
        self.leader = _leader_family(registry)
        self.events_dropped, self.binding_process_starts = _own_trouble_families(registry)
        self._api_requests, self._api_retries = _api_families(registry)
        for profile in profiles:
            for result in RESULTS:
                self.attempts.labels(result, profile)

        # each label set's child looked up once: these are on every pod's path, and
        # ``labels()`` (lock, validation) cost more than the observation itself
        self._request_child = functools.cache(self._api_requests.labels)
        self._attempt_children = functools.cache(
            lambda result, profile: (
                self.attempts.labels(result, profile),
                self.attempt_duration.labels(result, profile),
            )
        )
        self._hint_child = functools.cache(self.hint_duration.labels)
        self._wasted_child = functools.cache(self.wasted.labels)
        self.binding_child = functools.cache(self.binding_duration.labels)
        self.sli_child = functools.cache(self.sli.labels)
        self.incoming_child = functools.cache(self.incoming.labels)

    def attempt(self, result: str, profile: str, seconds: float) -> None:
        """One scheduling attempt ended with ``result``, after ``seconds``."""
        counter, duration = self._attempt_children(result, profile)
        counter.inc()
        duration.observe(seconds)

    def hint_ran(self, plugin: str, event: str, hint: str, seconds: float) -> None:
        """One QueueingHint function ran."""
        self._hint_child(plugin, event, hint).observe(seconds)

    def wasted_retry(self, event: str) -> None:
        """A pod ``event`` moved was rejected again by the same plugins."""
        self._wasted_child(event).inc()

    # --- DRAObserver --------------------------------------------------------------------
    def claim_created(self, succeeded: bool) -> None:
        self.claim_creates.labels("success" if succeeded else "failure").inc()

    def binding_conditions_ended(
        self,
        profile: str,
        outcome: BindingOutcome,
        seconds: float,
        allocated_drivers: Sequence[str],
        conditioned_drivers: Sequence[str],
    ) -> None:
        for driver in allocated_drivers:
            self.binding_condition_wait.labels(profile, driver, outcome.value).observe(seconds)
        for driver in conditioned_drivers:
            self.binding_condition_allocations.labels(profile, driver, outcome.value).inc()

    def watch_queue(self, pending: Callable[[], Mapping[str, int]]) -> None:
        self.registry.register(_PendingCollector(pending))

    def watch_bindings(self, in_flight: Callable[[], int]) -> None:
        self.registry.register(_BindingsCollector(in_flight))

    # --- ApiCallObserver ----------------------------------------------------------------
    def api_request(self, verb: str, resource: str, code: str) -> None:
        self._request_child(verb, resource, code).inc()

    def api_retry(self, verb: str, resource: str, reason: str) -> None:
        self._api_retries.labels(verb, resource, reason).inc()
