"""The settlement formula: integers, half-even, 1 kWh = 3.6e9 mJ."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.money import MAX_ENERGY_MJ, MJ_PER_KWH, div_half_even, settlement_amount


def test_one_extra_kwh_costs_the_tariff():
    assert settlement_amount(2 * MJ_PER_KWH, MJ_PER_KWH, 250_000) == 250_000


def test_less_energy_than_priced_is_a_credit():
    assert settlement_amount(0, MJ_PER_KWH, 250_000) == -250_000


@pytest.mark.parametrize(
    ("n", "d", "q"),
    [(5, 2, 2), (7, 2, 4), (-5, 2, -2), (-7, 2, -4), (1, 3, 0), (2, 3, 1), (-2, 3, -1)],
)
def test_half_even_rounding(n, d, q):
    assert div_half_even(n, d) == q


@given(st.integers(0, MAX_ENERGY_MJ), st.integers(0, MAX_ENERGY_MJ), st.integers(0, 10**12))
def test_matches_decimal_half_even(measured, attributed, tariff):
    exact = Decimal(measured - attributed) * tariff / Decimal(MJ_PER_KWH)
    with_context = (Decimal(measured - attributed) * tariff).scaleb(0)
    expected = int((with_context / MJ_PER_KWH).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
    assert settlement_amount(measured, attributed, tariff) == expected
    assert abs(settlement_amount(measured, attributed, tariff) - exact) <= Decimal("0.5")


@pytest.mark.parametrize("bad", [1.5, True, "1", None, -1, MAX_ENERGY_MJ + 1])
def test_rejects_non_integer_or_out_of_range(bad):
    with pytest.raises((TypeError, ValueError), match="measured_mj"):
        settlement_amount(bad, 0, 1)
