"""The loop's pure parts: decision lines, restart seeding, log formats, settings, the
pod views and the ``run`` command line."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent import cli
from nodeagent.actuators.node_status import NodeState, PublishedCondition
from nodeagent.agent import adoption, report
from nodeagent.agent.config import load_config
from nodeagent.agent.pods import CgroupPods
from nodeagent.base import logs
from nodeagent.base.errors import ConfigError
from nodeagent.base.logs import LogFormat, LogLevel
from nodeagent.eviction.engine import EngineState
from nodeagent.k8s.pods import QOSClass
from nodeagent.k8s.pressure import DEFAULT_CONDITION_TYPES, DEFAULT_TAINT_KEYS, Pressure, Taint
from nodeagent.model import Decision, Eviction, PodInfo, PodUID, Signal, ThresholdMet
from nodeagent.signals.cgroups import PodCgroup

MIB = 1 << 20


def decision(
    *met: ThresholdMet, pressure: tuple[Pressure, ...] = (), evict: tuple[str, ...] = ()
) -> Decision:
    pods = [PodInfo("default", name, PodUID(f"uid-{name}")) for name in evict]
    evictions = tuple(Eviction(p, Signal.MEMORY_AVAILABLE, 1, "msg", 5 * MIB) for p in pods)
    return Decision(
        time=12.5,
        thresholds_met=met,
        pressure={p: p in pressure for p in Pressure},
        conditions=(),
        taints=tuple(Taint(DEFAULT_TAINT_KEYS[p], "NoSchedule") for p in pressure),
        evictions=evictions,
        candidates=evictions,
        ranked=tuple(p.key for p in pods),
    )


MEMORY_MET = ThresholdMet(Signal.MEMORY_AVAILABLE, True, True, 100 * MIB, 80 * MIB)
PSI_PENDING = ThresholdMet(Signal.MEMORY_PRESSURE_SOME_AVG10, False, False, 8000, 6450)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(decision(), "no threshold met", id="quiet"),
        pytest.param(
            decision(MEMORY_MET, pressure=(Pressure.MEMORY,), evict=("hog",)),
            "memory.available 80Mi < 100Mi hard (acting); pressure memory; "
            "evict default/hog (grace 1s)",
            id="hard-evicting",
        ),
        pytest.param(
            decision(PSI_PENDING, pressure=(Pressure.MEMORY,)),
            "memory.pressure.some.avg10 35.5% > 20% soft (grace pending); pressure memory",
            id="psi-soft-pending",
        ),
        pytest.param(
            decision(MEMORY_MET, pressure=(Pressure.MEMORY,)),
            "memory.available 80Mi < 100Mi hard (acting); pressure memory; no pod to evict",
            id="nothing-to-evict",
        ),
    ],
)
def test_decision_message(value: Decision, message: str) -> None:
    assert report.decision_message(value) == message


def test_decision_fields_carry_the_facts() -> None:
    fields = report.decision_fields(
        decision(MEMORY_MET, pressure=(Pressure.MEMORY,), evict=("hog", "web")),
        trigger="poll",
        decided_at=12.75,
    )
    assert (fields["monotonic"], fields["decidedMonotonic"]) == (12.5, 12.75)
    assert fields["thresholds"] == [
        {
            "signal": "memory.available",
            "observed": "80Mi",
            "threshold": "100Mi",
            "available": 80 * MIB,
            "thresholdQuantity": 100 * MIB,
            "hard": True,
            "graceSatisfied": True,
        }
    ]
    assert [e["pod"] for e in fields["evict"]] == ["default/hog", "default/web"]
    assert fields["candidates"] == ["default/hog", "default/web"]
    assert fields["taints"] == ["nodeagent.io/memory-pressure:NoSchedule"]
    json.dumps(fields)  # serialisable as is


def test_shape_ignores_observed_values() -> None:
    moved = ThresholdMet(Signal.MEMORY_AVAILABLE, True, True, 100 * MIB, 70 * MIB)
    assert report.shape_of(decision(MEMORY_MET)) == report.shape_of(decision(moved))
    assert report.shape_of(decision()) != report.shape_of(decision(MEMORY_MET))
    assert report.shape_of(decision()).quiet


# --- restart seeding -------------------------------------------------------------------------


def published(kind: str, status: str) -> PublishedCondition:
    return PublishedCondition(kind, status, "r", "m", "2026-01-01T00:00:00Z", "")


def node_state(conditions: dict[Pressure, str], taints: dict[Pressure, str]) -> NodeState:
    return NodeState(
        name="n",
        conditions={
            DEFAULT_CONDITION_TYPES[p]: published(DEFAULT_CONDITION_TYPES[p], s)
            for p, s in conditions.items()
        },
        taints=tuple({"key": DEFAULT_TAINT_KEYS[p], "effect": e} for p, e in taints.items()),
    )


@pytest.mark.parametrize(
    ("node", "pressure", "acted"),
    [
        pytest.param(node_state({}, {}), set(), set(), id="fresh-node"),
        pytest.param(
            node_state({Pressure.MEMORY: "True", Pressure.DISK: "False"}, {}),
            {Pressure.MEMORY},
            set(),
            id="true-condition-only",
        ),
        pytest.param(
            node_state({Pressure.DISK: "True"}, {Pressure.DISK: "NoSchedule"}),
            {Pressure.DISK},
            {Pressure.DISK},
            id="condition-and-taint",
        ),
        pytest.param(
            node_state({Pressure.DISK: "True"}, {Pressure.DISK: "PreferNoSchedule"}),
            {Pressure.DISK},
            set(),
            id="early-warning-taint-is-not-an-action",
        ),
        pytest.param(
            node_state({Pressure.PID: "Unknown"}, {}), set(), set(), id="unknown-is-not-pressure"
        ),
    ],
)
def test_seeding_from_the_node(
    node: NodeState, pressure: set[Pressure], acted: set[Pressure]
) -> None:
    seeded = adoption.seed_engine_state(
        EngineState(),
        node,
        condition_types=DEFAULT_CONDITION_TYPES,
        taint_keys=DEFAULT_TAINT_KEYS,
        now=50.0,
    )
    assert seeded.pressure_observed == dict.fromkeys(pressure, 50.0)
    assert seeded.acted_observed == dict.fromkeys(acted, 50.0)


times = st.dictionaries(st.sampled_from(list(Pressure)), st.floats(0, 100))


@given(
    observed=times,
    acted=times,
    conditions=st.dictionaries(st.sampled_from(list(Pressure)), st.sampled_from(["True", "False"])),
    now=st.floats(0, 100),
)
def test_seeding_never_forgets_or_moves_back(
    observed: dict[Pressure, float],
    acted: dict[Pressure, float],
    conditions: dict[Pressure, str],
    now: float,
) -> None:
    state = EngineState(pressure_observed=observed, acted_observed=acted)
    seeded = adoption.seed_engine_state(
        state,
        node_state(conditions, {}),
        condition_types=DEFAULT_CONDITION_TYPES,
        taint_keys=DEFAULT_TAINT_KEYS,
        now=now,
    )
    for pressure, seen in observed.items():
        assert seeded.pressure_observed[pressure] >= seen
    for pressure, status in conditions.items():
        if status == "True":
            assert seeded.pressure_observed[pressure] >= now
    assert seeded.acted_observed == acted


# --- logs ----------------------------------------------------------------------------------


def record(message: str, fields: dict[str, Any]) -> logging.LogRecord:
    rec = logging.LogRecord("nodeagent.decision", logging.INFO, __file__, 1, message, (), None)
    rec.fields = fields
    rec.created = 1_800_000_000.25
    return rec


def test_json_lines_put_fields_at_the_top() -> None:
    line = logs.JsonFormatter().format(record("evict", {"pod": "default/hog", "grace": 1}))
    assert json.loads(line) == {
        "time": "2027-01-15T08:00:00.250Z",
        "level": "info",
        "logger": "nodeagent.decision",
        "message": "evict",
        "pod": "default/hog",
        "grace": 1,
    }


def test_text_lines_quote_what_needs_it() -> None:
    line = logs.TextFormatter().format(
        record("evict", {"pod": "default/hog", "why": "low memory", "list": [1, 2]})
    )
    assert line == (
        "2027-01-15T08:00:00.250Z INFO    nodeagent.decision: evict pod=default/hog "
        'why="low memory" list=[1,2]'
    )


def test_configure_routes_the_agent_and_quiets_libraries() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("nodeagent").level)
    try:
        logs.configure(LogFormat.JSON, LogLevel.INFO, stream=stream)
        logging.getLogger("nodeagent.agent").info("hello")
        logging.getLogger("urllib3").info("noise")
        logging.getLogger("nodeagent.actuators.node_status").info("dry-run: would patch")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("nodeagent").setLevel(saved[2])
        logging.getLogger("nodeagent.actuators").setLevel(logging.NOTSET)
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == ["hello"]


# --- settings and the command line ------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "environ", "expected"),
    [
        pytest.param({}, {}, None, id="unset"),
        pytest.param({}, {"NODE_NAME": "node-a"}, "node-a", id="downward-api"),
        pytest.param(
            {}, {"NODE_NAME": "node-a", "NODEAGENT_NODE_NAME": "node-b"}, "node-b", id="own-env"
        ),
        pytest.param({"node_name": "node-c"}, {"NODE_NAME": "node-a"}, "node-c", id="flag"),
    ],
)
def test_node_name_sources(
    overrides: dict[str, str], environ: dict[str, str], expected: str | None
) -> None:
    assert load_config(overrides=overrides, environ=environ).node_name == expected


def test_node_name_from_the_file_beats_the_downward_api(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("nodeName: node-f\n")
    assert load_config(path, environ={"NODE_NAME": "node-a"}).node_name == "node-f"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("node_name", "Node_A", id="node-name"),
        pytest.param("log_format", "xml", id="log-format"),
        pytest.param("decision_log_interval", "0s", id="interval"),
    ],
)
def test_bad_agent_settings_name_the_field(field: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides={field: value}, environ={})
    from nodeagent.agent.config import snake_to_camel

    camel = snake_to_camel(field)
    assert repr(camel) in str(caught.value) and repr(value) in str(caught.value)


def test_run_takes_dry_run_and_standalone_as_switches() -> None:
    args = cli.build_parser().parse_args(
        ["run", "--dry-run", "--standalone", "--node-name", "node-a", "--log-format", "json"]
    )
    assert (args.cfg_dry_run, args.cfg_standalone, args.cfg_node_name) == (True, True, "node-a")
    plain = cli.build_parser().parse_args(["run"])
    assert plain.cfg_dry_run is None and plain.cfg_standalone is None


def test_run_exits_2_on_a_bad_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--eviction-hard", "memory.available<lots"]) == 2
    assert "evictionHard" in capsys.readouterr().err


# --- pod views --------------------------------------------------------------------------------


class _Collector:
    def __init__(self) -> None:
        self.pod_cgroups: dict[PodUID, PodCgroup] = {}


def test_standalone_pods_come_from_cgroups() -> None:
    collector = _Collector()
    source = CgroupPods(collector)
    assert source.view().pods == () and source.view().synced
    uid = PodUID("1234-abcd")
    collector.pod_cgroups = {
        uid: PodCgroup(
            uid, QOSClass.BEST_EFFORT, "/kubepods/besteffort/pod1234-abcd", "", "", "", None
        )
    }
    view = source.view()
    assert [(p.uid, p.name, p.qos) for p in view.pods] == [(uid, "1234-abcd", QOSClass.BEST_EFFORT)]
    assert source.view() is view  # rebuilt only on change
