"""A node's page: its attestation timeline, each failed quote's reasons and the PCRs that
differ from its policy's golden values, its GPUs with their leases, power and a heat map of
their compute and memory bandwidth."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, Sum

from ledger.units import MW_PER_W
from webapp.attestation import health
from webapp.attestation import selectors as attestations
from webapp.attestation.models import Attestation
from webapp.dashboard import drill
from webapp.dashboard.ranges import Range
from webapp.fleet.models import GpuHour, Node, TelemetrySample
from webapp.leasing import states

MAX_ATTESTATIONS = 500
MAX_FAILED_SHOWN = 50
MAX_EVENTS_SHOWN = 50


def differing_pcrs(measured: dict, golden: dict) -> list[dict[str, str]]:
    """The PCRs whose measured value is not the policy's golden one (policies may leave a
    PCR unchecked with None). Both in the stored shape {bank: {index: hex}}."""
    out = []
    for bank, wanted in sorted(golden.items()):
        for index, value in sorted(wanted.items(), key=lambda kv: int(kv[0])):
            got = measured.get(bank, {}).get(str(index))
            if value is not None and got is not None and got.lower() != value.lower():
                out.append({"bank": bank, "pcr": str(index), "expected": value, "measured": got})
    return out


def node_page(node: Node, rng: Range, now_ms: int | None = None) -> dict[str, Any]:
    since, until = rng.window(now_ms)
    golden = node.pcr_policy.pcrs
    quotes = attestations.recent(node, MAX_ATTESTATIONS)
    failed = [
        {
            "at": a.created.isoformat(),
            "reasons": a.reasons,
            "differing_pcrs": differing_pcrs(a.pcr_values, golden),
            "on_ledger": bool(a.ledger_tx),
        }
        for a in quotes
        if not a.valid
    ][:MAX_FAILED_SHOWN]
    gpus = []
    for gpu in node.gpus.select_related("generation").order_by("index"):
        holding = gpu.leases.filter(state__in=states.HOLDS_GPUS).select_related("tenant").first()
        gpus.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "generation": gpu.generation.catalogue_id,
                "lease": holding.pk if holding else None,
                "tenant": holding.tenant.name if holding else None,
            }
        )
    return {
        "node": {
            "name": node.name,
            "site": node.site.name,
            "status": node.status,
            "trust": node.trust,
            "policy": node.pcr_policy.name,
            "last_good_attestation": node.last_good_attestation.isoformat()
            if node.last_good_attestation
            else None,
            "not_attested": health.why_not_attested(node),
        },
        "events": [
            {"at": e.created.isoformat(), "code": e.code, "detail": e.detail}
            for e in node.events.all()[:MAX_EVENTS_SHOWN]
        ],
        "timeline": _timeline(quotes),
        "failed": failed,
        "gpus": gpus,
        "power": _power(node, rng, since, until),
        "gpu_heat": drill.node_gpus(node, rng, since, until),
    }


def _timeline(quotes: list[Attestation]) -> dict[str, list]:
    ordered = sorted(quotes, key=lambda a: a.created)
    return {
        "t": [a.created.isoformat() for a in ordered],
        "valid": [a.valid for a in ordered],
        "reasons": [
            "; ".join(r.get("code", "") for r in a.reasons if not a.valid) for a in ordered
        ],
    }


def _power(node: Node, rng: Range, since: int, until: int) -> dict[str, list]:
    """Mean board power of the node's GPUs (W) per bucket of the range."""
    if rng.from_rollups:
        rows = GpuHour.objects.filter(gpu__node=node, hour_ms__gte=since, hour_ms__lt=until)
        field, total, count = "hour_ms", Sum("power_mw_sum"), Sum("samples")
    else:
        rows = TelemetrySample.objects.filter(gpu__node=node, t_ms__gte=since, t_ms__lt=until)
        field, total, count = "t_ms", Sum("power_mw"), Count("t_ms")
    buckets = (
        rows.annotate(b=F(field) - F(field) % rng.bucket_ms)
        .values("b")
        .annotate(p=total, n=count)
        .order_by("b")
    )
    points = [(r["b"], round(r["p"] / r["n"] / MW_PER_W, 1)) for r in buckets if r["n"]]
    return {"t": [t for t, _ in points], "watts": [w for _, w in points]}
