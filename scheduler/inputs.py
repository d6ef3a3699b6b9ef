"""What the scheduler takes from the web app's stored facts to price a job: which telemetry
reading counts as a GPU's measured draw, and how many hours a running lease has left. The
web app reads the rows; these rules decide what they mean for a price."""

from __future__ import annotations

from decimal import Decimal

from ledger.units import watts_of_mw

LOADED_UTIL_PCT = 50  # only a reading under load tells what the GPU draws when working
HOURS_STEP = Decimal("0.01")  # remaining hours are priced to the hundredth, at least one


def measured_power_w(util_gpu_pct: int, power_mw: int) -> Decimal | None:
    """The draw a reading tells pricing, in watts: None for one not under load (or none)."""
    if util_gpu_pct >= LOADED_UTIL_PCT and power_mw > 0:
        return watts_of_mw(power_mw)
    return None


def remaining_hours(hours: Decimal, elapsed_ms: int, planned_ms: int) -> Decimal:
    """The hours of a lease's work left after `elapsed_ms` of its `planned_ms`: its `hours`
    times the share not yet run, to the hundredth, never under HOURS_STEP (a lease that
    moves still has work to price)."""
    done = min(Decimal(1), Decimal(elapsed_ms) / planned_ms) if planned_ms > 0 else Decimal(1)
    return max(HOURS_STEP, (hours * (1 - done)).quantize(HOURS_STEP))
