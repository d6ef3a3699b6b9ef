"""Attestation challenges the ledger issues itself, and the rules an answer must meet.

`IssueChallenge` derives the nonce from its own transaction id, which the node cannot know
before the submitting organisation's client picks the proposal's random nonce; it records the
nonce with the endorser-checked time it was issued. `RecordAttestation` then accepts only a
quote over a nonce the ledger issued, for the same node, within the policy's window, once.
An attestation's age counts from the challenge's issue, never from the client's claim.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ledger.contract.state import CHALLENGE, ContractError, get_json
from ledger.units import NS_PER_S

CHALLENGE_DOMAIN = b"wattlease/challenge/v1\x00"  # separates these hashes from any other use
DEFAULT_CHALLENGE_WINDOW_S = 120  # an agent quotes in well under a second; the relay adds a few


def derive_nonce(tx_id: str, node_id: str) -> bytes:
    """32 bytes no one can compute before the challenge transaction exists."""
    return hashlib.sha256(CHALLENGE_DOMAIN + tx_id.encode() + b"\x00" + node_id.encode()).digest()


def window_s(policy: dict[str, Any]) -> int:
    """How long a challenge may stay unanswered: the policy's, else the default, and never
    longer than the policy's max_age_s (an older answer could not be leased on anyway)."""
    return int(
        policy.get("challenge_window_s", min(DEFAULT_CHALLENGE_WINDOW_S, policy["max_age_s"]))
    )


def new_challenge(
    node_id: str, tx_id: str, issued_ns: int, policy: dict[str, Any]
) -> dict[str, Any]:
    nonce = derive_nonce(tx_id, node_id)
    return {
        "node_id": node_id,
        "nonce": nonce.hex(),
        "challenge_tx": tx_id,
        "issued_ns": issued_ns,
        "expires_ns": issued_ns + window_s(policy) * NS_PER_S,
    }


async def outstanding(stub: Any, node_id: str, nonce: bytes, now_ns: int) -> dict[str, Any]:
    """The challenge this nonce answers, or a ContractError naming why there is none."""
    challenge = await get_json(stub, CHALLENGE + nonce.hex())
    if challenge is None:
        raise ContractError(
            f"[attest.no_challenge] nonce {nonce.hex()} was not issued by the ledger: "
            "ask for a challenge with IssueChallenge and quote over its nonce"
        )
    if challenge["node_id"] != node_id:
        raise ContractError(
            f"[attest.challenge_other_node] nonce {nonce.hex()} challenges node "
            f"{challenge['node_id']}, not {node_id}"
        )
    if now_ns > challenge["expires_ns"]:
        raise ContractError(
            f"[attest.challenge_expired] challenge {challenge['challenge_tx']} was issued "
            f"{(now_ns - challenge['issued_ns']) // NS_PER_S} s ago; its window is "
            f"{(challenge['expires_ns'] - challenge['issued_ns']) // NS_PER_S} s"
        )
    return challenge
