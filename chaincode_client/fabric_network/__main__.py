"""`python -m chaincode_client.fabric_network build|up|down|status|logs|env|roots|org|channel`.

- `build`: install the pinned Fabric binaries into the cache (or reuse them);
- `up`: bring the loopback network up (idempotent), printing each step;
- `org init|secret|join|commit|status PARTY`, `channel create`: the same steps, each run on
  one party's own host (docs/operations.md, "Two organisations on separate machines");
  `--plan FILE` names every party's address (the same public file on every host);
- `down`: stop every process and check no port is left open (`--purge` also deletes the
  network's folder);
- `status`: which processes run, the package ids, whether the cached build is verified;
- `logs NAME`: the last lines of one node's log (no NAME: the list of logs);
- `env ORG [--user Admin]`: the FABRIC_* settings an application (or the organisation's
  admin, for `python -m chaincode_client.policy_cli`) of that organisation uses;
- `roots [--out FILE]`: the channel's trust roots, for an auditor's `verify-receipt --trust`;
- `receipt ORG LEASE_ID [--out FILE]`: a lease's receipt (`fabric/1`), read from that
  organisation's own peer with its own `User1`, for its `audit-bill`;
- `view ORG`: what that organisation endorsed (contract functions, nodes, leases), read from
  its own peer: the second organisation's read-only view.
Exit code 0 on success, 1 on failure, so CI fails loudly.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from chaincode_client.fabric_network.build import (
    BuildError,
    BuildSpec,
    build,
    build_dir,
    cache_root,
    read_stamp,
)
from chaincode_client.fabric_network.layout import DEFAULT_BASE_PORT, Layout, NetworkError
from chaincode_client.fabric_network.network import Network
from chaincode_client.fabric_network.parties import run_party
from chaincode_client.fabric_network.processes import tail
from chaincode_client.fabric_network.roots import roots_pem


def default_root() -> Path:
    return Path(os.environ.get("WATTLEASE_DATA_DIR") or "var") / "fabric-network"


def _layout(args: argparse.Namespace) -> Layout:
    options = {"base_port": args.base_port, "channel": args.channel}
    options["client_mtls"] = args.client_mtls
    if getattr(args, "chaincode", None):
        options["chaincode"] = args.chaincode
    if getattr(args, "plan", None):
        options.update(read_plan(Path(args.plan)))
    return Layout(Path(args.root).resolve(), **options)  # type: ignore[arg-type]


def read_plan(path: Path) -> dict[str, object]:
    """A network plan: `{"base_port": 7050, "channel": "wattlease", "client_mtls": false,
    "addresses": {"orderer0": "10.0.0.1", ..., "Org1MSP": "10.0.0.11", ...}}` (public)."""
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NetworkError(f"--plan {path}: not a readable JSON file ({exc})") from exc
    known = {"base_port", "channel", "client_mtls", "addresses"}
    if not isinstance(plan, dict) or set(plan) - known:
        raise NetworkError(f"--plan {path}: expected an object with keys among {sorted(known)}")
    return plan


def _network_options(parser: argparse.ArgumentParser, after_command: bool) -> None:
    """The options naming a network. Given after the command they must not reset what was
    given before it, so there every default is SUPPRESS."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if after_command else value

    parser.add_argument("--root", default=default(str(default_root())), help="its folder")
    parser.add_argument("--base-port", type=int, default=default(DEFAULT_BASE_PORT))
    parser.add_argument("--channel", default=default("wattlease"))
    parser.add_argument(
        "--client-mtls",
        action="store_true",
        default=default(False),
        help="peers require client TLS certificates",
    )
    parser.add_argument("--plan", default=default(None), help="the network plan (JSON)")


