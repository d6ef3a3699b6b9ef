"""Enrolment against real swtpm EKs certified by swtpm_localca CAs made under temp dirs."""

from __future__ import annotations

import datetime as dt
import os

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from tpm2_pytss import TSS2_Exception

from attest import tpm_constants as C
from attest.agent import AK_ECC, AK_RSA, Agent
from attest.credential import kdfa, make_credential
from attest.enrol import check_ek, finish_enrolment, start_enrolment
from attest.public import parse_public
from tests.attest import builders as B


def trust(ca):
    return [ca.root_certificate()], [ca.issuer_certificate()]


@pytest.mark.swtpm
@pytest.mark.parametrize("alg", [AK_ECC, AK_RSA])
def test_good_ek_cert_enrols_and_activation_proves_same_tpm(node, alg) -> None:
    roots, inter = trust(node.ca)
    with Agent(node.tcti) as agent:
        req = agent.enrol(alg)
        assert req.ek_certificate is not None
        challenge, result = start_enrolment(
            req.ek_public, req.ek_certificate, req.ak.public, roots, inter
        )
        assert result.ok, result.reasons
        answer = agent.activate(req.ak, challenge.credential_blob, challenge.secret)
    final = finish_enrolment(challenge, answer)
    assert final.ok
    assert final.ak_name == parse_public(req.ak.public).name()


@pytest.mark.swtpm
def test_ek_cert_from_unknown_ca_is_rejected(node, other_node) -> None:
    roots, inter = trust(node.ca)  # the verifier trusts only the node's CA
    with Agent(other_node.tcti) as agent:
        req = agent.enrol()
    challenge, result = start_enrolment(
        req.ek_public, req.ek_certificate, req.ak.public, roots, inter
    )
    assert challenge is None
    assert [r.code for r in result.reasons] == ["ek_cert_untrusted"]


@pytest.mark.swtpm
def test_ek_cert_of_another_tpm_does_not_vouch_for_this_ek(node, other_node) -> None:
    roots = [node.ca.root_certificate(), other_node.ca.root_certificate()]
    inter = [node.ca.issuer_certificate(), other_node.ca.issuer_certificate()]
    with Agent(other_node.tcti) as agent:
        foreign_cert = agent.ek_certificate()
    with Agent(node.tcti) as agent:
        req = agent.enrol()
    _, result = start_enrolment(req.ek_public, foreign_cert, req.ak.public, roots, inter)
    assert [r.code for r in result.reasons] == ["ek_cert_key_mismatch"]


@pytest.mark.swtpm
def test_ek_cert_outside_validity_is_rejected(node) -> None:
    roots, inter = trust(node.ca)
    with Agent(node.tcti) as agent:
        ek_public, cert = agent.ek_public(), agent.ek_certificate()
    before_issue = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)  # EK certs often never expire
    _, reasons = check_ek(ek_public, cert, roots, inter, now=before_issue)
    assert [r.code for r in reasons] == ["ek_cert_expired"]


@pytest.mark.swtpm
def test_missing_or_garbage_ek_cert_is_rejected(node) -> None:
    roots, inter = trust(node.ca)
    with Agent(node.tcti) as agent:
        ek_public = agent.ek_public()
    assert [r.code for r in check_ek(ek_public, None, roots, inter)[1]] == ["ek_cert_missing"]
    assert [r.code for r in check_ek(ek_public, os.urandom(300), roots, inter)[1]] == [
        "ek_cert_malformed"
    ]
    assert [r.code for r in check_ek(ek_public[:-4], None, roots, inter)[1]] == [
        "ek_public_malformed"
    ]


@pytest.mark.swtpm
def test_credential_for_a_different_ak_fails_activation(node) -> None:
    """A challenge bound to AK 2's Name cannot be activated with AK 1: the TPM's integrity
    check over the Name fails, so a node cannot pass off a key it does not hold."""
    roots, inter = trust(node.ca)
    with Agent(node.tcti) as agent:
        req = agent.enrol()
        other_ak = agent.create_ak()
        challenge, result = start_enrolment(
            req.ek_public, req.ek_certificate, other_ak.public, roots, inter
        )
        assert result.ok
        with pytest.raises(TSS2_Exception):
            agent.activate(req.ak, challenge.credential_blob, challenge.secret)
        # And a wrong answer (e.g. a guess) is refused by the verifier.
    assert [r.code for r in finish_enrolment(challenge, os.urandom(32)).reasons] == [
        "credential_mismatch"
    ]


@pytest.mark.swtpm
def test_credential_for_another_tpms_ek_fails_activation(node, other_node) -> None:
    with Agent(other_node.tcti) as agent:
        other_ek = parse_public(agent.ek_public())
    with Agent(node.tcti) as agent:
        ak = agent.create_ak()
        blob, secret = make_credential(other_ek, parse_public(ak.public).name(), os.urandom(32))
        with pytest.raises(TSS2_Exception):
            agent.activate(ak, blob, secret)


@pytest.mark.swtpm
def test_ecc_ek_from_standard_template_activates(node) -> None:
    """The ECC path of MakeCredential (ECDH + KDFe) against the TCG EK-ECC256 template."""
    with Agent(node.tcti, ek_type="ecc") as agent:
        ek = parse_public(agent.ek_public())
        assert ek.curve == C.ECC_NIST_P256
        ak = agent.create_ak()
        secret_value = os.urandom(32)
        blob, secret = make_credential(ek, parse_public(ak.public).name(), secret_value)
        assert agent.activate(ak, blob, secret) == secret_value


@pytest.mark.swtpm
def test_unrestricted_ak_is_refused_at_enrolment(node) -> None:
    roots, inter = trust(node.ca)
    with Agent(node.tcti) as agent:
        req = agent.enrol()
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    fake_ak = B.ecc_public(key, C.ATTR_SIGN | C.ATTR_FIXED_TPM | C.ATTR_FIXED_PARENT)
    challenge, result = start_enrolment(req.ek_public, req.ek_certificate, fake_ak, roots, inter)
    assert challenge is None
    assert [r.code for r in result.reasons] == ["ak_not_restricted_signing_key"]


def test_kdfa_matches_tpm2_pytss() -> None:
    """Cross-check against an independent implementation (tpm2-pytss's KDFa)."""
    from tpm2_pytss.internal.crypto import _kdfa

    key, u, v = os.urandom(32), os.urandom(34), b""
    for bits in (128, 256, 520):
        assert kdfa(C.ALG_SHA256, key, b"STORAGE", u, v, bits) == _kdfa(
            C.ALG_SHA256, key, b"STORAGE", u, v, bits
        )
