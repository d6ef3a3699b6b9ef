from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from fabric_protos.msp import identities_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from chaincode_client.fabric.identity import (
    MAX_PEM_BYTES,
    P256_HALF_ORDER,
    P256_ORDER,
    IdentityError,
    Signer,
    load_msp,
    to_low_s,
)
from tests.fabric.pki import make_msp, pem

KEY = ec.generate_private_key(ec.SECP256R1())
SIGNER = Signer(KEY)


def test_loads_identity_and_signer_from_an_msp_folder(tmp_path: Path):
    identity, signer = load_msp(make_msp(tmp_path), "Org1MSP")
    creator = identities_pb2.SerializedIdentity.FromString(identity.serialized())
    assert creator.mspid == "Org1MSP"
    cert = x509.load_pem_x509_certificate(creator.id_bytes)
    cert.public_key().verify(signer.sign(b"hello"), b"hello", ec.ECDSA(hashes.SHA256()))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_every_signature_verifies_and_has_low_s(message: bytes):
    signature = SIGNER.sign(message)
    KEY.public_key().verify(signature, message, ec.ECDSA(hashes.SHA256()))
    assert decode_dss_signature(signature)[1] <= P256_HALF_ORDER


def test_high_s_is_flipped_to_the_equivalent_low_s():
    signature = KEY.sign(b"m", ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(signature)
    high = encode_dss_signature(r, s if s > P256_HALF_ORDER else P256_ORDER - s)
    low = to_low_s(high)
    assert decode_dss_signature(low) == (r, min(s, P256_ORDER - s))
    KEY.public_key().verify(low, b"m", ec.ECDSA(hashes.SHA256()))


def test_rejects_a_key_that_is_not_the_certificates(tmp_path: Path):
    msp = make_msp(tmp_path)
    (msp / "keystore" / "priv_sk").write_bytes(pem(ec.generate_private_key(ec.SECP256R1())))
    with pytest.raises(IdentityError, match="is not the private key of"):
        load_msp(msp, "Org1MSP")


def test_rejects_a_key_on_another_curve(tmp_path: Path):
    with pytest.raises(IdentityError, match="secp384r1"):
        load_msp(make_msp(tmp_path, key=ec.generate_private_key(ec.SECP384R1())), "Org1MSP")


def test_rejects_an_rsa_key(tmp_path: Path):
    msp = make_msp(tmp_path)
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (msp / "keystore" / "priv_sk").write_bytes(pem(rsa_key))
    with pytest.raises(IdentityError, match="expected an EC key"):
        load_msp(msp, "Org1MSP")


def test_rejects_two_certificates(tmp_path: Path):
    msp = make_msp(tmp_path)
    (msp / "signcerts" / "other.pem").write_bytes((msp / "signcerts" / "cert.pem").read_bytes())
    with pytest.raises(IdentityError, match="exactly one certificate, found 2"):
        load_msp(msp, "Org1MSP")


def test_rejects_a_missing_keystore(tmp_path: Path):
    msp = make_msp(tmp_path)
    (msp / "keystore" / "priv_sk").unlink()
    (msp / "keystore").rmdir()
    with pytest.raises(IdentityError, match="keystore is missing"):
        load_msp(msp, "Org1MSP")


def test_rejects_an_oversized_certificate_file(tmp_path: Path):
    msp = make_msp(tmp_path)
    (msp / "signcerts" / "cert.pem").write_bytes(b"A" * (MAX_PEM_BYTES + 1))
    with pytest.raises(IdentityError, match="not a PEM file"):
        load_msp(msp, "Org1MSP")


def test_rejects_garbage_in_place_of_the_certificate(tmp_path: Path):
    msp = make_msp(tmp_path)
    (msp / "signcerts" / "cert.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\nzz\n")
    with pytest.raises(IdentityError, match=r"not a PEM X\.509 certificate"):
        load_msp(msp, "Org1MSP")


@pytest.mark.parametrize("msp_id", ["", "x" * 129, "Org\n1"])
def test_rejects_a_bad_msp_id(tmp_path: Path, msp_id: str):
    with pytest.raises(IdentityError, match="MSP id"):
        load_msp(make_msp(tmp_path), msp_id)
