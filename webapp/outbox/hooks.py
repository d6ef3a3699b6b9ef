"""What the relay does around each contract function: resolve references to other ledger
records just before sending (`prepare`), and tell the domain what the ledger decided
(`committed`, `rejected`). One place per function, so the relay itself stays generic."""

from __future__ import annotations

import json
from typing import Any

from chaincode_client.interface import Receipt
from webapp.outbox.models import OutboxEntry

ATTESTATION_REFS = "_attestation_pks"  # args key holding Django ids, resolved to ledger ids


def prepare(entry: OutboxEntry) -> dict[str, Any]:
    from webapp.attestation.models import Attestation
    from webapp.outbox.relay import NotReady

    args = dict(entry.args)
    pks = args.pop(ATTESTATION_REFS, None)
    if pks is not None:
        tx_ids = dict(Attestation.objects.filter(pk__in=pks).values_list("pk", "ledger_tx"))
        missing = [pk for pk in pks if not tx_ids.get(pk)]
        if missing:
            raise NotReady(f"attestations {missing} are not on the ledger yet")
        args["attestation_ids"] = [tx_ids[pk] for pk in pks]
    return args


def committed(entry: OutboxEntry, receipt: Receipt) -> None:
    from webapp.attestation.models import Attestation
    from webapp.leasing.models import Settlement

    args = entry.args
    if entry.function == "IssueChallenge":
        from webapp.attestation.service import challenge_issued

        challenge_issued(json.loads(receipt.payload))
    elif entry.function == "RecordAttestation":
        Attestation.objects.filter(node__name=args["node_id"], nonce=args["nonce"]).update(
            ledger_tx=receipt.tx_id
        )
    elif entry.function == "Settle":
        Settlement.objects.filter(
            lease__ledger_id=args["lease_id"], seq=args["interval_seq"]
        ).update(
            ledger_tx=receipt.tx_id,
            ledger_block=receipt.block_number,
            validation_code=receipt.validation_code,
        )


def rejected(entry: OutboxEntry, message: str) -> None:
    """The ledger is the source of truth: a lease it refused does not run."""
    from webapp.leasing import actions, states
    from webapp.leasing.models import Lease

    if entry.function == "CreateLease":
        lease = Lease.objects.filter(ledger_id=entry.args["lease_id"]).first()
        if lease and states.FAILED in states.TRANSITIONS[lease.state]:
            actions.fail_lease(
                lease, reason=f"ledger refused the lease: {message}", actor="ledger-relay"
            )
