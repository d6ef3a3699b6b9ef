"""Below the pools: a pool's nodes (a page of them at a time, with a heat map of one row per
node), a node's GPUs (a heat map of one row per GPU) and one GPU's lines. Hour buckets and
longer read the per-GPU hourly rollups of the GPUs shown, shorter ones their raw samples."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, Max, Q, Sum

from ledger.units import MW_PER_W
from webapp.dashboard.ranges import Range, bucket_of
from webapp.fleet.models import GPU, Generation, GpuHour, Node, Site, TelemetrySample
from webapp.leasing import states

NODES_PER_PAGE = 50  # a pool's heat map: one row per node, this many rows at most


def buckets(rng: Range, since: int, until: int, where: Q, group: str) -> list[dict[str, Any]]:
    """Per `group` (a GpuHour/TelemetrySample field path) and bucket of the range: samples
    n, compute u, memory bandwidth m, power p (sums) and the hottest reading."""
    if rng.from_rollups:
        rows = GpuHour.objects.filter(
            where, hour_ms__gte=bucket_of(since, rng.bucket_ms), hour_ms__lt=until
        )
        field, n = "hour_ms", Sum("samples")
        sums = (Sum("util_sum"), Sum("mem_sum"), Sum("power_mw_sum"), Max("temp_max"))
    else:
        rows = TelemetrySample.objects.filter(where, t_ms__gte=since, t_ms__lt=until)
        field, n = "t_ms", Count("t_ms")
        sums = (Sum("util_gpu_pct"), Sum("util_mem_pct"), Sum("power_mw"), Max("temp_c"))
    return list(
        rows.annotate(b=F(field) - F(field) % rng.bucket_ms)
        .values("b", key=F(group))
        .annotate(n=n, u=sums[0], m=sums[1], p=sums[2], hot=sums[3])
        .order_by("b")
    )


def _share(total: int | None, n: int) -> float | None:
    return None if not n or total is None else round(total / n / 100, 4)


def heat(rows: list[dict[str, Any]], order: list[Any]) -> dict[str, Any]:
    """One row per key in `order`, one column per bucket: compute and memory bandwidth."""
    times = sorted({r["b"] for r in rows})
    column = {t: i for i, t in enumerate(times)}
    line = {k: i for i, k in enumerate(order)}
    util = [[None] * len(times) for _ in order]
    mem = [[None] * len(times) for _ in order]
    for r in rows:
        if r["key"] in line:
            util[line[r["key"]]][column[r["b"]]] = _share(r["u"], r["n"])
            mem[line[r["key"]]][column[r["b"]]] = _share(r["m"], r["n"])
    return {"t": times, "util": util, "mem": mem}


def _means(rows: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    totals: dict[Any, list[int]] = {}
    for r in rows:
        acc = totals.setdefault(r["key"], [0, 0, 0, 0])
        for i, k in enumerate(("n", "u", "m", "p")):
            acc[i] += r[k] or 0
    return {
        k: {
            "util": _share(t[1], t[0]),
            "mem": _share(t[2], t[0]),
            "power_w": round(t[3] / t[0] / MW_PER_W, 1) if t[0] else None,
        }
        for k, t in totals.items()
    }


def pool_page(
    site: Site, generation: Generation, rng: Range, page: int = 1, now_ms: int | None = None
) -> dict[str, Any]:
    """A pool's nodes, NODES_PER_PAGE at a time: their state, GPUs, and mean compute, memory
    bandwidth and power per GPU over the range, with a heat map of one row per node."""
    since, until = rng.window(now_ms)
    in_pool = Node.objects.filter(site=site, gpus__generation=generation).distinct()
    total = in_pool.count()
    pages = max(1, -(-total // NODES_PER_PAGE))
    page = min(max(1, page), pages)
    shown = list(
        in_pool.order_by("name")
        .annotate(
            n_gpus=Count("gpus", filter=Q(gpus__generation=generation), distinct=True),
            leased=Count(
                "gpus",
                filter=Q(gpus__generation=generation, gpus__leases__state__in=states.HOLDS_GPUS),
                distinct=True,
            ),
        )
        .values("pk", "name", "status", "trust", "n_gpus", "leased")[
            (page - 1) * NODES_PER_PAGE : page * NODES_PER_PAGE
        ]
    )
    ids = [n["pk"] for n in shown]
    rows = buckets(
        rng, since, until, Q(gpu__node_id__in=ids, gpu__generation=generation), "gpu__node_id"
    )
    means = _means(rows)
    return {
        "range": rng.name,
        "bucket_ms": rng.bucket_ms,
        "since": since,
        "until": until,
        "site": site.name,
        "generation": generation.catalogue_id,
        "page": page,
        "pages": pages,
        "node_count": total,
        "nodes": [
            {
                "name": n["name"],
                "status": n["status"],
                "trust": n["trust"],
                "gpus": n["n_gpus"],
                "leased": n["leased"],
                **means.get(n["pk"], {"util": None, "mem": None, "power_w": None}),
            }
            for n in shown
        ],
        "heat": {"labels": [n["name"] for n in shown], **heat(rows, ids)},
    }


def node_gpus(node: Node, rng: Range, since: int, until: int) -> dict[str, Any]:
    """The node's GPUs as heat map rows (compute and memory bandwidth per bucket)."""
    gpus = list(node.gpus.order_by("index").values_list("pk", "index"))
    rows = buckets(rng, since, until, Q(gpu__node=node), "gpu_id")
    return {"labels": [f"{node.name}/{i}" for _, i in gpus], **heat(rows, [pk for pk, _ in gpus])}


def gpu_page(gpu: GPU, rng: Range, now_ms: int | None = None) -> dict[str, Any]:
    """One GPU's lines over the range: compute, memory bandwidth, mean power, hottest."""
    since, until = rng.window(now_ms)
    rows = buckets(rng, since, until, Q(gpu=gpu), "gpu_id")
    holding = gpu.leases.filter(state__in=states.HOLDS_GPUS).select_related("tenant").first()
    return {
        "range": rng.name,
        "bucket_ms": rng.bucket_ms,
        "since": since,
        "until": until,
        "gpu": {
            "uuid": gpu.uuid,
            "index": gpu.index,
            "node": gpu.node.name,
            "site": gpu.node.site.name,
            "generation": gpu.generation.catalogue_id,
            "trust": gpu.node.trust,
            "lease": holding.pk if holding else None,
            "tenant": holding.tenant.name if holding else None,
        },
        "t": [r["b"] for r in rows],
        "util": [_share(r["u"], r["n"]) for r in rows],
        "mem": [_share(r["m"], r["n"]) for r in rows],
        "power_w": [round(r["p"] / r["n"] / MW_PER_W, 1) if r["n"] else None for r in rows],
        "temp_max": [r["hot"] for r in rows],
    }
