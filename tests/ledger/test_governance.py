"""Policies both organisations decide: one org's admin proposes, another org's admin approves.
On every ledger backend; every refusal names its reason."""

from __future__ import annotations

import json

import pytest

from chaincode_client.interface import EndorsementError, LedgerClient
from ledger.audit.chain import verify_ledger
from ledger.contract.terms import DEPLOYED, RATE_CARD_PATH
from ledger.engine.msp import new_identity
from tests.ledger.conftest import ORG1, ORG2, LedgerEnv
from tests.ledger.helpers import H100, attest, js, lease_request, register_node

GOLDEN = {"0": "aa" * 32, "2": "bb" * 32, "7": "cc" * 32}
PCR_POLICY = {"pcrs": {"sha256": GOLDEN}, "max_age_s": 600}


def admin(env: LedgerEnv, org: str) -> LedgerClient:
    if env.admin is None:
        pytest.fail(f"backend {env.backend} provides no admin identity (Admin@org, OU=admin)")
    return env.admin(org)


def propose(client: LedgerClient, kind: str, document: dict, key: str = "gold") -> dict:
    request = {"kind": kind, "key": key, "document": document}
    return json.loads(client.submit("ProposePolicy", js(request)).payload)


def approve(client: LedgerClient, proposal_id: str) -> dict:
    return json.loads(client.submit("ApprovePolicy", js({"proposal_id": proposal_id})).payload)


def get_policy(client: LedgerClient, kind: str, key: str = "gold") -> dict:
    return json.loads(client.evaluate("GetPolicy", js({"kind": kind, "key": key})))


def test_a_policy_takes_effect_on_another_orgs_approval(ledger_env):
    org1, org2 = admin(ledger_env, ORG1), admin(ledger_env, ORG2)
    proposal = propose(org1, "pcr_policy", PCR_POLICY)
    assert proposal["status"] == "open" and proposal["proposed_by"]["mspid"] == ORG1
    with pytest.raises(EndorsementError, match=r"\[governance\.no_policy\]"):
        get_policy(org1, "pcr_policy")
    record = approve(org2, proposal["proposal_id"])
    assert record["version"] == 1 and record["document"] == PCR_POLICY
    assert record["approved_by"]["mspid"] == ORG2
    assert "OU=admin" in record["approved_by"]["subject"]
    assert get_policy(ledger_env.clients[ORG1], "pcr_policy") == record
    # a retried approval answers with the policy in force and writes nothing
    assert approve(org2, proposal["proposal_id"]) == record


def test_proposer_cannot_approve_its_own_change(ledger_env):
    org1 = admin(ledger_env, ORG1)
    proposal = propose(org1, "pcr_policy", PCR_POLICY)
    with pytest.raises(EndorsementError, match=r"\[governance\.self_approval\]"):
        approve(org1, proposal["proposal_id"])


def test_one_organisation_alone_cannot_change_a_policy(ledger_env):
    """Two admins of Org1 (two identities, two transactions) are still one organisation."""
    proposal = propose(admin(ledger_env, ORG1), "tariffs", {"EUR": 250_000})
    with pytest.raises(EndorsementError, match=r"\[governance\.same_org\] .* another organisation"):
        approve(admin(ledger_env, ORG1), proposal["proposal_id"])
    with pytest.raises(EndorsementError, match=r"\[governance\.no_policy\]"):
        get_policy(ledger_env.clients[ORG1], "tariffs")


def test_clients_and_peers_are_not_admins(ledger_env):
    client = ledger_env.clients[ORG1]
    with pytest.raises(EndorsementError, match=r"\[governance\.not_admin\] .*OU=client"):
        propose(client, "pcr_policy", PCR_POLICY)
    proposal = propose(admin(ledger_env, ORG1), "pcr_policy", PCR_POLICY)
    with pytest.raises(EndorsementError, match=r"\[governance\.not_admin\]"):
        approve(ledger_env.clients[ORG2], proposal["proposal_id"])


def test_an_approval_of_a_superseded_proposal_is_refused(ledger_env):
    org1, org2 = admin(ledger_env, ORG1), admin(ledger_env, ORG2)
    first = propose(org1, "catalogue", {"version": 1})
    second = propose(org2, "catalogue", {"version": 2})
    approve(org2, first["proposal_id"])
    with pytest.raises(EndorsementError, match=r"\[governance\.stale_proposal\]"):
        approve(org1, second["proposal_id"])
    assert get_policy(org1, "catalogue")["document"] == {"version": 1}


def test_policy_documents_are_checked_by_kind(ledger_env):
    org1 = admin(ledger_env, ORG1)
    for kind, document, message in [
        ("pcr_policy", {"pcrs": {"sha256": {"0": "zz"}}, "max_age_s": 60}, "document.pcrs"),
        ("pcr_policy", {"pcrs": {"sha256": GOLDEN}}, "document.max_age_s"),
        ("ek_roots", {"certificates": ["not a cert"]}, r"certificates\[0\]: not a CA"),
        ("ek_roots", {"certificates": [_leaf_pem()]}, "not a CA"),
        ("firmware", {}, "kind: must be one of"),
    ]:
        with pytest.raises(EndorsementError, match=message):
            propose(org1, kind, document)
    with pytest.raises(EndorsementError, match=r"\[governance\.no_proposal\]"):
        approve(admin(ledger_env, ORG2), "nope")


def test_ek_roots_are_ledger_data_both_orgs_decide(ledger_env):
    root = _ca_pem()
    proposal = propose(admin(ledger_env, ORG2), "ek_roots", {"certificates": [root]}, key="default")
    approve(admin(ledger_env, ORG1), proposal["proposal_id"])
    stored = get_policy(ledger_env.clients[ORG2], "ek_roots", key="default")
    assert stored["document"]["certificates"] == [root]


