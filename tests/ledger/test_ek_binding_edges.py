"""EK binding's every refusal, at its edge and with its whole message (ledger.contract.
ek_binding): the shape of an AK certificate, of the inventory and of the EK chain's extra
certificates (no TPM: the contract checks these before anything else), then, with a real
swtpm on the ledger, each registrar rule and each enrolment-quote rule as RegisterNode
refuses it. Whole messages, so a refusal that names the wrong organisation, GPU or field is
caught, not only one with the wrong reason code."""

from __future__ import annotations

import base64
import copy

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from attest import tpm_constants as C
from attest.public import parse_public
from attest.registrar import MAX_SIGNATURE_BYTES
from chaincode_client.interface import EndorsementError
from ledger.contract import args, ek_binding, governance
from ledger.units import NS_PER_S
from tests.ledger.conftest import ORG1, ORG2
from tests.ledger.helpers import (
    A100,
    H100,
    endorsement_refusal,
    refusal,
    register_node,
)
from tests.ledger.test_ek_binding import (
    approve_ek_roots,
    enrolment,
    new_registrars,
    nvml_name,
)
from tests.ledger.test_governance import admin, approve, propose

WHERE = "ek_binding.ak_certificates.Org1MSP"
STATEMENT = {"activated_ns": 1, "ak_name": "aa", "ek_name": "bb", "node_id": "n1", "org": ORG1}
SIGNATURE = base64.b64encode(b"\x30" * 70).decode()
NOW_NS = 1_800_000_000 * NS_PER_S  # 2027-01-15: within the swtpm EK certificate's validity


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def certificate_of(**changes) -> dict:
    return {"ak_certificate": {**STATEMENT, **changes}, "signature": SIGNATURE}


def name_of(public: bytes) -> str:
    return parse_public(public).name().hex()


def gpu(uuid: str) -> dict[str, str]:
    return {"uuid": uuid, "name": "NVIDIA H100 80GB HBM3", "serial": "1320000001"}


# -- an AK certificate's shape --


def test_an_ak_certificate_is_exactly_a_statement_and_a_signature():
    statement, signature = ek_binding._ak_certificate_of(certificate_of(), ORG1)
    assert statement == STATEMENT and signature == b"\x30" * 70
    wrong = f"[args.invalid] {WHERE}: must be an object of ak_certificate, signature"
    assert refusal(ek_binding._ak_certificate_of, "x", ORG1) == wrong
    assert refusal(ek_binding._ak_certificate_of, {**certificate_of(), "by": 1}, ORG1) == wrong
    assert refusal(ek_binding._ak_certificate_of, {"ak_certificate": STATEMENT}, ORG1) == wrong


def test_a_statement_has_exactly_its_five_fields_strings_and_a_time():
    fields = "activated_ns, ak_name, ek_name, node_id, org"
    short = {"ak_certificate": {"org": ORG1}, "signature": SIGNATURE}
    assert refusal(ek_binding._ak_certificate_of, short, ORG1) == (
        f"[args.invalid] {WHERE}.ak_certificate: must be an object of {fields}"
    )
    assert refusal(ek_binding._ak_certificate_of, {**short, "ak_certificate": "x"}, ORG1) == (
        f"[args.invalid] {WHERE}.ak_certificate: must be an object of {fields}"
    )
    for field in ("org", "node_id", "ak_name", "ek_name"):
        assert refusal(ek_binding._ak_certificate_of, certificate_of(**{field: 7}), ORG1) == (
            f"[args.invalid] {WHERE}.ak_certificate.{field}: must be a string"
        )
    for ns in (0, 2**63 - 1):  # any time from the epoch to the last nanosecond int64 holds
        ek_binding._ak_certificate_of(certificate_of(activated_ns=ns), ORG1)
    assert refusal(ek_binding._ak_certificate_of, certificate_of(activated_ns=2**63), ORG1) == (
        f"[args.invalid] activated_ns: must be an integer in [0, {2**63 - 1}], got {2**63}"
    )
    assert "activated_ns: must be an integer" in refusal(
        ek_binding._ak_certificate_of, certificate_of(activated_ns=-1), ORG1
    )


