"""Transactions on the wire and their validation, shared by the committer and the auditor.

An envelope is canonical JSON holding the signed proposal (creator, function, arguments,
timestamp), the proposal response the endorsers signed (read-write set, events, payload) and
one endorsement per organisation. Validation is a pure function of the envelope, the channel
configuration and the world-state versions, so `ledger verify` re-derives every validation
code the committer recorded.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from ledger.canonical import dumps, loads
from ledger.engine.msp import ChannelMsp, MspError

Version = tuple[int, int]  # (block number, transaction number): Fabric's height

VALID = "VALID"
MVCC_READ_CONFLICT = "MVCC_READ_CONFLICT"
PHANTOM_READ_CONFLICT = "PHANTOM_READ_CONFLICT"
ENDORSEMENT_POLICY_FAILURE = "ENDORSEMENT_POLICY_FAILURE"
BAD_CREATOR_SIGNATURE = "BAD_CREATOR_SIGNATURE"
BAD_PROPOSAL_TXID = "BAD_PROPOSAL_TXID"
DUPLICATE_TXID = "DUPLICATE_TXID"
BAD_PAYLOAD = "BAD_PAYLOAD"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_tx_id(nonce: bytes, creator_cert: bytes) -> str:
    """Fabric's rule: the transaction id is SHA-256(nonce || creator)."""
    return sha256_hex(nonce + creator_cert)


@dataclass
class RwSet:
    reads: dict[str, Version | None] = field(default_factory=dict)
    ranges: list[tuple[str, str, list[tuple[str, Version]]]] = field(default_factory=list)
    writes: dict[str, bytes | None] = field(default_factory=dict)  # None: delete

    def to_json(self) -> dict[str, Any]:
        return {
            "reads": [[k, list(v) if v else None] for k, v in self.reads.items()],
            "ranges": [[s, e, [[k, list(v)] for k, v in rows]] for s, e, rows in self.ranges],
            "writes": [[k, None if v is None else b64(v)] for k, v in self.writes.items()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RwSet:
        return cls(
            reads={k: (tuple(v) if v else None) for k, v in data["reads"]},  # type: ignore[misc]
            ranges=[(s, e, [(k, tuple(v)) for k, v in rows]) for s, e, rows in data["ranges"]],
            writes={k: (None if v is None else unb64(v)) for k, v in data["writes"]},
        )


@dataclass
class Transaction:
    """A decoded envelope; raw fields are kept as the bytes that were signed."""

    tx_id: str
    proposal_bytes: bytes
    proposal: dict[str, Any]
    signature: bytes
    response_bytes: bytes
    response: dict[str, Any]
    endorsements: list[dict[str, Any]]
    rwset: RwSet

    @property
    def creator(self) -> dict[str, Any]:
        return self.proposal["creator"]

    @property
    def timestamp(self) -> tuple[int, int]:
        ts = self.proposal["timestamp"]
        return int(ts["seconds"]), int(ts["nanos"])


def encode_envelope(
    proposal_bytes: bytes,
    signature: bytes,
    response_bytes: bytes,
    endorsements: list[dict[str, Any]],
) -> bytes:
    return dumps(
        {
            "proposal": proposal_bytes.decode(),
            "signature": b64(signature),
            "response": response_bytes.decode(),
            "endorsements": endorsements,
        }
    )


def decode_envelope(envelope: bytes) -> Transaction:
    """Parse an envelope; raises ValueError (never KeyError/TypeError) when malformed."""
    try:
        outer = loads(envelope)
        proposal_bytes = outer["proposal"].encode()
        response_bytes = outer["response"].encode()
        proposal = loads(proposal_bytes)
        response = loads(response_bytes)
        return Transaction(
            tx_id=str(proposal["tx_id"]),
            proposal_bytes=proposal_bytes,
            proposal=proposal,
            signature=unb64(outer["signature"]),
            response_bytes=response_bytes,
            response=response,
            endorsements=list(outer["endorsements"]),
            rwset=RwSet.from_json(response["rwset"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed envelope: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True)
class EndorsementPolicy:
    """At least `threshold` distinct organisations of `orgs` must endorse (AND when all)."""

    orgs: tuple[str, ...]
    threshold: int

    @classmethod
    def all_of(cls, orgs: list[str] | tuple[str, ...]) -> EndorsementPolicy:
        return cls(tuple(sorted(orgs)), len(orgs))

    def to_json(self) -> dict[str, Any]:
        return {"orgs": list(self.orgs), "threshold": self.threshold}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EndorsementPolicy:
        return cls(tuple(data["orgs"]), int(data["threshold"]))


class StateVersions(Protocol):
    def version(self, key: str) -> Version | None: ...

    def range_versions(self, start: str, end: str) -> list[tuple[str, Version]]: ...


def check_signatures(tx: Transaction, msp: ChannelMsp, policy: EndorsementPolicy) -> str | None:
    """The state-independent checks: creator signature, tx id, endorsements vs policy.
    Returns a validation code on failure, None when they pass."""
    creator = tx.creator
    try:
        cert = str(creator["cert"]).encode()
        msp.verify(str(creator["mspid"]), cert, tx.signature, tx.proposal_bytes)
        nonce = unb64(tx.proposal["nonce"])
    except (MspError, KeyError, ValueError, TypeError):
        return BAD_CREATOR_SIGNATURE
    if make_tx_id(nonce, cert) != tx.tx_id:
        return BAD_PROPOSAL_TXID
    if tx.response.get("proposal_hash") != sha256_hex(tx.proposal_bytes):
        return ENDORSEMENT_POLICY_FAILURE
    endorsed: set[str] = set()
    for endorsement in tx.endorsements:
        try:
            mspid = str(endorsement["mspid"])
            msp.verify(
                mspid,
                str(endorsement["cert"]).encode(),
                unb64(endorsement["signature"]),
                tx.response_bytes,
            )
        except (MspError, KeyError, ValueError, TypeError):
            return ENDORSEMENT_POLICY_FAILURE
        endorsed.add(mspid)
    if len(endorsed & set(policy.orgs)) < policy.threshold:
        return ENDORSEMENT_POLICY_FAILURE
    return None


def check_mvcc(rwset: RwSet, state: StateVersions) -> str | None:
    """Fabric's MVCC check: every key read must still be at the version read, and every
    range read must still return the same keys at the same versions (no phantoms)."""
    for key, version in rwset.reads.items():
        if state.version(key) != version:
            return MVCC_READ_CONFLICT
    for start, end, rows in rwset.ranges:
        if state.range_versions(start, end) != rows:
            return PHANTOM_READ_CONFLICT
    return None


def block_data_hash(envelopes: list[bytes]) -> str:
    return data_hash_of_digests([hashlib.sha256(envelope).digest() for envelope in envelopes])


def data_hash_of_digests(digests: list[bytes]) -> str:
    """The block data hash from each envelope's SHA-256 (so receipts need no siblings' data)."""
    return hashlib.sha256(b"".join(digests)).hexdigest()


def block_header_hash(number: int, previous_hash: str, data_hash: str) -> str:
    return sha256_hex(
        dumps({"number": number, "previous_hash": previous_hash, "data_hash": data_hash})
    )
