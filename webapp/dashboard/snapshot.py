"""The numbers behind the dashboard, read from the database in a handful of queries."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Avg, Count, Q, Sum
from django.utils import timezone

from ledger.money import from_micro
from ledger.units import MW_PER_W, ms_of
from webapp.dashboard import capacity
from webapp.fleet import rate_card
from webapp.fleet.models import GPU, Node, TelemetrySample
from webapp.leasing import bills, states
from webapp.leasing.models import Lease, Settlement
from webapp.outbox import selectors as outbox
from webapp.outbox.models import OutboxEntry

UTILISATION_WINDOW = timedelta(minutes=10)
RECENT_LEASES = 12
RECENT_LEDGER_TXS = 10


def fleet_by_generation() -> list[dict[str, Any]]:
    """GPUs per generation: leased, quarantined (on a node that is not active and trusted,
    so not leasable, and held by no lease) and free (the rest)."""
    leased = Q(leases__state__in=states.HOLDS_GPUS)
    usable = Q(node__status=Node.ACTIVE, node__trust=Node.TRUSTED)
    rows = (
        GPU.objects.values("generation__catalogue_id", "generation__family")
        .annotate(
            total=Count("id", distinct=True),
            leased=Count("id", filter=leased, distinct=True),
            unusable=Count("id", filter=~usable, distinct=True),
            unusable_leased=Count("id", filter=~usable & leased, distinct=True),
        )
        .order_by("generation__family", "generation__catalogue_id")
    )
    out = []
    for r in rows:
        quarantined = r["unusable"] - r["unusable_leased"]
        out.append(
            {
                "generation": r["generation__catalogue_id"],
                "family": r["generation__family"],
                "total": r["total"],
                "leased": r["leased"],
                "quarantined": quarantined,
                "free": r["total"] - r["leased"] - quarantined,
            }
        )
    return out


def _pue(site: str) -> str:
    rates = rate_card.site_rates(site)
    return "unpriced" if rates is None else str(rates[0])


def nodes() -> list[dict[str, Any]]:
    return [
        {
            "name": n.name,
            "site": n.site.name,
            "pue": _pue(n.site.name),
            "status": n.status,
            "trust": n.trust,
            "gpus": n.gpu_count,
            "last_good_attestation": n.last_good_attestation.isoformat()
            if n.last_good_attestation
            else None,
        }
        for n in Node.objects.select_related("site").annotate(gpu_count=Count("gpus"))
    ]


def utilisation(now=None) -> list[dict[str, Any]]:
    """Mean compute and memory-bandwidth utilisation per generation over the window."""
    since_ms = ms_of((now or timezone.now()) - UTILISATION_WINDOW)
    rows = (
        TelemetrySample.objects.filter(t_ms__gte=since_ms)
        .values("gpu__generation__catalogue_id")
        .annotate(util=Avg("util_gpu_pct"), mem=Avg("util_mem_pct"), power=Avg("power_mw"))
        .order_by("gpu__generation__catalogue_id")
    )
    return [
        {
            "generation": r["gpu__generation__catalogue_id"],
            "util_gpu": round(r["util"] / 100, 3),
            "util_mem_bw": round(r["mem"] / 100, 3),
            "power_w": round(r["power"] / MW_PER_W, 1),
        }
        for r in rows
    ]


def leases() -> dict[str, Any]:
    counts = dict(Lease.objects.values_list("state").annotate(n=Count("id")).order_by())
    recent = [
        {
            "id": lease.pk,
            "tenant": lease.tenant.name,
            "state": lease.state,
            "gpus": lease.gpu_count,
            "precision": lease.precision,
            "price": None
            if lease.price_total_micro is None
            else str(from_micro(lease.price_total_micro)),
        }
        for lease in Lease.objects.select_related("tenant")[:RECENT_LEASES]
    ]
    return {"by_state": {s: counts.get(s, 0) for s, _ in states.CHOICES}, "recent": recent}


def cost_by_tenant() -> list[dict[str, Any]]:
    """Per tenant: what its leases were quoted, and what it was billed (the sum of its bill
    lines, webapp.leasing.bills)."""
    quoted = dict(
        Lease.objects.filter(price_total_micro__isnull=False)
        .values_list("tenant__name")
        .annotate(quoted=Sum("price_total_micro"))
        .order_by()
    )
    billed = bills.totals_by_tenant()
    return [
        {
            "tenant": name,
            "priced_micro": quoted.get(name, 0),
            "billed_micro": billed.get(name, 0),
        }
        for name in sorted(set(quoted) | set(billed))
    ]


def ledger_activity() -> dict[str, Any]:
    last = OutboxEntry.objects.filter(status=OutboxEntry.DONE).order_by("-done").first()
    recent = OutboxEntry.objects.exclude(status=OutboxEntry.PENDING).order_by("-done", "-id")
    return {
        "outbox": outbox.status_counts(),
        "settlements": Settlement.objects.count(),
        "last_block": last.block_number if last else None,
        "recent": [
            {
                "function": e.function,
                "block": e.block_number,
                "tx": e.tx_id[:12],
                "code": e.validation_code or e.status.upper(),
            }
            for e in recent[:RECENT_LEDGER_TXS]
        ],
    }


def snapshot() -> dict[str, Any]:
    return {
        "at": timezone.now().isoformat(),
        "fleet": fleet_by_generation(),
        "nodes": nodes(),
        "utilisation": utilisation(),
        "leases": leases(),
        "cost": cost_by_tenant(),
        "ledger": ledger_activity(),
        "advice": capacity.scaling_advice(),
        "idle_heatmap": capacity.idle_heatmap(),
    }
