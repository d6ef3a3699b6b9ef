"""What each contract function writes, and says, at its edges (ledger.contract.chaincode):
the record of a revocation, an end and a migration names its transaction, its time and what
it changed; every state change's event carries its keys; a migration is refused from a moment
already billed and accepted from exactly that moment; a released GPU names the lease that
held it; a bill line's key is its own sequence number. On every ledger backend."""

from __future__ import annotations

import json
import re

from ledger.contract import args
from tests.ledger.conftest import ORG1, ORG2
from tests.ledger.helpers import (
    A100,
    BOOT_POLICY,
    H100,
    attest,
    batches_of,
    counter_readings,
    endorsement_refusal,
    js,
    lease_request,
    now_ms,
    settle_request,
)
from tests.ledger.test_contract import (  # noqa: F401  (fleet: a fixture)
    fleet,
    lease,
    migrate_request,
)

HOUR_MS = 3_600_000
HOUR_MJ = 1_000_000_000  # what GPU-a's counter rises by in an hour here


def test_a_revocation_records_its_transaction_and_reason_and_the_key_never_returns(
    ledger_env,
    fleet,  # noqa: F811
):
    org1, org2 = ledger_env.clients[ORG1], ledger_env.clients[ORG2]
    assert endorsement_refusal(org2.submit, "RevokeAK", js({"node_id": "n1"})) == (
        "[org.not_owner] node n1 belongs to Org1MSP; the caller is Org2MSP"
    )
    for reason in ("r" * (args.MAX_TEXT_LEN + 1), 7):
        assert endorsement_refusal(
            org1.submit, "RevokeAK", js({"node_id": "n1", "reason": reason})
        ) == (f"[args.invalid] reason: must be a string of <= {args.MAX_TEXT_LEN} chars")
    longest = "r" * args.MAX_TEXT_LEN
    receipt = org1.submit("RevokeAK", js({"node_id": "n1", "reason": longest}))
    node = json.loads(receipt.payload)
    assert (node["revoked"], node["revoked_tx"], node["revoked_reason"]) == (
        True,
        receipt.tx_id,
        longest,
    )
    assert json.loads(org1.evaluate("GetNode", js({"node_id": "n1"}))) == node
    assert (
        json.loads(org1.submit("RevokeAK", js({"node_id": "n2"})).payload)["revoked_reason"] == ""
    )
    # the revoked key names the node it was revoked from, whichever node offers it
    request = {
        "node_id": "n9",
        "org": ORG1,
        "ak_public": fleet["tpm"].ak_b64(0),
        "gpus": [{"uuid": "GPU-z", "generation": A100}],
        "pcr_policy_id": BOOT_POLICY,
    }
    assert re.fullmatch(
        r"\[enrol\.ak_revoked\] AK [0-9a-f]{16}\.\.\. of node n1 was revoked: a revoked key "
        r"never returns, the node registers a new AK",
        endorsement_refusal(org1.submit, "RegisterNode", js(request)),
    )


def test_a_migration_to_another_nodes_gpus_relies_on_that_nodes_attestation(
    ledger_env,
    fleet,  # noqa: F811
):
    """The lease names the quotes it now relies on: the new GPUs' node's, not the old one's
    (a receipt gathers the attestations a lease names: ledger.audit.receipt)."""
    client = ledger_env.clients[ORG1]
    created = lease(client, "L1", ["GPU-c"], [fleet["n1"]], generation=A100)  # n1's A100
    assert created["attestation_ids"] == [fleet["n1"]]
    moved = json.loads(
        client.submit("MigrateLease", migrate_request(["GPU-d"], fleet["n2"], H100)).payload
    )  # to n2's H100
    assert (moved["gpus"], moved["attestation_ids"]) == (
        [{"uuid": "GPU-d", "generation": H100, "node_id": "n2"}],
        [fleet["n2"]],
    )
    assert json.loads(client.evaluate("GetLease", js({"lease_id": "L1"}))) == moved


def settle_first_hour(client, tpm, start: int, seq: int = 0, **overrides) -> dict:
    """Bill hour `seq` of L1 (on GPU-a since `start`), its readings attested first."""
    begin = start + seq * HOUR_MS
    rows = counter_readings(
        ["GPU-a"], [(begin, seq * HOUR_MJ), (begin + HOUR_MS, (seq + 1) * HOUR_MJ)]
    )
    attest(client, tpm, "n1", 0, rows)
    terms = json.loads(client.evaluate("GetLease", js({"lease_id": "L1"})))["terms"]
    request = settle_request(
        "L1", seq, terms, begin, begin + HOUR_MS, HOUR_MJ, batches=batches_of(rows), **overrides
    )
    return json.loads(client.submit("Settle", js(request)).payload)


def test_lines_are_kept_by_their_own_sequence_and_a_changed_retry_names_each_difference(
    ledger_env,
    fleet,  # noqa: F811
):
    client = ledger_env.clients[ORG1]
    start = now_ms() - 3 * HOUR_MS
    lease(client, "L1", ["GPU-a"], [fleet["n1"]], start_ms=start)
    first = settle_first_hour(client, fleet["tpm"], start, 0)
    second = settle_first_hour(client, fleet["tpm"], start, 1)
    assert (first["generation"], second["generation"]) == (H100, H100)
    lines = json.loads(client.evaluate("GetSettlements", js({"lease_id": "L1"})))
    assert [line["interval_seq"] for line in lines] == [0, 1]
    terms = json.loads(client.evaluate("GetLease", js({"lease_id": "L1"})))["terms"]
    changed = settle_request(
        "L1", 1, terms, start + HOUR_MS, start + 2 * HOUR_MS, HOUR_MJ, final=True, batches=[]
    )
    assert endorsement_refusal(client.submit, "Settle", js(changed)).startswith(
        "[settle.duplicate] settlement L1#1 already recorded with different final, "
    )


