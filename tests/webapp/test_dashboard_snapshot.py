"""The operator overview's fleet table: a GPU is leased, quarantined (its node failed
attestation or was quarantined, so it cannot be leased) or free, never two of them."""

from __future__ import annotations

from decimal import Decimal

from webapp.dashboard.snapshot import fleet_by_generation
from webapp.fleet.models import Node
from webapp.leasing import actions


def _lease_one(tenant, gpu) -> None:
    lease = actions.request_lease(
        tenant, gpu_count=1, precision="FP16", hours=Decimal(1), actor="t"
    )
    actions.place_lease(
        lease,
        [gpu],
        price={},
        price_total_micro=1,
        attributed_energy_mj=1,
        attestations=[],
        actor="t",
    )


def _row():
    (row,) = fleet_by_generation()
    return {k: row[k] for k in ("total", "leased", "quarantined", "free")}


def test_gpus_of_a_failed_node_are_quarantined_not_free(fleet, tenant):
    _lease_one(tenant, fleet.gpus[0])
    assert _row() == {"total": 4, "leased": 1, "quarantined": 0, "free": 3}
    Node.objects.filter(pk=fleet.node.pk).update(trust=Node.FAILED)
    assert _row() == {"total": 4, "leased": 1, "quarantined": 3, "free": 0}
    Node.objects.filter(pk=fleet.node.pk).update(trust=Node.TRUSTED, status=Node.QUARANTINED)
    assert _row()["quarantined"] == 3


def test_a_node_still_enrolling_is_not_free(fleet):
    Node.objects.filter(pk=fleet.node.pk).update(status=Node.ENROLLING, trust=Node.UNKNOWN)
    assert _row() == {"total": 4, "leased": 0, "quarantined": 4, "free": 0}
