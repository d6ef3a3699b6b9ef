"""`python -m ledger audit-bill`: re-derive every line of a tenant's bill from ledger receipts
alone, with trust anchors the auditor brings, then check the bill as a whole (its tenant,
total, completeness: ledger.audit.bill_whole). Every reason starts with its code
(`[bill.field]`, ...: docs/threat-model.md).

For each line of the bill (the `GET /api/bills/` document) the auditor needs the receipt of
its lease (`DIR/<lease>.json`, as `GET /api/leases/<id>/receipt/` or `python -m ledger
receipt` writes it). A line holds when:
- the receipt verifies against the trust anchors the auditor names (`--trust`), by the
  verifier of its backend (ledger.audit.receipt_trust): an embedded ledger's receipt when its
  channel names exactly the organisation CAs trusted (hash chain, block data hashes, creator
  and endorsement signatures against the channel's policy: ledger.audit.receipt); a Fabric
  channel's when its blocks are signed by a trusted orderer and every transaction is endorsed
  by a peer of every trusted organisation, on the channel the roots file names
  (ledger.audit.fabric_receipt). A receipt from a channel the auditor did not name fails, however
  well it is signed;
- the transaction the line names is a Settle the block marks VALID, for this lease and
  interval, whose written line re-derives from the lease terms written beside it
  (ledger.money, the contract's own arithmetic);
- every figure of the bill line equals the ledger's;
- every batch of readings the line cites was attested by a quote the ledger recorded valid:
  the receipt holds the RecordAttestation, marked VALID, that wrote the batch's
  attested-telemetry key and its attestation record with `valid: true` (the receipt
  exporters include it: ledger.audit.receipt.cited_marks);
- with `--readings DIR`, the readings behind the line (`DIR/<lease>/<seq>.csv`, the canonical
  rows of the attested batches it cites) split into those batches and re-hash to them and to
  the line's telemetry digest, and their counters inside the interval add up to its measured
  energy (attest.readings; docs/billing.md, "Attested telemetry").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attest import readings as telemetry
from ledger.audit.bill_whole import LeaseLines, bill_defects, lease_lines
from ledger.audit.receipt import (
    ReceiptTx,
    attested_by,
    check_settlement,
    load_receipt,
    written_lines,
)
from ledger.audit.receipt_trust import TrustAnchors, TrustError, load_trust, transactions
from ledger.contract import bill_line
from ledger.contract.attested_telemetry import mark_key
from ledger.engine.tx import VALID

# bill line field -> the ledger's settlement record field (ledger.contract.bill_line)
COMPARED = {bill_line.stored(name): name for name in bill_line.DOCUMENT_FIELDS}
INTERVAL = bill_line.INTERVAL
# a lease's ledger id, as a file name of the receipts folder too (never a path)
LEASE_ID = re.compile(r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,127}")


# where the auditor gets a lease's receipt and a line's readings (canonical CSV rows): files
# for the command line, the ledger and the database for the console; OSError or ValueError
# when there is none
ReceiptSource = Callable[[str], Any]
ReadingsSource = Callable[[str, int], str]


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


class BillVerdict(LineVerdict):
    """The verdict on the bill as a whole (ledger.audit.bill_whole)."""

    def __str__(self) -> str:
        return "bill: OK" if self.ok else "bill: FAIL: " + "; ".join(self.reasons)


def trust_anchors(path: Path) -> TrustAnchors:
    """The auditor's trust anchors (ledger.audit.receipt_trust), or UnusableInput."""
    try:
        return load_trust(path)
    except (OSError, ValueError) as exc:
        raise UnusableInput(f"--trust {path}: {exc}") from None


def load_bill(path: Path) -> dict[str, Any]:
    try:
        bill = json.loads(path.read_text())
        if not isinstance(bill["lines"], list):
            raise TypeError("lines is not a list")
        return bill
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnusableInput(f"bill {path}: {exc}") from None


def receipt_files(folder: Path) -> ReceiptSource:
    """`DIR/<lease>.json`, as `GET /api/v1/leases/<id>/receipt/` gives it."""
    return lambda lease: load_receipt(folder / f"{lease}.json")


def readings_files(folder: Path) -> ReadingsSource:
    """`DIR/<lease>/<seq>.csv`, as `GET /api/v1/leases/<id>/readings/?seq=N` gives it."""
    return lambda lease, seq: (folder / lease / f"{seq}.csv").read_text()


