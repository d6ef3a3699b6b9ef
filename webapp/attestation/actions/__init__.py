"""Attestation's actions, by job: `credentials` (a node agent's credential, its AK),
`enrolment` (EK chain, credential activation, inventory, registration), `quotes` (challenges,
verified quotes, the ledger's verdict, staleness), `retention` (the protocol's rows past
their retention). Other apps import them from here."""

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
    challenge_ahead,
    challenge_issued,
    issue_challenge,
    mark_stale,
    note_ledger_id,
    record_quote,
    registry,
    take_ledger_verdict,
)
from webapp.attestation.actions.retention import Pruned, prune_protocol

__all__ = [
    "NODE_TOKEN_KIND",
    "CredentialChallenge",
    "EnrolmentRefused",
    "InventoryQuote",
    "Pruned",
    "challenge_ahead",
    "challenge_issued",
    "finish_enrolment",
    "issue_challenge",
    "issue_node_credential",
    "load_ca_certificates",
    "mark_stale",
    "node_for_token",
    "note_ledger_id",
    "policy_of",
    "prune_protocol",
    "record_quote",
    "registry",
    "revoke_ak",
    "start_enrolment",
    "take_ledger_verdict",
]
