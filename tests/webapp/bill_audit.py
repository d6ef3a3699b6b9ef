"""A tenant audits its bill as an outsider would, on either backend: the bill, each lease's
receipt and each line's readings fetched through the API, then `python -m ledger audit-bill`
in a process of its own, before and after each edit the acceptance names (one amount, one
reading, another channel's roots, unusable roots)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Evidence:
    bill: dict[str, Any]
    receipts: Path
    readings: Path


def fetch_evidence(client: Any, folder: Path) -> Evidence:
    """The tenant's bill with every receipt and reading its lines point to, as files."""
    response = client.get("/api/v1/bills/")
    assert response.status_code == 200, response.content
    bill = response.json()
    receipts, readings = folder / "receipts", folder / "readings"
    receipts.mkdir(parents=True)
    for line in bill["lines"]:
        receipt = client.get(line["evidence"]["receipt"])
        assert receipt.status_code == 200, receipt.content
        (receipts / f"{line['lease']}.json").write_bytes(receipt.content)
        served = client.get(line["evidence"]["readings"])
        assert served.status_code == 200 and served["Content-Type"] == "text/csv"
        (readings / line["lease"]).mkdir(parents=True, exist_ok=True)
        (readings / line["lease"] / f"{line['seq']}.csv").write_bytes(served.content)
    return Evidence(bill, receipts, readings)


def run_audit(
    folder: Path, evidence: Evidence, roots: str, bill: dict | None = None
) -> tuple[int, str]:
    (folder / "bill.json").write_text(json.dumps(bill or evidence.bill))
    (folder / "roots.pem").write_text(roots)
    command = [sys.executable, "-m", "ledger", "audit-bill", str(folder / "bill.json")]
    command += ["--receipts", str(evidence.receipts), "--trust", str(folder / "roots.pem")]
    command += ["--readings", str(evidence.readings), "--tenant", evidence.bill["tenant"]]
    done = subprocess.run(command, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def name(line: dict[str, Any]) -> str:
    return f"lease {line['lease']} line {line['seq']}"


def audit_holds_and_fails_on_each_edit(
    folder: Path, evidence: Evidence, roots: str, foreign_roots: str, foreign_defect: str
) -> None:
    """The bill audits; one amount altered fails that line alone; one reading altered fails
    the line it belongs to alone; a receipt without the quotes that attested a line's
    readings fails that line; another channel's roots fail every line with
    `foreign_defect`; roots that are no certificate are unusable input (exit 2)."""
    lines = evidence.bill["lines"]
    assert lines, "the bill has no lines to audit"
    code, out = run_audit(folder, evidence, roots)
    assert code == 0 and f"{len(lines)} of {len(lines)} lines hold" in out, out

    forged = json.loads(json.dumps(evidence.bill))
    forged["lines"][-1]["total_micro"] += 1
    code, out = run_audit(folder, evidence, roots, forged)
    assert code == 1 and f"{name(lines[-1])}: FAIL: [bill.field] total_micro" in out, out
    assert all(f"{name(other)}: OK" in out for other in lines[:-1]), out

    path = evidence.readings / lines[0]["lease"] / f"{lines[0]['seq']}.csv"
    rows = path.read_text().splitlines()
    fields = rows[-1].split(",")
    fields[2] = str(int(fields[2]) + 1)  # one energy counter reading
    path.write_text("\n".join([*rows[:-1], ",".join(fields)]) + "\n")
    code, out = run_audit(folder, evidence, roots)
    assert code == 1 and f"{name(lines[0])}: FAIL: [bill.readings] readings hash to" in out, out
    assert all(f"{name(other)}: OK" in out for other in lines[1:]), out
    path.write_text("".join(r + "\n" for r in rows))

    # the receipt without the quotes that attested the first line's readings
    receipt = evidence.receipts / f"{lines[0]['lease']}.json"
    whole = receipt.read_text()
    quotes = set(lines[0]["evidence"]["telemetry_quotes"])
    assert quotes, "the first line cites no attested readings"
    doc = json.loads(whole)
    doc["transactions"] = [t for t in doc["transactions"] if t["tx_id"] not in quotes]
    receipt.write_text(json.dumps(doc))
    code, out = run_audit(folder, evidence, roots)
    assert code == 1 and f"{name(lines[0])}: FAIL: [bill.unattested] batch " in out, out
    assert "no quote in the receipt attested it" in out, out
    receipt.write_text(whole)

    code, out = run_audit(folder, evidence, foreign_roots)
    assert code == 1 and f"0 of {len(lines)} lines hold" in out, out
    assert all(f"{name(line)}: FAIL" in out for line in lines), out
    assert foreign_defect in out, out

    code, out = run_audit(folder, evidence, "not a certificate")
    assert code == 2 and "--trust" in out, out
