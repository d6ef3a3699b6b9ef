"""EK binding on the ledger: once both organisations have approved the EK roots and their
registrar keys, a node's AK is registered only with an EK chain to those roots and an AK
certificate from the registrar of every organisation, each made after a real credential
activation of its own. On every ledger backend; each refusal names its reason."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from attest.inventory import inventory_digest
from attest.registrar import ChallengeRequest, Registrar
from chaincode_client.interface import EndorsementError
from ledger.contract.terms import DEPLOYED
from tests.ledger.conftest import ORG1, ORG2, LedgerEnv, NodeTpm
from tests.ledger.helpers import (
    A100,
    H100,
    attest,
    lease_request,
    register_node,
    software_ak_b64,
)
from tests.ledger.test_governance import _ca_pem, admin, approve, propose

Registrars = dict[str, Registrar]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def new_registrars(
    tpm: NodeTpm,
    orgs: tuple[str, ...] = (ORG1, ORG2),
    key: ec.EllipticCurvePrivateKey | None = None,
) -> Registrars:
    """Each organisation's registrar: a fresh P-256 key of its own (or `key`), trusting the
    swtpm EK CA."""
    certs = [x509.load_pem_x509_certificate(p.encode()) for p in tpm.ek_ca_pems]
    roots = [c for c in certs if c.issuer == c.subject]
    others = [c for c in certs if c.issuer != c.subject]
    return {
        org: Registrar(org, key or ec.generate_private_key(ec.SECP256R1()), roots, others)
        for org in orgs
    }


def approve_registrars(env: LedgerEnv, registrars: Registrars) -> None:
    keys = {org: r.public_key_b64 for org, r in registrars.items()}
    proposal = propose(admin(env, ORG1), "registrars", {"keys": keys}, key="default")
    approve(admin(env, ORG2), proposal["proposal_id"])


def approve_ek_roots(env: LedgerEnv, tpm: NodeTpm, pems: list[str] | None = None) -> Registrars:
    """Both organisations approve the EK roots (`pems`, default the swtpm CA's) and the keys
    of two new registrars, one per organisation; returns the registrars."""
    proposal = propose(
        admin(env, ORG1), "ek_roots", {"certificates": pems or tpm.ek_ca_pems}, key="default"
    )
    approve(admin(env, ORG2), proposal["proposal_id"])
    registrars = new_registrars(tpm)
    approve_registrars(env, registrars)
    return registrars


def certify(registrar: Registrar, tpm: NodeTpm, node_id: str, ak_index: int) -> dict:
    """One registrar's round with the node's TPM: the EK chain, MakeCredential for the AK's
    name, the TPM's ActivateCredential answer; the signed AK certificate."""
    agent = tpm.agent
    ak = tpm.aks[ak_index]
    request = ChallengeRequest(node_id, agent.ek_public(), agent.ek_certificate(), (), ak.public)
    sent = registrar.challenge(request)
    answer = agent.activate(
        ak, base64.b64decode(sent["credential_blob"]), base64.b64decode(sent["secret"])
    )
    signed = registrar.activate(sent["challenge_id"], answer)
    return {"ak_certificate": signed["ak_certificate"], "signature": signed["signature"]}


def enrolment(
    registrars: Registrars,
    tpm: NodeTpm,
    node_id: str,
    ak_index: int,
    gpus: list[tuple[str, str]],
) -> dict:
    """What each organisation's registrar does (`certify`), and what the agent sends with it:
    a quote over its GPU inventory (NVML names and serials; made up here, as this machine has
    no GPU)."""
    agent = tpm.agent
    ak = tpm.aks[ak_index]
    inventory = [
        {"uuid": uuid, "name": nvml_name(generation), "serial": f"132{i:07d}"}
        for i, (uuid, generation) in enumerate(gpus)
    ]
    evidence = agent.quote(ak, inventory_digest(node_id, inventory), "sha256:0,2,7")
    return {
        "ek_binding": {
            "ek_public": b64(agent.ek_public()),
            "ek_certificate": b64(agent.ek_certificate()),
            "ak_certificates": {
                org: certify(r, tpm, node_id, ak_index) for org, r in registrars.items()
            },
        },
        "enrolment_quote": {
            "quote": b64(evidence.quote),
            "signature": b64(evidence.signature),
            "pcr_values": {
                "sha256": {str(i): v.hex() for i, v in evidence.pcr_values["sha256"].items()}
            },
            "inventory": inventory,
        },
    }


def test_honest_node_is_registered_attested_and_leased(ledger_env, node_tpm, boot_policy):
    registrars = approve_ek_roots(ledger_env, node_tpm)
    client = ledger_env.clients[ORG1]
    enrolled = enrolment(registrars, node_tpm, "n1", 0, [("GPU-a", H100)])
    node = register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=enrolled)
    certificates = enrolled["ek_binding"]["ak_certificates"]
    assert node["ek_binding"]["ek_name"] == certificates[ORG2]["ak_certificate"]["ek_name"]
    assert node["ek_binding"]["registrars"] == {
        org: c["ak_certificate"]["activated_ns"] for org, c in certificates.items()
    }
    assert node["ek_binding"]["inventory"] == enrolled["enrolment_quote"]["inventory"]
    att = attest(client, node_tpm, "n1", 0)
    assert att["valid"] is True
    lease = client.submit("CreateLease", lease_request("L1", ["GPU-a"], [att["attestation_id"]]))
    assert json.loads(lease.payload)["status"] == "ACTIVE"


