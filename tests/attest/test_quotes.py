"""Genuine quotes from a real swtpm verify; forged or broken ones fail with the right code."""

from __future__ import annotations

import dataclasses
import os

import pytest
from cryptography.hazmat.primitives import serialization
from tpm2_pytss import TPM2B_PUBLIC

from attest import tpm_constants as C
from attest.agent import AK_ECC, AK_RSA, AK_RSA_PSS, Agent, AkKey, QuoteEvidence
from attest.public import parse_public
from attest.structs import parse_attest
from attest.verifier import ClockInfo, PcrPolicy, verify_quote
from tests.attest import builders as B


@pytest.fixture(scope="session")
def ecc_ak(node) -> AkKey:
    with Agent(node.tcti) as agent:
        return agent.create_ak(AK_ECC)


@pytest.fixture(scope="session")
def rsa_ak(node) -> AkKey:
    with Agent(node.tcti) as agent:
        return agent.create_ak(AK_RSA)


@pytest.fixture(scope="session")
def rsa_pss_ak(node) -> AkKey:
    with Agent(node.tcti) as agent:
        return agent.create_ak(AK_RSA_PSS)


@pytest.fixture(scope="session")
def other_ak(other_node) -> AkKey:
    with Agent(other_node.tcti) as agent:
        return agent.create_ak(AK_ECC)


def quote(node, ak: AkKey, nonce: bytes, selection: str = "sha256:0,2,7") -> QuoteEvidence:
    with Agent(node.tcti) as agent:
        return agent.quote(ak, nonce, selection)


def verify(ak: AkKey | bytes, ev: QuoteEvidence, nonce: bytes, **kw):
    ak_public = ak.public if isinstance(ak, AkKey) else ak
    return verify_quote(ak_public, ev.quote, ev.signature, ev.pcr_values, nonce, **kw)


def golden(ev: QuoteEvidence) -> PcrPolicy:
    return PcrPolicy.from_json(
        {"pcrs": {"sha256": {str(p): v.hex() for p, v in ev.pcr_values["sha256"].items()}}}
    )


def errors(verdict) -> list[str]:
    return verdict.codes()


# -- genuine ------------------------------------------------------------------------------
@pytest.mark.swtpm
@pytest.mark.parametrize("ak_name", ["ecc_ak", "rsa_ak", "rsa_pss_ak"])
def test_genuine_quote_verifies(request, node, ak_name: str, nonce: bytes) -> None:
    ak = request.getfixturevalue(ak_name)
    ev = quote(node, ak, nonce)
    verdict = verify(ak, ev, nonce, policy=golden(ev))
    assert verdict.valid, verdict.reasons
    assert verdict.reasons == []
    assert verdict.ak_name == parse_public(ak.public).name()
    assert verdict.clock is not None and verdict.clock.safe
    assert verdict.to_dict()["valid"] is True


@pytest.mark.swtpm
def test_default_policy_is_stated_in_the_verdict(node, ecc_ak, nonce) -> None:
    verdict = verify(ecc_ak, quote(node, ecc_ak, nonce), nonce)
    assert verdict.valid
    assert verdict.codes(None) == ["policy_default"]


@pytest.mark.swtpm
def test_consecutive_quotes_pass_the_clock_check(node, ecc_ak) -> None:
    n1, n2 = os.urandom(32), os.urandom(32)
    first = verify(ecc_ak, quote(node, ecc_ak, n1), n1)
    second = verify(ecc_ak, quote(node, ecc_ak, n2), n2, previous_clock=first.clock)
    assert second.valid, second.reasons
    assert second.clock.clock >= first.clock.clock


@pytest.mark.swtpm
def test_tpm_restart_increments_reset_count_and_is_accepted(other_node, other_ak) -> None:
    n1, n2 = os.urandom(32), os.urandom(32)
    before = verify(other_ak, quote(other_node, other_ak, n1), n1)
    other_node.tpm.stop()
    other_node.tpm.start()
    after = verify(other_ak, quote(other_node, other_ak, n2), n2, previous_clock=before.clock)
    assert after.valid, after.reasons
    assert after.clock.reset_count > before.clock.reset_count


