"""One rule for a PCR policy the ledger records (attest.policy): the web app's model, node
enrolment and the contract's arguments accept or refuse the same policies. A SHA-384 (or
SHA-1, SHA-512) policy is refused by all three, where the model and enrolment used to let
it through for the contract to refuse; a policy missing a golden value is a draft the model
keeps and that neither enrolment nor the contract takes; a complete SHA-256 one passes all."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from attest.policy import DEFAULT_PCRS, DEFAULT_SELECTION
from ledger.contract import args
from webapp.attestation.actions.enrolment import _policy_gaps
from webapp.fleet.models import Node, PcrPolicy

SIZES = {"sha1": 20, "sha256": 32, "sha384": 48, "sha512": 64}


def complete(bank: str) -> dict:
    return {bank: {str(pcr): f"{pcr:02x}" * SIZES[bank] for pcr in DEFAULT_PCRS}}


def verdicts(fleet, pcrs: dict) -> tuple[bool, bool, bool]:
    """(model accepts, enrolment accepts, contract accepts) for the policy `pcrs`."""
    policy = PcrPolicy(name="candidate", pcrs=pcrs, max_age_s=600)
    try:
        policy.full_clean()
        model = True
    except ValidationError as exc:
        assert "pcrs" in exc.message_dict
        model = False
    PcrPolicy.objects.filter(pk=fleet.node.pcr_policy_id).update(pcrs=pcrs)  # as if it had
    enrolment = not _policy_gaps(Node.objects.get(pk=fleet.node.pk))
    try:
        args.pcr_policy({"pcr_policy": {"pcrs": pcrs, "max_age_s": 600}})
        contract = True
    except args.ArgumentError as exc:
        assert "pcr_policy.pcrs" in str(exc)
        contract = False
    return model, enrolment, contract


@pytest.mark.parametrize("bank", ["sha1", "sha384", "sha512"])
def test_a_bank_the_ledger_does_not_record_is_refused_everywhere(fleet, bank):
    assert verdicts(fleet, complete(bank)) == (False, False, False)


def test_a_sha384_policy_is_refused_with_its_bank_named(fleet):
    with pytest.raises(ValidationError, match="sha384"):
        PcrPolicy(name="p384", pcrs=complete("sha384")).full_clean()
    PcrPolicy.objects.filter(pk=fleet.node.pcr_policy_id).update(pcrs=complete("sha384"))
    (gap,) = _policy_gaps(Node.objects.get(pk=fleet.node.pk))
    assert "sha384" in gap["detail"]
    with pytest.raises(args.ArgumentError, match="sha384"):
        args.pcr_policy({"pcr_policy": {"pcrs": complete("sha384"), "max_age_s": 600}})


def test_a_complete_sha256_policy_passes_everywhere(fleet):
    assert verdicts(fleet, complete("sha256")) == (True, True, True)


def test_a_draft_without_golden_values_is_kept_but_not_registered(fleet):
    draft = {"sha256": {str(pcr): None for pcr in DEFAULT_PCRS}}
    assert verdicts(fleet, draft) == (True, False, False)


@pytest.mark.parametrize("index", ["24", "07", "-1", "x"])
def test_a_pcr_index_outside_the_rule_is_refused_everywhere(fleet, index):
    pcrs = {"sha256": {index: "00" * 32}}
    assert verdicts(fleet, pcrs) == (False, False, False)


def test_the_default_selection_is_the_default_policy():
    assert DEFAULT_SELECTION == "sha256:0,2,7"
