"""Quantities, percentages and durations: parsed and printed exactly as the kubelet does."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from nodeagent.k8s import quantities as units
from nodeagent.k8s.quantities import QuantityFormat

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
    "text", ["1e400000", "1e1000", "-1e1000", "1" + "0" * 1000, "1" + "0" * 997 + "k"]
)
def test_absurdly_large_quantities_are_refused_not_computed(text: str) -> None:
    with pytest.raises(units.UnitError, match=r"too large \(10\^1000 or more\)"):
        units.parse_quantity(text)


@pytest.mark.parametrize("text", ["9" * 999, "1e999", "1e-400000", "0e99999", "1e40"])
def test_large_small_and_zero_quantities_below_the_bound_parse(text: str) -> None:
    assert units.parse_quantity(text).value == math.ceil(Decimal(text))


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


class TestTheOneQuantityParser:
    """:func:`units.parse_exact_quantity` is the project's only quantity parser; before it
    computed values itself it delegated to the ``kubernetes`` client's. On the grammar
    both accept, the values must be the same, digit for digit."""

    digits = st.text("0123456789", min_size=1, max_size=30)
    mantissas = st.one_of(
        digits,
        st.builds("{}.{}".format, digits, st.text("0123456789", max_size=12)),
        st.builds(".{}".format, digits),
    )
    suffixes = st.one_of(
        st.sampled_from(["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", *"numkMGTPE"]),
        st.builds(
            "{}{}{}".format,
            st.sampled_from("eE"),
            st.sampled_from(["", "+", "-"]),
            st.integers(0, 40).map(str),
        ),
    )
    quantities = st.builds("{}{}{}".format, st.sampled_from(["", "+", "-"]), mantissas, suffixes)

    @given(quantities)
    def test_values_match_the_kubernetes_clients_parser(self, text: str) -> None:
        from kubernetes.utils import quantity

        expected = quantity.parse_quantity(text)  # type: ignore[no-untyped-call]
        if abs(expected) >= Decimal(10) ** units.MAX_EXPONENT:
            with pytest.raises(units.UnitError, match="too large"):
                units.parse_exact_quantity(text)
            return
        # the client rounds its products to the default context's 28 digits, ours are
        # exact: both agree rounded to 28 digits (unary plus rounds to the context)
        assert +units.parse_exact_quantity(text)[0] == +expected
        assert +units.quantity_value(text) == +expected

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            pytest.param(2, Decimal(2), id="yaml-int"),
            pytest.param(0.5, Decimal("0.5"), id="yaml-float"),
            pytest.param(Decimal("1.5"), Decimal("1.5"), id="decimal"),
            pytest.param("128Mi", Decimal(128 * Mi), id="text"),
        ],
    )
    def test_numbers_pass_through_exactly(self, value: float | Decimal, expected: Decimal) -> None:
        assert units.quantity_value(value) == expected

    @pytest.mark.parametrize("value", ["Infinity", "NaN", " 1", "1_000", True])
    def test_what_decimal_alone_would_take_is_refused(self, value: str | bool) -> None:
        # The client's parser handed these to Decimal, which takes them; the API server
        # does not (and Infinity used to crash a configuration load with OverflowError).
        with pytest.raises(units.UnitError, match="invalid quantity"):
            units.quantity_value(value)


class TestFloat32:
    """:func:`units.float32` stands in for numpy's float32 scalar, bit for bit."""

    @given(st.floats(allow_nan=False, width=64))
    def test_rounds_as_numpy_does(self, value: float) -> None:
        import numpy

        with numpy.errstate(over="ignore"):
            assert units.float32(value) == float(numpy.float32(value))

    @given(st.floats(-1e6, 1e6, allow_nan=False), st.floats(-1e6, 1e6, allow_nan=False))
    def test_division_in_float64_rounded_once_more_is_float32_division(
        self, a: float, b: float
    ) -> None:
        import numpy

        assume(units.float32(b) != 0)
        with numpy.errstate(over="ignore", under="ignore"):
            expected = float(numpy.float32(a) / numpy.float32(b))
        assert units.float32(units.float32(a) / units.float32(b)) == expected
