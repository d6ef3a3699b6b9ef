"""The operator overview's fleet table: a GPU is leased, quarantined (its node failed
attestation or was quarantined, so it cannot be leased) or free, never two of them."""

from __future__ import annotations

from tests.webapp import leases
from webapp.dashboard.snapshot import fleet_by_generation
from webapp.fleet.models import Node


def _row():
    (row,) = fleet_by_generation()
    return {k: row[k] for k in ("total", "leased", "quarantined", "free")}


def test_gpus_of_a_failed_node_are_quarantined_not_free(fleet, tenant):
    leases.placed(tenant, fleet.gpus[:1])
    assert _row() == {"total": 4, "leased": 1, "quarantined": 0, "free": 3}
    Node.objects.filter(pk=fleet.node.pk).update(trust=Node.FAILED)
    assert _row() == {"total": 4, "leased": 1, "quarantined": 3, "free": 0}
    Node.objects.filter(pk=fleet.node.pk).update(trust=Node.TRUSTED, status=Node.QUARANTINED)
    assert _row()["quarantined"] == 3


def test_a_node_still_enrolling_is_not_free(fleet):
    Node.objects.filter(pk=fleet.node.pk).update(status=Node.ENROLLING, trust=Node.UNKNOWN)
    assert _row() == {"total": 4, "leased": 0, "quarantined": 4, "free": 0}
