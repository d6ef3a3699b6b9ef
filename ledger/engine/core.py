"""EmbeddedLedger: one channel, the organisations' endorsing peers, an orderer that cuts
blocks by size or timeout, and a committer that validates and commits them atomically.

    ledger = EmbeddedLedger.open(Path("var/ledger.sqlite"), orgs=("Org1MSP", "Org2MSP"))
    alice = ledger.enroll("Org1MSP", "alice")
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from ledger.canonical import dumps, loads
from ledger.engine.endorser import (
    Endorser,
    LedgerClosed,
    ProposalRejected,
    Simulation,
    endorse_everywhere,
)
from ledger.engine.msp import ROLE_CLIENT, ChannelMsp, Identity, OrgMaterial, new_identity
from ledger.engine.parallel import SignaturePool
from ledger.engine.peers import PeerProcesses
from ledger.engine.store import BlockRow, CommittedTx, Store
from ledger.engine.tx import (
    VALID,
    EndorsementPolicy,
    block_data_hash,
    block_header_hash,
    data_hash_of_digests,
    decode_envelope,
    unb64,
)
from ledger.engine.validate import BlockView, signature_code, validate_block
from ledger.genesis import GENESIS_PREVIOUS_HASH, read_config

DEFAULT_ORGS = ("Org1MSP", "Org2MSP")
DEFAULT_CHANNEL = "wattlease"
DEFAULT_BLOCK_SIZE = 250
DEFAULT_BLOCK_TIMEOUT_S = 0.02
MAX_VOUCHED = 100_000
_STOP = object()

__all__ = ["EmbeddedLedger", "EndorsementPolicy", "LedgerClosed", "ProposalRejected", "TxResult"]


@dataclass(frozen=True)
class TxResult:
    tx_id: str
    block_number: int
    code: str
    payload: bytes


@dataclass(frozen=True)
class Event:
    block_number: int
    tx_id: str
    name: str
    payload: bytes


class EmbeddedLedger:
    def __init__(
        self,
        store: Store,
        config: dict,
        orgs: dict[str, OrgMaterial],
        block_size: int,
        block_timeout_s: float,
        validation_workers: int = 0,
        peer_processes: bool = False,
    ) -> None:
        self.store = store
        self.config = config
        self.channel = config["channel"]
        self.policy = EndorsementPolicy.from_json(config["policy"])
        self._pool = SignaturePool(validation_workers, config) if validation_workers else None
        # sha256 of envelopes this engine's own peers endorsed (in this process or in the
        # peer processes it spawned): their creator signature was verified and their
        # endorsements made by those peers, over exactly these bytes, so the committer need
        # not verify them again. Any other envelope (and every one in the audit) is checked.
        self._vouched: set[bytes] = set()
        self._peers = (
            PeerProcesses(store.path, msp_dir_for(store.path), config) if peer_processes else None
        )
        self.msp = ChannelMsp({m: c.encode() for m, c in config["ca_certs"].items()})
        self._orgs = orgs
        # every org's endorsing peer, in genesis order; each simulates on its own
        self.endorsers = [
            Endorser(store, self.msp, orgs[mspid].peer, self.channel)
            for mspid in config["ca_certs"]
        ]
        self.block_size = block_size
        self.block_timeout_s = block_timeout_s
        self._queue: queue.Queue = queue.Queue()
        self._subscribers: list[queue.Queue] = []
        self._sub_lock = threading.Lock()
        self._closed = False
        self.timings = {"validate": 0.0, "commit_sqlite": 0.0, "blocks": 0.0}
        self._fatal: BaseException | None = None
        self._committer = threading.Thread(
            target=self._commit_loop, name="ledger-committer", daemon=True
        )
        self._committer.start()

    # -- construction --------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: Path | str,
        orgs: tuple[str, ...] | list[str] = DEFAULT_ORGS,
        policy: EndorsementPolicy | None = None,
        block_size: int = DEFAULT_BLOCK_SIZE,
        block_timeout_s: float = DEFAULT_BLOCK_TIMEOUT_S,
        synchronous: str = "NORMAL",
        channel: str = DEFAULT_CHANNEL,
        validation_workers: int = 0,
        peer_processes: bool = False,
    ) -> EmbeddedLedger:
        """Open (or create, with a genesis block and fresh org keys) the ledger at path.
        Org keys live in `<path>.msp/<mspid>/`; on reopen orgs/policy come from genesis.
        validation_workers > 0 checks block signatures in that many worker processes;
        peer_processes runs each org's endorsing peer in a process of its own (evaluate
        stays in-process)."""
        path = Path(path)
        msp_dir = msp_dir_for(path)
        store = Store(path, synchronous)
        if store.tip is None:
            materials = {m: OrgMaterial.create(msp_dir / m, m) for m in orgs}
            config = {
                "channel": channel,
                "ca_certs": {m: o.ca.cert_pem.decode() for m, o in materials.items()},
                "policy": (policy or EndorsementPolicy.all_of(tuple(orgs))).to_json(),
            }
            cls._write_genesis(store, config)
        else:
            config = read_config(store)
            materials = {m: OrgMaterial.load(msp_dir / m) for m in config["ca_certs"]}
        return cls(
            store,
            config,
            materials,
            block_size,
            block_timeout_s,
            validation_workers,
            peer_processes,
        )

    @staticmethod
    def _write_genesis(store: Store, config: dict) -> None:
        envelope = dumps({"config": config})
        data_hash = block_data_hash([envelope])
        block = BlockRow(
            0,
            GENESIS_PREVIOUS_HASH,
            data_hash,
            block_header_hash(0, GENESIS_PREVIOUS_HASH, data_hash),
            1,
        )
        store.commit_block(block, [CommittedTx(0, "genesis", VALID, envelope, {}, (0, 0))])

    def enroll(self, mspid: str, name: str, role: str = ROLE_CLIENT) -> Identity:
        """A new identity of mspid (a client unless `role` says admin or peer), its
        certificate issued by that org's CA."""
        if mspid not in self._orgs:
            raise ValueError(f"{mspid} is not an organisation of this ledger")
        return new_identity(mspid, name, self._orgs[mspid].ca, role)

    # -- the transaction flow ------------------------------------------------------------
    def evaluate(self, proposal_bytes: bytes, signature: bytes) -> bytes:
        self._check_open(endorsers=False)  # queries run in this process
        return self.endorsers[0].simulate(proposal_bytes, signature).payload  # one peer, as Fabric

    def endorse(self, proposal_bytes: bytes, signature: bytes) -> tuple[Simulation, bytes]:
        """Every org's peer simulates and signs; returns the envelope to order once they
        agree. ProposalRejected when one refuses, PeersDisagree when their results differ."""
        self._check_open()
        if self._peers is not None:
            simulation, envelope = self._peers.endorse_async(proposal_bytes, signature).result()
        else:
            simulation, envelope = endorse_everywhere(self.endorsers, proposal_bytes, signature)
        self._vouch(envelope)
        return simulation, envelope

    def submit(self, proposal_bytes: bytes, signature: bytes) -> Future:
        """Endorse and order without waiting: the future resolves to a TxResult once the
        block holding the transaction is committed. In-process endorsement happens here
        (a refused proposal raises ProposalRejected now); with peer processes the
        proposal joins the next batch sent to them, and a refusal fails the future."""
        self._check_open()
        if self._peers is None:
            return self.order(self.endorse(proposal_bytes, signature)[1])
        committed: Future = Future()

        def endorsed(done: Future) -> None:
            failure = done.exception()
            if failure is not None:
                committed.set_exception(failure)
                return
            _, envelope = done.result()
            self._vouch(envelope)
            try:
                self.order(envelope, committed)
            except LedgerClosed as exc:
                committed.set_exception(exc)

        self._peers.endorse_async(proposal_bytes, signature).add_done_callback(endorsed)
        return committed

    def _vouch(self, envelope: bytes) -> None:
        if len(self._vouched) >= MAX_VOUCHED:  # endorsed but never ordered: forget, re-verify
            self._vouched.clear()
        self._vouched.add(hashlib.sha256(envelope).digest())

    def order(self, envelope: bytes, future: Future | None = None) -> Future:
        """Hand an endorsed envelope to the orderer; the future (a new one unless given)
        resolves to a TxResult once its block is committed."""
        self._check_open()
        future = future or Future()
        self._queue.put((envelope, future))
        return future

    # -- chain activity (for dashboards) ---------------------------------------------------
    @property
    def height(self) -> int:
        """Number of committed blocks, genesis included."""
        return self.store.tip.number + 1 if self.store.tip else 0

    def block_summaries(self, start: int = 0, limit: int = 100) -> list[dict]:
        """Blocks from `start` (at most `limit`), each with its transactions' id, function,
        creator MSP and validation code: what a ledger-activity view shows."""
        out = []
        for block in self.store.blocks(start)[:limit]:
            txs = []
            for txnum, tx_id, code, envelope in self.store.block_txs(block.number):
                fn, creator = "(config)", ""
                if block.number > 0:
                    try:
                        tx = decode_envelope(bytes(envelope))
                        fn, creator = str(tx.proposal.get("fn")), str(tx.creator.get("mspid"))
                    except (ValueError, AttributeError):
                        fn = "(unparseable)"
                txs.append(
                    {"txnum": txnum, "tx_id": tx_id, "fn": fn, "creator": creator, "code": code}
                )
            out.append(
                {
                    "number": block.number,
                    "hash": block.hash,
                    "previous_hash": block.previous_hash,
                    "data_hash": block.data_hash,
                    "transactions": txs,
                }
            )
        return out

    # -- events --------------------------------------------------------------------------
    def events(self, start_block: int = 0, stop: threading.Event | None = None) -> Iterator[Event]:
        """Events of valid transactions from start_block on: replayed from the chain, then
        live as blocks commit. Ends when stop is set or the ledger closes."""
        live: queue.Queue = queue.Queue()
        with self._sub_lock:
            self._subscribers.append(live)
            replay_to = self.store.tip.number if self.store.tip else -1
        try:
            for number in range(start_block, replay_to + 1):
                yield from _block_events(number, self.store.block_txs(number))
            while not (stop and stop.is_set()):
                try:
                    item = live.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is _STOP:
                    return
                number, events = item
                if number > replay_to and number >= start_block:
                    yield from events
        finally:
            with self._sub_lock:
                self._subscribers.remove(live)

    # -- ordering and commit -------------------------------------------------------------
    def _commit_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch = [first]
            deadline = time.monotonic() + self.block_timeout_s
            stop_after = False
            while len(batch) < self.block_size:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is _STOP:
                    stop_after = True
                    break
                batch.append(item)
            try:
                self._commit(batch)
            except BaseException as exc:  # e.g. disk full: outcome unknown to every waiter
                self._fatal = exc
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
            if stop_after:
                return

    def _commit(self, batch: list[tuple[bytes, Future]]) -> None:
        tip = self.store.tip
        assert tip is not None  # genesis exists from open()
        number = tip.number + 1
        envelopes = [envelope for envelope, _ in batch]
        view = BlockView(self._committed_version, self._committed_range, number)
        t0 = time.perf_counter()
        digests = [hashlib.sha256(envelope).digest() for envelope in envelopes]
        codes = self._signature_codes(envelopes, digests)
        results = validate_block(
            envelopes, view, self.msp, self.policy, self.store.tx_id_committed, codes
        )
        t1 = time.perf_counter()
        data_hash = data_hash_of_digests(digests)
        block = BlockRow(
            number,
            tip.hash,
            data_hash,
            block_header_hash(number, tip.hash, data_hash),
            len(envelopes),
        )
        committed = []
        for r in results:
            tx_id = r.tx.tx_id if r.tx else f"unparsed-{number}-{r.txnum}"
            writes = r.tx.rwset.writes if r.tx else {}
            ts = r.tx.timestamp if r.tx else (0, 0)
            committed.append(CommittedTx(r.txnum, tx_id, r.code, r.envelope, writes, ts))
        self.store.commit_block(block, committed)
        self.timings["validate"] += t1 - t0
        self.timings["commit_sqlite"] += time.perf_counter() - t1
        self.timings["blocks"] += 1
        for r, (_, future) in zip(results, batch, strict=True):
            payload = unb64(r.tx.response["payload"]) if r.tx else b""
            tx_id = r.tx.tx_id if r.tx else ""
            future.set_result(TxResult(tx_id, number, r.code, payload))
        with self._sub_lock:
            if not self._subscribers:
                return
            events = [
                Event(number, r.tx.tx_id, name, unb64(payload))
                for r in results
                if r.code == VALID and r.tx is not None
                for name, payload in r.tx.response["events"]
            ]
            for subscriber in self._subscribers:
                subscriber.put((number, events))

    def _signature_codes(self, envelopes: list[bytes], digests: list[bytes]) -> list[str | None]:
        """check_signatures' result per envelope: None for those this process vouches for,
        computed (in the pool when configured) for the others."""
        codes: list[str | None] = [None] * len(envelopes)
        foreign = []
        for i, digest in enumerate(digests):
            if digest in self._vouched:
                self._vouched.discard(digest)
            else:
                foreign.append(i)
        if foreign and self._pool:
            checked = self._pool.codes([envelopes[i] for i in foreign])
        else:
            checked = [signature_code(envelopes[i], self.msp, self.policy) for i in foreign]
        for i, code in zip(foreign, checked, strict=True):
            codes[i] = code
        return codes

    def _committed_version(self, key: str) -> tuple[int, int] | None:
        found = self.store.state.get(key)
        return found[1] if found else None

    def _committed_range(self, start: str, end: str) -> list[tuple[str, tuple[int, int]]]:
        return [(k, v) for k, _, v in self.store.range(start, end)]

    # -- lifecycle -----------------------------------------------------------------------
    def _check_open(self, endorsers: bool = True) -> None:
        if self._closed:
            raise LedgerClosed("the ledger is closed")
        if self._fatal is not None:
            raise LedgerClosed(f"the committer failed: {self._fatal!r}")
        if endorsers and self._peers is not None and self._peers.failure is not None:
            raise LedgerClosed(self._peers.failure)

    def close(self) -> None:
        """Commit what is queued, stop the committer, release SQLite."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._committer.join()
        while True:  # ordered after the stop marker by a racing submit: tell, don't hang
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP and not item[1].done():
                item[1].set_exception(LedgerClosed("the ledger closed before ordering it"))
        if self._pool:
            self._pool.close()
        if self._peers:
            self._peers.close()
        with self._sub_lock:
            for subscriber in self._subscribers:
                subscriber.put(_STOP)
        self.store.close()


def msp_dir_for(path: Path) -> Path:
    return path.with_name(path.name + ".msp")


def _block_events(number: int, txs: list[tuple[int, str, str, bytes]]) -> Iterator[Event]:
    for _, tx_id, code, envelope in txs:
        if code != VALID or number == 0:
            continue
        response = loads(loads(envelope)["response"])
        for name, payload in response["events"]:
            yield Event(number, tx_id, name, unb64(payload))
