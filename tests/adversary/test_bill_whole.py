"""The checks of a bill as a whole (ledger.audit.bill_whole), rule by rule, on bills and
receipt transactions written out by hand: what tests/adversary/test_audit_bill.py does on a
real embedded ledger, here for every edge a mutant of a rule let through there (docs/
threat-model.md, "Mutation testing": a migrated lease, a closed period, a line listed three
times, a wrong count, the as-of cut-off)."""

from __future__ import annotations

import json
from typing import Any

from ledger.audit.bill_whole import LeaseLines, bill_defects, lease_lines
from ledger.audit.receipt import ReceiptTx
from ledger.contract.state import LEASE, settlements_prefix

TENANT = "acme"
OTHER = "globex"


def record(lease: str, seq: int, start: int, end: int, at_ns: int = 0) -> dict[str, Any]:
    return {
        "lease_id": lease,
        "interval_seq": seq,
        "start_ms": start,
        "end_ms": end,
        "timestamp_ns": at_ns,
    }


def settle(lease: str, seq: int, start: int, end: int, at: tuple[int, int]) -> ReceiptTx:
    key = settlements_prefix(lease) + f"{seq:012d}\x00"
    return ReceiptTx("Settle", True, {key: json.dumps(record(lease, seq, start, end)).encode()}, at)


def lease_write(doc: dict[str, Any], at: tuple[int, int], valid: bool = True) -> ReceiptTx:
    return ReceiptTx("CreateLease", valid, {LEASE + "L1": json.dumps(doc).encode()}, at)


def shown(*lines: tuple[int, int, int], start: int = 0, tenant: str = TENANT, at_ns: int = 0):
    """A lease's ledger lines (seq, start, end), as lease_lines returns them."""
    return LeaseLines(
        tenant=tenant,
        start_ms=start,
        lines={
            seq: (f"tx{seq}", record("L1", seq, begin, end, at_ns)) for seq, begin, end in lines
        },
    )


def bill(
    *items: tuple[str, int, int],
    tenant: str = TENANT,
    period: tuple[int | None, int | None] = (None, None),
    as_of_ms: int = 10**6,
    **extra: Any,
) -> dict[str, Any]:
    """A bill of lines (lease, seq, total_micro), its total their sum unless given."""
    lines = [
        {"lease": lease, "seq": seq, "total_micro": total, "evidence": {"tx_id": f"{lease}-{seq}"}}
        for lease, seq, total in items
    ]
    return {
        "tenant": tenant,
        "total_micro": sum(total for _, _, total in items),
        "lines": lines,
        "period": {"start_ms": period[0], "end_ms": period[1]},
        "as_of_ms": as_of_ms,
        **extra,
    }


# -- what a receipt shows of a lease -----------------------------------------------------


def test_the_latest_valid_lease_record_names_the_tenant_whatever_the_order():
    first = lease_write({"tenant": OTHER, "terms": {"start_ms": 5}}, (1, 0))
    latest = lease_write({"tenant": TENANT, "terms": {"start_ms": 5}}, (2, 0))
    forged = lease_write({"tenant": "mallory", "terms": {"start_ms": 1}}, (3, 0), valid=False)
    for order in ([first, latest, forged], [forged, latest, first]):
        found = lease_lines("L1", {f"t{i}": tx for i, tx in enumerate(order)})
        assert (found.tenant, found.start_ms) == (TENANT, 5)


def test_a_migrated_lease_is_billed_from_its_first_terms():
    moved = {
        "tenant": TENANT,
        "terms": {"start_ms": 500},
        "migrations": [{"terms": {"start_ms": 100}}, {"terms": {"start_ms": 500}}],
    }
    found = lease_lines("L1", {"t": lease_write(moved, (1, 0))})
    assert found.start_ms == 100


def test_a_lease_record_whose_terms_are_no_object_has_no_start():
    for terms in ([], "soon", None):
        found = lease_lines("L1", {"t": lease_write({"tenant": TENANT, "terms": terms}, (1, 0))})
        assert (found.tenant, found.start_ms) == (TENANT, None), terms


def test_only_valid_settles_of_this_lease_are_its_lines():
    txs = {
        "s0": settle("L1", 0, 0, 10, (1, 0)),
        "s1": settle("L1", 1, 10, 20, (2, 0)),
        "other": settle("L2", 2, 0, 10, (2, 1)),
        "invalid": ReceiptTx("Settle", False, settle("L1", 3, 20, 30, (3, 0)).writes, (3, 0)),
        "not-a-settle": ReceiptTx("CreateLease", True, settle("L1", 4, 30, 40, (4, 0)).writes),
    }
    found = lease_lines("L1", txs)
    assert {seq: tx for seq, (tx, _) in found.lines.items()} == {0: "s0", 1: "s1"}
    assert found.tenant is None and found.start_ms is None  # no lease record in the receipt


