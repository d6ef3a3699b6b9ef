"""The Wattlease contract, function by function, on every ledger backend."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from chaincode_client.governance import decide
from chaincode_client.interface import EndorsementError, TransactionInvalid
from ledger.contract.challenges import derive_nonce
from ledger.contract.state import MAX_CLOCK_SKEW_S
from tests.ledger.conftest import ORG1, ORG2, LedgerEnv, approve_pcr_policy
from tests.ledger.helpers import (
    A100,
    H100,
    attest,
    batches_of,
    challenge,
    counter_readings,
    js,
    lease_request,
    lease_terms,
    now_ms,
    pcr_policy,
    quote_request,
    readings_for,
    register_node,
    settle_request,
)


@pytest.fixture
def fleet(ledger_env: LedgerEnv, node_tpm, boot_policy) -> dict:
    """Two Org1 nodes: n1 (2x H100 + 1x A100) and n2 (1x H100), each freshly attested with a
    batch of readings of each GPU."""
    client = ledger_env.clients[ORG1]
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100), ("GPU-b", H100), ("GPU-c", A100)])
    register_node(client, node_tpm, "n2", 1, [("GPU-d", H100)])
    return {
        "n1": attest(client, node_tpm, "n1", 0, readings_for(["GPU-a", "GPU-b", "GPU-c"]))[
            "attestation_id"
        ],
        "n2": attest(client, node_tpm, "n2", 1, readings_for(["GPU-d"]))["attestation_id"],
        "tpm": node_tpm,  # n1's and n2's TPM, to attest the readings a line bills
    }


def lease(client, lease_id, gpus, atts, tenant="tenant-a", **terms) -> dict:
    return json.loads(
        client.submit("CreateLease", lease_request(lease_id, gpus, atts, tenant, **terms)).payload
    )


# -- nodes ---------------------------------------------------------------------------------


def test_registers_node_and_reads_it_back(ledger_client, node_tpm, boot_policy):
    register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)])
    node = json.loads(ledger_client.evaluate("GetNode", js({"node_id": "n1"})))
    assert node["org"] == ORG1 and node["ak_epoch"] == 0 and not node["revoked"]
    assert node["gpus"] == [{"uuid": "GPU-a", "generation": H100}]
    assert node["pcr_policy"]["pcrs"]["sha256"] == node_tpm.golden


def test_an_inline_pcr_policy_is_refused_with_its_reason(ledger_env, node_tpm):
    """Golden values the registering organisation declares alone are no policy; neither is
    one that only its own admin proposed: both organisations must have approved it."""
    client = ledger_env.clients[ORG1]
    request = {
        "node_id": "n1",
        "org": ORG1,
        "ak_public": node_tpm.ak_b64(0),
        "gpus": [{"uuid": "GPU-a", "generation": H100}],
        "pcr_policy": pcr_policy(node_tpm.golden),
    }
    with pytest.raises(EndorsementError, match=r"\[enrol\.inline_policy\] pcr_policy: "):
        client.submit("RegisterNode", js(request))
    proposal = {"kind": "pcr_policy", "key": "own", "document": pcr_policy(node_tpm.golden)}
    ledger_env.admin(ORG1).submit("ProposePolicy", js(proposal))  # never approved by Org2
    del request["pcr_policy"]
    with pytest.raises(EndorsementError, match=r"\[governance\.no_policy\] pcr_policy_id own"):
        client.submit("RegisterNode", js({**request, "pcr_policy_id": "own"}))
    with pytest.raises(EndorsementError, match=r"\[governance\.no_policy\] pcr_policy_id boot"):
        client.submit("RegisterNode", js({**request, "pcr_policy_id": "boot"}))
    assert json.loads(client.evaluate("GetHistory", js({"key": "node:n1"}))) == []


def test_rejects_node_claimed_for_another_org(ledger_env, node_tpm, boot_policy):
    with pytest.raises(EndorsementError, match="belongs to Org2MSP; the caller is Org1MSP"):
        register_node(ledger_env.clients[ORG1], node_tpm, "n1", 0, [("GPU-a", H100)], org=ORG2)


def test_rejects_second_registration_and_gpu_of_another_node(ledger_client, node_tpm, boot_policy):
    first = register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)])
    # the same registration again is a retry: the stored record, nothing written
    assert register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)]) == first
    history = json.loads(ledger_client.evaluate("GetHistory", js({"key": "node:n1"})))
    assert len(history) == 1
    with pytest.raises(EndorsementError, match="already registered"):
        register_node(ledger_client, node_tpm, "n1", 1, [("GPU-a", H100)])
    with pytest.raises(EndorsementError, match="GPU GPU-a is registered to node n1"):
        register_node(ledger_client, node_tpm, "n2", 1, [("GPU-a", H100)])


def test_revoke_ak_only_by_owner_then_reregister_with_new_epoch(ledger_env, node_tpm, boot_policy):
    org1, org2 = ledger_env.clients[ORG1], ledger_env.clients[ORG2]
    register_node(org1, node_tpm, "n1", 0, [("GPU-a", H100)])
    with pytest.raises(EndorsementError, match="belongs to Org1MSP"):
        org2.submit("RevokeAK", js({"node_id": "n1", "reason": "stolen"}))
    revoked = org1.submit("RevokeAK", js({"node_id": "n1", "reason": "disk swap"})).payload
    assert org1.submit("RevokeAK", js({"node_id": "n1"})).payload == revoked  # a retry
    with pytest.raises(EndorsementError, match="revoked"):
        attest(org1, node_tpm, "n1", 0)
    node = register_node(org1, node_tpm, "n1", 2, [("GPU-a", H100)])
    assert node["ak_epoch"] == 1 and node["ak_public"] == node_tpm.ak_b64(2)
    history = json.loads(org1.evaluate("GetHistory", js({"key": "node:n1"})))
    # newest first on both backends, as Fabric orders GetHistoryForKey
    assert [(v["value"]["ak_epoch"], v["value"]["revoked"]) for v in history] == [
        (1, False),
        (0, True),
        (0, False),
    ]
    assert history[0]["timestamp_ns"] >= history[-1]["timestamp_ns"]


# -- attestations --------------------------------------------------------------------------


def test_records_attestation_verified_by_the_contract(ledger_client, node_tpm, boot_policy):
    register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)])
    record = attest(ledger_client, node_tpm, "n1", 0)
    assert record["valid"] is True and record["verdict"]["valid"] is True
    stored = json.loads(
        ledger_client.evaluate("GetAttestation", js({"attestation_id": record["attestation_id"]}))
    )
    assert stored == record


def test_replayed_answer_is_rejected(ledger_client, node_tpm, boot_policy):
    register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)])
    first = quote_request(node_tpm, "n1", 0, challenge(ledger_client, "n1"))
    recorded = ledger_client.submit("RecordAttestation", js(first)).payload
    # the same evidence resubmitted is a retry: the same attestation, nothing written
    assert ledger_client.submit("RecordAttestation", js(first)).payload == recorded
    replay = {**quote_request(node_tpm, "n1", 0, bytes.fromhex(first["nonce"]))}
    with pytest.raises(
        EndorsementError, match=r"\[attest\.replayed\] nonce .* was already answered"
    ):
        ledger_client.submit("RecordAttestation", js(replay))


def test_pre_made_quote_over_a_nonce_the_ledger_never_issued_is_refused(
    ledger_client, node_tpm, boot_policy
):
    register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)])
    challenge(ledger_client, "n1")  # an outstanding challenge does not make any nonce good
    made_in_advance = quote_request(node_tpm, "n1", 0, os.urandom(32))
    with pytest.raises(EndorsementError, match=r"\[attest\.no_challenge\]"):
        ledger_client.submit("RecordAttestation", js(made_in_advance))


def test_challenge_of_another_node_cannot_be_answered(ledger_client, node_tpm, boot_policy):
    register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)])
    register_node(ledger_client, node_tpm, "n2", 1, [("GPU-b", H100)])
    for_n1 = challenge(ledger_client, "n1")
    with pytest.raises(EndorsementError, match=r"\[attest\.challenge_other_node\]"):
        ledger_client.submit("RecordAttestation", js(quote_request(node_tpm, "n2", 1, for_n1)))


def test_challenge_nonce_comes_from_its_transaction(ledger_client, node_tpm, boot_policy):
    register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)])
    issued = json.loads(ledger_client.submit("IssueChallenge", js({"node_id": "n1"})).payload)
    assert issued["nonce"] == derive_nonce(issued["challenge_tx"], "n1").hex()
    again = json.loads(ledger_client.submit("IssueChallenge", js({"node_id": "n1"})).payload)
    assert again["nonce"] != issued["nonce"]
    record = json.loads(
        ledger_client.submit(
            "RecordAttestation",
            js(quote_request(node_tpm, "n1", 0, bytes.fromhex(issued["nonce"]))),
        ).payload
    )
    # its age counts from the challenge's issue, not from the answer's (client-set) time
    assert record["valid"] and record["challenge_tx"] == issued["challenge_tx"]
    assert record["timestamp_ns"] == issued["issued_ns"] <= record["answered_ns"]


def test_answer_after_the_challenge_window_is_refused(ledger_env, node_tpm):
    if ledger_env.clock is None:
        pytest.skip("this backend runs on wall-clock time")  # covered on the embedded one
    client = ledger_env.clients[ORG1]
    windowed = {**pcr_policy(node_tpm.golden), "challenge_window_s": 30}
    decide(ledger_env.admin(ORG1), ledger_env.admin(ORG2), "pcr_policy", "w30", windowed)
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], policy_id="w30")
    nonce = challenge(client, "n1")
    ledger_env.clock.advance(31)
    with pytest.raises(
        EndorsementError, match=r"\[attest\.challenge_expired\] .* its window is 30 s"
    ):
        client.submit("RecordAttestation", js(quote_request(node_tpm, "n1", 0, nonce)))


def test_endorsers_refuse_a_forged_client_timestamp(ledger_env, node_tpm):
    """The stale quote: a client stamping its proposals far in the past (or future) to make an
    old attestation look fresh is refused by every endorser's own clock."""
    if ledger_env.clock is None:
        pytest.skip("this backend stamps proposals with wall-clock time")
    client = ledger_env.clients[ORG1]
    policy = approve_pcr_policy(ledger_env, node_tpm.golden, max_age_s=60, key="age60")
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], policy_id=policy)
    att = attest(client, node_tpm, "n1", 0)["attestation_id"]
    ledger_env.clock.advance(-(MAX_CLOCK_SKEW_S + 10))
    with pytest.raises(
        EndorsementError, match=r"\[clock\.skew\] proposal timestamp is -1[0-9]{2} s"
    ):
        lease(client, "L1", ["GPU-a"], [att])
    with pytest.raises(EndorsementError, match=r"\[clock\.skew\]"):
        attest(client, node_tpm, "n1", 0)
    ledger_env.clock.advance(2 * (MAX_CLOCK_SKEW_S + 10))  # a step beyond the bound, forward
    with pytest.raises(EndorsementError, match=r"\[clock\.skew\] proposal timestamp is \+"):
        lease(client, "L1", ["GPU-a"], [att])
    ledger_env.clock.advance(-(MAX_CLOCK_SKEW_S + 10))  # back to the endorsers' time
    assert lease(client, "L1", ["GPU-a"], [att])["status"] == "ACTIVE"