@pytest.mark.swtpm
def test_pem_ak_verifies_but_says_it_is_weaker(node, ecc_ak, nonce) -> None:
    pem = (
        parse_public(ecc_ak.public)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    verdict = verify(pem, quote(node, ecc_ak, nonce), nonce)
    assert verdict.valid
    assert "ak_attributes_unchecked" in verdict.codes("warning")
    assert verdict.ak_attributes_checked is False


# -- forgeries and breakage: each with the reason it must be rejected for -------------------
def flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


@pytest.fixture(scope="module")
def genuine(node, ecc_ak):
    nonce = os.urandom(32)
    return nonce, quote(node, ecc_ak, nonce)


def case(ev: QuoteEvidence, **changes) -> QuoteEvidence:
    return dataclasses.replace(ev, **changes)


CORPUS = {
    # name: (function(ev, nonce, aks) -> (ak_public, evidence, nonce, kwargs), expected code)
    "flipped_byte_in_quote_clock": (
        lambda ev, n, k: (k["ecc"], case(ev, quote=flip(ev.quote, 60)), n, {}),
        "signature_invalid",
    ),
    "flipped_byte_in_signature": (
        lambda ev, n, k: (k["ecc"], case(ev, signature=flip(ev.signature, 10)), n, {}),
        "signature_invalid",
    ),
    "quote_checked_against_other_ak_same_tpm": (
        lambda ev, n, k: (k["ecc2"], ev, n, {}),
        "signature_invalid",
    ),
    "quote_checked_against_ak_of_other_tpm": (
        lambda ev, n, k: (k["other"], ev, n, {}),
        "signature_invalid",
    ),
    "rsa_ak_given_ecdsa_signature": (
        lambda ev, n, k: (k["rsa"], ev, n, {}),
        "signature_scheme_mismatch",
    ),
    "hash_alg_field_changed": (
        lambda ev, n, k: (
            k["ecc"],
            case(ev, signature=ev.signature[:2] + b"\x00\x0c" + ev.signature[4:]),
            n,
            {},
        ),
        "hash_alg_mismatch",
    ),
    "wrong_nonce": (lambda ev, n, k: (k["ecc"], ev, os.urandom(32), {}), "nonce_mismatch"),
    "empty_nonce": (lambda ev, n, k: (k["ecc"], ev, b"", {}), "nonce_invalid"),
    "tampered_pcr_value": (
        lambda ev, n, k: (
            k["ecc"],
            case(ev, pcr_values={"sha256": {**ev.pcr_values["sha256"], 7: b"\x01" * 32}}),
            n,
            {},
        ),
        "pcr_digest_mismatch",
    ),
    "swapped_pcr_values": (
        lambda ev, n, k: (
            k["ecc"],
            case(
                ev,
                pcr_values={
                    "sha256": {
                        0: b"\x02" * 32,
                        2: ev.pcr_values["sha256"][0],
                        7: ev.pcr_values["sha256"][7],
                    }
                },
            ),
            n,
            {},
        ),
        "pcr_digest_mismatch",
    ),
    "missing_pcr_value": (
        lambda ev, n, k: (k["ecc"], case(ev, pcr_values={"sha256": {0: bytes(32)}}), n, {}),
        "pcr_values_incomplete",
    ),
    "selection_differs_from_policy": (
        lambda ev, n, k: (
            k["ecc"],
            ev,
            n,
            {
                "policy": PcrPolicy.from_json(
                    {"pcrs": {"sha256": {"0": None, "1": None, "7": None}}}
                )
            },
        ),
        "pcr_selection_mismatch",
    ),
    "golden_value_mismatch": (
        lambda ev, n, k: (
            k["ecc"],
            ev,
            n,
            {
                "policy": PcrPolicy.from_json(
                    {"pcrs": {"sha256": {"0": "ee" * 32, "2": None, "7": None}}}
                )
            },
        ),
        "pcr_value_mismatch",
    ),
    "truncated_quote": (
        lambda ev, n, k: (k["ecc"], case(ev, quote=ev.quote[:-7]), n, {}),
        "quote_malformed",
    ),
    "truncated_signature": (
        lambda ev, n, k: (k["ecc"], case(ev, signature=ev.signature[:-1]), n, {}),
        "signature_malformed",
    ),
    "truncated_ak": (lambda ev, n, k: (k["ecc"][:-3], ev, n, {}), "ak_malformed"),
    "oversized_tpm2b_in_quote": (
        lambda ev, n, k: (
            k["ecc"],
            case(ev, quote=ev.quote[:6] + b"\xff\xff" + ev.quote[8:]),
            n,
            {},
        ),
        "quote_malformed",
    ),
    "oversized_tpm2b_in_signature": (
        lambda ev, n, k: (
            k["ecc"],
            case(ev, signature=ev.signature[:4] + b"\x7f\xff" + ev.signature[6:]),
            n,
            {},
        ),
        "signature_malformed",
    ),
    "garbage_quote": (
        lambda ev, n, k: (k["ecc"], case(ev, quote=os.urandom(120)), n, {}),
        "quote_malformed",
    ),
    "garbage_signature": (
        lambda ev, n, k: (k["ecc"], case(ev, signature=b"\x00\x18" + os.urandom(30)), n, {}),
        "signature_malformed",
    ),
    "clock_went_backwards": (
        lambda ev, n, k: (k["ecc"], ev, n, {"previous_clock": _shift(ev, clock=10**12)}),
        "clock_went_backwards",
    ),
    "reset_count_decreased": (
        lambda ev, n, k: (k["ecc"], ev, n, {"previous_clock": _shift(ev, reset_count=10**6)}),
        "reset_count_decreased",
    ),
    "restart_count_decreased": (
        lambda ev, n, k: (k["ecc"], ev, n, {"previous_clock": _shift(ev, restart_count=10**6)}),
        "restart_count_decreased",
    ),
}


def _shift(ev: QuoteEvidence, **kw) -> ClockInfo:
    att = parse_attest(ev.quote)
    base = ClockInfo(att.clock, att.reset_count, att.restart_count, att.safe)
    return dataclasses.replace(base, **kw)


@pytest.mark.swtpm
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_broken_evidence_is_rejected_with_its_reason(
    name, genuine, ecc_ak, rsa_ak, other_ak, node
) -> None:
    nonce, ev = genuine
    aks = {
        "ecc": ecc_ak.public,
        "rsa": rsa_ak.public,
        "other": other_ak.public,
        "ecc2": _second_ak(node).public,
    }
    build, expected = CORPUS[name]
    ak_public, evidence, use_nonce, kwargs = build(ev, nonce, aks)
    verdict = verify_quote(
        ak_public, evidence.quote, evidence.signature, evidence.pcr_values, use_nonce, **kwargs
    )
    assert not verdict.valid
    assert errors(verdict)[0] == expected, verdict.reasons


_SECOND: dict[str, AkKey] = {}


def _second_ak(node) -> AkKey:
    if "ak" not in _SECOND:
        with Agent(node.tcti) as agent:
            _SECOND["ak"] = agent.create_ak(AK_ECC)
    return _SECOND["ak"]


@pytest.mark.swtpm
def test_replayed_quote_fails_a_new_challenge(node, ecc_ak) -> None:
    """An old quote (for an earlier nonce) cannot answer a new challenge."""
    old_nonce, new_nonce = os.urandom(32), os.urandom(32)
    old = quote(node, ecc_ak, old_nonce)
    assert verify(ecc_ak, old, old_nonce).valid
    assert errors(verify(ecc_ak, old, new_nonce)) == ["nonce_mismatch"]


@pytest.mark.swtpm
def test_quote_made_with_empty_nonce_is_rejected(node, ecc_ak, nonce) -> None:
    ev = quote(node, ecc_ak, b"")
    assert errors(verify(ecc_ak, ev, nonce)) == ["nonce_mismatch"]


@pytest.mark.swtpm
def test_quote_over_other_pcrs_fails_the_default_selection(node, ecc_ak, nonce) -> None:
    ev = quote(node, ecc_ak, nonce, "sha256:0,1,7")
    assert errors(verify(ecc_ak, ev, nonce)) == ["pcr_selection_mismatch"]


@pytest.mark.swtpm
def test_pcr7_change_breaks_the_golden_policy(other_node, other_ak) -> None:
    """The demo's red node: PCR 7 extended after the policy's golden values were taken."""
    n1, n2 = os.urandom(32), os.urandom(32)
    policy = golden(quote(other_node, other_ak, n1))
    with Agent(other_node.tcti) as agent:
        agent.extend_pcr(7, b"secure boot disabled")
    verdict = verify(other_ak, quote(other_node, other_ak, n2), n2, policy=policy)
    assert errors(verdict) == ["pcr_value_mismatch"]
    assert "PCR 7" in verdict.reasons[0].detail


# -- the forgeries tpm2_checkquote 5.4 would accept (CVE-2024-29038/29039) -----------------
UNRESTRICTED_SIGNING = (
    C.ATTR_SIGN
    | C.ATTR_FIXED_TPM
    | C.ATTR_FIXED_PARENT
    | C.ATTR_SENSITIVE_DATA_ORIGIN
    | C.ATTR_USER_WITH_AUTH
)


@pytest.fixture(scope="module")
def forger(node):
    """A non-restricted ECDSA key inside the real TPM: it signs whatever digest it is given."""
    from tpm2_pytss import ESYS_TR, TPM2_ALG, TPM2_RH, TPM2_ST, TPMT_SIG_SCHEME, TPMT_TK_HASHCHECK

    agent = Agent(node.tcti)
    template = TPM2B_PUBLIC.parse("ecc256:ecdsa-sha256:null", objectAttributes=UNRESTRICTED_SIGNING)
    with agent.ek() as ek, agent._ek_session() as session:
        private, public = agent.esapi.create(ek, None, template, session1=session)[:2]
    key = AkKey(public.marshal(), private.marshal(), b"")

    def sign(message: bytes) -> bytes:
        digest = C.hash_bytes(C.ALG_SHA256, message)
        ticket = TPMT_TK_HASHCHECK(tag=TPM2_ST.HASHCHECK, hierarchy=TPM2_RH.NULL)
        scheme = TPMT_SIG_SCHEME(scheme=TPM2_ALG.NULL)
        with agent.ek() as ek, agent._loaded_ak(key, ek) as handle:
            return agent.esapi.sign(
                handle, digest, scheme, ticket, session1=ESYS_TR.PASSWORD
            ).marshal()

    yield key, sign
    agent.close()


def _forged(nonce: bytes, values: dict[int, bytes], **kw) -> bytes:
    return B.attest(nonce, B.SHA256_027, B.pcr_digest(values), **kw)


@pytest.mark.swtpm
def test_unrestricted_key_forgery_is_rejected(forger, nonce) -> None:
    key, sign = forger
    values = {0: bytes(32), 2: bytes(32), 7: bytes(32)}
    message = _forged(nonce, values)
    verdict = verify_quote(key.public, message, sign(message), {"sha256": values}, nonce)
    # The signature is cryptographically valid (what tpm2_checkquote 5.4 checks) ...
    assert "signature_invalid" not in errors(verdict)
    # ... but the key could sign anything, so the verdict refuses it.
    assert errors(verdict) == ["ak_not_restricted_signing_key"]


@pytest.mark.swtpm
def test_wrong_magic_is_rejected(forger, nonce) -> None:
    key, sign = forger
    values = {0: bytes(32), 2: bytes(32), 7: bytes(32)}
    message = _forged(nonce, values, magic=0xDEADBEEF)
    verdict = verify_quote(key.public, message, sign(message), {"sha256": values}, nonce)
    assert errors(verdict) == ["ak_not_restricted_signing_key", "magic_invalid"]


@pytest.mark.swtpm
def test_attestation_of_another_type_is_not_a_quote(forger, nonce) -> None:
    key, sign = forger
    message = _forged(nonce, {0: bytes(32)}, st=0x8017)  # TPM_ST_ATTEST_CERTIFY
    verdict = verify_quote(key.public, message, sign(message), {}, nonce)
    assert "type_not_quote" in errors(verdict)


@pytest.mark.swtpm
def test_forgery_with_pem_key_is_only_as_strong_as_the_warning_says(forger, nonce) -> None:
    """A bare public key hides the attributes; the verdict must say the check did not run."""
    key, sign = forger
    values = {0: bytes(32), 2: bytes(32), 7: bytes(32)}
    message = _forged(nonce, values)
    pem = (
        parse_public(key.public)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    verdict = verify_quote(pem, message, sign(message), {"sha256": values}, nonce)
    assert "ak_attributes_unchecked" in verdict.codes("warning")
    assert verdict.to_dict()["ak_attributes_checked"] is False


@pytest.mark.swtpm
def test_quote_over_more_pcrs_than_the_policy_names_is_valid(node, ecc_ak, nonce) -> None:
    """sha256:0,2,7 against golden values for 0 and 7: 2 is reported, not refused."""
    ev = quote(node, ecc_ak, nonce)
    values = ev.pcr_values["sha256"]
    policy = PcrPolicy.from_json({"pcrs": {"sha256": {"0": values[0].hex(), "7": values[7].hex()}}})
    verdict = verify(ecc_ak, ev, nonce, policy=policy)
    assert verdict.valid, verdict.reasons
    assert verdict.codes(None) == ["pcr_selection_extra"]
    assert "sha256:2" in verdict.reasons[0].detail
    assert set(verdict.pcr_values["sha256"]) == {0, 2, 7}


@pytest.mark.swtpm
def test_quote_over_pcrs_0_to_15_meets_the_default_selection(node, ecc_ak, nonce) -> None:
    ev = quote(node, ecc_ak, nonce, "sha256:" + ",".join(map(str, range(16))))
    verdict = verify(ecc_ak, ev, nonce)
    assert verdict.valid, verdict.reasons
    assert verdict.codes(None) == ["policy_default", "pcr_selection_extra"]


@pytest.mark.swtpm
def test_superset_quote_still_fails_a_golden_value_it_covers(node, ecc_ak, nonce) -> None:
    ev = quote(node, ecc_ak, nonce, "sha256:0,1,2,7")
    policy = PcrPolicy.from_json({"pcrs": {"sha256": {"0": "ee" * 32, "7": None}}})
    verdict = verify(ecc_ak, ev, nonce, policy=policy)
    assert errors(verdict) == ["pcr_value_mismatch"]


@pytest.mark.swtpm
def test_quote_in_another_bank_does_not_cover_the_policy(node, ecc_ak, nonce) -> None:
    """sha256 PCRs 0, 2, 7 do not stand in for the sha384 PCR 0 a policy names."""
    ev = quote(node, ecc_ak, nonce)
    policy = PcrPolicy.from_json({"pcrs": {"sha384": {"0": None}}})
    verdict = verify(ecc_ak, ev, nonce, policy=policy)
    assert errors(verdict) == ["pcr_selection_mismatch"]
    assert "sha384:0 missing" in str(verdict.reasons)
