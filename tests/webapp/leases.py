"""Leases in a given state for the web app's tests, through the real leasing actions."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from webapp.fleet.models import GPU
from webapp.leasing import actions
from webapp.leasing.models import Lease
from webapp.tenancy.models import Tenant

ACTOR = "test"
GENERATION = "A100-SXM4-80GB"


def placed(
    tenant: Tenant,
    gpus: Sequence[GPU],
    attestations: Sequence[Any] = (),
    price: dict | None = None,
    price_total_micro: int = 5_000_000,
    attributed_energy_mj: int = 7_200_000_000,
) -> Lease:
    lease = actions.request_lease(
        tenant, gpu_count=len(gpus), precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    return actions.place_lease(
        lease,
        list(gpus),
        price=price or {},
        price_total_micro=price_total_micro,
        attributed_energy_mj=attributed_energy_mj,
        attestations=list(attestations),
        actor=ACTOR,
    )


def active(tenant: Tenant, gpus: Sequence[GPU], **terms: Any) -> Lease:
    return actions.activate_lease(placed(tenant, gpus, **terms), actor=ACTOR)


def settled(lease: Lease, amount_micro: int, attributed_mj: int = 1, measured_mj: int = 2) -> Lease:
    """End an active lease and settle it with one interval of these amounts."""
    actions.end_lease(lease, actor=ACTOR)
    interval = actions.SettlementInput(
        generation=GENERATION,
        attributed_energy_mj=attributed_mj,
        measured_energy_mj=measured_mj,
        tariff_micro_per_kwh=1,
        amount_micro=amount_micro,
        telemetry_digest="00" * 32,
    )
    return actions.settle_lease(Lease.objects.get(pk=lease.pk), [interval], actor=ACTOR)
