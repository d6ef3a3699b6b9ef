"""How far a lease has run, for the lease list's progress bars."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from webapp.leasing import states
from webapp.leasing.models import Lease

DONE_PCT = 100


def progress_pct(lease: Lease, now: datetime, hour_s: float) -> int:
    """Elapsed share of the planned hours of an active lease (0 before it starts, 100 once
    it ended); `hour_s` is how long one leased hour lasts (3600 s, or the demo's clock)."""
    if lease.state in states.ENDED:
        return DONE_PCT
    if lease.started is None:
        return 0
    until = lease.ended or now
    planned_s = float(lease.hours * Decimal(str(hour_s)))
    if planned_s <= 0:
        return DONE_PCT
    elapsed_s = (until - lease.started).total_seconds()
    return max(0, min(DONE_PCT, int(elapsed_s * 100 / planned_s)))