def test_quote_by_another_ak_is_recorded_invalid_and_not_leasable(
    ledger_client, node_tpm, boot_policy
):
    register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)])
    request = quote_request(node_tpm, "n1", 1, challenge(ledger_client, "n1"))
    record = json.loads(ledger_client.submit("RecordAttestation", js(request)).payload)
    assert record["valid"] is False and record["verdict"]["reasons"]
    with pytest.raises(EndorsementError, match="failed verification"):
        lease(ledger_client, "L1", ["GPU-a"], [record["attestation_id"]])


def test_pcrs_off_policy_make_an_invalid_verdict(ledger_env, ledger_client, node_tpm):
    wrong = approve_pcr_policy(ledger_env, {k: "11" * 32 for k in node_tpm.golden}, key="wrong")
    register_node(ledger_client, node_tpm, "n1", 0, [("GPU-a", H100)], policy_id=wrong)
    assert attest(ledger_client, node_tpm, "n1", 0)["valid"] is False


def test_attestation_for_another_orgs_node_is_rejected(ledger_env, node_tpm, boot_policy):
    register_node(ledger_env.clients[ORG1], node_tpm, "n1", 0, [("GPU-a", H100)])
    with pytest.raises(EndorsementError, match="belongs to Org1MSP"):
        attest(ledger_env.clients[ORG2], node_tpm, "n1", 0)


