"""Trace lines: strict parsing into the agent's own values, QoS derivation, overhead."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from nodeagent.eviction import trace
from nodeagent.k8s.pods import QOSClass
from nodeagent.model import FsLayout, PodUID, PsiLine, Signal, SignalValue, Unavailable

from .builders import Gi, Mi


def line(**fields: Any) -> str:
    return json.dumps({"time": 60, **fields})


def test_a_full_line_becomes_observations_and_pods() -> None:
    sample = trace.parse_trace_line(
        line(
            fsLayout="dedicated-imagefs",
            signals={
                "memory.available": {"available": 500 * Mi, "capacity": 2 * Gi},
                "nodefs.available": {"unavailable": "statvfs: ENOENT"},
                "memory.pressure.some.avg10": {"value": 25.5},
            },
            psi={"io": {"some": {"avg10": 1.5, "avg60": 1.0, "avg300": 0.5, "total": 42}}},
            reclaimable={"images": Gi},
            pods=[
                {
                    "name": "a",
                    "uid": "1234",
                    "priority": 7,
                    "terminationGracePeriodSeconds": 45,
                    "requests": {"memory": "256Mi", "cpu": "500m"},
                    "limits": {"memory": 536870912},
                    "usage": {"memory": 300 * Mi, "logs": 10, "processes": 3},
                },
                {"namespace": "kube-system", "name": "b", "critical": True, "static": True},
            ],
        ),
        7,
    )
    observed = sample.observations
    assert sample.line == 7
    assert observed.time == 60
    assert observed.fs_layout is FsLayout.DEDICATED_IMAGEFS
    assert observed.signals[Signal.MEMORY_AVAILABLE] == SignalValue(500 * Mi, 2 * Gi, "trace")
    assert observed.signals[Signal.NODEFS_AVAILABLE] == Unavailable("statvfs: ENOENT")
    assert observed.signals[Signal.MEMORY_PRESSURE_SOME_AVG10] == SignalValue(7450, 10000, "trace")
    assert observed.psi["io"].some == PsiLine(1.5, 1.0, 0.5, 42)
    assert observed.psi["io"].full is None
    assert observed.reclaimable == {"images": Gi}
    a, b = sample.pods
    assert (a.uid, a.priority, a.termination_grace_period_seconds) == ("1234", 7, 45)
    assert a.requests == {"memory": 256 * Mi, "cpu": 500}
    assert a.qos is QOSClass.BURSTABLE
    assert (b.key, b.uid, b.critical, b.static) == ("kube-system/b", "kube-system/b", True, True)
    usage = observed.pods[PodUID("1234")]
    assert (usage.memory, usage.logs, usage.processes, usage.rootfs) == (300 * Mi, 10, 3, None)
    assert PodUID("kube-system/b") not in observed.pods  # no usage at all: no stats


@pytest.mark.parametrize(
    ("requests", "limits", "qos"),
    [
        pytest.param({}, {}, QOSClass.BEST_EFFORT, id="nothing"),
        pytest.param({"ephemeral-storage": Gi}, {}, QOSClass.BEST_EFFORT, id="storage-only"),
        pytest.param({"memory": Gi}, {}, QOSClass.BURSTABLE, id="memory-request"),
        pytest.param({}, {"memory": Gi}, QOSClass.BURSTABLE, id="memory-limit-only"),
        pytest.param(
            {}, {"memory": Gi, "cpu": 500}, QOSClass.GUARANTEED, id="limits-default-requests"
        ),
        pytest.param(
            {"memory": Gi, "cpu": 500}, {"memory": Gi, "cpu": 500}, QOSClass.GUARANTEED, id="equal"
        ),
        pytest.param(
            {"memory": Gi, "cpu": 250},
            {"memory": Gi, "cpu": 500},
            QOSClass.BURSTABLE,
            id="cpu-below",
        ),
    ],
)
def test_qos_from_requests_and_limits(
    requests: dict[str, int], limits: dict[str, int], qos: QOSClass
) -> None:
    assert trace.derive_qos(requests, limits) is qos
    sample = trace.parse_trace_line(
        line(pods=[{"name": "p", "requests": requests, "limits": limits}]), 1
    )
    assert sample.pods[0].qos is qos


def test_an_explicit_qos_wins() -> None:
    sample = trace.parse_trace_line(line(pods=[{"name": "p", "qos": "Guaranteed"}]), 1)
    assert sample.pods[0].qos is QOSClass.GUARANTEED


def test_runtime_class_overhead_counts_in_requests_but_not_in_qos() -> None:
    sample = trace.parse_trace_line(
        line(
            pods=[
                {
                    "name": "kata",
                    "requests": {"memory": "1Gi"},
                    "overhead": {"memory": "120Mi", "cpu": 0},
                }
            ]
        ),
        1,
    )
    assert sample.pods[0].requests == {"memory": Gi + 120 * Mi}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param(line(sigals={}), "sigals: Extra inputs are not permitted", id="unknown-key"),
        pytest.param(
            line(pods=[{"name": "a", "usage": {"memry": 1}}]),
            "pods.0.usage.memry: Extra inputs are not permitted",
            id="unknown-usage-key",
        ),
        pytest.param(
            line(signals={"mem.available": {"available": 1, "capacity": 2}}),
            "signals.mem.available.[key]",
            id="unknown-signal",
        ),
        pytest.param(
            line(signals={"memory.available": {"value": 20}}),
            "only PSI signals take a value",
            id="value-for-a-byte-signal",
        ),
        pytest.param(
            line(signals={"io.pressure.some.avg10": {"available": 1, "capacity": 2}}),
            "give the stall as",
            id="bytes-for-psi",
        ),
        pytest.param(
            line(signals={"memory.available": {"available": 1}}),
            'give {"available": N, "capacity": N}',
            id="half-an-observation",
        ),
        pytest.param(
            line(pods=[{"name": "a", "usage": {"memory": -1}}]),
            "pods.0.usage.memory: Input should be greater than or equal to 0",
            id="negative-usage",
        ),
        pytest.param(
            line(pods=[{"name": "a", "requests": {"memory": "lots"}}]),
            "memory: invalid quantity 'lots'",
            id="bad-quantity",
        ),
        pytest.param(line(pods=[{"name": "a"}, {"name": "a"}]), "listed twice", id="duplicate-pod"),
        pytest.param('{"signals": {}}', "time: Field required", id="no-time"),
        pytest.param("{not json", "Invalid JSON", id="not-json"),
        pytest.param('{"time": NaN}', "time: Input should be a finite number", id="nan-time"),
        pytest.param('{"time": 1e400}', "time: Input should be a finite number", id="inf-time"),
        pytest.param(
            line(signals={"memory.available": {"available": 3 * Gi, "capacity": 2 * Gi}}),
            "signals.memory.available: Value error, available 3221225472 exceeds capacity",
            id="available-over-capacity",
        ),
        pytest.param(
            line(pods=[{"name": "a", "requests": {"memory": True}}]),
            "pods.0.requests.memory: Input should be a valid integer",
            id="boolean-amount",
        ),
        pytest.param(
            line(pods=[{"name": "a", "usage": {"processes": False}}]),
            "pods.0.usage.processes: Input should be a valid integer",
            id="boolean-usage",
        ),
        pytest.param(
            line(pods=[{"name": "a", "priority": True}]),
            "pods.0.priority: Input should be a valid integer",
            id="boolean-priority",
        ),
    ],
)
def test_bad_lines_name_the_line_and_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(trace.TraceError) as raised:
        trace.parse_trace_line(text, 12)
    assert str(raised.value).startswith("trace line 12: ")
    assert fragment in str(raised.value)


def test_a_trace_is_read_in_time_order() -> None:
    text = [line(), "", "  ", json.dumps({"time": 60}), json.dumps({"time": 90.5})]
    samples = list(trace.parse_trace(text))
    assert [(s.line, s.observations.time) for s in samples] == [(1, 60), (4, 60), (5, 90.5)]


def test_a_line_earlier_than_the_one_before_stops_the_trace() -> None:
    text = [json.dumps({"time": 20}), json.dumps({"time": 30}), json.dumps({"time": 25})]
    samples = trace.parse_trace(text)
    assert [s.observations.time for s in itertools.islice(samples, 2)] == [20, 30]
    with pytest.raises(trace.TraceError) as raised:
        next(samples)
    assert str(raised.value) == (
        "trace line 3: time 25 is earlier than the previous line's 30 "
        "(one line per evaluation cycle, in time order)"
    )
