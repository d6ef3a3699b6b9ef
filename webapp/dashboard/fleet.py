"""The fleet at any size, from the top: per generation and per site first (the fleet page),
then a site's pools (a pool: a site's GPUs of one generation), then a pool's nodes, then a
node's GPUs. Each level reads whole-fleet numbers in a few grouped queries: the inventory from
the GPU table, usage from the pool rollups (webapp/fleet/rollups.py: never a raw sample, never
a row per GPU-hour), cost from the bill lines."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from django.db.models import Count, F, Q

from ledger.units import MS_PER_HOUR, MW_PER_W
from webapp.dashboard.ranges import Range, bucket_of
from webapp.fleet import rollups
from webapp.fleet.models import GPU, Generation, Node, Site
from webapp.leasing import states
from webapp.leasing.models import Settlement

TRUST = [code for code, _ in Node.TRUST_STATES]
MW_H_PER_KWH = 1_000_000  # a mW held for an hour is 1e-6 kWh
Key = Callable[[dict[str, Any]], Any]


def _new_row() -> dict[str, Any]:
    return {
        "gpus": 0,
        "leased": 0,
        "quarantined": 0,
        "free": 0,
        "nodes": 0,
        "gpus_by_trust": dict.fromkeys(TRUST, 0),
    }


def inventory(where: Q | None = None) -> list[dict[str, Any]]:
    """GPUs per pool and node: [{site_id, generation_id, node_id, trust, status, n,
    leased}], one grouped query."""
    leased = Q(leases__state__in=states.HOLDS_GPUS)
    return list(
        GPU.objects.filter(where or Q())
        .values(
            "generation_id",
            "node_id",
            site_id=F("node__site_id"),
            trust=F("node__trust"),
            status=F("node__status"),
        )
        .annotate(n=Count("id", distinct=True), leased=Count("id", filter=leased, distinct=True))
        .order_by()
    )


def count_inventory(rows: Iterable[dict[str, Any]], key: Key) -> dict[Any, dict[str, Any]]:
    """The inventory rows summed per `key(row)`: GPUs leased, quarantined (on a node that is
    not active and trusted, so not leasable, and held by no lease), free; nodes; GPUs by the
    attestation state of their node."""
    out: dict[Any, dict[str, Any]] = defaultdict(_new_row)
    nodes: dict[Any, set[int]] = defaultdict(set)
    for r in rows:
        row = out[key(r)]
        usable = r["status"] == Node.ACTIVE and r["trust"] == Node.TRUSTED
        row["gpus"] += r["n"]
        row["leased"] += r["leased"]
        if not usable:
            row["quarantined"] += r["n"] - r["leased"]
        row["gpus_by_trust"][r["trust"]] += r["n"]
        nodes[key(r)].add(r["node_id"])
    for k, row in out.items():
        row["free"] = row["gpus"] - row["leased"] - row["quarantined"]
        row["nodes"] = len(nodes[k])
    return out


def usage(
    hours: Iterable[dict[str, Any]], key: Key, rng: Range
) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, list]]]:
    """Pool hours summed per `key(row)`: over the whole range (mean compute and memory
    bandwidth, mean draw in W, energy in kWh, hottest reading) and per bucket of the range
    (the lines drawn)."""
    totals: dict[Any, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    hours_in: dict[Any, set[int]] = defaultdict(set)
    hot: dict[Any, int | None] = {}
    buckets: dict[Any, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0] * 4))
    for r in hours:
        k = key(r)
        b = bucket_of(r["hour_ms"], rng.bucket_ms)
        for acc in (totals[k], buckets[k][b]):
            acc[0] += r["samples"]
            acc[1] += r["util_sum"]
            acc[2] += r["mem_sum"]
            acc[3] += r["gpu_power_mw"]
        hours_in[k].add(r["hour_ms"])
        if r["temp_max"] is not None:
            hot[k] = max(hot.get(k) or r["temp_max"], r["temp_max"])
    summary = {
        k: {
            "util": _share(t[1], t[0]),
            "mem": _share(t[2], t[0]),
            # each pool-hour's draw held for its hour: the mean over the hours, and the sum
            "power_w": round(t[3] / len(hours_in[k]) / MW_PER_W, 1),
            "energy_kwh": round(t[3] / MW_H_PER_KWH, 3),
            "temp_max": hot.get(k),
        }
        for k, t in totals.items()
    }
    series = {
        k: {
            "t": sorted(b),
            "util": [_share(b[t][1], b[t][0]) for t in sorted(b)],
            "mem": [_share(b[t][2], b[t][0]) for t in sorted(b)],
        }
        for k, b in buckets.items()
    }
    return summary, series


def _share(total: int, n: int) -> float | None:
    return round(total / n / 100, 4) if n else None


def billed(since: int, until: int, key_of_gpu: dict[str, Any] | None) -> dict[Any, int]:
    """Bill line totals (micro-units) of the lines that ended in [since, until): per
    generation (key_of_gpu None), or per key of the GPUs they measured, a line shared among
    its GPUs' keys by GPU count (the remainder to the first)."""
    lines = Settlement.objects.filter(end_ms__gte=since, end_ms__lt=until)
    out: dict[Any, int] = defaultdict(int)
    if key_of_gpu is None:
        for generation, total in lines.values_list("generation", "total_micro"):
            out[generation] += total
        return out
    for gpus, total in lines.values_list("gpus", "total_micro"):
        keys = [key_of_gpu[u] for u in gpus if u in key_of_gpu]
        if not keys:
            continue
        share, rest = divmod(total, len(keys))
        for i, k in enumerate(keys):
            out[k] += share + (rest if i == 0 else 0)
    return out


