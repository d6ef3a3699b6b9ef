"""The project's own contract (ledger/contract/chaincode.py) served as chaincode-as-a-service
through the adapter, and the CCaaS package the peers install."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import json
import logging
import tarfile
from pathlib import Path

import pytest

from attest.public import software_ak_public
from chaincode_client.fabric.identity import load_msp
from chaincode_client.fabric_network.ccaas_server import (
    PER_MESSAGE_WARNING,
    ServerConfigError,
    drop_per_message_warning,
    load_factory,
    main,
)
from chaincode_client.fabric_network.package import (
    Connection,
    PackageError,
    build_package,
    package_id,
)
from chaincode_client.fabric_network.shim_adapter import make_server
from tests.fabric.pki import make_msp
from tests.fabric.shim_driver import PeerDriver

# a restricted ECDSA signing key's public area, as a TPM would report it (key made here)
AK_PUBLIC = software_ak_public()
NODE = {
    "node_id": "node-1",
    "org": "Org1MSP",
    "ak_public": base64.b64encode(AK_PUBLIC).decode(),
    "gpus": [{"uuid": "GPU-1", "generation": "H100"}],
    "pcr_policy_id": "zero",
}
POLICY = {"kind": "pcr_policy", "key": "zero"}
POLICY_DOCUMENT = {"pcrs": {"sha256": {"0": "00" * 32}}, "max_age_s": 3600}


def test_the_wattlease_contract_registers_a_node_and_its_event_reaches_the_peer(tmp_path: Path):
    """Org1's admin proposes the PCR policy, Org2's approves it, a client of Org1 registers
    a node under it: three sessions with the served contract over one peer state."""
    user = load_msp(make_msp(tmp_path / "user"), "Org1MSP")
    admins = [
        load_msp(make_msp(tmp_path / org, org=f"{org}.example.com", ou="admin"), msp)
        for org, msp in (("org1", "Org1MSP"), ("org2", "Org2MSP"))
    ]
    state: dict[str, bytes] = {}

    async def invoke(address: str, who, fn: str, request: dict):  # type: ignore[no-untyped-def]
        identity, signer = who
        async with PeerDriver(address, identity, signer, state, chaincode="wattlease") as peer:
            return await peer.invoke(fn, json.dumps(request))

    async def scenario() -> tuple[object, object]:
        server, port = make_server(
            load_factory("ledger.contract.chaincode:new_chaincode"), "wattlease:1", "127.0.0.1:0"
        )
        await server.start()
        address = f"127.0.0.1:{port}"
        try:
            proposed, _ = await invoke(
                address, admins[0], "ProposePolicy", {**POLICY, "document": POLICY_DOCUMENT}
            )
            assert proposed.status == 200, proposed.message
            proposal_id = json.loads(proposed.payload)["proposal_id"]
            approved, _ = await invoke(
                address, admins[1], "ApprovePolicy", {"proposal_id": proposal_id}
            )
            assert approved.status == 200, approved.message
            return await invoke(address, user, "RegisterNode", NODE)
        finally:
            await server.stop(None)

    response, completed = asyncio.run(scenario())
    assert response.status == 200, response.message
    assert json.loads(response.payload)["node_id"] == "node-1"
    assert completed.chaincode_event.event_name == "NodeRegistered"
    assert json.loads(completed.chaincode_event.payload)["node_id"] == "node-1"
    assert any(b"node-1" in key.encode() for key in state)


def test_server_refuses_to_start_without_its_id(capsys: pytest.CaptureFixture[str]):
    assert main([], env={}) == 2
    assert "CHAINCODE_ID" in capsys.readouterr().err


def test_the_shims_per_message_warning_is_dropped_and_other_warnings_kept():
    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.WARNING, "handler.py", 1, msg, None, None)

    assert not drop_per_message_warning(record(PER_MESSAGE_WARNING))
    assert drop_per_message_warning(record("No queued message found for tx_context_id %s"))


def test_factory_must_return_a_chaincode():
    with pytest.raises(ServerConfigError, match="not a Chaincode"):
        load_factory("builtins:dict")


def _members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def test_package_holds_ccaas_metadata_and_connection():
    pkg = build_package("wattlease_1.0", Connection("127.0.0.1:9999", root_cert="PEM"))
    files = _members(pkg)
    assert json.loads(files["metadata.json"]) == {"label": "wattlease_1.0", "type": "ccaas"}
    conn = json.loads(_members(files["code.tar.gz"])["connection.json"])
    assert conn["address"] == "127.0.0.1:9999"
    assert conn["tls_required"] is True and conn["client_auth_required"] is False
    assert gzip.decompress(pkg)  # a plain gzip stream, as the peer expects


def test_package_and_its_id_are_deterministic():
    one = build_package("wattlease_1.0", Connection("127.0.0.1:9999"))
    two = build_package("wattlease_1.0", Connection("127.0.0.1:9999"))
    assert one == two
    assert package_id("wattlease_1.0", one).startswith("wattlease_1.0:")
    assert package_id("wattlease_1.0", one) != package_id(
        "wattlease_1.0", build_package("wattlease_1.0", Connection("127.0.0.1:9998"))
    )


@pytest.mark.parametrize("label", ["", "-x", "a b", "a:b", "x" * 129])
def test_package_rejects_a_bad_label(label: str):
    with pytest.raises(PackageError, match="label"):
        build_package(label, Connection("127.0.0.1:9999"))
