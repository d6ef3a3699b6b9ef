"""What the leasing app does when the ledger decides (registered in LeasingConfig.ready):
the ledger is the source of truth for lease contracts, so a lease starts when the ledger
commits its contract, fails when the ledger refuses it, and a settlement notes its tx."""

from __future__ import annotations

from chaincode_client.interface import Receipt
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.outbox import hooks
from webapp.outbox.models import OutboxEntry

ACTOR = "ledger-relay"


def contract_committed(entry: OutboxEntry, receipt: Receipt) -> None:
    """A placed lease becomes active once the ledger holds its contract."""
    lease = Lease.objects.filter(ledger_id=entry.args["lease_id"]).first()
    if lease is not None and lease.state == states.PLACED:
        actions.activate_lease(lease, actor=ACTOR)


def contract_rejected(entry: OutboxEntry, message: str) -> None:
    """A lease the ledger refused does not run."""
    lease = Lease.objects.filter(ledger_id=entry.args["lease_id"]).first()
    if lease and states.FAILED in states.TRANSITIONS[lease.state]:
        actions.fail_lease(lease, reason=f"ledger refused the lease: {message}", actor=ACTOR)


def settlement_committed(entry: OutboxEntry, receipt: Receipt) -> None:
    args = entry.args
    actions.note_settlement_committed(
        args["lease_id"],
        args["interval_seq"],
        tx_id=receipt.tx_id,
        block=receipt.block_number,
        validation_code=receipt.validation_code,
        actor=ACTOR,
    )


def register() -> None:
    hooks.on_committed("CreateLease", contract_committed)
    hooks.on_rejected("CreateLease", contract_rejected)
    hooks.on_committed("Settle", settlement_committed)
