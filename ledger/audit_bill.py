"""`python -m ledger audit-bill`: re-derive every line of a tenant's bill from ledger receipts
alone, with trust anchors the auditor brings.

For each line of the bill (the `GET /api/bills/` document) the auditor needs the receipt of
its lease (`DIR/<lease>.json`, as `GET /api/leases/<id>/receipt/` or `python -m ledger
receipt` writes it). A line holds when:
- the receipt's channel names exactly the organisation CAs the auditor trusts (`--trust`,
  read by ledger.genesis.load_roots): a receipt from a channel the auditor did not name
  fails, however well it is signed;
- the receipt verifies (hash chain, block data hashes, creator and endorsement signatures
  against those roots and the channel's policy: ledger.receipt);
- the transaction the line names is a valid Settle in the receipt, for this lease and
  interval, whose written line re-derives from the lease terms written beside it
  (ledger.money, the contract's own arithmetic);
- every figure of the bill line equals the ledger's;
- with `--readings DIR`, the readings behind the line (`DIR/<lease>/<seq>.csv`, the canonical
  rows of the attested batches it cites) split into those batches and re-hash to them and to
  the line's telemetry digest, and their counters inside the interval add up to its measured
  energy (ledger.readings; docs/billing.md, "Attested telemetry").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger import readings as telemetry
from ledger.contract_state import SETTLEMENT
from ledger.engine.tx import VALID, decode_envelope
from ledger.genesis import load_roots
from ledger.receipt import check_settlement, load_receipt, verify_receipt

# bill line field -> the ledger's settlement record field
COMPARED = {
    "capacity_micro": "capacity_micro",
    "priced_energy_micro": "priced_energy_micro",
    "measured_energy_mj": "measured_mj",
    "measured_energy_micro": "measured_energy_micro",
    "settlement_micro": "settlement_micro",
    "total_micro": "total_micro",
    "final": "final",
    "telemetry_digest": "telemetry_digest",
    "telemetry_batches": "telemetry_batches",
}
INTERVAL = (("start_ms", "start_ms"), ("end_ms", "end_ms"))


class UnusableInput(ValueError):
    """The bill, a receipt or the trust anchors cannot be read at all (exit code 2)."""


@dataclass
class LineVerdict:
    lease: str
    seq: int
    reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.reasons

    def __str__(self) -> str:
        head = f"lease {self.lease} line {self.seq}:"
        return f"{head} OK" if self.ok else f"{head} FAIL: " + "; ".join(self.reasons)


def load_trust(path: Path) -> dict[str, bytes]:
    """The auditor's trust anchors (ledger.genesis.load_roots), or UnusableInput."""
    try:
        return load_roots(path)
    except (OSError, ValueError) as exc:
        raise UnusableInput(f"--trust {path}: {exc}") from None


def load_bill(path: Path) -> list[dict[str, Any]]:
    try:
        bill = json.loads(path.read_text())
        lines = bill["lines"]
        if not isinstance(lines, list):
            raise TypeError("lines is not a list")
        return lines
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnusableInput(f"bill {path}: {exc}") from None


class Auditor:
    def __init__(self, receipts: Path, roots: dict[str, bytes], readings: Path | None) -> None:
        self.receipts, self.roots, self.readings = receipts, roots, readings
        self._checked: dict[str, tuple[dict[str, Any] | None, list[str]]] = {}

    def receipt(self, lease: str) -> tuple[dict[str, Any] | None, list[str]]:
        """The lease's receipt and what is wrong with it as a whole (cached per lease)."""
        if lease not in self._checked:
            path = self.receipts / f"{lease}.json"
            try:
                receipt = load_receipt(path)
            except (OSError, ValueError) as exc:
                self._checked[lease] = (None, [f"no usable receipt {path.name}: {exc}"])
            else:
                problems = verify_receipt(receipt, self.roots)
                self._checked[lease] = (receipt, problems)
        return self._checked[lease]

    def line(self, item: dict[str, Any]) -> LineVerdict:
        verdict = LineVerdict(str(item.get("lease")), int(item.get("seq", -1)))
        receipt, problems = self.receipt(verdict.lease)
        verdict.reasons.extend(problems)
        if receipt is None or problems:
            return verdict
        record, found = _settlement(receipt, verdict, (item.get("evidence") or {}).get("tx_id"))
        verdict.reasons.extend(found)
        if record is None:
            return verdict
        interval = item.get("interval") or {}
        view = {**item, "start_ms": interval.get("start_ms"), "end_ms": interval.get("end_ms")}
        for name, ledger_name in (*COMPARED.items(), *INTERVAL):
            mine, theirs = view.get(name), record.get(ledger_name)
            if mine != theirs:
                verdict.reasons.append(f"{name} {mine} differs from the ledger's {theirs}")
        if self.readings is not None:
            verdict.reasons.extend(self._readings(verdict, record))
        return verdict

    def _readings(self, verdict: LineVerdict, record: dict[str, Any]) -> list[str]:
        path = self.readings / verdict.lease / f"{verdict.seq}.csv" if self.readings else None
        try:
            rows = telemetry.parse_rows(path.read_text()) if path else []
        except (OSError, ValueError) as exc:
            return [f"readings {path}: {exc}"]
        out = []
        batches = [telemetry.Batch(**b) for b in record.get("telemetry_batches", [])]
        unmatched = telemetry.split_batches(rows, batches)
        if unmatched:
            out.append("readings hash to other batches than the ledger's: " + "; ".join(unmatched))
        digest, on_ledger = telemetry.evidence_digest(batches), record["telemetry_digest"]
        if digest != on_ledger:
            out.append(f"batches hash to {digest[:16]}..., the ledger has {on_ledger[:16]}...")
        try:
            energy = telemetry.energy_mj(
                telemetry.within(rows, record["start_ms"], record["end_ms"])
            )
        except ValueError as exc:
            return [*out, f"readings {path}: {exc}"]
        if energy != record["measured_mj"]:
            out.append(f"readings add up to {energy} mJ, the ledger has {record['measured_mj']}")
        return out


def _settlement(
    receipt: dict[str, Any], verdict: LineVerdict, tx_id: Any
) -> tuple[dict[str, Any] | None, list[str]]:
    """The settlement record the line's transaction wrote, re-derived from its terms."""
    for entry in receipt["transactions"]:
        if entry["tx_id"] != tx_id:
            continue
        tx = decode_envelope(entry["envelope"].encode())
        where = f"tx {tx_id}"
        if entry["code"] != VALID or tx.proposal["fn"] != "Settle":
            return None, [f"{where} is not a valid Settle"]
        prefix = f"\x00{SETTLEMENT}\x00"
        records = [json.loads(v) for k, v in tx.rwset.writes.items() if k.startswith(prefix) and v]
        if len(records) != 1:
            return None, [f"{where} wrote no single bill line"]
        record = records[0]
        if (record["lease_id"], record["interval_seq"]) != (verdict.lease, verdict.seq):
            return None, [
                f"{where} settled {record['lease_id']} line {record['interval_seq']}, not this one"
            ]
        return record, check_settlement(where, tx.rwset.writes)
    return None, [f"the receipt has no transaction {tx_id!r}"]


def audit_bill(
    bill: Path, receipts: Path, trust: Path, readings: Path | None = None
) -> list[LineVerdict]:
    """A verdict per bill line. Raises UnusableInput when the inputs cannot be read."""
    lines = load_bill(bill)
    if not receipts.is_dir():
        raise UnusableInput(f"--receipts {receipts} is not a directory")
    auditor = Auditor(receipts, load_trust(trust), readings)
    return [auditor.line(item) for item in lines]
