"""The `wattlease` command: one entry point in front of the project's command lines.

    wattlease demo                     the one-command demo (`manage.py demo`)
    wattlease manage COMMAND ...       any Django management command (`manage.py ...`)
    wattlease attest verify|agent ...  `python -m attest ...`
    wattlease ledger verify|receipt|verify-receipt|audit-bill ...   `python -m ledger ...`
    wattlease scheduler plan ...       `python -m scheduler ...`
    wattlease policy show|propose|review|approve ...   `python -m chaincode_client.policy_cli`

Each sub-command hands the rest of the line to the existing command line unchanged, so the
`python -m` entry points and this one can never disagree. The pure libraries are imported
only when their sub-command runs, and Django only for `demo` and `manage`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

SETTINGS_MODULE = "webapp.settings"
EXIT_USAGE = 2

USAGE = """usage: wattlease COMMAND [ARGS ...]

Attested, energy-priced GPU leasing.

commands:
  demo        serve the demo on http://127.0.0.1:8000 (nodes, leases, ledger, dashboards)
  manage      run a Django management command (migrate, ledger_relay, telemetry_worker, ...)
  attest      verify TPM 2.0 quotes (attest verify --help) or run a node agent (attest agent)
  ledger      audit the embedded ledger, export and check lease receipts
  scheduler   place and price jobs on a fleet (scheduler plan --help)
  policy      propose, review and approve the channel's policies as an org's admin

Run `wattlease COMMAND --help` for a command's own options.
"""


def django_main(argv: Sequence[str]) -> int:
    """Run a Django management command line (argv[0] is the program name)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(list(argv))
    except ImproperlyConfigured as exc:  # an operator mistake: one line, no stack trace
        print(f"configuration error: {exc}", file=sys.stderr)
        return 1
    return 0


def _attest(args: list[str]) -> int:
    from attest.cli import main

    return main(args)


def _ledger(args: list[str]) -> int:
    from ledger.__main__ import main

    return main(args)


def _scheduler(args: list[str]) -> int:
    from scheduler.cli import main

    return main(args)


def _policy(args: list[str]) -> int:
    from chaincode_client.policy_cli import main

    return main(args)


def _manage(args: list[str]) -> int:
    return django_main(["wattlease manage", *args])


def _demo(args: list[str]) -> int:
    return django_main(["wattlease demo", "demo", *args])


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "demo": _demo,
    "manage": _manage,
    "attest": _attest,
    "ledger": _ledger,
    "scheduler": _scheduler,
    "policy": _policy,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"wattlease: unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return EXIT_USAGE
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
