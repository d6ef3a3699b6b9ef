"""SQLite persistence: blocks, transactions, world state (with versions) and key history.

One SQLite transaction per block, so a process killed mid-commit leaves the whole block or
none of it (WAL journal; synchronous=NORMAL survives a process crash, FULL also power loss).
The world state is mirrored in memory for simulation and MVCC checks; the mirror is updated
under the state lock right as the block's SQLite transaction commits.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from ledger.engine.tx import Version

SCHEMA = """
CREATE TABLE IF NOT EXISTS blocks (
    number INTEGER PRIMARY KEY, previous_hash TEXT NOT NULL, data_hash TEXT NOT NULL,
    hash TEXT NOT NULL, tx_count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS txs (
    block INTEGER NOT NULL, txnum INTEGER NOT NULL, tx_id TEXT NOT NULL, code TEXT NOT NULL,
    envelope BLOB NOT NULL, PRIMARY KEY (block, txnum));
CREATE INDEX IF NOT EXISTS txs_by_id ON txs (tx_id);
CREATE TABLE IF NOT EXISTS state (
    key TEXT PRIMARY KEY, value BLOB NOT NULL, block INTEGER NOT NULL, txnum INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history (
    key TEXT NOT NULL, block INTEGER NOT NULL, txnum INTEGER NOT NULL, tx_id TEXT NOT NULL,
    value BLOB, seconds INTEGER NOT NULL, nanos INTEGER NOT NULL,
    PRIMARY KEY (key, block, txnum)) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class BlockRow:
    number: int
    previous_hash: str
    data_hash: str
    hash: str
    tx_count: int


@dataclass
class CommittedTx:
    txnum: int
    tx_id: str
    code: str
    envelope: bytes
    writes: dict[str, bytes | None]
    timestamp: tuple[int, int]


def connect(path: Path, synchronous: str = "NORMAL") -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.executescript(SCHEMA)
    return conn


def select_range(
    conn: sqlite3.Connection, start: str, end: str
) -> list[tuple[str, bytes, Version]]:
    rows = conn.execute(
        "SELECT key, value, block, txnum FROM state WHERE key >= ? AND key < ? ORDER BY key",
        (start, end),
    )
    return [(k, v, (b, t)) for k, v, b, t in rows]


def select_history(conn: sqlite3.Connection, key: str) -> list[tuple[str, bytes | None, int, int]]:
    """A key's versions newest first, the order Fabric (2.0 and later) gives GetHistoryForKey."""
    return list(
        conn.execute(
            "SELECT tx_id, value, seconds, nanos FROM history WHERE key = ? "
            "ORDER BY block DESC, txnum DESC",
            (key,),
        )
    )


class Store:
    def __init__(self, path: Path, synchronous: str = "NORMAL") -> None:
        self.path = path
        self._writer = connect(path, synchronous)
        self._reader = connect(path, synchronous)
        self.lock = threading.RLock()  # held by simulations (read) and by the state swap
        self.state: dict[str, tuple[bytes, Version]] = {
            key: (value, (block, txnum))
            for key, value, block, txnum in self._writer.execute(
                "SELECT key, value, block, txnum FROM state"
            )
        }
        tip = self._writer.execute(
            "SELECT number, previous_hash, data_hash, hash, tx_count FROM blocks "
            "ORDER BY number DESC LIMIT 1"
        ).fetchone()
        self.tip: BlockRow | None = BlockRow(*tip) if tip else None
        # every valid tx id, for the duplicate check (32 bytes + overhead per transaction)
        self.valid_tx_ids: set[str] = {
            row[0] for row in self._writer.execute("SELECT tx_id FROM txs WHERE code = 'VALID'")
        }

    # -- reads (StateReader) -- callers hold self.lock -----------------------------------
    def get(self, key: str) -> tuple[bytes, Version] | None:
        return self.state.get(key)

    def range(self, start: str, end: str) -> list[tuple[str, bytes, Version]]:
        return select_range(self._reader, start, end)

    def history(self, key: str) -> list[tuple[str, bytes | None, int, int]]:
        return select_history(self._reader, key)

    def tx_id_committed(self, tx_id: str) -> bool:
        return tx_id in self.valid_tx_ids

    # -- the one write path: a whole block, atomically ---------------------------------
    def commit_block(self, block: BlockRow, txs: list[CommittedTx]) -> None:
        cur = self._writer
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(
                "INSERT INTO blocks VALUES (?, ?, ?, ?, ?)",
                (block.number, block.previous_hash, block.data_hash, block.hash, block.tx_count),
            )
            cur.executemany(
                "INSERT INTO txs VALUES (?, ?, ?, ?, ?)",
                [(block.number, t.txnum, t.tx_id, t.code, t.envelope) for t in txs],
            )
            history = [
                (key, block.number, t.txnum, t.tx_id, value, *t.timestamp)
                for t in txs
                if t.code == "VALID"
                for key, value in t.writes.items()
            ]
            cur.executemany("INSERT OR REPLACE INTO history VALUES (?, ?, ?, ?, ?, ?, ?)", history)
            self._apply_sql(cur, txs, block.number)
            with self.lock:  # readers never see SQLite ahead of the in-memory mirror
                cur.execute("COMMIT")
                self._apply_memory(txs, block.number)
                self.valid_tx_ids.update(t.tx_id for t in txs if t.code == "VALID")
                self.tip = block
        except BaseException:
            if cur.in_transaction:
                cur.execute("ROLLBACK")
            raise

    @staticmethod
    def _apply_sql(cur: sqlite3.Connection, txs: list[CommittedTx], number: int) -> None:
        final: dict[str, tuple[bytes | None, int]] = {}
        for t in txs:
            if t.code == "VALID":
                for key, value in t.writes.items():
                    final[key] = (value, t.txnum)
        cur.executemany(
            "DELETE FROM state WHERE key = ?", [(k,) for k, (v, _) in final.items() if v is None]
        )
        cur.executemany(
            "INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?)",
            [(k, v, number, n) for k, (v, n) in final.items() if v is not None],
        )

    def _apply_memory(self, txs: list[CommittedTx], number: int) -> None:
        for t in txs:
            if t.code == "VALID":
                for key, value in t.writes.items():
                    if value is None:
                        self.state.pop(key, None)
                    else:
                        self.state[key] = (value, (number, t.txnum))

    # -- chain reads -------------------------------------------------------------------
    def blocks(self, start: int = 0) -> list[BlockRow]:
        with self.lock:
            return [
                BlockRow(*r)
                for r in self._reader.execute(
                    "SELECT number, previous_hash, data_hash, hash, tx_count FROM blocks "
                    "WHERE number >= ? ORDER BY number",
                    (start,),
                )
            ]

    def block_txs(self, number: int) -> list[tuple[int, str, str, bytes]]:
        with self.lock:
            return list(
                self._reader.execute(
                    "SELECT txnum, tx_id, code, envelope FROM txs WHERE block = ? ORDER BY txnum",
                    (number,),
                )
            )

    def close(self) -> None:
        self._writer.close()
        self._reader.close()


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
    """A StateReader over the ledger's SQLite file, read-only: what a peer process reads."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        self.lock = _ReadSnapshot(self._conn)

    def get(self, key: str) -> tuple[bytes, Version] | None:
        row = self._conn.execute(
            "SELECT value, block, txnum FROM state WHERE key = ?", (key,)
        ).fetchone()
        return (row[0], (row[1], row[2])) if row else None

    def range(self, start: str, end: str) -> list[tuple[str, bytes, Version]]:
        return select_range(self._conn, start, end)

    def history(self, key: str) -> list[tuple[str, bytes | None, int, int]]:
        return select_history(self._conn, key)

    def close(self) -> None:
        self._conn.close()
