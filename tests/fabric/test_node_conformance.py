"""The Python gateway client puts the same requests on the wire as the official Node client
`@hyperledger/fabric-gateway` (bench/fabric-node, installed by `npm ci`): same message
shapes, same fields, signatures valid for the same identity. Needs node and the npm
install; fails (never skips) without them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from fabric_protos.common import common_pb2
from fabric_protos.gateway import gateway_pb2
from fabric_protos.peer import chaincode_pb2, proposal_pb2

from chaincode_client.fabric.client import FabricGatewayClient
from chaincode_client.fabric.identity import load_msp
from tests.fabric.pki import make_msp
from tests.fabric.recording_gateway import (
    COMMIT_BLOCK,
    EVALUATE_RESULT,
    EVENT_BLOCK,
    SUBMIT_RESULT,
    recording_gateway,
)

NODE_DIR = Path(__file__).resolve().parents[2] / "bench" / "fabric-node"
NODE_TIMEOUT_S = 60


def _verify(cert_pem: bytes, signature: bytes, message: bytes) -> None:
    key = x509.load_pem_x509_certificate(cert_pem).public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    key.verify(signature, message, ec.ECDSA(hashes.SHA256()))


def _proposal_shape(signed: proposal_pb2.SignedProposal) -> dict[str, object]:
    """Everything in a proposal except what must differ per call (nonce, time, tx id)."""
    proposal = proposal_pb2.Proposal.FromString(signed.proposal_bytes)
    header = common_pb2.Header.FromString(proposal.header)
    chdr = common_pb2.ChannelHeader.FromString(header.channel_header)
    shdr = common_pb2.SignatureHeader.FromString(header.signature_header)
    ext = proposal_pb2.ChaincodeHeaderExtension.FromString(chdr.extension)
    payload = proposal_pb2.ChaincodeProposalPayload.FromString(proposal.payload)
    spec = chaincode_pb2.ChaincodeInvocationSpec.FromString(payload.input).chaincode_spec
    return {
        "type": chdr.type,
        "version": chdr.version,
        "channel": chdr.channel_id,
        "epoch": chdr.epoch,
        "tls_cert_hash": chdr.tls_cert_hash,
        "has_timestamp": chdr.HasField("timestamp"),
        "cc": ext.chaincode_id.name,
        "cc_version": ext.chaincode_id.version,
        "creator": shdr.creator,
        "nonce_len": len(shdr.nonce),
        "spec_type": spec.type,
        "spec_cc": spec.chaincode_id.name,
        "args": list(spec.input.args),
        "is_init": spec.input.is_init,
        "transient": dict(payload.TransientMap),
    }


def _run_node(port: int, msp: Path) -> dict[str, object]:
    node = shutil.which("node")
    assert node, "node is not on PATH (Node 20 is needed for the reference client)"
    assert (NODE_DIR / "node_modules" / "@hyperledger" / "fabric-gateway").is_dir(), (
        f"run `npm ci --prefix {NODE_DIR}` first"
    )
    env = {
        **os.environ,
        "GATEWAY_ADDRESS": f"127.0.0.1:{port}",
        "MSP_ID": "Org1MSP",
        "CERT_PEM_FILE": str(msp / "signcerts" / "cert.pem"),
        "KEY_PEM_FILE": str(msp / "keystore" / "priv_sk"),
    }
    out = subprocess.run(
        [node, str(NODE_DIR / "conformance.js")],
        env=env,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_python(port: int, msp: Path) -> dict[str, object]:
    identity, signer = load_msp(msp, "Org1MSP")
    client = FabricGatewayClient(
        grpc.insecure_channel(f"127.0.0.1:{port}"), identity, signer, "wattlease", "wattlease"
    )
    try:
        evaluated = client.evaluate("GetNode", '{"node_id":"n1"}')
        receipt = client.submit("RegisterNode", '{"node_id":"n1"}')
        events = client.events(EVENT_BLOCK)
        event = next(events)
        events.close()  # type: ignore[attr-defined]
    finally:
        client.close()
    return {"evaluated": evaluated, "receipt": receipt, "event": event}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    msp = make_msp(tmp_path_factory.mktemp("msp"))
    with recording_gateway() as (node_rec, node_port), recording_gateway() as (py_rec, py_port):
        node_out = _run_node(node_port, msp)
        py_out = _run_python(py_port, msp)
    return (
        node_rec.requests,
        node_out,
        py_rec.requests,
        py_out,
        (msp / "signcerts" / "cert.pem").read_bytes(),
    )


def test_both_clients_make_the_same_calls(recorded):  # type: ignore[no-untyped-def]
    node_req, _, py_req, _, _ = recorded
    assert {k: len(v) for k, v in node_req.items()} == {k: len(v) for k, v in py_req.items()}


@pytest.mark.parametrize("method", ["Evaluate", "Endorse"])
def test_proposals_have_the_same_shape(recorded, method: str):  # type: ignore[no-untyped-def]
    node_req, _, py_req, _, cert = recorded
    node, py = node_req[method][0], py_req[method][0]
    assert _proposal_shape(py.proposed_transaction) == _proposal_shape(node.proposed_transaction)
    assert py.channel_id == node.channel_id
    for req in (node, py):
        _verify(cert, req.proposed_transaction.signature, req.proposed_transaction.proposal_bytes)
        chdr = common_pb2.ChannelHeader.FromString(
            common_pb2.Header.FromString(
                proposal_pb2.Proposal.FromString(req.proposed_transaction.proposal_bytes).header
            ).channel_header
        )
        assert req.transaction_id == chdr.tx_id


def test_endorse_names_the_same_organisations(recorded):  # type: ignore[no-untyped-def]
    node_req, _, py_req, _, _ = recorded
    assert list(py_req["Endorse"][0].endorsing_organizations) == list(
        node_req["Endorse"][0].endorsing_organizations
    )


def test_submitted_envelopes_are_signed_prepared_transactions(recorded):  # type: ignore[no-untyped-def]
    node_req, _, py_req, _, cert = recorded
    for reqs in (node_req, py_req):
        submit = reqs["Submit"][0]
        assert submit.transaction_id == reqs["Endorse"][0].transaction_id
        _verify(cert, submit.prepared_transaction.signature, submit.prepared_transaction.payload)


@pytest.mark.parametrize(
    ("method", "cls"),
    [
        ("CommitStatus", gateway_pb2.CommitStatusRequest),
        ("ChaincodeEvents", gateway_pb2.ChaincodeEventsRequest),
    ],
)
def test_signed_requests_match(recorded, method: str, cls: type):  # type: ignore[no-untyped-def]
    node_req, _, py_req, _, cert = recorded
    node, py = node_req[method][0], py_req[method][0]
    for signed in (node, py):
        _verify(cert, signed.signature, signed.request)
    node_inner, py_inner = cls.FromString(node.request), cls.FromString(py.request)
    if method == "CommitStatus":
        assert py_inner.transaction_id == py_req["Endorse"][0].transaction_id
        node_inner.transaction_id = py_inner.transaction_id = ""
    assert py_inner == node_inner


def test_results_are_read_back_the_same(recorded):  # type: ignore[no-untyped-def]
    _, node_out, _, py_out, _ = recorded
    assert node_out["evaluated"] == py_out["evaluated"].decode() == EVALUATE_RESULT.decode()
    assert node_out["submitted"] == py_out["receipt"].payload.decode() == SUBMIT_RESULT.decode()
    assert py_out["receipt"].block_number == COMMIT_BLOCK
    assert node_out["event"] == {
        "name": py_out["event"].name,
        "block": py_out["event"].block_number,
        "txId": py_out["event"].tx_id,
    }
