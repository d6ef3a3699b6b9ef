"""Registration no single organisation can fake (threat model: "Contract: registration, GPU
time, energy", issue 20 hole 1), and one AK, one node; one TPM (EK), one node; a revoked AK
never returns. An organisation's web app (its client identity) registers a node: with AK
certificates it signed itself, with its own registrar's alone, with a key the channel never
approved, with a certificate for another AK; or a node that already exists under another
name. RegisterNode checks every organisation's registrar signature against the keys both
approved (ledger.contract.ek_binding) and claims the AK's and the EK's names in state
(ledger.contract.node_keys)."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from attest.public import parse_public
from attest.registrar import ak_statement, statement_bytes
from chaincode_client.interface import EndorsementError, LedgerClient
from tests.ledger.conftest import ORG1, ORG2, LedgerEnv
from tests.ledger.helpers import H100, endorsement_refusal, js, register_node, software_ak_b64
from tests.ledger.test_ek_binding import (
    approve_ek_roots,
    approve_registrars,
    certify,
    enrolment,
    new_registrars,
)


def test_one_orgs_web_app_identity_alone_cannot_register_a_node(
    ledger_env: LedgerEnv, node_tpm, boot_policy
):
    """The probe's attack: Org1's client identity binds a software AK to a real TPM's EK
    certificate and signs the AK certificates of both organisations itself."""
    approve_ek_roots(ledger_env, node_tpm)
    client = ledger_env.clients[ORG1]
    ak_public = software_ak_b64()
    ak_name = parse_public(base64.b64decode(ak_public)).name()
    ek_name = parse_public(node_tpm.agent.ek_public()).name()
    certificates = {}
    for org in (ORG1, ORG2):
        statement = ak_statement(org, "n1", ak_name, ek_name, 1)
        signature = client.sign(statement_bytes(statement))
        certificates[org] = {
            "ak_certificate": statement,
            "signature": base64.b64encode(signature).decode(),
        }
    request = {
        "node_id": "n1",
        "org": ORG1,
        "ak_public": ak_public,
        "gpus": [{"uuid": "GPU-a", "generation": H100}],
        "pcr_policy_id": boot_policy,
        "ek_binding": {
            "ek_public": base64.b64encode(node_tpm.agent.ek_public()).decode(),
            "ek_certificate": base64.b64encode(node_tpm.agent.ek_certificate()).decode(),
            "ak_certificates": certificates,
        },
    }
    with pytest.raises(
        EndorsementError, match=r"\[enrol\.registrar_signature\] .*Org1MSP's approved"
    ):
        client.submit("RegisterNode", js(request))


def test_a_registrar_of_one_organisation_only_is_not_enough(
    ledger_env: LedgerEnv, node_tpm, boot_policy
):
    registrars = approve_ek_roots(ledger_env, node_tpm)
    alone = enrolment({ORG1: registrars[ORG1]}, node_tpm, "n1", 0, [("GPU-a", H100)])
    with pytest.raises(
        EndorsementError, match=r"\[enrol\.registrar_missing\] .*registrar of Org2MSP"
    ):
        register_node(
            ledger_env.clients[ORG1], node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=alone
        )


def test_a_registrar_key_the_channel_did_not_approve_is_refused(
    ledger_env: LedgerEnv, node_tpm, boot_policy
):
    """Org1 runs a second "registrar for Org2" of its own: an honest round, an unapproved key."""
    registrars = approve_ek_roots(ledger_env, node_tpm)
    forged = {ORG1: registrars[ORG1], **new_registrars(node_tpm, (ORG2,))}
    enrolled = enrolment(forged, node_tpm, "n1", 0, [("GPU-a", H100)])
    with pytest.raises(
        EndorsementError, match=r"\[enrol\.registrar_signature\] .*Org2MSP's approved"
    ):
        register_node(
            ledger_env.clients[ORG1], node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=enrolled
        )


def test_a_certificate_for_another_ak_is_refused(ledger_env: LedgerEnv, node_tpm, boot_policy):
    """Org2's registrar certified AK 1 of this TPM; Org1 registers AK 0 with it."""
    registrars = approve_ek_roots(ledger_env, node_tpm)
    enrolled = enrolment(registrars, node_tpm, "n1", 0, [("GPU-a", H100)])
    enrolled["ek_binding"]["ak_certificates"][ORG2] = certify(registrars[ORG2], node_tpm, "n1", 1)
    with pytest.raises(
        EndorsementError, match=r"\[enrol\.ak_name_mismatch\] ak_certificates\.Org2MSP"
    ):
        register_node(
            ledger_env.clients[ORG1], node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=enrolled
        )


