"""Two organisations' admins decide a policy with `python -m chaincode_client.policy_cli`,
each with their own identity, on every backend; bad input and a mismatched review are
refused before anything is written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaincode_client import governance
from chaincode_client.policy_cli import main
from tests.ledger.conftest import ORG1, ORG2, LedgerEnv
from tests.ledger.helpers import pcr_policy

GOLDEN = {"0": "11" * 32, "2": "22" * 32, "7": "33" * 32}
KEY = "cli-boot"


def run(env: LedgerEnv, org: str, capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """The CLI as `org`'s admin: (exit status, stdout, stderr)."""
    code = main(list(argv), connect=lambda: env.admin(org))  # type: ignore[misc]
    out, err = capsys.readouterr()
    return code, out, err


def document_file(tmp_path: Path, document: object, name: str = "policy.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def test_one_admin_proposes_the_other_reviews_and_approves(ledger_env, tmp_path, capsys):  # type: ignore[no-untyped-def]
    document = pcr_policy(GOLDEN, 600)
    path = document_file(tmp_path, document)
    code, out, err = run(ledger_env, ORG1, capsys, "propose", "pcr_policy", path, "--key", KEY)
    assert code == 0, err
    opened = json.loads(out)
    proposal_id, digest = opened["proposal_id"], opened["document_sha256"]
    assert digest == governance.document_digest(document) and "approve" in err
    assert run(ledger_env, ORG1, capsys, "show", "pcr_policy", "--key", KEY)[0] == 1  # not yet

    code, out, err = run(ledger_env, ORG2, capsys, "review", proposal_id)
    assert code == 0 and json.loads(out)["document_sha256"] == digest
    assert re.search(r'^\+ +"7": "3{64}"', err, re.M)  # what it changes, against nothing

    code, out, err = run(ledger_env, ORG2, capsys, "approve", proposal_id, "--sha256", digest)
    assert code == 0, err
    assert "version 1 is in force" in err
    code, out, _ = run(ledger_env, ORG1, capsys, "show", "pcr_policy", "--key", KEY)
    shown = json.loads(out)
    assert code == 0 and shown["document"] == document and shown["version"] == 1
    assert shown["approved_by"] != shown["proposed_by"]


def test_approving_a_document_other_than_the_reviewed_one_writes_nothing(
    ledger_env, tmp_path, capsys
):  # type: ignore[no-untyped-def]
    path = document_file(tmp_path, pcr_policy(GOLDEN, 600))
    code, out, _ = run(ledger_env, ORG1, capsys, "propose", "pcr_policy", path, "--key", KEY)
    proposal_id = json.loads(out)["proposal_id"]
    reviewed = governance.document_digest(pcr_policy({**GOLDEN, "7": "44" * 32}, 600))
    code, _, err = run(ledger_env, ORG2, capsys, "approve", proposal_id, "--sha256", reviewed)
    assert code == 1 and "nothing approved" in err
    assert run(ledger_env, ORG1, capsys, "show", "pcr_policy", "--key", KEY)[0] == 1


def test_the_proposer_cannot_approve_its_own_proposal(ledger_env, tmp_path, capsys):  # type: ignore[no-untyped-def]
    path = document_file(tmp_path, pcr_policy(GOLDEN, 600))
    code, out, _ = run(ledger_env, ORG1, capsys, "propose", "pcr_policy", path, "--key", KEY)
    opened = json.loads(out)
    code, _, err = run(
        ledger_env, ORG1, capsys, "approve", opened["proposal_id"], "--sha256",
        opened["document_sha256"],
    )  # fmt: skip
    assert code == 1 and "[governance." in err
    assert run(ledger_env, ORG1, capsys, "show", "pcr_policy", "--key", KEY)[0] == 1


def test_a_document_already_in_force_is_not_proposed_again(ledger_env, tmp_path, capsys):  # type: ignore[no-untyped-def]
    document = pcr_policy(GOLDEN, 600)
    governance.decide(ledger_env.admin(ORG1), ledger_env.admin(ORG2), "pcr_policy", KEY, document)
    path = document_file(tmp_path, document)
    code, out, _ = run(ledger_env, ORG2, capsys, "propose", "pcr_policy", path, "--key", KEY)
    assert code == 0 and "already in force" in out


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "a JSON object"),
        (json.dumps({"pcrs": {"sha256": {"0": "zz"}}}), "not a valid pcr_policy document"),
        (None, "No such file"),
    ],
)
def test_unusable_documents_are_refused_before_the_ledger_is_asked(
    tmp_path, capsys, content, reason
):  # type: ignore[no-untyped-def]
    from tests.ledger.conftest import embedded_backend

    path = tmp_path / "policy.json"
    if content is not None:
        path.write_text(content)
    with embedded_backend(tmp_path) as env:
        height = env.clients[ORG1].engine.height  # type: ignore[attr-defined]
        code, _, err = run(env, ORG1, capsys, "propose", "pcr_policy", str(path))
        assert code == 2 and reason in err
        assert env.clients[ORG1].engine.height == height  # type: ignore[attr-defined]


