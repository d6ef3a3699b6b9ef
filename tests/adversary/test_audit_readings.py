"""`audit-bill --readings`: the readings behind each line (the canonical rows of the attested
batches it cites, as `GET /api/v1/leases/<id>/readings/?seq=N` serves them) re-hash to the
ledger's batches and add up to the line's measured energy. A web app that serves a tenant
other readings than the quote bound (to make a bill look right, or to hide what was drawn)
is named line by line, with each difference (docs/threat-model.md, row B7)."""

from __future__ import annotations

from pathlib import Path

from attest import readings
from ledger.audit.bill import LineVerdict, audit_bill
from tests.adversary.conftest import HALF_HOUR_MS, LINE_MJ, TENANT_A, Billed, write_audit_inputs
from tests.ledger.helpers import counter_readings


def honest_rows(billed: Billed) -> str:
    """GPU-a's attested batch, which both lines of L1 cite (tests/adversary/conftest.py)."""
    start = billed.lines["L1"][0]["interval"]["start_ms"]
    points = [(start + k * HALF_HOUR_MS, k * LINE_MJ // 2) for k in range(4)]
    return counter_readings(["GPU-a"], points)["GPU-a"]


def audit_with(billed: Billed, folder: Path, texts: dict[int, str]) -> list[LineVerdict]:
    """audit-bill of tenant-a's bill (L1's two lines) with readings/L1/<seq>.csv = texts."""
    paths = write_audit_inputs(
        folder, billed.bill(TENANT_A, ["L1"]), {"L1": billed.receipt("L1")}, billed.roots
    )
    (folder / "readings" / "L1").mkdir(parents=True)
    for seq, text in texts.items():
        (folder / "readings" / "L1" / f"{seq}.csv").write_text(text)
    return audit_bill(*paths, readings=folder / "readings", tenant=TENANT_A)


def test_the_readings_the_quote_bound_hold_for_every_line(billed, tmp_path):
    rows = honest_rows(billed)
    verdicts = audit_with(billed, tmp_path, {0: rows, 1: rows})
    assert [(v.seq, v.reasons) for v in verdicts] == [(0, []), (1, [])]
    assert [str(v) for v in verdicts] == ["lease L1 line 0: OK", "lease L1 line 1: OK"]


def test_readings_other_than_the_quote_bound_are_named_with_each_difference(billed, tmp_path):
    rows = honest_rows(billed)
    lines = rows.splitlines(keepends=True)
    # the reading at the line's end raised by half an hour's energy
    raised = "".join(lines[:2]) + lines[2].replace(f",{LINE_MJ},", f",{LINE_MJ * 3 // 2},")
    raised += "".join(lines[3:])
    verdicts = audit_with(billed, tmp_path, {0: raised, 1: rows})
    [batch] = billed.lines["L1"][0]["telemetry_batches"]
    got = readings.gpu_digest(raised.splitlines())
    assert verdicts[0].reasons == [
        f"[bill.readings] readings hash to other batches than the ledger's: GPU GPU-a batch "
        f"{batch['digest'][:16]}...: the readings hash to {got[:16]}... over 4 rows, the "
        "ledger has 4 rows",
        f"[bill.readings] readings add up to {LINE_MJ + LINE_MJ // 2} mJ, the ledger has {LINE_MJ}",
    ]
    assert str(verdicts[0]) == "lease L1 line 0: FAIL: " + "; ".join(verdicts[0].reasons)
    assert verdicts[1].ok


def test_readings_that_disagree_with_themselves_or_are_missing_are_named(billed, tmp_path):
    rows = honest_rows(billed)
    first = rows.splitlines(keepends=True)[0]
    t_ms = int(first.split(",")[0])
    twice = rows + first.replace(",0,0,0,0,0\n", ",5,0,0,0,0\n")  # time t_ms read again, other
    verdicts = audit_with(billed, tmp_path, {0: twice})
    assert verdicts[0].reasons[-1] == (
        f"[bill.readings] readings of line 0: GPU GPU-a: two readings at t_ms {t_ms} disagree"
    )
    [batch] = [readings.Batch(**b) for b in billed.lines["L1"][0]["telemetry_batches"]]
    both = readings.split_batches(readings.parse_rows(twice), [batch])
    assert len(both) == 2 and both[1] == "GPU GPU-a: 1 readings in no batch"
    assert verdicts[0].reasons[0] == (
        "[bill.readings] readings hash to other batches than the ledger's: " + "; ".join(both)
    )
    assert verdicts[1].reasons == [
        f"[bill.readings] readings of line 1: [Errno 2] No such file or directory: "
        f"'{tmp_path / 'readings' / 'L1' / '1.csv'}'"
    ]