def test_pcr_golden_values_come_from_the_policy_both_orgs_approved(ledger_env, node_tpm):
    org1, org2 = admin(ledger_env, ORG1), admin(ledger_env, ORG2)
    client = ledger_env.clients[ORG1]
    with pytest.raises(EndorsementError, match=r"\[governance\.no_policy\] pcr_policy_id gold"):
        register_node(client, node_tpm, "n1", 0, [("GPU-a", "H100")], policy_id="gold")
    good = {"pcrs": {"sha256": node_tpm.golden}, "max_age_s": 600}
    approve(org2, propose(org1, "pcr_policy", good)["proposal_id"])
    node = register_node(client, node_tpm, "n1", 0, [("GPU-a", "H100")], policy_id="gold")
    assert node["pcr_policy_id"] == "gold" and node["pcr_policy"] == good
    assert attest(client, node_tpm, "n1", 0)["valid"] is True
    # a change both organisations approve applies to the node's next quote
    tightened = {"pcrs": {"sha256": {**node_tpm.golden, "7": "ee" * 32}}, "max_age_s": 600}
    approve(org1, propose(org2, "pcr_policy", tightened)["proposal_id"])
    record = attest(client, node_tpm, "n1", 0)
    assert record["valid"] is False
    assert [r["code"] for r in record["verdict"]["reasons"]] == ["pcr_value_mismatch"]
    current = json.loads(client.evaluate("GetNode", js({"node_id": "n1"})))
    assert current["pcr_policy"] == tightened
    history = json.loads(client.evaluate("GetHistory", js({"key": "policy:pcr_policy:gold"})))
    # (Fabric's key history comes newest first, the embedded engine's oldest first)
    assert sorted((h["value"]["version"], h["value"]["approved_by"]["mspid"]) for h in history) == [
        (1, ORG2),
        (2, ORG1),
    ]
    if ledger_env.path is not None:  # the audit re-verifies each quote under its policy then
        ledger_env.close_ledger()
        report = verify_ledger(ledger_env.path)
        assert report.ok and report.quotes == 2, report.defects


def rate_card_document(**rates: int) -> dict:
    """The deployed rate card and catalogue files as a `rate_card` policy, with `rates`
    (generation -> micro-units per GPU-hour) changed and a version of its own."""
    card = json.loads(RATE_CARD_PATH.read_text())
    card["capacity_micro_per_gpu_hour"].update(rates)
    card["version"] = "2027-01-01"
    catalogue = (RATE_CARD_PATH.parent / card["catalogue"]).read_text()
    return {"rate_card": card, "catalogue": catalogue}


def test_leases_are_priced_by_the_rate_card_both_organisations_approved(
    ledger_env, node_tpm, boot_policy
):
    org1, org2 = admin(ledger_env, ORG1), admin(ledger_env, ORG2)
    client = ledger_env.clients[ORG1]
    register_node(client, node_tpm, "n1", 0, [("GPU-a", H100), ("GPU-b", H100)])
    att = attest(client, node_tpm, "n1", 0)["attestation_id"]
    old = DEPLOYED.capacity_micro_per_gpu_hour[H100]
    new = 2 * old
    proposal = propose(org1, "rate_card", rate_card_document(**{H100: new}), key="default")
    # a proposal alone changes nothing: a lease at the deployed rates is still accepted
    first = json.loads(client.submit("CreateLease", lease_request("L1", ["GPU-a"], [att])).payload)
    assert first["terms"]["rate_card"] == DEPLOYED.version
    with pytest.raises(EndorsementError, match=r"\[governance\.self_approval\]"):
        approve(org1, proposal["proposal_id"])
    approve(org2, proposal["proposal_id"])
    stale = lease_request("L2", ["GPU-b"], [att])
    with pytest.raises(
        EndorsementError,
        match=rf"\[terms\.rate\] capacity_micro_per_gpu_hour {old} is not the rate card's {new}",
    ):
        client.submit("CreateLease", stale)
    priced = lease_request("L2", ["GPU-b"], [att], capacity_micro_per_gpu_hour=new)
    second = json.loads(client.submit("CreateLease", priced).payload)
    assert second["terms"]["rate_card"] == "2027-01-01"
    assert second["terms"]["capacity_micro_per_gpu_hour"] == new


def test_a_rate_card_proposal_is_checked_by_the_rate_card_loader(ledger_env):
    org1 = admin(ledger_env, ORG1)
    unpriced = rate_card_document(**{"Z999": 1})
    low_pue = rate_card_document()
    low_pue["rate_card"]["sites"]["fra-1"]["pue_milli"] = 900
    no_power = rate_card_document()
    catalogue = json.loads(no_power["catalogue"])
    del catalogue["generations"][0]["board_power_w"]
    no_power["catalogue"] = json.dumps(catalogue)
    for document, message in [
        (unpriced, r"rates for generations not in the catalogue: \['Z999'\]"),
        (low_pue, r"document\.sites\.fra-1\.pue_milli: must be an integer in \[1000, "),
        (no_power, r"document\.catalogue\.generations\[0\]\.board_power_w: must be a number"),
        ({"rate_card": {}}, "document: not a rate card"),
    ]:
        with pytest.raises(EndorsementError, match=message):
            propose(org1, "rate_card", document, key="default")


def _ca_pem() -> str:
    return new_identity("Acme TPM", "EK root", None).cert_pem.decode()


def _leaf_pem() -> str:
    return new_identity(
        "Acme TPM", "leaf", new_identity("Acme TPM", "EK root", None)
    ).cert_pem.decode()
