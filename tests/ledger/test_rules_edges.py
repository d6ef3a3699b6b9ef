"""Who may claim GPU time (ledger.contract.rules.check_free) and which attestation a lease
may be placed on (require_attested), at each edge and with each refusal's whole message: a
claim from exactly the moment a lease let its GPU go, an attestation exactly as old as the
policy allows, one dated after the clock, one of another node or an older AK. No TPM: the
contract applies these to the records it read."""

from __future__ import annotations

from typing import Any

from ledger.contract import rules
from ledger.units import NS_PER_S
from tests.ledger.helpers import refusal

NOW_NS = 1_800_000_000 * NS_PER_S
MAX_AGE_S = 300
NODE = {"node_id": "n1", "revoked": False, "ak_epoch": 2, "pcr_policy": {"max_age_s": MAX_AGE_S}}


def attestation(att_id: str = "a1", **changes: Any) -> dict[str, Any]:
    record = {
        "attestation_id": att_id,
        "node_id": "n1",
        "valid": True,
        "ak_epoch": 2,
        "timestamp_ns": NOW_NS - 60 * NS_PER_S,
    }
    return {**record, **changes}


# -- check_free: GPU time is sold once --


def test_a_gpu_never_leased_is_free_from_any_time():
    rules.check_free("GPU-a", None, 0)


def test_a_gpu_in_a_lease_is_not_claimable():
    assert refusal(rules.check_free, "GPU-a", {"lease_id": "L1"}, 10**13) == (
        "[gpu.leased] GPU GPU-a is in active lease L1"
    )


def test_a_released_gpu_is_free_from_the_moment_it_was_let_go():
    held = {"released_ms": 5_000, "last_lease": "L1"}
    rules.check_free("GPU-a", held, 5_000)
    rules.check_free("GPU-a", held, 5_001)
    assert refusal(rules.check_free, "GPU-a", held, 4_999) == (
        "[gpu.time_held] GPU GPU-a was held by lease L1 until 5000; a claim from 4999 would "
        "sell that time again"
    )


# -- require_attested: a good, fresh quote of the node, with its current AK --


def test_a_valid_quote_of_the_current_ak_within_the_policys_age_is_enough():
    rules.require_attested(NODE, [attestation()], NOW_NS)
    rules.require_attested(NODE, [attestation(timestamp_ns=NOW_NS)], NOW_NS)
    rules.require_attested(NODE, [attestation(timestamp_ns=NOW_NS - MAX_AGE_S * NS_PER_S)], NOW_NS)


def test_a_revoked_node_has_no_good_attestation():
    revoked = {**NODE, "revoked": True}
    assert refusal(rules.require_attested, revoked, [attestation()], NOW_NS) == (
        "[node.revoked] the AK of node n1 is revoked"
    )


def test_each_unusable_attestation_is_named_with_why():
    too_old = NOW_NS - MAX_AGE_S * NS_PER_S - 1
    atts = [
        attestation("bad", valid=False),
        attestation("old-ak", ak_epoch=1),
        attestation("stale", timestamp_ns=too_old),
        attestation("ahead", timestamp_ns=NOW_NS + NS_PER_S),
        attestation("other", node_id="n2"),
    ]
    assert refusal(rules.require_attested, NODE, atts, NOW_NS) == (
        "[lease.attestation] node n1 has no good attestation within its policy's age: "
        "bad failed verification; old-ak was made with a revoked AK; stale is 300 s old, "
        "policy allows 300 s; ahead is -1 s old, policy allows 300 s"
    )


def test_a_good_attestation_after_unusable_ones_is_enough():
    rules.require_attested(NODE, [attestation("bad", valid=False), attestation()], NOW_NS)
    rules.require_attested(NODE, [attestation("other", node_id="n2"), attestation()], NOW_NS)


def test_no_attestation_of_the_node_at_all_says_so():
    message = (
        "[lease.attestation] node n1 has no good attestation within its policy's age among "
        "attestation_ids"
    )
    assert refusal(rules.require_attested, NODE, [], NOW_NS) == message
    assert refusal(rules.require_attested, NODE, [attestation(node_id="n2")], NOW_NS) == message