LINES = shown((0, 0, 10), (1, 10, 20))  # lease L1's two lines on the ledger


# -- the bill's own arithmetic -----------------------------------------------------------


def test_an_honest_bill_has_no_defect():
    assert bill_defects(bill(("L1", 0, 7), ("L1", 1, 8), count=2), TENANT, {"L1": LINES}) == []
    assert bill_defects(bill(("L1", 0, 7), ("L1", 1, 8)), None, {"L1": LINES}) == []


def test_a_total_that_is_not_the_sum_of_the_lines():
    inflated = bill(("L1", 0, 7), ("L1", 1, 8))
    inflated["total_micro"] = 150
    assert bill_defects(inflated, TENANT, {"L1": LINES}) == [
        "[bill.total] total_micro 150 is not the sum of its lines, 15"
    ]


def test_a_line_total_that_is_not_an_integer():
    for wrong in ("7", True, 7.0):
        odd = bill(("L1", 0, 7), ("L1", 1, 8))
        odd["lines"][1]["total_micro"] = wrong
        assert bill_defects(odd, TENANT, {"L1": LINES}) == [
            "[bill.total] a line's total_micro is not an integer"
        ], wrong


def test_a_count_that_is_not_the_number_of_lines():
    assert bill_defects(bill(("L1", 0, 7), ("L1", 1, 8), count=3), TENANT, {"L1": LINES}) == [
        "[bill.count] count 3 but 2 lines"
    ]


def test_a_line_listed_three_times_and_one_transaction_named_twice():
    thrice = bill(("L1", 0, 7), ("L1", 0, 7), ("L1", 0, 7), ("L1", 1, 8))
    assert bill_defects(thrice, TENANT, {"L1": LINES}) == [
        "[bill.duplicate_line] lease L1 line 0 is listed 3 times",
        "[bill.duplicate_line] transaction L1-0 is named by 3 lines",
    ]
    borrowed = bill(("L1", 0, 7), ("L1", 1, 8))
    borrowed["lines"][1]["evidence"]["tx_id"] = "L1-0"  # line 1 cites line 0's Settle
    assert bill_defects(borrowed, TENANT, {"L1": LINES}) == [
        "[bill.duplicate_line] transaction L1-0 is named by 2 lines"
    ]


def test_a_line_listed_twice():
    twice = bill(("L1", 0, 7), ("L1", 0, 7), ("L1", 1, 8))
    assert bill_defects(twice, TENANT, {"L1": LINES}) == [
        "[bill.duplicate_line] lease L1 line 0 is listed 2 times",
        "[bill.duplicate_line] transaction L1-0 is named by 2 lines",
    ]


def test_lines_without_evidence_or_a_transaction_id_are_not_duplicates():
    plain = bill(("L1", 0, 7), ("L1", 1, 8))
    plain["lines"][0]["evidence"] = "none"
    plain["lines"][1]["evidence"] = {"tx_id": None}
    assert bill_defects(plain, TENANT, {"L1": LINES}) == []
    # an id of any other type names no transaction, however often, and breaks nothing
    for other in (["L1-0"], {"id": "L1-0"}, 7):
        odd = bill(("L1", 0, 7), ("L1", 1, 8))
        for line in odd["lines"]:
            line["evidence"]["tx_id"] = other
        assert bill_defects(odd, TENANT, {"L1": LINES}) == []


def test_a_bill_of_the_wrong_shape_is_named_field_by_field():
    assert bill_defects({"tenant": TENANT}, TENANT, {}) == [
        "[bill.shape] total_micro: must be a int",
        "[bill.shape] lines: must be a list",
        "[bill.shape] period: must be a dict",
        "[bill.shape] as_of_ms: must be a int",
    ]
    assert bill_defects(bill(("L1", 0, 7), as_of_ms=True), TENANT, {"L1": LINES}) == [
        "[bill.shape] as_of_ms: must be a int"
    ]
    assert bill_defects([], TENANT, {})[0] == "[bill.shape] tenant: must be a str"


# -- whose leases --------------------------------------------------------------------------


