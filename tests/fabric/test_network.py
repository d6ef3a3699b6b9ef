"""The product's network bring-up on Fabric's own binaries: up is idempotent, mutual TLS for
clients works when asked for, down leaves no process and no port behind."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from chaincode_client.fabric import FabricGatewayClient
from chaincode_client.fabric_network import processes
from chaincode_client.fabric_network.fabric_ca import find_ca_install
from chaincode_client.fabric_network.layout import Layout, NetworkError
from chaincode_client.fabric_network.network import Network
from chaincode_client.interface import LedgerUnavailable
from tests.fabric.network_fixture import free_base_port

ROOT = Path(__file__).resolve().parents[2]


def cli(root: Path, base_port: int, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "chaincode_client.fabric_network",
            "--root",
            str(root),
            "--base-port",
            str(base_port),
            *argv,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.fabric
def test_up_twice_then_down_leaves_nothing_then_up_again_resumes(tmp_path):
    root, base = tmp_path / "net", free_base_port()
    first = cli(root, base, "up", "--client-mtls")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[11/11]" in first.stdout and "network up in" in first.stdout
    layout = Layout(root, base_port=base, client_mtls=True)
    try:
        second = cli(root, base, "--client-mtls", "up")
        assert second.returncode == 0, second.stderr
        for step in ("crypto material", "genesis block", "orderers:", "peers:"):
            line = next(x for x in second.stdout.splitlines() if step in x)
            assert "already" in line, line
        status = json.loads(cli(root, base, "status").stdout.split("\n", 1)[1])
        assert all(status["processes"].values()), status

        # mutual TLS: the application's client certificate is required by the peers
        env = layout.client_env("Org1MSP")
        with closing(FabricGatewayClient.from_env(env)) as client:
            assert client.submit("GetHistory", json.dumps({"key": "node:x"})).valid
        anonymous = {k: v for k, v in env.items() if not k.startswith("FABRIC_TLS_CLIENT")}
        with (
            closing(FabricGatewayClient.from_env(anonymous)) as client,
            pytest.raises(LedgerUnavailable),
        ):
            client.evaluate("GetHistory", json.dumps({"key": "node:x"}))
    finally:
        down = cli(root, base, "down")
    assert down.returncode == 0, down.stderr
    assert all(processes.running_pid(layout, n) is None for n in layout.process_names())
    assert processes.wait_ports_closed(layout.endpoints(), timeout_s=0) == []
    leftover = subprocess.run(["pgrep", "-f", str(root)], capture_output=True, text=True)
    assert leftover.stdout == ""

    # the ledgers survive a down: up brings the same channel back, nothing created twice
    again = cli(root, base, "--client-mtls", "up")
    try:
        assert again.returncode == 0, again.stdout + again.stderr
        assert "joined" not in again.stdout  # already members of the channel
        with closing(FabricGatewayClient.from_env(layout.client_env("Org2MSP"))) as client:
            history = client.evaluate("GetHistory", json.dumps({"key": "node:x"}))
            assert json.loads(history) == []
    finally:
        assert cli(root, base, "down", "--purge").returncode == 0
    assert not root.exists()


def test_a_missing_fabric_install_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("WATTLEASE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("FABRIC_BIN_DIR", raising=False)
    with pytest.raises(NetworkError, match="fabric_network build"):
        Network.create(Layout(tmp_path / "net"))
    monkeypatch.setenv("FABRIC_BIN_DIR", str(tmp_path / "release" / "bin"))
    with pytest.raises(NetworkError, match="incomplete; missing"):
        Network.create(Layout(tmp_path / "net"))


def test_layout_refuses_ports_it_cannot_use(tmp_path):
    with pytest.raises(NetworkError, match="base port 80"):
        Layout(tmp_path, base_port=80)
    with pytest.raises(NetworkError, match="base port 65500"):
        Layout(tmp_path, base_port=65500)


def test_a_missing_fabric_ca_install_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("WATTLEASE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("FABRIC_CA_BIN_DIR", raising=False)
    with pytest.raises(NetworkError, match=r"go install github.com/hyperledger/fabric-ca/cmd/"):
        find_ca_install()
    bin_dir = tmp_path / "release" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "fabric-ca-server").write_text("")
    monkeypatch.setenv("FABRIC_CA_BIN_DIR", str(bin_dir))
    with pytest.raises(NetworkError, match=r"incomplete; missing.*fabric-ca-client"):
        find_ca_install()


def test_each_party_has_its_own_folder_and_address(tmp_path):
    addresses = {"orderer1": "10.0.0.2", "Org2MSP": "10.0.0.5"}
    layout = Layout(tmp_path, addresses=addresses)
    org1, org2 = layout.orgs
    assert (org1.peer_address, org2.peer_address) == ("127.0.0.1:7150", "10.0.0.5:7160")
    assert layout.orderers[1].address == "10.0.0.2:7060"
    assert (
        layout.party_of("ccaas.org2") == "Org2MSP" and layout.party_of("ca.orderer") == "orderer0"
    )
    assert layout.peer_dir(org2).is_relative_to(layout.host_dir("Org2MSP"))
    assert layout.orderer_dir(layout.orderers[2]).is_relative_to(layout.host_dir("orderer2"))
    # what a host reads of another party is only ever under public/
    assert layout.peer_tls_ca(org1).is_relative_to(tmp_path / "public" / "Org1MSP")
    assert layout.orderer_tls_ca().is_relative_to(tmp_path / "public" / "OrdererMSP")
    assert ("10.0.0.5", 7164) in layout.endpoints(["Org2MSP"])
    assert layout.process_names(["Org2MSP"]) == ["ca.org2", "peer0.org2", "ccaas.org2"]
