"""The outbox relay against the real embedded ledger: an enrolled swtpm node, its quote, a
lease relying on it and the settlement reach the ledger (each quote re-verified by the
contract), receipts come back to the domain rows, and `ledger_verify` audits the chain."""

from __future__ import annotations

import json
import sqlite3

import pytest
from django.core.management import CommandError, call_command

from ledger.audit.receipt import verify_receipt
from tests.ledger.helpers import org_roots
from tests.webapp import leases
from tests.webapp.helpers import drawn, line
from webapp.attestation.models import Attestation
from webapp.core.models import AuditEvent
from webapp.leasing import actions, states
from webapp.leasing.models import Lease, Settlement
from webapp.leasing.scheduling import next_lines, open_interval
from webapp.outbox import relay
from webapp.outbox.ledger import close_ledger_client
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import overlap, relay_once, subjects

ACTOR = "test"


def test_attestation_lease_and_settlement_reach_the_ledger(
    fleet, tenant, attested_node, node_agent, ledger
):
    assert attested_node.ledger_tx  # the contract re-verified the quote and recorded it
    lease = leases.placed(tenant, fleet.gpus[:2], [attested_node])
    assert relay_once(ledger) == {"done": 1}
    # the ledger holds the contract: the relay's reaction started the lease
    assert Lease.objects.get(pk=lease.pk).state == states.ACTIVE
    actions.end_lease(lease, actor=ACTOR)
    lease = Lease.objects.get(pk=lease.pk)
    # the node's next quote binds the readings of its GPUs while the lease ran
    start, end = lease.terms["start_ms"], int(lease.ended.timestamp() * 1000)
    assert node_agent.attest(drawn(fleet.gpus[:2], start, end, watts=300))["valid"]
    (interval,) = next_lines(lease, open_interval(lease))
    assert interval.measured_mj == 2 * (end - start) * 300 > 0 and len(interval.batches) == 2
    amount = interval.line.total_micro
    actions.settle_lease(lease, [interval], actor=ACTOR)
    # the Settle the outbox rebuilds from the stored row is the scheduler's (one bill_line)
    assert OutboxEntry.objects.get(function="Settle").args == interval.request()
    relay_once(ledger)  # RecordAttestation (its readings), EndLease, then Settle, which waits
    assert relay_once(ledger) == {}, list(OutboxEntry.objects.values_list("function", "last_error"))
    settlement = Settlement.objects.get(lease=lease)
    assert settlement.ledger_tx
    (noted,) = AuditEvent.objects.filter(action="settlement.committed", object_id=settlement.pk)
    assert noted.data["tx"] == settlement.ledger_tx and noted.actor == "ledger-relay"
    recorded = AuditEvent.objects.filter(action="attestation.recorded")
    assert recorded.filter(
        object_id=attested_node.pk, data__ledger_id=attested_node.ledger_tx
    ).exists()
    assert set(OutboxEntry.objects.values_list("status", flat=True)) == {OutboxEntry.DONE}
    on_chain = ledger.evaluate("GetSettlements", f'{{"lease_id": "{lease.ledger_id}"}}')
    assert [s["total_micro"] for s in json.loads(on_chain)] == [amount]
    call_command("ledger_verify")


def test_a_lease_without_a_fresh_attestation_is_refused_by_the_ledger(
    fleet, tenant, ledger, attested_node
):
    lease = leases.placed(tenant, fleet.gpus[:2], [])
    assert relay_once(ledger) == {"rejected": 1}
    entry = OutboxEntry.objects.get(function="CreateLease")
    assert "attest" in entry.last_error.lower()
    lease.refresh_from_db()
    assert lease.state == states.FAILED and "ledger refused" in lease.reason


def test_a_lease_waits_for_its_attestation_to_reach_the_ledger(
    fleet, tenant, attested_node, ledger
):
    Attestation.objects.filter(pk=attested_node.pk).update(ledger_tx="")
    leases.placed(tenant, fleet.gpus[:2], [attested_node])
    assert relay_once(ledger) == {"waiting": 1}
    entry = OutboxEntry.objects.get(function="CreateLease")
    assert entry.status == OutboxEntry.PENDING and entry.next_attempt is not None


