"""AgentMetrics: the values it exports follow what the loop hands it, names and units
pass Prometheus' own linter, label sets stay bounded, and registries are independent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import parser

from nodeagent import model
from nodeagent.observability import metrics
from tests.observability import samples, tools

Signal = model.Signal


def value(agent: metrics.AgentMetrics, name: str, **labels: str) -> float | None:
    return agent.registry.get_sample_value(name, labels)


def test_served_exposition_passes_promtool_check_metrics() -> None:
    promtool = tools.require("promtool")
    done = tools.run([promtool, "check", "metrics"], stdin=samples.fed_metrics().exposition())
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_promtool_rejects_what_conventions_forbid() -> None:
    """The lint above is not vacuous: promtool fails a counter without ``_total``."""
    promtool = tools.require("promtool")
    bad = (
        b"# HELP nodeagent_evictions x\n# TYPE nodeagent_evictions counter\nnodeagent_evictions 1\n"
    )
    done = tools.run([promtool, "check", "metrics"], stdin=bad)
    assert done.returncode != 0
    assert "_total" in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("signal", "unit"),
    [
        pytest.param(Signal.MEMORY_AVAILABLE, "bytes", id="memory-bytes"),
        pytest.param(Signal.ALLOCATABLE_MEMORY_AVAILABLE, "bytes", id="allocatable-bytes"),
        pytest.param(Signal.NODEFS_AVAILABLE, "bytes", id="nodefs-bytes"),
        pytest.param(Signal.IMAGEFS_AVAILABLE, "bytes", id="imagefs-bytes"),
        pytest.param(Signal.CONTAINERFS_AVAILABLE, "bytes", id="containerfs-bytes"),
        pytest.param(Signal.NODEFS_INODES_FREE, "inodes", id="nodefs-inodes"),
        pytest.param(Signal.IMAGEFS_INODES_FREE, "inodes", id="imagefs-inodes"),
        pytest.param(Signal.CONTAINERFS_INODES_FREE, "inodes", id="containerfs-inodes"),
        pytest.param(Signal.PID_AVAILABLE, "pids", id="pids"),
    ],
)
def test_each_signal_is_exported_in_its_unit(signal: Signal, unit: str) -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    observed = model.NodeObservations(time=1.0, signals={signal: model.SignalValue(123, 4567)})
    agent.observe_collection(observed, {signal: 99})
    name = signal.value
    assert value(agent, f"nodeagent_signal_available_{unit}", signal=name) == 123
    assert value(agent, f"nodeagent_signal_capacity_{unit}", signal=name) == 4567
    assert value(agent, f"nodeagent_signal_threshold_{unit}", signal=name) == 99
    for other in {"bytes", "inodes", "pids"} - {unit}:
        assert value(agent, f"nodeagent_signal_available_{other}", signal=name) is None


def test_every_signal_has_a_unit() -> None:
    assert all(metrics.signal_unit(signal) is not None for signal in Signal)


def test_gauges_follow_the_latest_collection() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    for available in (900, 500, 700):
        agent.observe_collection(
            model.NodeObservations(
                time=float(available),
                signals={Signal.MEMORY_AVAILABLE: model.SignalValue(available, 1000)},
            )
        )
        assert value(agent, "nodeagent_signal_available_bytes", signal="memory.available") == float(
            available
        )


def test_an_unavailable_signal_shows_its_reason_and_no_amount_until_it_recovers() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    reason = "cannot read memory.stat: [Errno 2] No such file or directory"

    def collect(observed: model.Observation) -> None:
        agent.observe_collection(
            model.NodeObservations(time=0.0, signals={Signal.MEMORY_AVAILABLE: observed})
        )

    collect(model.SignalValue(5, 10))
    collect(model.Unavailable(reason))
    labels = {"signal": "memory.available", "reason": reason}
    assert value(agent, "nodeagent_signal_unavailable", **labels) == 1
    assert value(agent, "nodeagent_signal_available_bytes", signal="memory.available") is None

    collect(model.SignalValue(7, 10))
    assert value(agent, "nodeagent_signal_unavailable", **labels) is None
    assert value(agent, "nodeagent_signal_available_bytes", signal="memory.available") == 7


def test_reasons_are_single_line_and_bounded() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    long_reason = "first line\nsecond   line " + "x" * 1000
    agent.observe_collection(
        model.NodeObservations(
            time=0.0, signals={Signal.NODEFS_AVAILABLE: model.Unavailable(long_reason)}
        )
    )
    [family] = [
        f
        for f in parser.text_string_to_metric_families(agent.exposition().decode())
        if f.name == "nodeagent_signal_unavailable"
    ]
    [sample] = family.samples
    reason = sample.labels["reason"]
    assert "\n" not in reason
    assert reason.startswith("first line second line x")
    assert len(reason) <= metrics.MAX_REASON_LENGTH


def test_psi_is_exported_as_ratios_and_cumulative_seconds() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.observe_collection(samples.observations())
    system = {"scope": "system", "resource": "memory"}
    node = {"scope": "node", "resource": "memory"}
    assert value(agent, "nodeagent_psi_stall_ratio", **system, kind="some", window="10s") == 0.125
    assert value(agent, "nodeagent_psi_stall_ratio", **node, kind="full", window="60s") == 0.008
    assert value(agent, "nodeagent_psi_stall_seconds_total", **system, kind="full") == 2.0
    io_full = {"scope": "system", "resource": "io", "kind": "full"}
    assert value(agent, "nodeagent_psi_stall_seconds_total", **io_full) is None


def test_decision_state_pressure_conditions_and_taints() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.observe_decision(samples.decision(), cycle_seconds=0.01)
    met = {"signal": "memory.available", "kind": "hard", "grace_satisfied": "true"}
    assert value(agent, "nodeagent_threshold_met", **met) == 1
    assert value(agent, "nodeagent_node_pressure", pressure="memory") == 1
    assert value(agent, "nodeagent_node_pressure", pressure="disk") == 0
    # A pressure the decision does not mention is reported as not held.
    assert value(agent, "nodeagent_node_pressure", pressure="pid") == 0
    assert value(agent, "nodeagent_node_condition", condition="NodeAgentMemoryPressure") == 1
    assert value(agent, "nodeagent_node_condition", condition="NodeAgentDiskPressure") == 0
    taint = {"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}
    assert value(agent, "nodeagent_node_taint", **taint) == 1
    assert value(agent, "nodeagent_eviction_candidates") == 1
    assert value(agent, "nodeagent_evaluation_duration_seconds_count") == 1
    assert (value(agent, "nodeagent_last_evaluation_timestamp_seconds") or 0) > 1.7e9

    relieved = model.Decision(
        time=200.0,
        thresholds_met=(),
        pressure={},
        conditions=(),
        taints=(),
        evictions=(),
    )
    agent.observe_decision(relieved, cycle_seconds=0.01)
    assert value(agent, "nodeagent_threshold_met", **met) is None
    assert value(agent, "nodeagent_node_pressure", pressure="memory") == 0
    assert value(agent, "nodeagent_node_taint", **taint) is None
    assert value(agent, "nodeagent_evaluation_duration_seconds_count") == 2


@pytest.mark.parametrize(
    ("hard", "grace", "kind", "grace_label"),
    [
        pytest.param(True, True, "hard", "true", id="hard"),
        pytest.param(False, False, "soft", "false", id="soft-in-grace"),
        pytest.param(False, True, "soft", "true", id="soft-grace-satisfied"),
    ],
)
def test_threshold_met_labels(hard: bool, grace: bool, kind: str, grace_label: str) -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    met = model.ThresholdMet(Signal.NODEFS_AVAILABLE, hard, grace, 10, 5)
    agent.observe_decision(
        model.Decision(0.0, (met,), {}, (), (), ()),
        cycle_seconds=0.0,
    )
    labels = {"signal": "nodefs.available", "kind": kind, "grace_satisfied": grace_label}
    assert value(agent, "nodeagent_threshold_met", **labels) == 1


def test_eviction_series_exist_at_zero_for_every_signal_with_a_threshold() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.observe_collection(samples.observations(), samples.THRESHOLDS)
    for signal in samples.THRESHOLDS:
        for outcome in metrics.EvictionOutcome:
            for qos in model.QOSClass:
                labels = {"signal": signal.value, "outcome": outcome.value, "qos": qos.value}
                assert value(agent, "nodeagent_evictions_total", **labels) == 0
    pid = {"signal": "pid.available", "outcome": "evicted", "qos": "BestEffort"}
    assert value(agent, "nodeagent_evictions_total", **pid) is None


def test_evictions_count_by_outcome_and_reclaim_only_when_memory_is_freed() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    memory = Signal.MEMORY_AVAILABLE
    agent.record_eviction(memory, metrics.EvictionOutcome.EVICTED, model.QOSClass.BURSTABLE, 300)
    agent.record_eviction(memory, metrics.EvictionOutcome.EVICTED, model.QOSClass.BURSTABLE, 200)
    agent.record_eviction(memory, metrics.EvictionOutcome.FAILED, model.QOSClass.BURSTABLE, 999)
    agent.record_eviction(
        memory, metrics.EvictionOutcome.BLOCKED_BY_PDB, model.QOSClass.GUARANTEED, 999
    )
    agent.record_eviction(
        Signal.PID_AVAILABLE, metrics.EvictionOutcome.DRY_RUN, model.QOSClass.BEST_EFFORT, 12
    )
    base = {"signal": "memory.available", "qos": "Burstable"}
    assert value(agent, "nodeagent_evictions_total", **base, outcome="evicted") == 2
    assert value(agent, "nodeagent_evictions_total", **base, outcome="failed") == 1
    evicted = {"signal": "memory.available", "outcome": "evicted"}
    assert value(agent, "nodeagent_eviction_reclaimed_bytes_sum", **evicted) == 500
    assert value(agent, "nodeagent_eviction_reclaimed_bytes_count", **evicted) == 2
    failed = {"signal": "memory.available", "outcome": "failed"}
    assert value(agent, "nodeagent_eviction_reclaimed_bytes_count", **failed) is None
    pids = {"signal": "pid.available", "outcome": "dry_run"}
    assert value(agent, "nodeagent_eviction_reclaimed_pids_sum", **pids) == 12


def test_api_requests_retries_and_durations() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.api_request("create", "pods/eviction", 429, seconds=0.02)
    agent.api_request("create", "pods/eviction", 201)
    agent.api_request("patch", "nodes/status", "error", seconds=3.0)
    agent.api_retry("patch", "nodes/status", "connection")
    eviction = {"verb": "create", "resource": "pods/eviction"}
    assert value(agent, "nodeagent_api_requests_total", **eviction, code="429") == 1
    assert value(agent, "nodeagent_api_requests_total", **eviction, code="201") == 1
    status = {"verb": "patch", "resource": "nodes/status"}
    assert value(agent, "nodeagent_api_requests_total", **status, code="error") == 1
    assert value(agent, "nodeagent_api_request_duration_seconds_count", **eviction) == 1
    assert value(agent, "nodeagent_api_request_duration_seconds_sum", **status) == 3.0
    assert value(agent, "nodeagent_api_retries_total", **status, reason="connection") == 1


def test_latency_histograms_land_in_the_right_buckets() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.observe_detection_latency(0.003, trigger="memcg")
    agent.observe_detection_latency(0.7, trigger="poll")
    agent.observe_decision_latency(0.0004)
    memcg = {"trigger": "memcg"}
    assert value(agent, "nodeagent_detection_latency_seconds_bucket", **memcg, le="0.0025") == 0
    assert value(agent, "nodeagent_detection_latency_seconds_bucket", **memcg, le="0.005") == 1
    poll = {"trigger": "poll", "le": "1.0"}
    assert value(agent, "nodeagent_detection_latency_seconds_bucket", **poll) == 1
    assert value(agent, "nodeagent_decision_latency_seconds_bucket", le="0.001") == 1


def test_degraded_components_come_and_go() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.set_degraded("trigger/memcg-node", "eventfd: EROFS")
    agent.set_degraded("trigger/memcg-node", "cgroup.event_control: read-only file system")
    labels = {"component": "trigger/memcg-node"}
    newest = {**labels, "reason": "cgroup.event_control: read-only file system"}
    assert value(agent, "nodeagent_component_degraded", **newest) == 1
    assert value(agent, "nodeagent_component_degraded", **labels, reason="eventfd: EROFS") is None
    agent.set_degraded("trigger/memcg-node", None)
    assert value(agent, "nodeagent_component_degraded", **newest) is None


def test_build_info_and_process_metrics() -> None:
    agent = metrics.AgentMetrics()
    families = {f.name for f in agent.registry.collect()}
    assert "nodeagent_build" in families
    assert "process_resident_memory_bytes" in families
    [build] = [f for f in agent.registry.collect() if f.name == "nodeagent_build"]
    assert build.samples[0].labels["version"]


def test_registries_are_independent() -> None:
    first, second = metrics.AgentMetrics(), metrics.AgentMetrics()
    first.api_retry("get", "nodes", "503")
    assert first.registry.get_sample_value(
        "nodeagent_api_retries_total", {"verb": "get", "resource": "nodes", "reason": "503"}
    )
    assert second.registry.get_sample_value(
        "nodeagent_api_retries_total", {"verb": "get", "resource": "nodes", "reason": "503"}
    ) in (None, 0)


_amounts = st.integers(min_value=0, max_value=2**62)
_observation = st.one_of(
    st.builds(model.SignalValue, available=_amounts, capacity=_amounts),
    st.builds(model.Unavailable, reason=st.text(min_size=1, max_size=300)),
)


@settings(max_examples=60, deadline=None)
@given(
    signals=st.dictionaries(st.sampled_from(list(Signal)), _observation),
    thresholds=st.dictionaries(st.sampled_from(list(Signal)), _amounts),
)
def test_exposition_is_parseable_and_says_exactly_what_was_observed(
    signals: dict[Signal, model.Observation], thresholds: dict[Signal, int]
) -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.observe_collection(model.NodeObservations(time=0.0, signals=signals), thresholds)
    families = list(parser.text_string_to_metric_families(agent.exposition().decode()))

    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    available: dict[str, float] = {}
    unavailable: list[str] = []
    for family in families:
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, f"duplicate series {key}"
            seen.add(key)
            if sample.name.startswith("nodeagent_signal_available_"):
                available[sample.labels["signal"]] = sample.value
            elif sample.name == "nodeagent_signal_unavailable":
                unavailable.append(sample.labels["signal"])

    expected = {s.value: o for s, o in signals.items()}
    assert available == {
        name: float(o.available) for name, o in expected.items() if isinstance(o, model.SignalValue)
    }
    assert sorted(unavailable) == sorted(
        name for name, o in expected.items() if isinstance(o, model.Unavailable)
    )


def test_agent_metrics_is_the_kubernetes_clients_call_observer() -> None:
    from nodeagent.kube import client

    observer: client.ApiCallObserver = metrics.AgentMetrics(process_metrics=False)
    observer.api_request("get", "nodes", "200")
    observer.api_request("get", "nodes", "error")
    observer.api_retry("get", "nodes", "connection")
    assert isinstance(observer, metrics.AgentMetrics)
    labels = {"verb": "get", "resource": "nodes"}
    assert value(observer, "nodeagent_api_requests_total", **labels, code="error") == 1
    assert value(observer, "nodeagent_api_retries_total", **labels, reason="connection") == 1
