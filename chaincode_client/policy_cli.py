"""`python -m chaincode_client.policy_cli show|propose|review|approve`: an organisation's admin
decides the channel's policies (PCR golden values, EK roots, the rate card) from their own
machine, with their own Admin identity.

    show KIND [--key KEY]                 the policy in force (JSON), its version and digest
    propose KIND DOCUMENT.json [--key K]  propose a document; prints the proposal id to pass
                                          to the other organisation's admin, and its SHA-256
    review PROPOSAL_ID                    the proposal, its digest and what it changes
    approve PROPOSAL_ID --sha256 HEX      approve it, if it holds the document you reviewed

The ledger is reached through the FABRIC_* settings (docs/fabric.md) of an Admin identity
(for the loopback network: `python -m chaincode_client.fabric_network env Org2MSP --user
Admin`). A document is checked here with the contract's own validator before anything is
submitted. Exit status: 0 done, 1 the ledger refused or could not be reached (the reason is
printed), 2 unusable input (a file, a document, the settings).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attest.files import TooLarge, read_bounded
from chaincode_client import governance
from chaincode_client.interface import LedgerClient, LedgerError
from ledger.contract.args import ArgumentError
from ledger.contract.governance import DEFAULT_KEY, VALIDATORS

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024  # a rate card with its catalogue is ~20 KB
EXIT_REFUSED, EXIT_USAGE = 1, 2

Connect = Callable[[], LedgerClient]


class UnusableInput(ValueError):
    pass


def _fabric_client() -> LedgerClient:
    from chaincode_client.fabric.client import FabricGatewayClient
    from chaincode_client.fabric.config import ConfigError
    from chaincode_client.fabric.identity import IdentityError

    try:
        return FabricGatewayClient.from_env()
    except (ConfigError, IdentityError, OSError) as exc:
        raise UnusableInput(f"FABRIC_* settings: {exc}") from None


def read_document(path: Path, kind: str) -> dict[str, Any]:
    """The JSON object in `path`, checked as the contract checks a `kind` document."""
    try:
        raw = read_bounded(path, MAX_DOCUMENT_BYTES)
    except OSError as exc:
        raise UnusableInput(f"{path}: {exc.strerror or exc}") from None
    except TooLarge as exc:
        raise UnusableInput(str(exc)) from None
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnusableInput(f"{path}: not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UnusableInput(f"{path}: a policy document is a JSON object")
    try:
        return VALIDATORS[kind](document)
    except ArgumentError as exc:
        raise UnusableInput(f"{path}: not a valid {kind} document: {exc}") from None


def _pretty(document: dict[str, Any] | None) -> list[str]:
    if document is None:
        return []
    return json.dumps(document, indent=2, sort_keys=True).splitlines(keepends=True)


def _print_json(value: dict[str, Any]) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def _show(client: LedgerClient, ns: argparse.Namespace) -> int:
    record = governance.policy_record(client, ns.kind, ns.key)
    if record is None:
        print(f"no approved {ns.kind} policy {ns.key!r} on the channel", file=sys.stderr)
        return EXIT_REFUSED
    _print_json({**record, "document_sha256": governance.document_digest(record["document"])})
    return 0


def _propose(client: LedgerClient, ns: argparse.Namespace) -> int:
    document = read_document(ns.document, ns.kind)
    if governance.policy_in_force(client, ns.kind, ns.key) == document:
        print(f"this {ns.kind} document is already in force for {ns.key!r}: nothing proposed")
        return 0
    opened = governance.propose(client, ns.kind, ns.key, document)
    digest = governance.document_digest(opened["document"])
    _print_json({**opened, "document_sha256": digest})
    print(
        f"proposed {ns.kind} {ns.key!r} as {opened['proposal_id']} (document SHA-256 {digest});"
        f" an admin of another organisation runs: review {opened['proposal_id']}, then "
        f"approve {opened['proposal_id']} --sha256 {digest}",
        file=sys.stderr,
    )
    return 0


def _review(client: LedgerClient, ns: argparse.Namespace) -> int:
    found = governance.proposal(client, ns.proposal_id)
    in_force = governance.policy_record(client, found["kind"], found["key"])
    _print_json({**found, "document_sha256": governance.document_digest(found["document"])})
    current = None if in_force is None else in_force["document"]
    version = "none" if in_force is None else f"version {in_force['version']}"
    diff = difflib.unified_diff(
        _pretty(current),
        _pretty(found["document"]),
        f"in force ({version})",
        f"proposed ({ns.proposal_id})",
    )
    sys.stderr.writelines(diff)
    if in_force is not None and in_force["version"] != found["base_version"]:
        print(
            f"note: proposed against version {found['base_version']}, the channel is at "
            f"{version}: approving it will be refused (governance.stale_proposal)",
            file=sys.stderr,
        )
    return 0


def _approve(client: LedgerClient, ns: argparse.Namespace) -> int:
    record = governance.approve(client, ns.proposal_id, ns.sha256)
    _print_json(record)
    print(
        f"{record['kind']} {record['key']!r} version {record['version']} is in force "
        f"(proposed by {record['proposed_by']}, approved by {record['approved_by']})",
        file=sys.stderr,
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chaincode_client.policy_cli",
        description="Propose, review and approve the channel's policies as an org's admin.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    kinds = sorted(VALIDATORS)
    show = sub.add_parser("show", help="the policy in force")
    show.add_argument("kind", choices=kinds)
    show.add_argument("--key", default=DEFAULT_KEY)
    propose = sub.add_parser("propose", help="propose a document (one organisation's admin)")
    propose.add_argument("kind", choices=kinds)
    propose.add_argument("document", type=Path, help="the policy document, a JSON file")
    propose.add_argument("--key", default=DEFAULT_KEY)
    review = sub.add_parser("review", help="a proposal, its digest and what it changes")
    review.add_argument("proposal_id")
    approve = sub.add_parser("approve", help="approve (an admin of another organisation)")
    approve.add_argument("proposal_id")
    approve.add_argument(
        "--sha256", required=True, help="the digest `review` printed for the document you read"
    )
    return parser


COMMANDS = {"show": _show, "propose": _propose, "review": _review, "approve": _approve}


def main(argv: Sequence[str] | None = None, connect: Connect = _fabric_client) -> int:
    ns = _parser().parse_args(argv)
    try:
        client = connect()
    except UnusableInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return COMMANDS[ns.command](client, ns)
    except UnusableInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (LedgerError, governance.ProposalMismatch) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
