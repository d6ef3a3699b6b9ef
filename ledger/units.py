"""The one units module: the integer units every layer stores and the conversions between
them, named with their units. The contract, the scheduler and the web app import these
instead of spelling `3_600_000` or a bare `/ 1000`.

Stored units: time in milliseconds since the Unix epoch, energy in millijoules (the NVML
total-energy counter's unit), power in milliwatts, PUE in thousandths. Money is
`ledger.money`'s (micro-units), which uses these.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
MS_PER_S = 1_000
MS_PER_MINUTE = 60 * MS_PER_S
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR
MW_PER_W = 1_000  # milliwatts per watt
MJ_PER_J = 1_000  # millijoules per joule
UJ_PER_MJ = 1_000  # microjoules per millijoule (mW x ms is uJ)
MJ_PER_KWH = 3_600_000_000  # 1 kWh = 3.6e6 J = 3.6e9 mJ
PUE_MILLI_PER_UNIT = 1_000  # PUE is stored in thousandths: 1250 is a PUE of 1.25


def ms_of(when: datetime) -> int:
    """Unix milliseconds of an aware datetime (truncated, as the stored timestamps are)."""
    return int(when.timestamp() * MS_PER_S)


def datetime_of_ms(ms: int | float) -> datetime:
    """The UTC datetime of Unix milliseconds."""
    return datetime.fromtimestamp(ms / MS_PER_S, tz=UTC)


def watts_of_mw(power_mw: int) -> Decimal:
    """Exact watts of an integer milliwatt reading."""
    return Decimal(power_mw) / MW_PER_W


def pue_of_milli(pue_milli: int) -> Decimal:
    """Exact PUE of its stored thousandths (1250 -> 1.25)."""
    return Decimal(pue_milli) / PUE_MILLI_PER_UNIT
