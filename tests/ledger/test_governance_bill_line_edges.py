"""The governance documents' and a bill line's parsers (ledger.contract.governance,
ledger.contract.bill_line) at each edge: bounds taken exactly, one past refused, each
refusal's message. Each case is one a mutant let through the contract tests (docs/
threat-model.md, "Mutation testing"); pure functions on keys and certificates made here."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ledger.contract import bill_line, governance
from ledger.contract.args import ArgumentError
from ledger.contract.state import SEQ_DIGITS
from tests.attest import builders as B


def refused(call, *a) -> str:
    with pytest.raises(ArgumentError) as info:
        call(*a)
    return str(info.value)


def certificate(ca: bool) -> str:
    return B.self_signed("EK root", ca=ca).public_bytes(serialization.Encoding.PEM).decode()


def registrar_key() -> str:
    public = ec.generate_private_key(ec.SECP256R1()).public_key()
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode()


@pytest.fixture(scope="module")
def root() -> str:
    return certificate(ca=True)


# -- EK roots -------------------------------------------------------------------------------


def test_ek_roots_take_one_to_the_limit_of_ca_certificates(root):
    most = [root] * governance.MAX_EK_ROOTS
    assert governance._ek_roots({"certificates": most}) == {"certificates": most}
    shape = f"[args.invalid] document.certificates: must list 1-{governance.MAX_EK_ROOTS} PEM certs"
    for wrong in ([], [root] * (governance.MAX_EK_ROOTS + 1), root, None):
        assert refused(governance._ek_roots, {"certificates": wrong}) == shape


def test_an_ek_root_is_a_pem_ca_certificate_of_bounded_size(root):
    limit = governance.MAX_CERT_PEM_BYTES
    padded = root + " " * (limit - len(root))  # PEM readers skip the trailing blanks
    assert governance._ek_roots({"certificates": [padded]})["certificates"] == [padded]
    too_long = f"[args.invalid] document.certificates[0]: must be a PEM string of <= {limit}"
    assert refused(governance._ek_roots, {"certificates": [padded + " "]}) == too_long
    assert refused(governance._ek_roots, {"certificates": [7]}) == too_long
    leaf = certificate(ca=False)
    assert refused(governance._ek_roots, {"certificates": [root, leaf]}) == (
        "[args.invalid] document.certificates[1]: BasicConstraints says it is not a CA"
    )


# -- registrars -----------------------------------------------------------------------------


def test_registrars_take_one_key_per_organisation_up_to_the_limit():
    most = {f"Org{i}MSP": registrar_key() for i in range(governance.MAX_REGISTRARS)}
    assert governance._registrars({"keys": most}) == {"keys": most}
    shape = (
        "[args.invalid] document: must be {keys: {MSP id: registrar key}} of "
        f"1-{governance.MAX_REGISTRARS} orgs"
    )
    one_more = {**most, "OrgXMSP": registrar_key()}
    for wrong in ({"keys": {}}, {"keys": one_more}, {"keys": most, "extra": 1}, {}):
        assert refused(governance._registrars, wrong) == shape


def test_one_registrar_key_for_two_organisations_names_both():
    shared = registrar_key()
    keys = {"Org1MSP": shared, "Org2MSP": registrar_key(), "Org3MSP": shared}
    assert refused(governance._registrars, {"keys": keys}) == (
        "[governance.registrar_key_shared] document.keys: Org3MSP and Org1MSP name one key; "
        "each organisation's registrar has its own"
    )


# -- a decision's request -------------------------------------------------------------------


def test_a_policy_key_defaults_to_the_default_and_a_document_must_be_an_object():
    assert governance.key_of({}) == governance.DEFAULT_KEY
    assert governance.key_of({"key": "boot-1"}) == "boot-1"
    for wrong in (None, [], "doc"):
        assert refused(governance.document_of, {"document": wrong}, "ek_roots") == (
            "[args.invalid] document: must be a JSON object"
        )


# -- a bill line ----------------------------------------------------------------------------


def test_a_line_is_not_final_unless_it_says_so():
    assert bill_line._final({}, "final") is False
    assert bill_line._final({"final": True}, "final") is True
    for wrong in (1, "true", None):
        assert refused(bill_line._final, {"final": wrong}, "final") == (
            f"[args.invalid] final: must be true or false, got {wrong!r}"
        )


def test_a_line_number_fits_the_ledger_keys_digits():
    largest = 10**SEQ_DIGITS - 1
    assert bill_line._seq({"seq": largest}, "seq") == largest
    assert refused(bill_line._seq, {"seq": largest + 1}, "seq") == (
        f"[args.invalid] seq: must be an integer in [0, {largest}], got {largest + 1}"
    )


def batch(gpu: str = "GPU-1", digest: str = "ab" * 32, rows: int = 6) -> dict:
    return {"gpu": gpu, "digest": digest, "rows": rows}


def test_a_line_cites_at_most_its_limit_of_distinct_batches():
    most = [batch(gpu=f"GPU-{i}") for i in range(bill_line.MAX_BATCHES)]
    assert len(bill_line.parse_batches({bill_line.BATCHES: most})) == bill_line.MAX_BATCHES
    assert bill_line.parse_batches({}) == []
    shape = (
        f"[args.invalid] {bill_line.BATCHES}: must be a list of at most "
        f"{bill_line.MAX_BATCHES} batches"
    )
    for wrong in ([*most, batch(gpu="GPU-x")], {"gpu": "GPU-1"}):
        assert refused(bill_line.parse_batches, {bill_line.BATCHES: wrong}) == shape
    for item in ("GPU-1", {"gpu": "GPU-1", "digest": "ab" * 32}, {**batch(), "extra": 1}):
        assert refused(bill_line.parse_batches, {bill_line.BATCHES: [batch(), item]}) == (
            f"[args.invalid] {bill_line.BATCHES}[1]: must be an object with gpu, digest and rows"
        )
    assert refused(bill_line.parse_batches, {bill_line.BATCHES: [batch(), batch()]}) == (
        f"[args.invalid] {bill_line.BATCHES}: a batch is cited twice"
    )


def test_each_field_has_one_stored_name_and_the_row_round_trips():
    assert bill_line.stored(bill_line.MEASURED) == "measured_energy_mj"
    assert bill_line.stored(bill_line.END_MS) == bill_line.END_MS
    figures = {name: i for i, name in enumerate(bill_line.FIGURES)}
    row = type("Row", (), bill_line.to_stored(figures))()
    assert bill_line.from_stored(row) == figures
    assert "measured_energy_mj" in bill_line.to_stored(figures)


def test_a_line_may_measure_no_energy_and_cites_a_32_byte_digest():
    assert bill_line._energy_mj({"m": 0}, "m") == 0  # GPUs idle or unpowered for the line
    assert bill_line._digest({"d": "ab" * 32}, "d") == "ab" * 32
    for wrong in ("ab" * 31, "ab" * 33):
        assert refused(bill_line._digest, {"d": wrong}, "d").startswith(
            "[args.invalid] d: must be lower-case hex of 32-32 bytes"
        )
