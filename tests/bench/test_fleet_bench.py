"""The fleet bench, small (200 GPUs for 60 s, a quote every 10 s, a reading every 2 s, one
real swtpm node): the whole agent path on the production layout loses nothing. Every valid
quote sent is stored once and on the ledger, every reading sent is stored once, every batch
re-hashes from the stored readings, and a lease's bill cites every attested batch of its GPUs
with readings, as the tenant downloads them, that re-hash to what it cites
(bench/fleet_check.py). The figures it prints are not asserted: docs/benchmarks.md has them."""

from __future__ import annotations

import json

from bench.fleet_bench import print_table, run_level

GPUS = 200
SECONDS = 60


def test_two_hundred_gpus_for_a_minute_lose_nothing(monkeypatch):
    monkeypatch.setenv("LEASE_HOUR_S", "20")  # the bench's lease ends within the run
    monkeypatch.setenv("LEASE_WORKER_INTERVAL_S", "1")
    result = run_level(
        GPUS, seconds=SECONDS, warm_s=20, quote_s=10, sample_s=2, swtpm=1, check=True
    )
    print(json.dumps(result, indent=1))
    print_table(result)
    check = result["check"]
    assert check["lost"] == [], check
    assert check["sent_quotes"] >= GPUS // 8 * 3  # every node quoted, several times
    assert check["stored_readings"] == check["sent_readings"] > 0
    assert check["bill_lines"] >= 1 and check["bill_batches"] > 0
