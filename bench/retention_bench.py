"""Storage that stops growing: a fleet's database day after day, with the retention worker's
pass (webapp/leasing/retention.apply_retention) at the end of each day, on PostgreSQL.

    python bench/retention_bench.py [--gpus 80] [--days 21] [--retention-days 7]

A run cannot last weeks, so the days are simulated: for each day, in SQL (generate_series),
the rows the fleet bench measured a live fleet writing per GPU-day (docs/benchmarks.md, "A
fleet on one app server"), with that bench's row shapes and sizes: a reading per GPU every
10 s (and its daily partition), and per node every 60 s one quote's attestation, its 8
readings batches, its nonce, its two audit rows and its two outbox rows (IssueChallenge,
RecordAttestation with the readings), plus each GPU's 24 hourly rollups. Then the retention
pass runs with that day's end as "now" (TELEMETRY_RETENTION_DAYS, ATTESTATION_RETENTION_DAYS
and OUTBOX_PROTOCOL_RETENTION_DAYS all --retention-days), then VACUUM (what autovacuum does
over a real day; pages freed by DELETE are reused, not returned), and the bench prints the
database's size. No lease runs, so no bill evidence is kept: that grows with the bills, as
docs/operations.md ("Sizing") says. The size must stop growing once the retention is in.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ops_pages import SAMPLE_MS, production_django, seed_fleet  # noqa: E402
from ledger.units import MS_PER_DAY as DAY_MS  # noqa: E402
from ledger.units import MS_PER_MINUTE as QUOTE_MS  # noqa: E402  (a quote a minute)

READINGS_ARGS_CHARS = 48 * 80  # a quote's 48 readings as CSV rows, in RecordAttestation's args


def write_attestations(cursor, first_ms: int, last_ms: int) -> None:
    """Every node's quote a minute from `first_ms` to `last_ms`: valid, with its clock."""
    cursor.execute(
        """
        INSERT INTO attestation_attestation (node_id, created, nonce, valid, reasons, quote,
                                             signature, pcr_values, clock, ledger_tx)
        SELECT n.id, to_timestamp(t / 1000.0), md5(n.id || ':' || t) || md5(t || ':' || n.id),
               true, '[]', decode(repeat(md5(t::text), 5), 'hex'),
               decode(repeat(md5(n.id::text), 2) || substr(md5(t::text), 1, 16), 'hex'),
               jsonb_build_object('sha256', jsonb_build_object(
                   '0', repeat(md5('0'), 2), '2', repeat(md5('2'), 2), '7', repeat(md5('7'), 2))),
               jsonb_build_object('clock', t, 'reset_count', 0, 'restart_count', 0,
                                  'safe', true),
               md5(t || 'tx') || md5(n.id || 'tx')
        FROM fleet_node n CROSS JOIN generate_series(%s::bigint, %s::bigint, %s) t
        """,
        [first_ms, last_ms, QUOTE_MS],
    )


def write_quote_audit(cursor, first_ms: int) -> None:
    """The two audit rows of each quote written since `first_ms`."""
    cursor.execute(
        """
        INSERT INTO core_auditevent (created, actor, action, object_type, object_id, data)
        SELECT a.created, 'node:' || a.node_id, x.action, x.type, x.id,
               jsonb_build_object('valid', true, 'codes', '[]'::jsonb, 'ledger_id', a.ledger_tx)
        FROM attestation_attestation a
        CROSS JOIN LATERAL (VALUES ('node.attested', 'node', a.node_id::text),
                                   ('attestation.recorded', 'attestation', a.id::text))
            AS x(action, type, id)
        WHERE a.created >= to_timestamp(%s / 1000.0)
        """,
        [first_ms],
    )


