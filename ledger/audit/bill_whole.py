"""The checks of a bill as a whole (`audit-bill`): what no single line can show.

A bill (`GET /api/v1/bills/`) names its tenant, its period (`period.start_ms` ..
`period.end_ms`, UTC ms, each null when open: a line belongs to it when its interval ends
inside), when it was made (`as_of_ms`) and its total. It holds when:
- it is of the tenant the auditor names (`--tenant`), and every lease it bills is that
  tenant's on the ledger (the lease record its receipt shows) [bill.tenant];
- its total is the sum of its lines, its count their number [bill.total] [bill.count];
- no line is listed twice, nor one transaction named by two lines [bill.duplicate_line];
- every lease has a receipt [bill.no_receipt];
- each lease's lines on the ledger are contiguous from the lease's start (line 0 starts
  there, each next one where the previous ended) [bill.gap], and every line the ledger
  recorded by `as_of_ms` that ends inside the period is on the bill [bill.dropped_line],
  none outside it [bill.outside_period].
A lease's ledger lines are the Settles its receipt proves valid (ledger.audit.validity: the
receipt holds every write of the lease's keys that a later one read).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ledger.audit.receipt import ReceiptTx, written_lines
from ledger.contract.state import LEASE
from ledger.units import NS_PER_MS

BILL_FIELDS = {"tenant": str, "total_micro": int, "lines": list, "period": dict, "as_of_ms": int}


@dataclass
class LeaseLines:
    """What a lease's receipt shows: its tenant, where its billing starts, its lines."""

    tenant: str | None = None
    start_ms: int | None = None
    lines: dict[int, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # seq -> tx, rec


def lease_lines(lease_id: str, txs: dict[str, ReceiptTx]) -> LeaseLines:
    """The lease's latest record and every line of it, from a verified receipt's transactions."""
    out = LeaseLines()
    valid = {tx_id: tx for tx_id, tx in txs.items() if tx.valid}
    records = [(tx.at, tx.writes.get(LEASE + lease_id)) for tx in valid.values()]
    # positions are unique in a receipt: the tuples never compare their values
    latest = max(((at, value) for at, value in records if value), default=None)
    for tx_id, tx in valid.items():
        if tx.fn == "Settle":
            for record in written_lines(tx.writes):
                if record.get("lease_id") == lease_id:
                    out.lines[record["interval_seq"]] = (tx_id, record)
    if latest is not None:
        lease = json.loads(latest[1])
        out.tenant = lease.get("tenant")
        first = lease["migrations"][0]["terms"] if lease.get("migrations") else lease.get("terms")
        out.start_ms = first.get("start_ms") if isinstance(first, dict) else None
    return out


def bill_defects(bill: Any, tenant: str | None, leases: dict[str, LeaseLines | None]) -> list[str]:
    """What is wrong with the bill as a whole. `leases`: each billed lease's lines as its
    receipt shows them (None: no usable receipt)."""
    shape = [
        f"[bill.shape] {name}: must be a {kind.__name__}"
        for name, kind in BILL_FIELDS.items()
        if not isinstance(bill.get(name) if isinstance(bill, dict) else None, kind)
        or isinstance(bill.get(name), bool)
    ]
    if shape:
        return shape
    named = tenant if tenant is not None else bill["tenant"]
    defects = []
    if bill["tenant"] != named:
        defects.append(f"[bill.tenant] the bill is of tenant {bill['tenant']!r}, not {named!r}")
    lines = [i for i in bill["lines"] if _shaped(i)]
    defects += _sums(bill) + _duplicates(lines)
    low, high = _period(bill["period"])
    billed: dict[str, set[int]] = {}
    for item in lines:
        billed.setdefault(item["lease"], set()).add(item["seq"])
    for lease, seqs in sorted(billed.items()):
        shown = leases.get(lease)
        if shown is None:
            defects.append(f"[bill.no_receipt] lease {lease} has no usable receipt")
            continue
        if shown.tenant != named:
            defects.append(
                f"[bill.tenant] lease {lease} is tenant {shown.tenant!r}'s on the ledger"
            )
        defects += _contiguous(lease, shown)
        cutoff_ns = bill["as_of_ms"] * NS_PER_MS
        for seq, (_, record) in sorted(shown.lines.items()):
            inside = low <= record["end_ms"] < high
            if inside and seq not in seqs and record.get("timestamp_ns", 0) <= cutoff_ns:
                defects.append(f"[bill.dropped_line] lease {lease} line {seq} is not on the bill")
            if not inside and seq in seqs:
                defects.append(
                    f"[bill.outside_period] lease {lease} line {seq} ends at "
                    f"{record['end_ms']}, outside the bill's period"
                )
    return defects


def _shaped(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and isinstance(item.get("lease"), str)
        and isinstance(item.get("seq"), int)
        and not isinstance(item.get("seq"), bool)
    )


def _sums(bill: dict[str, Any]) -> list[str]:
    out = []
    totals = [i.get("total_micro") for i in bill["lines"]]
    if all(isinstance(t, int) and not isinstance(t, bool) for t in totals):
        if sum(totals) != bill["total_micro"]:
            out.append(
                f"[bill.total] total_micro {bill['total_micro']} is not the sum of its lines, "
                f"{sum(totals)}"
            )
    else:
        out.append("[bill.total] a line's total_micro is not an integer")
    if "count" in bill and bill["count"] != len(bill["lines"]):
        out.append(f"[bill.count] count {bill['count']} but {len(bill['lines'])} lines")
    return out


def _duplicates(lines: list[dict[str, Any]]) -> list[str]:
    out = []
    for (lease, seq), n in sorted(Counter((i["lease"], i["seq"]) for i in lines).items()):
        if n > 1:
            out.append(f"[bill.duplicate_line] lease {lease} line {seq} is listed {n} times")
    named = [i["evidence"].get("tx_id") for i in lines if isinstance(i.get("evidence"), dict)]
    txs = Counter(t for t in named if isinstance(t, str))  # any other value: no transaction
    for tx_id, n in sorted(txs.items()):
        if n > 1:
            out.append(f"[bill.duplicate_line] transaction {tx_id} is named by {n} lines")
    return out


def _period(period: dict[str, Any]) -> tuple[float, float]:
    low, high = period.get("start_ms"), period.get("end_ms")
    return (
        -math.inf if not isinstance(low, int) else low,
        math.inf if not isinstance(high, int) else high,
    )


def _contiguous(lease: str, shown: LeaseLines) -> list[str]:
    """The lease's ledger lines: 0, 1, ... each starting where the previous ended, line 0
    where the lease's billing starts."""
    out = []
    until = shown.start_ms
    for expected, seq in enumerate(sorted(shown.lines)):
        record = shown.lines[seq][1]
        if seq != expected:
            out.append(f"[bill.gap] lease {lease}: the ledger shows line {seq}, not {expected}")
            break
        if record["start_ms"] != until:
            out.append(
                f"[bill.gap] lease {lease} line {seq} starts at {record['start_ms']}, "
                f"not where the lease was billed until ({until})"
            )
        until = record["end_ms"]
    return out
