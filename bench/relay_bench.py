"""How fast the outbox relay empties a backlog onto the embedded ledger.

    python bench/relay_bench.py --rows 500 [--block-timeout-ms 20]

Writes --rows RegisterNode outbox rows (distinct nodes, so none has to wait for another),
then drains them twice on fresh ledgers and databases: one row per relay pass (the relay's
old one-at-a-time behaviour: each row pays a block's cut time) and in passes of OUTBOX_BATCH
rows, pipelined. Prints rows per second and blocks used for each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def drain(rows: int, batch: int, block_timeout_s: float, workdir: Path) -> dict:
    from django.core.management import call_command
    from django.db import connection

    from tests.ledger.helpers import (
        ZERO_PCR_POLICY,
        ZERO_POLICY_ID,
        approve_on_engine,
        software_ak_b64,
    )
    from webapp.outbox.ledger import close_ledger_client, ledger_client
    from webapp.outbox.models import OutboxEntry
    from webapp.outbox.records import enqueue
    from webapp.outbox.relay import relay_once

    call_command("flush", interactive=False, verbosity=0)
    for n in range(rows):  # each node its own AK (the contract gives an AK to one node only)
        enqueue(
            f"bench:node:{n}",
            "RegisterNode",
            {
                "node_id": f"bench-{n}",
                "org": "Org1MSP",
                "ak_public": software_ak_b64(),
                "gpus": [{"uuid": f"GPU-bench-{n}", "generation": "H100-SXM5-80GB"}],
                "pcr_policy_id": ZERO_POLICY_ID,
            },
        )
    client = ledger_client()
    approve_on_engine(client.engine, ZERO_POLICY_ID, ZERO_PCR_POLICY)  # type: ignore[attr-defined]
    base = client.engine.height  # type: ignore[attr-defined]
    client.engine.block_timeout_s = block_timeout_s  # type: ignore[attr-defined]
    start = time.perf_counter()
    counts: dict[str, int] = {}
    while OutboxEntry.objects.filter(status=OutboxEntry.PENDING).exists():
        for outcome, n in relay_once(client, batch).items():
            counts[outcome] = counts.get(outcome, 0) + n
        print(f"  {sum(counts.values())}/{rows} rows", end="\r", file=sys.stderr)
    elapsed = time.perf_counter() - start
    print(file=sys.stderr)
    blocks = client.engine.height - base  # type: ignore[attr-defined]
    close_ledger_client()
    connection.close()
    return {
        "rows_per_pass": batch,
        "outcomes": counts,
        "elapsed_s": round(elapsed, 3),
        "rows_per_s": round(rows / elapsed, 1),
        "blocks": blocks,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--batch", type=int, default=100, help="OUTBOX_BATCH")
    parser.add_argument("--block-timeout-ms", type=float, default=20.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    os.environ.update(WATTLEASE_DATA_DIR=str(workdir), DJANGO_SETTINGS_MODULE="webapp.settings")
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        results = []
        for batch in (1, args.batch):
            settings.LEDGER_PATH = workdir / f"ledger-{batch}.sqlite3"
            print(f"draining {args.rows} rows, {batch} per pass ...", file=sys.stderr)
            results.append(drain(args.rows, batch, args.block_timeout_ms / 1000, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        json.dumps(
            {"rows": args.rows, "block_timeout_ms": args.block_timeout_ms, "runs": results},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
