"""Child process of the crash test: streams RegisterNode submits from several threads and
prints `ACK <tx_id>` (flushed) only after each receipt, until it is killed."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from chaincode_client.embedded import EmbeddedClient
from ledger.engine import EmbeddedLedger
from tests.ledger.helpers import ZERO_PCR_POLICY, ZERO_POLICY_ID, approve_on_engine, node_ak_b64

THREADS = 8


def main(path: str, prefix: str) -> None:
    ledger = EmbeddedLedger.open(Path(path), block_size=16, block_timeout_s=0.002)
    identity = ledger.enroll("Org1MSP", "crash")
    approve_on_engine(ledger, ZERO_POLICY_ID, ZERO_PCR_POLICY)  # nothing written when in force
    lock = threading.Lock()

    def stream(worker: int) -> None:
        client = EmbeddedClient(ledger, identity)
        for n in range(100_000):
            node_id = f"{prefix}-{worker}-{n}"
            receipt = client.submit(
                "RegisterNode",
                json.dumps(
                    {
                        "node_id": node_id,
                        "org": "Org1MSP",
                        "ak_public": node_ak_b64(node_id),
                        "gpus": [{"uuid": f"GPU-{node_id}", "generation": "H100"}],
                        "pcr_policy_id": ZERO_POLICY_ID,
                    }
                ),
            )
            with lock:
                print(f"ACK {receipt.tx_id} {receipt.block_number}", flush=True)

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(THREADS)]
    for t in threads:
        t.start()
    print("STARTED", flush=True)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
