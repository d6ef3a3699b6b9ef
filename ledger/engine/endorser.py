"""The endorsing side: check a signed proposal, simulate the contract, sign the response.

A proposal is untrusted bytes from a client: it is bounded, parsed field by field and its
creator signature checked against the channel's CAs before the contract sees it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ledger.canonical import dumps, loads
from ledger.contract.chaincode import CONTRACT_NAME, new_chaincode
from ledger.engine.msp import ChannelMsp, Identity, MspError
from ledger.engine.stub import SimulationStub, StateReader
from ledger.engine.tx import b64, encode_envelope, make_tx_id, sha256_hex, unb64
from ledger.units import NS_PER_S

MAX_PROPOSAL_BYTES = 256 * 1024
MAX_ARGS = 8
MAX_FN_LEN = 64
ERROR_THRESHOLD = 400  # Fabric: a chaincode status >= 400 is an error the peer won't endorse
NONCE_BYTES = 24


class ProposalRejected(Exception):
    """The proposal was refused before or during simulation; nothing was ordered."""


class PeersDisagree(Exception):
    """The organisations' peers simulated different results (peers at different ledger
    heights, or a nondeterministic contract): nothing was ordered; retrying re-simulates."""


class LedgerClosed(Exception):
    """The engine is closed or its committer failed: nothing was ordered; retry later."""


@dataclass
class Simulation:
    tx_id: str
    payload: bytes
    response_bytes: bytes


def make_proposal(
    identity: Identity, channel: str, fn: str, args: list[str], now_ns: int, nonce: bytes
) -> tuple[bytes, bytes]:
    """What a client sends: the proposal bytes and its signature over them."""
    cert = identity.cert_pem
    proposal = {
        "channel": channel,
        "chaincode": CONTRACT_NAME,
        "tx_id": make_tx_id(nonce, cert),
        "nonce": b64(nonce),
        "timestamp": {"seconds": now_ns // NS_PER_S, "nanos": now_ns % NS_PER_S},
        "creator": {"mspid": identity.mspid, "cert": cert.decode()},
        "fn": fn,
        "args": args,
    }
    proposal_bytes = dumps(proposal)
    return proposal_bytes, identity.sign(proposal_bytes)


def _parse_proposal(raw: bytes, channel: str) -> dict[str, Any]:
    if len(raw) > MAX_PROPOSAL_BYTES:
        raise ProposalRejected(
            f"[too_large] proposal is {len(raw)} bytes, limit {MAX_PROPOSAL_BYTES}"
        )
    try:
        proposal = loads(raw)
        fn, args = proposal["fn"], proposal["args"]
        creator, ts = proposal["creator"], proposal["timestamp"]
        fields_ok = (
            isinstance(fn, str)
            and 0 < len(fn) <= MAX_FN_LEN
            and isinstance(args, list)
            and len(args) <= MAX_ARGS
            and all(isinstance(a, str) for a in args)
            and isinstance(creator.get("mspid"), str)
            and isinstance(creator.get("cert"), str)
            and type(ts["seconds"]) is int
            and type(ts["nanos"]) is int
            and 0 <= ts["nanos"] < NS_PER_S
            and ts["seconds"] >= 0
            and isinstance(proposal["tx_id"], str)
            and isinstance(proposal["nonce"], str)
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProposalRejected(f"malformed proposal: {type(exc).__name__}: {exc}") from None
    if not fields_ok:
        raise ProposalRejected("malformed proposal: fn, args, creator or timestamp invalid")
    if proposal.get("channel") != channel or proposal.get("chaincode") != CONTRACT_NAME:
        raise ProposalRejected(
            f"proposal for {proposal.get('channel')}/{proposal.get('chaincode')}, "
            f"this peer serves {channel}/{CONTRACT_NAME}"
        )
    return proposal


class Endorser:
    """One organisation's endorsing peer: checks the creator, simulates the contract against
    committed state and signs the response with its own key. Every org of the channel runs
    one, each simulating on its own (`endorse_everywhere`), as on Fabric: an org's
    endorsement is its own execution of the contract, its own re-check of every quote."""

    def __init__(self, store: StateReader, msp: ChannelMsp, peer: Identity, channel: str):
        self._store = store
        self._msp = msp
        self.peer = peer
        self._channel = channel
        self._chaincode = new_chaincode()
        _drop_redundant_string_schemas(self._chaincode)
        self.timings = {"verify_creator": 0.0, "simulate": 0.0, "sign": 0.0}

    @property
    def mspid(self) -> str:
        return self.peer.mspid

    def check(self, proposal_bytes: bytes, signature: bytes) -> dict[str, Any]:
        proposal = _parse_proposal(proposal_bytes, self._channel)
        creator = proposal["creator"]
        t0 = time.perf_counter()
        try:
            self._msp.verify(creator["mspid"], creator["cert"].encode(), signature, proposal_bytes)
            nonce = unb64(proposal["nonce"])
        except (MspError, ValueError) as exc:
            raise ProposalRejected(f"[creator] creator rejected: {exc}") from None
        self.timings["verify_creator"] += time.perf_counter() - t0
        if make_tx_id(nonce, creator["cert"].encode()) != proposal["tx_id"]:
            raise ProposalRejected("tx_id is not SHA-256(nonce || creator)")
        return proposal

    def simulate(self, proposal_bytes: bytes, signature: bytes) -> Simulation:
        proposal = self.check(proposal_bytes, signature)
        t0 = time.perf_counter()
        with self._store.lock:  # a consistent snapshot, as a peer's read lock
            stub = SimulationStub(
                self._store,
                self._channel,
                proposal["tx_id"],
                proposal["fn"],
                proposal["args"],
                {
                    "mspid": proposal["creator"]["mspid"],
                    "idBytes": proposal["creator"]["cert"].encode(),
                },
                (proposal["timestamp"]["seconds"], proposal["timestamp"]["nanos"]),
            )
            response = _run(self._chaincode.invoke(stub))
        self.timings["simulate"] += time.perf_counter() - t0
        if response.status >= ERROR_THRESHOLD:
            raise ProposalRejected(response.message or f"chaincode status {response.status}")
        response_bytes = dumps(
            {
                "proposal_hash": sha256_hex(proposal_bytes),
                "status": response.status,
                "payload": b64(response.payload),
                "rwset": stub.rwset.to_json(),
                "events": [[name, b64(data)] for name, data in stub.events],
            }
        )
        return Simulation(proposal["tx_id"], bytes(response.payload), response_bytes)

    def sign(self, simulation: Simulation) -> dict[str, str]:
        t0 = time.perf_counter()
        endorsement = {
            "mspid": self.peer.mspid,
            "cert": self.peer.cert_pem.decode(),
            "signature": b64(self.peer.sign(simulation.response_bytes)),
        }
        self.timings["sign"] += time.perf_counter() - t0
        return endorsement

    def endorse(self, proposal_bytes: bytes, signature: bytes) -> Endorsed:
        simulation = self.simulate(proposal_bytes, signature)
        return Endorsed(simulation, self.sign(simulation))


@dataclass
class Endorsed:
    """One org's answer to a proposal: what it simulated and its signature over that."""

    simulation: Simulation
    endorsement: dict[str, str]


