"""`audit-bill` audits the bill, not only its lines (docs/threat-model.md, rows B1-B6).

The web app serves the bill; an organisation whose web app it is could list a line twice,
inflate the total, edit a line's rates, generation or validation code, put another tenant's
line on it or drop one. Each is refused with its reason code, on receipts of a real embedded
ledger (tests/adversary/conftest.py)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaincode_client.interface import REASON_RE
from ledger.audit.bill import LineVerdict, audit_bill
from tests.adversary.conftest import TENANT_A, TENANT_B, Billed, write_audit_inputs

ROOT = Path(__file__).resolve().parents[2]


def audit(
    billed: Billed, folder: Path, bill: dict[str, Any], tenant: str = TENANT_A, leases=None
) -> list[LineVerdict]:
    receipts = {lease: billed.receipt(lease) for lease in leases or ("L1", "L2")}
    paths = write_audit_inputs(folder, bill, receipts, billed.roots)
    return audit_bill(*paths, tenant=tenant)


def codes(verdicts: list[LineVerdict]) -> set[str]:
    """Every reason code the verdicts carry (the first `[code]` of each reason)."""
    found = set()
    for verdict in verdicts:
        for reason in verdict.reasons:
            match = REASON_RE.search(reason)
            assert match, f"a reason without a code: {reason}"
            found.add(match.group(1))
    return found


def bill_reasons(verdicts: list[LineVerdict]) -> list[str]:
    return [r for v in verdicts if v.lease == "bill" for r in v.reasons]


def test_the_honest_bill_holds(billed, tmp_path):
    verdicts = audit(billed, tmp_path, billed.bill(TENANT_A, ["L1"]))
    assert [v.ok for v in verdicts] == [True, True], [str(v) for v in verdicts]
    paths = write_audit_inputs(
        tmp_path / "cli",
        billed.bill(TENANT_A, ["L1"]),
        {"L1": billed.receipt("L1")},
        billed.roots,
    )
    done = _cli(paths, TENANT_A)
    assert done.returncode == 0 and "2 of 2 lines hold" in done.stdout, done.stdout


def test_a_line_listed_twice_is_refused(billed, tmp_path):
    bill = billed.bill(TENANT_A, ["L1"])
    bill["lines"].append(copy.deepcopy(bill["lines"][1]))
    bill["count"] += 1
    bill["total_micro"] += bill["lines"][1]["total_micro"]
    verdicts = audit(billed, tmp_path, bill)
    assert codes(verdicts) == {"bill.duplicate_line"}, bill_reasons(verdicts)
    inputs = write_audit_inputs(tmp_path / "cli", bill, {"L1": billed.receipt("L1")}, billed.roots)
    done = _cli(inputs, TENANT_A)
    assert done.returncode == 1 and "bill: FAIL: [bill.duplicate_line]" in done.stdout, done.stdout


def test_a_total_ten_times_its_lines_is_refused(billed, tmp_path):
    bill = billed.bill(TENANT_A, ["L1"])
    bill["total_micro"] *= 10
    verdicts = audit(billed, tmp_path, bill)
    assert codes(verdicts) == {"bill.total"}, bill_reasons(verdicts)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("rates", "capacity_micro_per_gpu_hour"), 1),
        (("rates", "tariff_micro_per_kwh"), 1),
        (("rates", "pue_milli"), 1000),
        (("generation",), "A100-SXM4-80GB"),
        (("evidence", "validation_code"), "MVCC_READ_CONFLICT"),
        (("evidence", "block"), 1),
        (("measured_energy_mj",), 1),
        (("interval", "end_ms"), 1),
    ],
)
def test_an_edited_field_is_refused(billed, tmp_path, path, value):
    bill = billed.bill(TENANT_A, ["L1"])
    target = bill["lines"][1]
    for key in path[:-1]:
        target = target[key]
    assert target[path[-1]] != value
    target[path[-1]] = value
    verdicts = audit(billed, tmp_path, bill)
    assert not verdicts[1].ok and verdicts[0].ok
    assert codes([verdicts[1]]) == {"bill.field"}, verdicts[1]
    assert any(r.startswith(f"[bill.field] {'.'.join(path)} ") for r in verdicts[1].reasons)


def test_rates_that_are_not_an_object_are_refused_whole(billed, tmp_path):
    bill = billed.bill(TENANT_A, ["L1"])
    bill["lines"][1]["rates"] = "cheap"
    verdicts = audit(billed, tmp_path, bill)
    assert verdicts[1].reasons == ["[bill.field] rates cheap differs from the ledger's an object"]


def test_a_line_pointing_at_another_lines_settle_or_at_no_transaction_is_refused(billed, tmp_path):
    bill = billed.bill(TENANT_A, ["L1"])
    first_tx = bill["lines"][0]["evidence"]["tx_id"]
    bill["lines"][1]["evidence"]["tx_id"] = first_tx
    verdicts = audit(billed, tmp_path / "other", bill)
    assert verdicts[1].reasons == [
        f"[bill.other_line] tx {first_tx} settled L1 line 0, not this one"
    ]
    bill["lines"][1]["evidence"]["tx_id"] = [first_tx]
    verdicts = audit(billed, tmp_path / "none", bill)
    assert verdicts[1].reasons == [
        f"[bill.not_settle] the receipt has no transaction {[first_tx]!r}"
    ]


def test_a_line_of_another_tenants_lease_is_refused(billed, tmp_path):
    bill = billed.bill(TENANT_A, ["L1"])
    other = billed.bill(TENANT_B, ["L2"])["lines"][0]  # its receipt beside the others
    bill["lines"].append(other)
    bill["count"] += 1
    bill["total_micro"] += other["total_micro"]
    verdicts = audit(billed, tmp_path, bill)
    assert [v.ok for v in verdicts[:3]] == [True, True, True]  # each line is on the ledger
    assert codes(verdicts) == {"bill.tenant"}
    assert bill_reasons(verdicts) == [
        f"[bill.tenant] lease L2 is tenant {TENANT_B!r}'s on the ledger"
    ]


def test_a_bill_of_another_tenant_than_the_one_named_is_refused(billed, tmp_path):
    verdicts = audit(billed, tmp_path, billed.bill(TENANT_B, ["L2"]), tenant=TENANT_A)
    assert codes(verdicts) == {"bill.tenant"}
    assert len(bill_reasons(verdicts)) == 2  # the bill names tenant-b; so does its lease


def test_a_dropped_line_is_refused(billed, tmp_path):
    bill = billed.bill(TENANT_A, ["L1"])
    dropped = bill["lines"].pop(0)
    bill["count"] -= 1
    bill["total_micro"] -= dropped["total_micro"]
    verdicts = audit(billed, tmp_path, bill)
    assert codes(verdicts) == {"bill.dropped_line"}, [str(v) for v in verdicts]
    assert bill_reasons(verdicts) == ["[bill.dropped_line] lease L1 line 0 is not on the bill"]


def test_a_line_outside_the_bills_period_is_refused(billed, tmp_path):
    bill = billed.bill(TENANT_A, ["L1"])
    first, second = bill["lines"]
    ended = first["interval"]["end_ms"]
    bill["period"] = {"start_ms": ended + 1, "end_ms": None}  # line 0 ended before it
    verdicts = audit(billed, tmp_path, bill)
    assert bill_reasons(verdicts) == [
        f"[bill.outside_period] lease L1 line 0 ends at {ended}, outside the bill's period"
    ]
    # the same period without that line holds
    bill["lines"], bill["count"], bill["total_micro"] = [second], 1, second["total_micro"]
    assert all(v.ok for v in audit(billed, tmp_path / "2", bill))


def test_a_lease_without_a_receipt_is_refused(billed, tmp_path):
    verdicts = audit(billed, tmp_path, billed.bill(TENANT_A, ["L1"]), leases=["L2"])
    assert codes(verdicts) == {"bill.no_receipt"}
    assert "[bill.no_receipt] lease L1 has no usable receipt" in bill_reasons(verdicts)


def _cli(paths: tuple[Path, Path, Path], tenant: str) -> subprocess.CompletedProcess:
    bill, receipts, roots = paths
    command = [sys.executable, "-m", "ledger", "audit-bill", str(bill), "--receipts"]
    command += [str(receipts), "--trust", str(roots), "--tenant", tenant]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
