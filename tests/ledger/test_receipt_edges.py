"""A receipt's every check names exactly what is wrong (ledger.audit.receipt): each edit of
the configuration, a block header, a transaction's place or id gives its one defect with
where it is, and nothing else; the parts of a Settle's re-derivation that a real ledger never
exercises (a transaction writing two lines, a quote's record missing) are checked on the
writes alone."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ledger.audit.receipt import (
    attested_by,
    check_settlement,
    export_receipt,
    export_roots,
    verify_receipt,
)
from ledger.contract.state import ATTESTATION, LEASE, settlements_prefix
from tests.ledger.helpers import org_roots
from tests.ledger.test_audit import chain  # noqa: F401  (a fixture: a closed ledger with lease L1)


@pytest.fixture
def receipt(chain: Path) -> tuple[dict, dict]:  # noqa: F811
    """L1's receipt, and the trusted roots: (receipt, roots)."""
    return export_receipt(chain, "L1"), org_roots(chain)


def where(entry: dict, tx_id: str | None = None) -> str:
    return f"block {entry['block']} tx {entry['txnum']} ({tx_id or entry['tx_id']})"


def test_an_exported_receipt_says_its_format_and_an_unknown_lease_has_none(chain):  # noqa: F811
    assert export_receipt(chain, "L1")["version"] == 1
    with pytest.raises(KeyError, match="lease L9 is not on this ledger"):
        export_receipt(chain, "L9")


def test_each_edit_of_the_chain_is_named_where_it_is(receipt):
    honest, roots = receipt
    assert verify_receipt(honest, roots) == []
    edited = copy.deepcopy(honest)
    edited["config"]["note"] = "added"  # the same CAs, another configuration
    assert verify_receipt(edited, roots) == ["config differs from the genesis transaction"]

    edited = copy.deepcopy(honest)
    edited["headers"][2]["number"] = 7  # its hash is over its place, not this field
    assert verify_receipt(edited, roots) == ["block 2: breaks the hash chain"]

    edited = copy.deepcopy(honest)
    edited["headers"][2]["previous_hash"] = "00" * 32
    assert verify_receipt(edited, roots) == [
        "block 2: breaks the hash chain",
        "block 2: hash does not match its header",
    ]

    edited = copy.deepcopy(honest)
    edited["headers"][0]["data_hash"] = "00" * 32
    assert verify_receipt(edited, roots) == [
        "block 0: hash does not match its header",
        "block 0: data_hash does not match the genesis transaction",
    ]


def test_each_edit_of_a_transactions_place_is_named_where_it_is(receipt):
    honest, roots = receipt
    last = len(honest["transactions"]) - 1
    edited = copy.deepcopy(honest)
    entry = edited["transactions"][last]
    entry["tx_id"] = "ab" * 32
    assert verify_receipt(edited, roots) == [f"{where(entry)}: tx_id differs from the envelope's"]

    edited = copy.deepcopy(honest)
    entry = edited["transactions"][last]
    entry["block_tx_hashes"] = [*entry["block_tx_hashes"], "00" * 32]  # a transaction more
    assert verify_receipt(edited, roots) == [f"{where(entry)}: block data_hash does not match"]


# -- a Settle's writes, as the auditor reads them --


def lease_and_line(lines: int = 1, lease: bool = True) -> dict[str, bytes]:
    writes = {f"{settlements_prefix()}L1\x00{i:06d}\x00": b'{"start_ms": 0}' for i in range(lines)}
    if lease:
        writes[LEASE + "L1"] = json.dumps({"lease_id": "L1"}).encode()
    return writes


def test_a_settlement_writes_exactly_one_lease_and_one_line():
    message = ["tx: a settlement must write one lease and one line"]
    assert check_settlement("tx", lease_and_line(lines=2)) == message
    assert check_settlement("tx", lease_and_line(lines=0)) == message
    assert check_settlement("tx", lease_and_line(lease=False)) == message


def test_a_quote_without_its_attestation_record_attests_nothing():
    assert attested_by("t1", {}) == set()
    mark = json.dumps({"attestation_id": "t1"}).encode()
    assert attested_by("t1", {"\x00attested\x00GPU-a:ab": mark}) == set()
    valid = json.dumps({"valid": True}).encode()
    assert attested_by("t1", {ATTESTATION + "t1": valid}) == set()


def test_roots_are_exported_into_any_folder_again_and_again(chain, tmp_path):  # noqa: F811
    out = tmp_path / "a" / "b"
    for _ in range(2):  # a folder made on the way, then the same one written again
        written = export_roots(chain, out)
        assert sorted(p.name for p in written) == ["Org1MSP.pem", "Org2MSP.pem"]
        assert all(p.read_text().startswith("-----BEGIN CERTIFICATE-----") for p in written)


def test_a_malformed_receipt_says_what_was_missing(receipt):
    _, roots = receipt
    assert verify_receipt({"config": {}}, roots) == ["receipt is malformed: KeyError: 'ca_certs'"]
