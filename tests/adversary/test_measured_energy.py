"""Measured energy is derived, not claimed (threat model: "Contract: registration, GPU time,
energy"). An organisation's web app (its client identity) bills a line more (or less)
energy than the readings its node's TPM attested: the contract recomputes each line's
measured energy on every endorser from the counters of the batches it cites, which
RecordAttestation put on the ledger from the readings the quote binds
(ledger.contract.attested_telemetry.measured_mj / check_measured)."""

from __future__ import annotations

import json

import pytest

from attest import readings
from chaincode_client.interface import EndorsementError
from tests.ledger.conftest import ORG1, LedgerEnv
from tests.ledger.helpers import (
    H100,
    attest,
    batches_of,
    counter_readings,
    endorsement_refusal,
    js,
    lease_request,
    now_ms,
    register_node,
    settle_request,
)

HOUR_MS = 3_600_000
DRAWN_MJ = 350 * HOUR_MS  # an hour at 350 W
GPU = "GPU-e"


@pytest.fixture
def line(ledger_env: LedgerEnv, node_tpm, boot_policy) -> tuple:
    """Lease L on GPU-e since 2 h ago; its node's quote attested readings of the first hour
    rising by DRAWN_MJ, then as much again in the next hour: (client, terms, start, rows)."""
    client = ledger_env.clients[ORG1]
    register_node(client, node_tpm, "n1", 0, [(GPU, H100)])
    start = now_ms() - 2 * HOUR_MS
    rows = counter_readings(
        [GPU], [(start, 0), (start + HOUR_MS, DRAWN_MJ), (start + 2 * HOUR_MS, 2 * DRAWN_MJ)]
    )
    att = attest(client, node_tpm, "n1", 0, rows)["attestation_id"]
    lease = client.submit("CreateLease", lease_request("L", [GPU], [att], start_ms=start))
    return client, json.loads(lease.payload)["terms"], start, rows


def submit(client, terms, start, measured_mj, batches) -> dict:
    """A line over the lease's first hour claiming `measured_mj`, its amounts computed for
    that claim (so only the energy is false)."""
    request = settle_request("L", 0, terms, start, start + HOUR_MS, measured_mj, batches=batches)
    return json.loads(client.submit("Settle", js(request)).payload)


def test_a_line_claiming_twice_its_readings_is_refused(line):
    client, terms, start, rows = line
    with pytest.raises(EndorsementError, match=rf"\[settle\.measured\] .*: {DRAWN_MJ}$"):
        submit(client, terms, start, 2 * DRAWN_MJ, batches_of(rows))
    # the readings past the line's end are not its energy: the hour shows DRAWN_MJ
    assert submit(client, terms, start, DRAWN_MJ, batches_of(rows))["measured_mj"] == DRAWN_MJ


def test_a_line_claiming_nothing_while_readings_rose_is_refused(line):
    client, terms, start, rows = line
    with pytest.raises(
        EndorsementError, match=rf"\[settle\.measured\] measured_mj 0 .*: {DRAWN_MJ}$"
    ):
        submit(client, terms, start, 0, batches_of(rows))


def test_a_line_citing_fewer_readings_than_its_batch_holds_is_refused(line):
    client, terms, start, rows = line
    [batch] = batches_of(rows)
    short = [readings.Batch(batch.gpu, batch.digest, batch.rows - 1)]
    assert endorsement_refusal(submit, client, terms, start, DRAWN_MJ, short) == (
        f"[settle.telemetry_rows] batch {batch.digest} of GPU {GPU} cites 2 readings; the "
        "ledger holds 3"
    )


def test_a_line_over_two_gpus_counts_each_gpus_own_increases(ledger_env, node_tpm, boot_policy):
    """Each GPU's counter is its own: two GPUs read at the same instants add their own
    increases (the GPUs' counters never mix, and every cited batch counts)."""
    client = ledger_env.clients[ORG1]
    other = "GPU-f"
    register_node(client, node_tpm, "n1", 0, [(GPU, H100), (other, H100)])
    start = now_ms() - 2 * HOUR_MS
    rows = {
        **counter_readings([GPU], [(start, 0), (start + HOUR_MS, DRAWN_MJ)]),
        **counter_readings([other], [(start, 5 * DRAWN_MJ), (start + HOUR_MS, 5 * DRAWN_MJ + 7)]),
    }
    att = attest(client, node_tpm, "n1", 0, rows)["attestation_id"]
    lease = client.submit("CreateLease", lease_request("L", [GPU, other], [att], start_ms=start))
    terms = json.loads(lease.payload)["terms"]
    assert submit(client, terms, start, DRAWN_MJ + 7, batches_of(rows))["measured_mj"] == (
        DRAWN_MJ + 7
    )


def test_two_attested_batches_that_disagree_on_an_instant_are_refused(line, node_tpm):
    """A node's root user has its TPM attest a second batch that reads its counter again at
    an instant the first already covered, higher: a line citing both is refused, whichever
    reading it would have preferred."""
    client, terms, start, rows = line
    again = counter_readings([GPU], [(start + HOUR_MS, DRAWN_MJ + 5), (start + 90 * 60_000, 0)])
    assert attest(client, node_tpm, "n1", 0, again)["valid"]
    assert endorsement_refusal(
        submit, client, terms, start, DRAWN_MJ, [*batches_of(rows), *batches_of(again)]
    ) == (f"[settle.telemetry_conflict] GPU {GPU}: two readings at t_ms {start + HOUR_MS} disagree")
