"""The bill model's arithmetic: integers, half-even, 1 kWh = 3.6e9 mJ, lines that add up."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.money import (
    MAX_ENERGY_MJ,
    MJ_PER_KWH,
    Line,
    MoneyError,
    Terms,
    div_half_even,
    energy_limit_mj,
    energy_micro,
    from_micro,
    interval_line,
    to_micro,
)

HOUR_MS = 3_600_000


def h100(**overrides: int) -> Terms:
    """One H100 at fra-1 (docs/billing.md's worked examples)."""
    fields = {
        "start_ms": 0,
        "planned_ms": 4_548_211,
        "gpus": 1,
        "attributed_power_mw": 700_000,
        "pue_milli": 1120,
        "tariff_micro_per_kwh": 210_000,
        "capacity_micro_per_gpu_hour": 2_200_000,
    }
    return Terms(**{**fields, **overrides})


def test_one_kwh_at_pue_one_costs_the_tariff():
    assert energy_micro(MJ_PER_KWH, 1000, 250_000) == 250_000
    assert energy_micro(MJ_PER_KWH, 1120, 210_000) == 235_200  # facility energy x 1.12


def test_quote_is_capacity_plus_planned_energy():
    assert h100().quote() == 2_779_462 + 208_005


def test_planned_energy_is_what_priced_energy_prices():
    terms = h100()
    whole = terms.planned_mj(0, 5 * HOUR_MS)  # only the planned time counts
    assert (
        whole == 700 * 4_548_211 == terms.planned_mj(0, 1000) + terms.planned_mj(1000, HOUR_MS * 5)
    )
    hour = terms.planned_mj(0, HOUR_MS)
    assert (
        energy_micro(hour, 1120, 210_000) == interval_line(terms, 0, HOUR_MS, 0).priced_energy_micro
    )
    assert terms.planned_mj(4_548_211, 5 * HOUR_MS) == 0


def test_overrun_is_charged_and_underrun_never_goes_negative():
    over = interval_line(h100(), 0, 5 * HOUR_MS, 700 * 5 * HOUR_MS)
    assert over.settlement_micro == 615_195 and over.total_micro == 11_823_200
    idle = interval_line(h100(), 0, 5 * HOUR_MS, 0)
    assert idle.settlement_micro == -208_005 and idle.total_micro == 11_000_000 > 0


def test_energy_limit_is_board_power_times_gpus_and_time_plus_tolerance():
    assert energy_limit_mj(700, 2, HOUR_MS) == 700 * 2 * HOUR_MS * 105 // 100


@pytest.mark.parametrize(
    ("n", "d", "q"),
    [(5, 2, 2), (7, 2, 4), (-5, 2, -2), (-7, 2, -4), (1, 3, 0), (2, 3, 1), (-2, 3, -1)],
)
def test_half_even_rounding(n, d, q):
    assert div_half_even(n, d) == q


@given(st.integers(0, MAX_ENERGY_MJ), st.integers(1000, 5000), st.integers(0, 10**12))
def test_energy_matches_decimal_half_even(energy, pue, tariff):
    with localcontext() as ctx:
        ctx.prec = 80
        exact = Decimal(energy) * pue * tariff / (Decimal(MJ_PER_KWH) * 1000)
        expected = int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
    assert energy_micro(energy, pue, tariff) == expected


@given(
    st.integers(0, 10 * HOUR_MS),
    st.integers(0, 10 * HOUR_MS),
    st.integers(0, 10 * HOUR_MS),
    st.integers(1, 8),
    st.integers(1, 700_000),
)
def test_split_lines_add_up_to_the_whole_and_are_never_negative(a, b, planned, gpus, mw):
    terms = h100(planned_ms=planned + 1, gpus=gpus, attributed_power_mw=gpus * mw)
    first, second = sorted((a, b))
    left = interval_line(terms, 0, first, 0)
    right = interval_line(terms, first, second, 0)
    whole = interval_line(terms, 0, second, 0)
    for name in ("capacity_micro", "priced_energy_micro", "total_micro"):
        assert getattr(left, name) + getattr(right, name) == getattr(whole, name)
    assert min(left.total_micro, right.total_micro) >= 0


@pytest.mark.parametrize(
    ("amount", "micro"),
    [("0.121601", 121_601), (Decimal("2.2"), 2_200_000), (3, 3_000_000), ("0.0000005", 0)],
)
def test_to_micro_is_the_one_conversion(amount, micro):
    assert to_micro(amount) == micro
    assert to_micro(from_micro(micro)) == micro


@pytest.mark.parametrize("bad", [1.5, True, "x", "NaN", None])
def test_to_micro_refuses_floats_and_non_numbers(bad):
    with pytest.raises(MoneyError):
        to_micro(bad)


@pytest.mark.parametrize("bad", [1.5, True, "1", None, -1, MAX_ENERGY_MJ + 1])
def test_rejects_non_integer_or_out_of_range_energy(bad):
    with pytest.raises((TypeError, ValueError), match="energy_mj"):
        energy_micro(bad, 1000, 1)


def test_a_line_as_dict_names_every_field_of_the_line():
    import dataclasses

    line = Line(1, 2, 3, -1, 4)
    assert line.as_dict() == dataclasses.asdict(line)
