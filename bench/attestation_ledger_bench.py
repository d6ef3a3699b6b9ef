"""Committed IssueChallenge and RecordAttestation transactions per second on the embedded
ledger, with every check the contract makes (endorser clock skew, the ledger-issued challenge,
the full quote re-verification on each organisation's peer).

    python bench/attestation_ledger_bench.py [--nodes 200] [--rounds 3] [--peer-processes]

A real swtpm makes one ECC AK; --nodes nodes are registered with it (distinct node ids, so
their attestations touch distinct keys), then, for each of --rounds rounds: one IssueChallenge
per node (all in flight at once, timed), a swtpm quote over each nonce (not timed: the TPM is
the slow part, ~60-90 quotes/s), and one RecordAttestation per node (all in flight, timed).
A node's rounds run one after another, as its TPM clock must only move forward.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaincode_client.embedded import EmbeddedClient
from ledger.engine import EmbeddedLedger
from tests.ledger.conftest import swtpm_node
from tests.ledger.helpers import (
    approve_on_engine,
    js,
    pcr_policy,
    quote_request,
    register_node,
)

MAX_AGE_S = 86_400
BLOCK_SIZE = 250


def submit_all(client: EmbeddedClient, fn: str, requests: list[str]) -> tuple[list[dict], float]:
    """Submit every request at once; (the committed payloads, seconds until the last commit)."""
    start = time.perf_counter()
    pending = [client.submit_async(fn, request) for request in requests]
    payloads = [json.loads(p.receipt().payload) for p in pending]
    return payloads, time.perf_counter() - start


def run(args: argparse.Namespace, workdir: Path) -> dict:
    ledger = EmbeddedLedger.open(
        workdir / "ledger.sqlite",
        block_size=BLOCK_SIZE,
        block_timeout_s=0.02,
        peer_processes=args.peer_processes,
    )
    try:
        with swtpm_node(workdir / "swtpm", aks=1) as node_tpm:
            client = EmbeddedClient(ledger, ledger.enroll("Org1MSP", "bench"))
            policy = approve_on_engine(ledger, "bench", pcr_policy(node_tpm.golden, MAX_AGE_S))
            nodes = [f"bench-n{n}" for n in range(args.nodes)]
            for n, node_id in enumerate(nodes):
                gpus = [(f"GPU-{n}", "H100")]
                register_node(client, node_tpm, node_id, 0, gpus, policy_id=policy)
            challenge_s = record_s = 0.0
            valid = 0
            for round_no in range(args.rounds):
                print(f"round {round_no + 1}/{args.rounds}", file=sys.stderr)
                asks = [js({"node_id": node_id}) for node_id in nodes]
                challenges, seconds = submit_all(client, "IssueChallenge", asks)
                challenge_s += seconds
                answers = [
                    js(quote_request(node_tpm, c["node_id"], 0, bytes.fromhex(c["nonce"])))
                    for c in challenges
                ]
                records, seconds = submit_all(client, "RecordAttestation", answers)
                record_s += seconds
                valid += sum(1 for r in records if r["valid"])
    finally:
        ledger.close()
    total = args.nodes * args.rounds
    if valid != total:
        raise SystemExit(f"only {valid} of {total} attestations verified")
    return {
        "nodes": args.nodes,
        "rounds": args.rounds,
        "peer_processes": args.peer_processes,
        "issue_challenge_per_s": round(total / challenge_s, 1),
        "record_attestation_per_s": round(total / record_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peer-processes", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(args, Path(tmp)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
