"""`python -m scheduler plan --input IN.json [--output OUT.json]`.

Exit 0 with the plan as JSON; exit 1 with one line naming the bad entry when the input is
invalid (unknown generation or precision, duplicate id, negative hours...)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

from scheduler.catalogue import CatalogueError, load_catalogue
from scheduler.fleet import PlanInputError, parse_plan_input
from scheduler.placement import plan
from scheduler.pricing import PricingError, PricingPolicy

MAX_INPUT_BYTES = 256 << 20  # 10k GPUs + 50k jobs is ~10 MB; leave room, refuse the absurd


class CliError(Exception):
    """One line for the operator, exit status 1."""


def _read_input(path: str) -> object:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise CliError(f"{path} is larger than {MAX_INPUT_BYTES} bytes")
    try:
        return json.loads(raw, parse_float=Decimal)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CliError(f"{path} is not valid JSON: {exc}") from None


def _write_output(text: str, path: str | None) -> None:
    if path is None:
        sys.stdout.write(text)
        return
    target = Path(path)
    # Write beside the target and rename: a crash never leaves half a plan behind.
    fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_plan(args: argparse.Namespace) -> int:
    catalogue = load_catalogue(args.catalogue) if args.catalogue else load_catalogue()
    data = parse_plan_input(_read_input(args.input), catalogue)
    baseline = args.baseline
    result = plan(data, catalogue, PricingPolicy(baseline=baseline))
    _write_output(json.dumps(result.as_dict(), indent=1) + "\n", args.output)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scheduler")
    commands = parser.add_subparsers(dest="command", required=True)
    plan_cmd = commands.add_parser("plan", help="place queued jobs on a fleet, with prices")
    plan_cmd.add_argument("--input", required=True, help="JSON fleet + jobs (docs/scheduler.md)")
    plan_cmd.add_argument("--output", help="write the plan here (default: stdout)")
    plan_cmd.add_argument("--catalogue", help="generation catalogue file (default: bundled v1)")
    plan_cmd.add_argument("--baseline", help="baseline generation (default: the catalogue's)")
    plan_cmd.set_defaults(func=run_plan)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, PlanInputError, CatalogueError, PricingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
