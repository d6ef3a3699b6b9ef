"""Every contract function, fed arguments an attacker chooses, refuses with a reason code or
answers: never an unhandled exception, never a refusal without `[code]` (docs/threat-model.md,
row C10).

Each function runs exactly as an endorsing peer runs it (the shim's TransactionContext over
the embedded engine's SimulationStub, reading the state of the adversarial story's ledger:
a node, an attestation, leases and lines), called directly so that what escapes the function
is seen as raised, not as the message a peer would wrap it in. Arguments are an honest
request with one field replaced by any JSON value, an arbitrary JSON object, or any string;
the caller is a client of either organisation or an admin."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fabric_chaincode_python.fabric_contract_api.contractapi.transaction_context import (
    ClientIdentity,
    TransactionContext,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaincode_client.interface import REASON_RE
from ledger.contract.args import ArgumentError
from ledger.contract.chaincode import QUERIES, WattleaseContract
from ledger.contract.state import ContractError
from ledger.engine import EmbeddedLedger
from ledger.engine.endorser import _run
from ledger.engine.msp import ROLE_ADMIN
from ledger.engine.stub import SimulationStub
from tests.adversary.conftest import HALF_HOUR_MS, HOUR_MS, TENANT_A, Billed
from tests.ledger.helpers import H100, lease_terms, pcr_policy, settle_request

NS_PER_S = 1_000_000_000
FUZZ_EXAMPLES = int(os.environ.get("WATTLEASE_FUZZ_EXAMPLES", "60"))  # per function

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12) | st.floats(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


class Peer:
    """The story's ledger, reopened, and the identities that may call it."""

    def __init__(self, ledger: EmbeddedLedger) -> None:
        self.ledger = ledger
        self.callers = {
            "org1-client": ledger.enroll("Org1MSP", "fuzz-1"),
            "org2-client": ledger.enroll("Org2MSP", "fuzz-2"),
            "org1-admin": ledger.enroll("Org1MSP", "Admin@Org1MSP", ROLE_ADMIN),
        }
        self.contract = WattleaseContract()

    def call(self, caller: str, fn: str, request: str) -> str:
        """What the function answers; raises what the function raises."""
        identity = self.callers[caller]
        now = time.time_ns()
        stub = SimulationStub(
            self.ledger.store,
            self.ledger.channel,
            os.urandom(32).hex(),
            fn,
            [request],
            {"mspid": identity.mspid, "idBytes": identity.cert_pem},
            (now // NS_PER_S, now % NS_PER_S),
        )
        ctx = TransactionContext()
        ctx.set_stub(stub)
        ctx.set_client_identity(ClientIdentity(stub))
        with self.ledger.store.lock:
            return _run(getattr(self.contract, fn)(ctx, request))


@pytest.fixture(scope="module")
def peer(billed: Billed) -> Iterator[Peer]:
    ledger = EmbeddedLedger.open(billed.path, block_size=10, block_timeout_s=0.002)
    try:
        yield Peer(ledger)
    finally:
        ledger.close()


@pytest.fixture(scope="module")
def honest(peer: Peer, billed: Billed) -> dict[str, dict[str, Any]]:
    """An honest request of every function, on the story's state."""
    lease = json.loads(peer.call("org1-client", "GetLease", json.dumps({"lease_id": "L1"})))
    att = lease["attestation_ids"][0]
    node = json.loads(peer.call("org1-client", "GetNode", json.dumps({"node_id": "n1"})))
    terms = lease["terms"]
    until = lease["billing"]["billed_until_ms"]
    line = settle_request("L1", 2, terms, until, until + HALF_HOUR_MS, 1_000)
    record = json.loads(
        peer.call("org1-client", "GetAttestation", json.dumps({"attestation_id": att}))
    )
    return {
        "IssueChallenge": {"node_id": "n1"},
        "RecordAttestation": {
            "node_id": "n1",
            "quote": record.get("quote", ""),
            "signature": record.get("signature", ""),
            "pcr_values": record.get("pcr_values", {}),
            "nonce": record.get("nonce", ""),
        },
        "RegisterNode": {
            "node_id": "n9",
            "org": "Org1MSP",
            "ak_public": node["ak_public"],
            "gpus": [{"uuid": "GPU-z", "generation": H100}],
            "pcr_policy_id": "boot",
        },
        "RevokeAK": {"node_id": "n1", "reason": "fuzz"},
        "CreateLease": {
            "lease_id": "L9",
            "tenant": TENANT_A,
            "gpus": ["GPU-a"],
            "terms": lease_terms(["GPU-a"]),
            "attestation_ids": [att],
        },
        "EndLease": {"lease_id": "L1"},
        "MigrateLease": {
            "lease_id": "L1",
            "gpus": ["GPU-b"],
            "attestation_ids": [att],
            "terms": lease_terms(["GPU-b"], start_ms=until + HOUR_MS),
        },
        "Settle": line,
        "GetNode": {"node_id": "n1"},
        "GetLease": {"lease_id": "L1"},
        "GetAttestation": {"attestation_id": att},
        "LeasesByTenant": {"tenant": TENANT_A},
        "LeasesByNode": {"node_id": "n1"},
        "GetSettlements": {"lease_id": "L1"},
        "GetHistory": {"key": "lease:L1"},
        "ProposePolicy": {
            "kind": "pcr_policy",
            "key": "fuzz",
            "document": pcr_policy({"0": "00" * 32}),
        },
        "ApprovePolicy": {"proposal_id": "fuzz"},
        "GetPolicy": {"kind": "pcr_policy", "key": "boot"},
        "GetProposal": {"proposal_id": "fuzz"},
    }


FUNCTIONS = sorted(
    {
        "IssueChallenge",
        "RecordAttestation",
        "RegisterNode",
        "RevokeAK",
        "CreateLease",
        "EndLease",
        "MigrateLease",
        "Settle",
        "ProposePolicy",
        "ApprovePolicy",
        *QUERIES,
    }
)


def test_the_fuzz_covers_every_function_the_contract_has():
    declared = {
        name
        for name in dir(WattleaseContract)
        if name[:1].isupper() and callable(getattr(WattleaseContract, name))
    }
    assert declared == set(FUNCTIONS), declared ^ set(FUNCTIONS)


def _argument(draw: Any, base: dict[str, Any]) -> str:
    shape = draw(st.sampled_from(["field", "field", "nested", "object", "text"]))
    if shape == "text":
        return draw(st.text(max_size=40))
    if shape == "object":
        return json.dumps(draw(st.dictionaries(st.text(max_size=12), json_values, max_size=4)))
    request = json.loads(json.dumps(base))
    target = request
    if shape == "nested":
        nested = [k for k, v in request.items() if isinstance(v, dict) and v]
        if nested:
            target = request[draw(st.sampled_from(sorted(nested)))]
    key = draw(st.sampled_from([*sorted(target), "unexpected"]))
    if draw(st.booleans()) and key in target:
        del target[key]
    else:
        target[key] = draw(json_values)
    try:
        return json.dumps(request)
    except ValueError:  # a float NaN or infinity: the client sends text as it likes
        return json.dumps(request, allow_nan=True)


@pytest.mark.parametrize("fn", FUNCTIONS)
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_argument_gives_an_answer_or_a_refusal_with_a_reason_code(peer, honest, fn, data):
    caller = data.draw(st.sampled_from(sorted(peer.callers)))
    request = _argument(data.draw, honest[fn])
    try:
        answer = peer.call(caller, fn, request)
    except (ContractError, ArgumentError) as refusal:
        assert REASON_RE.search(str(refusal)), f"{fn} refused without a reason code: {refusal}"
    else:
        assert isinstance(answer, str)
