"""Eviction configuration: kubelet names and forms from file, environment and flags, the
kubelet's defaulting rules, and errors that name field and value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeagent.agent.config import load_config
from nodeagent.base import durations
from nodeagent.base.errors import ConfigError
from nodeagent.eviction import thresholds as thr
from nodeagent.eviction.policy import EvictionPolicy
from nodeagent.eviction.settings import EvictionSettings, EvictionStrategy
from nodeagent.k8s import quantities as units
from nodeagent.k8s.pressure import DEFAULT_CONDITION_TYPES, Pressure
from nodeagent.k8s.quantities import QuantityFormat
from nodeagent.model import FsLayout, Signal

from .builders import Gi, Mi, policy


def configured(policy: EvictionPolicy) -> dict[str, str]:
    return {
        t.describe().split("<")[0].split(">")[0]: str(t.value)
        for t in policy.thresholds
        if t.derived_from is None
    }


def test_yaml_maps_as_in_a_kubelet_configuration(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(
        "evictionHard:\n  memory.available: 500Mi\n  nodefs.available: 10%\n"
        "evictionSoft: {memory.available: 1Gi}\n"
        "evictionSoftGracePeriod: {memory.available: 1m30s}\n"
        "evictionMinimumReclaim: {memory.available: 100Mi}\n"
        "evictionMaxPodGracePeriod: 20\n"
        "evictionPressureTransitionPeriod: 1m\n"
        "evictionStrategy: relief\n"
    )
    resolved = EvictionPolicy.from_settings(load_config(file, environ={}))
    assert set(resolved.thresholds) >= {
        thr.Threshold(Signal.MEMORY_AVAILABLE, thr.Quantity(500 * Mi), 0, thr.Quantity(100 * Mi)),
        thr.Threshold(Signal.MEMORY_AVAILABLE, thr.Quantity(Gi), 90, thr.Quantity(100 * Mi)),
        thr.Threshold(Signal.NODEFS_AVAILABLE, thr.Percentage(0.10000000149011612)),
    }
    assert resolved.max_pod_grace_period_seconds == 20
    assert resolved.pressure_transition_period == 60
    assert resolved.strategy is EvictionStrategy.RELIEF


def test_flag_and_environment_forms(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("evictionHard: {memory.available: 1Gi}\n")
    config = load_config(
        file,
        environ={
            "NODEAGENT_EVICTION_SOFT": '{"memory.available": "2Gi"}',
            "NODEAGENT_EVICTION_SOFT_GRACE_PERIOD": "memory.available=1m",
            "NODEAGENT_ENFORCE_NODE_ALLOCATABLE": "pods,kube-reserved",
        },
        overrides={"eviction_hard": "memory.available<750Mi,nodefs.available<5%"},
    )
    assert config.eviction_hard == {
        Signal.MEMORY_AVAILABLE: thr.Quantity(750 * Mi),
        Signal.NODEFS_AVAILABLE: thr.Percentage(0.05000000074505806),
    }
    assert config.eviction_soft == {Signal.MEMORY_AVAILABLE: thr.Quantity(2 * Gi)}
    assert config.eviction_soft_grace_period == {Signal.MEMORY_AVAILABLE: 60.0}
    assert config.enforce_node_allocatable == ["pods", "kube-reserved"]


def test_kubelet_configuration_document_is_read_for_its_eviction_fields(tmp_path: Path) -> None:
    file = tmp_path / "kubelet.yaml"
    file.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "cgroupDriver: systemd\nmaxPods: 110\nclusterDNS: [10.96.0.10]\n"
        "evictionHard: {memory.available: 300Mi}\nmergeDefaultEvictionSettings: true\n"
    )
    resolved = EvictionPolicy.from_settings(load_config(file, environ={}))
    assert configured(resolved) == {
        "memory.available": "300Mi",
        "nodefs.available": "10%",
        "nodefs.inodesFree": "5%",
        "imagefs.available": "15%",
        "imagefs.inodesFree": "5%",
    }


def test_null_kubelet_fields_mean_unset_as_in_the_kubelet(tmp_path: Path) -> None:
    # An emptied map (``evictionSoft:`` with its entries commented out) is YAML null, which
    # the kubelet reads as unset: the field keeps its default.
    file = tmp_path / "kubelet.yaml"
    file.write_text(
        "kind: KubeletConfiguration\nevictionHard:\nevictionSoft:\nevictionSoftGracePeriod:\n"
        "evictionMinimumReclaim: null\nevictionMaxPodGracePeriod: null\n"
        "evictionPressureTransitionPeriod: null\nenforceNodeAllocatable: null\n"
        "mergeDefaultEvictionSettings: null\nlocalStorageCapacityIsolation: null\n"
    )
    resolved = EvictionPolicy.from_settings(load_config(file, environ={}))
    assert resolved == policy()
    assert resolved.local_storage_capacity_isolation is True


@pytest.mark.parametrize("isolation", [False, True])
def test_local_storage_capacity_isolation_from_a_kubelet_configuration(
    tmp_path: Path, isolation: bool
) -> None:
    file = tmp_path / "kubelet.yaml"
    file.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        f"localStorageCapacityIsolation: {str(isolation).lower()}\n"
    )
    resolved = EvictionPolicy.from_settings(load_config(file, environ={}))
    assert resolved.local_storage_capacity_isolation is isolation


def test_a_non_boolean_local_storage_capacity_isolation_names_the_field(tmp_path: Path) -> None:
    file = tmp_path / "kubelet.yaml"
    file.write_text("kind: KubeletConfiguration\nlocalStorageCapacityIsolation: sometimes\n")
    with pytest.raises(ConfigError, match=r"localStorageCapacityIsolation.*sometimes"):
        load_config(file, environ={})


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {},
            {
                "memory.available": "100Mi",
                "nodefs.available": "10%",
                "nodefs.inodesFree": "5%",
                "imagefs.available": "15%",
                "imagefs.inodesFree": "5%",
            },
            id="unset-means-defaults",
        ),
        pytest.param(
            {"eviction_hard": "memory.available<1Gi"},
            {"memory.available": "1Gi"},
            id="any-hard-drops-unset-defaults",
        ),
        pytest.param({"eviction_hard": ""}, {}, id="empty-means-none"),
        pytest.param(
            {
                "eviction_hard": "memory.available<1Gi,nodefs.available<0%",
                "merge_default_eviction_settings": "true",
            },
            {
                "memory.available": "1Gi",
                "nodefs.inodesFree": "5%",
                "imagefs.available": "15%",
                "imagefs.inodesFree": "5%",
            },
            id="merge-fills-the-rest-and-0%-still-disables",
        ),
    ],
)
def test_default_hard_thresholds(overrides: dict[str, str], expected: dict[str, str]) -> None:
    assert configured(policy(**overrides)) == expected


def test_zero_transition_period_means_the_default() -> None:
    resolved = policy(eviction_pressure_transition_period="0s")
    assert resolved.pressure_transition_period == 300
    assert any("0s means the default" in w for w in resolved.warnings)


def test_a_negative_max_pod_grace_period_defers_to_the_pod_with_a_warning() -> None:
    resolved = policy(eviction_max_pod_grace_period="-1")
    assert resolved.max_pod_grace_period_seconds == -1
    (warning,) = resolved.warnings
    assert "evictionMaxPodGracePeriod -1" in warning
    assert "terminationGracePeriodSeconds" in warning and "kills at once" in warning


def test_configured_containerfs_thresholds_are_ignored_with_a_warning() -> None:
    resolved = policy(eviction_hard="containerfs.available<50%,nodefs.available<10%")
    assert any("containerfs.available thresholds are ignored" in w for w in resolved.warnings)
    copies = [
        t
        for t in resolved.thresholds_for(FsLayout.SINGLE)
        if t.signal is Signal.CONTAINERFS_AVAILABLE
    ]
    assert [str(t.value) for t in copies] == ["10%"]


def test_names_the_agent_publishes() -> None:
    resolved = policy(
        condition_types="memory=MemoryPressureAgent", taint_keys="disk=example.com/disk"
    )
    assert resolved.condition_types[Pressure.MEMORY] == "MemoryPressureAgent"
    assert resolved.condition_types[Pressure.DISK] == DEFAULT_CONDITION_TYPES[Pressure.DISK]
    assert resolved.taint_keys[Pressure.DISK] == "example.com/disk"


@pytest.mark.parametrize(
    ("overrides", "field", "value", "fragment"),
    [
        pytest.param(
            {"eviction_hard": "memory.availabe<1Gi"},
            "evictionHard",
            "'memory.availabe<1Gi'",
            "unsupported eviction signal 'memory.availabe'",
            id="unknown-signal",
        ),
        pytest.param(
            {"eviction_hard": "nodefs.available<101%"},
            "evictionHard",
            "'nodefs.available<101%'",
            "must be <= 100%",
            id="over-100%",
        ),
        pytest.param(
            {"eviction_soft": "memory.available<1Gi"},
            "evictionSoftGracePeriod",
            "{}",
            "grace period must be specified for the soft eviction threshold memory.available",
            id="soft-without-grace",
        ),
        pytest.param(
            {"eviction_soft_grace_period": "memory.available=-1s"},
            "evictionSoftGracePeriod",
            "'memory.available=-1s'",
            "must be a positive value",
            id="negative-grace",
        ),
        pytest.param(
            {"eviction_minimum_reclaim": "memory.available=-1"},
            "evictionMinimumReclaim",
            "'memory.available=-1'",
            "negative eviction minimum reclaim",
            id="negative-reclaim",
        ),
        pytest.param(
            {"eviction_pressure_transition_period": "5"},
            "evictionPressureTransitionPeriod",
            "'5'",
            "missing unit",
            id="transition-without-unit",
        ),
        pytest.param(
            {"enforce_node_allocatable": "pods,nodes"},
            "enforceNodeAllocatable",
            "'pods,nodes'",
            "unknown value 'nodes'",
            id="unknown-enforcement",
        ),
        pytest.param(
            {"enforce_node_allocatable": "none,pods"},
            "enforceNodeAllocatable",
            "'none,pods'",
            "'none' cannot be combined",
            id="none-combined",
        ),
        pytest.param(
            {"eviction_strategy": "greedy"},
            "evictionStrategy",
            "'greedy'",
            "'kubelet' or 'relief'",
            id="unknown-strategy",
        ),
        pytest.param(
            {"taint_keys": "memory=nodeagent.io/disk-pressure"},
            "taintKeys",
            "'memory=nodeagent.io/disk-pressure'",
            "its own name",
            id="shared-taint-key",
        ),
        pytest.param(
            {"condition_types": "memory=MemoryPressure"},
            "conditionTypes",
            "'memory=MemoryPressure'",
            "the kubelet's own condition",
            id="kubelet-condition",
        ),
        pytest.param(
            {"taint_keys": "pid=node.kubernetes.io/pid-pressure"},
            "taintKeys",
            "'pid=node.kubernetes.io/pid-pressure'",
            "node lifecycle controller",
            id="reserved-taint",
        ),
        pytest.param(
            {"condition_types": "cpu=CPUPressure"},
            "conditionTypes",
            "'cpu'",
            "'memory', 'disk' or 'pid'",
            id="unknown-pressure",
        ),
        pytest.param(
            {"eviction_max_pod_grace_period": "soon"},
            "evictionMaxPodGracePeriod",
            "'soon'",
            "integer",
            id="grace-not-a-number",
        ),
    ],
)
def test_config_errors_name_field_and_value(
    overrides: dict[str, str], field: str, value: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(environ={}, overrides=overrides)
    message = str(raised.value)
    assert f"config field '{field}" in message
    assert f"(value {value})" in message
    assert fragment in message


def test_yaml_value_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("evictionHard:\n  memory.available: [1Gi]\n")
    with pytest.raises(ConfigError, match=r"memory\.available: expected a string"):
        load_config(file, environ={})


_PARSED_FIELDS = {
    "eviction_hard",
    "eviction_soft",
    "eviction_soft_grace_period",
    "eviction_minimum_reclaim",
    "eviction_pressure_transition_period",
}


def test_fields_hold_parsed_values_and_dump_canonical_text() -> None:
    config = load_config(
        environ={},
        overrides={
            "eviction_hard": "memory.available<1.5Gi,nodefs.available<0%,pid.available<1e3,"
            "memory.pressure.some.avg10>40",
            "eviction_soft": "nodefs.available<12.5%,memory.pressure.some.avg10>20.25",
            "eviction_soft_grace_period": "nodefs.available=90s,memory.pressure.some.avg10=0",
            "eviction_minimum_reclaim": "nodefs.available=1024Mi,memory.pressure.some.avg10=5",
            "eviction_pressure_transition_period": "120s",
        },
    )
    assert config.eviction_hard == {
        Signal.MEMORY_AVAILABLE: thr.Quantity(1536 * Mi),
        Signal.NODEFS_AVAILABLE: None,
        Signal.PID_AVAILABLE: thr.Quantity(1000, QuantityFormat.DECIMAL_EXPONENT),
        Signal.MEMORY_PRESSURE_SOME_AVG10: thr.StallPercent(4000),
    }
    assert config.eviction_soft_grace_period == {
        Signal.NODEFS_AVAILABLE: 90.0,
        Signal.MEMORY_PRESSURE_SOME_AVG10: 0.0,
    }
    assert config.eviction_pressure_transition_period == 120.0
    assert config.model_dump(include=_PARSED_FIELDS) == {
        "eviction_hard": {
            "memory.available": "1536Mi",
            "nodefs.available": "0%",
            "pid.available": "1e3",
            "memory.pressure.some.avg10": "40%",
        },
        "eviction_soft": {"nodefs.available": "12.5%", "memory.pressure.some.avg10": "20.25%"},
        "eviction_soft_grace_period": {
            "nodefs.available": "1m30s",
            "memory.pressure.some.avg10": "0s",
        },
        "eviction_minimum_reclaim": {
            "nodefs.available": "1Gi",
            "memory.pressure.some.avg10": "5%",
        },
        "eviction_pressure_transition_period": "2m0s",
    }
    reloaded = load_config(environ={}, overrides=config.model_dump(include=_PARSED_FIELDS))
    assert reloaded.model_dump(include=_PARSED_FIELDS) == config.model_dump(include=_PARSED_FIELDS)
    assert EvictionPolicy.from_settings(reloaded) == EvictionPolicy.from_settings(config)


def test_the_policy_parses_nothing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    overrides = {
        "eviction_hard": "memory.available<1Gi,nodefs.available<10%,io.pressure.full.avg10>30",
        "eviction_soft": "memory.available<2Gi",
        "eviction_soft_grace_period": "memory.available=1m",
        "eviction_minimum_reclaim": "memory.available=100Mi,io.pressure.full.avg10=5",
        "eviction_pressure_transition_period": "0s",
        "merge_default_eviction_settings": "true",
    }
    config = load_config(environ={}, overrides=overrides)
    expected = EvictionPolicy.from_settings(config)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"parsed again: {args}")

    for module, name in [
        (thr, "parse_threshold_statements"),
        (thr, "parse_threshold_statement"),
        (thr, "parse_grace_periods"),
        (thr, "parse_minimum_reclaims"),
        (thr, "parse_signal"),
        (units, "parse_quantity"),
        (units, "parse_percentage"),
        (durations, "parse_go_duration"),
    ]:
        monkeypatch.setattr(module, name, refuse)
    assert EvictionPolicy.from_settings(config) == expected
    assert expected.pressure_transition_period == 300


_SUFFIXES = ("", "k", "M", "G", "Ki", "Mi", "Gi")


@st.composite
def _statement(draw: st.DrawFn, psi: bool) -> str:
    if psi:
        return f"{draw(st.integers(0, 9999)) / 100:g}"
    if draw(st.booleans()):
        percent = draw(st.decimals(min_value="0.001", max_value="99.999", places=3))
        return f"{percent}%"
    whole = draw(st.integers(1, 10_000))
    fraction = draw(st.sampled_from(("", ".5", ".25", ".001")))
    return f"{whole}{fraction}{draw(st.sampled_from(_SUFFIXES))}"


@st.composite
def _eviction_fields(draw: st.DrawFn) -> dict[str, Any]:
    signals = draw(st.lists(st.sampled_from(list(Signal)), min_size=1, max_size=6, unique=True))
    psi = thr.PSI_SIGNALS
    hard = {str(s): draw(_statement(s in psi)) for s in signals}
    soft = {str(s): draw(_statement(s in psi)) for s in signals[::2]}
    grace = {str(s): f"{draw(st.integers(0, 10**7))}ms" for s in signals[::2]}
    reclaim = {str(s): draw(_statement(s in psi)) for s in signals if s not in psi}
    return {
        "eviction_hard": hard,
        "eviction_soft": soft,
        "eviction_soft_grace_period": grace,
        "eviction_minimum_reclaim": reclaim,
        "eviction_pressure_transition_period": f"{draw(st.integers(0, 10**7))}ms",
    }


@given(_eviction_fields())
@settings(max_examples=200, deadline=None)
def test_dumped_fields_load_to_the_same_thresholds(fields: dict[str, Any]) -> None:
    config = load_config(environ={}, overrides=fields)
    dumped = config.model_dump(include=_PARSED_FIELDS)
    reloaded = load_config(environ={}, overrides=dumped)
    # Durations compare as their text: to the nanosecond, as Go holds them.
    assert reloaded.model_dump(include=_PARSED_FIELDS) == dumped
    capacity = 10**15
    for field in ("eviction_hard", "eviction_soft", "eviction_minimum_reclaim"):
        before, after = getattr(config, field), getattr(reloaded, field)
        assert before.keys() == after.keys()
        for signal, value in before.items():
            if value is None:
                assert after[signal] is None
            else:
                assert thr.resolve(after[signal], capacity) == thr.resolve(value, capacity)


def test_settings_changed_past_validation_still_fail_naming_the_field() -> None:
    settings = EvictionSettings()
    settings.eviction_soft = {Signal.MEMORY_AVAILABLE: thr.Quantity(Gi)}
    with pytest.raises(ConfigError) as raised:
        EvictionPolicy.from_settings(settings)
    assert raised.value.field == "evictionSoft"
    assert "config field 'evictionSoft' (value {'memory.available': '1Gi'})" in str(raised.value)
    assert "grace period must be specified" in str(raised.value)
