"""Reads of a node's quotes that other apps share: its attestation status (the newest
quote), its recent quotes, the quote a new lease on it relies on, its quotes while a lease
held it."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from webapp.attestation.models import Attestation
from webapp.fleet.models import Node


def latest(node: Node) -> Attestation | None:
    """The node's newest quote, valid or not: what its attestation status shows."""
    return node.attestations.order_by("-created", "-pk").first()


def recent(node: Node, limit: int) -> list[Attestation]:
    """The node's `limit` newest quotes, newest first."""
    return list(node.attestations.order_by("-created", "-pk")[:limit])


def relied_on(node: Node) -> Attestation | None:
    """The quote a new lease on the node relies on: its newest valid one that the ledger
    recorded (the ledger re-checks its age when the lease is created)."""
    return (
        node.attestations.filter(valid=True)
        .exclude(ledger_tx="")
        .order_by("-created", "-pk")
        .first()
    )


def quotes_between(node: Node, start: datetime | None, end: datetime | None) -> QuerySet:
    """The node's quotes within [start, end] (an open end: unbounded)."""
    quotes = Attestation.objects.filter(node=node)
    if start is not None:
        quotes = quotes.filter(created__gte=start)
    if end is not None:
        quotes = quotes.filter(created__lte=end)
    return quotes
