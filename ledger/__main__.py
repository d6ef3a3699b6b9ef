"""`python -m ledger verify --path DB` | `receipt --path DB --lease ID` |
`verify-receipt FILE --roots DIR` | `roots --path DB --out DIR`"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ledger.audit import verify_ledger
from ledger.genesis import load_roots
from ledger.receipt import export_receipt, export_roots, load_receipt, verify_receipt


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
        "--roots",
        type=Path,
        required=True,
        help="folder of <MSPID>.pem: the organisation CAs you trust (from each organisation)",
    )
    roots = sub.add_parser("roots", help="write this ledger's organisation CAs as <MSPID>.pem")
    roots.add_argument("--path", type=Path, required=True)
    roots.add_argument("--out", type=Path, required=True)
    ns = parser.parse_args(argv)

    if ns.command == "verify":
        print(f"auditing {ns.path} ...", file=sys.stderr)
        try:
            trusted = load_roots(ns.roots) if ns.roots else None
        except (OSError, ValueError) as exc:
            print(f"error: --roots: {exc}", file=sys.stderr)
            return 2
        report = verify_ledger(ns.path, check_quotes=not ns.skip_quotes, roots=trusted)
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
    try:
        trusted = load_roots(ns.roots)
    except (OSError, ValueError) as exc:
        print(f"error: --roots: {exc}", file=sys.stderr)
        return 2
    problems = verify_receipt(load_receipt(ns.file), trusted)
    for problem in problems:
        print(f"DEFECT {problem}")
    print("OK" if not problems else f"FAILED: {len(problems)} defects")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