def test_an_end_records_its_transaction_and_moment_and_the_gpu_names_its_lease(
    ledger_env,
    fleet,  # noqa: F811
):
    client = ledger_env.clients[ORG1]
    start = now_ms() - 2 * HOUR_MS
    lease(client, "L1", ["GPU-a"], [fleet["n1"]], start_ms=start)
    end_ms = start + HOUR_MS
    receipt = client.submit("EndLease", js({"lease_id": "L1", "end_ms": end_ms}))
    ended = json.loads(receipt.payload)
    assert (ended["status"], ended["ended_tx"], ended["ended_ms"]) == (
        "ENDED",
        receipt.tx_id,
        end_ms,
    )
    assert abs(ended["ended_ns"] // 1_000_000 - now_ms()) < 60_000  # the proposal's time
    assert json.loads(client.evaluate("GetLease", js({"lease_id": "L1"}))) == ended
    # its time stays sold: a lease from before the end is refused, naming L1
    assert endorsement_refusal(
        client.submit,
        "CreateLease",
        lease_request("L2", ["GPU-a"], [fleet["n1"]], start_ms=end_ms - 1),
    ) == (
        f"[gpu.time_held] GPU GPU-a was held by lease L1 until {end_ms}; a claim from "
        f"{end_ms - 1} would sell that time again"
    )
    assert lease(client, "L2", ["GPU-a"], [fleet["n1"]], start_ms=end_ms)["status"] == "ACTIVE"


def test_a_migration_records_what_moved_when_and_by_which_transaction(
    ledger_env,
    fleet,  # noqa: F811
):
    client = ledger_env.clients[ORG1]
    start = now_ms() - 3 * HOUR_MS
    created = lease(client, "L1", ["GPU-a"], [fleet["n1"]], start_ms=start)
    settle_first_hour(client, fleet["tpm"], start, 0)
    billed = start + HOUR_MS
    early = migrate_request(["GPU-c"], fleet["n1"], start_ms=billed - 1)
    assert endorsement_refusal(client.submit, "MigrateLease", early) == (
        f"[terms.start] the move at {billed - 1} precedes what is already billed or priced "
        f"(until {billed})"
    )
    request = migrate_request(["GPU-c"], fleet["n1"], start_ms=billed)
    receipt = client.submit("MigrateLease", request)
    moved = json.loads(receipt.payload)
    [migration] = moved["migrations"]
    assert migration == {
        "from": created["gpus"],
        "to": moved["gpus"],
        "terms": created["terms"],
        "until_ms": billed,
        "tx_id": receipt.tx_id,
        "timestamp_ns": migration["timestamp_ns"],
    }
    assert abs(migration["timestamp_ns"] // 1_000_000 - now_ms()) < 60_000
    assert [g["uuid"] for g in moved["gpus"]] == ["GPU-c"]
    assert moved["terms"]["generation"] == A100 and moved["terms"]["start_ms"] == billed
    assert moved["attestation_ids"] == [fleet["n1"]]
    assert json.loads(client.evaluate("GetLease", js({"lease_id": "L1"}))) == moved
    # the same move again is a retry: the same record, nothing written
    assert json.loads(client.submit("MigrateLease", request).payload) == moved
    # other GPUs asked with the terms already recorded are no retry: the terms' rule refuses
    other_gpus = js({**json.loads(request), "gpus": ["GPU-a"]})
    assert endorsement_refusal(client.submit, "MigrateLease", other_gpus) == (
        f"[terms.generation] GPUs ['GPU-a'] are not {A100}"
    )
    # GPU-a was let go at the move: its time before it stays L1's
    assert endorsement_refusal(
        client.submit,
        "CreateLease",
        lease_request("L2", ["GPU-a"], [fleet["n1"]], start_ms=billed - 1),
    ).startswith(f"[gpu.time_held] GPU GPU-a was held by lease L1 until {billed};")


def test_every_state_change_says_which_record_it_changed(ledger_env, fleet):  # noqa: F811
    client = ledger_env.clients[ORG1]
    start = now_ms() - 3 * HOUR_MS
    lease(client, "L1", ["GPU-a"], [fleet["n1"]], start_ms=start)
    settle_first_hour(client, fleet["tpm"], start, 0)
    client.submit("MigrateLease", migrate_request(["GPU-c"], fleet["n1"], start_ms=start + HOUR_MS))
    client.submit("EndLease", js({"lease_id": "L1"}))
    last = client.submit("RevokeAK", js({"node_id": "n2"})).block_number
    seen = []
    for event in client.events(start_block=0):
        if event.name not in (
            "PolicyProposed",
            "PolicyApproved",
            "ChallengeIssued",
            "AttestationRecorded",
        ):
            seen.append((event.name, json.loads(event.payload)))
        if event.block_number >= last:  # the revocation's block: whatever its event says
            break
    assert seen == [
        ("NodeRegistered", {"node_id": "n1", "ak_epoch": 0}),
        ("NodeRegistered", {"node_id": "n2", "ak_epoch": 0}),
        ("LeaseCreated", {"lease_id": "L1", "tenant": "tenant-a"}),
        ("Settled", {"lease_id": "L1", "interval_seq": 0}),
        ("LeaseMigrated", {"lease_id": "L1"}),
        ("LeaseEnded", {"lease_id": "L1"}),
        ("AKRevoked", {"node_id": "n2", "ak_epoch": 0}),
    ]
