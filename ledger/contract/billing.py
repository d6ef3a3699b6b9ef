"""What the contract checks before it records a bill line (`Settle`), as functions over plain
records so the contract, receipts and `audit-bill` apply the same rules.

A line covers [start_ms, end_ms] of one lease under the terms in force then. Lines follow
one another without gap or overlap from the start of the lease, never run past the ledger's
clock or the lease's end, never cross a migration, and none follows the final one. The
amounts are the contract's (ledger.money); a request's own figures are only compared with
them. Each refusal names its rule as `[settle.<rule>]`.
"""

from __future__ import annotations

from typing import Any

from ledger import money
from ledger.contract import args as args
from ledger.contract import bill_line
from ledger.contract.state import ContractError
from ledger.units import NS_PER_MS


def parse_request(req: dict[str, Any]) -> dict[str, Any]:
    """Settle's arguments, shape-checked: the fields of a bill line (ledger.contract.bill_line)."""
    return bill_line.parse_settle(req)


def terms_for(lease: dict[str, Any], start_ms: int, end_ms: int) -> dict[str, Any]:
    """The terms in force over the whole interval: before a migration the old terms, from it
    the new ones. An interval across a migration has no single price."""
    spans = [(m["terms"], m["terms"]["start_ms"], m["until_ms"]) for m in lease["migrations"]]
    spans.append((lease["terms"], lease["terms"]["start_ms"], None))
    for terms, begin, until in spans:
        if begin <= start_ms and (until is None or end_ms <= until):
            return terms
    raise ContractError(
        f"[settle.terms] interval [{start_ms}, {end_ms}] of lease {lease['lease_id']} crosses "
        f"a change of terms (migrations at {[m['until_ms'] for m in lease['migrations']]})"
    )


def check_sequence(lease: dict[str, Any], req: dict[str, Any], now_ns: int) -> None:
    """The interval continues the lease's bill: next in sequence, no gap or overlap, within
    the lease's active time, not after the final line."""
    where = f"lease {lease['lease_id']}"
    if "billing" not in lease or "terms" not in lease:
        raise ContractError(f"[settle.terms] {where} was recorded without terms (before bills)")
    bill = lease["billing"]
    if bill["final"]:
        raise ContractError(f"[settle.after_final] {where} was settled to its end already")
    if req["interval_seq"] != bill["next_seq"]:
        raise ContractError(
            f"[settle.sequence] {where}: interval_seq {req['interval_seq']} is not the next, "
            f"{bill['next_seq']}"
        )
    start, end, until = req["start_ms"], req["end_ms"], bill["billed_until_ms"]
    if start < until:
        raise ContractError(f"[settle.overlap] {where}: start_ms {start} < billed until {until}")
    if start > until:
        raise ContractError(f"[settle.gap] {where}: start_ms {start} > billed until {until}")
    if end < start:
        raise ContractError(f"[settle.interval] {where}: end_ms {end} < start_ms {start}")
    limit_ns = _ended_ns(lease) if "ended_ns" in lease else now_ns
    if end * NS_PER_MS > limit_ns:
        raise ContractError(
            f"[settle.outside] {where}: end_ms {end} is after "
            f"{'its end' if 'ended_ns' in lease else 'the ledger clock'} ({limit_ns // NS_PER_MS})"
        )


def _ended_ns(lease: dict[str, Any]) -> int:
    """When an ended lease let its GPUs go: its end_ms (EndLease), else its EndLease's time."""
    ended_ms = lease.get("ended_ms")
    return lease["ended_ns"] if ended_ms is None else ended_ms * NS_PER_MS


def end_of(lease: dict[str, Any], req: dict[str, Any], now_ns: int) -> int:
    """EndLease's end (ms): when the lease let its GPUs go, so the time until then stays
    the lease's (billed or billable) and no other lease may claim it
    (ledger.contract.rules.check_free). Given, it is the web app's end of the lease, within
    [what the lease billed or its current terms start, the ledger's clock]; else the clock."""
    floor = max(lease["billing"]["billed_until_ms"], lease["terms"]["start_ms"])
    now_ms = now_ns // NS_PER_MS
    if "end_ms" not in req:
        return max(now_ms, floor)
    end_ms = args.integer(req, "end_ms", 0, args.MAX_INT)
    if not floor <= end_ms <= now_ms:
        raise ContractError(
            f"[lease.end] end_ms {end_ms} of lease {lease['lease_id']} is not within "
            f"[{floor}, {now_ms}]: not before what it billed or its terms' start, not after "
            "the ledger's clock"
        )
    return end_ms


def check_measurement(terms: dict[str, Any], board_power_w: int, req: dict[str, Any]) -> None:
    """Measured energy is physical: not above what the boards can draw (readings a TPM
    attested can still be a broken counter's)."""
    measured, duration = req[bill_line.MEASURED], req["end_ms"] - req["start_ms"]
    limit = money.energy_limit_mj(board_power_w, len(terms["attributed_power_mw"]), duration)
    if measured > limit:
        raise ContractError(
            f"[settle.energy] {bill_line.MEASURED} {measured} exceeds board power "
            f"{board_power_w} W x "
            f"{len(terms['attributed_power_mw'])} GPUs x {duration} ms "
            f"+ {money.MEASURE_TOLERANCE_PCT} % = {limit}"
        )


def line_of(terms: dict[str, Any], req: dict[str, Any]) -> money.Line:
    """The line the contract computes, after refusing any rate or amount that differs."""
    for name in bill_line.CLAIMED_RATES:
        if req[name] != terms[name]:
            raise ContractError(
                f"[settle.rate] {name} {req[name]} is not the lease's term {terms[name]}"
            )
    line = money.interval_line(
        money.Terms.of(terms), req["start_ms"], req["end_ms"], req[bill_line.MEASURED]
    )
    wrong = {k: (req[k], v) for k, v in line.as_dict().items() if req[k] != v}
    if wrong:
        detail = ", ".join(f"{k} {got} (expected {want})" for k, (got, want) in wrong.items())
        raise ContractError(f"[settle.amount] {detail}")
    return line


def advance(lease: dict[str, Any], req: dict[str, Any]) -> None:
    """Move the lease's bill past the recorded line."""
    lease["billing"] = {
        "next_seq": req["interval_seq"] + 1,
        "billed_until_ms": req["end_ms"],
        "final": req["final"],
    }
