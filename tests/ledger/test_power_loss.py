"""The contract applies the TPM clock policy after a power loss (attest.clock, through the
verifier every endorser runs): a node whose swtpm was killed without an orderly shutdown
attests again, the power loss recorded with the verdict on the ledger; a TPM whose state was
rolled back is refused against the clock the ledger recorded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ledger.conftest import NodeTpm, approve_pcr_policy
from tests.ledger.helpers import H100, attest, js, register_node


class PowerCycledTpm(NodeTpm):
    """A NodeTpm whose swtpm the test can cut the power of (one AK, one node)."""

    def power_cycle(self) -> None:
        self.agent.close()
        self.swtpm.power_loss()
        self.swtpm.start()
        self.reconnect()

    def reconnect(self) -> None:
        from attest.agent.tpm import Agent

        self.agent.close()
        self.agent = Agent(self.swtpm.tcti)


@pytest.fixture
def own_tpm(tmp_path: Path) -> Iterator[PowerCycledTpm]:
    from attest.agent.tpm import Agent
    from attest.swtpm import LocalCA, start_node_tpm

    swtpm = start_node_tpm(tmp_path / "state", LocalCA(tmp_path / "ca"))
    agent = Agent(swtpm.tcti)
    values = agent.read_pcrs("sha256:0,2,7")["sha256"]
    tpm = PowerCycledTpm(agent, [agent.create_ak()], {str(i): v.hex() for i, v in values.items()})
    tpm.swtpm = swtpm
    try:
        yield tpm
    finally:
        tpm.agent.close()
        swtpm.stop()


def _codes(record: dict) -> list[str]:
    return [r["code"] for r in record["verdict"]["reasons"]]


@pytest.mark.swtpm
def test_a_node_that_lost_power_attests_again_and_the_ledger_records_it(ledger_env, own_tpm):
    client = ledger_env.clients["Org1MSP"]
    register_node(
        client, own_tpm, "n1", 0, [("GPU-a", H100)], policy_id=_policy(ledger_env, own_tpm)
    )
    before = attest(client, own_tpm, "n1", 0)
    assert before["valid"] and "tpm_power_loss" not in _codes(before)
    own_tpm.power_cycle()
    after = attest(client, own_tpm, "n1", 0)
    assert after["valid"] is True, after["verdict"]["reasons"]
    assert "tpm_power_loss" in _codes(after)
    assert after["verdict"]["clock"]["reset_count"] > before["verdict"]["clock"]["reset_count"]
    stored = json.loads(
        client.evaluate("GetAttestation", js({"attestation_id": after["attestation_id"]}))
    )
    assert "tpm_power_loss" in _codes(stored)
    assert attest(client, own_tpm, "n1", 0)["valid"] is True  # and it goes on attesting


@pytest.mark.swtpm
def test_a_rolled_back_tpm_is_refused_against_the_ledgers_record(ledger_env, own_tpm):
    client = ledger_env.clients["Org1MSP"]
    register_node(
        client, own_tpm, "n1", 0, [("GPU-a", H100)], policy_id=_policy(ledger_env, own_tpm)
    )
    own_tpm.agent.close()
    own_tpm.swtpm.stop()
    state = own_tpm.swtpm.state_dir
    saved = {p.name: p.read_bytes() for p in state.glob("tpm2-00.*")}
    own_tpm.swtpm.start()
    own_tpm.power_cycle()
    assert attest(client, own_tpm, "n1", 0)["valid"] is True
    own_tpm.agent.close()
    own_tpm.swtpm.stop()
    for name, data in saved.items():  # the state as it was before that power loss
        (state / name).write_bytes(data)
    own_tpm.swtpm.start()
    own_tpm.reconnect()
    record = attest(client, own_tpm, "n1", 0)
    assert record["valid"] is False
    assert _codes(record)[0] == "reset_count_decreased", record["verdict"]["reasons"]


def _policy(ledger_env, tpm: NodeTpm) -> str:
    return approve_pcr_policy(ledger_env, tpm.golden)
