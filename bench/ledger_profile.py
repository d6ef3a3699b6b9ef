"""Where a CreateLease (or Settle) transaction's CPU time goes, measured without thread
contention.

    python bench/ledger_profile.py --leases 1000 [--fn settle] [--cprofile]

Endorses N proposals one after another in one thread (client signing, creator check,
simulation through the contract API, both orgs' signatures), then commits them as blocks of
--block-size (validation incl. 3 signature checks a transaction, SQLite). Prints CPU
microseconds per transaction for each stage. With --fn settle, the N leases are created first
(not measured) and each is then settled with one bill line citing its GPU's attested batch,
as `ledger_bench.py --fn settle` does.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ledger_bench import HOUR_MS, create_call, settle_call, setup
from chaincode_client.embedded import EmbeddedClient
from ledger.engine import EmbeddedLedger
from ledger.engine.endorser import make_proposal
from tests.ledger.helpers import now_ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--block-size", type=int, default=250)
    parser.add_argument("--fn", choices=["create", "settle"], default="create")
    parser.add_argument("--cprofile", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ledger-profile-"))
    ledger = EmbeddedLedger.open(workdir / "ledger.sqlite", block_size=args.block_size)
    print(f"setting up {args.leases} GPUs ...", file=sys.stderr)
    start_ms = now_ms() - 2 * HOUR_MS  # settled lines end an hour before the ledger's clock
    gpus, att_of = setup(ledger, args.leases, workdir, start_ms)
    identity = ledger.enroll("Org1MSP", "profile")
    n = len(gpus)
    create = partial(create_call, att_of=att_of, start_ms=start_ms)
    make = create
    if args.fn == "settle":
        print(f"creating {n} leases to settle (not measured) ...", file=sys.stderr)
        client = EmbeddedClient(ledger, identity)
        pending = [client.submit_async(*create(u)) for u in gpus]
        assert all(p.receipt().valid for p in pending)
        make = partial(settle_call, start_ms=start_ms)
    profile = cProfile.Profile() if args.cprofile else None
    stages: dict[str, float] = {}

    def timed(name, fn):
        start = time.process_time()
        if profile:
            profile.enable()
        out = fn()
        if profile:
            profile.disable()
        stages[name] = (time.process_time() - start) / n * 1e6
        return out

    proposals = timed(
        "client: build + sign proposal",
        lambda: [
            make_proposal(identity, ledger.channel, fn, [request], time.time_ns(), os.urandom(24))
            for fn, request in map(make, gpus)
        ],
    )
    for endorser in ledger.endorsers:
        endorser.timings.update(dict.fromkeys(endorser.timings, 0.0))
    envelopes = timed("endorse (total)", lambda: [ledger.endorse(*p)[1] for p in proposals])
    for endorser in ledger.endorsers:
        for key, value in endorser.timings.items():
            stages[f"  endorse: {endorser.mspid} {key}"] = value / n * 1e6

    def commit_all():
        for i in range(0, n, args.block_size):
            batch = [(e, Future()) for e in envelopes[i : i + args.block_size]]
            ledger._commit(batch)
            assert all(f.result().code == "VALID" for _, f in batch)

    ledger.timings.update(validate=0.0, commit_sqlite=0.0)
    timed("commit (total)", commit_all)
    stages["  commit: validate (decode, policy, MVCC)"] = ledger.timings["validate"] / n * 1e6
    stages["  commit: block hash + SQLite"] = ledger.timings["commit_sqlite"] / n * 1e6
    ledger.close()
    shutil.rmtree(workdir, ignore_errors=True)
    total = sum(v for k, v in stages.items() if not k.startswith("  "))
    stages["TOTAL CPU per transaction"] = total
    stages["=> single-core ceiling, tx/s"] = 1e6 / total
    print(json.dumps({k: round(v, 1) for k, v in stages.items()}, indent=1))
    if profile:
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
