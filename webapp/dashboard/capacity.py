"""Operator advice for the dashboard: the seed's elastic-scaling rule per pool (a pool is a
GPU generation) and idle capacity by weekday and hour. The rules are the scheduler's; this
module only reads the rows they need (the heat map: the pool rollups), and caches the map."""

from __future__ import annotations

import time
from typing import Any

from django.core.cache import cache
from django.db.models import Count, Q

from ledger.units import MS_PER_DAY
from scheduler import api as scheduler
from scheduler.advice import SCALE_WINDOW_MS
from scheduler.telemetry.sample import TelemetrySample as Sample
from webapp.fleet import rollups
from webapp.fleet.models import GPU, TelemetrySample
from webapp.leasing import states
from webapp.leasing.models import Lease

HEATMAP_WINDOW_MS = 28 * MS_PER_DAY  # four weeks of hourly rollups
ADVICE_MAX_ROWS = 200_000  # bound the work of one refresh; newest rows first
HEATMAP_CACHE_S = 60
FIELDS = ("gpu__uuid", "t_ms", "energy_mj", "power_mw", "util_gpu_pct", "util_mem_pct", "temp_c")


def _samples(since_ms: int, limit: int, *fields: str) -> list[tuple]:
    rows = TelemetrySample.objects.filter(t_ms__gte=since_ms).order_by("-t_ms")
    return list(rows.values_list(*FIELDS, *fields)[:limit])


def scaling_advice(now_ms: int | None = None) -> list[dict[str, Any]]:
    now_ms = now_ms or time.time_ns() // 1_000_000
    pools = GPU.objects.values("generation__catalogue_id").annotate(
        total=Count("id", distinct=True),
        leased=Count("id", filter=Q(leases__state__in=states.HOLDS_GPUS), distinct=True),
    )
    pending = Lease.objects.filter(state=states.REQUESTED).count()
    by_pool: dict[str, list[Sample]] = {}
    for row in _samples(now_ms - SCALE_WINDOW_MS, ADVICE_MAX_ROWS, "gpu__generation__catalogue_id"):
        by_pool.setdefault(row[-1], []).append(Sample(*row[:-1]))
    advice = scheduler.advise_pools(
        [
            scheduler.PoolState(p["generation__catalogue_id"], p["leased"], 0, p["total"], pending)
            for p in pools
        ],
        by_pool,
        now_ms,
    )
    return [a.__dict__ for a in advice]


def idle_heatmap(now_ms: int | None = None) -> dict[str, Any]:
    """Idle share by weekday x hour over the last HEATMAP_WINDOW_MS, from the pool rollups
    (webapp/fleet/rollups.py: one row per pool-hour; 10,000 GPUs x 4 weeks would be 6.7
    million GPU-hour rows, and 10,000 times that in samples)."""
    cached = cache.get("dashboard:idle-heatmap")
    if cached is None:
        now_ms = now_ms or time.time_ns() // 1_000_000
        totals: dict[int, list[int]] = {}
        for r in rollups.pool_hours(now_ms - HEATMAP_WINDOW_MS, now_ms + 1, now_ms):
            acc = totals.setdefault(r["hour_ms"], [0, 0, 0, 0])
            for i, key in enumerate(("samples", "idle", "util_sum", "mem_sum")):
                acc[i] += r[key]
        heatmap = scheduler.heatmap_from_hours(
            scheduler.HourTotals(hour, *sums) for hour, sums in totals.items()
        ).as_dict()
        cached = {k: heatmap[k] for k in ("weekdays", "hours", "idle_share")}
        if any(v is not None for row in cached["idle_share"] for v in row):
            cache.set("dashboard:idle-heatmap", cached, HEATMAP_CACHE_S)  # not an empty one
    return cached
