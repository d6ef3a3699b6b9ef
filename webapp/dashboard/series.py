"""The operator's time series: utilisation per generation and per site (compute beside
memory bandwidth, queueing symptoms flagged) and cost per tenant and per generation, with
attributed against measured energy. Read in a few grouped queries per range."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Count, F, Sum

from ledger import money
from ledger.units import MS_PER_DAY, datetime_of_ms, ms_of
from scheduler import api as scheduler
from scheduler.advice import QUEUEING_COMPUTE_MIN, QUEUEING_MEM_BW_MAX, hour_start_ms
from webapp.dashboard.ranges import Range, bucket_of
from webapp.fleet import rollups
from webapp.fleet.models import Generation, GpuHour, Site, TelemetrySample
from webapp.leasing.models import Lease, Settlement

MAX_FLAGS = 200  # newest queueing symptoms listed beside the charts


FLAG_WINDOW_MS = MS_PER_DAY  # queueing symptoms are listed from the newest day at most
GENERATION, SITE = "gpu__generation__catalogue_id", "gpu__node__site__name"


def _mean(total: int, n: int, scale: int = 100) -> float | None:
    return round(total / n / scale, 4) if n else None


def _named(rows: list[dict[str, Any]], rng: Range) -> list[dict[str, Any]]:
    """Rows per pool and bucket, with the pool's generation and site by name."""
    sites = dict(Site.objects.values_list("id", "name"))
    gens = dict(Generation.objects.values_list("id", "catalogue_id"))
    return [
        {
            "b": bucket_of(r["b"], rng.bucket_ms),
            GENERATION: gens[r["generation_id"]],
            SITE: sites[r["site_id"]],
            "n": r["n"],
            "u": r["u"],
            "m": r["m"],
            "p": r["p"],
        }
        for r in rows
    ]


def _from_samples(rng: Range, since: int, until: int) -> list[dict[str, Any]]:
    """Short ranges: the raw samples of the window, summed per pool and bucket in the
    database, in one pass (never a row per GPU out of it)."""
    rows = (
        TelemetrySample.objects.filter(t_ms__gte=since, t_ms__lt=until)
        .annotate(b=F("t_ms") - F("t_ms") % rng.bucket_ms)
        .values("b", generation_id=F("gpu__generation_id"), site_id=F("gpu__node__site_id"))
        .annotate(n=Count("t_ms"), u=Sum("util_gpu_pct"), m=Sum("util_mem_pct"), p=Sum("power_mw"))
        .order_by()
    )
    return _named(list(rows), rng)


def _from_pools(rng: Range, since: int, until: int, now_ms: int | None) -> list[dict[str, Any]]:
    """Hour buckets and longer: the pool rollups (rows per pool-hour, not per GPU-hour)."""
    hours = rollups.pool_hours(bucket_of(since, rng.bucket_ms), until, now_ms)
    keys = {"hour_ms": "b", "samples": "n", "util_sum": "u", "mem_sum": "m", "power_mw_sum": "p"}
    return _named(
        [
            {keys.get(k, k): v for k, v in h.items() if k in keys or k.endswith("_id")}
            for h in hours
        ],
        rng,
    )


def _lines(rows: list[dict[str, Any]], group: str) -> dict[str, dict[str, list]]:
    sums: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0, 0]))
    for r in rows:
        acc = sums[r[group]][r["b"]]
        for i, key in enumerate(("n", "u", "m", "p")):
            acc[i] += r[key]
    return {
        name: {
            "t": sorted(b),
            "util": [_mean(b[t][1], b[t][0]) for t in sorted(b)],
            "mem": [_mean(b[t][2], b[t][0]) for t in sorted(b)],
            "power_w": [_mean(b[t][3], b[t][0], 1000) for t in sorted(b)],
        }
        for name, b in sorted(sums.items())
    }