def test_a_signature_is_at_most_what_a_p256_signature_can_be():
    most = {**certificate_of(), "signature": b64(b"\x30" * MAX_SIGNATURE_BYTES)}
    assert ek_binding._ak_certificate_of(most, ORG1)[1] == b"\x30" * MAX_SIGNATURE_BYTES
    over = {**certificate_of(), "signature": b64(b"\x30" * (MAX_SIGNATURE_BYTES + 3))}
    assert refusal(ek_binding._ak_certificate_of, over, ORG1).startswith(
        f"[args.invalid] signature: must be base64 of at most {MAX_SIGNATURE_BYTES} bytes"
    )


# -- the inventory's shape --


def test_an_inventory_lists_one_to_a_nodes_most_gpus_each_with_its_three_fields():
    most = [gpu(f"GPU-{i:02d}") for i in range(args.MAX_LIST_ITEMS)]
    assert len(ek_binding._inventory_of({"inventory": most})) == args.MAX_LIST_ITEMS
    wrong = f"[args.invalid] enrolment_quote.inventory: must list 1-{args.MAX_LIST_ITEMS}"
    for items in (None, {"uuid": "GPU-a"}, [], [*most, gpu("GPU-x")]):
        assert refusal(ek_binding._inventory_of, {"inventory": items}) == wrong
    for item in ("GPU-a", {"uuid": "GPU-a", "name": "x"}, {**gpu("GPU-a"), "bus": "0"}):
        assert refusal(ek_binding._inventory_of, {"inventory": [gpu("GPU-0"), item]}) == (
            "[args.invalid] enrolment_quote.inventory[1]: must be an object of uuid, name, serial"
        )


def test_an_inventory_is_recorded_in_uuid_order_whatever_order_it_came_in():
    came = [gpu("GPU-c"), gpu("GPU-a"), gpu("GPU-b")]
    assert [g["uuid"] for g in ek_binding._inventory_of({"inventory": came})] == [
        "GPU-a",
        "GPU-b",
        "GPU-c",
    ]


# -- the EK chain's extra certificates --


def test_at_most_four_intermediates_each_base64():
    four = [b64(bytes([i])) for i in range(ek_binding.MAX_INTERMEDIATES)]
    assert ek_binding._b64_list({"ek_intermediates": four}, "ek_intermediates") == [
        bytes([i]) for i in range(ek_binding.MAX_INTERMEDIATES)
    ]
    assert ek_binding._b64_list({}, "ek_intermediates") == []
    too_many = "[args.invalid] ek_binding.ek_intermediates: must list at most 4"
    for value in ([*four, b64(b"x")], "AAAA", {"a": "AAAA"}):
        assert refusal(ek_binding._b64_list, {"ek_intermediates": value}, "ek_intermediates") == (
            too_many
        )
    for item in ("not base64!", "AAAA AAAA", "AAAA\n", 7, None):  # strictly the alphabet
        assert refusal(ek_binding._b64_list, {"ek_intermediates": [item]}, "ek_intermediates") == (
            "[args.invalid] ek_binding.ek_intermediates: items must be base64"
        )


def test_an_intermediate_that_is_no_certificate_is_refused_by_its_field():
    message = refusal(ek_binding._load_der_or_pem, b"junk", "ek_binding.ek_intermediates")
    assert message.startswith("[args.invalid] ") and "ek_binding.ek_intermediates" in message


# -- the registrars, on the ledger --


@pytest.fixture
def honest(ledger_env, node_tpm, boot_policy):
    """EK roots and both organisations' registrars approved; node n1's honest enrolment:
    (client, registrars, enrolment)."""
    registrars = approve_ek_roots(ledger_env, node_tpm)
    enrolled = enrolment(registrars, node_tpm, "n1", 0, [("GPU-a", H100)])
    return ledger_env.clients[ORG1], registrars, enrolled


def refused(client, node_tpm, enrolled: dict, org: str = ORG1) -> str:
    """The whole refusal of n1's registration with `enrolled`."""
    return endorsement_refusal(
        lambda: register_node(
            client, node_tpm, "n1", 0, [("GPU-a", H100)], org=org, enrolment=enrolled
        )
    )


