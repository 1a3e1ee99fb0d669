"""Quantities, percentages and durations: parsed and printed exactly as the kubelet does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.eviction import units
from nodeagent.eviction.units import QuantityFormat

Ki, Mi, Gi = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize(
    ("text", "value", "quantity_format"),
    [
        pytest.param("100Mi", 100 * Mi, QuantityFormat.BINARY_SI, id="binary"),
        pytest.param("1.5Gi", 1536 * Mi, QuantityFormat.BINARY_SI, id="binary-fraction"),
        pytest.param("1G", 10**9, QuantityFormat.DECIMAL_SI, id="decimal"),
        pytest.param("1200", 1200, QuantityFormat.DECIMAL_SI, id="plain"),
        pytest.param("1e3", 1000, QuantityFormat.DECIMAL_EXPONENT, id="exponent"),
        pytest.param("1E3", 1000, QuantityFormat.DECIMAL_EXPONENT, id="exponent-upper"),
        pytest.param("5E", 5 * 10**18, QuantityFormat.DECIMAL_SI, id="exa-suffix"),
        pytest.param("150Mi", 157_286_400, QuantityFormat.BINARY_SI, id="inodes-as-Mi"),
        pytest.param("500m", 1, QuantityFormat.DECIMAL_SI, id="milli-rounds-up"),
        pytest.param(".5Ki", 512, QuantityFormat.BINARY_SI, id="leading-dot"),
        pytest.param("+1Ki", 1024, QuantityFormat.BINARY_SI, id="plus-sign"),
        pytest.param("-1Gi", -Gi, QuantityFormat.BINARY_SI, id="negative-parses"),
    ],
)
def test_quantities_parse(text: str, value: int, quantity_format: QuantityFormat) -> None:
    parsed = units.parse_quantity(text)
    assert (parsed.value, parsed.format) == (value, quantity_format)


@pytest.mark.parametrize(
    "text",
    ["1Gb", "1 Gi", "Gi", "", "1.5.5", "1ki", "abc", "1e", "1e3k", "nan", "1_000", "0x10"],
)
def test_malformed_quantities_are_refused_with_the_grammar(text: str) -> None:
    with pytest.raises(units.UnitError, match="expected a number with an optional suffix"):
        units.parse_quantity(text)


@pytest.mark.parametrize(
    ("value", "quantity_format", "text"),
    [
        pytest.param(1536 * Mi, QuantityFormat.BINARY_SI, "1536Mi", id="1.5Gi"),
        pytest.param(Gi + 1, QuantityFormat.BINARY_SI, "1073741825", id="not-a-multiple"),
        pytest.param(1_073_741_840, QuantityFormat.BINARY_SI, "1073741840", id="float32-10pct"),
        pytest.param(512, QuantityFormat.BINARY_SI, "512", id="small-binary-is-decimal"),
        pytest.param(1000, QuantityFormat.BINARY_SI, "1k", id="small-binary-1000"),
        pytest.param(2 * Gi, QuantityFormat.BINARY_SI, "2Gi", id="Gi"),
        pytest.param(0, QuantityFormat.BINARY_SI, "0", id="zero"),
        pytest.param(-100 * Mi, QuantityFormat.BINARY_SI, "-100Mi", id="negative"),
        pytest.param(10**9, QuantityFormat.DECIMAL_SI, "1G", id="G"),
        pytest.param(1_500_000_000, QuantityFormat.DECIMAL_SI, "1500M", id="1500M"),
        pytest.param(1200, QuantityFormat.DECIMAL_SI, "1200", id="plain"),
        pytest.param(1000, QuantityFormat.DECIMAL_EXPONENT, "1e3", id="exponent"),
        pytest.param(1024**7, QuantityFormat.BINARY_SI, "1024Ei", id="beyond-Ei"),
    ],
)
def test_canonical_quantity_text(value: int, quantity_format: QuantityFormat, text: str) -> None:
    assert units.format_quantity(value, quantity_format) == text


@given(st.integers(min_value=0, max_value=2**62))
def test_binary_text_reads_back_as_the_same_amount(value: int) -> None:
    assert units.parse_quantity(units.format_quantity(value)).value == value


@pytest.mark.parametrize(
    ("text", "fraction"),
    [
        pytest.param("10%", 0.10000000149011612, id="float32-10"),
        pytest.param("5%", 0.05000000074505806, id="float32-5"),
        pytest.param("0.5%", 0.004999999888241291, id="half"),
        pytest.param("-5%", -0.05000000074505806, id="negative-parses"),
    ],
)
def test_percentages_are_float32_as_the_kubelet_stores_them(text: str, fraction: float) -> None:
    assert units.parse_percentage(text) == fraction


@pytest.mark.parametrize(
    ("percentage", "capacity", "amount"),
    [
        pytest.param("10%", 10 * Gi, 1_073_741_840, id="10pct-of-10GiB"),
        pytest.param("20%", 1000 * Mi, 209_715_203, id="20pct-of-1000MiB"),
    ],
)
def test_float32_artefacts_of_the_reference(percentage: str, capacity: int, amount: int) -> None:
    assert int(capacity * units.parse_percentage(percentage)) == amount


@pytest.mark.parametrize("text", ["abc%", "%", "10", "1e%", "nan%", "inf%", "1_0%"])
def test_malformed_percentages(text: str) -> None:
    with pytest.raises(units.UnitError, match="expected a number followed by %"):
        units.parse_percentage(text)