def queueing_flags(since: int, until: int) -> list[dict[str, Any]]:
    """The newest GPU-hours (MAX_FLAGS at most, from the last FLAG_WINDOW_MS of the window)
    whose mean compute and memory bandwidth show the queueing symptom, from the rollups."""
    start = max(hour_start_ms(since), hour_start_ms(until) - FLAG_WINDOW_MS)
    rows = (
        GpuHour.objects.filter(hour_ms__gte=start, hour_ms__lt=until, samples__gt=0)
        .filter(
            util_sum__gte=F("samples") * round(QUEUEING_COMPUTE_MIN * 100),
            mem_sum__lte=F("samples") * round(QUEUEING_MEM_BW_MAX * 100),
        )
        .order_by("-hour_ms")
        .values("hour_ms", "samples", "util_sum", "mem_sum", "gpu__uuid", "gpu__index")
        .annotate(node=F("gpu__node__name"), generation=F(GENERATION))[:MAX_FLAGS]
    )
    flags = []
    for r in rows:
        u, m = _mean(r["util_sum"], r["samples"]), _mean(r["mem_sum"], r["samples"])
        if scheduler.queueing_symptom(u, m):
            label = f"{r['node']}/{r['gpu__index']} {r['generation']}"
            flags.append(
                {"gpu": label, "uuid": r["gpu__uuid"], "t": r["hour_ms"], "util": u, "mem": m}
            )
    return flags


def utilisation(rng: Range, now_ms: int | None = None) -> dict[str, Any]:
    """Compute and memory bandwidth (and mean power) per generation and per site, and the
    GPU-hours with queueing symptoms; per-GPU heat maps are the node pages' (webapp/
    dashboard/drill.py): a fleet has too many GPUs for one page."""
    since, until = rng.window(now_ms)
    if rng.from_rollups:
        rows = _from_pools(rng, since, until, now_ms)
    else:
        rows = _from_samples(rng, since, until)
    return {
        "range": rng.name,
        "bucket_ms": rng.bucket_ms,
        "since": since,
        "until": until,
        "generations": _lines(rows, GENERATION),
        "sites": _lines(rows, SITE),
        "flags": queueing_flags(since, until),
        "thresholds": {"compute_min": QUEUEING_COMPUTE_MIN, "mem_bw_max": QUEUEING_MEM_BW_MAX},
    }


def cost(rng: Range, now_ms: int | None = None) -> dict[str, Any]:
    """Per bucket, in micro-units: the totals of the bill lines whose interval ended in it
    (so the buckets add up to the bills, webapp.leasing.bills), by tenant and by generation,
    and the quotes of the leases that started in it; and, in mJ, the energy those lines
    attributed (the lease terms' planned energy of the interval, which the line's priced
    energy prices) against the energy they measured. A line from before a migration (its
    terms are no longer the lease's) is left out of the energy comparison and counted in
    `energy.without_terms`."""
    since, until = rng.window(now_ms)
    by_tenant: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    by_generation: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    quoted: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    energy: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    without_terms = 0
    started = Lease.objects.filter(
        started__gte=datetime_of_ms(since),
        started__lt=datetime_of_ms(until),
        price_total_micro__isnull=False,
    ).select_related("tenant")
    for lease in started:
        b = bucket_of(ms_of(lease.started), rng.bucket_ms)
        quoted[lease.tenant.name][b] += lease.price_total_micro
    lines = Settlement.objects.filter(end_ms__gte=since, end_ms__lt=until)
    for s in lines.select_related("lease__tenant"):
        b = bucket_of(s.end_ms, rng.bucket_ms)
        by_tenant[s.lease.tenant.name][b] += s.total_micro
        by_generation[s.generation][b] += s.total_micro
        terms = money.Terms.of(s.lease.terms) if s.lease.terms else None
        if terms is None or s.start_ms < terms.start_ms:
            without_terms += 1
            continue
        energy[b][0] += terms.planned_mj(s.start_ms, s.end_ms)
        energy[b][1] += s.measured_energy_mj

    def series(groups: dict[str, dict[int, int]]) -> dict[str, dict[str, list[int]]]:
        return {
            name: {"t": sorted(b), "micro": [b[t] for t in sorted(b)]}
            for name, b in sorted(groups.items())
        }

    times = sorted(energy)
    return {
        "range": rng.name,
        "bucket_ms": rng.bucket_ms,
        "since": since,
        "until": until,
        "by_tenant": series(by_tenant),
        "by_generation": series(by_generation),
        "quoted_by_tenant": series(quoted),
        "energy": {
            "t": times,
            "attributed_mj": [energy[t][0] for t in times],
            "measured_mj": [energy[t][1] for t in times],
            "without_terms": without_terms,
        },
    }
