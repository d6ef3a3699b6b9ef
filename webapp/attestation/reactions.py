"""What the attestation app asks of the outbox relay (registered in AttestationConfig.ready):
swap the attestation ids a row refers to for their ledger ids, and note the ledger tx of a
recorded verdict,
whose valid/invalid the ledger's endorsers decided (it stands where this server's differed)."""

from __future__ import annotations

import json
from typing import Any

from chaincode_client.interface import Receipt
from ledger.contract import bill_line
from webapp.attestation.actions import challenge_issued, note_ledger_id, take_ledger_verdict
from webapp.attestation.models import Attestation, TelemetryBatch
from webapp.outbox import hooks
from webapp.outbox.models import OutboxEntry
from webapp.outbox.records import ATTESTATION_REFS

ACTOR = "ledger-relay"


def resolve_attestation_refs(args: dict[str, Any]) -> dict[str, Any]:
    pks = args.pop(ATTESTATION_REFS, None)
    if pks is None:
        return args
    tx_ids = dict(Attestation.objects.filter(pk__in=pks).values_list("pk", "ledger_tx"))
    missing = [pk for pk in pks if not tx_ids.get(pk)]
    if missing:
        raise hooks.NotReady(f"attestations {missing} are not on the ledger yet")
    return {**args, "attestation_ids": [tx_ids[pk] for pk in pks]}


def wait_for_attested_batches(args: dict[str, Any]) -> dict[str, Any]:
    """A bill line cites batches of readings; the ledger accepts it only once the quotes that
    bound them are recorded there (RecordAttestation), so it waits for them."""
    waiting = [
        f"{b['gpu']}:{b['digest'][:12]}"
        for b in args.get(bill_line.BATCHES, [])
        if not TelemetryBatch.objects.filter(
            gpu__uuid=b["gpu"], digest=b["digest"], attestation__valid=True
        )
        .exclude(attestation__ledger_tx="")
        .exists()
    ]
    if waiting:
        raise hooks.NotReady(f"the quotes of batches {waiting} are not on the ledger yet")
    return args


def attestation_recorded(entry: OutboxEntry, receipt: Receipt) -> None:
    """Note the ledger's id of the verdict. It is the id the contract answered with, not
    this transaction's: a retried submission (the first one committed, its receipt lost) is
    answered with the record the first one wrote, and writes nothing itself."""
    args = entry.args
    try:
        record = json.loads(receipt.payload)
        ledger_id = record["attestation_id"]
    except (ValueError, KeyError, TypeError):
        record, ledger_id = {}, receipt.tx_id
    recorded = Attestation.objects.filter(node__name=args["node_id"], nonce=args["nonce"])
    for attestation in recorded:
        attestation = note_ledger_id(attestation, ledger_id, actor=ACTOR)
        take_ledger_verdict(attestation, record, actor=ACTOR)


def challenge_committed(entry: OutboxEntry, receipt: Receipt) -> None:
    """The ledger issued a challenge: the node's agent may now fetch its nonce."""
    challenge_issued(json.loads(receipt.payload))


def register() -> None:
    hooks.on_prepare(resolve_attestation_refs)
    hooks.on_prepare(wait_for_attested_batches)
    hooks.on_committed("IssueChallenge", challenge_committed)
    hooks.on_committed("RecordAttestation", attestation_recorded)
