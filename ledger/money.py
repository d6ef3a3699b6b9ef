"""The one money module: units, the conversion to micro-units and the bill model's arithmetic.

Integers only. Energy is in millijoules (the NVML total-energy counter's unit), power in
milliwatts, time in milliseconds, PUE in thousandths, tariffs in micro-units of the currency
per kWh of facility energy, capacity rates in micro-units per GPU-hour, amounts in
micro-units. The contract re-computes every line on each endorsing peer and all of them must
agree to the last micro-unit, so every division rounds once, half to even. `docs/billing.md`
is the model written out; the names below are its terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from ledger.units import MJ_PER_KWH, MS_PER_HOUR, PUE_MILLI_PER_UNIT, UJ_PER_MJ

MICRO_PER_UNIT = 1_000_000  # amounts are micro-units of the currency
MAX_ENERGY_MJ = 10**18  # far above any lease (~3e8 kWh); bounds untrusted input
MAX_TARIFF_MICRO_PER_KWH = 10**12  # a million currency units per kWh
# NVML's energy counter is specified to +-5 % of the board's draw; a measurement may exceed
# board power x GPUs x interval by that much before it is physically impossible.
MEASURE_TOLERANCE_PCT = 5


class MoneyError(ValueError):
    """An amount cannot be represented in micro-units; the message names it."""


def div_half_even(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded half to even (banker's rounding), exactly."""
    if denominator <= 0:
        raise ValueError(f"denominator must be positive, got {denominator}")
    quotient, remainder = divmod(numerator, denominator)  # floor division: 0 <= remainder < d
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2 == 1):
        quotient += 1
    return quotient


def to_micro(amount: Decimal | int | str) -> int:
    """Currency units (a Decimal, int or decimal string; never a float) in whole micro-units,
    rounded half to even."""
    if isinstance(amount, (float, bool)):
        raise MoneyError(f"money is never a {type(amount).__name__}: {amount!r}")
    try:
        value = Decimal(amount) * MICRO_PER_UNIT
    except (InvalidOperation, TypeError):
        raise MoneyError(f"not an amount: {amount!r}") from None
    if not value.is_finite():
        raise MoneyError(f"not a finite amount: {amount!r}")
    return int(value.to_integral_value(rounding=ROUND_HALF_EVEN))


def from_micro(micro: int) -> Decimal:
    """Micro-units as an exact Decimal of currency units (for display and JSON strings)."""
    return Decimal(micro).scaleb(-6)


def _check(name: str, value: int, low: int, high: int) -> None:
    if type(value) is not int:  # bool is an int subclass; a float is never money
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


def energy_micro(energy_mj: int, pue_milli: int, tariff_micro_per_kwh: int) -> int:
    """Money for `energy_mj` of GPU energy: x PUE (facility energy) x tariff, in micro-units."""
    _check("energy_mj", energy_mj, 0, MAX_ENERGY_MJ)
    _check("tariff_micro_per_kwh", tariff_micro_per_kwh, 0, MAX_TARIFF_MICRO_PER_KWH)
    return div_half_even(
        energy_mj * pue_milli * tariff_micro_per_kwh, MJ_PER_KWH * PUE_MILLI_PER_UNIT
    )


def energy_limit_mj(board_power_w: int, gpus: int, duration_ms: int) -> int:
    """The most GPU energy `gpus` boards can draw in `duration_ms`, plus the meter tolerance
    (W x ms = mJ)."""
    return board_power_w * gpus * duration_ms * (100 + MEASURE_TOLERANCE_PCT) // 100


