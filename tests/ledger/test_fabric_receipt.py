"""`verify_fabric_receipt`: a lease's receipt from a Fabric channel re-checked offline against
the trust roots the auditor names. Blocks are written at run time in Fabric's wire format
(tests/ledger/fabric_chain.py); tests/webapp/leasing/test_fabric_receipts.py runs the same
verifier on a real network's blocks."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from fabric_protos.common import common_pb2
from fabric_protos.peer import proposal_pb2, transaction_pb2

from ledger.__main__ import main
from ledger.audit.fabric_receipt import verify_fabric_receipt
from tests.ledger.fabric_chain import (
    Channel,
    block_of,
    drop_endorsement,
    flip_byte,
    receipt,
)
from tests.ledger.fabric_stories import (
    GPU,
    LEASE,
    NODE,
    Story,
    lease_story,
    settle_request,
)


@pytest.fixture(scope="module")
def story() -> Story:
    return lease_story()


def check(story: Story, doc: dict[str, Any] | None = None) -> list[str]:
    return verify_fabric_receipt(doc if doc is not None else story.receipt, story.roots)


def test_accepts_the_receipt_of_a_lease_its_attestation_and_node(story):
    assert check(story) == []


def test_names_a_tampered_byte_in_a_block(story):
    settle = story.receipt["transactions"][2]["tx_id"]
    defects = check(story, flip_byte(story.receipt, settle, b'"total_micro": '))
    assert any("block 3: data hash does not match" in d for d in defects), defects
    assert any("creator signature" in d for d in defects), defects


def test_names_a_removed_endorsement(story):
    created = story.receipt["transactions"][0]["tx_id"]
    defects = check(story, drop_endorsement(story.receipt, created))
    assert any(
        "endorsement policy AND(Org1MSP.peer, Org2MSP.peer) not met: no valid endorsement by "
        "Org2MSP.peer" in d
        for d in defects
    ), defects


def test_rejects_a_receipt_checked_against_another_channels_roots(story):
    defects = verify_fabric_receipt(story.receipt, Channel().roots_pem())
    assert any("block 2: no valid orderer signature" in d for d in defects), defects
    assert any("not issued by Org1MSP's trust root" in d for d in defects), defects


def test_rejects_a_receipt_of_a_channel_the_roots_do_not_name(story):
    doc = {**story.receipt, "channel": "elsewhere"}
    defects = check(story, doc)
    assert "channel 'elsewhere' is not the channel the trust roots name" in defects
    assert any("channel 'wattlease', not 'elsewhere'" in d for d in defects)


def test_names_a_settlement_amount_the_money_formula_does_not_give():
    # both organisations' peers endorsed a wrong amount: the receipt still shows it is wrong
    honest = settle_request()
    story = lease_story(settle=settle_request(total_micro=1))
    expected = honest["total_micro"]
    assert any(f"settlement total_micro 1 != recomputed {expected}" in d for d in check(story))


def test_names_an_endorsement_by_an_identity_that_is_not_a_peer():
    chain = Channel()
    client = chain.clients["Org2MSP"]
    _, envelope = chain.tx(
        "EndLease", {"lease_id": LEASE}, endorsers=(chain.peers["Org1MSP"], client)
    )
    chain.block([envelope])
    doc = receipt(chain, LEASE, [(_tx_id(envelope), 0, 0)])
    defects = verify_fabric_receipt(doc, chain.roots_pem())
    assert any("endorser 1 of Org2MSP is not a peer" in d for d in defects), defects
    assert any("no valid endorsement by Org2MSP.peer" in d for d in defects), defects


def _tx_id(envelope: bytes) -> str:
    payload = common_pb2.Payload.FromString(common_pb2.Envelope.FromString(envelope).payload)
    return common_pb2.ChannelHeader.FromString(payload.header.channel_header).tx_id


def test_names_arguments_swapped_under_the_endorsements(story):
    """A creator who re-signs the envelope with other arguments keeps the peers' endorsements
    valid, but they endorsed another proposal."""
    block = block_of(story.receipt, 2)
    env = common_pb2.Envelope.FromString(block.data.data[0])
    payload = common_pb2.Payload.FromString(env.payload)
    tx = transaction_pb2.Transaction.FromString(payload.data)
    cap = transaction_pb2.ChaincodeActionPayload.FromString(tx.actions[0].payload)
    ccpp = proposal_pb2.ChaincodeProposalPayload.FromString(cap.chaincode_proposal_payload)
    ccpp.input = ccpp.input.replace(LEASE.encode(), b"lease-X")
    cap.chaincode_proposal_payload = ccpp.SerializeToString()
    tx.actions[0].payload = cap.SerializeToString()
    payload.data = tx.SerializeToString()
    env.payload = payload.SerializeToString()
    env.signature = story.channel.clients["Org1MSP"][1].sign(env.payload)
    number = story.channel.block([env.SerializeToString()])  # an honest orderer orders it
    doc = receipt(story.channel, LEASE, [(story.receipt["transactions"][0]["tx_id"], number, 0)])
    defects = check(story, doc)
    assert any("endorsed proposal hash does not match the proposal" in d for d in defects)


def test_names_a_transaction_the_block_marks_invalid():
    chain = Channel()
    _, envelope = chain.tx("EndLease", {"lease_id": LEASE})
    chain.block([envelope], codes=bytes([11]))  # MVCC_READ_CONFLICT
    doc = receipt(chain, LEASE, [(_tx_id(envelope), 0, 0)])
    defects = verify_fabric_receipt(doc, chain.roots_pem())
    assert any("does not mark this transaction VALID" in d for d in defects), defects


def test_names_what_the_lease_relied_on_and_the_receipt_left_out(story):
    doc = copy.deepcopy(story.receipt)
    doc["transactions"] = [t for t in doc["transactions"] if t["tx_id"] != story.attestation]
    doc["transactions"] = doc["transactions"][:-1]  # the node's registration too
    defects = check(story, doc)
    assert f"attestation {story.attestation} the lease relied on is not in the receipt" in defects
    assert f"the registration of node {NODE} is not in the receipt" in defects


def test_names_a_creation_the_lease_records_name_but_the_receipt_left_out(story):
    doc = copy.deepcopy(story.receipt)
    created = doc["transactions"].pop(0)["tx_id"]
    defects = check(story, doc)
    assert f"no CreateLease of lease {LEASE}" in defects
    assert any(f"transaction {created}: the lease's records and the receipt" in d for d in defects)


def test_rejects_a_receipt_of_another_chaincode_than_the_roots_name(story):
    doc = {**story.receipt, "chaincode": "lookalike"}
    assert "chaincode 'lookalike' is not the chaincode the trust roots name" in check(story, doc)


def test_names_a_transaction_of_another_lease(story):
    doc = copy.deepcopy(story.receipt)
    doc["transactions"].append(
        {"tx_id": _tx_id(block_of(doc, 1).data.data[0]), "block": 1, "index": 0}
    )
    assert "EndLease is about lease 'lease-2', not 'lease-1'" in " ".join(check(story, doc))


def test_a_malformed_receipt_is_a_defect_not_a_crash(story):
    assert check(story, {"format": "fabric/1"}) == ["receipt is malformed: channel: missing"]
    for text in ("not base64!", "\x80"):
        bad = {**story.receipt, "blocks": [{"number": 2, "block": text}]}
        assert check(story, bad) == ["receipt is malformed: blocks: a block is not base64"]
    assert verify_fabric_receipt(story.receipt, b"org Org1MSP\nnot pem\n")[0].startswith(
        "trust roots"
    )


def test_cli_checks_a_fabric_receipt_against_the_roots_named(story, tmp_path, capsys):
    path, roots = tmp_path / "receipt.json", tmp_path / "roots.pem"
    path.write_text(json.dumps(story.receipt))
    roots.write_bytes(story.roots)
    assert main(["verify-receipt", str(path), "--trust", str(roots)]) == 0
    assert capsys.readouterr().out.strip() == "OK"
    assert main(["verify-receipt", str(path)]) == 2
    assert "--trust" in capsys.readouterr().err
    roots.write_bytes(Channel().roots_pem())
    assert main(["verify-receipt", str(path), "--trust", str(roots)]) == 1
    assert "DEFECT block 0: no valid orderer signature" in capsys.readouterr().out


def migrated_story() -> Story:
    """A lease created on node-1 and migrated to node-2: both nodes and both attestations
    belong in its receipt."""
    chain = Channel()
    gpu2 = {"uuid": "GPU-2", "node_id": "node-2", "generation": "H100"}
    placed = []
    atts = []
    for node, gpu in ((NODE, GPU), ("node-2", gpu2)):
        reg = chain.tx("RegisterNode", {"node_id": node}, {"node_id": node, "gpus": [gpu]})
        att = chain.tx(
            "RecordAttestation",
            {"node_id": node},
            lambda tx_id, node=node: {"attestation_id": tx_id, "node_id": node, "valid": True},
        )
        number = chain.block([reg[1], att[1]])
        placed += [(reg[0], number, 0), (att[0], number, 1)]
        atts.append(att[0])
    lease = {"lease_id": LEASE, "gpus": [GPU], "attestation_ids": [atts[0]], "migrations": []}
    created = chain.tx("CreateLease", {"lease_id": LEASE}, lambda tx: {**lease, "created_tx": tx})
    lease["created_tx"] = created[0]

    def moved(tx_id: str) -> dict[str, Any]:
        step = {"from": [GPU], "to": [gpu2], "tx_id": tx_id}
        return {**lease, "gpus": [gpu2], "attestation_ids": [atts[1]], "migrations": [step]}

    migrated = chain.tx("MigrateLease", {"lease_id": LEASE}, moved)
    number = chain.block([created[1], migrated[1]])
    placed += [(created[0], number, 0), (migrated[0], number, 1)]
    return Story(chain, receipt(chain, LEASE, placed), chain.roots_pem(), atts[0])


def test_a_migrated_lease_shows_both_placements_and_names_what_is_left_out():
    story = migrated_story()
    assert check(story) == []
    doc = copy.deepcopy(story.receipt)
    doc["transactions"].pop()  # the migration: what it relied on is now unexplained
    doc["transactions"] = doc["transactions"][2:]  # node-1's registration and attestation too
    defects = check(story, doc)
    assert f"the registration of node {NODE} is not in the receipt" in defects
    assert f"attestation {story.attestation} the lease relied on is not in the receipt" in defects
    assert "node node-2 is in the receipt but the lease never used it" in defects
    unrelated = "is in the receipt but the lease neither relied on it nor cites readings it"
    assert any(unrelated in d for d in defects), defects  # node-2's attestation