def with_certificates(enrolled: dict, certificates) -> dict:
    changed = copy.deepcopy(enrolled)
    changed["ek_binding"]["ak_certificates"] = certificates
    return changed


def test_without_approved_registrars_no_binding_can_be_checked(ledger_env, node_tpm, boot_policy):
    proposal = propose(
        admin(ledger_env, ORG1), "ek_roots", {"certificates": node_tpm.ek_ca_pems}, key="default"
    )
    approve(admin(ledger_env, ORG2), proposal["proposal_id"])
    enrolled = enrolment(new_registrars(node_tpm), node_tpm, "n1", 0, [("GPU-a", H100)])
    assert refused(ledger_env.clients[ORG1], node_tpm, enrolled) == (
        "[enrol.no_registrars] the channel has approved no registrar keys (governance kind "
        "registrars): no AK certificate can be checked"
    )


def test_ak_certificates_are_an_object_of_at_most_a_channels_organisations(honest, node_tpm):
    client, _, enrolled = honest
    wrong = (
        "[args.invalid] ek_binding.ak_certificates: must be an object {MSP id: "
        "{ak_certificate, signature}}"
    )
    assert refused(client, node_tpm, with_certificates(enrolled, ["x"])) == wrong
    many = {f"Org{i:02d}MSP": {} for i in range(governance.MAX_REGISTRARS + 1)}
    assert refused(client, node_tpm, with_certificates(enrolled, many)) == wrong
    # as many as a channel's organisations is a shape the contract reads on
    del many["Org16MSP"]
    assert refused(client, node_tpm, with_certificates(enrolled, many)) == (
        "[enrol.registrar_unknown] ak_certificates of 'Org00MSP': not an organisation with an "
        "approved registrar"
    )


def test_every_registrar_certifies_and_no_stranger_does(honest, node_tpm):
    client, _, enrolled = honest
    assert refused(client, node_tpm, with_certificates(enrolled, {})) == (
        "[enrol.registrar_missing] no AK certificate from the registrar of Org1MSP, Org2MSP: "
        "every organisation's registrar certifies a node after its own credential activation"
    )
    certificates = enrolled["ek_binding"]["ak_certificates"]
    only_mine = with_certificates(enrolled, {ORG1: certificates[ORG1]})
    assert refused(client, node_tpm, only_mine) == (
        "[enrol.registrar_missing] no AK certificate from the registrar of Org2MSP: every "
        "organisation's registrar certifies a node after its own credential activation"
    )
    strangers = {**certificates, "OrgYMSP": {}, "OrgXMSP": {}}
    assert refused(client, node_tpm, with_certificates(enrolled, strangers)) == (
        "[enrol.registrar_unknown] ak_certificates of 'OrgXMSP': not an organisation with an "
        "approved registrar"
    )


def test_a_certificate_in_another_organisations_place_is_refused(honest, node_tpm):
    client, _, enrolled = honest
    certificates = enrolled["ek_binding"]["ak_certificates"]
    swapped = {ORG1: certificates[ORG2], ORG2: certificates[ORG2]}
    assert refused(client, node_tpm, with_certificates(enrolled, swapped)) == (
        "[enrol.registrar_org_mismatch] ak_certificates.Org1MSP is a certificate of 'Org2MSP'"
    )
    malformed = {ORG1: certificates[ORG1], ORG2: {"ak_certificate": {}}}
    assert refused(client, node_tpm, with_certificates(enrolled, malformed)) == (
        "[args.invalid] ek_binding.ak_certificates.Org2MSP: must be an object of "
        "ak_certificate, signature"
    )


def test_a_certificate_for_another_ek_is_refused_naming_both(honest, node_tpm):
    client, _, enrolled = honest
    changed = copy.deepcopy(enrolled)
    statement = changed["ek_binding"]["ak_certificates"][ORG2]["ak_certificate"]
    ours = statement["ek_name"]
    other = ours[:-2] + ("00" if ours[-2:] != "00" else "11")  # a name starts 000b: sha256
    statement["ek_name"] = other
    assert refused(client, node_tpm, changed) == (
        f"[enrol.ek_name_mismatch] ak_certificates.Org2MSP.ek_name is '{other}', the "
        f"registration's is '{ours}'"
    )