def test_relay_retries_are_idempotent(fleet, tenant, attested_node, ledger):
    lease = leases.placed(tenant, fleet.gpus[:2], [attested_node])
    relay_once(ledger)
    entry = OutboxEntry.objects.get(function="CreateLease")
    first_tx = entry.tx_id
    entry.status = OutboxEntry.PENDING  # as if the worker died before recording the receipt
    entry.save()
    assert relay_once(ledger) == {"done": 1}  # the ledger answers with what it has
    assert Lease.objects.get(pk=lease.pk).state == states.ACTIVE  # started once, still running
    # a second transaction answered from the stored record; the chain holds one lease
    assert OutboxEntry.objects.get(function="CreateLease").tx_id != first_tx
    history = ledger.evaluate("GetHistory", f'{{"key": "lease:{lease.ledger_id}"}}')
    assert history.decode().count('"tx_id"') == 1


def test_ledger_verify_names_a_tampered_block(settings, attested_node):
    close_ledger_client()
    with sqlite3.connect(settings.LEDGER_PATH) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        assert "blocks" in tables, tables
        db.execute("update blocks set hash = zeroblob(32) where number = 1")
    with pytest.raises(CommandError, match="defect"):
        call_command("ledger_verify")


def test_tenant_receipt_re_checks_offline(fleet, owner, outsider, attested_node, ledger, settings):
    lease = leases.placed(owner.tenant, fleet.gpus[:2], [attested_node])
    assert owner.client.get(f"/api/v1/leases/{lease.pk}/receipt/").status_code == 409
    relay_once(ledger)
    response = owner.client.get(f"/api/v1/leases/{lease.pk}/receipt/")
    assert response.status_code == 200
    receipt = response.json()
    assert verify_receipt(receipt, org_roots(settings.LEDGER_PATH)) == []
    functions = {"CreateLease", "RecordAttestation", "RegisterNode"}
    assert len(receipt["transactions"]) >= len(functions)
    receipt["transactions"][0]["envelope"] = (
        receipt["transactions"][0]["envelope"][:-8] + "AAAAAAA="
    )
    assert verify_receipt(
        receipt, org_roots(settings.LEDGER_PATH)
    )  # a tampered receipt no longer checks out
    assert outsider.client.get(f"/api/v1/leases/{lease.pk}/receipt/").status_code == 404


def _blocks(function: str) -> list[int]:
    rows = OutboxEntry.objects.filter(function=function).order_by("created", "id")
    return [row.block_number for row in rows]


def test_rows_about_different_records_are_pipelined_into_one_block(
    fleet, tenant, attested_node, ledger
):
    ledger.engine.block_timeout_s = 1.0  # a block waits for more; a one-by-one relay can't fill it
    leases.placed(tenant, fleet.gpus[:2], [attested_node])
    leases.placed(tenant, fleet.gpus[2:], [attested_node])
    assert relay_once(ledger) == {"done": 2}
    first, second = _blocks("CreateLease")
    assert first == second


def test_rows_about_one_lease_commit_in_order_within_one_relay_pass(
    fleet, tenant, attested_node, ledger
):
    lease = leases.placed(tenant, fleet.gpus[:2], [attested_node])
    assert relay_once(ledger) == {"done": 1}
    assert Lease.objects.get(pk=lease.pk).state == states.ACTIVE
    actions.end_lease(lease, actor=ACTOR)
    actions.settle_lease(lease, [line(lease)], actor=ACTOR)
    again = leases.placed(tenant, fleet.gpus[:2], [attested_node])  # the GPUs EndLease frees
    assert relay_once(ledger) == {"done": 3}  # EndLease, Settle, CreateLease: none refused
    (end,), (settle,) = _blocks("EndLease"), _blocks("Settle")
    assert end < settle and end < _blocks("CreateLease")[1]
    assert Lease.objects.get(pk=again.pk).state == states.ACTIVE
    call_command("ledger_verify")


