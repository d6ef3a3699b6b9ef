"""Certificates from untrusted bytes (ledger.audit.certs): whatever the bytes, a certificate whose
names read, or CertificateDefect naming the field; the embedded engine's MSP refuses such a
creator as it refuses any certificate its organisation did not issue."""

from __future__ import annotations

import base64
import re
from contextlib import suppress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.audit.certs import CertificateDefect, read_certificate
from ledger.audit.fabric_trust import PEM_BEGIN, PEM_END
from ledger.engine.msp import ChannelMsp, MspError
from tests.ledger.fabric_chain import Org


@pytest.fixture(scope="module")
def cas() -> dict[str, Org]:
    return {m: Org(m) for m in ("Org1MSP",)}


def der_to_pem(der: bytes) -> bytes:
    body = base64.encodebytes(der).decode().replace("\n", "")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([PEM_BEGIN, *lines, PEM_END, ""]).encode()


def peer_der(cas: dict[str, Org]) -> bytes:
    identity, _ = cas["Org1MSP"].member("peer")
    cert = x509.load_pem_x509_certificate(identity.cert_pem)
    return cert.public_bytes(serialization.Encoding.DER)


def test_names_a_certificate_of_an_unknown_x509_version(cas):
    der = peer_der(cas)
    at = der.index(b"\xa0\x03\x02\x01\x02")  # [0] EXPLICIT INTEGER 2 (v3)
    forged = der[: at + 4] + b"\x07" + der[at + 5 :]
    with pytest.raises(CertificateDefect, match=re.escape("not an X.509 v1 or v3 certificate")):
        read_certificate(der_to_pem(forged))


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    edits=st.lists(st.tuples(st.integers(0, 2**12), st.integers(0, 255)), min_size=1, max_size=4)
)
def test_a_mutated_certificate_raises_only_a_certificate_defect(cas, edits):
    der = bytearray(peer_der(cas))
    for position, value in edits:
        der[position % len(der)] = value
    with suppress(CertificateDefect):
        cert = read_certificate(der_to_pem(bytes(der)))
        assert cert.subject.rfc4514_string() and cert.issuer.rfc4514_string()


def test_the_embedded_msp_refuses_a_creator_whose_issuer_it_cannot_read(cas):
    der = peer_der(cas)
    issuer_cn = b"ca.Org1MSP"
    at = der.index(bytes([0x0C, len(issuer_cn)]) + issuer_cn)  # a UTF8String, first: the issuer
    forged = der_to_pem(der[:at] + bytes([76]) + der[at + 1 :])
    msp = ChannelMsp({"Org1MSP": cas["Org1MSP"].pem})
    with pytest.raises(
        MspError, match=re.escape("does not parse: issuer: an attribute value has ASN.1 tag 76")
    ):
        msp.public_key("Org1MSP", forged)


def test_names_a_bit_string_value_under_a_name_attribute(cas):
    der = peer_der(cas)
    issuer_cn = b"ca.Org1MSP"
    at = der.index(bytes([0x0C, len(issuer_cn)]) + issuer_cn)  # the issuer's CN, a UTF8String
    forged = der[:at] + bytes([0x03]) + der[at + 1 :]  # now a BIT STRING
    with pytest.raises(CertificateDefect, match="issuer: oid must be X500_UNIQUE_IDENTIFIER"):
        read_certificate(der_to_pem(forged))
