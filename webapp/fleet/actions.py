"""Operator writes to nodes that are not attestation: each one transaction, one audit row
and a dashboard event after commit."""

from __future__ import annotations

from django.db import transaction

from webapp.core.events import audit, publish_on_commit
from webapp.fleet.models import Node


def quarantine_node(node: Node, *, actor: str) -> Node:
    """Take the node out of placement (no new leases); leases already on it keep running.
    The ledger holds no node status, so nothing is written there."""
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        if node.status != Node.QUARANTINED:
            previous = node.status
            node.status = Node.QUARANTINED
            node.save(update_fields=["status"])
            audit(actor, "node.quarantined", node, previous=previous)
            publish_on_commit("node", id=node.pk, status=node.status)
    return node
