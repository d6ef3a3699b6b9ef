"""Each organisation's endorsing peer in a process of its own, as on Fabric.

Checking the creator, simulating and signing hold the GIL (about two thirds of a
transaction's CPU time); with `peer_processes=True` the engine runs every org's peer in a
worker process that holds only that org's peer key and reads committed state from the SQLite
file through its own read-only connection (one read transaction per simulation: a consistent
snapshot, like a peer's read lock). Each proposal goes to every org's process; each simulates
on its own, and the engine orders the transaction only when their results agree. Ordering,
validation and commit stay in the engine's process.

Proposals are sent in batches: one dispatcher thread per process takes whatever proposals
queued while its peer was busy, sends them as one message over the pipe and hands each
answer back, so the IPC cost is per batch, not per transaction.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ledger.engine.endorser import (
    Endorsed,
    Endorser,
    LedgerClosed,
    PeersDisagree,
    ProposalRejected,
    agree,
)
from ledger.engine.msp import ChannelMsp, OrgMaterial
from ledger.engine.store import SqliteState
from ledger.engine.tx import encode_envelope

MAX_BATCH = 256  # proposals per message to a peer process
_STOP = object()
Answer = tuple[str, Any]  # ("ok", Endorsed) | ("refused", why) | ("failed", what went wrong)


def _serve(conn: Connection, path: str, msp_dir: str, config: dict[str, Any], mspid: str) -> None:
    """A peer process: endorse each batch received, answer with one message, until the
    engine closes its end of the pipe."""
    msp = ChannelMsp({m: c.encode() for m, c in config["ca_certs"].items()})
    peer = OrgMaterial.load_peer(Path(msp_dir) / mspid)  # this organisation's peer key only
    endorser = Endorser(SqliteState(Path(path)), msp, peer, config["channel"])
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return
        conn.send([_endorse(endorser, proposal, signature) for proposal, signature in batch])


def _endorse(endorser: Endorser, proposal: bytes, signature: bytes) -> Answer:
    try:
        return "ok", endorser.endorse(proposal, signature)
    except ProposalRejected as exc:  # the contract or the creator check refused it
        return "refused", str(exc)
    except Exception as exc:  # the peer could not endorse (e.g. its state read failed): retry
        return "failed", f"the {endorser.mspid} peer could not endorse: {exc!r}"


class _Gather:
    """Every org's answer to one proposal; resolves `result` to (Simulation, envelope) once
    all have answered and agree, or to the first refusal or failure."""

    def __init__(self, orgs: int, proposal: bytes, signature: bytes, result: Future) -> None:
        self._answers: list[Endorsed | None] = [None] * orgs
        self._missing = orgs
        self._lock = threading.Lock()
        self.proposal, self.signature, self.result = proposal, signature, result

    def deliver(self, index: int, answer: Endorsed | BaseException) -> None:
        with self._lock:
            if self.result.done():
                return
            if isinstance(answer, BaseException):
                self.result.set_exception(answer)
                return
            self._answers[index] = answer
            self._missing -= 1
            if self._missing:
                return
        answers = [a for a in self._answers if a is not None]
        try:
            simulation = agree(answers)
        except PeersDisagree as exc:
            self.result.set_exception(exc)
            return
        envelope = encode_envelope(
            self.proposal,
            self.signature,
            simulation.response_bytes,
            [a.endorsement for a in answers],
        )
        self.result.set_result((simulation, envelope))


class _PeerProcess:
    def __init__(self, index: int, mspid: str, path: Path, msp_dir: Path, config: dict) -> None:
        context = multiprocessing.get_context("spawn")
        self.index = index
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.conn, theirs = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(theirs, str(path), str(msp_dir), config, mspid),
            name=f"ledger-peer-{mspid}",
            daemon=True,
        )
        self.process.start()
        theirs.close()


class PeerProcesses:
    def __init__(self, path: Path, msp_dir: Path, config: dict) -> None:
        self._failure: str | None = None
        self._peers = [
            _PeerProcess(i, mspid, path, msp_dir, config)
            for i, mspid in enumerate(config["ca_certs"])
        ]
        self._dispatchers = [
            threading.Thread(
                target=self._dispatch, args=(peer,), name=peer.process.name, daemon=True
            )
            for peer in self._peers
        ]
        for dispatcher in self._dispatchers:
            dispatcher.start()

    @property
    def failure(self) -> str | None:
        """Why the peers stopped endorsing (a peer process died), or None."""
        return self._failure

    def endorse_async(self, proposal: bytes, signature: bytes) -> Future:
        """A future of (Simulation, envelope): every org endorsed and they agree;
        ProposalRejected when one refused, PeersDisagree when they differ, LedgerClosed
        when a peer process failed."""
        result: Future = Future()
        if self._failure is not None:
            result.set_exception(LedgerClosed(self._failure))
            return result
        gather = _Gather(len(self._peers), proposal, signature, result)
        for peer in self._peers:
            peer.queue.put(gather)
        return result

    def _dispatch(self, peer: _PeerProcess) -> None:
        while True:
            batch = [peer.queue.get()]
            while len(batch) < MAX_BATCH and batch[-1] is not _STOP:
                try:
                    batch.append(peer.queue.get_nowait())
                except queue.Empty:
                    break
            stop = batch[-1] is _STOP
            work: list[_Gather] = batch[:-1] if stop else batch
            if work and not self._send(peer, work):
                self._refuse_all(peer)
                return
            if stop:
                return

    def _send(self, peer: _PeerProcess, work: list[_Gather]) -> bool:
        try:
            peer.conn.send([(g.proposal, g.signature) for g in work])
            answers: list[Answer] = peer.conn.recv()
        except (EOFError, OSError) as exc:  # the peer died
            self._failure = (
                f"the endorsing peer process {peer.process.name} failed ({exc!r}); "
                "reopen the ledger"
            )
            for gather in work:
                gather.deliver(peer.index, LedgerClosed(self._failure))
            return False
        for gather, (status, answer) in zip(work, answers, strict=True):
            if status == "ok":
                gather.deliver(peer.index, answer)
            elif status == "refused":
                gather.deliver(peer.index, ProposalRejected(answer))
            else:  # this proposal only: nothing was ordered, the caller may retry
                gather.deliver(peer.index, LedgerClosed(answer))
        return True

    def _refuse_all(self, peer: _PeerProcess) -> None:
        """After its process died, answer everything still sent to this peer, until close."""
        while True:
            item = peer.queue.get()
            if item is _STOP:
                return
            item.deliver(peer.index, LedgerClosed(self._failure or "peer process failed"))

    def close(self) -> None:
        for peer in self._peers:
            peer.queue.put(_STOP)
        for peer, dispatcher in zip(self._peers, self._dispatchers, strict=True):
            dispatcher.join()
            peer.conn.close()  # the peer reads EOF and exits
            peer.process.join(timeout=10)
            if peer.process.is_alive():
                peer.process.kill()