def test_a_later_row_never_overtakes_a_waiting_one_about_the_same_lease(
    fleet, tenant, attested_node, ledger
):
    on_ledger = attested_node.ledger_tx
    Attestation.objects.filter(pk=attested_node.pk).update(ledger_tx="")
    lease = leases.placed(tenant, fleet.gpus[:2], [attested_node])
    Lease.objects.filter(pk=lease.pk).update(state=states.ACTIVE)  # as if it had started
    actions.end_lease(Lease.objects.get(pk=lease.pk), actor=ACTOR)
    # CreateLease waits for its attestation, so EndLease must wait too (not be refused)
    assert relay_once(ledger) == {"waiting": 2}
    end = OutboxEntry.objects.get(function="EndLease")
    assert "earlier change" in end.last_error
    # EndLease's back-off runs out first: it still must not go before its CreateLease
    OutboxEntry.objects.filter(pk=end.pk).update(next_attempt=None)
    assert relay_once(ledger) == {"waiting": 1}
    # the attestation is on the ledger again: both go, in order
    Attestation.objects.filter(pk=attested_node.pk).update(ledger_tx=on_ledger)
    OutboxEntry.objects.update(next_attempt=None)
    assert relay_once(ledger) == {"done": 2}
    assert _blocks("CreateLease")[0] < _blocks("EndLease")[0]


def test_which_rows_must_wait_for_each_other():
    create = subjects("CreateLease", {"lease_id": "L1", "gpus": ["G1", "G2"]})
    end_other = subjects("EndLease", {"lease_id": "L2"})
    attest = subjects("RecordAttestation", {"node_id": "n1", "nonce": "00"})
    register = subjects("RegisterNode", {"node_id": "n1", "gpus": [{"uuid": "G1"}]})
    assert overlap(create, end_other) and overlap(end_other, create)  # it may free G1 or G2
    assert overlap(register, create) and overlap(register, attest)
    assert not overlap(create, attest)  # different records: they may share a block
    settle_one, settle_two = (subjects("Settle", {"lease_id": x}) for x in ("L1", "L2"))
    assert not overlap(settle_one, settle_two)


def test_claims_never_overlap_and_stale_claims_come_back(db):
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from webapp.outbox.records import enqueue
    from webapp.outbox.relay import claim

    rows = [enqueue(f"k{i}", "RevokeAK", {"node_id": f"n{i}", "reason": ""}) for i in range(5)]
    first, second = claim(2), claim(10)
    assert [r.pk for r in first] == [r.pk for r in rows[:2]]  # oldest first
    assert [r.pk for r in second] == [r.pk for r in rows[2:]]
    assert claim(10) == []  # everything is claimed
    assert len({r.claimed_by for r in first + second}) == 2  # one token per claim
    # a worker died holding the first claim: its rows are reclaimed once stale
    later = timezone.now() + timedelta(seconds=settings.OUTBOX_STALE_CLAIM_S + 1)
    assert [r.pk for r in claim(10, now=later)] == [r.pk for r in rows]


def test_a_peer_behind_is_asked_again_soon_and_a_lasting_disagreement_backs_off():
    """A disagreement (another organisation's peer has not yet got the previous block) is
    polled every PEERS_BEHIND_RETRY_S for PEERS_BEHIND_PATIENCE attempts, then doubles like
    any fault; a fault doubles from the first attempt, up to MAX_BACKOFF_S."""
    fast = relay.PEERS_BEHIND_RETRY_S
    patience = relay.PEERS_BEHIND_PATIENCE
    assert [relay.backoff_s(n, peers_behind=True) for n in (1, 5, patience)] == [fast] * 3
    assert relay.backoff_s(patience + 1, peers_behind=True) == relay.backoff_s(patience + 1)
    assert relay.backoff_s(patience + 1) > fast
    assert [relay.backoff_s(n) for n in (1, 2, 3, 4)] == [2, 4, 8, 16]
    assert relay.backoff_s(40) == relay.MAX_BACKOFF_S