@dataclass(frozen=True)
class Terms:
    """The price basis a lease interval is checked against (the ledger's lease terms)."""

    start_ms: int  # when these terms took effect (lease start, or the migration)
    planned_ms: int  # how long the planned work takes at these terms
    gpus: int
    attributed_power_mw: int  # summed over the lease's GPUs, each <= its board power
    pue_milli: int
    tariff_micro_per_kwh: int
    capacity_micro_per_gpu_hour: int  # the generation's rate, plus any priority premium

    @classmethod
    def of(cls, terms: dict[str, Any]) -> Terms:
        """From a lease's terms record on the ledger (`attributed_power_mw` per GPU)."""
        return cls(
            start_ms=terms["start_ms"],
            planned_ms=terms["planned_ms"],
            gpus=len(terms["attributed_power_mw"]),
            attributed_power_mw=sum(terms["attributed_power_mw"].values()),
            pue_milli=terms["pue_milli"],
            tariff_micro_per_kwh=terms["tariff_micro_per_kwh"],
            capacity_micro_per_gpu_hour=terms["capacity_micro_per_gpu_hour"],
        )

    def capacity_until(self, t_ms: int) -> int:
        """Capacity held from the start to t_ms, in micro-units (cumulative, so adjacent
        intervals add up exactly to their union)."""
        held_ms = max(0, t_ms - self.start_ms)
        return div_half_even(self.gpus * held_ms * self.capacity_micro_per_gpu_hour, MS_PER_HOUR)

    def planned_uj_until(self, t_ms: int) -> int:
        """The planned GPU energy that falls before t_ms, in uJ (mW x ms; cumulative)."""
        planned = min(max(0, t_ms - self.start_ms), self.planned_ms)
        return self.attributed_power_mw * planned

    def planned_mj(self, start_ms: int, end_ms: int) -> int:
        """The planned (attributed) GPU energy of [start_ms, end_ms], in mJ: the energy that
        a line's priced energy prices."""
        uj = self.planned_uj_until(end_ms) - self.planned_uj_until(start_ms)
        return div_half_even(uj, UJ_PER_MJ)

    def priced_until(self, t_ms: int) -> int:
        """The planned (prepaid) energy that falls before t_ms, priced (cumulative)."""
        return div_half_even(
            self.planned_uj_until(t_ms) * self.pue_milli * self.tariff_micro_per_kwh,
            UJ_PER_MJ * MJ_PER_KWH * PUE_MILLI_PER_UNIT,
        )

    def quote(self) -> int:
        """The price quoted up front: capacity for the planned time + its planned energy."""
        end = self.start_ms + self.planned_ms
        return self.capacity_until(end) + self.priced_until(end)


@dataclass(frozen=True)
class Line:
    """One bill line: a lease interval, all amounts in micro-units."""

    capacity_micro: int  # GPU-hours held x rate
    priced_energy_micro: int  # the planned energy of the interval, as quoted
    measured_energy_micro: int  # measured GPU energy x PUE x tariff
    settlement_micro: int  # measured - priced: the true-up (negative: a credit)
    total_micro: int  # capacity + measured energy; never below zero

    def as_dict(self) -> dict[str, int]:
        # by hand: dataclasses.asdict deep-copies each int, a sixth of Settle's simulation
        return {
            "capacity_micro": self.capacity_micro,
            "priced_energy_micro": self.priced_energy_micro,
            "measured_energy_micro": self.measured_energy_micro,
            "settlement_micro": self.settlement_micro,
            "total_micro": self.total_micro,
        }


def interval_line(terms: Terms, start_ms: int, end_ms: int, measured_mj: int) -> Line:
    """The bill line of [start_ms, end_ms] under `terms`, given the GPU energy measured."""
    if not terms.start_ms <= start_ms <= end_ms:
        raise ValueError(
            f"interval [{start_ms}, {end_ms}] is not within terms starting {terms.start_ms}"
        )
    capacity = terms.capacity_until(end_ms) - terms.capacity_until(start_ms)
    priced = terms.priced_until(end_ms) - terms.priced_until(start_ms)
    measured = energy_micro(measured_mj, terms.pue_milli, terms.tariff_micro_per_kwh)
    return Line(capacity, priced, measured, measured - priced, capacity + measured)
