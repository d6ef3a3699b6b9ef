"""Where a Fabric network lives: its hosts, their folders, nodes, ports and keys.

One `Layout` names everything the bring-up writes and every process it starts, so `up`,
`down`, `status`, the tests and the web app's settings all agree on a path or a port without
restating it. The shape is fixed by the product: a Raft ordering service of three orderers
(one ordering organisation, its CA beside orderer0) and two application organisations with
one CA server, one peer and one chaincode server each.

Each party (`orderer0`..`orderer2`, `Org1MSP`, `Org2MSP`) is a host: its private files live
under `hosts/<party>/` and its nodes listen on its address (`addresses`, default 127.0.0.1,
the loopback network). What a party publishes for the others (CA certificates, TLS roots, a
consenter's TLS certificate) lives under `public/<name>/`. On one machine every host's folder
sits under one root; on separate machines each root holds its own host's folder and copies of
the others' public folders.

Ports, from `base_port` (default 7050):

| node                 | ports                                                         |
|----------------------|---------------------------------------------------------------|
| orderer k (0..2)     | base+10k: client and cluster, +1: admin (osnadmin), +2: ops    |
| ordering org's CA    | base+3: Fabric CA (on orderer0's host), +4: its ops            |
| peer of org j (0..1) | base+100+10j: peer and gateway, +1: chaincode, +2: ops,       |
|                      | +3: that organisation's chaincode server (CCaaS),             |
|                      | +4: its Fabric CA, +5: the CA's ops                           |
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chaincode_client.fabric_network.build import (
    BuildError,
    BuildSpec,
    build_dir,
    cache_root,
    read_stamp,
    sampleconfig_dir,
)

DEFAULT_BASE_PORT = 7050
DEFAULT_CHANNEL = "wattlease"
DEFAULT_CHAINCODE = "wattlease"
ORDERER_COUNT = 3
ORDERER_DOMAIN = "example.com"
ORDERER_MSP = "OrdererMSP"
ORDERER_ADMIN_HOST = "orderer0"  # the party whose host runs the ordering org's CA and admin
HOST = "127.0.0.1"
MAX_PORT = 65535
PORTS_USED_ABOVE_BASE = 134  # the highest offset in the table above, plus one
ORDERER_CA = "ca.orderer"  # the ordering organisation's CA server (a process name)


class NetworkError(Exception):
    """The network could not be brought up or used; the message says which step and why."""


@dataclass(frozen=True)
class FabricInstall:
    """Fabric's binaries, the sample configuration they read, and the CCaaS builder."""

    bin_dir: Path
    config_dir: Path  # holds core.yaml and orderer.yaml, read then rewritten per node
    ccaas_dir: Path  # a peer's externalBuilders[].path: its bin/ has detect, build, release

    def binary(self, name: str) -> str:
        return str(self.bin_dir / name)


def find_install(env: Mapping[str, str] | None = None) -> FabricInstall:
    """Fabric's binaries from `FABRIC_BIN_DIR` (a release's bin/, with ../config and
    ../builders/ccaas beside it), else the project's pinned, verified build cache."""
    env = os.environ if env is None else env
    given = env.get("FABRIC_BIN_DIR", "").strip()
    if given:
        bin_dir = Path(given).resolve()
        config = Path(env.get("FABRIC_CONFIG_DIR") or bin_dir.parent / "config")
        ccaas = Path(env.get("FABRIC_CCAAS_BUILDER_DIR") or bin_dir.parent / "builders" / "ccaas")
        source = "FABRIC_BIN_DIR"
    else:
        spec = BuildSpec()
        root = build_dir(spec, cache_root(env))
        if read_stamp(spec, cache_root(env)) is None:
            raise NetworkError(
                f"no verified Fabric build at {root}: run "
                "`python -m chaincode_client.fabric_network build`, or set FABRIC_BIN_DIR to "
                "the bin/ folder of a Fabric 2.5 release"
            )
        bin_dir, ccaas, source = root / "bin", root / "ccaas", "the build cache"
        config = Path(env["FABRIC_CONFIG_DIR"]) if env.get("FABRIC_CONFIG_DIR") else root / "config"
        if not (config / "core.yaml").is_file():
            try:
                config = sampleconfig_dir(env)
            except BuildError as exc:
                raise NetworkError(str(exc)) from exc
    install = FabricInstall(bin_dir, config, ccaas)
    missing = [
        str(p)
        for p in (
            *(bin_dir / b for b in ("peer", "orderer", "configtxgen", "osnadmin")),
            config / "core.yaml",
            config / "orderer.yaml",
            *(ccaas / "bin" / b for b in ("detect", "build", "release")),
        )
        if not p.is_file()
    ]
    if missing:
        raise NetworkError(f"Fabric install from {source} is incomplete; missing: {missing}")
    return install


