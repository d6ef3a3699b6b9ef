"""An organisation's registrar against real swtpm TPMs and real keys: the service
(`python -m attest registrar serve`) runs as its own process; a node's AK is certified only
after an EK chain to the registrar's roots and a correct ActivateCredential answer; the
statement is signed with the registrar's key, which verifies it and nothing else."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from tpm2_pytss import TSS2_Exception

from attest.agent import Agent
from attest.public import parse_public
from attest.registrar import (
    ChallengeRequest,
    Registrar,
    RegistrarError,
    load_registrar_key,
    parse_activate_request,
    parse_challenge_request,
    registrar_key_b64,
    signed_by,
)

STARTUP_TIMEOUT_S = 30
REPO = Path(__file__).resolve().parents[2]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def challenge_body(agent: Agent, node_id: str = "n1") -> tuple[dict, object]:
    request = agent.enrol()
    return {
        "node_id": node_id,
        "ek_public": b64(request.ek_public),
        "ek_certificate": b64(request.ek_certificate),
        "ak_public": b64(request.ak.public),
    }, request.ak


@pytest.fixture
def service(tmp_path: Path, node) -> Iterator[tuple[str, str]]:
    """(base URL, public key) of a registrar process for Org1MSP trusting the node's CA."""
    roots = tmp_path / "ek-roots"
    roots.mkdir()
    (roots / "root.pem").write_bytes(node.ca.root_cert_file.read_bytes())
    (roots / "issuer.pem").write_bytes(node.ca.issuer_cert_file.read_bytes())
    key = tmp_path / "registrar.pem"
    python = [sys.executable, "-m", "attest", "registrar"]
    subprocess.run(
        [*python, "keygen", "--out", str(key)], check=True, cwd=REPO, capture_output=True
    )
    assert key.stat().st_mode & 0o777 == 0o600
    process = subprocess.Popen(
        [*python, "serve", "--org", "Org1MSP", "--key", str(key), "--ek-roots", str(roots)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()  # type: ignore[union-attr]
        assert line, process.stderr.read()  # type: ignore[union-attr]
        started = json.loads(line)
        assert started["org"] == "Org1MSP"
        yield started["listening"], started["public_key"]
    finally:
        process.terminate()
        process.wait(timeout=STARTUP_TIMEOUT_S)


def post(url: str, body: object) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=STARTUP_TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.swtpm
def test_the_service_certifies_an_ak_after_its_own_activation_round(service, node) -> None:
    url, public_key = service
    with Agent(node.tcti) as agent:
        body, ak = challenge_body(agent)
        status, sent = post(url + "/challenge", body)
        assert status == 200, sent
        answer = agent.activate(
            ak, base64.b64decode(sent["credential_blob"]), base64.b64decode(sent["secret"])
        )
        ek_name = parse_public(agent.ek_public()).name().hex()
    status, signed = post(
        url + "/activate", {"challenge_id": sent["challenge_id"], "answer": b64(answer)}
    )
    assert status == 200, signed
    statement = signed["ak_certificate"]
    assert statement["org"] == signed["org"] == "Org1MSP"
    assert statement["node_id"] == "n1"
    assert statement["ak_name"] == parse_public(ak.public).name().hex()
    assert statement["ek_name"] == ek_name
    key = load_registrar_key(public_key)
    signature = base64.b64decode(signed["signature"])
    assert signed_by(key, statement, signature)
    assert not signed_by(key, {**statement, "node_id": "n2"}, signature)
    # the challenge is spent: the same answer again gets nothing
    status, again = post(
        url + "/activate", {"challenge_id": sent["challenge_id"], "answer": b64(answer)}
    )
    assert (status, again["error"]["code"]) == (400, "unknown_challenge")


@pytest.mark.swtpm
def test_the_service_refuses_a_wrong_answer_an_untrusted_ek_and_bad_json(
    service, node, other_node
) -> None:
    url, _ = service
    with Agent(node.tcti) as agent:
        body, _ak = challenge_body(agent)
    status, sent = post(url + "/challenge", body)
    assert status == 200
    status, refused = post(
        url + "/activate", {"challenge_id": sent["challenge_id"], "answer": b64(os.urandom(32))}
    )
    assert (status, refused["error"]["code"], refused["error"]["field"]) == (
        400,
        "credential_mismatch",
        "answer",
    )
    with Agent(other_node.tcti) as agent:  # an EK from a CA this registrar does not trust
        foreign, _ = challenge_body(agent)
    status, refused = post(url + "/challenge", foreign)
    assert (status, refused["error"]["code"]) == (400, "ek_cert_untrusted")
    status, refused = post(url + "/challenge", {**body, "ak_public": "not base64!"})
    assert refused["error"] == {
        "code": "bad_request",
        "field": "ak_public",
        "detail": "not base64: 'not base64!'",
    }
    status, refused = post(url + "/challenge", [1, 2])
    assert (status, refused["error"]["field"]) == (400, "request")


def _registrar(node) -> Registrar:
    key = ec.generate_private_key(ec.SECP256R1())
    return Registrar("Org2MSP", key, [node.ca.root_certificate()], [node.ca.issuer_certificate()])


@pytest.mark.swtpm
def test_an_ak_of_another_tpm_cannot_be_certified_with_this_ek(node, other_node) -> None:
    """An AK made in another TPM, presented with a trusted EK: that TPM cannot unwrap the
    credential (it lacks the EK's private key), and a guessed answer is refused."""
    registrar = _registrar(node)
    with Agent(node.tcti) as agent:
        mine = agent.enrol()
    with Agent(other_node.tcti) as other:
        theirs = other.create_ak()
        request = ChallengeRequest("n1", mine.ek_public, mine.ek_certificate, (), theirs.public)
        sent = registrar.challenge(request)
        blob, secret = (base64.b64decode(sent[k]) for k in ("credential_blob", "secret"))
        with pytest.raises(TSS2_Exception):
            other.activate(theirs, blob, secret)
    with pytest.raises(RegistrarError, match=r"\[registrar\.credential_mismatch\] answer: "):
        registrar.activate(sent["challenge_id"], os.urandom(32))


def test_registrar_keys_are_p256_subject_public_keys() -> None:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    assert load_registrar_key(registrar_key_b64(key)).public_numbers() == key.public_numbers()
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    for bad, code in (
        (registrar_key_b64(p384), "key_not_p256"),
        (b64(rsa_key.public_bytes(*_spki())), "key_not_p256"),
        ("MFkw", "key_malformed"),
        ("&&&", "key_malformed"),
        (17, "key_malformed"),
        ("", "key_malformed"),
    ):
        with pytest.raises(RegistrarError, match=rf"\[registrar\.{code}\]"):
            load_registrar_key(bad)


def _spki():
    from cryptography.hazmat.primitives import serialization

    return serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    [
        "node_id",
        "ek_public",
        "ek_certificate",
        "ek_intermediates",
        "ak_public",
        "challenge_id",
        "answer",
    ]
)
VALID = {
    "node_id": "n1",
    "ek_public": b64(b"\x01" * 60),
    "ek_certificate": b64(b"\x30" * 40),
    "ak_public": b64(b"\x02" * 60),
}


@settings(max_examples=300, deadline=None)
@given(
    doc=JSON | st.dictionaries(FIELDS, JSON, max_size=7),
    edits=st.dictionaries(FIELDS, JSON, max_size=2),
)
def test_request_parsers_refuse_anything_malformed_with_a_field(doc, edits) -> None:
    for candidate in (doc, {**VALID, **edits}):
        for parse in (parse_challenge_request, parse_activate_request):
            try:
                parse(candidate)
            except RegistrarError as exc:
                assert exc.code == "bad_request"
                assert exc.field and str(exc).startswith(f"[registrar.bad_request] {exc.field}: ")


def test_a_well_formed_challenge_request_parses_to_its_bytes() -> None:
    parsed = parse_challenge_request({**VALID, "ek_intermediates": [b64(b"\x30\x01")]})
    assert parsed == ChallengeRequest(
        "n1", b"\x01" * 60, b"\x30" * 40, (b"\x30\x01",), b"\x02" * 60
    )
    cid = "ab" * 16
    assert parse_activate_request({"challenge_id": cid, "answer": b64(b"x" * 32)}) == (
        cid,
        b"x" * 32,
    )
