"""Telemetry attested by the node's TPM, on every ledger backend: a bill line is accepted only
when each batch of readings it cites was bound into a valid quote of the node that holds the
GPU (docs/billing.md, "Attested telemetry"); every other citation is refused by its rule."""

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
    challenge,
    counter_readings,
    digests_of,
    endorsement_refusal,
    js,
    lease_request,
    now_ms,
    quote_request,
    register_node,
    settle_request,
)

HOUR_MS = 3_600_000
DRAWN_MJ = 700 * HOUR_MS // 2  # an hour at 350 W
A, B = "GPU-ta", "GPU-tb"  # GPU-ta on node n1, GPU-tb on node n2


@pytest.fixture
def fleet(ledger_env: LedgerEnv, node_tpm, boot_policy) -> tuple:
    """Nodes n1 (GPU-ta) and n2 (GPU-tb), n1 attested without readings, and lease L on
    GPU-ta that started 2 h ago: (client, the lease's terms, its start)."""
    client = ledger_env.clients[ORG1]
    register_node(client, node_tpm, "n1", 0, [(A, H100)])
    register_node(client, node_tpm, "n2", 1, [(B, H100)])
    att = attest(client, node_tpm, "n1", 0)["attestation_id"]
    start = now_ms() - 2 * HOUR_MS
    lease = client.submit("CreateLease", lease_request("L", [A], [att], start_ms=start))
    return client, json.loads(lease.payload)["terms"], start


def drawn(start: int, gpu: str = A) -> dict[str, str]:
    """A batch of `gpu`'s readings that shows DRAWN_MJ over the line's hour from `start`."""
    return counter_readings([gpu], [(start, 0), (start + HOUR_MS, DRAWN_MJ)])


def settle(client, terms, start, batches, **overrides) -> dict:
    request = settle_request("L", 0, terms, start, start + HOUR_MS, DRAWN_MJ, batches=batches)
    request.update(overrides)
    return json.loads(client.submit("Settle", js(request)).payload)


def test_a_line_citing_batches_its_nodes_quote_attested_is_accepted(fleet, node_tpm):
    client, terms, start = fleet
    record = attest(client, node_tpm, "n1", 0, drawn(start))
    assert record["valid"] and record["telemetry"] == digests_of(drawn(start))
    line = settle(client, terms, start, batches_of(drawn(start)))
    assert line["telemetry_batches"] == [b.as_dict() for b in batches_of(drawn(start))]
    assert line["telemetry_digest"] == readings.evidence_digest(batches_of(drawn(start)))
    assert line["measured_mj"] == DRAWN_MJ


def test_a_forged_digest_no_quote_attested_is_refused(fleet, node_tpm):
    client, terms, start = fleet
    attest(client, node_tpm, "n1", 0, drawn(start))
    forged = [readings.Batch(A, "ee" * 32, 2)]
    assert endorsement_refusal(settle, client, terms, start, forged) == (
        f"[settle.telemetry_unattested] batch {'ee' * 32} of GPU {A}: no valid quote of its node "
        "n1 attested it"
    )


def test_energy_without_any_attested_batch_is_refused(fleet):
    client, terms, start = fleet
    with pytest.raises(EndorsementError, match=r"\[settle.measured\] measured_mj"):
        settle(client, terms, start, [])
    assert settle(client, terms, start, [], **_zero(terms, start))["measured_mj"] == 0


def _zero(terms, start) -> dict:
    """The same line measuring nothing: no readings are needed to bill no energy."""
    return settle_request("L", 0, terms, start, start + HOUR_MS, 0, batches=[])


def test_a_digest_another_nodes_quote_attested_does_not_count(fleet, node_tpm):
    client, terms, start = fleet
    # n2 attests a batch of its own GPU with the very readings the line's digest claims
    theirs = drawn(start, B)
    assert attest(client, node_tpm, "n2", 1, theirs)["valid"]
    borrowed = [readings.Batch(A, digests_of(theirs)[B], 2)]
    with pytest.raises(EndorsementError, match=r"\[settle.telemetry_unattested\]"):
        settle(client, terms, start, borrowed)
    # n2 cannot attest readings of a GPU it does not hold, either
    with pytest.raises(EndorsementError, match=r"\[attest.telemetry_gpu\] node n2"):
        attest(client, node_tpm, "n2", 1, drawn(start))
    # and a batch of a GPU the lease does not hold is not its evidence
    with pytest.raises(EndorsementError, match=r"\[settle.telemetry_gpu\] batch"):
        settle(client, terms, start, batches_of(theirs))


def test_a_digest_in_a_failed_attestation_is_refused(fleet, node_tpm):
    client, terms, start = fleet
    # signed by another AK than n1's: recorded as failed evidence, attests nothing
    request = quote_request(node_tpm, "n1", 2, challenge(client, "n1"), drawn(start))
    failed = json.loads(client.submit("RecordAttestation", js(request)).payload)
    assert failed["valid"] is False and failed["telemetry"] == digests_of(drawn(start))
    with pytest.raises(EndorsementError, match=r"\[settle.telemetry_unattested\]"):
        settle(client, terms, start, batches_of(drawn(start)))


def test_a_quote_not_bound_to_the_readings_attests_nothing(fleet, node_tpm):
    client, terms, start = fleet
    # a quote over the plain nonce, submitted as if it covered readings
    request = quote_request(node_tpm, "n1", 0, challenge(client, "n1"))
    request["readings"] = drawn(start)
    record = json.loads(client.submit("RecordAttestation", js(request)).payload)
    assert record["valid"] is False
    with pytest.raises(EndorsementError, match=r"\[settle.telemetry_unattested\]"):
        settle(client, terms, start, batches_of(drawn(start)))


def test_digests_alone_are_no_readings(fleet, node_tpm):
    """The old `telemetry` ({gpu: digest}) would let the ledger attest what it cannot read."""
    client, _, start = fleet
    request = quote_request(node_tpm, "n1", 0, challenge(client, "n1"))
    request["telemetry"] = digests_of(drawn(start))
    with pytest.raises(EndorsementError, match=r"telemetry: batch digests alone"):
        client.submit("RecordAttestation", js(request))


def test_the_lines_digest_must_be_that_of_its_batches(fleet, node_tpm):
    client, terms, start = fleet
    attest(client, node_tpm, "n1", 0, drawn(start))
    derived = readings.evidence_digest(batches_of(drawn(start)))
    cited = batches_of(drawn(start))
    assert endorsement_refusal(settle, client, terms, start, cited, telemetry_digest="cd" * 32) == (
        f"[settle.telemetry_digest] telemetry_digest {'cd' * 32} is not the digest of the "
        f"batches it cites ({derived})"
    )
