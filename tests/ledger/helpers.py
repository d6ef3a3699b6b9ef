"""Building contract requests in tests: register nodes, attest them with real quotes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaincode_client.interface import LedgerClient
from ledger.engine.core import msp_dir_for

DEFAULT_MAX_AGE_S = 600


def js(value: Any) -> str:
    return json.dumps(value)


def register_node(
    client: LedgerClient,
    tpm: Any,
    node_id: str,
    ak_index: int,
    gpus: list[tuple[str, str]],
    org: str = "Org1MSP",
    max_age_s: int = DEFAULT_MAX_AGE_S,
    golden: dict | None = None,
    policy_id: str | None = None,
    enrolment: dict | None = None,
) -> dict:
    """Register with an inline policy, or with `policy_id`, one both organisations approved."""
    request: dict[str, Any] = {
        "node_id": node_id,
        "org": org,
        "ak_public": tpm.ak_b64(ak_index),
        "gpus": [{"uuid": u, "generation": g} for u, g in gpus],
    }
    request.update(enrolment or {})  # ek_binding and enrolment_quote, for an EK-bound node
    if policy_id is None:
        request["pcr_policy"] = {"pcrs": {"sha256": golden or tpm.golden}, "max_age_s": max_age_s}
    else:
        request["pcr_policy_id"] = policy_id
    return json.loads(client.submit("RegisterNode", js(request)).payload)


def challenge(client: LedgerClient, node_id: str) -> bytes:
    """A nonce the ledger issued for the node's next quote (IssueChallenge)."""
    receipt = client.submit("IssueChallenge", js({"node_id": node_id}))
    return bytes.fromhex(json.loads(receipt.payload)["nonce"])


def quote_request(tpm: Any, node_id: str, ak_index: int, nonce: bytes) -> dict:
    import base64

    evidence = tpm.agent.quote(tpm.aks[ak_index], nonce, "sha256:0,2,7")
    return {
        "node_id": node_id,
        "quote": base64.b64encode(evidence.quote).decode(),
        "signature": base64.b64encode(evidence.signature).decode(),
        "pcr_values": {
            "sha256": {str(i): v.hex() for i, v in evidence.pcr_values["sha256"].items()}
        },
        "nonce": nonce.hex(),
    }


def attest(client: LedgerClient, tpm: Any, node_id: str, ak_index: int) -> dict:
    """The honest round: ask the ledger for a challenge, quote over it, record the answer."""
    request = quote_request(tpm, node_id, ak_index, challenge(client, node_id))
    receipt = client.submit("RecordAttestation", js(request))
    return json.loads(receipt.payload)


def lease_request(
    lease_id: str, gpus: list[str], att_ids: list[str], tenant: str = "tenant-a"
) -> str:
    return js(
        {
            "lease_id": lease_id,
            "tenant": tenant,
            "gpus": gpus,
            "price_terms": {
                "currency": "EUR",
                "tariff_micro_per_kwh": 250_000,
                "attributed_w": 700,
            },
            "attestation_ids": att_ids,
        }
    )


def org_roots(ledger_path: Path) -> dict[str, bytes]:
    """Each organisation's CA certificate, read from that organisation's own key folder (as an
    auditor would get it from the organisation), not from a receipt or the genesis block."""
    msp_dir = msp_dir_for(ledger_path)
    return {org.name: (org / "ca" / "cert.pem").read_bytes() for org in sorted(msp_dir.iterdir())}


def software_ak_b64() -> str:
    """TPM2B_PUBLIC of a fresh software P-256 key: parseable, so RegisterNode accepts it, for
    engine tests that never attest (every attestation test quotes with a real swtpm)."""
    import base64

    from cryptography.hazmat.primitives.asymmetric import ec

    from tests.attest.builders import ecc_public

    restricted_sign = 0x00050072  # fixedTPM|fixedParent|sensitiveDataOrigin|userWithAuth|...
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return base64.b64encode(ecc_public(key, restricted_sign)).decode()
