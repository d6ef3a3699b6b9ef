"""Settlement arithmetic in integers: one place for the money formula.

Energy is in millijoules (the NVML total-energy counter's unit), tariffs in micro-units of the
currency per kWh, amounts in micro-units. No floats anywhere: the contract re-computes this on
every endorsing peer and all of them must agree to the last micro-unit.
"""

from __future__ import annotations

MJ_PER_KWH = 3_600_000_000  # 1 kWh = 3.6e6 J = 3.6e9 mJ
MAX_ENERGY_MJ = 10**18  # far above any lease (~3e8 kWh); bounds untrusted input
MAX_TARIFF_MICRO_PER_KWH = 10**12  # a million currency units per kWh


def div_half_even(numerator: int, denominator: int) -> int:
    """numerator / denominator rounded half to even (banker's rounding), exactly."""
    if denominator <= 0:
        raise ValueError(f"denominator must be positive, got {denominator}")
    quotient, remainder = divmod(numerator, denominator)  # floor division: 0 <= remainder < d
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2 == 1):
        quotient += 1
    return quotient


def settlement_amount(measured_mj: int, attributed_mj: int, tariff_micro_per_kwh: int) -> int:
    """What the tenant owes (positive) or is credited (negative), in micro-units: the energy
    drawn beyond what the lease was priced at, at the tariff, rounded half-even."""
    for name, value, bound in (
        ("measured_mj", measured_mj, MAX_ENERGY_MJ),
        ("attributed_mj", attributed_mj, MAX_ENERGY_MJ),
        ("tariff_micro_per_kwh", tariff_micro_per_kwh, MAX_TARIFF_MICRO_PER_KWH),
    ):
        if type(value) is not int:  # bool is an int subclass; a float is never money
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if not 0 <= value <= bound:
            raise ValueError(f"{name} must be in [0, {bound}], got {value}")
    return div_half_even((measured_mj - attributed_mj) * tariff_micro_per_kwh, MJ_PER_KWH)
