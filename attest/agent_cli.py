"""`python -m attest agent ...`: enrol, activate and quote against a TPM chosen by TCTI.

The AK (public + TPM-wrapped private blob) lives in a JSON state file between calls. Every
command prints JSON with binary values in hex, so the web app or a shell script can relay it.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

DEFAULT_TCTI = os.environ.get("ATTEST_TCTI", "device:/dev/tpmrm0")


def _agent(args: argparse.Namespace):  # imported lazily: `verify` must not need tpm2-pytss
    from attest.agent import Agent

    return Agent(args.tcti, ek_type=args.ek_type)


def _tpm_errors(func):
    """A TPM that refuses (or is unreachable) is an I/O error for the CLI: exit 2 with JSON."""

    def run(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
        from tpm2_pytss import TSS2_Exception

        from attest.cli import UsageError

        try:
            return func(args)
        except (TSS2_Exception, OSError) as exc:
            raise UsageError(f"TPM at {args.tcti}: {exc}") from None

    return run


def _load_ak(state: str):
    from attest.agent import AkKey
    from attest.cli import UsageError, read_input

    try:
        return AkKey.from_dict(json.loads(read_input(state, "agent state"))["ak"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"agent state {state}: {exc}") from None


def cmd_enrol(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    with _agent(args) as agent:
        req = agent.enrol(args.alg)
    path = Path(args.state)
    tmp = path.with_suffix(".tmp")  # write-then-rename: never a half-written state file
    tmp.write_text(json.dumps({"ak": req.ak.to_dict(), "tcti": args.tcti}))
    tmp.chmod(0o600)
    tmp.replace(path)
    return 0, {
        "ek_public": req.ek_public.hex(),
        "ek_certificate": req.ek_certificate.hex() if req.ek_certificate else None,
        "ak_public": req.ak.public.hex(),
        "ak_name": req.ak.name.hex(),
    }


def cmd_activate(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from attest.cli import _hex

    ak = _load_ak(args.state)
    with _agent(args) as agent:
        answer = agent.activate(ak, _hex(args.credential_blob, "blob"), _hex(args.secret, "secret"))
    return 0, {"answer": answer.hex()}


def cmd_quote(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    from attest.cli import _hex

    ak = _load_ak(args.state)
    with _agent(args) as agent:
        ev = agent.quote(ak, _hex(args.nonce, "--nonce"), args.pcrs)
    return 0, {
        "ak_public": ak.public.hex(),
        "quote": ev.quote.hex(),
        "signature": ev.signature.hex(),
        "pcr_values": {
            b: {str(p): v.hex() for p, v in vs.items()} for b, vs in ev.pcr_values.items()
        },
    }


def add_agent_parser(sub: argparse._SubParsersAction) -> None:
    agent = sub.add_parser("agent", help="TPM side: enrol, activate, quote (JSON output)")
    agent.add_argument("--tcti", default=DEFAULT_TCTI, help="e.g. swtpm:host=127.0.0.1,port=2321")
    agent.add_argument("--ek-type", choices=["rsa", "ecc"], default="rsa")
    agent.add_argument("--state", default="attest-agent.json", help="AK state file")
    cmds = agent.add_subparsers(dest="agent_command", required=True)
    enrol = cmds.add_parser("enrol", help="create an AK; print EK, EK cert, AK")
    enrol.add_argument("--alg", choices=["ecc", "rsa"], default="ecc")
    enrol.set_defaults(func=_tpm_errors(cmd_enrol))
    act = cmds.add_parser("activate", help="answer a MakeCredential challenge")
    act.add_argument("--credential-blob", required=True, help="TPM2B_ID_OBJECT, hex")
    act.add_argument("--secret", required=True, help="TPM2B_ENCRYPTED_SECRET, hex")
    act.set_defaults(func=_tpm_errors(cmd_activate))
    quote = cmds.add_parser("quote", help="quote PCRs with the verifier's nonce")
    quote.add_argument("--nonce", required=True, help="hex")
    quote.add_argument("--pcrs", default="sha256:0,2,7")
    quote.set_defaults(func=_tpm_errors(cmd_quote))