# -- leases --------------------------------------------------------------------------------


def test_creates_lease_and_answers_queries(ledger_client, fleet):
    created = lease(ledger_client, "L1", ["GPU-a", "GPU-d"], [fleet["n1"], fleet["n2"]])
    assert created["status"] == "ACTIVE" and created["org"] == ORG1
    assert json.loads(ledger_client.evaluate("GetLease", js({"lease_id": "L1"}))) == created
    by_tenant = json.loads(ledger_client.evaluate("LeasesByTenant", js({"tenant": "tenant-a"})))
    assert [x["lease_id"] for x in by_tenant] == ["L1"]
    for node in ("n1", "n2"):
        by_node = json.loads(ledger_client.evaluate("LeasesByNode", js({"node_id": node})))
        assert [x["lease_id"] for x in by_node] == ["L1"]
    history = json.loads(ledger_client.evaluate("GetHistory", js({"key": "lease:L1"})))
    assert [h["tx_id"] for h in history] == [created["created_tx"]]


def test_refuses_busy_unknown_and_unattested_gpus(ledger_client, node_tpm, fleet):
    lease(ledger_client, "L1", ["GPU-a"], [fleet["n1"]])
    with pytest.raises(EndorsementError, match="GPU GPU-a is in active lease L1"):
        lease(ledger_client, "L2", ["GPU-a"], [fleet["n1"]])
    with pytest.raises(EndorsementError, match="GPU GPU-zz is not registered"):
        lease(ledger_client, "L2", ["GPU-zz"], [fleet["n1"]])
    with pytest.raises(EndorsementError, match="node n2 has no good attestation"):
        lease(ledger_client, "L2", ["GPU-d"], [fleet["n1"]])
    with pytest.raises(EndorsementError, match="attestation nope does not exist"):
        lease(ledger_client, "L2", ["GPU-d"], ["nope"])
    with pytest.raises(EndorsementError, match="lease L1 already exists"):
        lease(ledger_client, "L1", ["GPU-b"], [fleet["n1"]])


