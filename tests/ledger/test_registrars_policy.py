"""Registrar keys (governance kind "registrars"): each organisation's registrar key, EC P-256,
decided by one organisation's admin and approved by another's; never a key the deciding
admins sign with, one key per organisation, every deciding organisation named. On every
ledger backend; each refusal names its reason."""

from __future__ import annotations

import base64

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from attest.registrar import load_registrar_key, registrar_key_b64
from chaincode_client.interface import EndorsementError, LedgerClient
from tests.ledger.conftest import ORG1, ORG2, LedgerEnv
from tests.ledger.test_governance import admin, approve, get_policy, propose

KIND = "registrars"


def new_key() -> str:
    return registrar_key_b64(ec.generate_private_key(ec.SECP256R1()).public_key())


def key_of(client: LedgerClient) -> str:
    """The public key of a client's certificate, as a registrar key (embedded or Fabric)."""
    identity = getattr(client, "identity", None) or client._identity  # type: ignore[attr-defined]
    key = x509.load_pem_x509_certificate(identity.cert_pem).public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return registrar_key_b64(key)


def approve_registrars(env: LedgerEnv, keys: dict[str, str]) -> dict:
    proposal = propose(admin(env, ORG1), KIND, {"keys": keys}, key="default")
    return approve(admin(env, ORG2), proposal["proposal_id"])


def test_each_organisations_registrar_key_is_approved_by_the_other(ledger_env: LedgerEnv):
    keys = {ORG1: new_key(), ORG2: new_key()}
    record = approve_registrars(ledger_env, keys)
    assert record["document"] == {"keys": keys}
    assert get_policy(ledger_env.clients[ORG1], KIND, "default")["document"]["keys"] == keys
    assert load_registrar_key(record["document"]["keys"][ORG2])


def test_malformed_and_shared_registrar_keys_are_refused(ledger_env: LedgerEnv):
    org1 = admin(ledger_env, ORG1)
    p384 = registrar_key_b64(ec.generate_private_key(ec.SECP384R1()).public_key())  # type: ignore[arg-type]
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    rsa_b64 = base64.b64encode(rsa_key.public_bytes(*spki)).decode()
    for bad, reason in (
        (
            p384,
            r"\[governance\.registrar_key\] \[registrar\.key_not_p256\] document\.keys\.Org2MSP",
        ),
        (rsa_b64, r"\[governance\.registrar_key\] \[registrar\.key_not_p256\]"),
        ("bm90IGEga2V5", r"\[governance\.registrar_key\] \[registrar\.key_malformed\]"),
        ("***", r"\[governance\.registrar_key\] .*not base64"),
    ):
        with pytest.raises(EndorsementError, match=reason):
            propose(org1, KIND, {"keys": {ORG1: new_key(), ORG2: bad}}, key="default")
    shared = new_key()
    with pytest.raises(EndorsementError, match=r"\[governance\.registrar_key_shared\]"):
        propose(org1, KIND, {"keys": {ORG1: shared, ORG2: shared}}, key="default")
    with pytest.raises(EndorsementError, match=r"\[args\.invalid\] document: must be"):
        propose(org1, KIND, {"keys": {}}, key="default")


def test_an_admins_own_key_is_no_registrar_key(ledger_env: LedgerEnv):
    """The proposing or approving admin names its own identity's key as a registrar key."""
    org1, org2 = admin(ledger_env, ORG1), admin(ledger_env, ORG2)
    with pytest.raises(EndorsementError, match=r"\[governance\.registrar_is_identity\]"):
        propose(org1, KIND, {"keys": {ORG1: key_of(org1), ORG2: new_key()}}, key="default")
    proposal = propose(org1, KIND, {"keys": {ORG1: new_key(), ORG2: key_of(org2)}}, key="default")
    with pytest.raises(EndorsementError, match=r"\[governance\.registrar_is_identity\]"):
        approve(org2, proposal["proposal_id"])


def test_every_deciding_organisation_names_its_registrar(ledger_env: LedgerEnv):
    """A registrars document without the approving organisation's registrar would let the
    proposer's registrar alone certify nodes."""
    org1, org2 = admin(ledger_env, ORG1), admin(ledger_env, ORG2)
    with pytest.raises(EndorsementError, match=r"\[governance\.registrars_incomplete\] .*Org1MSP"):
        propose(org1, KIND, {"keys": {ORG2: new_key()}}, key="default")
    proposal = propose(org1, KIND, {"keys": {ORG1: new_key()}}, key="default")
    with pytest.raises(EndorsementError, match=r"\[governance\.registrars_incomplete\] .*Org2MSP"):
        approve(org2, proposal["proposal_id"])
