"""Settle's and EndLease's rules (ledger.contract.billing) at each edge, with each refusal's
whole message: what mutation testing found the sequence property test and the bill-line tests
left open (a line ending exactly at the ledger's clock or the lease's end, an end given
before what the lease billed, energy exactly at the boards' limit, a rate or amount stated
wrong). No TPM: the contract applies these to plain records before anything else."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ledger import money
from ledger.contract import billing
from ledger.units import NS_PER_MS
from tests.ledger.helpers import refusal

NOW_MS = 1_800_000_000_000
NOW_NS = NOW_MS * NS_PER_MS + 999_999  # the clock between two milliseconds
TERMS = {
    "start_ms": NOW_MS - 7_200_000,
    "planned_ms": 3_600_000,
    "pue_milli": 1120,
    "tariff_micro_per_kwh": 210_000,
    "capacity_micro_per_gpu_hour": 1_200_000,
    "attributed_power_mw": {"GPU-a": 300_000, "GPU-b": 250_000},
}
BILLED_MS = TERMS["start_ms"] + 600_000


def lease(**changes: Any) -> dict[str, Any]:
    record = {
        "lease_id": "L1",
        "terms": copy.deepcopy(TERMS),
        "migrations": [],
        "billing": {"next_seq": 2, "billed_until_ms": BILLED_MS, "final": False},
    }
    return {**record, **changes}


def request(**changes: Any) -> dict[str, Any]:
    req = {"interval_seq": 2, "start_ms": BILLED_MS, "end_ms": BILLED_MS + 60_000, "final": False}
    return {**req, **changes}


# -- check_sequence --


def test_the_next_line_is_accepted_up_to_the_ledgers_clock():
    billing.check_sequence(lease(), request(), NOW_NS)
    billing.check_sequence(lease(), request(end_ms=NOW_MS), NOW_NS)
    billing.check_sequence(lease(), request(end_ms=BILLED_MS), NOW_NS)  # an empty line
    assert refusal(billing.check_sequence, lease(), request(end_ms=NOW_MS + 1), NOW_NS) == (
        f"[settle.outside] lease L1: end_ms {NOW_MS + 1} is after the ledger clock ({NOW_MS})"
    )


def test_a_lease_recorded_without_terms_or_billing_has_no_bill():
    for missing in ("billing", "terms"):
        record = lease()
        del record[missing]
        assert refusal(billing.check_sequence, record, request(), NOW_NS) == (
            "[settle.terms] lease L1 was recorded without terms (before bills)"
        )


def test_nothing_follows_the_final_line():
    record = lease(billing={"next_seq": 2, "billed_until_ms": BILLED_MS, "final": True})
    assert refusal(billing.check_sequence, record, request(), NOW_NS) == (
        "[settle.after_final] lease L1 was settled to its end already"
    )


def test_each_rule_of_the_sequence_names_the_figures():
    assert refusal(billing.check_sequence, lease(), request(interval_seq=3), NOW_NS) == (
        "[settle.sequence] lease L1: interval_seq 3 is not the next, 2"
    )
    assert refusal(billing.check_sequence, lease(), request(interval_seq=1), NOW_NS) == (
        "[settle.sequence] lease L1: interval_seq 1 is not the next, 2"
    )
    early = request(start_ms=BILLED_MS - 1)
    assert refusal(billing.check_sequence, lease(), early, NOW_NS) == (
        f"[settle.overlap] lease L1: start_ms {BILLED_MS - 1} < billed until {BILLED_MS}"
    )
    late = request(start_ms=BILLED_MS + 1)
    assert refusal(billing.check_sequence, lease(), late, NOW_NS) == (
        f"[settle.gap] lease L1: start_ms {BILLED_MS + 1} > billed until {BILLED_MS}"
    )
    backwards = request(end_ms=BILLED_MS - 1)
    assert refusal(billing.check_sequence, lease(), backwards, NOW_NS) == (
        f"[settle.interval] lease L1: end_ms {BILLED_MS - 1} < start_ms {BILLED_MS}"
    )


def test_an_ended_lease_is_billed_to_its_end_not_to_the_clock():
    end_ms = BILLED_MS + 120_000
    by_end_ms = lease(ended_ns=NOW_MS * NS_PER_MS, ended_ms=end_ms)
    billing.check_sequence(by_end_ms, request(end_ms=end_ms), NOW_NS)
    assert refusal(billing.check_sequence, by_end_ms, request(end_ms=end_ms + 1), NOW_NS) == (
        f"[settle.outside] lease L1: end_ms {end_ms + 1} is after its end ({end_ms})"
    )
    # recorded before EndLease carried an end: the time of its EndLease
    by_time = lease(ended_ns=end_ms * NS_PER_MS + 500_000)
    billing.check_sequence(by_time, request(end_ms=end_ms), NOW_NS)
    assert refusal(billing.check_sequence, by_time, request(end_ms=end_ms + 1), NOW_NS) == (
        f"[settle.outside] lease L1: end_ms {end_ms + 1} is after its end ({end_ms})"
    )
    explicit_none = lease(ended_ns=end_ms * NS_PER_MS, ended_ms=None)
    billing.check_sequence(explicit_none, request(end_ms=end_ms), NOW_NS)
    assert refusal(billing.check_sequence, explicit_none, request(end_ms=end_ms + 1), NOW_NS)


# -- end_of: EndLease's end --


def test_an_end_not_given_is_the_clock_or_what_the_lease_billed_if_later():
    assert billing.end_of(lease(), {}, NOW_NS) == NOW_MS
    ahead = lease(billing={"next_seq": 2, "billed_until_ms": NOW_MS + 5, "final": False})
    assert billing.end_of(ahead, {}, NOW_NS) == NOW_MS + 5
    migrated = lease(terms={**TERMS, "start_ms": NOW_MS + 7})
    assert billing.end_of(migrated, {}, NOW_NS) == NOW_MS + 7


def test_an_end_given_lies_between_what_the_lease_billed_and_the_clock():
    assert billing.end_of(lease(), {"end_ms": BILLED_MS}, NOW_NS) == BILLED_MS
    assert billing.end_of(lease(), {"end_ms": NOW_MS}, NOW_NS) == NOW_MS
    for end_ms in (BILLED_MS - 1, NOW_MS + 1):
        assert refusal(billing.end_of, lease(), {"end_ms": end_ms}, NOW_NS) == (
            f"[lease.end] end_ms {end_ms} of lease L1 is not within [{BILLED_MS}, {NOW_MS}]: "
            "not before what it billed or its terms' start, not after the ledger's clock"
        )
    # after a migration: not before the new terms' start, although the bill is behind it
    migrated = lease(terms={**TERMS, "start_ms": BILLED_MS + 10})
    assert billing.end_of(migrated, {"end_ms": BILLED_MS + 10}, NOW_NS) == BILLED_MS + 10
    assert refusal(billing.end_of, migrated, {"end_ms": BILLED_MS + 9}, NOW_NS).startswith(
        f"[lease.end] end_ms {BILLED_MS + 9} of lease L1 is not within [{BILLED_MS + 10}, "
    )
    # the lowest time the terms allow (parse_terms: start_ms from 0) is an end too
    epoch = lease(terms={**TERMS, "start_ms": 0},
                  billing={"next_seq": 0, "billed_until_ms": 0, "final": False})  # fmt: skip
    assert billing.end_of(epoch, {"end_ms": 0}, NOW_NS) == 0
    with pytest.raises(ValueError, match=r"end_ms: must be an integer"):
        billing.end_of(lease(), {"end_ms": float(NOW_MS)}, NOW_NS)


# -- check_measurement: energy the boards could draw --


def test_measured_energy_may_reach_the_boards_limit_and_not_pass_it():
    duration = 60_000
    limit = money.energy_limit_mj(400, 2, duration)
    assert limit == 400 * 2 * duration * 105 // 100
    at = request(end_ms=BILLED_MS + duration, measured_mj=limit)
    billing.check_measurement(TERMS, 400, at)
    assert refusal(billing.check_measurement, TERMS, 400, {**at, "measured_mj": limit + 1}) == (
        f"[settle.energy] measured_mj {limit + 1} exceeds board power 400 W x 2 GPUs x "
        f"{duration} ms + 5 % = {limit}"
    )


# -- line_of: the contract's amounts, the request's only compared --


def stated(**changes: Any) -> dict[str, Any]:
    req = request(
        measured_mj=7_000_000,
        **{name: TERMS[name] for name in ("tariff_micro_per_kwh", "pue_milli")},
        capacity_micro_per_gpu_hour=TERMS["capacity_micro_per_gpu_hour"],
    )
    line = money.interval_line(
        money.Terms.of(TERMS), req["start_ms"], req["end_ms"], req["measured_mj"]
    )
    return {**req, **line.as_dict(), **changes}


def test_a_line_stating_the_contracts_amounts_is_the_contracts_line():
    line = billing.line_of(TERMS, stated())
    assert line == money.interval_line(money.Terms.of(TERMS), BILLED_MS, BILLED_MS + 60_000,
                                       7_000_000)  # fmt: skip
    assert line.capacity_micro == 2 * 1_200_000 // 60  # two GPUs for one minute


@pytest.mark.parametrize(
    "name", ["tariff_micro_per_kwh", "pue_milli", "capacity_micro_per_gpu_hour"]
)
def test_a_rate_other_than_the_terms_is_refused(name):
    assert refusal(billing.line_of, TERMS, stated(**{name: TERMS[name] + 1})) == (
        f"[settle.rate] {name} {TERMS[name] + 1} is not the lease's term {TERMS[name]}"
    )


def test_every_amount_other_than_the_contracts_is_named():
    right = stated()
    wrong = stated(capacity_micro=right["capacity_micro"] + 1, total_micro=0)
    assert refusal(billing.line_of, TERMS, wrong) == (
        f"[settle.amount] capacity_micro {right['capacity_micro'] + 1} (expected "
        f"{right['capacity_micro']}), total_micro 0 (expected {right['total_micro']})"
    )
    more = stated(measured_mj=70_000_000)  # the energy changed, the amounts not recomputed
    assert refusal(billing.line_of, TERMS, more).startswith("[settle.amount] measured_energy_micro")


def test_advance_moves_the_bill_past_the_line():
    record = lease()
    billing.advance(record, request(final=True))
    assert record["billing"] == {
        "next_seq": 3,
        "billed_until_ms": BILLED_MS + 60_000,
        "final": True,
    }
