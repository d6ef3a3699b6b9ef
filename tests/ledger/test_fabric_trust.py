"""The trust roots file an auditor names: each rule it breaks is refused, naming the line."""

from __future__ import annotations

import re

import pytest

from chaincode_client.fabric.identity import Identity
from ledger.audit.fabric_trust import (
    IdentityDefect,
    RootsError,
    format_roots,
    identity,
    parse_roots,
)
from tests.ledger.fabric_chain import Org
from tests.ledger.test_certs import der_to_pem, peer_der


@pytest.fixture(scope="module")
def cas() -> dict[str, Org]:
    return {m: Org(m) for m in ("OrdererMSP", "Org1MSP", "Org2MSP")}


def test_reads_what_format_roots_writes(cas):
    text = format_roots(
        "wattlease",
        "wattlease",
        {"OrdererMSP": cas["OrdererMSP"].pem},
        {m: cas[m].pem for m in ("Org1MSP", "Org2MSP")},
    )
    roots = parse_roots(text.encode())
    assert (roots.channel, roots.chaincode) == ("wattlease", "wattlease")
    assert roots.orderers == {"OrdererMSP": [cas["OrdererMSP"].cert]}
    assert roots.orgs == {"Org1MSP": [cas["Org1MSP"].cert], "Org2MSP": [cas["Org2MSP"].cert]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("orderer OrdererMSP\n{OrdererMSP}", "need at least one `orderer` and one `org` root"),
        ("{Org1MSP}", "line 1: certificate without an `orderer MSP` / `org MSP` line"),
        ("peer Org1MSP\n{Org1MSP}", "line 1: expected `channel NAME`, `chaincode NAME`"),
        (
            "orderer Org1MSP\n{Org1MSP}\norg Org1MSP\n{Org1MSP}",
            "['Org1MSP'] named both `orderer` and `org`",
        ),
        (
            "orderer OrdererMSP\n{OrdererMSP}\norg Org1MSP\n-----BEGIN CERTIFICATE-----\nAAAA",
            "not closed",
        ),
        (
            "orderer OrdererMSP\n{OrdererMSP}\norg Org1MSP\n-----BEGIN CERTIFICATE-----\n"
            "AAAA\n-----END CERTIFICATE-----",
            "not a PEM certificate",
        ),
    ],
)
def test_refuses_a_roots_file_that_breaks_a_rule(cas, text, message):
    data = text.format(**{m: org.pem.decode() for m, org in cas.items()}).encode()
    with pytest.raises(RootsError, match=re.escape(message)):
        parse_roots(data)


def test_refuses_a_root_that_is_not_a_ca(cas):
    identity, _ = cas["Org1MSP"].member("peer")
    text = f"orderer OrdererMSP\n{cas['OrdererMSP'].pem.decode()}org Org1MSP\n"
    text += identity.cert_pem.decode()
    with pytest.raises(RootsError, match=r"line \d+: CN=peer\.Org1MSP,OU=peer is not a CA"):
        parse_roots(text.encode())


def test_names_a_subject_value_of_an_asn1_type_no_name_uses(cas):
    """CI's fuzz test: a mutated orderer identity whose subject's OU value had tag 76 made
    `cryptography` raise a bare KeyError out of the verifier."""
    der = peer_der(cas)
    at = der.index(b"\x0c\x04peer")  # the OU, a UTF8String
    forged = der[:at] + bytes([76]) + der[at + 1 :]
    serialized = Identity("Org1MSP", der_to_pem(forged)).serialized()
    roots = {"Org1MSP": [cas["Org1MSP"].cert]}
    with pytest.raises(
        IdentityDefect, match=re.escape("subject: an attribute value has ASN.1 tag 76")
    ):
        identity(serialized, roots)