@dataclass(frozen=True)
class Orderer:
    index: int
    host: str  # the name in its certificates
    port: int
    admin_port: int
    ops_port: int
    ip: str = HOST  # its host's address

    @property
    def name(self) -> str:
        return f"orderer{self.index}"

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


@dataclass(frozen=True)
class Org:
    index: int  # 1-based, as in Org1MSP
    peer_port: int
    chaincode_port: int  # the peer's chaincode listener (unused by CCaaS, but bound)
    ops_port: int
    ccaas_port: int  # this organisation's chaincode server
    ca_port: int  # its Fabric CA server (identity CA and TLS CA)
    ca_ops_port: int
    ip: str = HOST  # its host's address

    @property
    def msp_id(self) -> str:
        return f"Org{self.index}MSP"

    @property
    def domain(self) -> str:
        return f"org{self.index}.example.com"

    @property
    def peer_host(self) -> str:
        return f"peer0.{self.domain}"

    @property
    def peer_name(self) -> str:
        return f"peer0.org{self.index}"

    @property
    def ccaas_name(self) -> str:
        return f"ccaas.org{self.index}"

    @property
    def ca_name(self) -> str:
        return f"ca.org{self.index}"

    @property
    def peer_address(self) -> str:
        return f"{self.ip}:{self.peer_port}"


