"""Endorsing peers in worker processes, as on Fabric where peers are separate processes.

Simulation and ECDSA signing hold the GIL; with `endorser_processes=N` the engine endorses in
N worker processes, each reading committed state from the SQLite file through its own
read-only connection (one read transaction per simulation: a consistent snapshot, like a
peer's read lock) and signing with every org's peer key. Ordering, validation and commit
stay in the engine's process.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from ledger.engine.endorser import Endorser, ProposalRejected
from ledger.engine.msp import ChannelMsp, OrgMaterial
from ledger.engine.tx import Version, encode_envelope


class _ReadSnapshot:
    """`with state.lock:` opens one read transaction, so every read of a simulation sees the
    same committed block."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN")

    def __exit__(self, *exc: object) -> None:
        self._conn.execute("COMMIT")


class SqliteState:
    """A StateReader over the ledger's SQLite file, for endorsers outside the engine."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        self.lock = _ReadSnapshot(self._conn)

    def get(self, key: str) -> tuple[bytes, Version] | None:
        row = self._conn.execute(
            "SELECT value, block, txnum FROM state WHERE key = ?", (key,)
        ).fetchone()
        return (row[0], (row[1], row[2])) if row else None

    def range(self, start: str, end: str) -> list[tuple[str, bytes, Version]]:
        rows = self._conn.execute(
            "SELECT key, value, block, txnum FROM state WHERE key >= ? AND key < ? ORDER BY key",
            (start, end),
        )
        return [(k, v, (b, t)) for k, v, b, t in rows]

    def history(self, key: str) -> list[tuple[str, bytes | None, int, int]]:
        return list(
            self._conn.execute(
                "SELECT tx_id, value, seconds, nanos FROM history WHERE key = ? "
                "ORDER BY block, txnum",
                (key,),
            )
        )


_endorser: Endorser | None = None


def _init(path: str, msp_dir: str, config: dict[str, Any]) -> None:
    global _endorser
    msp = ChannelMsp({m: c.encode() for m, c in config["ca_certs"].items()})
    peers = [OrgMaterial.load(Path(msp_dir) / m).peer for m in config["ca_certs"]]
    _endorser = Endorser(SqliteState(Path(path)), msp, peers, config["channel"])  # type: ignore[arg-type]


def _endorse(proposal: bytes, signature: bytes) -> tuple[str, str, bytes, bytes]:
    """('ok', tx_id, payload, envelope) or ('rejected', message, b'', b'')."""
    assert _endorser is not None, "endorser process not initialised"
    try:
        simulation = _endorser.simulate(proposal, signature)
    except ProposalRejected as exc:
        return "rejected", str(exc), b"", b""
    envelope = encode_envelope(
        proposal, signature, simulation.response_bytes, _endorser.endorse(simulation)
    )
    return "ok", simulation.tx_id, simulation.payload, envelope


class EndorserPool:
    def __init__(self, processes: int, path: Path, msp_dir: Path, config: dict) -> None:
        self._pool = ProcessPoolExecutor(
            processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init,
            initargs=(str(path), str(msp_dir), config),
        )

    def endorse(self, proposal: bytes, signature: bytes) -> tuple[str, bytes, bytes]:
        status, text, payload, envelope = self._pool.submit(_endorse, proposal, signature).result()
        if status != "ok":
            raise ProposalRejected(text)
        return text, payload, envelope

    def close(self) -> None:
        self._pool.shutdown()
