"""How long `audit-bill` takes for a tenant's month of leases.

    python bench/audit_bill_bench.py --leases 1000

Builds a real embedded ledger (swtpm quotes, both organisations endorsing), creates N leases
and settles one line of each, exports every lease's receipt and writes the bill as the API
serves it (lines with their transaction ids), then times `python -m ledger audit-bill` on it
in-process (`ledger.audit.bill.audit_bill`) and prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ledger_bench import HOUR_MS, settle_call, setup, submit_all
from chaincode_client.embedded import EmbeddedClient
from ledger.audit.bill import BillVerdict, audit_bill
from ledger.audit.receipt import export_receipt, export_roots
from ledger.engine import EmbeddedLedger
from tests.ledger.helpers import (
    bill_line,
    bill_of,
    lease_request,
    now_ms,
)


def _fn(entry: dict) -> str:
    return json.loads(json.loads(entry["envelope"])["proposal"])["fn"]


def build(args: argparse.Namespace, workdir: Path) -> tuple[dict, Path, Path]:
    path = workdir / "ledger.sqlite"
    ledger = EmbeddedLedger.open(path, block_size=250, block_timeout_s=0.02)
    start = now_ms() - 2 * HOUR_MS
    gpus, att_of = setup(ledger, args.leases, workdir, start)
    clients = [EmbeddedClient(ledger, ledger.enroll("Org1MSP", f"c{i}")) for i in range(2)]
    lines: dict[str, dict] = {}

    def create(uuid: str) -> tuple[str, str]:
        return "CreateLease", lease_request(f"L-{uuid}", [uuid], [att_of[uuid]], start_ms=start)

    def settle(uuid: str) -> tuple[str, str]:
        fn, request = settle_call(uuid, start_ms=start)
        lines[uuid] = json.loads(request)
        return fn, request

    for make in (create, settle):
        _, _, failures = submit_all(args, clients, gpus, make)
        assert not failures, failures[0]
    ledger.close()
    receipts = workdir / "receipts"
    receipts.mkdir()
    bill_lines = []
    for uuid in gpus:
        receipt = export_receipt(path, f"L-{uuid}")
        (receipts / f"L-{uuid}.json").write_text(json.dumps(receipt))
        tx_id = next(t["tx_id"] for t in receipt["transactions"] if _fn(t) == "Settle")
        bill_lines.append(bill_line(lines[uuid], tx_id))
    bill = workdir / "bill.json"
    bill.write_text(json.dumps(bill_of(bill_lines)))
    roots = workdir / "roots"
    export_roots(path, roots)
    return {"leases": len(gpus)}, bill, roots


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=64)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="audit-bill-bench-"))
    try:
        result, bill, roots = build(args, workdir)
        t0, cpu0 = time.perf_counter(), time.process_time()
        verdicts = audit_bill(bill, workdir / "receipts", roots, tenant="tenant-a")
        result["audit_s"] = round(time.perf_counter() - t0, 2)
        result["audit_cpu_s"] = round(time.process_time() - cpu0, 2)
        result["lines_ok"] = sum(v.ok for v in verdicts if not isinstance(v, BillVerdict))
        result["bill_ok"] = all(v.ok for v in verdicts)
        result["first_failure"] = next((str(v) for v in verdicts if not v.ok), None)
        print(json.dumps(result))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