def test_software_key_without_activation_is_refused(ledger_env, node_tpm, boot_policy):
    registrars = approve_ek_roots(ledger_env, node_tpm)
    request = {
        "node_id": "n1",
        "org": ORG1,
        "ak_public": software_ak_b64(),
        "gpus": [{"uuid": "GPU-a", "generation": H100}],
        "pcr_policy_id": boot_policy,
    }
    client = ledger_env.clients[ORG1]
    with pytest.raises(EndorsementError, match=r"\[enrol\.no_ek_binding\] node n1"):
        client.submit("RegisterNode", json.dumps(request))
    # a genuine TPM's binding does not carry a software key: the AK names differ
    request.update(enrolment(registrars, node_tpm, "n1", 0, [("GPU-a", H100)]))
    with pytest.raises(EndorsementError, match=r"\[enrol\.ak_name_mismatch\]"):
        client.submit("RegisterNode", json.dumps(request))


def test_binding_for_another_node_is_refused(ledger_env, node_tpm, boot_policy):
    registrars = approve_ek_roots(ledger_env, node_tpm)
    client = ledger_env.clients[ORG1]
    enrolled = enrolment(registrars, node_tpm, "n7", 0, [("GPU-a", H100)])
    with pytest.raises(EndorsementError, match=r"\[enrol\.node_id_mismatch\]"):
        register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=enrolled)


def test_ek_from_a_ca_the_channel_did_not_approve_is_refused(ledger_env, node_tpm, boot_policy):
    registrars = approve_ek_roots(ledger_env, node_tpm, [_ca_pem()])  # another maker's root
    client = ledger_env.clients[ORG1]
    enrolled = enrolment(registrars, node_tpm, "n1", 0, [("GPU-a", H100)])
    with pytest.raises(EndorsementError, match=r"\[enrol\.ek_cert_untrusted\]"):
        register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=enrolled)


def test_without_approved_ek_roots_a_binding_cannot_be_checked(ledger_env, node_tpm, boot_policy):
    client = ledger_env.clients[ORG1]
    enrolled = enrolment(new_registrars(node_tpm), node_tpm, "n1", 0, [("GPU-a", H100)])
    with pytest.raises(EndorsementError, match=r"\[enrol\.no_ek_roots\]"):
        register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=enrolled)
    # before the channel approves EK roots, registration is as it was (ek_binding null)
    node = register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)])
    assert node["ek_binding"] is None


def nvml_name(generation: str) -> str:
    """The product name the driver reports for a GPU of `generation` (the catalogue's)."""
    return sorted(DEPLOYED.generations[generation].nvml_names)[0]


def test_gpus_the_node_did_not_report_are_refused(ledger_env, node_tpm, boot_policy):
    """An A100 node registered as H100, or with a GPU it does not have: the inventory the AK
    signed is not what the registration claims."""
    registrars = approve_ek_roots(ledger_env, node_tpm)
    client = ledger_env.clients[ORG1]
    enrolled = enrolment(registrars, node_tpm, "n1", 0, [("GPU-a", A100)])
    # the node's own, honestly quoted inventory says A100: registering it as H100 is refused
    with pytest.raises(
        EndorsementError,
        match=r"\[enrol\.generation_mismatch\] .*GPU-a: the node reported 'NVIDIA A100-SXM4-80GB', "
        r"which is not a H100-SXM5-80GB",
    ):
        register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=enrolled)
    with pytest.raises(EndorsementError, match=r"generation 'H100-SXM9' is not in the catalogue"):
        register_node(client, node_tpm, "n1", 0, [("GPU-a", "H100-SXM9")], enrolment=enrolled)
    # relabelling the inventory instead breaks the quote over it
    relabelled = json.loads(json.dumps(enrolled))
    relabelled["enrolment_quote"]["inventory"][0]["name"] = nvml_name(H100)
    with pytest.raises(EndorsementError, match=r"\[enrol\.inventory_mismatch\] the inventory"):
        register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=relabelled)
    with pytest.raises(EndorsementError, match=r"\[enrol\.inventory_mismatch\] GPUs registered"):
        register_node(
            client, node_tpm, "n1", 0, [("GPU-a", H100), ("GPU-z", H100)], enrolment=enrolled
        )
    without_quote = {"ek_binding": enrolled["ek_binding"]}
    with pytest.raises(EndorsementError, match=r"\[enrol\.no_enrolment_quote\]"):
        register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=without_quote)
