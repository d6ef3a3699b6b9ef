"""Enrolment on arbitrary bytes: reasons, never exceptions."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attest import tpm_constants as C
from attest.enrol import check_ek, start_enrolment
from tests.attest import builders as B

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


ROOT = B.self_signed("fuzz root")
ROOT_DER = ROOT.public_bytes(serialization.Encoding.DER)
EK_LIKE = B.ecc_public(
    ec.generate_private_key(ec.SECP256R1()).public_key(),
    C.ATTR_RESTRICTED | C.ATTR_DECRYPT | C.ATTR_FIXED_TPM | C.ATTR_FIXED_PARENT,
    scheme=C.ALG_NULL,
)


@FUZZ
@given(
    ek=st.one_of(st.just(EK_LIKE), st.binary(max_size=200)),
    cert=st.one_of(st.none(), st.just(ROOT_DER), st.binary(max_size=400)),
    ak=st.binary(max_size=200),
)
def test_enrolment_on_arbitrary_bytes_gives_reasons(ek, cert, ak) -> None:
    challenge, result = start_enrolment(ek, cert, ak, [ROOT])
    assert challenge is None
    assert result.reasons
    assert all(r.code for r in result.reasons)


@FUZZ
@given(cert=st.binary(max_size=600).map(lambda b: ROOT_DER[: len(ROOT_DER) // 2] + b))
def test_truncated_or_spliced_certificates_are_malformed(cert) -> None:
    _, reasons = check_ek(EK_LIKE, cert, [ROOT])
    assert reasons


def test_ek_without_aes_symmetric_is_not_an_ek() -> None:
    """A restricted decrypt key without the storage symmetric cannot receive a credential."""
    _, reasons = check_ek(EK_LIKE, ROOT_DER, [ROOT])
    assert "ek_not_endorsement_key" in [r.code for r in reasons]
