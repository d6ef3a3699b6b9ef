"""One real Fabric network per test session (tests marked `fabric`), and per-test contracts.

The network is Fabric's own orderer and peer binaries from the project's build cache (or
FABRIC_BIN_DIR), brought up on free loopback ports by the product's own bring-up code. Each
test that needs an empty ledger gets a chaincode of its own: a new name defined on the channel
(both organisations approve, both must endorse) backed by the same installed package, so its
state starts empty, exactly as a new contract deployment would.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from chaincode_client.fabric import FabricGatewayClient
from chaincode_client.fabric.config import FabricSettings
from chaincode_client.fabric_network.enroll import enroll
from chaincode_client.fabric_network.layout import HOST, PORTS_USED_ABOVE_BASE, Layout
from chaincode_client.fabric_network.network import Network

FIRST_BASE_PORT = 21000
BASE_PORT_STEP = 200
_names = itertools.count(1)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_base_port() -> int:
    for base in range(FIRST_BASE_PORT, 60000, BASE_PORT_STEP):
        if all(_free(base + offset) for offset in range(PORTS_USED_ABOVE_BASE)):
            return base
    raise RuntimeError("no free range of loopback ports for a Fabric network")


def start_network(root: Path, **layout_options: object) -> Iterator[Network]:
    """Bring a network up under `root`; stop it (no process left) when the caller is done."""
    network = Network.create(
        Layout(root, base_port=free_base_port(), **layout_options),  # type: ignore[arg-type]
        log=lambda line: print(f"fabric: {line}", flush=True),
    )
    try:
        network.up()
        yield network
    finally:
        busy = network.down()
        assert not busy, f"ports still open after down: {busy}"


def new_chaincode(network: Network, prefix: str = "t") -> str:
    name = f"{prefix}{next(_names)}-{os.getpid()}"
    network.deploy(name)
    return name


def client(
    network: Network,
    msp_id: str,
    chaincode: str,
    user: str = "User1",
    msp_dir: Path | None = None,
) -> FabricGatewayClient:
    env = network.layout.client_env(msp_id, user)
    env["FABRIC_CHAINCODE"] = chaincode
    if msp_dir is not None:
        env["FABRIC_MSP_DIR"] = str(msp_dir)
    return FabricGatewayClient.from_settings(FabricSettings.from_env(env))


def new_user_client(
    network: Network, msp_id: str, chaincode: str, role: str = "client"
) -> FabricGatewayClient:
    """A client with an identity of `msp_id` issued just now by that organisation's CA, with
    the NodeOU `role` (client, or admin)."""
    org = network.layout.org(msp_id)
    msp = enroll(network.layout, org, f"{role}{next(_names)}", role=role)
    return client(network, msp_id, chaincode, msp_dir=msp)