# -- the enrolment quote, on the ledger --


def test_a_binding_without_its_enrolment_quote_is_refused_saying_what_to_send(honest, node_tpm):
    client, _, enrolled = honest
    assert refused(client, node_tpm, {"ek_binding": enrolled["ek_binding"]}) == (
        "[enrol.no_enrolment_quote] an EK-bound registration carries enrolment_quote {quote, "
        "signature, pcr_values, inventory}: the node's quote over its GPU inventory"
    )


def test_an_inventory_field_the_digest_cannot_hold_is_refused_by_its_field(honest, node_tpm):
    client, _, enrolled = honest
    changed = copy.deepcopy(enrolled)
    changed["enrolment_quote"]["inventory"][0]["serial"] = "13\x0020"
    assert refused(client, node_tpm, changed) == (
        "[args.invalid] enrolment_quote.inventory: serial: must be a string of <= 96 chars "
        "without NUL"
    )


def test_an_inventory_the_quote_does_not_cover_is_refused(honest, node_tpm):
    client, _, enrolled = honest
    changed = copy.deepcopy(enrolled)
    changed["enrolment_quote"]["inventory"][0]["serial"] = "1329999999"
    assert refused(client, node_tpm, changed) == (
        "[enrol.inventory_mismatch] the inventory does not hash to the enrolment quote's "
        "qualifying data: the node reported other GPUs (or the quote is for another enrolment)"
    )


def test_an_enrolment_quote_that_fails_otherwise_is_refused_with_its_codes(honest, node_tpm):
    client, _, enrolled = honest
    changed = copy.deepcopy(enrolled)
    pcrs = changed["enrolment_quote"]["pcr_values"]["sha256"]
    pcrs["7"] = "11" * 32  # PCR values other than those the quote's digest covers
    assert refused(client, node_tpm, changed) == (
        "[enrol.enrolment_quote_invalid] the enrolment quote fails: pcr_digest_mismatch"
    )


# -- the TPM's keys: the EK chain at the ledger's time, and the AK's attributes --


def der(pem: str) -> bytes:
    return x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)


def tpm_keys(
    node_tpm, roots: list[str], ak_public: bytes | None = None, at_ns: int = NOW_NS, **binding
):
    """ek_binding._check_tpm_keys of the swtpm's EK and AK 0 (or `ak_public`) at `at_ns`."""
    agent = node_tpm.agent
    given = {"ek_public": b64(agent.ek_public()), "ek_certificate": b64(agent.ek_certificate())}
    return ek_binding._check_tpm_keys(
        {**given, **binding},
        {"certificates": roots},
        node_tpm.aks[0].public if ak_public is None else ak_public,
        at_ns,
    )


def test_an_ek_chains_to_an_approved_root_through_the_intermediates_the_binding_brings(
    node_tpm,
):
    root, intermediate = node_tpm.ek_ca_pems
    ek_name, ak_name = tpm_keys(node_tpm, [root, intermediate])
    assert ak_name == name_of(node_tpm.aks[0].public)
    brought = {"ek_intermediates": [b64(der(intermediate))]}
    assert tpm_keys(node_tpm, [root], **brought) == (ek_name, ak_name)
    # an intermediate alone is no anchor, and without it the root cannot be reached
    assert refusal(tpm_keys, node_tpm, [intermediate]).startswith("[enrol.ek_cert_untrusted] ")
    assert refusal(tpm_keys, node_tpm, [root]).startswith("[enrol.ek_cert_untrusted] ")
    junk = {"ek_intermediates": [b64(b"junk")]}
    assert refusal(tpm_keys, node_tpm, [root], **junk).startswith(
        "[args.invalid] ek_binding.ek_intermediates"
    )