def test_refuses_attestation_older_than_policy(ledger_env, node_tpm):
    if ledger_env.clock is None:
        pytest.skip("wall-clock backend: see the _in_real_time twin")
    client = ledger_env.clients[ORG1]
    policy = approve_pcr_policy(ledger_env, node_tpm.golden, max_age_s=60, key="age60")
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], policy_id=policy)
    att = attest(client, node_tpm, "n1", 0)["attestation_id"]
    ledger_env.clock.advance(61)
    with pytest.raises(EndorsementError, match="is 61 s old, policy allows 60 s"):
        lease(client, "L1", ["GPU-a"], [att])
    fresh = attest(client, node_tpm, "n1", 0)["attestation_id"]
    assert lease(client, "L1", ["GPU-a"], [att, fresh])["status"] == "ACTIVE"


def test_refuses_attestation_older_than_policy_in_real_time(ledger_env, node_tpm):
    """The real-time twin of the test above, for backends whose peers keep their own clock."""
    if ledger_env.clock is not None:
        pytest.skip("stepped clock: covered by test_refuses_attestation_older_than_policy")
    client = ledger_env.clients[ORG1]
    policy = approve_pcr_policy(ledger_env, node_tpm.golden, max_age_s=2, key="age2")
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], policy_id=policy)
    att = attest(client, node_tpm, "n1", 0)["attestation_id"]
    time.sleep(3)
    with pytest.raises(EndorsementError, match=r"is \d+ s old, policy allows 2 s"):
        lease(client, "L1", ["GPU-a"], [att])
    fresh = attest(client, node_tpm, "n1", 0)["attestation_id"]
    assert lease(client, "L1", ["GPU-a"], [att, fresh])["status"] == "ACTIVE"