def agree(answers: list[Endorsed]) -> Simulation:
    """The simulation every org endorsed, or PeersDisagree naming the orgs that differ
    (Fabric's gateway refuses such a proposal the same way)."""
    first = answers[0]
    for other in answers[1:]:
        if other.simulation.response_bytes != first.simulation.response_bytes:
            raise PeersDisagree(
                "endorsing organisations disagree: "
                f"{first.endorsement['mspid']} and {other.endorsement['mspid']} simulated "
                "different results (a block committed between their reads?); retry"
            )
    return first.simulation


def endorse_everywhere(
    endorsers: list[Endorser], proposal_bytes: bytes, signature: bytes
) -> tuple[Simulation, bytes]:
    """Every org's peer endorses on its own; the envelope to order when they agree."""
    answers = [e.endorse(proposal_bytes, signature) for e in endorsers]
    simulation = agree(answers)
    envelope = encode_envelope(
        proposal_bytes, signature, simulation.response_bytes, [a.endorsement for a in answers]
    )
    return simulation, envelope


def _drop_redundant_string_schemas(chaincode: Any) -> None:
    """Every Wattlease function takes and returns `str`; the serializer already enforces
    that, so the per-call JSON-schema check of {"type": "string"} is pure overhead (~100 us
    a transaction). Complex schemas, if a function ever has them, stay."""
    for contract in chaincode._metadata.contracts.values():
        for tx in contract.transactions:
            for param in tx.parameters:
                if param.schema == {"type": "string"}:
                    param.compiled_schema = None
            if tx.returns is not None and tx.returns.schema == {"type": "string"}:
                tx.returns.compiled_schema = None


def _run(coro: Any) -> Any:
    """Drive the contract's coroutine to completion. The engine's stub never suspends, so
    one send() finishes it; anything else is a contract awaiting a foreign event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise ProposalRejected("the contract awaited something the embedded engine cannot provide")
