"""Putting a policy in force on the ledger as two organisations' admins do it: one proposes
(ProposePolicy), an admin of another organisation approves (ApprovePolicy). Each client
signs with its own identity; the contract (ledger.contract.governance) checks both are admins of
different organisations.

A proposal is known to the approver by its id, passed on by the proposer; `approve` is
given the SHA-256 of the document the approver reviewed (`document_digest`, printed by
`python -m chaincode_client.policy_cli review`) and refuses, writing nothing, when the
proposal behind the id holds another document."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from chaincode_client.interface import EndorsementError, LedgerClient
from ledger import canonical

NO_POLICY = "governance.no_policy"  # the contract's refusal when (kind, key) has none
NO_PROPOSAL = "governance.no_proposal"  # ... when a proposal id names none
# A proposal committed on the proposer's peer reaches the approver's peer a block later
# (milliseconds; seconds when that peer is catching up): the approver waits this long for it.
PROPOSAL_WAIT_S = 30.0
PROPOSAL_POLL_S = 0.25


class ProposalMismatch(ValueError):
    """The proposal to approve is not the one the approver reviewed, or no longer open."""


def document_digest(document: dict[str, Any]) -> str:
    """Hex SHA-256 of a policy document's canonical JSON: what two admins compare."""
    return hashlib.sha256(canonical.dumps(document)).hexdigest()


def policy_in_force(client: LedgerClient, kind: str, key: str) -> dict[str, Any] | None:
    """The approved document for (kind, key), or None when the channel has none."""
    record = policy_record(client, kind, key)
    return None if record is None else dict(record["document"])


def policy_record(client: LedgerClient, kind: str, key: str) -> dict[str, Any] | None:
    """The approved record for (kind, key) (document, version, who proposed and approved),
    or None when the channel has none."""
    try:
        record = json.loads(client.evaluate("GetPolicy", json.dumps({"kind": kind, "key": key})))
    except EndorsementError as exc:
        if exc.reason == NO_POLICY:
            return None
        raise
    return dict(record)


def proposal(client: LedgerClient, proposal_id: str) -> dict[str, Any]:
    """The proposal recorded under `proposal_id` and its status."""
    return dict(
        json.loads(client.evaluate("GetProposal", json.dumps({"proposal_id": proposal_id})))
    )


def propose(
    proposer: LedgerClient, kind: str, key: str, document: dict[str, Any]
) -> dict[str, Any]:
    """Propose `document` for (kind, key); returns the open proposal (its id included)."""
    request = {"kind": kind, "key": key, "document": document}
    return dict(json.loads(proposer.submit("ProposePolicy", json.dumps(request)).payload))


def proposal_when_seen(
    client: LedgerClient, proposal_id: str, wait_s: float = PROPOSAL_WAIT_S
) -> dict[str, Any]:
    """`proposal` once `client`'s peer has the block that recorded it, waiting up to `wait_s`;
    then the contract's [governance.no_proposal] refusal, as it stands."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return proposal(client, proposal_id)
        except EndorsementError as exc:
            if exc.reason != NO_PROPOSAL or time.monotonic() >= deadline:
                raise
        time.sleep(PROPOSAL_POLL_S)


def approve(
    approver: LedgerClient,
    proposal_id: str,
    reviewed_digest: str,
    wait_s: float = PROPOSAL_WAIT_S,
) -> dict[str, Any]:
    """Approve proposal `proposal_id` if it holds the document whose digest the approver
    reviewed; returns the policy record now in force. Raises ProposalMismatch (nothing
    written) when it holds another document or was already decided by someone else. A
    proposal the approver's peer has not yet received is waited for, up to `wait_s`."""
    open_proposal = proposal_when_seen(approver, proposal_id, wait_s)
    found = document_digest(open_proposal["document"])
    if found != reviewed_digest.strip().lower():
        raise ProposalMismatch(
            f"proposal {proposal_id} holds a document with SHA-256 {found}, not the "
            f"{reviewed_digest} you reviewed: nothing approved"
        )
    request = json.dumps({"proposal_id": proposal_id})
    return dict(json.loads(approver.submit("ApprovePolicy", request).payload))


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
    opened = propose(proposer, kind, key, document)
    approve(approver, opened["proposal_id"], document_digest(opened["document"]))
    return True