def test_a_bill_of_another_tenant_and_a_lease_of_another_tenant():
    assert bill_defects(bill(("L1", 0, 7), ("L1", 1, 8)), OTHER, {"L1": LINES}) == [
        f"[bill.tenant] the bill is of tenant {TENANT!r}, not {OTHER!r}",
        f"[bill.tenant] lease L1 is tenant {TENANT!r}'s on the ledger",
    ]
    theirs = shown((0, 0, 10), (1, 10, 20), tenant=OTHER)
    assert bill_defects(bill(("L1", 0, 7), ("L1", 1, 8)), None, {"L1": theirs}) == [
        f"[bill.tenant] lease L1 is tenant {OTHER!r}'s on the ledger"
    ]


def test_a_lease_without_a_receipt():
    assert bill_defects(
        bill(("L1", 0, 7), ("L1", 1, 8), ("L2", 0, 1)), TENANT, {"L1": LINES, "L2": None}
    ) == ["[bill.no_receipt] lease L2 has no usable receipt"]
    # a lease without one does not end the audit: the next lease is still checked
    theirs = shown((0, 0, 10), (1, 10, 20), tenant=OTHER)
    assert bill_defects(
        bill(("L0", 0, 1), ("L1", 0, 7), ("L1", 1, 8)), TENANT, {"L0": None, "L1": theirs}
    ) == [
        "[bill.no_receipt] lease L0 has no usable receipt",
        f"[bill.tenant] lease L1 is tenant {OTHER!r}'s on the ledger",
    ]


# -- the period, the cut-off and the lines the ledger holds ---------------------------------


def test_a_closed_period_takes_the_lines_ending_inside_it_its_end_excluded():
    lines = shown((0, 0, 100), (1, 100, 150), (2, 150, 200))
    month = (100, 200)
    honest = bill(("L1", 0, 1), ("L1", 1, 1), period=month)
    assert bill_defects(honest, TENANT, {"L1": lines}) == []
    shifted = bill(("L1", 1, 1), ("L1", 2, 1), period=month)
    assert bill_defects(shifted, TENANT, {"L1": lines}) == [
        "[bill.dropped_line] lease L1 line 0 is not on the bill",
        "[bill.outside_period] lease L1 line 2 ends at 200, outside the bill's period",
    ]
    before = bill(("L1", 0, 1), period=(None, 150))
    assert bill_defects(before, TENANT, {"L1": lines}) == []
    after = bill(("L1", 1, 1), ("L1", 2, 1), period=(101, None))
    assert bill_defects(after, TENANT, {"L1": lines}) == []


def test_a_line_recorded_after_the_bill_was_made_may_be_missing_from_it():
    ms = 1_000_000  # ns
    for recorded_ns, dropped in ((5 * ms, True), (5 * ms + 1, False)):
        lines = shown((0, 0, 10), (1, 10, 20), at_ns=recorded_ns)
        found = bill_defects(bill(("L1", 0, 1), as_of_ms=5), TENANT, {"L1": lines})
        assert found == (["[bill.dropped_line] lease L1 line 1 is not on the bill"] * dropped)


def test_a_line_without_a_recording_time_counts_as_recorded_before_any_bill():
    lines = shown((0, 0, 10), (1, 10, 20))
    del lines.lines[1][1]["timestamp_ns"]
    assert bill_defects(bill(("L1", 0, 1), as_of_ms=0), TENANT, {"L1": lines}) == [
        "[bill.dropped_line] lease L1 line 1 is not on the bill"
    ]


def test_a_line_whose_seq_is_not_an_integer_is_not_counted_as_billing_a_line():
    odd = bill(("L1", 0, 7), ("L1", 1, 8))
    odd["lines"][1]["seq"] = True  # would be line 1 if a bool counted
    assert bill_defects(odd, TENANT, {"L1": LINES}) == [
        "[bill.dropped_line] lease L1 line 1 is not on the bill"
    ]


# -- the ledger's lines of a lease are contiguous from its start --------------------------


def test_a_missing_line_is_a_gap_named_once():
    gapped = shown((0, 0, 10), (2, 20, 30), (3, 30, 40))
    assert bill_defects(bill(("L1", 0, 1)), TENANT, {"L1": gapped})[:1] == [
        "[bill.gap] lease L1: the ledger shows line 2, not 1"
    ]
    assert (
        sum("[bill.gap]" in d for d in bill_defects(bill(("L1", 0, 1)), TENANT, {"L1": gapped}))
        == 1
    )


def test_lines_that_do_not_start_where_the_lease_was_billed_until():
    late = shown((0, 5, 10), (1, 12, 20), start=0)
    assert bill_defects(bill(("L1", 0, 1), ("L1", 1, 1)), TENANT, {"L1": late}) == [
        "[bill.gap] lease L1 line 0 starts at 5, not where the lease was billed until (0)",
        "[bill.gap] lease L1 line 1 starts at 12, not where the lease was billed until (10)",
    ]
