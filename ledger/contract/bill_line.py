"""A bill line's fields, named once: the Settle arguments (what each field must be, how the
contract shape-checks it), the record the contract writes, and the names the web app's query
model (its Settlement row, the bill document `ledger audit-bill` reads) gives them.

Everything that builds or reads a line derives its field names from here: the scheduler and
the outbox build Settle with `settle_args`, the contract parses it with `parse_settle`
(ledger.contract.billing), the auditor compares the bill document's `document_fields` with
the ledger's record, reconcile compares the Settlement row's columns (`stored`) with it. A
field renamed here is renamed for all of them; docs/billing.md describes the line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from attest import readings
from ledger import money
from ledger.contract import args as args
from ledger.contract.state import SEQ_DIGITS

Parser = Callable[[dict[str, Any], str], Any]
MAX_BATCHES = 256  # per bill line: ~130 bytes each keeps Settle's argument under 64 KiB
MAX_BATCH_ROWS = 10**6  # one GPU's readings between two quotes
DIGEST_BYTES = 32


def _final(req: dict[str, Any], name: str) -> bool:
    value = req.get(name, False)
    if not isinstance(value, bool):
        raise args.ArgumentError(f"{name}: must be true or false, got {value!r}")
    return value


def _seq(req: dict[str, Any], name: str) -> int:
    return args.integer(req, name, 0, 10**SEQ_DIGITS - 1)


def _natural(req: dict[str, Any], name: str) -> int:
    return args.integer(req, name, 0, args.MAX_INT)


def _energy_mj(req: dict[str, Any], name: str) -> int:
    return args.integer(req, name, 0, money.MAX_ENERGY_MJ)


def _digest(req: dict[str, Any], name: str) -> str:
    return args.hexbytes(req, name, 32, 32).hex()


def _batches(req: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [b.as_dict() for b in parse_batches(req)]


def _amount(req: dict[str, Any], name: str) -> int:
    return args.integer(req, name, -args.MAX_INT, args.MAX_INT)


@dataclass(frozen=True)
class Field:
    """One Settle argument: its name on the ledger, its shape check, and its name in the web
    app's query model where that differs."""

    name: str
    parse: Parser
    stored_as: str = ""

    @property
    def stored(self) -> str:
        return self.stored_as or self.name


LEASE_ID, INTERVAL_SEQ = "lease_id", "interval_seq"
START_MS, END_MS = "start_ms", "end_ms"
INTERVAL = (START_MS, END_MS)
MEASURED = "measured_mj"  # the GPU energy measured, all GPUs (mJ)
DIGEST, BATCHES = "telemetry_digest", "telemetry_batches"  # the attested readings it cites
FINAL = "final"
# The rates of the lease's terms a request states; each must equal the terms'
CLAIMED_RATES = ("tariff_micro_per_kwh", "pue_milli", "capacity_micro_per_gpu_hour")
# The amounts a request states (money.Line's fields); each must equal the contract's
CLAIMED_AMOUNTS = tuple(f.name for f in fields(money.Line))

FIELDS = (
    Field(LEASE_ID, args.identifier),
    Field(INTERVAL_SEQ, _seq),
    *(Field(name, _natural) for name in INTERVAL),
    Field(MEASURED, _energy_mj, stored_as="measured_energy_mj"),
    Field(DIGEST, _digest),
    Field(BATCHES, _batches),
    Field(FINAL, _final),
    *(Field(name, _natural) for name in CLAIMED_RATES),
    *(Field(name, _amount) for name in CLAIMED_AMOUNTS),
)
SETTLE_ARGS = tuple(f.name for f in FIELDS)
KEY = (LEASE_ID, INTERVAL_SEQ)
# What a line states beside its key: the Settlement row's columns, under their stored names
FIGURES = tuple(name for name in SETTLE_ARGS if name not in KEY)
# What the contract adds when it records the line
RECORDED = (*SETTLE_ARGS, "generation", "tx_id", "timestamp_ns")
# The bill document's line (GET /api/v1/bills/): these at its top, under their stored names,
# the interval and the rates nested (`document`)
DOCUMENT_FIELDS = tuple(name for name in FIGURES if name not in (*INTERVAL, *CLAIMED_RATES))
_STORED = {f.name: f.stored for f in FIELDS}


def parse_batches(req: dict[str, Any]) -> list[readings.Batch]:
    """Settle's `telemetry_batches`: [{gpu, digest, rows}], at most MAX_BATCHES."""
    value = req.get(BATCHES, [])
    if not isinstance(value, list) or len(value) > MAX_BATCHES:
        raise args.ArgumentError(f"{BATCHES}: must be a list of at most {MAX_BATCHES} batches")
    out = []
    for i, item in enumerate(value):
        where = f"{BATCHES}[{i}]"
        if not isinstance(item, dict) or set(item) != {"gpu", "digest", "rows"}:
            raise args.ArgumentError(f"{where}: must be an object with gpu, digest and rows")
        out.append(
            readings.Batch(
                args.identifier(item, "gpu"),
                args.hexbytes(item, "digest", DIGEST_BYTES, DIGEST_BYTES).hex(),
                args.integer(item, "rows", 1, MAX_BATCH_ROWS),
            )
        )
    if len({(b.gpu, b.digest) for b in out}) != len(out):
        raise args.ArgumentError(f"{BATCHES}: a batch is cited twice")
    return out


def stored(name: str) -> str:
    """The query model's name (Settlement column, bill document key) of a ledger field."""
    return _STORED.get(name, name)


def parse_settle(req: dict[str, Any]) -> dict[str, Any]:
    """Settle's arguments, each shape-checked (args.ArgumentError names the field)."""
    return {f.name: f.parse(req, f.name) for f in FIELDS}


def settle_args(lease_id: str, interval_seq: int, figures: Mapping[str, Any]) -> dict[str, Any]:
    """The Settle arguments of line `interval_seq` of `lease_id`: its FIGURES, read from
    `figures` under their ledger names (rates and amounts may come with other keys beside
    them, a lease's terms and a money.Line's as_dict(), say). A missing one is an error."""
    missing = [name for name in FIGURES if name not in figures]
    if missing:
        raise KeyError(f"bill line {lease_id}#{interval_seq}: no {', '.join(missing)}")
    return {LEASE_ID: lease_id, INTERVAL_SEQ: interval_seq, **{n: figures[n] for n in FIGURES}}


def from_stored(row: object) -> dict[str, Any]:
    """A stored line's FIGURES under their ledger names (a Settlement row's attributes)."""
    return {name: getattr(row, stored(name)) for name in FIGURES}


def to_stored(figures: Mapping[str, Any]) -> dict[str, Any]:
    """A line's FIGURES under the query model's names (a Settlement row's columns)."""
    return {stored(name): figures[name] for name in FIGURES}


def document(figures: Mapping[str, Any]) -> dict[str, Any]:
    """A line's figures as the bill document states them (what `ledger audit-bill`
    compares with the ledger's record, field by field)."""
    return {
        **{stored(name): figures[name] for name in DOCUMENT_FIELDS},
        "interval": {name: figures[name] for name in INTERVAL},
        "rates": {name: figures[name] for name in CLAIMED_RATES},
    }
