"""kill -9 of the ledger relay and of the lease worker at random points while leases are
requested, placed, started, ended and settled: after restarts every lease reaches a final
state, no GPU was ever held by two leases at once, and `reconcile` finds no drift."""

from __future__ import annotations

import random
import time
from collections import Counter

from tests.webapp.production import deployment

LEASES = 8
KILL_PHASE_S = 20.0
HOLDING = {"placed", "active", "ending"}
FINAL = {"settled", "failed", "cancelled"}


def leases(api) -> list[dict]:
    status, page = api.call("GET", "/api/v1/leases/?limit=200")
    assert status == 200, page
    return page["results"]


def double_booked(api) -> list[str]:
    held = Counter(g for lease in leases(api) if lease["state"] in HOLDING for g in lease["gpus"])
    return [gpu for gpu, holders in held.items() if holders > 1]


def all_final_and_recorded(api) -> bool:
    current = leases(api)
    return len(current) == LEASES and all(
        lease["state"] in FINAL and all(s["ledger_tx"] for s in lease["settlements"])
        for lease in current
    )


def test_kill_9_of_relay_and_lease_worker_loses_nothing_and_double_books_nothing(tmp_path, tpm, ca):
    rng = random.Random(14)
    settings = {"LEASE_HOUR_S": "300", "OUTBOX_STALE_CLAIM_S": "3"}  # a lease lasts ~3 s
    with deployment(tmp_path, tpm, ca, **settings) as deployed:
        api = deployed.api
        for _ in range(LEASES):
            request = {"gpu_count": rng.choice([1, 2]), "precision": "FP16", "hours": "0.01"}
            status, body = api.call("POST", "/api/v1/leases/", request)
            assert status == 201, body
        overlaps, kills = [], Counter()
        deadline = time.monotonic() + KILL_PHASE_S
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.3, 2.0))
            victim = rng.choice(["ledger_relay", "lease_worker"])
            deployed.kill(victim)
            kills[victim] += 1
            deployed.start_worker(victim)
            overlaps += double_booked(api)
        assert kills["ledger_relay"] and kills["lease_worker"]
        deployed.wait_for("every lease final, its settlements on the ledger", lambda: (
            overlaps.extend(double_booked(api)) or all_final_and_recorded(api)
        ))  # fmt: skip
        assert overlaps == []
        states = Counter(lease["state"] for lease in leases(api))
        assert states["settled"] >= LEASES // 2, states
        reconciled = deployed.manage("reconcile")
        assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
        assert "no drift" in reconciled.stdout
        verified = deployed.manage("ledger_verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
