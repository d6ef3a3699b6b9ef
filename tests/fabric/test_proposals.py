from __future__ import annotations

import hashlib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from fabric_protos.common import common_pb2
from fabric_protos.msp import identities_pb2
from fabric_protos.peer import (
    chaincode_pb2,
    proposal_pb2,
    proposal_response_pb2,
    transaction_pb2,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from chaincode_client.fabric.identity import load_msp
from chaincode_client.fabric.proposals import (
    MAX_ARGS,
    ProtocolError,
    build_proposal,
    sign_envelope,
    transaction_result,
)
from tests.fabric.pki import make_msp


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return load_msp(make_msp(tmp_path_factory.mktemp("msp")), "Org1MSP")


def test_proposal_carries_the_call_and_is_signed_by_the_creator(user):  # type: ignore[no-untyped-def]
    identity, signer = user
    signed = build_proposal(
        identity, signer, "wattlease", "wattlease", "RegisterNode", ('{"id": "n1"}',)
    )
    proposal = proposal_pb2.Proposal.FromString(signed.proposal.proposal_bytes)
    header = common_pb2.Header.FromString(proposal.header)
    chdr = common_pb2.ChannelHeader.FromString(header.channel_header)
    shdr = common_pb2.SignatureHeader.FromString(header.signature_header)
    assert chdr.type == common_pb2.ENDORSER_TRANSACTION
    assert chdr.channel_id == "wattlease"
    assert chdr.tx_id == signed.tx_id == hashlib.sha256(shdr.nonce + shdr.creator).hexdigest()
    ext = proposal_pb2.ChaincodeHeaderExtension.FromString(chdr.extension)
    assert ext.chaincode_id.name == "wattlease"
    payload = proposal_pb2.ChaincodeProposalPayload.FromString(proposal.payload)
    spec = chaincode_pb2.ChaincodeInvocationSpec.FromString(payload.input).chaincode_spec
    assert list(spec.input.args) == [b"RegisterNode", b'{"id": "n1"}']
    creator = identities_pb2.SerializedIdentity.FromString(shdr.creator)
    cert = x509.load_pem_x509_certificate(creator.id_bytes)
    cert.public_key().verify(
        signed.proposal.signature, signed.proposal.proposal_bytes, ec.ECDSA(hashes.SHA256())
    )


def test_each_proposal_gets_a_fresh_transaction_id(user):  # type: ignore[no-untyped-def]
    ids = {build_proposal(*user, "c", "cc", "f", ()).tx_id for _ in range(20)}
    assert len(ids) == 20


def test_refuses_too_many_arguments(user):  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="arguments"):
        build_proposal(*user, "c", "cc", "f", ("a",) * MAX_ARGS)


def _prepared(result: bytes) -> common_pb2.Envelope:
    cc_action = proposal_pb2.ChaincodeAction(
        response=proposal_response_pb2.Response(status=200, payload=result)
    )
    prp = proposal_response_pb2.ProposalResponsePayload(extension=cc_action.SerializeToString())
    cap = transaction_pb2.ChaincodeActionPayload(
        action=transaction_pb2.ChaincodeEndorsedAction(
            proposal_response_payload=prp.SerializeToString()
        )
    )
    tx = transaction_pb2.Transaction(
        actions=[transaction_pb2.TransactionAction(payload=cap.SerializeToString())]
    )
    return common_pb2.Envelope(
        payload=common_pb2.Payload(data=tx.SerializeToString()).SerializeToString()
    )


def test_reads_the_contract_result_out_of_a_prepared_transaction():
    assert transaction_result(_prepared(b'{"ok": true}')) == b'{"ok": true}'


def test_signs_the_prepared_payload(user):  # type: ignore[no-untyped-def]
    identity, signer = user
    envelope = sign_envelope(_prepared(b"x"), signer)
    cert = x509.load_pem_x509_certificate(identity.cert_pem)
    cert.public_key().verify(envelope.signature, envelope.payload, ec.ECDSA(hashes.SHA256()))


def test_rejects_a_transaction_with_no_action():
    tx = transaction_pb2.Transaction()
    env = common_pb2.Envelope(
        payload=common_pb2.Payload(data=tx.SerializeToString()).SerializeToString()
    )
    with pytest.raises(ProtocolError, match="0 actions"):
        transaction_result(env)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_arbitrary_payload_bytes_give_a_result_or_a_protocol_error(data: bytes):
    try:
        result = transaction_result(common_pb2.Envelope(payload=data))
    except ProtocolError:
        return
    assert isinstance(result, bytes)
