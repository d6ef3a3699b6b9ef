"""The demo's past: the fleet's telemetry of the week before the demo started, so the time
series and the idle heat map have something to show from the first page load.

The past is a replayed trace, clearly so: the synthetic Q2-profile trace of the scheduler
(GPUs busy and idle by hour of day, as the seed's fleet was), stored through the same
record_samples as live telemetry, which also keeps the hourly rollups. It has no leases,
bills or ledger records behind it: costs start with the demo's first lease."""

from __future__ import annotations

import time

from ledger.units import MS_PER_DAY, MS_PER_HOUR, MS_PER_S
from scheduler import api as scheduler
from scheduler.telemetry.synthetic import SyntheticGpu
from webapp.fleet.models import GPU, TelemetrySample
from webapp.fleet.telemetry import record_samples

HISTORY_DAYS = 7
HISTORY_STEP_S = 300  # one sample per GPU every 5 minutes
RECORD_BATCH = 20_000
HISTORY_SEED = 11
# The history stops this long before the demo starts, so the live "last 10 minutes" views
# show only the demo's own, lease-driven telemetry.
HISTORY_GAP_MS = 15 * 60_000


def seed_history(
    now_ms: int | None = None, days: float = HISTORY_DAYS, step_s: int = HISTORY_STEP_S
) -> int:
    """Store `days` of trace ending HISTORY_GAP_MS before now_ms, unless telemetry that old
    is stored already (a restarted demo keeps its history). Returns the samples stored."""
    now_ms = (now_ms or time.time_ns() // 1_000_000) - HISTORY_GAP_MS
    start_ms = int(now_ms - days * MS_PER_DAY)
    if TelemetrySample.objects.filter(t_ms__lt=start_ms + step_s * MS_PER_S).exists():
        return 0
    fleet = [
        SyntheticGpu(uuid, int(power))
        for uuid, power in GPU.objects.values_list("uuid", "generation__board_power_w")
    ]
    hours = (now_ms - start_ms - step_s * MS_PER_S) / MS_PER_HOUR  # the last sample before now
    stored, batch = 0, []
    for sample in scheduler.synthetic_trace(
        fleet, start_ms, hours, step_s=step_s, seed=HISTORY_SEED
    ):
        batch.append(sample)
        if len(batch) >= RECORD_BATCH:
            stored += record_samples(batch).stored
            batch = []
    return stored + record_samples(batch).stored