def write_day(cursor, first_ms: int) -> None:
    """One day of what the agent path writes, for every node and GPU, from `first_ms`."""
    last_ms = first_ms + DAY_MS - 1
    cursor.execute(
        """
        INSERT INTO fleet_telemetrysample (gpu_id, t_ms, energy_mj, power_mw, util_gpu_pct,
                                           util_mem_pct, temp_c)
        SELECT g.id, t, t * 300, 300000 + (t / 10000 %% 7) * 1000, 60, 30, 55
        FROM fleet_gpu g CROSS JOIN generate_series(%s::bigint, %s::bigint, %s) t
        """,
        [first_ms, last_ms, SAMPLE_MS],
    )
    write_attestations(cursor, first_ms, last_ms)
    cursor.execute(
        """
        INSERT INTO attestation_telemetrybatch (attestation_id, gpu_id, digest, first_ms,
                                                last_ms, rows, evidence)
        SELECT a.id, g.id, md5(a.id || ':' || g.id) || md5(g.id || ':' || a.id),
               extract(epoch FROM a.created)::bigint * 1000 - 50000,
               extract(epoch FROM a.created)::bigint * 1000, 6, ''
        FROM attestation_attestation a JOIN fleet_gpu g ON g.node_id = a.node_id
        WHERE a.created >= to_timestamp(%s / 1000.0)
        """,
        [first_ms],
    )
    cursor.execute(
        """
        INSERT INTO attestation_nonce (value, subject, expires_at, consumed)
        SELECT a.nonce, n.name, extract(epoch FROM a.created) + 120, true
        FROM attestation_attestation a JOIN fleet_node n ON n.id = a.node_id
        WHERE a.created >= to_timestamp(%s / 1000.0)
        """,
        [first_ms],
    )
    write_quote_audit(cursor, first_ms)
    cursor.execute(
        """
        INSERT INTO outbox_outboxentry (business_key, function, args, status, attempts,
                                        claimed_by, last_error, tx_id, block_number,
                                        validation_code, created, done)
        SELECT x.key, x.function, x.args, 'done', 1, 'relay', '', a.ledger_tx, 1, 'VALID',
               a.created, a.created + interval '1 second'
        FROM attestation_attestation a
        CROSS JOIN LATERAL (VALUES
            ('node:' || a.node_id || ':challenge:' || a.nonce, 'IssueChallenge',
             jsonb_build_object('node_id', a.node_id::text)),
            ('attestation:' || a.node_id || ':' || a.nonce, 'RecordAttestation',
             jsonb_build_object('node_id', a.node_id::text, 'nonce', a.nonce,
                                'quote', encode(a.quote, 'base64'),
                                'signature', encode(a.signature, 'base64'),
                                'pcr_values', a.pcr_values,
                                'readings', repeat('x', %s)))) AS x(key, function, args)
        WHERE a.created >= to_timestamp(%s / 1000.0)
        """,
        [READINGS_ARGS_CHARS, first_ms],
    )
    cursor.execute(
        """
        INSERT INTO fleet_gpuhour (gpu_id, hour_ms, samples, idle, util_sum, mem_sum,
                                   power_mw_sum, temp_sum, temp_max)
        SELECT g.id, h, 360, 0, 360 * 60, 360 * 30, 360 * 300000, 360 * 55, 55
        FROM fleet_gpu g CROSS JOIN generate_series(%s::bigint, %s::bigint, 3600000) h
        """,
        [first_ms, last_ms],
    )


def sizes(cursor) -> dict[str, int]:
    """Bytes per table (partitions summed into their parent), indexes included."""
    cursor.execute(
        "SELECT coalesce(p.relname, c.relname), sum(pg_total_relation_size(c.oid)) "
        "FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid "
        "LEFT JOIN pg_class p ON p.oid = i.inhparent "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname = 'public' GROUP BY 1"
    )
    return {name: int(size) for name, size in cursor.fetchall()}


def run(gpus: int, days: int) -> list[dict]:
    from django.db import connection

    from webapp.fleet.partitions import day_start_ms, ensure_days
    from webapp.leasing.retention import apply_retention

    seed_fleet(gpus)
    today = day_start_ms(int(time.time() * 1000))
    first = today - days * DAY_MS
    out = []
    with connection.cursor() as cursor:
        before = sum(sizes(cursor).values())
        for day in range(days):
            started = time.monotonic()
            start_ms = first + day * DAY_MS
            ensure_days([start_ms])
            write_day(cursor, start_ms)
            written_s = time.monotonic() - started
            retained = apply_retention(now_ms=start_ms + DAY_MS)
            cursor.execute("VACUUM")
            per_table = sizes(cursor)
            total = sum(per_table.values()) - before
            row = {
                "day": day + 1,
                "total_mb": round(total / 1e6, 1),
                "mb_per_gpu": round(total / 1e6 / gpus, 2),
                "write_s": round(written_s, 1),
                "retained": retained.as_dict(),
                "tables_mb": {
                    t: round(b / 1e6, 1)
                    for t, b in sorted(per_table.items(), key=lambda kv: -kv[1])
                    if b > 1e6
                },
            }
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=80)
    parser.add_argument("--days", type=int, default=21)
    parser.add_argument("--retention-days", type=int, default=7)
    args = parser.parse_args()
    for name in (
        "TELEMETRY_RETENTION_DAYS",
        "ATTESTATION_RETENTION_DAYS",
        "OUTBOX_PROTOCOL_RETENTION_DAYS",
    ):
        os.environ[name] = str(args.retention_days)

    from tests.services import temporary_postgres, temporary_redis

    with (
        tempfile.TemporaryDirectory() as tmp,
        temporary_postgres() as database_url,
        temporary_redis() as redis_url,
    ):
        production_django(tmp, database_url, redis_url)
        rows = run(args.gpus, args.days)
    print(f"\n{args.gpus} GPUs, retention {args.retention_days} days")
    print(f"{'day':>4} {'MB':>8} {'MB per GPU':>11}  dropped/pruned")
    for r in rows:
        kept = r["retained"]
        print(
            f"{r['day']:4} {r['total_mb']:8.1f} {r['mb_per_gpu']:11.2f}  "
            f"days {kept['days_dropped']}, outbox {kept['outbox_pruned']}, "
            f"attestations {kept['attestations_pruned']}"
        )


if __name__ == "__main__":
    main()
