"""GPU time is exclusive on the ledger (threat model: "Contract: registration, GPU time,
energy"). An organisation's web app (its client identity) tries to sell GPU time twice: a
lease backdated onto time another lease held and billed, a migration backdated into time
its own lease already billed or into time another lease held on the target GPU. Each GPU
records when it was last released (ledger.contract.rules.claimable); a lease's own billed
end bounds its moves (ledger.contract.chaincode MigrateLease)."""

from __future__ import annotations

import json

import pytest

from chaincode_client.interface import EndorsementError
from tests.ledger.conftest import ORG1, LedgerEnv
from tests.ledger.helpers import (
    A100,
    H100,
    attest,
    js,
    lease_request,
    lease_terms,
    now_ms,
    readings_for,
    register_node,
    settle_request,
)

MINUTE_MS = 60_000


@pytest.fixture
def fleet(ledger_env: LedgerEnv, node_tpm, boot_policy) -> dict:
    """Node n1 of Org1: GPU-h (H100) and GPU-a (A100), freshly attested."""
    client = ledger_env.clients[ORG1]
    register_node(client, node_tpm, "n1", 0, [("GPU-h", H100), ("GPU-a", A100)])
    att = attest(client, node_tpm, "n1", 0, readings_for(["GPU-h", "GPU-a"]))
    return {"att": att["attestation_id"], "client": client}


def create(client, lease_id: str, gpu: str, generation: str, start_ms: int, att: str) -> dict:
    request = lease_request(lease_id, [gpu], [att], generation=generation, start_ms=start_ms)
    return json.loads(client.submit("CreateLease", request).payload)


def held_and_billed(client, att: str, start_ms: int) -> None:
    """L1 held GPU-h from start_ms for 30 minutes, billed to its end and ended there."""
    lease = create(client, "L1", "GPU-h", H100, start_ms, att)
    end = start_ms + 30 * MINUTE_MS
    client.submit("EndLease", js({"lease_id": "L1", "end_ms": end}))
    line = settle_request("L1", 0, lease["terms"], start_ms, end, 0, final=True)
    client.submit("Settle", js(line))


def test_a_lease_cannot_start_in_time_another_lease_held_and_billed(fleet):
    client, att = fleet["client"], fleet["att"]
    t0 = now_ms() - 60 * MINUTE_MS
    held_and_billed(client, att, t0)
    with pytest.raises(EndorsementError, match=r"\[gpu\.time_held\] GPU GPU-h"):
        create(client, "L2", "GPU-h", H100, t0 + 10 * MINUTE_MS, att)
    # from the moment L1 released it, the GPU's time is free to sell
    assert create(client, "L2", "GPU-h", H100, t0 + 30 * MINUTE_MS, att)["status"] == "ACTIVE"


def test_a_migration_cannot_be_backdated_into_its_own_billed_time(fleet):
    """Repricing: time already billed at A100 terms moved under H100 terms."""
    client, att = fleet["client"], fleet["att"]
    t0 = now_ms() - 60 * MINUTE_MS
    lease = create(client, "L1", "GPU-a", A100, t0, att)
    line = settle_request("L1", 0, lease["terms"], t0, t0 + 40 * MINUTE_MS, 0)
    client.submit("Settle", js(line))
    move = {
        "lease_id": "L1",
        "gpus": ["GPU-h"],
        "attestation_ids": [att],
        "terms": lease_terms(["GPU-h"], generation=H100, start_ms=t0 + 20 * MINUTE_MS),
    }
    with pytest.raises(EndorsementError, match=r"\[terms\.start\] the move at"):
        client.submit("MigrateLease", js(move))
    move["terms"]["start_ms"] = t0 + 40 * MINUTE_MS
    assert json.loads(client.submit("MigrateLease", js(move)).payload)["gpus"][0]["uuid"] == (
        "GPU-h"
    )


def test_a_migration_cannot_be_backdated_into_another_lease_s_time_on_the_target(fleet):
    client, att = fleet["client"], fleet["att"]
    t0 = now_ms() - 60 * MINUTE_MS
    held_and_billed(client, att, t0)  # L1 held GPU-h over [t0, t0 + 30 min]
    create(client, "L2", "GPU-a", A100, t0, att)  # nothing billed yet: its own floor is t0
    move = {
        "lease_id": "L2",
        "gpus": ["GPU-h"],
        "attestation_ids": [att],
        "terms": lease_terms(["GPU-h"], generation=H100, start_ms=t0 + 10 * MINUTE_MS),
    }
    with pytest.raises(EndorsementError, match=r"\[gpu\.time_held\] GPU GPU-h"):
        client.submit("MigrateLease", js(move))
    move["terms"]["start_ms"] = t0 + 30 * MINUTE_MS
    client.submit("MigrateLease", js(move))
    # the A100 L2 left is free from the move on, not before
    with pytest.raises(EndorsementError, match=r"\[gpu\.time_held\] GPU GPU-a"):
        create(client, "L3", "GPU-a", A100, t0 + 20 * MINUTE_MS, att)
    create(client, "L3", "GPU-a", A100, t0 + 30 * MINUTE_MS, att)


def test_a_lease_cannot_end_before_what_it_billed_or_after_the_ledger_clock(fleet):
    """EndLease's end_ms (when the GPUs were released) is bounded by the ledger: not before
    the lease's billed end, not after the endorsers' clock."""
    client, att = fleet["client"], fleet["att"]
    t0 = now_ms() - 60 * MINUTE_MS
    lease = create(client, "L1", "GPU-h", H100, t0, att)
    client.submit("Settle", js(settle_request("L1", 0, lease["terms"], t0, t0 + 20 * MINUTE_MS, 0)))
    with pytest.raises(EndorsementError, match=r"\[lease\.end\] end_ms"):
        client.submit("EndLease", js({"lease_id": "L1", "end_ms": t0 + 10 * MINUTE_MS}))
    with pytest.raises(EndorsementError, match=r"\[lease\.end\] end_ms"):
        client.submit("EndLease", js({"lease_id": "L1", "end_ms": now_ms() + 60 * MINUTE_MS}))
    ended = json.loads(
        client.submit("EndLease", js({"lease_id": "L1", "end_ms": t0 + 20 * MINUTE_MS})).payload
    )
    assert ended["ended_ms"] == t0 + 20 * MINUTE_MS
