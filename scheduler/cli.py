"""`python -m scheduler plan --input IN.json [--output OUT.json]`; `python -m scheduler
counters --out FILE`: the GPU host's energy-counter log the node agent binds into its quotes.

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

from attest.files import TooLarge, read_bounded
from scheduler.catalogue import CatalogueError, load_catalogue
from scheduler.fleet import PlanInputError, parse_plan_input
from scheduler.placement import plan
from scheduler.pricing import PricingError, PricingPolicy
from scheduler.telemetry.counter_log import append_rows
from scheduler.telemetry.sample import TelemetryError
from scheduler.telemetry.source import open_telemetry

MAX_INPUT_BYTES = 256 << 20  # 10k GPUs + 50k jobs is ~10 MB; leave room, refuse the absurd


class CliError(Exception):
    """One line for the operator, exit status 1."""


def _read_input(path: str) -> object:
    try:
        raw = read_bounded(path, MAX_INPUT_BYTES)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except TooLarge as exc:
        raise CliError(str(exc)) from None
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
    log_cmd = commands.add_parser(
        "counters", help="append the GPUs' energy-counter readings to a log the agent quotes"
    )
    log_cmd.add_argument("--out", required=True, help="CSV file to append rows to")
    log_cmd.add_argument("--source", choices=["nvml", "replay"], default="nvml")
    log_cmd.add_argument("--trace", help="CSV trace to replay where there is no NVML")
    log_cmd.add_argument("--speed", type=float, default=1.0, help="replay speed (x real time)")
    log_cmd.add_argument("--interval", type=float, default=5.0, help="NVML read interval, s")
    log_cmd.add_argument("--max-samples", type=int, default=0, help="stop after N (0: never)")
    log_cmd.set_defaults(func=run_counters)
    return parser


def run_counters(args: argparse.Namespace) -> int:
    try:
        source = open_telemetry(args.source, args.trace, args.speed, args.interval)
    except TelemetryError as exc:
        raise CliError(f"{exc} (give --trace FILE, or run on a host with NVML)") from None
    print(source.note, file=sys.stderr)
    try:
        written = append_rows(source.samples, Path(args.out), args.max_samples)
    except (TelemetryError, OSError) as exc:
        raise CliError(str(exc)) from None
    print(f"{written} readings appended to {args.out}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, PlanInputError, CatalogueError, PricingError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
