"""The operator's time series: utilisation per GPU and per generation (compute beside memory
bandwidth, queueing symptoms flagged) and cost per tenant and per generation, with
attributed against measured energy. Read in a few grouped queries per range."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Count, F, Sum

from ledger import money
from ledger.units import datetime_of_ms, ms_of
from scheduler import api as scheduler
from scheduler.advice import QUEUEING_COMPUTE_MIN, QUEUEING_MEM_BW_MAX
from webapp.dashboard.ranges import Range, bucket_of
from webapp.fleet.models import GPU, GpuHour, TelemetrySample
from webapp.leasing.models import Lease, Settlement

MAX_FLAGS = 200  # newest queueing symptoms listed beside the charts


def _gpu_buckets(rng: Range, since: int, until: int) -> list[dict[str, int]]:
    """(gpu_id, bucket, samples, util_sum, mem_sum, power_sum) per GPU and bucket."""
    if rng.from_rollups:
        rows = GpuHour.objects.filter(
            hour_ms__gte=bucket_of(since, rng.bucket_ms), hour_ms__lt=until
        )
        time_field, sums = "hour_ms", ("samples", "util_sum", "mem_sum", "power_mw_sum")
        count = Sum("samples")
    else:
        rows = TelemetrySample.objects.filter(t_ms__gte=since, t_ms__lt=until)
        time_field, sums = "t_ms", ("", "util_gpu_pct", "util_mem_pct", "power_mw")
        count = Count("t_ms")
    return list(
        rows.annotate(b=F(time_field) - F(time_field) % rng.bucket_ms)
        .values("gpu_id", "b")
        .annotate(n=count, u=Sum(sums[1]), m=Sum(sums[2]), p=Sum(sums[3]))
        .order_by("b")
    )


def _mean(total: int, n: int, scale: int = 100) -> float | None:
    return round(total / n / scale, 4) if n else None


def utilisation(rng: Range, now_ms: int | None = None) -> dict[str, Any]:
    since, until = rng.window(now_ms)
    gpus = {
        g.pk: g
        for g in GPU.objects.select_related("node", "generation").order_by("node__name", "index")
    }
    rows = _gpu_buckets(rng, since, until)
    times = sorted({r["b"] for r in rows})
    column = {t: i for i, t in enumerate(times)}
    order = list(gpus)
    line = {gpu_id: i for i, gpu_id in enumerate(order)}
    util = [[None] * len(times) for _ in order]
    mem = [[None] * len(times) for _ in order]
    by_generation: dict[str, dict[int, list[int]]] = defaultdict(
        lambda: defaultdict(lambda: [0, 0, 0, 0])
    )
    flags = []
    for r in rows:
        gpu = gpus.get(r["gpu_id"])
        if gpu is None:
            continue
        u, m = _mean(r["u"], r["n"]), _mean(r["m"], r["n"])
        util[line[r["gpu_id"]]][column[r["b"]]] = u
        mem[line[r["gpu_id"]]][column[r["b"]]] = m
        sums = by_generation[gpu.generation.catalogue_id][r["b"]]
        for i, key in enumerate(("n", "u", "m", "p")):
            sums[i] += r[key]
        if scheduler.queueing_symptom(u, m):
            flags.append({"gpu": _label(gpu), "t": r["b"], "util": u, "mem": m})
    generations = {
        name: {
            "t": sorted(buckets),
            "util": [_mean(buckets[t][1], buckets[t][0]) for t in sorted(buckets)],
            "mem": [_mean(buckets[t][2], buckets[t][0]) for t in sorted(buckets)],
            "power_w": [_mean(buckets[t][3], buckets[t][0], 1000) for t in sorted(buckets)],
        }
        for name, buckets in sorted(by_generation.items())
    }
    return {
        "range": rng.name,
        "bucket_ms": rng.bucket_ms,
        "since": since,
        "until": until,
        "generations": generations,
        "gpus": {"labels": [_label(gpus[g]) for g in order], "t": times, "util": util, "mem": mem},
        # live samples name their GPU: the page maps them to generations
        "gpu_generation": {g.uuid: g.generation.catalogue_id for g in gpus.values()},
        "flags": sorted(flags, key=lambda f: -f["t"])[:MAX_FLAGS],
        "thresholds": {"compute_min": QUEUEING_COMPUTE_MIN, "mem_bw_max": QUEUEING_MEM_BW_MAX},
    }


def _label(gpu: GPU) -> str:
    return f"{gpu.node.name}/{gpu.index} {gpu.generation.catalogue_id}"


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
