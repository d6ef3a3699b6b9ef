"""What a quote's reads of its node's history cost once the fleet has a history, on PostgreSQL.

    python bench/quote_history_bench.py [--gpus 10000] [--days 1] [--samples 300]

A five-minute fleet bench (bench/fleet_bench.py) starts from empty tables; a fleet that has run
for days has a quote a minute per node behind it (ATTESTATION_RETENTION_DAYS of them), and
each new quote reads that history: the clock of the node's newest valid quote since its
enrolment (webapp.attestation.health.recorded_clock, which the verifier compares the new
quote's clock with), the node's newest quote (webapp.attestation.selectors.latest, what the
ledger's verdict and the node's page read). The history is written in SQL with the retention
bench's row shapes (bench/retention_bench.py: every node's valid quote a minute for --days,
with its audit rows, and one enrolment audit row per node before them), then ANALYZE, then
each read is timed, through the ORM as the server runs it, for --samples healthy nodes picked
at random and for the failing ones (one node in 20 failed every quote of the history's second
half: its newest valid quote is hours old). Prints p50/p99 milliseconds per read and
PostgreSQL's plan of the clock's read for a failing node.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fleet_bench import percentile  # noqa: E402
from bench.ops_pages import production_django, seed_fleet  # noqa: E402
from bench.retention_bench import write_attestations, write_quote_audit  # noqa: E402
from ledger.units import MS_PER_DAY as DAY_MS  # noqa: E402

FAILING_EVERY = 20


def seed_history(gpus: int, days: int) -> list:
    from django.db import connection
    from django.utils import timezone

    from webapp.attestation.health import ENROLLED_ACTION
    from webapp.core.models import AuditEvent

    _, _, nodes = seed_fleet(gpus)
    last_ms = int(time.time() * 1000)
    first_ms = last_ms - days * DAY_MS
    enrolled = timezone.now() - timedelta(days=days, minutes=1)
    AuditEvent.objects.bulk_create(
        AuditEvent(actor="operator", action=ENROLLED_ACTION, object_type="node",
                   object_id=str(node.pk), data={})
        for node in nodes
    )  # fmt: skip
    # enrolled before the history began (auto_now_add stamps them now)
    AuditEvent.objects.filter(action=ENROLLED_ACTION).update(created=enrolled)
    started = time.monotonic()
    with connection.cursor() as cursor:
        write_attestations(cursor, first_ms, last_ms)
        write_quote_audit(cursor, first_ms)
        # one node in FAILING_EVERY has failed every quote of the history's second half
        cursor.execute(
            "UPDATE attestation_attestation SET valid = false, clock = '{}'"
            " WHERE node_id %% %s = 0 AND created > to_timestamp(%s / 1000.0)",
            [FAILING_EVERY, (first_ms + last_ms) // 2],
        )
        cursor.execute("ANALYZE")
        cursor.execute("SELECT count(*) FROM attestation_attestation")
        quotes = cursor.fetchone()[0]
    print(f"history: {quotes} quotes of {len(nodes)} nodes over {days} day(s), written in "
          f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
    return nodes


def time_reads(nodes: list, samples: int) -> dict:
    from webapp.attestation import selectors
    from webapp.attestation.health import clocked_since_enrolment, recorded_clock

    reads = {"recorded_clock": recorded_clock, "latest": selectors.latest}
    healthy = [n for n in nodes if n.pk % FAILING_EVERY]
    failing = [n for n in nodes if not n.pk % FAILING_EVERY]
    picked = random.Random(7).sample(healthy, min(samples, len(healthy)))
    out = {}
    for (name, read), group in itertools.product(reads.items(), ("healthy", "failing")):
        sample = picked if group == "healthy" else failing[:samples]
        assert read(sample[0]) is not None, f"{name} found nothing: the history is not seeded"
        times = []
        for node in sample:
            started = time.perf_counter()
            read(node)
            times.append((time.perf_counter() - started) * 1000)
        out[f"{name} ({group} nodes)"] = {"p50_ms": round(percentile(times, 0.5), 2),
                     "p99_ms": round(percentile(times, 0.99), 2)}  # fmt: skip
    plan = clocked_since_enrolment(failing[0])[:1].explain(analyze=True, costs=False)
    out["plan_newest_valid"] = plan.splitlines()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=1)
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    from tests.services import temporary_postgres, temporary_redis

    with (
        tempfile.TemporaryDirectory() as tmp,
        temporary_postgres() as database_url,
        temporary_redis() as redis_url,
    ):
        production_django(tmp, database_url, redis_url)
        nodes = seed_history(args.gpus, args.days)
        print(json.dumps(time_reads(nodes, args.samples), indent=1))


if __name__ == "__main__":
    main()
