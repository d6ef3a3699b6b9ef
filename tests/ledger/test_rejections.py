"""Bad input never reaches the chain: refused at endorsement with a message naming it."""

from __future__ import annotations

import sqlite3

import pytest

from chaincode_client.interface import REASON_CREATOR, REASON_TOO_LARGE, EndorsementError
from tests.ledger.conftest import LedgerEnv
from tests.ledger.helpers import js


def chain_height(env: LedgerEnv) -> int | None:
    if env.path is None:
        return None
    with sqlite3.connect(env.path) as conn:
        return conn.execute("SELECT COUNT(*) FROM blocks").fetchone()[0]


@pytest.mark.parametrize(
    ("fn", "args", "message"),
    [
        ("NoSuchFunction", ["{}"], "Function NoSuchFunction not found"),
        ("GetLease", ["not json"], "argument is not valid JSON"),
        ("GetLease", ["[1, 2]"], "must be a JSON object"),
        ("GetLease", [js({"lease_id": "bad id!"})], "lease_id: must be an identifier"),
        ("GetLease", [], "incorrect number of params"),
        ("RegisterNode", [js({"node_id": "n1"})], "org: must be an identifier"),
        (
            "CreateLease",
            [js({"lease_id": "L", "tenant": "t", "gpus": "GPU-a"})],
            "gpus: must be a list",
        ),
        ("Settle", [js({"lease_id": "L", "interval_seq": -1})], "interval_seq: must be an"),
        ("GetHistory", [js({"key": "\x00secret"})], "key: must start with one of"),
        ("GetLease", [js({"lease_id": "x" * 70_000})], "limit 65536"),
    ],
)
def test_bad_arguments_are_refused_and_chain_untouched(ledger_env, fn, args, message):
    height = chain_height(ledger_env)
    with pytest.raises(EndorsementError, match=message):
        ledger_env.clients["Org1MSP"].submit(fn, *args)
    assert chain_height(ledger_env) == height


def test_oversized_proposal_is_refused(ledger_env):
    height = chain_height(ledger_env)
    with pytest.raises(EndorsementError) as refused:
        ledger_env.clients["Org1MSP"].submit("GetLease", "x" * 300_000)
    assert refused.value.reason == REASON_TOO_LARGE, refused.value
    assert chain_height(ledger_env) == height


def test_identity_not_issued_by_a_channel_ca_is_refused(ledger_env):
    height = chain_height(ledger_env)
    for call in (ledger_env.outsider().submit, ledger_env.outsider().evaluate):
        with pytest.raises(EndorsementError) as refused:
            call("GetLease", js({"lease_id": "L1"}))
        assert refused.value.reason == REASON_CREATOR, refused.value
    assert chain_height(ledger_env) == height


def test_unparseable_ak_is_refused_at_registration(ledger_env, boot_policy):
    request = {
        "node_id": "n1",
        "org": "Org1MSP",
        "ak_public": "Z2FyYmFnZQ==",
        "gpus": [{"uuid": "GPU-a", "generation": "H100"}],
        "pcr_policy_id": boot_policy,
    }
    with pytest.raises(EndorsementError, match="ak_public: "):
        ledger_env.clients["Org1MSP"].submit("RegisterNode", js(request))
