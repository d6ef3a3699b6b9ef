"""A Fabric channel's blocks written at run time, byte for byte in Fabric's wire format.

Keys and CAs are generated per test: an ordering organisation and two application
organisations, identities carrying their NodeOU role (peer, client, orderer) as cryptogen
writes them. Transactions are built the way the gateway, the endorsing peers and the orderer
build them (proposal from the client library's own `build_proposal`, endorsements over
proposal_response_payload || endorser, block signature over value || signature header ||
header DER). The verifier is also run on blocks of a real network in tests/webapp.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fabric_protos.common import common_pb2
from fabric_protos.ledger.rwset import rwset_pb2
from fabric_protos.ledger.rwset.kvrwset import kv_rwset_pb2
from fabric_protos.peer import (
    chaincode_pb2,
    proposal_pb2,
    proposal_response_pb2,
    transaction_pb2,
)

from chaincode_client.fabric.identity import Identity, Signer
from chaincode_client.fabric.proposals import build_proposal
from ledger.audit.fabric_block import header_bytes
from ledger.audit.fabric_trust import format_roots

CHANNEL = CHAINCODE = "wattlease"
ORGS = ("Org1MSP", "Org2MSP")
ORDERER_MSP = "OrdererMSP"
VALIDITY = dt.timedelta(days=1)


class Org:
    """One MSP: a root CA and identities it issues, each with a NodeOU role."""

    def __init__(self, msp_id: str) -> None:
        self.msp_id = msp_id
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"ca.{msp_id}")])
        self.cert = self._issue(name, self.key, ca=True)

    def _issue(self, subject: x509.Name, key: Any, ca: bool = False) -> x509.Certificate:
        now = dt.datetime.now(dt.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject if ca else self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def member(self, role: str) -> tuple[Identity, Signer]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
                x509.NameAttribute(NameOID.COMMON_NAME, f"{role}.{self.msp_id}"),
            ]
        )
        cert = self._issue(subject, key)
        return Identity(self.msp_id, cert.public_bytes(serialization.Encoding.PEM)), Signer(key)


class Channel:
    def __init__(self) -> None:
        self.orderer_org = Org(ORDERER_MSP)
        self.orderer = self.orderer_org.member("orderer")
        self.orgs = {m: Org(m) for m in ORGS}
        self.peers = {m: org.member("peer") for m, org in self.orgs.items()}
        self.clients = {m: org.member("client") for m, org in self.orgs.items()}
        self.blocks: list[bytes] = []
        self.previous_hash = b""

    def roots_pem(self) -> bytes:
        orgs = {m: org.pem for m, org in self.orgs.items()}
        return format_roots(CHANNEL, CHAINCODE, {ORDERER_MSP: self.orderer_org.pem}, orgs).encode()

    def tx(
        self,
        fn: str,
        request: dict[str, Any],
        result: dict[str, Any] | Callable[[str], dict[str, Any]] | None = None,
        endorsers: tuple[tuple[Identity, Signer], ...] | None = None,
        msp_id: str = "Org1MSP",
        writes: dict[str, bytes | None] | Callable[[str], dict[str, bytes | None]] | None = None,
        reads: dict[str, tuple[int, int] | None] | None = None,
    ) -> tuple[str, bytes]:
        """(tx id, envelope) of `fn(request)` answered with `result`, having read `reads`
        (key -> (block, tx) version, None: absent) and writing `writes` (or what
        `writes(tx_id)` gives), endorsed by a peer of each organisation (or `endorsers`),
        signed by a client of `msp_id`."""
        identity, signer = self.clients[msp_id]
        signed = build_proposal(
            identity, signer, CHANNEL, CHAINCODE, fn, (json.dumps(request, sort_keys=True),)
        )
        proposal = proposal_pb2.Proposal.FromString(signed.proposal.proposal_bytes)
        header = common_pb2.Header.FromString(proposal.header)
        if callable(result):  # an answer that names the transaction (an attestation's id)
            result = result(signed.tx_id)
        if callable(writes):
            writes = writes(signed.tx_id)
        answer = json.dumps(result if result is not None else request, sort_keys=True).encode()
        kv = kv_rwset_pb2.KVRWSet(
            reads=[
                kv_rwset_pb2.KVRead(
                    key=k,
                    version=None
                    if v is None
                    else kv_rwset_pb2.Version(block_num=v[0], tx_num=v[1]),
                )
                for k, v in (reads or {}).items()
            ],
            writes=[
                kv_rwset_pb2.KVWrite(key=k, is_delete=v is None, value=v or b"")
                for k, v in (writes or {}).items()
            ],
        )
        results = rwset_pb2.TxReadWriteSet(
            data_model=rwset_pb2.TxReadWriteSet.KV,
            ns_rwset=[rwset_pb2.NsReadWriteSet(namespace=CHAINCODE, rwset=kv.SerializeToString())],
        )
        action = proposal_pb2.ChaincodeAction(
            results=results.SerializeToString(),
            response=proposal_response_pb2.Response(status=200, payload=answer),
            chaincode_id=chaincode_pb2.ChaincodeID(name=CHAINCODE, version="1"),
        )
        prp = proposal_response_pb2.ProposalResponsePayload(
            proposal_hash=hashlib.sha256(
                header.channel_header + header.signature_header + proposal.payload
            ).digest(),
            extension=action.SerializeToString(),
        ).SerializeToString()
        endorsements = [
            proposal_response_pb2.Endorsement(
                endorser=peer.serialized(), signature=key.sign(prp + peer.serialized())
            )
            for peer, key in (endorsers if endorsers is not None else self.peers.values())
        ]
        cap = transaction_pb2.ChaincodeActionPayload(
            chaincode_proposal_payload=proposal.payload,
            action=transaction_pb2.ChaincodeEndorsedAction(
                proposal_response_payload=prp, endorsements=endorsements
            ),
        )
        tx = transaction_pb2.Transaction(
            actions=[
                transaction_pb2.TransactionAction(
                    header=header.signature_header, payload=cap.SerializeToString()
                )
            ]
        )
        payload = common_pb2.Payload(header=header, data=tx.SerializeToString())
        raw = payload.SerializeToString()
        envelope = common_pb2.Envelope(payload=raw, signature=signer.sign(raw))
        return signed.tx_id, envelope.SerializeToString()

    def block(self, envelopes: list[bytes], codes: bytes | None = None) -> int:
        """Order `envelopes` into the next block, signed by an orderer; its number."""
        number = len(self.blocks)
        data_hash = hashlib.sha256(b"".join(envelopes)).digest()
        header = common_pb2.BlockHeader(
            number=number, previous_hash=self.previous_hash, data_hash=data_hash
        )
        identity, signer = self.orderer
        value = common_pb2.OrdererBlockMetadata(
            last_config=common_pb2.LastConfig(index=0)
        ).SerializeToString()
        sig_header = common_pb2.SignatureHeader(
            creator=identity.serialized(), nonce=os.urandom(24)
        ).SerializeToString()
        der = header_bytes(number, self.previous_hash, data_hash)
        signatures = common_pb2.Metadata(
            value=value,
            signatures=[
                common_pb2.MetadataSignature(
                    signature_header=sig_header, signature=signer.sign(value + sig_header + der)
                )
            ],
        )
        filter_ = codes if codes is not None else bytes(len(envelopes))
        block = common_pb2.Block(
            header=header,
            data=common_pb2.BlockData(data=envelopes),
            metadata=common_pb2.BlockMetadata(
                metadata=[signatures.SerializeToString(), b"", filter_, b"", b""]
            ),
        )
        self.blocks.append(block.SerializeToString())
        self.previous_hash = hashlib.sha256(der).digest()
        return number


def _version(at: tuple[int, int]) -> kv_rwset_pb2.Version:
    return kv_rwset_pb2.Version(block_num=at[0], tx_num=at[1])


def receipt(channel: Channel, lease_id: str, placed: list[tuple[str, int, int]]) -> dict[str, Any]:
    """A fabric/1 receipt of `placed` (tx id, block, index), as the exporter writes one."""
    numbers = sorted({block for _, block, _ in placed})
    return {
        "format": "fabric/1",
        "lease_id": lease_id,
        "channel": CHANNEL,
        "chaincode": CHAINCODE,
        "blocks": [
            {"number": n, "block": base64.b64encode(channel.blocks[n]).decode()} for n in numbers
        ],
        "transactions": [{"tx_id": t, "block": b, "index": i} for t, b, i in placed],
    }


# -- tampering with a receipt, as an attacker who holds no channel key would --


def block_of(doc: dict[str, Any], number: int) -> common_pb2.Block:
    entry = next(b for b in doc["blocks"] if b["number"] == number)
    return common_pb2.Block.FromString(base64.b64decode(entry["block"]))


def put_block(doc: dict[str, Any], number: int, block: common_pb2.Block) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    entry = next(b for b in doc["blocks"] if b["number"] == number)
    entry["block"] = base64.b64encode(block.SerializeToString()).decode()
    return doc


def flip_byte(doc: dict[str, Any], tx_id: str, marker: bytes = b"") -> dict[str, Any]:
    """The receipt with one byte of `tx_id`'s envelope changed (the first after `marker`,
    or the middle one)."""
    ref = next(t for t in doc["transactions"] if t["tx_id"] == tx_id)
    block = block_of(doc, ref["block"])
    envelope = bytearray(block.data.data[ref["index"]])
    at = envelope.find(marker) + len(marker) if marker else len(envelope) // 2
    envelope[at] ^= 0x01
    block.data.data[ref["index"]] = bytes(envelope)
    return put_block(doc, ref["block"], block)


def drop_endorsement(doc: dict[str, Any], tx_id: str, which: int = 1) -> dict[str, Any]:
    """The receipt with one endorsement taken out of `tx_id`'s transaction."""
    ref = next(t for t in doc["transactions"] if t["tx_id"] == tx_id)
    block = block_of(doc, ref["block"])
    env = common_pb2.Envelope.FromString(block.data.data[ref["index"]])
    payload = common_pb2.Payload.FromString(env.payload)
    tx = transaction_pb2.Transaction.FromString(payload.data)
    cap = transaction_pb2.ChaincodeActionPayload.FromString(tx.actions[0].payload)
    del cap.action.endorsements[which]
    tx.actions[0].payload = cap.SerializeToString()
    payload.data = tx.SerializeToString()
    env.payload = payload.SerializeToString()
    block.data.data[ref["index"]] = env.SerializeToString()
    return put_block(doc, ref["block"], block)
