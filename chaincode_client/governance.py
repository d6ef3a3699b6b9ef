"""Putting a policy in force on the ledger as two organisations' admins do it: one proposes
(ProposePolicy), an admin of another organisation approves (ApprovePolicy). Each client
signs with its own identity; the contract (ledger.governance) checks both are admins of
different organisations."""

from __future__ import annotations

import json
from typing import Any

from chaincode_client.interface import EndorsementError, LedgerClient


def policy_in_force(client: LedgerClient, kind: str, key: str) -> dict[str, Any] | None:
    """The approved document for (kind, key), or None when the channel has none."""
    try:
        record = json.loads(client.evaluate("GetPolicy", json.dumps({"kind": kind, "key": key})))
    except EndorsementError as exc:
        if "[governance.no_policy]" in str(exc):
            return None
        raise
    return dict(record["document"])


def decide(
    proposer: LedgerClient,
    approver: LedgerClient,
    kind: str,
    key: str,
    document: dict[str, Any],
) -> bool:
    """Put `document` in force for (kind, key): proposed by `proposer`, approved by
    `approver` (an admin of another organisation). False, and nothing written, when that
    document is already in force."""
    if policy_in_force(proposer, kind, key) == document:
        return False
    request = {"kind": kind, "key": key, "document": document}
    proposal = json.loads(proposer.submit("ProposePolicy", json.dumps(request)).payload)
    approver.submit("ApprovePolicy", json.dumps({"proposal_id": proposal["proposal_id"]}))
    return True