def test_revoked_ak_makes_node_unleasable(ledger_client, node_tpm, fleet):
    ledger_client.submit("RevokeAK", js({"node_id": "n1"}))
    with pytest.raises(EndorsementError, match="AK of node n1 is revoked"):
        lease(ledger_client, "L1", ["GPU-a"], [fleet["n1"]])


def test_end_lease_frees_gpus_once_and_only_for_its_org(ledger_env, fleet):
    org1, org2 = ledger_env.clients[ORG1], ledger_env.clients[ORG2]
    lease(org1, "L1", ["GPU-a"], [fleet["n1"]])
    with pytest.raises(EndorsementError, match="lease L1 belongs to Org1MSP"):
        org2.submit("EndLease", js({"lease_id": "L1"}))
    ended = json.loads(org1.submit("EndLease", js({"lease_id": "L1"})).payload)
    assert ended["status"] == "ENDED"
    # ending again is a retry: the stored record, the GPUs stay free, nothing written
    assert json.loads(org1.submit("EndLease", js({"lease_id": "L1"})).payload) == ended
    with pytest.raises(EndorsementError, match="lease L1 belongs to Org1MSP"):
        org2.submit("EndLease", js({"lease_id": "L1"}))
    assert lease(org1, "L2", ["GPU-a"], [fleet["n1"]])["status"] == "ACTIVE"


def migrate_request(gpus: list[str], att: str, generation: str = A100, **terms) -> str:
    return js(
        {
            "lease_id": "L1",
            "gpus": gpus,
            "attestation_ids": [att],
            "terms": lease_terms(gpus, generation=generation, **terms),
        }
    )


def test_migrates_lease_to_another_generation_only(ledger_client, fleet):
    lease(ledger_client, "L1", ["GPU-a"], [fleet["n1"]])
    with pytest.raises(EndorsementError, match="must move to another generation"):
        ledger_client.submit("MigrateLease", migrate_request(["GPU-d"], fleet["n2"], H100))
    moved = json.loads(
        ledger_client.submit("MigrateLease", migrate_request(["GPU-c"], fleet["n1"])).payload
    )
    assert [g["uuid"] for g in moved["gpus"]] == ["GPU-c"]
    assert moved["migrations"][0]["from"][0]["uuid"] == "GPU-a"
    assert lease(ledger_client, "L2", ["GPU-a"], [fleet["n1"]])["status"] == "ACTIVE"


def test_concurrent_conflicting_leases_exactly_one_wins(ledger_env, fleet):
    clients = [ledger_env.new_client(ORG1) for _ in range(8)]
    barrier = threading.Barrier(len(clients))
    outcomes: list[str] = []

    def contend(i: int) -> None:
        barrier.wait()
        try:
            lease(clients[i], f"race-{i}", ["GPU-b"], [fleet["n1"]])
            outcomes.append("won")
        except TransactionInvalid as exc:
            outcomes.append(exc.receipt.validation_code)
        except EndorsementError as exc:  # simulated after the winner committed
            outcomes.append("busy" if "in active lease" in str(exc) else str(exc))
        except Exception as exc:
            outcomes.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == len(clients), outcomes  # every contender got an answer
    assert outcomes.count("won") == 1, outcomes
    assert set(outcomes) <= {"won", "MVCC_READ_CONFLICT", "busy"}, outcomes


# -- settlements ---------------------------------------------------------------------------


FIRST_HOUR_MJ = 2_000_000_000


def one_hour_lease(client, fleet) -> dict:
    """L1 on GPU-a, started 2 h ago (settled below over its first hour, whose readings n1's
    quote attests)."""
    start = now_ms() - 2 * 3_600_000
    attest(client, fleet["tpm"], "n1", 0, first_hour_readings(start))
    return lease(client, "L1", ["GPU-a"], [fleet["n1"]], start_ms=start)["terms"]


def first_hour_readings(start: int) -> dict[str, str]:
    return counter_readings(["GPU-a"], [(start, 0), (start + 3_600_000, FIRST_HOUR_MJ)])


