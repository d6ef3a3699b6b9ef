"""How fast `verify-receipt` checks a Fabric receipt (pure CPU: parsing, hashes, ECDSA).

    python bench/fabric_receipt_bench.py [--seconds 3] [--block-txs 250]

Two receipts in Fabric's wire format with keys made at run time (tests/ledger/fabric_chain.py):
the usual lease story (node registration, attestation, creation, end, settlement: 5
transactions in 4 blocks, each with the orderer's, the creator's and two endorsers'
signatures), and the same story with the creation ordered into a block of --block-txs
transactions (the data hash covers them all; only the lease's are parsed). Prints receipts
per CPU second and CPU milliseconds per receipt for each, with the certificate caches cleared before
every receipt (cold: one receipt per process, as the CLI runs) and kept (warm: an auditor
checking many receipts of one channel in one process).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledger.audit.fabric_receipt import verify_fabric_receipt  # noqa: E402
from ledger.audit.fabric_trust import clear_cert_caches  # noqa: E402
from tests.ledger.fabric_chain import Channel, block_of, receipt  # noqa: E402
from tests.ledger.fabric_stories import LEASE, lease_story  # noqa: E402


def busy_block_receipt(block_txs: int) -> tuple[dict, bytes]:
    """The lease's creation re-ordered into a block with block_txs - 1 other transactions."""
    story = lease_story()
    chain: Channel = story.channel
    doc = story.receipt
    first = doc["transactions"][0]  # the creation
    creation = block_of(doc, first["block"]).data.data[first["index"]]
    others = [chain.tx("EndLease", {"lease_id": f"other-{i}"})[1] for i in range(block_txs - 1)]
    number = chain.block([*others, creation])
    placed = [(first["tx_id"], number, block_txs - 1)]
    placed += [(t["tx_id"], t["block"], t["index"]) for t in doc["transactions"][1:]]
    return receipt(chain, LEASE, placed), story.roots


def rate(doc: dict, roots: bytes, seconds: float, cold: bool) -> tuple[int, float]:
    assert verify_fabric_receipt(doc, roots) == []
    # CPU time: the machine is shared, and the verifier is pure CPU in one thread
    count, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        if cold:  # as `verify-receipt` checks one receipt per process
            clear_cert_caches()
        verify_fabric_receipt(doc, roots)
        count += 1
    return count, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--block-txs", type=int, default=250)
    args = parser.parse_args()
    story = lease_story()
    cases = {
        "lease story, 5 txs in 4 blocks": (story.receipt, story.roots),
        f"same, creation in a block of {args.block_txs} txs": busy_block_receipt(args.block_txs),
    }
    for name, (doc, roots) in cases.items():
        for cold in (True, False):
            count, elapsed = rate(doc, roots, args.seconds, cold)
            print(
                f"{name}, certificate caches {'cold' if cold else 'warm'}: "
                f"{count / elapsed:.1f} receipts per CPU second, {1000 * elapsed / count:.2f} ms "
                "CPU each"
            )


if __name__ == "__main__":
    main()
