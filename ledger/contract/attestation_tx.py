"""The contract's attestation functions (IssueChallenge, RecordAttestation), mixed into
WattleaseContract: the ledger issues each challenge, and every endorser re-verifies the
answer against the AK, policy and clock on the ledger."""

from __future__ import annotations

import hashlib

from fabric_chaincode_python.fabric_contract_api import TransactionContext

from attest import readings
from ledger.contract import args as args
from ledger.contract import attested_telemetry, challenges
from ledger.contract import quote as attestation
from ledger.contract import rules as rules
from ledger.contract.state import (
    ATTESTATION,
    CHALLENGE,
    CLOCK,
    NONCE,
    ContractError,
    dumps,
    get_json,
    put_json,
    tx_time_ns,
)
from ledger.contract.state import json_out as _out

NONCE_MIN_BYTES, NONCE_MAX_BYTES = 8, 64


def evidence_sha256(quote: bytes, signature: bytes) -> str:
    """What identifies one answer to a challenge."""
    return hashlib.sha256(quote + signature).hexdigest()


def is_retry(earlier: dict | None, node_id: str, evidence: str) -> bool:
    """Whether an answer to an already-answered nonce is the recorded answer sent again (a
    client's retry, answered with the earlier record and writing nothing) rather than a
    replay."""
    return bool(
        earlier and earlier.get("evidence_sha256") == evidence and earlier["node_id"] == node_id
    )


class AttestationFunctions:
    async def IssueChallenge(self, ctx: TransactionContext, request: str) -> str:
        """{node_id} -> {node_id, nonce (hex), challenge_tx, issued_ns, expires_ns}: a nonce
        derived from this transaction, for the node's next quote."""
        node_id = args.identifier(args.load_object(request), "node_id")
        stub = ctx.get_stub()
        node = await rules.load_node(stub, node_id)
        rules.require_org(ctx, node["org"], f"node {node_id}")
        if node["revoked"]:
            raise ContractError(f"[node.revoked] the AK of node {node_id} is revoked")
        challenge = challenges.new_challenge(
            node_id, stub.get_txid(), tx_time_ns(stub), node["pcr_policy"]
        )
        await put_json(stub, CHALLENGE + challenge["nonce"], challenge)
        stub.set_event("ChallengeIssued", dumps({"node_id": node_id, "nonce": challenge["nonce"]}))
        return _out(challenge)

    async def RecordAttestation(self, ctx: TransactionContext, request: str) -> str:
        """{node_id, quote (b64 TPMS_ATTEST), signature (b64 TPMT_SIGNATURE),
        pcr_values: {sha256: {index: hex}}, nonce (hex, from IssueChallenge), readings
        (optional): {gpu: CSV rows since the node's previous quote}}. The verdict is recomputed
        here against the AK on the ledger, over the nonce bound to the digests of those
        readings (contract.attested_telemetry derives them); a failing
        verdict is recorded too (as evidence). The attestation's age counts from the
        challenge's issue."""
        req = args.load_object(request)
        node_id = args.identifier(req, "node_id")
        quote, signature = args.b64bytes(req, "quote"), args.b64bytes(req, "signature")
        pcrs = args.pcr_values(req)
        nonce = args.hexbytes(req, "nonce", NONCE_MIN_BYTES, NONCE_MAX_BYTES)
        batches = attested_telemetry.parse_readings(req)
        telemetry = attested_telemetry.digests(batches)
        stub = ctx.get_stub()
        node = await rules.load_node(stub, node_id)
        rules.require_org(ctx, node["org"], f"node {node_id}")
        attested_telemetry.check_node_gpus(node, telemetry)
        if node["revoked"]:
            raise ContractError(f"[node.revoked] the AK of node {node_id} is revoked")
        now = tx_time_ns(stub)
        evidence = evidence_sha256(quote, signature)
        seen = await get_json(stub, NONCE + nonce.hex())
        if seen is not None:
            earlier = await get_json(stub, ATTESTATION + seen)
            if is_retry(earlier, node_id, evidence):
                return _out(earlier)
            raise ContractError(
                f"[attest.replayed] nonce {nonce.hex()} was already answered by attestation {seen}"
            )
        challenge = await challenges.outstanding(stub, node_id, nonce, now)
        previous = await get_json(stub, CLOCK + node_id)
        verdict = attestation.verify(
            args.b64bytes(node, "ak_public"),
            quote,
            signature,
            pcrs,
            readings.qualifying_data(nonce, telemetry),
            node["pcr_policy"],
            previous,
        )
        att_id = stub.get_txid()
        record = {
            "attestation_id": att_id,
            "node_id": node_id,
            "ak_epoch": node["ak_epoch"],
            "nonce": nonce.hex(),
            "challenge_tx": challenge["challenge_tx"],
            "evidence_sha256": evidence,
            "timestamp_ns": challenge["issued_ns"],  # the quote cannot predate its challenge
            "answered_ns": now,
            "valid": verdict["valid"],
            "verdict": verdict,
        }
        if telemetry:
            record["telemetry"] = telemetry
        await put_json(stub, ATTESTATION + att_id, record)
        await put_json(stub, NONCE + nonce.hex(), att_id)
        await stub.delete_state(CHALLENGE + nonce.hex())  # answered: at most once
        if verdict["valid"] and verdict.get("clock"):
            await put_json(stub, CLOCK + node_id, verdict["clock"])
        if verdict["valid"]:
            await attested_telemetry.record(stub, node_id, att_id, batches)
        stub.set_event(
            "AttestationRecorded",
            dumps({"attestation_id": att_id, "node_id": node_id, "valid": verdict["valid"]}),
        )
        return _out(record)