def main(argv: list[str] | None = None) -> int:
    # the network's options go before or after the command: `--root X up` or `up --root X`
    parser = argparse.ArgumentParser(prog="python -m chaincode_client.fabric_network")
    _network_options(parser, after_command=False)
    after = argparse.ArgumentParser(add_help=False)
    _network_options(after, after_command=True)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="go install the pinned Fabric binaries (cached)")
    sub.add_parser("up", parents=[after], help="bring the network up (idempotent)")
    down = sub.add_parser("down", parents=[after], help="stop every process of the network")
    down.add_argument("--purge", action="store_true", help="also delete the network's folder")
    sub.add_parser("status", parents=[after], help="processes, package ids, cached build")
    logs = sub.add_parser("logs", parents=[after], help="the last lines of a node's log")
    logs.add_argument("name", nargs="?")
    logs.add_argument("-n", "--lines", type=int, default=40)
    env = sub.add_parser("env", parents=[after], help="FABRIC_* settings for an application")
    env.add_argument("org", choices=["Org1MSP", "Org2MSP"])
    env.add_argument(
        "--user",
        default="User1",
        choices=["User1", "Admin"],
        help="whose identity (Admin: the organisation's admin, for policy_cli)",
    )
    roots = sub.add_parser("roots", help="the channel's trust roots (PEM) for an auditor")
    roots.add_argument("--out", type=Path, help="file to write (default: stdout)")
    roots.add_argument("--chaincode", help="the Wattlease chaincode's name (default: the layout's)")
    org = sub.add_parser("org", parents=[after], help="one party's steps, on its own host")
    org.add_argument("action", choices=["init", "secret", "join", "commit", "status"])
    org.add_argument("party", help="Org1MSP, Org2MSP, orderer0, orderer1 or orderer2")
    org.add_argument("--chaincode", help="the chaincode to approve or commit (default wattlease)")
    org.add_argument(
        "--enroll-secret",
        default=os.environ.get("WATTLEASE_ENROLL_SECRET"),
        help="an orderer's one-time secret from the ordering org's admin (`org secret`)",
    )
    channel = sub.add_parser("channel", parents=[after], help="the channel's genesis block")
    channel.add_argument("action", choices=["create"])
    receipt = sub.add_parser(
        "receipt", parents=[after], help="a lease's receipt from an organisation's own peer"
    )
    receipt.add_argument("org", choices=["Org1MSP", "Org2MSP"])
    receipt.add_argument("lease_id")
    receipt.add_argument(
        "--chaincode", help="the Wattlease chaincode's name (default: the layout's)"
    )
    receipt.add_argument("--out", type=Path, help="file to write (default: stdout)")
    view = sub.add_parser(
        "view", parents=[after], help="what an organisation endorsed, from its own peer"
    )
    view.add_argument("org", choices=["Org1MSP", "Org2MSP"])
    view.add_argument("--chaincode", help="the chaincode (default: the layout's)")
    args = parser.parse_args(argv)
    try:
        if args.command in ("org", "channel", "receipt", "view"):
            return run_party(_layout(args), args)
        return _run(args)
    except (NetworkError, BuildError) as exc:
        print(f"fabric {args.command} FAILED: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    spec = BuildSpec()
    if args.command == "build":
        result = build(spec)
        print(f"{'cached' if result.cached else 'built'} in {result.seconds:.1f}s: {result.root}")
        return 0
    layout = _layout(args)
    if args.command == "up":
        seconds = Network.create(layout).up()
        print(f"network up in {seconds:.1f}s at {layout.root}")
        return 0
    if args.command == "down":
        busy = Network.create(layout, parties=layout.present_parties()).down()
        if busy:
            print(f"ports still open after stopping every process: {busy}", file=sys.stderr)
            return 1
        if args.purge:
            shutil.rmtree(layout.root, ignore_errors=True)
        print("network down" + (", folder deleted" if args.purge else ""))
        return 0
    if args.command == "logs":
        if not args.name:
            print("\n".join(layout.process_names()))
            return 0
        print(tail(layout, args.name, args.lines))
        return 0
    if args.command == "env":
        for key, value in layout.client_env(args.org, args.user).items():
            print(f"export {key}={value}")
        return 0
    if args.command == "roots":
        text = roots_pem(layout, args.chaincode)
        if args.out:
            args.out.write_text(text)
        else:
            print(text, end="")
        return 0
    stamp = read_stamp(spec, cache_root())
    where = build_dir(spec, cache_root())
    built = f"built by {stamp.get('go_version')} at {where}" if stamp else f"none at {where}"
    print(f"Fabric {spec.commit[:12]} build: {built}")
    if layout.state_file.exists() or layout.root.exists():
        network = Network.create(layout, parties=layout.present_parties())
        print(json.dumps(network.status(), indent=2))
    return 0 if stamp else 1


if __name__ == "__main__":
    sys.exit(main())
