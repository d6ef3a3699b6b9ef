"""One AK, one node; one TPM (EK), one node; a revoked AK never returns (threat model:
"Contract: registration, GPU time, energy"). An organisation's web app (or the other
organisation) registers a node that already exists under another name: the same AK as a
second node, another node's TPM (its EK) for a node of its own, or an AK its owner revoked.
RegisterNode claims the AK's and the EK's names in state (ledger.contract.node_keys)."""

from __future__ import annotations

import pytest

from chaincode_client.interface import EndorsementError
from tests.ledger.conftest import ORG1, ORG2, LedgerEnv
from tests.ledger.helpers import H100, js, register_node
from tests.ledger.test_ek_binding import approve_ek_roots, enrolment


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
    another AK of that TPM and a full, honest credential activation of its own."""
    org1, org2 = ledger_env.clients[ORG1], ledger_env.clients[ORG2]
    approve_ek_roots(ledger_env, node_tpm.ek_ca_pems)
    first = enrolment(org1, node_tpm, "n1", 0, [("GPU-a", H100)])
    register_node(org1, node_tpm, "n1", 0, [("GPU-a", H100)], enrolment=first)
    second = enrolment(org2, node_tpm, "m1", 1, [("GPU-m", H100)])
    with pytest.raises(EndorsementError, match=r"\[enrol\.ek_taken\] the TPM of EK .* n1's"):
        register_node(org2, node_tpm, "m1", 1, [("GPU-m", H100)], org=ORG2, enrolment=second)
