"""The outbox reads other apps share (webapp.outbox.selectors): rows by status, the oldest
row in flight, the rows about one lease."""

from __future__ import annotations

from tests.webapp import leases
from webapp.outbox import records, selectors
from webapp.outbox.models import OutboxEntry


def test_rows_by_status_name_every_status(db):
    records.enqueue("k:1", "IssueChallenge", {"node_id": "n1"})
    done = records.enqueue("k:2", "IssueChallenge", {"node_id": "n2"})
    OutboxEntry.objects.filter(pk=done.pk).update(status=OutboxEntry.DONE)
    assert selectors.status_counts() == {"pending": 1, "sending": 0, "done": 1, "rejected": 0}


def test_the_oldest_row_in_flight_is_the_first_queued_not_yet_answered(db):
    assert selectors.oldest_in_flight() is None
    first = records.enqueue("k:1", "IssueChallenge", {"node_id": "n1"})
    records.enqueue("k:2", "IssueChallenge", {"node_id": "n2"})
    assert selectors.oldest_in_flight() == first.created
    OutboxEntry.objects.filter(pk=first.pk).update(status=OutboxEntry.REJECTED)
    second = OutboxEntry.objects.get(business_key="k:2")
    assert selectors.oldest_in_flight() == second.created


def test_a_leases_rows_are_its_own_in_the_order_queued(tenant, fleet):
    mine = leases.ended(leases.active(tenant, fleet.gpus[:1]))
    other = leases.placed(tenant, fleet.gpus[1:2])
    rows = list(selectors.lease_rows(mine.ledger_id))
    assert [r.function for r in rows] == ["CreateLease", "EndLease"]
    assert all(r.business_key.startswith(f"lease:{mine.ledger_id}:") for r in rows)
    assert [r.function for r in selectors.lease_rows(other.ledger_id)] == ["CreateLease"]