def _private_key(client: LedgerClient) -> ec.EllipticCurvePrivateKey:
    """The client identity's private key: the embedded engine's Identity holds it, the Fabric
    client's Signer does."""
    signer = getattr(client, "_signer", None)
    return signer._key if signer is not None else client.identity.key  # type: ignore[attr-defined]


def test_a_client_key_approved_as_a_registrar_key_does_not_certify_its_own_registration(
    ledger_env: LedgerEnv, node_tpm, boot_policy
):
    """The admins approved Org1's client identity's key as its registrar key (the contract
    cannot see client keys at approval); that identity's own RegisterNode is still refused."""
    client = ledger_env.clients[ORG1]
    registrars = approve_ek_roots(ledger_env, node_tpm)
    registrars.update(new_registrars(node_tpm, (ORG1,), key=_private_key(client)))
    approve_registrars(ledger_env, registrars)
    enrolled = enrolment(registrars, node_tpm, "n1", 0, [("GPU-a", H100)])
    assert endorsement_refusal(
        register_node, client, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=enrolled
    ) == (
        "[enrol.registrar_is_creator] Org1MSP's registrar key is this transaction's creator's: "
        "a registrar is never a channel identity"
    )


def test_one_nodes_ak_cannot_register_a_second_node(ledger_env: LedgerEnv, node_tpm, boot_policy):
    client = ledger_env.clients[ORG1]
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)])
    with pytest.raises(EndorsementError, match=r"\[enrol\.ak_taken\] AK .* is node n1's"):
        register_node(client, node_tpm, "n2", 0, [("GPU-b", H100)])
    register_node(client, node_tpm, "n2", 1, [("GPU-b", H100)])  # its own AK: registered


def test_a_revoked_ak_cannot_return(ledger_env: LedgerEnv, node_tpm, boot_policy):
    client = ledger_env.clients[ORG1]
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)])
    client.submit("RevokeAK", js({"node_id": "n1", "reason": "key leaked"}))
    with pytest.raises(EndorsementError, match=r"\[enrol\.ak_revoked\] AK .* was revoked"):
        register_node(client, node_tpm, "n1", 0, [("GPU-a", H100)])
    with pytest.raises(EndorsementError, match=r"\[enrol\.ak_revoked\]"):
        register_node(client, node_tpm, "n3", 0, [("GPU-c", H100)])
    assert register_node(client, node_tpm, "n1", 1, [("GPU-a", H100)])["ak_epoch"] == 1


def test_another_nodes_tpm_cannot_be_registered_again(ledger_env: LedgerEnv, node_tpm, boot_policy):
    """The other organisation binds the TPM (EK) of Org1's node to a node of its own, with
    another AK of that TPM and full, honest credential activations by both registrars."""
    org1, org2 = ledger_env.clients[ORG1], ledger_env.clients[ORG2]
    registrars = approve_ek_roots(ledger_env, node_tpm)
    first = enrolment(registrars, node_tpm, "n1", 0, [("GPU-a", H100)])
    register_node(org1, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=first)
    second = enrolment(registrars, node_tpm, "m1", 1, [("GPU-m", H100)])
    with pytest.raises(EndorsementError, match=r"\[enrol\.ek_taken\] the TPM of EK .* n1's"):
        register_node(org2, node_tpm, "m1", 1, [("GPU-m", H100)], org=ORG2, enrolment=second)
