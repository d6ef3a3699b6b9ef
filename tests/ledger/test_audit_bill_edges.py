"""audit-bill's own edges, on the files and transactions it is given (ledger.audit.bill):
inputs it cannot use are refused saying which and why, and the marks of every valid quote in
a receipt count (each quote's, however many there are; none of an invalid one; a malformed
transaction's never, and never the end of the count)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.audit.bill import UnusableInput, attested_marks, audit_bill, load_bill, trust_anchors
from ledger.audit.receipt import ReceiptTx
from ledger.contract.attested_telemetry import mark_key
from ledger.contract.state import ATTESTATION


def quote(tx_id: str, gpu: str, valid: bool = True) -> ReceiptTx:
    """A RecordAttestation as a receipt shows it: its record and the one mark it wrote."""
    writes = {
        ATTESTATION + tx_id: json.dumps({"valid": True}).encode(),
        mark_key(gpu, "ab" * 32): json.dumps({"attestation_id": tx_id}).encode(),
    }
    return ReceiptTx("RecordAttestation", valid, writes)


def test_every_valid_quotes_marks_count_and_no_others():
    malformed = ReceiptTx("RecordAttestation", True, {ATTESTATION + "t0": b"not json"})
    txs = {
        "t0": malformed,  # first, so a malformed one must not end the count
        "t1": quote("t1", "GPU-a"),
        "t2": quote("t2", "GPU-b"),
        "t3": quote("t3", "GPU-c", valid=False),  # a transaction the block did not commit
        "t4": ReceiptTx("Settle", True, quote("t4", "GPU-d").writes),  # not a quote
    }
    assert attested_marks(txs) == {mark_key("GPU-a", "ab" * 32), mark_key("GPU-b", "ab" * 32)}


def test_inputs_that_cannot_be_used_are_refused_naming_them(tmp_path: Path):
    bill = tmp_path / "bill.json"
    bill.write_text(json.dumps({"lines": {"lease": "L1"}}))
    with pytest.raises(UnusableInput) as refused:
        load_bill(bill)
    assert str(refused.value) == f"bill {bill}: lines is not a list"
    bill.write_text("{")
    with pytest.raises(UnusableInput, match=rf"^bill {bill}: Expecting"):
        load_bill(bill)
    with pytest.raises(UnusableInput, match=rf"^--trust {tmp_path / 'none'}: "):
        trust_anchors(tmp_path / "none")
    bill.write_text(json.dumps({"lines": []}))
    with pytest.raises(UnusableInput) as refused:
        audit_bill(bill, tmp_path / "receipts", tmp_path)
    assert str(refused.value) == f"--receipts {tmp_path / 'receipts'} is not a directory"
