"""AgentMetrics: the values it exports follow what the loop hands it, names and units
pass Prometheus' own linter, label sets stay bounded, and registries are independent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import parser

from nodeagent import model
from nodeagent.agent import metrics
from nodeagent.agent.config import load_config
from nodeagent.k8s.pods import QOSClass
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


PSI_SIGNALS = sorted(s for s in Signal if ".pressure." in s.value)


def test_kubelet_signals_have_an_amount_unit_and_psi_signals_none() -> None:
    for signal in Signal:
        assert (metrics.signal_unit(signal) is None) is (signal in PSI_SIGNALS), signal


@pytest.mark.parametrize(
    ("signal", "unit"),
    [
        pytest.param(Signal.MEMORY_PRESSURE_SOME_AVG10, "bytes", id="memory-psi-frees-memory"),
        pytest.param(Signal.IO_PRESSURE_FULL_AVG60, "bytes", id="io-psi-frees-disk"),
        pytest.param(Signal.NODEFS_INODES_FREE, "inodes", id="inodes"),
        pytest.param(Signal.PID_AVAILABLE, "pids", id="pids"),
    ],
)
def test_reclaim_is_counted_in_the_starved_resources_unit(signal: Signal, unit: str) -> None:
    assert metrics.reclaim_unit(signal) == unit
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.record_eviction(signal, metrics.EvictionOutcome.EVICTED, QOSClass.BURSTABLE, 77)
    labels = {"signal": signal.value, "outcome": "evicted"}
    assert value(agent, f"nodeagent_eviction_reclaimed_{unit}_sum", **labels) == 77


def test_psi_thresholds_and_the_engines_view_of_psi_are_stall_ratios() -> None:
    """A PSI threshold (``memory.pressure.some.avg10>20``) reaches the metrics as the
    engine resolves it, in hundredths of a percent *not* stalled; it is exported as a
    stall share, beside the stall the engine compares it with (the node cgroup's file
    before the system's), and never as an amount of bytes."""
    from nodeagent.eviction import policy

    config = load_config(
        environ={},
        overrides={
            "eviction_hard": {"memory.pressure.some.avg10": "20", "memory.available": "100Mi"}
        },
    )
    enforcing = policy.EvictionPolicy.from_settings(config)
    observed = samples.observations()
    thresholds = enforcing.enforced_thresholds(observed)
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.observe_collection(observed, thresholds)

    psi = {"signal": "memory.pressure.some.avg10"}
    assert value(agent, "nodeagent_signal_threshold_ratio", **psi) == pytest.approx(0.2)
    node_some_avg10 = observed.psi["node/memory"].some
    assert node_some_avg10 is not None
    assert value(agent, "nodeagent_signal_stall_ratio", **psi) == pytest.approx(
        node_some_avg10.avg10 / 100
    )
    for unit in ("bytes", "inodes", "pids"):
        assert value(agent, f"nodeagent_signal_threshold_{unit}", **psi) is None
    memory = {"signal": "memory.available"}
    assert value(agent, "nodeagent_signal_threshold_bytes", **memory) == 100 * samples.MIB
    assert value(agent, "nodeagent_signal_stall_ratio", **memory) is None
    # Its eviction counters exist at zero like any other signal's with a threshold.
    zero = {**psi, "outcome": "blocked_by_pdb", "qos": "Burstable"}
    assert value(agent, "nodeagent_evictions_total", **zero) == 0


def test_api_requests_and_retries() -> None:
    agent = metrics.AgentMetrics(process_metrics=False)
    agent.api_request("create", "pods/eviction", 429)
    agent.api_request("create", "pods/eviction", 201)
    agent.api_request("patch", "nodes/status", "error")
    agent.api_request("patch", "nodes/status", "error")
    agent.api_retry("patch", "nodes/status", "Unavailable")
    eviction = {"verb": "create", "resource": "pods/eviction"}
    assert value(agent, "nodeagent_api_requests_total", **eviction, code="429") == 1
    assert value(agent, "nodeagent_api_requests_total", **eviction, code="201") == 1
    status = {"verb": "patch", "resource": "nodes/status"}
    assert value(agent, "nodeagent_api_requests_total", **status, code="error") == 2
    assert value(agent, "nodeagent_api_retries_total", **status, reason="Unavailable") == 1


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

    # PSI signals are stall shares, never amounts (a trace may carry them as signals).
    amounts = {s.value: o for s, o in signals.items() if metrics.signal_unit(s) is not None}
    assert available == {
        name: float(o.available) for name, o in amounts.items() if isinstance(o, model.SignalValue)
    }
    expected = {s.value: o for s, o in signals.items()}
    assert sorted(unavailable) == sorted(
        name for name, o in expected.items() if isinstance(o, model.Unavailable)
    )


def test_agent_metrics_is_the_kubernetes_clients_call_observer() -> None:
    from nodeagent.kube import client

    observer: client.ApiCallObserver = metrics.AgentMetrics(process_metrics=False)
    observer.api_request("get", "nodes", "200")
    observer.api_request("get", "nodes", "error")
    observer.api_retry("get", "nodes", "Unavailable")
    assert isinstance(observer, metrics.AgentMetrics)
    labels = {"verb": "get", "resource": "nodes"}
    assert value(observer, "nodeagent_api_requests_total", **labels, code="error") == 1
    assert value(observer, "nodeagent_api_retries_total", **labels, reason="Unavailable") == 1
