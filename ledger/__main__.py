"""`python -m ledger verify --path DB` | `receipt --path DB --lease ID` |
`verify-receipt FILE --trust ROOTS` (embedded or Fabric receipts) |
`audit-bill BILL.json --receipts DIR --trust ROOTS --tenant T [--readings DIR]` |
`roots --path DB --out DIR`
ROOTS: the channel's trust anchors, a roots file (`roots`, or `python -m
chaincode_client.fabric_network roots`) or a folder of <MSPID>.pem."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ledger.audit.bill import BillVerdict, UnusableInput, audit_bill
from ledger.audit.chain import verify_ledger
from ledger.audit.receipt import export_receipt, export_roots, load_receipt
from ledger.audit.receipt_trust import TrustError, load_trust
from ledger.genesis import load_roots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ledger")
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="audit the whole embedded ledger")
    verify.add_argument("--path", type=Path, required=True, help="the ledger's SQLite file")
    verify.add_argument(
        "--skip-quotes", action="store_true", help="do not re-run the quote verifier"
    )
    verify.add_argument(
        "--roots", type=Path, help="folder of <MSPID>.pem: check the genesis names exactly these"
    )
    receipt = sub.add_parser("receipt", help="export a lease's receipt as JSON")
    receipt.add_argument("--path", type=Path, required=True)
    receipt.add_argument("--lease", required=True)
    receipt.add_argument("--out", type=Path, help="file to write (default: stdout)")
    check = sub.add_parser("verify-receipt", help="re-check a receipt offline")
    check.add_argument("file", type=Path)
    check.add_argument(
        "--trust",
        "--roots",
        dest="trust",
        type=Path,
        help="(required) the channel's trust anchors, obtained from each organisation "
        "(never from the receipt): a roots file or a folder of <MSPID>.pem",
    )
    bill = sub.add_parser("audit-bill", help="re-derive every line of a bill from receipts")
    bill.add_argument("bill", type=Path, help="the bill (GET /api/bills/) as JSON")
    bill.add_argument("--receipts", type=Path, required=True, help="DIR of <lease>.json")
    bill.add_argument("--trust", type=Path, required=True, help="the channel's trust anchors")
    bill.add_argument("--readings", type=Path, help="DIR of <lease>/<seq>.csv readings")
    bill.add_argument(
        "--tenant", required=True, help="the tenant whose bill this is (its ledger id)"
    )
    roots = sub.add_parser("roots", help="write this ledger's organisation CAs as <MSPID>.pem")
    roots.add_argument("--path", type=Path, required=True)
    roots.add_argument("--out", type=Path, required=True)
    ns = parser.parse_args(argv)

    if ns.command == "audit-bill":
        return _audit_bill(ns)
    if ns.command == "verify":
        print(f"auditing {ns.path} ...", file=sys.stderr)
        try:
            genesis_roots = load_roots(ns.roots) if ns.roots else None
        except (OSError, ValueError) as exc:
            print(f"error: --roots: {exc}", file=sys.stderr)
            return 2
        report = verify_ledger(ns.path, check_quotes=not ns.skip_quotes, roots=genesis_roots)
        for defect in report.defects:
            print(f"DEFECT {defect}")
        summary = (
            f"{report.blocks} blocks, {report.transactions} transactions "
            f"({report.valid} valid), {report.quotes} quotes re-verified, "
            f"{report.keys} state keys"
        )
        print(("OK: " if report.ok else "FAILED: ") + summary)
        return 0 if report.ok else 1
    if ns.command == "receipt":
        try:
            doc = export_receipt(ns.path, ns.lease)
        except KeyError as exc:
            print(f"error: {exc.args[0]}", file=sys.stderr)
            return 2
        text = json.dumps(doc, indent=1, sort_keys=True)
        if ns.out:
            ns.out.write_text(text)
        else:
            print(text)
        return 0
    if ns.command == "roots":
        for written in export_roots(ns.path, ns.out):
            print(written)
        return 0
    if ns.trust is None:
        print(
            "error: verify-receipt needs --trust ROOTS: the channel's trust anchors, from "
            "each organisation (never from the receipt)",
            file=sys.stderr,
        )
        return 2
    try:
        trust = load_trust(ns.trust)
    except (OSError, ValueError) as exc:
        print(f"error: --trust: {exc}", file=sys.stderr)
        return 2
    try:
        doc = load_receipt(ns.file)
    except (OSError, ValueError) as exc:
        print(f"error: {ns.file}: {exc}", file=sys.stderr)
        return 2
    try:
        problems = trust.verify(doc)
    except TrustError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"DEFECT {problem}")
    print("OK" if not problems else f"FAILED: {len(problems)} defects")
    return 0 if not problems else 1


def _audit_bill(ns: argparse.Namespace) -> int:
    """0: every line holds; 1: some line does not; 2: the inputs are unusable."""
    try:
        verdicts = audit_bill(ns.bill, ns.receipts, ns.trust, ns.readings, ns.tenant)
    except UnusableInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for verdict in verdicts:
        print(verdict)
    lines = [v for v in verdicts if not isinstance(v, BillVerdict)]
    failed = sum(1 for v in lines if not v.ok)
    print(f"{len(lines) - failed} of {len(lines)} lines hold")
    return 1 if failed or len(lines) < len(verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
