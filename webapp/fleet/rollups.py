"""Pool rollups: the hourly rollups of a site's GPUs of one generation (a pool), summed into
one PoolHour row, so that the fleet's, a site's and a generation's 28-day views read a few
dozen rows per hour, not one per GPU (10,000 GPUs x 28 days is 6.7 million GpuHour rows).

Readings arrive bound to quotes, up to a quote interval late, so an hour keeps changing for a
while after it ends. An hour is *closed* ROLLUP_CLOSE_MS after its end; its PoolHour rows
are written once it is (`catch_up`, which whoever reads them calls first, and `manage.py
telemetry_rollup`). The open hours (at most two) are summed from GpuHour when read
(`pool_hours`). Readings that still arrive for an hour already rolled up refresh its pools
at once (`late_readings`, called by the telemetry store), so a pool row always equals the sum
of its GPUs' rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import BigIntegerField, Count, ExpressionWrapper, F, Max, Min, Q, Sum

from ledger.units import MS_PER_MINUTE
from scheduler.advice import hour_start_ms
from webapp.fleet.models import GPU, GpuHour, PoolHour, RolledUp

ROLLUP_CLOSE_MS = 15 * MS_PER_MINUTE  # an hour is rolled up this long after it ends
BATCH = 2_000
FIELDS = ("gpus", "samples", "idle", "util_sum", "mem_sum", "power_mw_sum", "gpu_power_mw")
Pool = tuple[int, int]  # (site id, generation id)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def closed_before(now_ms: int) -> int:
    """Hours starting before this instant are closed at `now_ms`."""
    return hour_start_ms(now_ms - ROLLUP_CLOSE_MS)


def _pool_filter(pools: Iterable[Pool] | None) -> Q:
    if pools is None:
        return Q()
    q = Q(pk__in=[])
    for site_id, generation_id in pools:
        q |= Q(gpu__node__site_id=site_id, gpu__generation_id=generation_id)
    return q


def summed_from_gpu_hours(start_ms: int, end_ms: int, where: Q | None = None) -> Any:
    """GpuHour rows of [start_ms, end_ms) summed per pool and hour, in PoolHour's fields."""
    mean_power = ExpressionWrapper(F("power_mw_sum") / F("samples"), BigIntegerField())
    return (
        GpuHour.objects.filter(where or Q(), hour_ms__gte=start_ms, hour_ms__lt=end_ms)
        .values("hour_ms", site_id=F("gpu__node__site_id"), generation_id=F("gpu__generation_id"))
        .annotate(
            gpus=Count("gpu_id"),
            samples_n=Sum("samples"),
            idle_n=Sum("idle"),
            util=Sum("util_sum"),
            mem=Sum("mem_sum"),
            power=Sum("power_mw_sum"),
            gpu_power=Sum(mean_power),
            hottest=Max("temp_max"),
        )
        .order_by()
    )


def _as_pool_hour(r: dict[str, Any]) -> PoolHour:
    return PoolHour(
        site_id=r["site_id"],
        generation_id=r["generation_id"],
        hour_ms=r["hour_ms"],
        gpus=r["gpus"],
        samples=r["samples_n"],
        idle=r["idle_n"],
        util_sum=r["util"],
        mem_sum=r["mem"],
        power_mw_sum=r["power"],
        gpu_power_mw=r["gpu_power"],
        temp_max=r["hottest"],
    )


def roll_up(start_ms: int, end_ms: int, pools: Iterable[Pool] | None = None) -> int:
    """Write the PoolHour rows of the hours in [start_ms, end_ms) (of these pools, or all)
    from the GpuHour rows; rows whose GPUs are all gone are removed. Returns rows written."""
    pools = None if pools is None else list(pools)
    rows = [_as_pool_hour(r) for r in summed_from_gpu_hours(start_ms, end_ms, _pool_filter(pools))]
    stale = PoolHour.objects.filter(hour_ms__gte=start_ms, hour_ms__lt=end_ms)
    if pools is not None:
        q = Q(pk__in=[])
        for site_id, generation_id in pools:
            q |= Q(site_id=site_id, generation_id=generation_id)
        stale = stale.filter(q)
    with transaction.atomic():
        stale.delete()
        # a reader catching up at the same moment writes the same sums: keep either
        PoolHour.objects.bulk_create(
            rows,
            batch_size=BATCH,
            update_conflicts=True,
            unique_fields=["site", "generation", "hour_ms"],
            update_fields=[*FIELDS, "temp_max"],
        )
    return len(rows)


def rolled_up_through() -> int | None:
    """The end of the hours rolled up (every closed hour before it is), or None."""
    mark = RolledUp.objects.order_by().values_list("through_ms", flat=True).first()
    return mark


def _mark(through_ms: int) -> None:
    if not RolledUp.objects.filter(through_ms__lt=through_ms).update(through_ms=through_ms):
        RolledUp.objects.get_or_create(defaults={"through_ms": through_ms})


def catch_up(now_ms: int | None = None) -> int:
    """Roll up the closed hours not rolled up yet; returns the rows written (usually none:
    one look-up)."""
    end = closed_before(_now_ms() if now_ms is None else now_ms)
    start = rolled_up_through()
    if start is None:
        start = GpuHour.objects.aggregate(h=Min("hour_ms"))["h"]
        if start is None:
            return 0
    if start >= end:
        return 0
    written = roll_up(start, end)
    _mark(end)
    return written


def late_readings(gpu_ids: set[int], first_ms: int) -> int:
    """Readings stored for hours already rolled up: refresh those hours of these GPUs'
    pools (the hours after them are the next catch_up's)."""
    through = rolled_up_through()
    if through is None or hour_start_ms(first_ms) >= through:
        return 0
    pools = set(GPU.objects.filter(pk__in=gpu_ids).values_list("node__site_id", "generation_id"))
    return roll_up(hour_start_ms(first_ms), through, pools)


def pool_hours(since_ms: int, until_ms: int, now_ms: int | None = None) -> list[dict[str, Any]]:
    """Every pool's hours in [since_ms, until_ms), as dicts of PoolHour's fields with
    site_id, generation_id and hour_ms: the closed hours from PoolHour, the open ones summed
    from GpuHour now. Never reads a raw sample."""
    now_ms = _now_ms() if now_ms is None else now_ms
    catch_up(now_ms)
    closed = closed_before(now_ms)
    keys = ("site_id", "generation_id", "hour_ms", *FIELDS, "temp_max")
    rows = list(
        PoolHour.objects.filter(hour_ms__gte=since_ms, hour_ms__lt=min(until_ms, closed))
        .order_by()
        .values(*keys)
    )
    if until_ms > closed:
        rows += [
            {k: getattr(p, k) for k in keys}
            for p in map(_as_pool_hour, summed_from_gpu_hours(max(since_ms, closed), until_ms))
        ]
    return rows
