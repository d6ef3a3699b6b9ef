"""The ledger as the operator watches it, from the outbox (the query model of what was
written, on the embedded engine and on Fabric alike): transactions and blocks per second,
outbox-to-commit latency, validation codes, and the outbox depth over time."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter, defaultdict
from typing import Any

from ledger.units import datetime_of_ms, ms_of
from webapp.dashboard.ranges import Range, bucket_of
from webapp.outbox.models import OutboxEntry

MAX_ENTRIES = 50_000  # bound one page's work: the newest entries of the range
LATENCY_PERCENTILES = (50, 99)


def _percentile(values: list[float], pct: int) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def ledger_page(rng: Range, now_ms: int | None = None) -> dict[str, Any]:
    since, until = rng.window(now_ms)
    since_dt = datetime_of_ms(since)
    entries = list(
        OutboxEntry.objects.filter(created__gte=since_dt)
        .order_by("-created")
        .values("created", "done", "status", "block_number", "validation_code", "function")[
            :MAX_ENTRIES
        ]
    )
    seconds = rng.bucket_ms / 1000
    txs: dict[int, int] = defaultdict(int)
    blocks: dict[int, set[int]] = defaultdict(set)
    latency: dict[int, list[float]] = defaultdict(list)
    codes: Counter[str] = Counter()
    for e in entries:
        codes[e["validation_code"] or e["status"].upper()] += 1
        if e["done"] is None:
            continue
        b = bucket_of(ms_of(e["done"]), rng.bucket_ms)
        txs[b] += 1
        if e["block_number"] is not None:
            blocks[b].add(e["block_number"])
        latency[b].append((e["done"] - e["created"]).total_seconds() * 1000)
    times = sorted(txs)
    depth_t, depth = _depth(entries, rng, since, until)
    return {
        "range": rng.name,
        "bucket_ms": rng.bucket_ms,
        "since": since,
        "until": until,
        "t": times,
        "transactions": [txs[t] for t in times],
        "tx_per_s": [round(txs[t] / seconds, 4) for t in times],
        "blocks_per_s": [round(len(blocks[t]) / seconds, 4) for t in times],
        "latency_ms": {
            f"p{p}": [_percentile(latency[t], p) for t in times] for p in LATENCY_PERCENTILES
        },
        "codes": dict(codes.most_common()),
        "depth": {"t": depth_t, "waiting": depth},
        "pending_now": OutboxEntry.objects.exclude(status=OutboxEntry.DONE).count(),
    }


def _depth(entries: list[dict], rng: Range, since: int, until: int) -> tuple[list[int], list[int]]:
    """Entries written but not yet committed at the end of each bucket: those created by
    then less those committed by then."""
    step = rng.bucket_ms
    edges = list(range(bucket_of(since, step) + step, until + step, step))
    made = sorted(ms_of(e["created"]) for e in entries)
    done = sorted(ms_of(e["done"]) for e in entries if e["done"] is not None)
    return edges, [bisect_right(made, edge) - bisect_right(done, edge) for edge in edges]