@dataclass(frozen=True)
class Layout:
    root: Path
    base_port: int = DEFAULT_BASE_PORT
    channel: str = DEFAULT_CHANNEL
    chaincode: str = DEFAULT_CHAINCODE
    client_mtls: bool = False  # peers require TLS client certificates from applications
    addresses: Mapping[str, str] = field(default_factory=dict)  # party -> its host's address

    def __post_init__(self) -> None:
        if not 1024 <= self.base_port <= MAX_PORT - PORTS_USED_ABOVE_BASE:
            raise NetworkError(
                f"base port {self.base_port}: must be in [1024, "
                f"{MAX_PORT - PORTS_USED_ABOVE_BASE}] (the network uses base..base+"
                f"{PORTS_USED_ABOVE_BASE - 1})"
            )

    def address_of(self, party: str) -> str:
        return self.addresses.get(party, HOST)

    @property
    def parties(self) -> tuple[str, ...]:
        return (*(o.name for o in self.orderers), *(g.msp_id for g in self.orgs))

    def present_parties(self) -> frozenset[str]:
        """The parties whose host folder is under this root (all of them on loopback)."""
        return frozenset(p for p in self.parties if self.host_dir(p).is_dir())

    @property
    def orderers(self) -> tuple[Orderer, ...]:
        b = self.base_port
        return tuple(
            Orderer(
                k,
                f"orderer{k}.{ORDERER_DOMAIN}",
                b + 10 * k,
                b + 10 * k + 1,
                b + 10 * k + 2,
                self.address_of(f"orderer{k}"),
            )
            for k in range(ORDERER_COUNT)
        )

    @property
    def orgs(self) -> tuple[Org, ...]:
        b = self.base_port + 100
        return tuple(
            Org(
                j + 1,
                peer_port=b + 10 * j,
                chaincode_port=b + 10 * j + 1,
                ops_port=b + 10 * j + 2,
                ccaas_port=b + 10 * j + 3,
                ca_port=b + 10 * j + 4,
                ca_ops_port=b + 10 * j + 5,
                ip=self.address_of(f"Org{j + 1}MSP"),
            )
            for j in range(2)
        )

    @property
    def orderer_ca_ports(self) -> tuple[int, int]:
        return self.base_port + 3, self.base_port + 4

    def org(self, msp_id: str) -> Org:
        for org in self.orgs:
            if org.msp_id == msp_id:
                return org
        raise NetworkError(f"no organisation {msp_id!r} in this network")

    def endpoints(self, parties: Collection[str] | None = None) -> list[tuple[str, int]]:
        """(address, port) of every listener of `parties` (default: all)."""
        wanted = set(self.parties if parties is None else parties)
        out = [
            (o.ip, p)
            for o in self.orderers
            if o.name in wanted
            for p in (o.port, o.admin_port, o.ops_port)
        ]
        if ORDERER_ADMIN_HOST in wanted:
            out += [(self.address_of(ORDERER_ADMIN_HOST), p) for p in self.orderer_ca_ports]
        out += [
            (g.ip, p)
            for g in self.orgs
            if g.msp_id in wanted
            for p in (g.peer_port, g.chaincode_port, g.ops_port, g.ccaas_port, g.ca_port)
        ]
        return out

    def ports(self) -> list[int]:
        return [port for _, port in self.endpoints()]

    # -- folders -----------------------------------------------------------------------

    def host_dir(self, party: str) -> Path:
        """A party's own folder: its private keys, node data, logs and pid files."""
        return self.root / "hosts" / party

    def public_dir(self, name: str) -> Path:
        """What party or organisation `name` publishes: certificates only, never a key."""
        return self.root / "public" / name

    @property
    def state_file(self) -> Path:
        return self.root / "network.json"

    def party_of(self, process: str) -> str:
        for o in self.orderers:
            if process == o.name:
                return o.name
        if process == ORDERER_CA:
            return ORDERER_ADMIN_HOST
        for g in self.orgs:
            if process in (g.peer_name, g.ccaas_name, g.ca_name):
                return g.msp_id
        raise NetworkError(f"no process {process!r} in this network: {self.process_names()}")

    def node_dir(self, name: str) -> Path:
        return self.host_dir(self.party_of(name)) / "nodes" / name

    def log_file(self, name: str) -> Path:
        return self.host_dir(self.party_of(name)) / "logs" / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.host_dir(self.party_of(name)) / "run" / f"{name}.pid"

    def process_names(self, parties: Collection[str] | None = None) -> list[str]:
        """Every process, in start order (CAs first), of `parties` (default: all)."""
        names = [ORDERER_CA] + [g.ca_name for g in self.orgs]
        names += [o.name for o in self.orderers]
        names += [g.peer_name for g in self.orgs] + [g.ccaas_name for g in self.orgs]
        if parties is None:
            return names
        return [n for n in names if self.party_of(n) in parties]

    # -- keys and certificates (in the shape cryptogen wrote, made by Fabric CA) -------------

    def ca_home(self, party: str) -> Path:
        """The Fabric CA server's home: the CAs' private keys (0700)."""
        return self.host_dir(party) / "fabric-ca"

    def orderer_org_dir(self) -> Path:
        """The ordering organisation's folder on its admin's host (orderer0)."""
        return self.host_dir(ORDERER_ADMIN_HOST) / "crypto" / ORDERER_DOMAIN

    def orderer_dir(self, orderer: Orderer) -> Path:
        return self.host_dir(orderer.name) / "crypto" / "orderers" / orderer.host

    def orderer_tls_ca(self) -> Path:
        return self.public_dir(ORDERER_MSP) / "msp" / "tlscacerts" / "tlsca.pem"

    def orderer_admin_tls(self) -> Path:
        return self.orderer_org_dir() / "users" / f"Admin@{ORDERER_DOMAIN}" / "tls"

    def consenter_cert(self, orderer: Orderer) -> Path:
        """Orderer `orderer`'s TLS certificate as it publishes it (the channel names it)."""
        return self.public_dir(orderer.name) / "tls" / "server.crt"

    def org_dir(self, org: Org) -> Path:
        return self.host_dir(org.msp_id) / "crypto" / org.domain

    def peer_dir(self, org: Org) -> Path:
        return self.org_dir(org) / "peers" / org.peer_host

    def peer_tls_ca(self, org: Org) -> Path:
        return self.public_dir(org.msp_id) / "msp" / "tlscacerts" / "tlsca.pem"

    def user_dir(self, org: Org, user: str) -> Path:
        """An identity from the org's CA: `Admin` (OU admin) or `User1` (OU client)."""
        return self.org_dir(org) / "users" / f"{user}@{org.domain}"

    def ccaas_tls_dir(self, org: Org) -> Path:
        return self.org_dir(org) / "ccaas-tls"

    def client_env(self, msp_id: str, user: str = "User1") -> dict[str, str]:
        """The FABRIC_* settings (docs/fabric.md) for an application of `msp_id`."""
        org = self.org(msp_id)
        user_dir = self.user_dir(org, user)
        env = {
            "LEDGER_BACKEND": "fabric",
            "FABRIC_PEER_ENDPOINT": org.peer_address,
            "FABRIC_TLS_CA": str(self.peer_tls_ca(org)),
            "FABRIC_PEER_HOST_ALIAS": org.peer_host,
            "FABRIC_MSP_ID": msp_id,
            "FABRIC_MSP_DIR": str(user_dir / "msp"),
            "FABRIC_CHANNEL": self.channel,
            "FABRIC_CHAINCODE": self.chaincode,
        }
        # submit returns once every organisation's peer has the block: a client of any
        # organisation then reads what was just written
        env["FABRIC_CONFIRM_PEERS"] = ",".join(
            f"{g.peer_address}={self.peer_tls_ca(g)}" for g in self.orgs if g != org
        )
        if self.client_mtls:
            env["FABRIC_TLS_CLIENT_CERT"] = str(user_dir / "tls" / "client.crt")
            env["FABRIC_TLS_CLIENT_KEY"] = str(user_dir / "tls" / "client.key")
        return env