def test_the_ek_certificate_is_judged_at_the_ledgers_time_not_the_endorsers_wall_clock(node_tpm):
    roots = node_tpm.ek_ca_pems
    issued = x509.load_der_x509_certificate(node_tpm.agent.ek_certificate()).not_valid_before_utc
    before = int((issued.timestamp() - 86_400) * NS_PER_S)
    assert refusal(tpm_keys, node_tpm, roots, at_ns=before) == (
        "[enrol.ek_cert_expired] EK certificate is outside its validity period"
    )


def test_an_ek_certificate_is_at_most_8_kib(node_tpm):
    roots = node_tpm.ek_ca_pems
    assert refusal(tpm_keys, node_tpm, roots, ek_certificate=b64(b"\x30" * 8193)) == (
        "[args.invalid] ek_certificate: must be 1-8192 bytes, got 8193"
    )
    # 8 KiB is read, and what is wrong with it is that it is no certificate
    assert not refusal(tpm_keys, node_tpm, roots, ek_certificate=b64(b"\x30" * 8192)).startswith(
        "[args.invalid] ek_certificate: must be"
    )


def with_attributes(public: bytes, set_bits: int = 0, clear_bits: int = 0) -> bytes:
    """A TPM2B_PUBLIC with objectAttributes (after size, type and nameAlg) changed."""
    attributes = int.from_bytes(public[6:10], "big") | set_bits
    attributes &= ~clear_bits
    return public[:6] + attributes.to_bytes(4, "big") + public[10:]


def test_an_ak_must_be_a_restricted_signing_key_that_never_decrypts(node_tpm):
    roots, ak = node_tpm.ek_ca_pems, node_tpm.aks[0].public
    for changed in (
        with_attributes(ak, set_bits=C.ATTR_DECRYPT),  # signs and decrypts
        with_attributes(ak, clear_bits=C.ATTR_RESTRICTED),  # signs anything it is given
        node_tpm.agent.ek_public(),  # the EK: decrypts, never signs
    ):
        attributes = int.from_bytes(changed[6:10], "big")
        assert refusal(tpm_keys, node_tpm, roots, ak_public=changed) == (
            f"[enrol.ak_not_restricted_signing_key] AK attributes {attributes:#010x}: not a "
            "restricted, fixedTPM signing key"
        )


def test_without_ek_roots_a_binding_is_refused_and_with_them_one_is_required(
    ledger_env, node_tpm, boot_policy
):
    client = ledger_env.clients[ORG1]
    enrolled = enrolment(new_registrars(node_tpm), node_tpm, "n1", 0, [("GPU-a", H100)])
    assert refused(client, node_tpm, enrolled) == (
        "[enrol.no_ek_roots] the channel has approved no EK roots to check it with"
    )
    approve_ek_roots(ledger_env, node_tpm)
    assert refused(client, node_tpm, {}) == (
        "[enrol.no_ek_binding] node n1: this channel registers only AKs bound to a certified EK "
        "(ek_binding: EK certificate chain and every organisation registrar's AK certificate "
        "after its credential activation); a self-made key proves nothing"
    )


def test_a_binding_is_an_object(honest, node_tpm):
    client, _, enrolled = honest
    assert refused(client, node_tpm, {**enrolled, "ek_binding": ["x"]}) == (
        "[args.invalid] ek_binding: must be an object"
    )


def test_every_gpu_registered_as_another_generation_is_named(ledger_env, node_tpm, boot_policy):
    registrars = approve_ek_roots(ledger_env, node_tpm)
    reported = [("GPU-a", A100), ("GPU-b", A100)]
    enrolled = enrolment(registrars, node_tpm, "n1", 0, reported)
    with pytest.raises(EndorsementError) as caught:
        register_node(
            ledger_env.clients[ORG1],
            node_tpm,
            "n1",
            0,
            [("GPU-a", H100), ("GPU-b", H100)],
            enrolment=enrolled,
        )
    each = (
        f"the node reported '{nvml_name(A100)}', which is not a {H100} (the driver names it "
        f"[{nvml_name(H100)!r}])"
    )
    assert str(caught.value).endswith(
        "[enrol.generation_mismatch] registered generations differ from what the node's GPUs "
        f"report: GPU-a: {each}; GPU-b: {each}"
    ), str(caught.value)
