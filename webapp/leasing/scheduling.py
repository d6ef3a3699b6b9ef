"""Bridge between the database and the scheduler: build the plan input from the fleet and
the queue, apply the plan through the leasing actions, settle leases that have ended."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from webapp.fleet.models import GPU, Node, Site
from webapp.leasing import states
from webapp.leasing.models import Lease

MICRO = Decimal(1_000_000)


def build_plan_input() -> dict[str, Any]:
    """The fleet and queue in the scheduler's documented input schema (docs/scheduler.md)."""
    busy = set(GPU.objects.filter(leases__state__in=states.HOLDS_GPUS).values_list("pk", flat=True))
    gpus = []
    for gpu in GPU.objects.select_related("node", "generation", "node__site"):
        gpus.append(
            {
                "id": gpu.uuid,
                "generation": gpu.generation.catalogue_id,
                "node": gpu.node.name,
                "site": str(gpu.node.site_id),
                "free": gpu.pk not in busy,
                "attested": gpu.node.trust == Node.TRUSTED and gpu.node.status == Node.ACTIVE,
            }
        )
    sites = [
        {
            "id": str(s.pk),
            "pue": str(s.pue),
            "tariff_per_kwh": str(Decimal(s.tariff_micro_per_kwh) / MICRO),
        }
        for s in Site.objects.all()
    ]
    jobs = [
        {
            "id": str(lease.pk),
            "gpus": lease.gpu_count,
            "precision": lease.precision,
            "hours": str(lease.hours),
            "priority": lease.priority,
            "min_memory_gb": lease.min_memory_gb,
            "single_node": lease.single_node,
        }
        for lease in Lease.objects.filter(state=states.REQUESTED).order_by("created")
    ]
    return {"gpus": gpus, "sites": sites, "jobs": jobs}
