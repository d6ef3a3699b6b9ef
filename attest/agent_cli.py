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

from attest.policy import DEFAULT_SELECTION

DEFAULT_TCTI = os.environ.get("ATTEST_TCTI", "device:/dev/tpmrm0")
DEFAULT_INTERVAL_S = 60.0  # between quotes, when neither --interval nor the server says
EXIT_REFUSED = 3  # the TPM refused an authorisation: reported, never retried


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


def _inventory(args: argparse.Namespace) -> list[dict[str, str]] | None:
    """--inventory: a JSON list of {uuid, name, serial}; None: read NVML at enrolment."""
    from attest.cli import UsageError, read_input

    if args.inventory is None:
        return None
    try:
        gpus = json.loads(read_input(args.inventory, "GPU inventory"))
    except ValueError as exc:
        raise UsageError(f"--inventory {args.inventory}: not JSON: {exc}") from None
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        raise UsageError(f"--inventory {args.inventory}: must be a list of {{uuid, name, serial}}")
    return gpus


def cmd_run(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """Enrol with the server (once; the AK is kept in --state), then answer a challenge every
    --interval seconds, for --rounds verdicts or until SIGTERM/SIGINT. Failures are retried
    with backoff (attest.agent.supervise); an authorisation the TPM refused is reported to
    the server and ends the agent with exit status 3, never retried."""
    import signal
    import threading

    from attest.agent.http import AgentApi, FileCounters, load_or_enrol
    from attest.agent.supervise import AgentLoop
    from attest.cli import UsageError

    token = os.environ.get("WATTLEASE_NODE_CREDENTIAL", "")
    if not token:
        raise UsageError("set WATTLEASE_NODE_CREDENTIAL to the node credential (wn_...)")
    api, stop = AgentApi(args.server, token), threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    verdicts: dict[str, Any] = {"valid": 0, "invalid": 0, "errors": 0}
    try:
        gpus = _inventory(args)
    except RuntimeError as exc:  # NVML missing: say how to report the GPUs instead
        raise UsageError(f"GPU inventory: {exc}; pass --inventory FILE") from None

    def on_verdict(_agent: Any, verdict: dict[str, Any]) -> None:
        verdicts["valid" if verdict.get("valid") else "invalid"] += 1
        print(json.dumps(verdict), flush=True)

    def on_error(exc: BaseException) -> None:
        verdicts["errors"] += 1
        print(json.dumps({"error": str(exc)}), flush=True)

    loop = AgentLoop(
        open_tpm=lambda: _agent(args),
        api=api,
        load_ak=lambda agent, api: load_or_enrol(agent, api, Path(args.state), args.alg, gpus),
        interval_s=args.interval or DEFAULT_INTERVAL_S,
        stop=stop,
        read_counters=FileCounters(Path(args.readings)) if args.readings else None,
        on_verdict=on_verdict,
        on_error=on_error,
        name="agent",
        rounds=args.rounds,
        follow_server=args.interval is None,
    )
    refused = loop.run()
    if refused is not None:  # reported to the server; an operator must fix the key
        verdicts["refused"] = refused.code
        print(json.dumps({"refused": refused.code, "detail": refused.detail}), flush=True)
        return EXIT_REFUSED, verdicts
    return (0 if verdicts["valid"] and not verdicts["invalid"] else 1), verdicts


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
    quote.add_argument("--pcrs", default=DEFAULT_SELECTION)
    quote.set_defaults(func=_tpm_errors(cmd_quote))
    run = cmds.add_parser("run", help="enrol with a Wattlease server, then answer challenges")
    run.add_argument("--server", required=True, help="e.g. https://wattlease.example")
    run.add_argument(
        "--interval",
        type=float,
        default=None,
        help=f"seconds between quotes (default: the server's ATTESTATION_INTERVAL_S, "
        f"else {DEFAULT_INTERVAL_S:.0f})",
    )
    run.add_argument("--rounds", type=int, default=0, help="stop after N quotes (0: never)")
    run.add_argument(
        "--readings",
        help="CSV file the host's energy-counter logger appends rows to "
        "(t_ms,gpu,energy_mj,power_mw,util_gpu_pct,util_mem_pct,temp_c); each quote binds "
        "the rows appended since the previous one",
    )
    run.add_argument("--alg", choices=["ecc", "rsa"], default="ecc")
    run.add_argument(
        "--inventory",
        default=None,
        help="JSON file of the GPUs to report at enrolment ([{uuid, name, serial}]); "
        "default: read them from NVML",
    )
    run.set_defaults(func=_tpm_errors(cmd_run))
