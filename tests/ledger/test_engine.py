"""The embedded engine's Fabric semantics: blocks, endorsement policy, MVCC, duplicates,
events, persistence."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import pytest

from chaincode_client.embedded import EmbeddedClient
from chaincode_client.interface import EndorsementError, LedgerUnavailable
from ledger.audit.chain import verify_ledger
from ledger.engine import EmbeddedLedger
from ledger.engine.endorser import (
    Endorser,
    PeersDisagree,
    endorse_everywhere,
    make_proposal,
)
from ledger.engine.store import SqliteState
from ledger.engine.tx import RwSet, check_mvcc
from ledger.engine.validate import DictState
from tests.ledger.helpers import ZERO_POLICY_ID, js, node_ak_b64, open_ledger


def node_request(node_id: str) -> str:
    return js(
        {
            "node_id": node_id,
            "org": "Org1MSP",
            "ak_public": node_ak_b64(node_id),
            "gpus": [{"uuid": f"GPU-{node_id}", "generation": "H100"}],
            "pcr_policy_id": ZERO_POLICY_ID,
        }
    )


@pytest.fixture
def ledger(tmp_path):
    ledger = open_ledger(tmp_path / "l.sqlite", block_size=5, block_timeout_s=0.05)
    yield ledger
    ledger.close()


def endorsed(ledger, identity, fn, arg) -> bytes:
    proposal = make_proposal(identity, ledger.channel, fn, [arg], time.time_ns(), os.urandom(24))
    return ledger.endorse(*proposal)[1]


def test_blocks_are_cut_at_block_size(ledger):
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "a"))
    receipts = []
    threads = [
        threading.Thread(
            target=lambda i=i: receipts.append(client.submit("RegisterNode", node_request(f"n{i}")))
        )
        for i in range(12)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per_block: dict[int, int] = {}
    for r in receipts:
        per_block[r.block_number] = per_block.get(r.block_number, 0) + 1
    assert sum(per_block.values()) == 12 and max(per_block.values()) <= 5


def test_missing_endorsement_fails_policy_and_leaves_state(ledger):
    identity = ledger.enroll("Org1MSP", "a")
    outer = json.loads(endorsed(ledger, identity, "RegisterNode", node_request("n1")))
    outer["endorsements"] = outer["endorsements"][:1]  # only Org1 endorsed
    result = ledger.order(json.dumps(outer).encode()).result()
    assert result.code == "ENDORSEMENT_POLICY_FAILURE"
    assert "node:n1" not in ledger.store.state


def test_same_envelope_twice_is_a_duplicate(ledger):
    envelope = endorsed(ledger, ledger.enroll("Org1MSP", "a"), "RegisterNode", node_request("n1"))
    codes = [ledger.order(envelope).result().code, ledger.order(envelope).result().code]
    assert codes == ["VALID", "DUPLICATE_TXID"]


def test_stale_read_is_an_mvcc_conflict_and_client_gets_transaction_invalid(ledger):
    identity = ledger.enroll("Org1MSP", "a")
    first = endorsed(ledger, identity, "RegisterNode", node_request("n1"))
    second = endorsed(ledger, identity, "RegisterNode", node_request("n1"))  # same reads
    assert ledger.order(first).result().code == "VALID"
    assert ledger.order(second).result().code == "MVCC_READ_CONFLICT"
    client = EmbeddedClient(ledger, identity)
    assert client.evaluate("GetNode", js({"node_id": "n1"}))
    assert verify_ledger(ledger.store.path).ok


def test_phantom_read_detected():
    state = DictState()
    state.apply(1, 0, {"a:1": b"x"})
    rwset = RwSet(ranges=[("a:", "a;", [("a:1", (1, 0))])])
    assert check_mvcc(rwset, state) is None
    state.apply(2, 0, {"a:2": b"y"})
    assert check_mvcc(rwset, state) == "PHANTOM_READ_CONFLICT"


def test_events_replay_then_follow_live(ledger):
    client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "a"))
    first = client.submit("RegisterNode", node_request("n1"))
    seen = []

    def follow() -> None:
        for event in client.events(start_block=first.block_number):
            seen.append((event.name, json.loads(event.payload)["node_id"]))
            if len(seen) == 2:
                return

    reader = threading.Thread(target=follow)
    reader.start()
    client.submit("RegisterNode", node_request("n2"))
    reader.join(timeout=10)
    assert seen == [("NodeRegistered", "n1"), ("NodeRegistered", "n2")]
    client.close()


def test_reopen_keeps_chain_config_and_keys(tmp_path):
    path = tmp_path / "l.sqlite"
    ledger = open_ledger(path, block_timeout_s=0.001)
    EmbeddedClient(ledger, ledger.enroll("Org1MSP", "a")).submit("RegisterNode", node_request("n1"))
    ledger.close()
    assert oct((path.parent / "l.sqlite.msp/Org1MSP/peer/key.pem").stat().st_mode)[-3:] == "600"
    again = EmbeddedLedger.open(path, orgs=("Ignored",), block_timeout_s=0.001)
    assert again.msp.mspids == ["Org1MSP", "Org2MSP"]
    client = EmbeddedClient(again, again.enroll("Org2MSP", "b"))
    assert json.loads(client.evaluate("GetNode", js({"node_id": "n1"})))["org"] == "Org1MSP"
    again.close()


def test_endorser_processes_simulate_against_committed_state(tmp_path):
    ledger = open_ledger(
        tmp_path / "l.sqlite", block_timeout_s=0.001, peer_processes=True, validation_workers=1
    )
    try:
        client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "a"))
        first = client.submit("RegisterNode", node_request("n1"))
        assert first.valid
        assert client.submit("RegisterNode", node_request("n1")).payload == first.payload
        with pytest.raises(EndorsementError, match="creator rejected"):
            from ledger.engine.msp import new_identity

            EmbeddedClient(ledger, new_identity("Org1MSP", "x", None)).submit(
                "RegisterNode", node_request("n2")
            )
    finally:
        ledger.close()
    assert verify_ledger(tmp_path / "l.sqlite").ok


def test_block_summaries_show_functions_creators_and_codes(ledger):
    identity = ledger.enroll("Org1MSP", "a")
    first = endorsed(ledger, identity, "RegisterNode", node_request("n1"))
    second = endorsed(ledger, identity, "RegisterNode", node_request("n1"))
    futures = [ledger.order(first), ledger.order(second)]
    number = futures[1].result().block_number
    assert ledger.height == number + 1
    [summary] = ledger.block_summaries(start=number, limit=1)
    assert [(t["fn"], t["creator"], t["code"]) for t in summary["transactions"]] == [
        ("RegisterNode", "Org1MSP", "VALID"),
        ("RegisterNode", "Org1MSP", "MVCC_READ_CONFLICT"),
    ]
    assert ledger.block_summaries(0, 1)[0]["transactions"][0]["fn"] == "(config)"


def test_every_org_simulates_and_a_disagreement_is_not_endorsed(tmp_path):
    path = tmp_path / "l.sqlite"
    EmbeddedLedger.open(path).close()
    shutil.copy(path, tmp_path / "behind.sqlite")  # a peer still at the genesis height
    ledger = open_ledger(path, block_timeout_s=0.001)
    try:
        identity = ledger.enroll("Org1MSP", "a")
        EmbeddedClient(ledger, identity).submit("RegisterNode", node_request("n1"))
        history = js({"key": "node:n1"})
        proposal = make_proposal(identity, ledger.channel, "GetHistory", [history], 1, b"x" * 24)
        # both orgs' peers ran the contract: each counted its own simulation
        assert [e.timings["simulate"] > 0 for e in ledger.endorsers] == [True, True]
        _, envelope = endorse_everywhere(ledger.endorsers, *proposal)
        signers = [e["mspid"] for e in json.loads(envelope)["endorsements"]]
        assert signers == ["Org1MSP", "Org2MSP"]
        lagging = Endorser(
            SqliteState(tmp_path / "behind.sqlite"),
            ledger.msp,
            ledger.endorsers[1].peer,
            ledger.channel,
        )
        with pytest.raises(PeersDisagree, match="Org1MSP and Org2MSP simulated different"):
            endorse_everywhere([ledger.endorsers[0], lagging], *proposal)
        # a client is told to retry (nothing was ordered), not that the contract refused
        ledger.endorsers[1] = lagging
        with pytest.raises(LedgerUnavailable, match="simulated different results"):
            EmbeddedClient(ledger, identity).submit("GetHistory", history)
    finally:
        ledger.close()


def test_identities_carry_their_node_ou_role(ledger):
    """As Fabric's cryptogen with NodeOUs: clients OU=client, admins OU=admin, peers OU=peer."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    def role(cert_pem: bytes) -> list[str]:
        subject = x509.load_pem_x509_certificate(cert_pem).subject
        return [
            str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
        ]

    assert role(ledger.enroll("Org1MSP", "alice").cert_pem) == ["client"]
    assert role(ledger.enroll("Org2MSP", "Admin@Org2MSP", "admin").cert_pem) == ["admin"]
    assert {tuple(role(e.peer.cert_pem)) for e in ledger.endorsers} == {("peer",)}
    with pytest.raises(ValueError, match="role must be one of"):
        ledger.enroll("Org1MSP", "root", "superuser")


def test_each_organisation_keeps_its_keys_in_a_folder_of_its_own(ledger):
    msp_dir = ledger.store.path.with_name(ledger.store.path.name + ".msp")
    orgs = sorted(p.name for p in msp_dir.iterdir())
    assert orgs == ["Org1MSP", "Org2MSP"]
    for org in orgs:
        assert (msp_dir / org).stat().st_mode & 0o777 == 0o700
        for role in ("ca", "peer"):
            assert (msp_dir / org / role).stat().st_mode & 0o777 == 0o700
            assert (msp_dir / org / role / "key.pem").stat().st_mode & 0o777 == 0o600
