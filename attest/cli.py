"""Command line: `verify` (pure verifier, the files tpm2-tools writes), `agent` (TPM) and
`registrar` (an organisation's registrar service: attest.registrar_service).

Exit codes: 0 valid, 1 not valid (malformed evidence included), 2 usage or I/O error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attest.errors import MalformedEvidence, PolicyError
from attest.files import TooLarge, read_bounded
from attest.pcrfile import parse_pcr_file
from attest.policy import PcrPolicy
from attest.structs import parse_attest
from attest.verdict import ClockInfo, Verdict
from attest.verifier import verify_quote

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
MAX_INPUT_BYTES = 64 * 1024  # every evidence file is well under 1 KiB; refuse anything huge


class UsageError(Exception):
    """Bad arguments or unreadable files: exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def read_input(path: str, what: str) -> bytes:
    try:
        return read_bounded(path, MAX_INPUT_BYTES)
    except OSError as exc:
        raise UsageError(f"cannot read {what} file {path}: {exc.strerror}") from None
    except TooLarge as exc:
        raise UsageError(f"{what} file {exc}") from None


def _hex(value: str, what: str) -> bytes:
    try:
        return bytes.fromhex(value.removeprefix("0x"))
    except ValueError:
        raise UsageError(f"{what} is not hex: {value!r}") from None


def _policy(path: str | None) -> PcrPolicy | None:
    if path is None:
        return None
    try:
        return PcrPolicy.from_json(read_input(path, "policy"))
    except PolicyError as exc:
        raise UsageError(f"policy {path}: {exc}") from None


def _previous_clock(value: str | None) -> ClockInfo | None:
    if value is None:
        return None
    try:
        doc = json.loads(read_input(value, "previous clock") if Path(value).exists() else value)
        return ClockInfo.from_dict(doc)
    except ValueError as exc:
        raise UsageError(f"--previous-clock: {exc}") from None


def cmd_verify(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    ak = read_input(args.ak_public, "AK public")
    message = read_input(args.message, "message")
    signature = read_input(args.signature, "signature")
    pcrs = read_input(args.pcrs, "PCR")
    nonce = _hex(args.nonce, "--nonce")
    policy = _policy(args.policy)
    previous = _previous_clock(args.previous_clock)
    try:
        selection = parse_attest(message).pcr_select  # the values format needs it
    except MalformedEvidence:
        selection = None  # verify_quote reports the malformed quote itself
    try:
        values = parse_pcr_file(pcrs, selection) if selection is not None else {}
    except MalformedEvidence as exc:
        verdict = Verdict()
        verdict.add("pcr_file_malformed", str(exc))
        return EXIT_INVALID, verdict.to_dict()
    verdict = verify_quote(ak, message, signature, values, nonce, policy, previous)
    return (EXIT_VALID if verdict.valid else EXIT_INVALID), verdict.to_dict()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m attest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="verify a TPM quote (files from tpm2_quote -m -s -o)")
    v.add_argument("--ak-public", required=True, help="TPM2B_PUBLIC (tpm2_createak -f tss) or PEM")
    v.add_argument("--message", required=True, help="TPMS_ATTEST (tpm2_quote -m)")
    v.add_argument("--signature", required=True, help="TPMT_SIGNATURE (tpm2_quote -s)")
    v.add_argument("--pcrs", required=True, help="PCR values (tpm2_quote -o / tpm2_pcrread -o)")
    v.add_argument("--nonce", required=True, help="the nonce issued, hex (tpm2_quote -q)")
    v.add_argument("--policy", help='JSON {"pcrs": {"sha256": {"0": "<hex>"}}}')
    v.add_argument("--previous-clock", help="JSON clock info of the previous quote (or a file)")
    v.set_defaults(func=cmd_verify)
    from attest.agent_cli import add_agent_parser  # keeps tpm2-pytss out of `verify`

    add_agent_parser(sub)
    from attest.registrar_service import add_registrar_parser

    add_registrar_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code, out = args.func(args)
    except UsageError as exc:
        print(json.dumps({"error": str(exc)}), file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(out, indent=2, sort_keys=True))
    return code
