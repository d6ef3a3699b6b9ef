"""A receipt proves its own transactions' validity (docs/threat-model.md, rows R1-R3).

A peer operator hands out receipts. The validation code beside a transaction (an embedded
receipt's `code`, a Fabric block's TRANSACTIONS_FILTER) is in no hash and under no
signature, so relabelling a transaction the block marked MVCC_READ_CONFLICT as VALID keeps
every hash and signature intact. The auditor must find it from the read versions the
endorsers signed (ledger.audit.validity)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from fabric_protos.peer import transaction_pb2

from ledger.audit.bill import audit_bill
from ledger.audit.fabric_receipt import verify_fabric_receipt
from ledger.audit.receipt import verify_receipt
from ledger.canonical import dumps
from ledger.contract.state import LEASE as LEASE_KEY
from tests.adversary.conftest import TENANT_A, Billed, relabelled, write_audit_inputs
from tests.ledger.fabric_chain import Channel, block_of, put_block, receipt
from tests.ledger.fabric_stories import (
    GPU,
    HOUR_MS,
    LEASE,
    MEASURED,
    NODE,
    START_MS,
    TERMS,
    record_attestation,
    settlement_key,
)
from tests.ledger.helpers import settle_request as line_request

ROOT = Path(__file__).resolve().parents[2]
MVCC = "[receipt.mvcc_read_conflict]"
MVCC_CODE = transaction_pb2.TxValidationCode.Value("MVCC_READ_CONFLICT")


def _fns(receipt_doc: dict[str, Any]) -> list[str]:
    envelopes = [json.loads(t["envelope"]) for t in receipt_doc["transactions"]]
    return [json.loads(e["proposal"])["fn"] for e in envelopes]


def test_the_honest_receipts_verify(billed: Billed):
    for lease in ("L1", "L2"):
        assert verify_receipt(billed.receipt(lease), billed.roots) == []


def test_a_relabelled_mvcc_conflict_fails_verify_receipt_and_audit_bill(billed, tmp_path):
    forged = relabelled(billed)
    assert _fns(forged).count("Settle") == 3  # line 0, line 1, and line 1 again
    bad = billed.conflicting
    defects = verify_receipt(forged, billed.roots)
    assert len(defects) == 1 and defects[0].startswith(
        f"block {bad['block']} tx {bad['txnum']} ({bad['tx_id']}): {MVCC}"
    ), defects
    # the command a tenant runs
    (tmp_path / "L1.json").write_text(json.dumps(forged))
    bill, receipts, roots = write_audit_inputs(
        tmp_path / "audit", _double_bill(billed), {"L1": forged}, billed.roots
    )
    check = _cli("verify-receipt", str(tmp_path / "L1.json"), "--roots", str(roots))
    assert check.returncode == 1 and MVCC in check.stdout, check.stdout + check.stderr
    # 30 minutes billed twice: each line of the lease fails on its receipt
    verdicts = audit_bill(bill, receipts, roots, tenant=TENANT_A)
    assert [v.ok for v in verdicts if v.seq >= 0] == [False, False, False]
    assert all(any(MVCC in r for r in v.reasons) for v in verdicts if v.seq >= 0)
    command = ["audit-bill", str(bill), "--receipts", str(receipts), "--trust", str(roots)]
    audit = _cli(*command, "--tenant", TENANT_A)
    assert audit.returncode == 1 and MVCC in audit.stdout, audit.stdout + audit.stderr


def test_a_receipt_that_leaves_out_a_write_of_the_lease_fails(billed: Billed):
    doc = billed.receipt("L1")
    first_settle = next(
        t for t, fn in zip(doc["transactions"], _fns(doc), strict=True) if fn == "Settle"
    )
    doc["transactions"].remove(first_settle)
    defects = verify_receipt(doc, billed.roots)
    assert any("[receipt.missing_write]" in d for d in defects), defects


def test_a_transaction_listed_twice_fails(billed: Billed):
    doc = billed.receipt("L1")
    doc["transactions"].append(copy.deepcopy(doc["transactions"][-1]))
    defects = verify_receipt(doc, billed.roots)
    assert any("[receipt.duplicate_txid]" in d for d in defects), defects


def test_a_relabelled_fabric_filter_fails():
    """On Fabric the codes are the block's TRANSACTIONS_FILTER metadata, which no orderer
    signs: the relabelled receipt keeps a valid orderer signature and data hash."""
    doc, roots, blocks = _fabric_double_settle()
    assert verify_fabric_receipt(doc, roots) != []  # the honest filter: not VALID
    block = block_of(doc, blocks["settles"])
    assert bytes(block.metadata.metadata[2]) == bytes([0, MVCC_CODE])
    block.metadata.metadata[2] = bytes([0, 0])  # relabelled VALID
    forged = put_block(doc, blocks["settles"], block)
    defects = verify_fabric_receipt(forged, roots)
    assert len(defects) == 1 and MVCC in defects[0], defects


def _double_bill(billed: Billed) -> dict[str, Any]:
    bill = billed.bill(TENANT_A, ["L1"])
    extra = billed.lines["L1-conflicting"]
    bill["lines"] += extra
    bill["count"] += 1
    bill["total_micro"] += extra[0]["total_micro"]
    return bill


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ledger", *args], cwd=ROOT, capture_output=True, text=True
    )


def _fabric_double_settle() -> tuple[dict[str, Any], bytes, dict[str, int]]:
    """A Fabric channel's receipt of a lease whose line 0 was settled twice on one state:
    both Settles read the lease record at CreateLease's version; the block marks the second
    MVCC_READ_CONFLICT. The receipt lists both (the attacker's receipt, before relabelling)."""
    chain = Channel()
    register = chain.tx("RegisterNode", {"node_id": NODE}, {"node_id": NODE, "gpus": [GPU]})

    attest = record_attestation(chain)
    lease = {
        "lease_id": LEASE,
        "gpus": [GPU],
        "attestation_ids": [attest[0]],
        "migrations": [],
        "status": "ACTIVE",
        "terms": TERMS,
    }
    b0 = chain.block([register[1]])
    b1 = chain.block([attest[1]])
    created_at = (b1 + 1, 0)
    created = chain.tx(
        "CreateLease",
        {"lease_id": LEASE},
        lambda tx: {**lease, "created_tx": tx},
        writes=lambda tx: {LEASE_KEY + LEASE: dumps({**lease, "created_tx": tx})},
        reads={LEASE_KEY + LEASE: None},
    )
    b2 = chain.block([created[1]])
    assert b2 == created_at[0]
    record = {**lease, "created_tx": created[0]}
    settles = []
    for measured in (MEASURED, MEASURED - 1):
        line = line_request(LEASE, 0, TERMS, START_MS, START_MS + HOUR_MS, measured, final=True)
        writes = {settlement_key(0): dumps(line), LEASE_KEY + LEASE: dumps(record)}
        reads = {LEASE_KEY + LEASE: created_at, settlement_key(0): None}
        settles.append(chain.tx("Settle", line, line, writes=writes, reads=reads))
    b3 = chain.block([s[1] for s in settles], codes=bytes([0, MVCC_CODE]))
    placed = [
        (register[0], b0, 0),
        (attest[0], b1, 0),
        (created[0], b2, 0),
        (settles[0][0], b3, 0),
        (settles[1][0], b3, 1),
    ]
    return receipt(chain, LEASE, placed), chain.roots_pem(), {"settles": b3}
