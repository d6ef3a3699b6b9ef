"""Leases in a given state for the web app's tests, through the real leasing actions, at
terms the ledger's rate card accepts (tests/webapp/helpers.py)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from tests.webapp.helpers import drawn, line, place
from webapp.fleet.models import GPU
from webapp.leasing import actions
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import settle_closed
from webapp.tenancy.models import Tenant

ACTOR = "test"
GENERATION = "A100-SXM4-80GB"


def placed(tenant: Tenant, gpus: Sequence[GPU], attestations: Sequence[Any] = ()) -> Lease:
    lease = actions.request_lease(
        tenant, gpu_count=len(gpus), precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    return place(lease, list(gpus), list(attestations))


def active(tenant: Tenant, gpus: Sequence[GPU]) -> Lease:
    return actions.activate_lease(placed(tenant, gpus), actor=ACTOR)


def ended(lease: Lease) -> Lease:
    actions.end_lease(lease, actor=ACTOR)
    return Lease.objects.get(pk=lease.pk)


def settled(lease: Lease, watts: int = 300) -> Lease:
    """End an active lease and settle it with one one-minute bill line, every GPU drawing
    `watts`: the line's amounts are the scheduler's, from the lease's terms."""
    lease = ended(lease)
    return actions.settle_lease(lease, [line(lease, watts=watts)], actor=ACTOR)


def settled_from_readings(lease: Lease, node_agent: Any, watts: int = 300) -> Lease:
    """End an active lease and settle it as the lease worker does, from its GPUs' attested
    readings: `node_agent` (tests/webapp/conftest.py) sends two counter readings per GPU, 2 ms
    apart, drawing `watts`, with a quote that binds them; the readings served for its line
    hash to the line's telemetry digest."""
    start = lease.terms["start_ms"]
    assert node_agent.attest(drawn(list(lease.gpus.all()), start + 1, start + 3, watts))["valid"]
    actions.end_lease(lease, actor=ACTOR)
    assert settle_closed(actor=ACTOR) >= 1
    return Lease.objects.get(pk=lease.pk)
