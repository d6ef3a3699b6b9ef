"""`ledger verify`: re-derive everything the embedded ledger claims from its raw data.

Checks, in order: block numbering and hash chain (previous hash, data hash over the block's
envelopes, header hash); every transaction's creator signature, tx id and endorsements
against the genesis configuration; MVCC validity by replaying all blocks from empty state and
comparing each recomputed validation code with the recorded one; each valid attestation's
verdict by re-running the quote verifier on the raw transaction arguments; finally the state
table against the replayed world state. Each defect names its block and transaction.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ledger.contract import args as args
from ledger.contract import attested_telemetry
from ledger.contract import quote as attestation
from ledger.contract.attestation_tx import (
    NONCE_MAX_BYTES,
    NONCE_MIN_BYTES,
    evidence_sha256,
    is_retry,
)
from ledger.contract.governance import policy_key
from ledger.contract.state import ATTESTATION, CLOCK, NODE, NONCE
from ledger.engine.msp import ChannelMsp
from ledger.engine.stub import RANGE_END
from ledger.engine.tx import VALID, EndorsementPolicy, block_data_hash, block_header_hash
from ledger.engine.validate import BlockView, DictState, Validated, validate_block
from ledger.genesis import GENESIS_PREVIOUS_HASH, check_roots, read_config


@dataclass(frozen=True)
class Defect:
    where: str  # "block 7 tx 3 (tx_id)" or "state key ..."
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass
class AuditReport:
    blocks: int = 0
    transactions: int = 0
    valid: int = 0
    quotes: int = 0
    keys: int = 0
    defects: list[Defect] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.defects


class _Chain:
    """Read-only access to the SQLite file; never writes, never creates. Every read sees
    the one snapshot its first read took: a ledger that goes on committing while it is
    audited (a running relay) must not have its blocks read at one height and its state
    table at another."""

    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise FileNotFoundError(f"no ledger at {path}")
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        self.conn.execute("BEGIN")  # WAL: the snapshot is taken by the first read
        self.conn.execute("SELECT count(*) FROM blocks").fetchone()

    def blocks(self) -> list[tuple[int, str, str, str, int]]:
        return list(
            self.conn.execute(
                "SELECT number, previous_hash, data_hash, hash, tx_count "
                "FROM blocks ORDER BY number"
            )
        )

    def block_txs(self, number: int) -> list[tuple[int, str, str, bytes]]:
        return list(
            self.conn.execute(
                "SELECT txnum, tx_id, code, envelope FROM txs WHERE block = ? ORDER BY txnum",
                (number,),
            )
        )

    def value(self, key: str) -> bytes | None:
        row = self.conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return bytes(row[0]) if row else None

    def versions(self, key: str) -> list[bytes]:
        """Every value the key has held, oldest first (deletions left out)."""
        rows = self.conn.execute(
            "SELECT value FROM history WHERE key = ? AND value IS NOT NULL ORDER BY block, txnum",
            (key,),
        )
        return [bytes(value) for (value,) in rows]

    def writers(self, keys: list[str], prefix: str) -> set[tuple[int, int]]:
        """(block, txnum) of every valid transaction that wrote one of `keys` or a key
        starting with `prefix`, from the key-history index (no scan of the chain)."""
        found = set()
        for key in keys:
            found |= set(
                self.conn.execute("SELECT block, txnum FROM history WHERE key = ?", (key,))
            )
        found |= set(
            self.conn.execute(
                "SELECT block, txnum FROM history WHERE key >= ? AND key < ?",
                (prefix, prefix + RANGE_END),
            )
        )
        return found

    def values(self, prefix: str) -> list[bytes]:
        """The current values of the keys starting with `prefix`, in key order."""
        rows = self.conn.execute(
            "SELECT value FROM state WHERE key >= ? AND key < ? ORDER BY key",
            (prefix, prefix + RANGE_END),
        )
        return [bytes(value) for (value,) in rows]

    def state(self) -> dict[str, tuple[bytes, tuple[int, int]]]:
        return {
            k: (bytes(v), (b, t))
            for k, v, b, t in self.conn.execute("SELECT key, value, block, txnum FROM state")
        }


def _where(number: int, txnum: int, tx_id: str) -> str:
    return f"block {number} tx {txnum} ({tx_id})"


def verify_ledger(
    path: Path, check_quotes: bool = True, roots: dict[str, bytes] | None = None
) -> AuditReport:
    """Audit the chain; with `roots` (MSP id -> CA PEM, trusted from outside), its genesis
    must name exactly those organisation CAs."""
    chain = _Chain(path)
    report = AuditReport()
    blocks = chain.blocks()
    if not blocks or blocks[0][0] != 0:
        report.defects.append(Defect("block 0", "genesis block missing"))
        return report
    config = read_config(chain)
    if roots is not None:
        report.defects += [Defect("block 0", what) for what in check_roots(config, roots)]
    msp = ChannelMsp({m: c.encode() for m, c in config["ca_certs"].items()})
    policy = EndorsementPolicy.from_json(config["policy"])
    state, previous = DictState(), GENESIS_PREVIOUS_HASH
    committed: set[str] = set()
    for expected_number, (number, prev_hash, data_hash, block_hash, tx_count) in enumerate(blocks):
        report.blocks += 1
        here = f"block {number}"
        if number != expected_number:
            report.defects.append(Defect(here, f"expected block number {expected_number}"))
        txs = chain.block_txs(number)
        envelopes = [bytes(envelope) for _, _, _, envelope in txs]
        if prev_hash != previous:
            report.defects.append(
                Defect(here, f"previous_hash does not match the hash of block {number - 1}")
            )
        if len(txs) != tx_count:
            report.defects.append(Defect(here, f"tx_count {tx_count} but {len(txs)} txs"))
        for txnum, (recorded_num, tx_id, _, _envelope) in enumerate(txs):
            if recorded_num != txnum:
                report.defects.append(
                    Defect(
                        _where(number, recorded_num, tx_id),
                        f"transaction number gap, expected {txnum}",
                    )
                )
        if block_data_hash(envelopes) != data_hash:
            bad = ", ".join(_where(number, n, t) for n, t, _, _ in txs) or "(no txs)"
            report.defects.append(
                Defect(here, f"data_hash does not match its transactions (one of: {bad})")
            )
        if block_header_hash(number, prev_hash, data_hash) != block_hash:
            report.defects.append(Defect(here, "block hash does not match its header"))
        previous = block_hash
        if number == 0:
            continue
        view = BlockView(state.version, state.range, number)
        results = validate_block(envelopes, view, msp, policy, committed.__contains__)
        for (txnum, tx_id, code, _), result in zip(txs, results, strict=True):
            report.transactions += 1
            where = _where(number, txnum, tx_id)
            recomputed_id = result.tx.tx_id if result.tx else None
            if recomputed_id is not None and recomputed_id != tx_id:
                report.defects.append(
                    Defect(where, f"tx_id column differs from the envelope's {recomputed_id}")
                )
            if result.code != code:
                report.defects.append(Defect(where, f"recorded {code}, recomputed {result.code}"))
            if result.code == VALID and result.tx is not None:
                report.valid += 1
                if check_quotes:
                    _check_quote(result, state, where, report)
                state.apply(number, txnum, result.tx.rwset.writes)
                committed.add(result.tx.tx_id)
    _compare_state(chain.state(), state, report)
    return report


def _check_quote(result: Validated, state: DictState, where: str, report: AuditReport) -> None:
    tx = result.tx
    if tx is None or tx.proposal.get("fn") != "RecordAttestation":
        return
    if ATTESTATION + tx.tx_id not in tx.rwset.writes:
        _check_retry(tx.proposal, tx.rwset.writes, state, where, report)
        return
    try:
        req = json.loads(tx.proposal["args"][0])
        node = json.loads(state.values[NODE + req["node_id"]][0])
        clock = state.values.get(CLOCK + req["node_id"])
        recorded = json.loads(tx.rwset.writes[ATTESTATION + tx.tx_id] or b"null")
        verdict = attestation.verify(
            args.b64bytes(node, "ak_public"),
            args.b64bytes(req, "quote"),
            args.b64bytes(req, "signature"),
            args.pcr_values(req),
            attested_telemetry.expected_extra_data(req),
            _policy_in_force(state, node),
            json.loads(clock[0]) if clock else None,
        )
    except Exception as exc:  # any failure to re-verify is itself a defect to report
        report.defects.append(Defect(where, f"cannot re-verify the quote: {exc!r}"))
        return
    report.quotes += 1
    if verdict != recorded["verdict"]:
        report.defects.append(
            Defect(
                where,
                "recorded quote verdict differs from the "
                f"re-verified one (valid={verdict['valid']})",
            )
        )


def _check_retry(
    proposal: dict, writes: dict, state: DictState, where: str, report: AuditReport
) -> None:
    """A valid RecordAttestation that recorded no attestation of its own must be a client's
    retry: the same evidence as the attestation already recorded for its nonce, and no
    writes at all."""
    try:
        req = json.loads(proposal["args"][0])
        nonce = args.hexbytes(req, "nonce", NONCE_MIN_BYTES, NONCE_MAX_BYTES).hex()
        answered = state.values.get(NONCE + nonce)
        earlier_id = json.loads(answered[0]) if answered else None
        earlier = state.values.get(ATTESTATION + earlier_id) if earlier_id else None
        evidence = evidence_sha256(args.b64bytes(req, "quote"), args.b64bytes(req, "signature"))
        retry = is_retry(json.loads(earlier[0]) if earlier else None, req["node_id"], evidence)
    except Exception as exc:  # any failure to re-check is itself a defect to report
        report.defects.append(Defect(where, f"cannot re-check the attestation retry: {exc!r}"))
        return
    if not retry or writes:
        report.defects.append(
            Defect(
                where,
                "a RecordAttestation that recorded no attestation is not a retry of the "
                f"one recorded for nonce {nonce} ({earlier_id or 'none'})",
            )
        )


def _policy_in_force(state: DictState, node: dict) -> dict:
    """The node's PCR policy as the contract saw it: for a governed one, the version both
    organisations had approved by then."""
    if not node.get("pcr_policy_id"):
        return dict(node["pcr_policy"])
    approved = state.values[policy_key("pcr_policy", node["pcr_policy_id"])][0]
    return dict(json.loads(approved)["document"])


def _compare_state(
    table: dict[str, tuple[bytes, tuple[int, int]]], replayed: DictState, report: AuditReport
) -> None:
    report.keys = len(replayed.values)
    for key in sorted(set(table) | set(replayed.values)):
        have, want = table.get(key), replayed.values.get(key)
        if have == want:
            continue
        written = f"last written by block {want[1][0]} tx {want[1][1]}" if want else "deleted"
        report.defects.append(
            Defect(
                f"state key {key!r}",
                f"state table {'differs from' if have and want else 'disagrees with'} the replay "
                f"({written}; table has {'nothing' if have is None else _digest(have[0])} at "
                f"{have[1] if have else '-'})",
            )
        )


def _digest(value: bytes) -> str:
    return "sha256:" + hashlib.sha256(value).hexdigest()[:16]