class Auditor:
    """Verdicts on bill lines; receipts are verified once per lease."""

    def __init__(
        self, receipts: ReceiptSource, trust: TrustAnchors, readings: ReadingsSource | None
    ) -> None:
        self.receipts, self.trust, self.readings = receipts, trust, readings
        self._checked: dict[str, tuple[dict[str, Any] | None, list[str]]] = {}
        self._attested: dict[str, set[str]] = {}
        self._txs: dict[str, dict[str, ReceiptTx]] = {}

    def receipt(self, lease: str) -> tuple[dict[str, Any] | None, list[str]]:
        """The lease's receipt and what is wrong with it as a whole (cached per lease)."""
        if lease not in self._checked:
            try:
                receipt = self.receipts(lease)
            except (OSError, ValueError) as exc:
                reason = f"[bill.no_receipt] no usable receipt of lease {lease}: {exc}"
                self._checked[lease] = (None, [reason])
            else:
                try:
                    problems = self.trust.verify(receipt)
                except TrustError as exc:
                    problems = [str(exc)]
                if isinstance(receipt, dict) and receipt.get("lease_id") != lease:
                    problems.append(f"the receipt is of lease {receipt.get('lease_id')!r}")
                self._checked[lease] = (receipt, [f"[bill.receipt] {p}" for p in problems])
        return self._checked[lease]

    def transactions(self, lease: str) -> dict[str, ReceiptTx]:
        """The transactions of the lease's receipt, once it verified (cached per lease)."""
        if lease not in self._txs:
            receipt, problems = self.receipt(lease)
            self._txs[lease] = transactions(receipt) if receipt and not problems else {}
        return self._txs[lease]

    def lease_lines(self, lease: str) -> LeaseLines | None:
        """The lease's tenant and lines as its verified receipt shows them, or None."""
        receipt, problems = self.receipt(lease)
        if receipt is None or problems:
            return None
        return lease_lines(lease, self.transactions(lease))

    def bill(self, document: Any, tenant: str | None) -> list[str]:
        """What is wrong with the bill as a whole (ledger.audit.bill_whole)."""
        items = document.get("lines") if isinstance(document, dict) else None
        leases = {
            i["lease"]
            for i in items or []
            if isinstance(i, dict)
            and isinstance(i.get("lease"), str)
            and LEASE_ID.fullmatch(i["lease"])
        }
        return bill_defects(document, tenant, {lease: self.lease_lines(lease) for lease in leases})

    def line(self, item: Any) -> LineVerdict:
        shaped = item if isinstance(item, dict) else {}
        lease, seq = shaped.get("lease"), shaped.get("seq")
        well_formed = (
            isinstance(lease, str)
            and LEASE_ID.fullmatch(lease) is not None
            and isinstance(seq, int)
            and not isinstance(seq, bool)
            and seq >= 0
            and isinstance(shaped.get("evidence"), dict)
            and isinstance(shaped.get("interval"), dict)
        )
        verdict = LineVerdict(str(lease), seq if isinstance(seq, int) else -1)
        if not well_formed:
            verdict.reasons.append(
                "[bill.line_shape] not a bill line: it needs lease (a ledger id), seq (an "
                "integer >= 0), interval and evidence (objects)"
            )
            return verdict
        receipt, problems = self.receipt(verdict.lease)
        verdict.reasons.extend(problems)
        if receipt is None or problems:
            return verdict
        tx_id = item["evidence"].get("tx_id")
        record, found = _settlement(self.transactions(verdict.lease), verdict, tx_id)
        verdict.reasons.extend(found)
        if record is None:
            return verdict
        verdict.reasons.extend(_differences(item, record, self.transactions(verdict.lease)[tx_id]))
        verdict.reasons.extend(self._unattested(verdict.lease, record))
        if self.readings is not None:
            verdict.reasons.extend(f"[bill.readings] {r}" for r in self._readings(verdict, record))
        return verdict

    def _unattested(self, lease: str, record: dict[str, Any]) -> list[str]:
        """A reason for each batch the line cites that no valid quote in the receipt
        attested."""
        if lease not in self._attested:
            self._attested[lease] = attested_marks(self.transactions(lease))
        return [
            f"[bill.unattested] batch {b['digest'][:16]}... of GPU {b['gpu']}: no quote in the "
            "receipt attested it"
            for b in record.get(bill_line.BATCHES, [])
            if mark_key(b["gpu"], b["digest"]) not in self._attested[lease]
        ]

    def _readings(self, verdict: LineVerdict, record: dict[str, Any]) -> list[str]:
        try:
            text = self.readings(verdict.lease, verdict.seq) if self.readings else ""
            rows = telemetry.parse_rows(text)
        except (OSError, ValueError) as exc:
            return [f"readings of line {verdict.seq}: {exc}"]
        out = []
        batches = [telemetry.Batch(**b) for b in record.get(bill_line.BATCHES, [])]
        unmatched = telemetry.split_batches(rows, batches)
        if unmatched:
            out.append("readings hash to other batches than the ledger's: " + "; ".join(unmatched))
        digest, on_ledger = telemetry.evidence_digest(batches), record[bill_line.DIGEST]
        if digest != on_ledger:
            out.append(f"batches hash to {digest[:16]}..., the ledger has {on_ledger[:16]}...")
        try:
            energy = telemetry.energy_mj(
                telemetry.within(rows, record["start_ms"], record["end_ms"])
            )
        except ValueError as exc:
            return [*out, f"readings of line {verdict.seq}: {exc}"]
        if energy != record[bill_line.MEASURED]:
            out.append(
                f"readings add up to {energy} mJ, the ledger has {record[bill_line.MEASURED]}"
            )
        return out


