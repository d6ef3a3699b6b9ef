"""Property and fuzz tests: arbitrary bytes never raise anything but MalformedEvidence, and
mutated valid structures either parse or fail the same way."""

from __future__ import annotations

import contextlib

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attest import tpm_constants as C
from attest.errors import MalformedEvidence, PolicyError
from attest.pcrfile import parse_pcr_file
from attest.policy import PcrPolicy
from attest.public import parse_public
from attest.structs import (
    _parse_attest,
    _parse_signature,
    _well_formed_ecc_signature,
    _well_formed_quote,
    parse_attest,
    parse_pcr_selection,
    parse_signature,
)
from attest.verifier import ClockInfo, verify_quote
from tests.attest import builders as B

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEY = ec.generate_private_key(ec.SECP256R1())
AK = B.ecc_public(KEY.public_key(), C.AK_REQUIRED_ATTRS)
VALUES = {0: bytes(32), 2: bytes(32), 7: b"\x07" * 32}
NONCE = b"n" * 32
QUOTE = B.attest(NONCE, B.SHA256_027, B.pcr_digest(VALUES))
SIG = B.ecdsa_signature(KEY, QUOTE)
PARSERS = [parse_public, parse_attest, parse_signature, parse_pcr_selection, parse_pcr_file]


def _only_malformed(parser, data: bytes) -> None:
    try:
        parser(data)
    except MalformedEvidence as exc:
        assert exc.field and exc.offset >= 0


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@FUZZ
@given(data=st.binary(max_size=700))
def test_arbitrary_bytes_raise_only_malformed_evidence(parser, data: bytes) -> None:
    _only_malformed(parser, data)


def _mutations(valid: bytes):
    return st.one_of(
        st.integers(0, len(valid)).map(lambda n: valid[:n]),  # truncations
        st.tuples(st.integers(0, len(valid) - 1), st.integers(0, 255)).map(
            lambda t: valid[: t[0]] + bytes([t[1]]) + valid[t[0] + 1 :]
        ),
        st.binary(max_size=40).map(lambda extra: valid + extra),
        st.tuples(st.integers(0, len(valid) - 2), st.integers(0, 0xFFFF)).map(
            lambda t: valid[: t[0]] + t[1].to_bytes(2, "big") + valid[t[0] + 2 :]
        ),
    )


@pytest.mark.parametrize(
    "parser,valid",
    [(parse_public, AK), (parse_attest, QUOTE), (parse_signature, SIG)],
    ids=["public", "attest", "signature"],
)
@FUZZ
@given(data=st.data())
def test_mutated_structures_raise_only_malformed_evidence(parser, valid: bytes, data) -> None:
    _only_malformed(parser, data.draw(_mutations(valid)))


@FUZZ
@given(data=st.binary(max_size=700), sel_bytes=st.binary(max_size=40))
def test_pcr_file_with_any_selection_raises_only_malformed(data: bytes, sel_bytes: bytes) -> None:
    try:
        selection = parse_pcr_selection(sel_bytes)
    except MalformedEvidence:
        selection = B.SHA256_027
    _only_malformed(lambda d: parse_pcr_file(d, selection), data)


@FUZZ
@given(
    ak=st.one_of(st.just(AK), st.binary(max_size=200)),
    quote=st.one_of(st.just(QUOTE), _mutations(QUOTE), st.binary(max_size=300)),
    sig=st.one_of(st.just(SIG), _mutations(SIG), st.binary(max_size=100)),
    nonce=st.one_of(st.just(NONCE), st.binary(max_size=80)),
)
def test_verify_quote_never_raises(ak: bytes, quote: bytes, sig: bytes, nonce: bytes) -> None:
    verdict = verify_quote(ak, quote, sig, {"sha256": VALUES}, nonce)
    assert verdict.to_dict()["valid"] == verdict.valid
    if verdict.valid:
        assert (ak, quote, sig, nonce) == (AK, QUOTE, SIG, NONCE)


@FUZZ
@given(
    doc=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=70),
        lambda kids: st.lists(kids, max_size=4)
        | st.dictionaries(st.text(max_size=8), kids, max_size=4),
        max_leaves=12,
    )
)
def test_policy_from_json_raises_only_policy_error(doc) -> None:
    for candidate in (doc, {"pcrs": doc}, {"pcrs": {"sha256": doc}}):
        with contextlib.suppress(PolicyError):
            PcrPolicy.from_json(candidate)


@FUZZ
@given(
    doc=st.dictionaries(
        st.sampled_from(["clock", "reset_count", "restart_count", "safe"]),
        st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    )
)
def test_clock_info_from_dict_raises_only_value_error(doc) -> None:
    try:
        info = ClockInfo.from_dict(doc)
    except ValueError:
        return
    assert ClockInfo.from_dict(info.to_dict()) == info


def _outcome(parser, data: bytes):
    try:
        return parser(data)
    except MalformedEvidence as exc:
        return ("malformed", str(exc))


def _hot_and_checked_agree(hot, checked, data: bytes) -> None:
    """The hot path accepts only what the field-by-field parser accepts, with the same
    result; on everything else it gives way, and the public parser refuses as before."""
    fast = hot(data)
    slow = _outcome(checked, data)
    if fast is not None:
        assert fast == slow
    public = parse_attest if checked is _parse_attest else parse_signature
    assert _outcome(public, data) == slow


