"""Operator advice for the dashboard: the seed's elastic-scaling rule per pool (a pool is a
GPU generation) and idle capacity by weekday and hour. The rules are the scheduler's; this
module only reads the samples they need, and caches the heat map (it reads many rows)."""

from __future__ import annotations

import time
from typing import Any

from django.core.cache import cache
from django.db.models import Count, Q

from scheduler import api as scheduler
from scheduler.advice import SCALE_WINDOW_MS
from scheduler.telemetry.sample import TelemetrySample as Sample
from webapp.fleet.models import GPU, TelemetrySample
from webapp.leasing import states
from webapp.leasing.models import Lease

HEATMAP_WINDOW_MS = 7 * 24 * 3_600_000
HEATMAP_MAX_ROWS = 200_000  # bound the work of one refresh; newest rows first
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
    for row in _samples(
        now_ms - SCALE_WINDOW_MS, HEATMAP_MAX_ROWS, "gpu__generation__catalogue_id"
    ):
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


def idle_heatmap() -> dict[str, Any]:
    cached = cache.get("dashboard:idle-heatmap")
    if cached is None:
        since = time.time_ns() // 1_000_000 - HEATMAP_WINDOW_MS
        samples = (Sample(*row) for row in _samples(since, HEATMAP_MAX_ROWS))
        heatmap = scheduler.idle_heatmap(samples).as_dict()
        cached = {k: heatmap[k] for k in ("weekdays", "hours", "idle_share")}
        if any(v is not None for row in cached["idle_share"] for v in row):
            cache.set("dashboard:idle-heatmap", cached, HEATMAP_CACHE_S)  # not an empty one
    return cached
