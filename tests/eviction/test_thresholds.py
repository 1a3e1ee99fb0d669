"""Threshold parsing and arithmetic, case by case as the kubelet's ``ParseThresholdConfig``
and ``thresholdsMet`` have them."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.eviction import thresholds as thr
from nodeagent.k8s.quantities import QuantityFormat
from nodeagent.model import FsLayout, Signal, SignalValue

from .builders import Gi, Mi

Q = thr.Quantity
P = thr.Percentage


def parse(
    hard: dict[str, str] | None = None,
    soft: dict[str, str] | None = None,
    grace: dict[str, str] | None = None,
    reclaim: dict[str, str] | None = None,
    *,
    allocatable: bool = False,
) -> tuple[thr.Threshold, ...]:
    return thr.parse_threshold_config(
        hard=hard or {},
        soft=soft or {},
        grace_periods=grace or {},
        minimum_reclaims=reclaim or {},
        enforce_pods_allocatable=allocatable,
    )


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {"hard": {"memory.available": "150Mi"}},
            [thr.Threshold(Signal.MEMORY_AVAILABLE, Q(150 * Mi))],
            id="hard-quantity",
        ),
        pytest.param(
            {"hard": {"nodefs.available": "10%"}},
            [thr.Threshold(Signal.NODEFS_AVAILABLE, P(0.10000000149011612))],
            id="hard-percentage",
        ),
        pytest.param(
            {"hard": {"memory.available": "0%", "nodefs.available": "100%"}},
            [],
            id="0%-and-100%-dropped",
        ),
        pytest.param(
            {"hard": {"memory.available": "100.0%", "nodefs.available": "0.0%"}},
            [
                thr.Threshold(Signal.MEMORY_AVAILABLE, P(1.0)),
                thr.Threshold(Signal.NODEFS_AVAILABLE, P(0.0)),
            ],
            id="quirk-100.0%-is-a-threshold",
        ),
        pytest.param(
            {
                "soft": {"memory.available": "2Gi", "nodefs.available": "0%"},
                "grace": {"memory.available": "1m30s", "imagefs.available": "1m"},
            },
            [thr.Threshold(Signal.MEMORY_AVAILABLE, Q(2 * Gi), grace_period=90.0)],
            id="soft-with-grace-unused-grace-ignored",
        ),
        pytest.param(
            {"soft": {"memory.available": "2Gi"}, "grace": {"memory.available": "0s"}},
            [thr.Threshold(Signal.MEMORY_AVAILABLE, Q(2 * Gi), grace_period=0.0)],
            id="quirk-soft-0s-is-hard",
        ),
        pytest.param(
            {
                "hard": {"memory.available": "1Gi", "nodefs.available": "1Gi"},
                "soft": {"memory.available": "2Gi"},
                "grace": {"memory.available": "30s"},
                "reclaim": {"memory.available": "500Mi", "nodefs.available": "5%"},
            },
            [
                thr.Threshold(Signal.MEMORY_AVAILABLE, Q(Gi), min_reclaim=Q(500 * Mi)),
                thr.Threshold(Signal.NODEFS_AVAILABLE, Q(Gi), min_reclaim=P(0.05000000074505806)),
                thr.Threshold(Signal.MEMORY_AVAILABLE, Q(2 * Gi), 30.0, Q(500 * Mi)),
            ],
            id="min-reclaim-on-every-threshold-of-its-signal",
        ),
        pytest.param(
            {"hard": {"memory.available": "1Gi"}, "reclaim": {"memory.available": "0"}},
            [
                thr.Threshold(
                    Signal.MEMORY_AVAILABLE, Q(Gi), min_reclaim=Q(0, QuantityFormat.DECIMAL_SI)
                )
            ],
            id="zero-min-reclaim-quantity-allowed",
        ),
        pytest.param(
            {"hard": {"memory.available": " 1Gi "}},
            [thr.Threshold(Signal.MEMORY_AVAILABLE, Q(Gi))],
            id="whitespace-trimmed",
        ),
    ],
)
def test_parse_threshold_config(kwargs: dict[str, Any], expected: list[thr.Threshold]) -> None:
    assert list(parse(**kwargs)) == expected


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        pytest.param(
            {"hard": {"mem.available": "1Gi"}},
            "evictionHard",
            "unsupported eviction signal 'mem.available'",
            id="unknown-signal",
        ),
        pytest.param(
            {"hard": {"memory.available": "-5%"}},
            "evictionHard",
            "eviction percentage threshold memory.available must be >= 0%: -5%",
            id="negative-percentage",
        ),
        pytest.param(
            {"hard": {"nodefs.available": "150%"}},
            "evictionHard",
            "eviction percentage threshold nodefs.available must be <= 100%: 150%",
            id="over-100%",
        ),
        pytest.param(
            {"hard": {"memory.available": "0"}},
            "evictionHard",
            "eviction threshold memory.available must be positive: 0",
            id="zero-quantity",
        ),
        pytest.param(
            {"hard": {"memory.available": "-1Gi"}},
            "evictionHard",
            "eviction threshold memory.available must be positive: -1Gi",
            id="negative-quantity",
        ),
        pytest.param(
            {"hard": {"memory.available": "1Gb"}},
            "evictionHard",
            "memory.available: invalid quantity '1Gb'",
            id="bad-quantity",
        ),
        pytest.param(
            {"hard": {"nodefs.available": "ten%"}},
            "evictionHard",
            "nodefs.available: invalid percentage 'ten%'",
            id="bad-percentage",
        ),
        pytest.param(
            {"soft": {"memory.available": "2Gi"}},
            "evictionSoft",
            "grace period must be specified for the soft eviction threshold memory.available",
            id="soft-without-grace",
        ),
        pytest.param(
            {"grace": {"memory.avail": "1m"}},
            "evictionSoftGracePeriod",
            "unsupported eviction signal 'memory.avail'",
            id="grace-unknown-signal",
        ),
        pytest.param(
            {"grace": {"memory.available": "-1m"}},
            "evictionSoftGracePeriod",
            "invalid eviction grace period specified: -1m, must be a positive value",
            id="grace-negative",
        ),
        pytest.param(
            {"grace": {"memory.available": "90"}},
            "evictionSoftGracePeriod",
            'time: missing unit in duration "90"',
            id="grace-missing-unit",
        ),
        pytest.param(
            {"reclaim": {"memory.available": "0%"}},
            "evictionMinimumReclaim",
            "eviction percentage minimum reclaim memory.available must be positive: 0%",
            id="reclaim-zero-percent",
        ),
        pytest.param(
            {"reclaim": {"memory.available": "-1Mi"}},
            "evictionMinimumReclaim",
            "negative eviction minimum reclaim specified for memory.available",
            id="reclaim-negative",
        ),
        pytest.param(
            {"reclaim": {"nodefs.bytes": "1Gi"}},
            "evictionMinimumReclaim",
            "unsupported eviction signal 'nodefs.bytes'",
            id="reclaim-unknown-signal",
        ),
        pytest.param(
            {"hard": {"memory.pressure.some.avg10": "120"}},
            "evictionHard",
            "stall percentage must be >= 0 and below 100: 120",
            id="psi-over-100",
        ),
        pytest.param(
            {"hard": {"io.pressure.full.avg10": "12.345"}},
            "evictionHard",
            "has more than two decimals",
            id="psi-too-precise",
        ),
        pytest.param(
            {"hard": {"memory.pressure.some.avg10": "lots"}},
            "evictionHard",
            "invalid stall percentage 'lots'",
            id="psi-not-a-number",
        ),
        pytest.param(
            {
                "hard": {"memory.pressure.some.avg10": "20"},
                "reclaim": {"memory.pressure.some.avg10": "25"},
            },
            "evictionMinimumReclaim",
            "minimum reclaim 25% exceeds the threshold 20%",
            id="psi-reclaim-beyond-threshold",
        ),
    ],
)
def test_every_kubelet_validation_error(kwargs: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(thr.ThresholdError) as raised:
        parse(**kwargs)
    assert raised.value.field == field
    assert message in str(raised.value)


def test_hard_memory_thresholds_are_copied_to_allocatable_with_their_min_reclaim() -> None:
    parsed = parse(
        {"memory.available": "1Gi"},
        {"memory.available": "2Gi", "nodefs.available": "20%"},
        {"memory.available": "1m", "nodefs.available": "1m"},
        {"memory.available": "100Mi"},
        allocatable=True,
    )
    copies = [t for t in parsed if t.signal is Signal.ALLOCATABLE_MEMORY_AVAILABLE]
    assert copies == [thr.Threshold(Signal.ALLOCATABLE_MEMORY_AVAILABLE, Q(Gi), 0.0, Q(100 * Mi))]
    assert copies[0].derived_from is Signal.MEMORY_AVAILABLE


def test_a_soft_threshold_with_zero_grace_is_copied_to_allocatable_as_hard() -> None:
    parsed = parse(
        soft={"memory.available": "2Gi"}, grace={"memory.available": "0s"}, allocatable=True
    )
    assert {t.signal for t in parsed} == {
        Signal.MEMORY_AVAILABLE,
        Signal.ALLOCATABLE_MEMORY_AVAILABLE,
    }


def test_no_allocatable_copy_without_pods_enforcement() -> None:
    assert [t.signal for t in parse({"memory.available": "1Gi"})] == [Signal.MEMORY_AVAILABLE]


@pytest.mark.parametrize(
    ("layout", "source"),
    [
        (FsLayout.SINGLE, "nodefs"),
        (FsLayout.SPLIT, "nodefs"),
        (FsLayout.DEDICATED_IMAGEFS, "imagefs"),
    ],
)
def test_containerfs_thresholds_are_copied_per_layout(layout: FsLayout, source: str) -> None:
    configured = parse(
        {
            "nodefs.available": "10%",
            "nodefs.inodesFree": "5%",
            "imagefs.available": "15%",
            "imagefs.inodesFree": "4%",
            "containerfs.available": "50%",  # never honoured: the kubelet overwrites it
        },
        {"nodefs.available": "20%", "imagefs.available": "25%"},
        {"nodefs.available": "1m", "imagefs.available": "2m"},
    )
    derived = thr.derive_containerfs_thresholds(configured, layout)
    for kind in ("available", "inodesFree"):
        copies = [t for t in derived if t.signal == f"containerfs.{kind}"]
        originals = [t for t in configured if t.signal == f"{source}.{kind}"]
        assert [(t.value, t.grace_period) for t in copies] == [
            (t.value, t.grace_period) for t in originals
        ]
        assert all(t.derived_from == f"{source}.{kind}" for t in copies)


@pytest.mark.parametrize(
    ("value", "capacity", "available", "met"),
    [
        pytest.param(Q(Gi), 8 * Gi, Gi - 1, True, id="below"),
        pytest.param(Q(Gi), 8 * Gi, Gi, False, id="equal-is-not-met"),
        pytest.param(Q(Gi), 8 * Gi, Gi + 1, False, id="above"),
        pytest.param(P(0.10000000149011612), 10 * Gi, 1_073_741_839, True, id="pct-below"),
        pytest.param(P(0.10000000149011612), 10 * Gi, 1_073_741_840, False, id="pct-float32-bar"),
        pytest.param(P(0.0), 10 * Gi, 0, False, id="0.0%-never-met"),
    ],
)
def test_strict_less_than(
    value: thr.ThresholdValue, capacity: int, available: int, met: bool
) -> None:
    threshold = thr.Threshold(Signal.NODEFS_AVAILABLE, value)
    observed = SignalValue(available, capacity)
    assert thr.is_met(threshold, observed, enforce_min_reclaim=False) is met


@pytest.mark.parametrize(
    ("available", "met_plain", "met_with_reclaim"),
    [
        pytest.param(Gi - 1, True, True, id="below-threshold"),
        pytest.param(Gi, False, True, id="at-threshold"),
        pytest.param(1536 * Mi - 1, False, True, id="just-below-threshold-plus-reclaim"),
        pytest.param(1536 * Mi, False, False, id="at-threshold-plus-reclaim"),
    ],
)
def test_min_reclaim_raises_the_bar(
    available: int, met_plain: bool, met_with_reclaim: bool
) -> None:
    # Docs example: nodefs.available<1Gi with min reclaim 500Mi reclaims to 1.5 GiB.
    threshold = thr.Threshold(Signal.NODEFS_AVAILABLE, Q(Gi), min_reclaim=Q(512 * Mi))
    observed = SignalValue(available, 100 * Gi)
    assert thr.is_met(threshold, observed, enforce_min_reclaim=False) is met_plain
    assert thr.is_met(threshold, observed, enforce_min_reclaim=True) is met_with_reclaim


def test_imagefs_docs_example_reclaims_to_102Gi() -> None:
    threshold = thr.Threshold(Signal.IMAGEFS_AVAILABLE, Q(100 * Gi), min_reclaim=Q(2 * Gi))
    assert (
        thr.threshold_quantity(threshold, 500 * Gi) + thr.reclaim_quantity(threshold, 500 * Gi)
        == 102 * Gi
    )


@pytest.mark.parametrize(
    ("text", "hundredths"),
    [("20", 2000), ("20%", 2000), (">20", 2000), ("0", 0), ("12.5", 1250), ("99.99", 9999)],
)
def test_psi_statements(text: str, hundredths: int) -> None:
    threshold = thr.parse_threshold_statement(
        "memory.pressure.some.avg10", text, field="evictionSoft"
    )
    assert threshold == thr.Threshold(
        Signal.MEMORY_PRESSURE_SOME_AVG10, thr.StallPercent(hundredths)
    )
    assert threshold.operator is thr.Operator.GREATER_THAN


@pytest.mark.parametrize(
    ("stall", "met", "met_with_reclaim"),
    [
        pytest.param(2001, True, True, id="above"),
        pytest.param(2000, False, True, id="equal-is-not-met"),
        pytest.param(1501, False, True, id="within-reclaim"),
        pytest.param(1500, False, False, id="reclaimed"),
    ],
)
def test_psi_threshold_fires_above_and_resolves_below_minus_reclaim(
    stall: int, met: bool, met_with_reclaim: bool
) -> None:
    threshold = thr.Threshold(
        Signal.MEMORY_PRESSURE_SOME_AVG10, thr.StallPercent(2000), min_reclaim=thr.StallPercent(500)
    )
    observed = SignalValue(thr.PSI_CAPACITY - stall, thr.PSI_CAPACITY)
    assert thr.is_met(threshold, observed, enforce_min_reclaim=False) is met
    assert thr.is_met(threshold, observed, enforce_min_reclaim=True) is met_with_reclaim


@pytest.mark.parametrize(
    ("text", "separator", "entries"),
    [
        pytest.param(
            "memory.available<1Gi,nodefs.available<10%",
            "<",
            {"memory.available": "1Gi", "nodefs.available": "10%"},
            id="hard",
        ),
        pytest.param(
            " memory.available < 1Gi , ,nodefs.available<10%",
            "<",
            {"memory.available": "1Gi", "nodefs.available": "10%"},
            id="spaces-and-empty-items",
        ),
        pytest.param(
            "memory.pressure.some.avg10>20,memory.available<1Gi",
            "<",
            {"memory.pressure.some.avg10": "20", "memory.available": "1Gi"},
            id="psi-greater-than",
        ),
        pytest.param("memory.available=1m30s", "=", {"memory.available": "1m30s"}, id="grace"),
        pytest.param("", "<", {}, id="empty-clears"),
    ],
)
def test_flag_forms(text: str, separator: str, entries: dict[str, str]) -> None:
    assert thr.parse_flag_map(text, field="evictionHard", separator=separator) == entries


@pytest.mark.parametrize(
    ("text", "separator", "message"),
    [
        (
            "memory.available=1Gi",
            "<",
            "malformed pair 'memory.available=1Gi', expect string<string",
        ),
        ("memory.available", "=", "malformed pair 'memory.available', expect string=string"),
        (
            "memory.available<1Gi,memory.available<2Gi",
            "<",
            "duplicate eviction signal memory.available",
        ),
        ("memory.available>1Gi", "<", "the only operator is '<'"),
        ("memory.pressure.some.avg10<20", "<", "write memory.pressure.some.avg10>PERCENT"),
        ("memory.avail<1Gi", "<", "unsupported eviction signal 'memory.avail'"),
    ],
)
def test_bad_flag_forms(text: str, separator: str, message: str) -> None:
    with pytest.raises(thr.ThresholdError, match=message):
        thr.parse_flag_map(text, field="evictionHard", separator=separator)


def test_thresholds_describe_themselves_as_written() -> None:
    (mem, disk, psi) = parse(
        {"memory.available": "1.5Gi", "nodefs.available": "10%", "memory.pressure.full.avg10": "40"}
    )
    assert (mem.describe(), disk.describe(), psi.describe()) == (
        "memory.available<1536Mi",
        "nodefs.available<10%",
        "memory.pressure.full.avg10>40%",
    )