def first_hour(terms: dict, **overrides) -> str:
    start = terms["start_ms"]
    batches = batches_of(first_hour_readings(start))
    request = settle_request(
        "L1", 0, terms, start, start + 3_600_000, FIRST_HOUR_MJ, batches=batches
    )
    return js({**request, **overrides})


def test_settle_is_idempotent_by_business_key(ledger_env, fleet):
    client = ledger_env.clients[ORG1]
    terms = one_hour_lease(client, fleet)
    first = client.submit("Settle", first_hour(terms))
    again = client.submit("Settle", first_hour(terms))
    assert json.loads(again.payload) == json.loads(first.payload)
    settlements = json.loads(client.evaluate("GetSettlements", js({"lease_id": "L1"})))
    assert len(settlements) == 1 and settlements[0]["capacity_micro"] == 2_200_000
    with pytest.raises(EndorsementError, match=r"\[settle.duplicate\] .* different final"):
        client.submit("Settle", first_hour(terms, final=True))


def test_settle_rejects_wrong_amount_unknown_lease_and_other_org(ledger_env, fleet):
    client = ledger_env.clients[ORG1]
    terms = one_hour_lease(client, fleet)
    with pytest.raises(EndorsementError, match=r"\[settle.amount\] total_micro 1 \(expected"):
        client.submit("Settle", first_hour(terms, total_micro=1))
    with pytest.raises(EndorsementError, match="lease L9 does not exist"):
        client.submit("Settle", first_hour(terms, lease_id="L9"))
    with pytest.raises(
        EndorsementError,
        match=r"\[org\.not_owner\] lease L1 belongs to Org1MSP; the caller is Org2MSP",
    ):
        ledger_env.clients[ORG2].submit("Settle", first_hour(terms))
    with pytest.raises(EndorsementError, match="floats are not accepted"):
        client.submit("Settle", first_hour(terms, total_micro=62500.0))


def test_every_state_change_emits_an_event(ledger_env, fleet):
    client = ledger_env.clients[ORG1]
    lease(client, "L1", ["GPU-a"], [fleet["n1"]])
    client.submit("EndLease", js({"lease_id": "L1"}))
    names = []
    for event in client.events(start_block=0):
        names.append(event.name)
        if event.name == "LeaseEnded":
            break
    assert names == [
        "PolicyProposed",  # the PCR policy the nodes register under: one org proposes,
        "PolicyApproved",  # the other approves
        "NodeRegistered",
        "NodeRegistered",
        "ChallengeIssued",
        "AttestationRecorded",
        "ChallengeIssued",
        "AttestationRecorded",
        "LeaseCreated",
        "LeaseEnded",
    ]


def test_unknown_records_are_named(ledger_client, node_tpm):
    for fn, request, message in [
        ("GetLease", {"lease_id": "L9"}, "lease L9 does not exist"),
        ("GetNode", {"node_id": "n9"}, "node n9 is not registered"),
        ("GetAttestation", {"attestation_id": "a9"}, "attestation a9 does not exist"),
        ("RevokeAK", {"node_id": "n9"}, "node n9 is not registered"),
        ("EndLease", {"lease_id": "L9"}, "lease L9 does not exist"),
    ]:
        with pytest.raises(EndorsementError, match=message):
            ledger_client.submit(fn, js(request))
    with pytest.raises(EndorsementError, match="node n9 is not registered"):
        ledger_client.submit("RecordAttestation", js(quote_request(node_tpm, "n9", 0, b"n" * 16)))
    with pytest.raises(EndorsementError, match="node n9 is not registered"):
        ledger_client.submit("IssueChallenge", js({"node_id": "n9"}))


def test_ended_lease_cannot_migrate_but_can_still_settle(ledger_client, fleet):
    terms = one_hour_lease(ledger_client, fleet)
    ledger_client.submit("EndLease", js({"lease_id": "L1"}))
    with pytest.raises(EndorsementError, match="L1 is ENDED"):
        ledger_client.submit("MigrateLease", migrate_request(["GPU-c"], fleet["n1"]))
    assert ledger_client.submit("Settle", first_hour(terms, final=True)).valid
