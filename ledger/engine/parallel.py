"""Signature checks of a block in worker processes.

ECDSA verification holds the GIL, and it is the committer's largest cost (three verifies a
transaction). Like Fabric's parallel validator, the state-independent checks (creator
signature, tx id, endorsements vs policy) of a block's transactions run in a process pool;
the MVCC check and the commit stay in order, in the committer thread.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from ledger.engine.msp import ChannelMsp
from ledger.engine.tx import BAD_PAYLOAD, EndorsementPolicy, check_signatures, decode_envelope

_worker: tuple[ChannelMsp, EndorsementPolicy] | None = None


def _init(ca_certs: dict[str, str], policy: dict[str, Any]) -> None:
    global _worker
    _worker = (
        ChannelMsp({m: c.encode() for m, c in ca_certs.items()}),
        EndorsementPolicy.from_json(policy),
    )


def _check(envelopes: list[bytes]) -> list[str | None]:
    assert _worker is not None, "worker not initialised"
    msp, policy = _worker
    codes: list[str | None] = []
    for envelope in envelopes:
        try:
            codes.append(check_signatures(decode_envelope(envelope), msp, policy))
        except ValueError:
            codes.append(BAD_PAYLOAD)
    return codes


class SignaturePool:
    def __init__(self, workers: int, config: dict[str, Any]) -> None:
        self._workers = workers
        self._pool = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init,
            initargs=(config["ca_certs"], config["policy"]),
        )

    def codes(self, envelopes: list[bytes]) -> list[str | None]:
        size = max(1, -(-len(envelopes) // self._workers))
        chunks = [envelopes[i : i + size] for i in range(0, len(envelopes), size)]
        out: list[str | None] = []
        for part in self._pool.map(_check, chunks):
            out.extend(part)
        return out

    def close(self) -> None:
        self._pool.shutdown()