def _names(model: Any, ids: Iterable[int], field: str) -> dict[int, str]:
    return dict(model.objects.filter(pk__in=set(ids)).values_list("id", field))


def _rows(
    counts: dict[Any, dict[str, Any]],
    used: dict[Any, dict[str, Any]],
    cost: dict[Any, int],
    name: Callable[[Any], str],
) -> list[dict[str, Any]]:
    empty = {"util": None, "mem": None, "power_w": None, "energy_kwh": 0, "temp_max": None}
    keys = sorted(set(counts) | set(used), key=lambda k: name(k))
    return [
        {
            "name": name(k),
            **(counts.get(k) or _new_row()),
            **used.get(k, empty),
            "billed_micro": cost.get(name(k), 0),
        }
        for k in keys
    ]


def fleet_page(rng: Range, now_ms: int | None = None) -> dict[str, Any]:
    """The whole fleet, per generation and per site."""
    since, until = rng.window(now_ms)
    hours = rollups.pool_hours(bucket_of(since, MS_PER_HOUR), until, now_ms)
    stock = inventory()
    sites = _names(Site, [r["site_id"] for r in stock + hours], "name")
    gens = _names(Generation, [r["generation_id"] for r in stock + hours], "catalogue_id")
    by_gen, by_site = (lambda r: gens[r["generation_id"]]), (lambda r: sites[r["site_id"]])
    gen_used, gen_series = usage(hours, by_gen, rng)
    site_used, site_series = usage(hours, by_site, rng)
    gpu_site = dict(GPU.objects.values_list("uuid", "node__site__name"))
    node_trust = dict(Node.objects.values_list("trust").annotate(n=Count("id")).order_by())
    return {
        "range": rng.name,
        "bucket_ms": rng.bucket_ms,
        "since": since,
        "until": until,
        "generations": _rows(
            count_inventory(stock, by_gen), gen_used, billed(since, until, None), str
        ),
        "sites": _rows(
            count_inventory(stock, by_site), site_used, billed(since, until, gpu_site), str
        ),
        "nodes_by_trust": {t: node_trust.get(t, 0) for t in TRUST},
        "series": {"generations": gen_series, "sites": site_series},
    }


def site_page(site: Site, rng: Range, now_ms: int | None = None) -> dict[str, Any]:
    """One site: its pools (one per generation)."""
    since, until = rng.window(now_ms)
    hours = [
        r
        for r in rollups.pool_hours(bucket_of(since, MS_PER_HOUR), until, now_ms)
        if r["site_id"] == site.pk
    ]
    stock = inventory(Q(node__site=site))
    gens = _names(Generation, [r["generation_id"] for r in stock + hours], "catalogue_id")
    by_gen = lambda r: gens[r["generation_id"]]  # noqa: E731
    used, series = usage(hours, by_gen, rng)
    gpu_gen = dict(
        GPU.objects.filter(node__site=site).values_list("uuid", "generation__catalogue_id")
    )
    node_trust = dict(
        Node.objects.filter(site=site).values_list("trust").annotate(n=Count("id")).order_by()
    )
    return {
        "range": rng.name,
        "bucket_ms": rng.bucket_ms,
        "since": since,
        "until": until,
        "site": site.name,
        "pools": _rows(count_inventory(stock, by_gen), used, billed(since, until, gpu_gen), str),
        "nodes_by_trust": {t: node_trust.get(t, 0) for t in TRUST},
        "series": {"pools": series},
    }
