"""Endorsing peers in worker processes, as on Fabric where peers are separate processes.

Checking the creator, simulating and signing hold the GIL (they are about two thirds of a
transaction's CPU time); with `endorser_processes=N` the engine endorses in N worker
processes, each reading committed state from the SQLite file through its own read-only
connection (one read transaction per simulation: a consistent snapshot, like a peer's read
lock) and signing with every org's peer key. Ordering, validation and commit stay in the
engine's process.

Proposals are sent in batches: one dispatcher thread per worker takes whatever proposals
have queued while the worker was busy, sends them as one message over the worker's pipe and
resolves each proposal's future from the answer. The IPC cost is then per batch, not per
transaction, which is what makes a second process pay on a 2-core machine.
"""

from __future__ import annotations

import multiprocessing
import queue
import sqlite3
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ledger.engine.endorser import Endorser, LedgerClosed, ProposalRejected
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


MAX_BATCH = 256  # proposals per message to a worker
_STOP = object()
Answer = tuple[str, str, bytes, bytes]  # ('ok', tx_id, payload, envelope) | ('rejected', why, ..)


def _serve(conn: Connection, path: str, msp_dir: str, config: dict[str, Any]) -> None:
    """A worker process: endorse each batch received, answer with one message, until the
    engine closes its end of the pipe."""
    msp = ChannelMsp({m: c.encode() for m, c in config["ca_certs"].items()})
    peers = [OrgMaterial.load(Path(msp_dir) / m).peer for m in config["ca_certs"]]
    endorser = Endorser(SqliteState(Path(path)), msp, peers, config["channel"])  # type: ignore[arg-type]
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return
        conn.send([_endorse(endorser, proposal, signature) for proposal, signature in batch])


def _endorse(endorser: Endorser, proposal: bytes, signature: bytes) -> Answer:
    try:
        simulation = endorser.simulate(proposal, signature)
    except ProposalRejected as exc:
        return "rejected", str(exc), b"", b""
    envelope = encode_envelope(
        proposal, signature, simulation.response_bytes, endorser.endorse(simulation)
    )
    return "ok", simulation.tx_id, simulation.payload, envelope


class EndorserPool:
    def __init__(self, processes: int, path: Path, msp_dir: Path, config: dict) -> None:
        context = multiprocessing.get_context("spawn")
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._workers = []
        self._failure: str | None = None
        for i in range(processes):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_serve,
                args=(theirs, str(path), str(msp_dir), config),
                name=f"ledger-endorser-{i}",
                daemon=True,
            )
            process.start()
            theirs.close()
            dispatcher = threading.Thread(
                target=self._dispatch, args=(ours,), name=f"ledger-endorser-{i}", daemon=True
            )
            dispatcher.start()
            self._workers.append((process, ours, dispatcher))

    @property
    def failure(self) -> str | None:
        """Why the pool stopped endorsing (a worker process died), or None."""
        return self._failure

    def endorse_async(self, proposal: bytes, signature: bytes) -> Future:
        """A future of (tx_id, payload, envelope); ProposalRejected when refused."""
        future: Future = Future()
        if self._failure is not None:
            future.set_exception(LedgerClosed(self._failure))
        else:
            self._queue.put((proposal, signature, future))
        return future

    def endorse(self, proposal: bytes, signature: bytes) -> tuple[str, bytes, bytes]:
        return self.endorse_async(proposal, signature).result()

    def _dispatch(self, conn: Connection) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < MAX_BATCH and batch[-1] is not _STOP:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = batch[-1] is _STOP
            work = batch[:-1] if stop else batch
            if work and not self._send(conn, work):
                return
            if stop:
                return

    def _send(self, conn: Connection, work: list) -> bool:
        try:
            conn.send([(proposal, signature) for proposal, signature, _ in work])
            answers: list[Answer] = conn.recv()
        except (EOFError, OSError) as exc:  # the worker died: tell every waiter, now and later
            self._failure = f"an endorser process failed ({exc!r}); reopen the ledger"
            for _, _, future in work:
                future.set_exception(LedgerClosed(self._failure))
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    return False
                if item is not _STOP:
                    item[2].set_exception(LedgerClosed(self._failure))
        for (_, _, future), (status, text, payload, envelope) in zip(work, answers, strict=True):
            if status == "ok":
                future.set_result((text, payload, envelope))
            else:
                future.set_exception(ProposalRejected(text))
        return True

    def close(self) -> None:
        for _ in self._workers:
            self._queue.put(_STOP)
        for process, conn, dispatcher in self._workers:
            dispatcher.join()
            conn.close()  # the worker reads EOF and exits
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