def attested_marks(txs: dict[str, ReceiptTx]) -> set[str]:
    """The attested-telemetry keys written by RecordAttestations of a verified receipt that
    are VALID, recorded the quote valid, and name themselves as the attesting quote."""
    marks = set()
    for tx_id, tx in txs.items():
        if not tx.valid or tx.fn != "RecordAttestation":
            continue
        try:
            marks |= attested_by(tx_id, tx.writes)
        except (ValueError, AttributeError):
            continue  # not what the contract writes: attests nothing
    return marks


def _differences(item: dict[str, Any], record: dict[str, Any], tx: ReceiptTx) -> list[str]:
    """Every figure of the line against the ledger's record: the amounts and interval always,
    the rates, generation, block and validation code wherever the bill states them."""
    interval, rates, evidence = item["interval"], item.get("rates"), item["evidence"]
    pairs = [(name, item.get(name), record.get(theirs)) for name, theirs in COMPARED.items()]
    pairs += [(f"interval.{name}", interval.get(name), record.get(name)) for name in INTERVAL]
    if "generation" in item:
        pairs.append(("generation", item["generation"], record.get("generation")))
    if isinstance(rates, dict):
        pairs += [(f"rates.{k}", v, record.get(k)) for k, v in sorted(rates.items())]
    elif rates is not None:
        pairs.append(("rates", rates, "an object"))
    if evidence.get("block") is not None:
        pairs.append(("evidence.block", evidence["block"], tx.at[0]))
    if evidence.get("validation_code") is not None:
        # the receipt proved the Settle valid (ledger.audit.validity): any other code is false
        pairs.append(("evidence.validation_code", evidence["validation_code"], VALID))
    return [
        f"[bill.field] {name} {mine} differs from the ledger's {theirs}"
        for name, mine, theirs in pairs
        if mine != theirs or type(mine) is not type(theirs)
    ]


def _settlement(
    txs: dict[str, ReceiptTx], verdict: LineVerdict, tx_id: Any
) -> tuple[dict[str, Any] | None, list[str]]:
    """The settlement record the line's transaction wrote, re-derived from its terms."""
    tx = txs.get(tx_id) if isinstance(tx_id, str) else None
    if tx is None:
        return None, [f"[bill.not_settle] the receipt has no transaction {tx_id!r}"]
    where = f"tx {tx_id}"
    if not tx.valid or tx.fn != "Settle":
        return None, [f"[bill.not_settle] {where} is not a valid Settle"]
    records = written_lines(tx.writes)
    if len(records) != 1:
        return None, [f"[bill.not_settle] {where} wrote no single bill line"]
    record = records[0]
    if (record["lease_id"], record["interval_seq"]) != (verdict.lease, verdict.seq):
        return None, [
            f"[bill.other_line] {where} settled {record['lease_id']} line "
            f"{record['interval_seq']}, not this one"
        ]
    return record, [f"[bill.settlement] {d}" for d in check_settlement(where, tx.writes)]


def audit_bill(
    bill: Path,
    receipts: Path,
    trust: Path,
    readings: Path | None = None,
    tenant: str | None = None,
) -> list[LineVerdict]:
    """A verdict per bill line, then one on the bill as a whole when it does not hold (the
    tenant named: `tenant`, else the one the bill names). Raises UnusableInput when the inputs
    cannot be read."""
    document = load_bill(bill)
    if not receipts.is_dir():
        raise UnusableInput(f"--receipts {receipts} is not a directory")
    auditor = Auditor(
        receipt_files(receipts),
        trust_anchors(trust),
        readings_files(readings) if readings is not None else None,
    )
    verdicts = [auditor.line(item) for item in document["lines"]]
    whole = BillVerdict("bill", -1, auditor.bill(document, tenant))
    return verdicts if whole.ok else [*verdicts, whole]
