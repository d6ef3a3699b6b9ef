"""`ledger audit-bill` on a Fabric channel's receipts (blocks written at run time, signed by
generated orderer and peer keys): the auditor picks the Fabric verifier by the receipt's
format, reads the bill line from the Settle transaction's endorsed write and compares it as
for embedded receipts (tests/webapp/leasing/test_migration.py runs those end to end; the real Fabric
network's end to end is tests/webapp/leasing/test_fabric_receipts.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.__main__ import main
from ledger.audit.bill import audit_bill
from ledger.audit.fabric_trust import format_roots
from tests.ledger.fabric_chain import Channel
from tests.ledger.fabric_stories import LEASE, Story, lease_story, settle_request
from tests.ledger.helpers import bill_line, bill_of


@pytest.fixture(scope="module")
def story() -> Story:
    return lease_story()


def settle_tx(story: Story) -> str:
    return next(
        t["tx_id"] for t in story.receipt["transactions"] if t["block"] == 3 and t["index"] == 1
    )


def write(tmp_path: Path, story: Story, line: dict, roots: bytes) -> tuple[Path, Path, Path]:
    receipts = tmp_path / "receipts"
    receipts.mkdir(exist_ok=True)
    (receipts / f"{LEASE}.json").write_text(json.dumps(story.receipt))
    bill, trust = tmp_path / "bill.json", tmp_path / "roots.pem"
    total = line.get("total_micro") if isinstance(line, dict) else None
    bill.write_text(json.dumps({**bill_of([]), "lines": [line], "count": 1, "total_micro": total}))
    trust.write_bytes(roots)
    return bill, receipts, trust


def test_a_bill_line_holds_on_its_fabric_receipt(story, tmp_path, capsys):
    bill, receipts, trust = write(
        tmp_path, story, bill_line(settle_request(), settle_tx(story)), story.roots
    )
    verdict = audit_bill(bill, receipts, trust)[0]
    assert verdict.ok, verdict
    command = ["audit-bill", str(bill), "--receipts", str(receipts), "--trust", str(trust)]
    assert main([*command, "--tenant", "tenant-a"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"lease {LEASE} line 0: OK",
        "1 of 1 lines hold",
    ]


@pytest.mark.parametrize(
    ("field", "delta"), [("total_micro", 1), ("capacity_micro", -1), ("measured_energy_mj", 1)]
)
def test_an_altered_amount_fails_naming_the_field(story, tmp_path, field, delta):
    line = bill_line(settle_request(), settle_tx(story))
    truth = line[field]
    line[field] += delta
    verdict = audit_bill(*write(tmp_path, story, line, story.roots))[0]
    assert verdict.reasons == [
        f"[bill.field] {field} {truth + delta} differs from the ledger's {truth}"
    ]


def test_a_line_naming_a_transaction_that_is_no_settle_fails(story, tmp_path):
    created = story.receipt["transactions"][0]["tx_id"]  # CreateLease
    verdict = audit_bill(
        *write(tmp_path, story, bill_line(settle_request(), created), story.roots)
    )[0]

    assert verdict.reasons == [f"[bill.not_settle] tx {created} is not a valid Settle"]


def test_another_channels_roots_fail_every_line(story, tmp_path):
    line = bill_line(settle_request(), settle_tx(story))
    verdict = audit_bill(*write(tmp_path, story, line, Channel().roots_pem()))[0]
    assert any("no valid orderer signature" in r for r in verdict.reasons), verdict
    assert any("not issued by Org1MSP's trust root" in r for r in verdict.reasons), verdict


def test_roots_without_an_orderer_cannot_check_a_fabric_receipt(story, tmp_path):
    """The organisations' CAs alone (what serves an embedded receipt) leave a Fabric block's
    orderer signature unchecked: the line fails and says what the auditor must bring."""
    orgs = {m: org.pem for m, org in story.channel.orgs.items()}
    orgs_only = format_roots("wattlease", "wattlease", {}, orgs)
    line = bill_line(settle_request(), settle_tx(story))
    verdict = audit_bill(*write(tmp_path, story, line, orgs_only.encode()))[0]
    assert len(verdict.reasons) == 1
    assert (
        "a Fabric receipt needs the channel's roots file, orderers included" in verdict.reasons[0]
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    field=st.sampled_from(["lease", "seq", "interval", "evidence", "total_micro", "final", None]),
    value=json_values,
)
def test_any_json_in_a_bill_line_gives_a_verdict_never_a_crash(
    story, tmp_path_factory, field, value
):
    line = bill_line(settle_request(), settle_tx(story))
    item = value if field is None else {**line, field: value}
    folder = tmp_path_factory.mktemp("bill")
    verdict = audit_bill(*write(folder, story, item, story.roots))[0]
    assert all(isinstance(r, str) for r in verdict.reasons)
    if field in ("lease", "seq", "interval", "evidence") and value != line[field]:
        assert not verdict.ok


def test_a_lease_id_that_is_a_path_is_not_a_bill_line(story, tmp_path):
    line = {**bill_line(settle_request(), settle_tx(story)), "lease": "../receipts/lease-1"}
    verdict = audit_bill(*write(tmp_path, story, line, story.roots))[0]
    assert verdict.reasons == [
        "[bill.line_shape] not a bill line: it needs lease (a ledger id), seq (an integer >= 0), "
        "interval and evidence (objects)"
    ]


def test_readings_no_quote_in_the_receipt_attested_fail_the_line(tmp_path):
    story = lease_story(attests_readings=False)
    bill, receipts, trust = write(
        tmp_path, story, bill_line(settle_request(), settle_tx(story)), story.roots
    )
    verdict = audit_bill(bill, receipts, trust)[0]
    assert not verdict.ok
    assert any("no quote in the receipt attested it" in r for r in verdict.reasons), verdict