FAST_PATHS = [
    (_well_formed_quote, _parse_attest, QUOTE),
    (_well_formed_quote, _parse_attest, len(QUOTE).to_bytes(2, "big") + QUOTE),  # TPM2B_ATTEST
    (_well_formed_ecc_signature, _parse_signature, SIG),
]


@pytest.mark.parametrize("hot,checked,valid", FAST_PATHS, ids=["quote", "tpm2b", "ecdsa"])
@FUZZ
@given(data=st.data())
def test_hot_path_parsers_agree_with_the_checked_ones_on_mutations(hot, checked, valid, data):
    _hot_and_checked_agree(hot, checked, data.draw(_mutations(valid)))


@pytest.mark.parametrize("hot,checked,valid", FAST_PATHS, ids=["quote", "tpm2b", "ecdsa"])
@FUZZ
@given(data=st.binary(max_size=300))
def test_hot_path_parsers_agree_with_the_checked_ones_on_any_bytes(hot, checked, valid, data):
    _hot_and_checked_agree(hot, checked, data)


def test_hot_paths_take_the_genuine_structures() -> None:
    assert _well_formed_quote(QUOTE) == _parse_attest(QUOTE)
    assert _well_formed_ecc_signature(SIG) == _parse_signature(SIG)


def test_handmade_valid_quote_verifies() -> None:
    """The builders make structures the verifier accepts, so the fuzz starts from valid data."""
    verdict = verify_quote(AK, QUOTE, SIG, {"sha256": VALUES}, NONCE)
    assert verdict.valid, verdict.reasons


def test_oversized_tpm2b_length_names_field_and_offset() -> None:
    bad = QUOTE[:6] + (0xFFFF).to_bytes(2, "big") + QUOTE[8:]
    with pytest.raises(MalformedEvidence) as err:
        parse_attest(bad)
    assert err.value.field == "TPMS_ATTEST.qualifiedSigner.size"
    assert err.value.offset == 6


def test_truncated_signature_names_field() -> None:
    with pytest.raises(MalformedEvidence, match=r"signatureS"):
        parse_signature(SIG[:-5])


PCR_FILE = B.serialized_pcr_file(B.SHA256_027, [VALUES[0], VALUES[2], VALUES[7]])


def test_serialized_pcr_file_round_trips() -> None:
    assert parse_pcr_file(PCR_FILE) == {"sha256": VALUES}
    assert parse_pcr_file(PCR_FILE, B.SHA256_027) == {"sha256": VALUES}


@FUZZ
@given(data=st.data())
def test_mutated_serialized_pcr_file_raises_only_malformed(data) -> None:
    mutated = data.draw(_mutations(PCR_FILE))
    _only_malformed(parse_pcr_file, mutated)
    _only_malformed(lambda d: parse_pcr_file(d, B.SHA256_027), mutated)


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.binary(max_size=40) | st.text(max_size=4),
    lambda kids: st.dictionaries(st.integers(0, 30) | st.text(max_size=6), kids, max_size=5),
    max_leaves=15,
)


@FUZZ
@given(values=_json_like, previous=_json_like)
def test_verify_quote_survives_any_pcr_values_and_clock(values, previous) -> None:
    verdict = verify_quote(AK, QUOTE, SIG, values, NONCE, previous_clock=previous)
    assert isinstance(verdict.valid, bool)
    if verdict.valid:
        assert {k: dict(v) for k, v in verdict.pcr_values.items()} == {"sha256": VALUES}


def test_pcr_values_after_a_json_round_trip_are_accepted() -> None:
    as_json = {"sha256": {str(p): v for p, v in VALUES.items()}}
    stored_clock = verify_quote(AK, QUOTE, SIG, as_json, NONCE).clock.to_dict()
    verdict = verify_quote(AK, QUOTE, SIG, as_json, NONCE, previous_clock=stored_clock)
    assert verdict.valid, verdict.reasons


@pytest.mark.parametrize("bad", [10**12, None, "ff", 3.5, [1, 2]])
def test_non_bytes_evidence_is_malformed_not_allocated(bad) -> None:
    assert verify_quote(bad, QUOTE, SIG, {"sha256": VALUES}, NONCE).codes() == ["ak_malformed"]
    assert verify_quote(AK, QUOTE, bad, {"sha256": VALUES}, NONCE).codes() == [
        "signature_malformed"
    ]
    assert verify_quote(AK, bad, SIG, {"sha256": VALUES}, NONCE).codes() == ["quote_malformed"]
    assert verify_quote(AK, QUOTE, SIG, {"sha256": VALUES}, bad).codes() == ["nonce_invalid"]


def test_policy_and_clock_in_their_json_forms_are_accepted() -> None:
    policy = {"pcrs": {"sha256": {"0": VALUES[0].hex(), "2": None, "7": VALUES[7].hex()}}}
    verdict = verify_quote(AK, QUOTE, SIG, {"sha256": VALUES}, NONCE, policy=policy)
    assert verdict.valid and verdict.reasons == []
    bad = {"pcrs": {"sha256": {"7": "00"}}}
    assert verify_quote(AK, QUOTE, SIG, {"sha256": VALUES}, NONCE, policy=bad).codes() == [
        "policy_invalid"
    ]