def test_missing_fabric_settings_say_which_one(monkeypatch, capsys):  # type: ignore[no-untyped-def]
    for name in list(os.environ):
        if name.startswith("FABRIC_"):
            monkeypatch.delenv(name)
    assert main(["show", "pcr_policy"]) == 2
    assert "FABRIC_PEER_ENDPOINT is not set" in capsys.readouterr().err


@pytest.mark.fabric
def test_admins_decide_through_the_command_with_their_fabric_settings(fabric_network, tmp_path):  # type: ignore[no-untyped-def]
    """As an operator runs it: a process per admin, configured only by FABRIC_* settings
    (`python -m chaincode_client.fabric_network env ORG --user Admin`)."""
    from tests.fabric.network_fixture import new_chaincode

    chaincode = new_chaincode(fabric_network)

    def cli(org: str, *argv: str) -> subprocess.CompletedProcess[str]:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("FABRIC_")},
            **fabric_network.layout.client_env(org, "Admin"),
            "FABRIC_CHAINCODE": chaincode,
        }
        command = [sys.executable, "-m", "chaincode_client.policy_cli", *argv]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    document = pcr_policy(GOLDEN, 600)
    proposed = cli(ORG1, "propose", "pcr_policy", document_file(tmp_path, document))
    assert proposed.returncode == 0, proposed.stderr
    opened = json.loads(proposed.stdout)
    approved = cli(ORG2, "approve", opened["proposal_id"], "--sha256", opened["document_sha256"])
    assert approved.returncode == 0, approved.stderr
    shown = json.loads(cli(ORG1, "show", "pcr_policy").stdout)
    assert shown["document"] == document
    assert (shown["proposed_by"]["mspid"], shown["approved_by"]["mspid"]) == (ORG1, ORG2)
    assert "CN=Admin@" in shown["approved_by"]["subject"]  # cryptogen's admin, from its env


def test_an_approver_waits_for_a_proposal_its_peer_has_not_seen_then_names_the_refusal(
    ledger_env,
):  # type: ignore[no-untyped-def]
    """A proposal reaches the approver's peer a block after the proposer's: `approve` asks
    again until `wait_s`, then the contract's own refusal stands."""
    from chaincode_client.interface import EndorsementError

    approver = ledger_env.admin(ORG2)
    started = time.monotonic()
    with pytest.raises(EndorsementError) as info:
        governance.approve(approver, "no-such-proposal", "00" * 32, wait_s=1.0)
    assert info.value.reason == governance.NO_PROPOSAL
    assert time.monotonic() - started >= 1.0
    with pytest.raises(EndorsementError):  # any other refusal is not waited for
        governance.proposal_when_seen(approver, "", wait_s=30.0)
    assert time.monotonic() - started < 10
