"""Attestation's actions, by job: `credentials` (a node agent's credential, its AK),
`enrolment` (EK chain, credential activation, inventory, registration), `quotes` (challenges,
verified quotes, the ledger's verdict, staleness). Other apps import them from here."""

from __future__ import annotations

from webapp.attestation.actions.credentials import (
    NODE_TOKEN_KIND,
    issue_node_credential,
    node_for_token,
    revoke_ak,
)
from webapp.attestation.actions.enrolment import (
    CredentialChallenge,
    EnrolmentRefused,
    InventoryQuote,
    finish_enrolment,
    load_ca_certificates,
    policy_of,
    start_enrolment,
)
from webapp.attestation.actions.quotes import (
    challenge_issued,
    issue_challenge,
    mark_stale,
    note_ledger_id,
    record_quote,
    registry,
    take_ledger_verdict,
)

__all__ = [
    "NODE_TOKEN_KIND",
    "CredentialChallenge",
    "EnrolmentRefused",
    "InventoryQuote",
    "challenge_issued",
    "finish_enrolment",
    "issue_challenge",
    "issue_node_credential",
    "load_ca_certificates",
    "mark_stale",
    "node_for_token",
    "note_ledger_id",
    "policy_of",
    "record_quote",
    "registry",
    "revoke_ak",
    "start_enrolment",
    "take_ledger_verdict",
]
