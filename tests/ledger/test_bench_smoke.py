"""The ledger benchmark still runs end to end (a small load; no speed is asserted here,
figures live in docs/benchmarks-ledger.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench(*options: str) -> dict:
    run = subprocess.run(
        [sys.executable, "bench/ledger_bench.py", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def test_ledger_bench_commits_every_lease_through_peer_processes():
    result = bench("--leases", "130", "--in-flight", "16")
    assert (result["committed"], result["failed"]) == (130, 0), result
    assert result["peer_processes"] and result["worker_processes_cpu_us_per_tx"] > 0
    assert result["blocks"] < 130  # transactions in flight share blocks


def test_ledger_bench_settles_one_line_per_lease():
    result = bench("--leases", "70", "--in-flight", "8", "--fn", "settle")
    assert (result["function"], result["committed"], result["failed"]) == ("Settle", 70, 0)
