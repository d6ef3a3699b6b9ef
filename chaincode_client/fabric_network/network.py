"""Bring a loopback Fabric network up and down: three Raft orderers, two organisations with a
peer and a chaincode server each, the channel, and the Wattlease contract on it.

`up()` is idempotent: every step first checks whether it is already done (crypto material,
genesis block, a node running, a channel joined, a package installed, a definition
committed) and skips it, so running it twice, or after a crash, finishes the job instead of
starting over. `down()` stops every process and waits until each port is closed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from chaincode_client.fabric import FabricGatewayClient
from chaincode_client.fabric_network import configs, processes
from chaincode_client.fabric_network.enroll import issue_ccaas_tls
from chaincode_client.fabric_network.layout import (
    HOST,
    FabricInstall,
    Layout,
    NetworkError,
    Org,
    find_install,
)
from chaincode_client.fabric_network.package import Connection, build_package, package_id
from chaincode_client.interface import LedgerUnavailable

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_START_TIMEOUT_S = 60.0
RAFT_READY_TIMEOUT_S = 60.0
GATEWAY_READY_TIMEOUT_S = 90.0
CHAINCODE_LABEL = "wattlease"
CHAINCODE_VERSION = "1.0"
CHAINCODE_FACTORY = "ledger.contract.chaincode:new_chaincode"

GATEWAY_PROBE = json.dumps({"key": "node:gateway-probe"})  # a read any contract answers
GATEWAY_POLL_S = 0.25

Log = Callable[[str], None]
T = TypeVar("T")


def _until_endorsed(attempt: Callable[[], T], who: str) -> tuple[T, int]:
    """Call `attempt` until it stops raising LedgerUnavailable (GATEWAY_READY_TIMEOUT_S at
    most); returns its result and the number of tries."""
    deadline = time.monotonic() + GATEWAY_READY_TIMEOUT_S
    tries = 0
    while True:
        tries += 1
        try:
            return attempt(), tries
        except LedgerUnavailable as exc:
            if time.monotonic() > deadline:
                raise NetworkError(
                    f"no endorsement by {who} in {GATEWAY_READY_TIMEOUT_S:.0f}s: {exc}"
                ) from exc
            time.sleep(GATEWAY_POLL_S)


@dataclass
class Network:
    layout: Layout
    install: FabricInstall
    log: Log = print

    @classmethod
    def create(cls, layout: Layout, log: Log = print) -> Network:
        return cls(layout, find_install(), log)

    # -- the whole network ---------------------------------------------------------------

    def up(self) -> float:
        """Bring every part up (skipping what is already there); returns the seconds taken."""
        started = time.monotonic()
        self.layout.root.mkdir(parents=True, exist_ok=True)
        steps: list[tuple[str, Callable[[], str | None]]] = [
            ("crypto material (cryptogen)", self._crypto),
            ("channel genesis block (configtxgen)", self._genesis),
            ("orderers", self._start_orderers),
            ("orderers join the channel (osnadmin)", self._join_orderers),
            ("Raft leader elected", self._wait_raft_leader),
            ("peers", self._start_peers),
            ("peers join the channel", self._join_peers),
            ("chaincode packages installed", self._install_packages),
            ("chaincode servers", self._start_chaincode_servers),
            (f"chaincode {self.layout.chaincode!r} approved and committed", self._deploy_default),
            ("both organisations endorse through the gateway", self._wait_gateway),
        ]
        for i, (title, step) in enumerate(steps, 1):
            t0 = time.monotonic()
            note = step()
            self.log(
                f"[{i}/{len(steps)}] {title}: {note or 'done'} "
                f"({time.monotonic() - t0:.1f}s, {time.monotonic() - started:.1f}s total)"
            )
        seconds = time.monotonic() - started
        self._write_state(up_seconds=round(seconds, 1))
        return seconds

    def down(self) -> list[int]:
        """Stop every process; returns ports still open afterwards (empty on success)."""
        for name in reversed(self.layout.process_names()):
            if processes.stop(self.layout, name):
                self.log(f"stopped {name}")
        return processes.wait_ports_closed(self.layout.ports())

    def status(self) -> dict[str, object]:
        state = self._read_state()
        return {
            "root": str(self.layout.root),
            "processes": {
                name: processes.running_pid(self.layout, name)
                for name in self.layout.process_names()
            },
            "channel": self.layout.channel,
            "chaincodes": state.get("chaincodes", {}),
            "package_ids": state.get("package_ids", {}),
            "up_seconds": state.get("up_seconds"),
        }

    def is_up(self) -> bool:
        return all(
            processes.running_pid(self.layout, n) for n in self.layout.process_names()
        ) and self.layout.chaincode in self._read_state().get("chaincodes", {})

    # -- state file ----------------------------------------------------------------------

    def _read_state(self) -> dict:
        try:
            return json.loads(self.layout.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _write_state(self, **changes: object) -> None:
        state = {**self._read_state(), **changes}
        tmp = self.layout.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.layout.state_file)

    # -- steps ---------------------------------------------------------------------------

    def _crypto(self) -> str | None:
        if (self.layout.crypto / "peerOrganizations").is_dir():
            return "already there"
        cfg = self.layout.root / "config" / "crypto-config.yaml"
        configs.write_yaml(cfg, configs.crypto_config(self.layout))
        tmp = self.layout.root / "crypto.tmp"
        processes.run(
            [
                self.install.binary("cryptogen"),
                "generate",
                f"--config={cfg}",
                f"--output={tmp}",
            ],
            os.environ,
            "cryptogen generate",
        )
        tmp.replace(self.layout.crypto)
        for org in self.layout.orgs:
            issue_ccaas_tls(self.layout, org)
        return None

    def _genesis(self) -> str | None:
        block = self.genesis_block
        if block.is_file():
            return "already there"
        cfg_dir = self.layout.root / "config"
        configs.write_yaml(cfg_dir / "configtx.yaml", configs.configtx(self.layout))
        tmp = block.with_suffix(".tmp")
        processes.run(
            [
                self.install.binary("configtxgen"),
                "-configPath",
                str(cfg_dir),
                "-profile",
                "WattleaseChannel",
                "-channelID",
                self.layout.channel,
                "-outputBlock",
                str(tmp),
            ],
            os.environ,
            "configtxgen",
        )
        tmp.replace(block)
        return None

    @property
    def genesis_block(self) -> Path:
        return self.layout.root / "config" / f"{self.layout.channel}.block"

    def _start_orderers(self) -> str | None:
        started = [o.name for o in self.layout.orderers if self.start_node(o.name)]
        return f"started {', '.join(started)}" if started else "already running"

    def _start_peers(self) -> str | None:
        started = [g.peer_name for g in self.layout.orgs if self.start_node(g.peer_name)]
        return f"started {', '.join(started)}" if started else "already running"

    def start_node(self, name: str) -> bool:
        """Start orderer, peer or chaincode server `name` unless it runs; wait for its port."""
        if processes.running_pid(self.layout, name) is not None:
            return False
        for orderer in self.layout.orderers:
            if orderer.name == name:
                cfg = self.layout.node_dir(name) / "config"
                configs.write_yaml(
                    cfg / "orderer.yaml", configs.orderer_yaml(self.install, self.layout, orderer)
                )
                env = {**configs.NODE_ENV_DEFAULTS, **os.environ, "FABRIC_CFG_PATH": str(cfg)}
                pid = processes.start(
                    self.layout, name, [self.install.binary("orderer")], env, self.layout.root
                )
                processes.wait_port(
                    self.layout, name, pid, orderer.admin_port, NODE_START_TIMEOUT_S
                )
                return True
        for org in self.layout.orgs:
            if org.peer_name == name:
                cfg = self.layout.node_dir(name) / "config"
                configs.write_yaml(
                    cfg / "core.yaml", configs.core_yaml(self.install, self.layout, org)
                )
                env = {**configs.NODE_ENV_DEFAULTS, **os.environ, "FABRIC_CFG_PATH": str(cfg)}
                argv = [self.install.binary("peer"), "node", "start"]
                pid = processes.start(self.layout, name, argv, env, self.layout.root)
                processes.wait_port(self.layout, name, pid, org.peer_port, NODE_START_TIMEOUT_S)
                return True
            if org.ccaas_name == name:
                self._start_ccaas(org)
                return True
        raise NetworkError(f"no process {name!r} in this network: {self.layout.process_names()}")

    def stop_node(self, name: str, sig: int = signal.SIGTERM) -> bool:
        """Stop one process (SIGKILL to simulate a crash); True if it was running."""
        return processes.stop(self.layout, name, sig)

    def _osnadmin(self, orderer_index: int, *argv: str) -> str:
        orderer = self.layout.orderers[orderer_index]
        tls = self.layout.orderer_admin_tls()
        return processes.run(
            [
                self.install.binary("osnadmin"),
                "channel",
                *argv,
                "-o",
                f"{HOST}:{orderer.admin_port}",
                "--ca-file",
                str(self.layout.orderer_tls_ca()),
                "--client-cert",
                str(tls / "client.crt"),
                "--client-key",
                str(tls / "client.key"),
            ],
            os.environ,
            f"osnadmin channel {argv[0]} on {orderer.name}",
        )

    def _orderer_channel(self, index: int) -> dict | None:
        out = self._osnadmin(index, "list", "--channelID", self.layout.channel)
        body = out[out.find("{") :] if "{" in out else ""
        try:
            info = json.loads(body)
        except ValueError:
            return None
        return info if isinstance(info, dict) and info.get("name") else None

    def _join_orderers(self) -> str | None:
        joined = []
        for orderer in self.layout.orderers:
            listing = self._osnadmin(orderer.index, "list")
            if f'"{self.layout.channel}"' in listing:
                continue
            self._osnadmin(
                orderer.index,
                "join",
                "--channelID",
                self.layout.channel,
                "--config-block",
                str(self.genesis_block),
            )
            joined.append(orderer.name)
        return f"joined {', '.join(joined)}" if joined else "already members"

    def _wait_raft_leader(self) -> str | None:
        deadline = time.monotonic() + RAFT_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            infos = [self._orderer_channel(o.index) for o in self.layout.orderers]
            if all(i and i.get("status") == "active" for i in infos):
                return f"height {max(int(i.get('height', 0)) for i in infos if i)}"
            time.sleep(0.5)
        raise NetworkError(
            f"the orderers did not elect a Raft leader in {RAFT_READY_TIMEOUT_S:.0f}s; "
            f"{processes.tail(self.layout, 'orderer0')}"
        )

    # -- the peer CLI, as an organisation's admin ---------------------------------------------

    def admin_env(self, org: Org) -> dict[str, str]:
        tls = self.layout.user_dir(org, "Admin") / "tls"
        env = {
            **os.environ,
            "FABRIC_CFG_PATH": str(self.layout.node_dir(org.peer_name) / "config"),
            "CORE_PEER_LOCALMSPID": org.msp_id,
            "CORE_PEER_MSPCONFIGPATH": str(self.layout.user_dir(org, "Admin") / "msp"),
            "CORE_PEER_ADDRESS": org.peer_address,
            "CORE_PEER_TLS_ENABLED": "true",
            "CORE_PEER_TLS_ROOTCERT_FILE": str(self.layout.peer_tls_ca(org)),
        }
        if self.layout.client_mtls:
            env.update(
                CORE_PEER_TLS_CLIENTAUTHREQUIRED="true",
                CORE_PEER_TLS_CLIENTCERT_FILE=str(tls / "client.crt"),
                CORE_PEER_TLS_CLIENTKEY_FILE=str(tls / "client.key"),
            )
        return env

    def peer_cli(self, org: Org, *argv: str, what: str, timeout_s: float = 120) -> str:
        args = [self.install.binary("peer"), *argv]
        if self.layout.client_mtls and argv and argv[0] in ("channel", "lifecycle"):
            tls = self.layout.user_dir(org, "Admin") / "tls"
            args += ["--clientauth", "--certfile", str(tls / "client.crt")]
            args += ["--keyfile", str(tls / "client.key")]
        return processes.run(args, self.admin_env(org), what, timeout_s)

    def _orderer_flags(self) -> list[str]:
        first = self.layout.orderers[0]
        return [
            "-o",
            first.address,
            "--ordererTLSHostnameOverride",
            first.host,
            "--tls",
            "--cafile",
            str(self.layout.orderer_tls_ca()),
        ]

    def _join_peers(self) -> str | None:
        joined = []
        for org in self.layout.orgs:
            listing = self.peer_cli(org, "channel", "list", what=f"{org.peer_name} channel list")
            if self.layout.channel in listing.split():
                continue
            self.peer_cli(
                org,
                "channel",
                "join",
                "-b",
                str(self.genesis_block),
                what=f"{org.peer_name} joins {self.layout.channel}",
            )
            joined.append(org.peer_name)
        return f"joined {', '.join(joined)}" if joined else "already members"

    # -- chaincode as a service ----------------------------------------------------------

    def package(self, org: Org) -> bytes:
        """The org's CCaaS package: its own chaincode server, over mutual TLS."""
        peer_tls = self.layout.peer_dir(org) / "tls"
        return build_package(
            CHAINCODE_LABEL,
            Connection(
                f"{HOST}:{org.ccaas_port}",
                root_cert=self.layout.peer_tls_ca(org).read_text(),
                client_cert=(peer_tls / "server.crt").read_text(),
                client_key=(peer_tls / "server.key").read_text(),
            ),
        )

    def package_id(self, org: Org) -> str:
        return package_id(CHAINCODE_LABEL, self.package(org))

    def _install_packages(self) -> str | None:
        installed = []
        for org in self.layout.orgs:
            pkg_id = self.package_id(org)
            listing = self.peer_cli(
                org, "lifecycle", "chaincode", "queryinstalled", what="queryinstalled"
            )
            if pkg_id not in listing:
                path = self.layout.root / "config" / f"ccaas-{org.domain}.tar.gz"
                path.write_bytes(self.package(org))
                self.peer_cli(
                    org,
                    "lifecycle",
                    "chaincode",
                    "install",
                    str(path),
                    what=f"install the chaincode package on {org.peer_name}",
                )
                installed.append(org.peer_name)
        self._write_state(package_ids={g.msp_id: self.package_id(g) for g in self.layout.orgs})
        return f"installed on {', '.join(installed)}" if installed else "already installed"

    def _start_ccaas(self, org: Org) -> None:
        tls = self.layout.ccaas_tls_dir(org)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "CHAINCODE_ID": self.package_id(org),
            "CHAINCODE_SERVER_ADDRESS": f"{HOST}:{org.ccaas_port}",
            "CHAINCODE_TLS_KEY": str(tls / "key.pem"),
            "CHAINCODE_TLS_CERT": str(tls / "cert.pem"),
            "CHAINCODE_TLS_CLIENT_CA": str(self.layout.peer_tls_ca(org)),
        }
        argv = [
            sys.executable,
            "-m",
            "chaincode_client.fabric_network.ccaas_server",
            CHAINCODE_FACTORY,
        ]
        pid = processes.start(self.layout, org.ccaas_name, argv, env, REPO_ROOT)
        processes.wait_port(self.layout, org.ccaas_name, pid, org.ccaas_port, NODE_START_TIMEOUT_S)

    def _start_chaincode_servers(self) -> str | None:
        started = [g.ccaas_name for g in self.layout.orgs if self.start_node(g.ccaas_name)]
        return f"started {', '.join(started)}" if started else "already running"

    def _wait_gateway(self) -> str | None:
        """Right after a start, a peer's gateway may not yet know the other organisation's
        peer (gossip, discovery): the first submits cannot meet the AND policy. Wait until a
        read-only transaction commits, endorsed by both."""
        client = FabricGatewayClient.from_env(self.layout.client_env(self.layout.orgs[0].msp_id))
        try:
            receipt, tries = _until_endorsed(
                lambda: client.submit("GetHistory", GATEWAY_PROBE), "both organisations"
            )
            return f"block {receipt.block_number} after {tries} tries"
        finally:
            client.close()

    def _wait_endorsable(self, name: str) -> int:
        """A definition just committed is known to each peer at once, but to the other
        organisation's gateway only once gossip has carried it there: until then an AND
        policy cannot be met ("required chaincodes are not installed on sufficient peers").
        Wait until every organisation's gateway can have chaincode `name` endorsed by all."""
        tries = 0
        for org in self.layout.orgs:
            env = {**self.layout.client_env(org.msp_id), "FABRIC_CHAINCODE": name}
            client = FabricGatewayClient.from_env(env)
            try:
                probe = partial(client.check_endorsable, "GetHistory", GATEWAY_PROBE)
                tries += _until_endorsed(probe, f"{org.msp_id}'s gateway for chaincode {name}")[1]
            finally:
                client.close()
        return tries

    def _deploy_default(self) -> str | None:
        return self.deploy(self.layout.chaincode)

    def deploy(self, name: str) -> str | None:
        """Define chaincode `name` on the channel, backed by the installed package: approved
        by both organisations, committed with both required to endorse. Several names can
        share the package; each has its own state (a namespace), which is how the contract
        suite gives every test an empty ledger on one network."""
        if name in self._read_state().get("chaincodes", {}):
            return "already committed"
        definition = [
            "--channelID",
            self.layout.channel,
            "--name",
            name,
            "--version",
            CHAINCODE_VERSION,
            "--sequence",
            "1",
            "--signature-policy",
            configs.ENDORSEMENT_POLICY,
        ]
        committed = self.peer_cli(
            self.layout.orgs[0],
            "lifecycle",
            "chaincode",
            "querycommitted",
            "--channelID",
            self.layout.channel,
            what="querycommitted",
        )
        if f"Name: {name}," not in committed:
            readiness = self.peer_cli(
                self.layout.orgs[0],
                "lifecycle",
                "chaincode",
                "checkcommitreadiness",
                *definition,
                "--output",
                "json",
                what=f"checkcommitreadiness of {name}",
            )
            approvals = json.loads(readiness[readiness.find("{") :]).get("approvals", {})
            for org in self.layout.orgs:
                if approvals.get(org.msp_id):
                    continue
                self.peer_cli(
                    org,
                    "lifecycle",
                    "chaincode",
                    "approveformyorg",
                    *self._orderer_flags(),
                    *definition,
                    "--package-id",
                    self.package_id(org),
                    what=f"{org.msp_id} approves chaincode {name}",
                )
            peers: list[str] = []
            for org in self.layout.orgs:
                peers += ["--peerAddresses", org.peer_address]
                peers += ["--tlsRootCertFiles", str(self.layout.peer_tls_ca(org))]
            self.peer_cli(
                self.layout.orgs[0],
                "lifecycle",
                "chaincode",
                "commit",
                *self._orderer_flags(),
                *definition,
                *peers,
                what=f"commit chaincode {name}",
            )
        tries = self._wait_endorsable(name)
        chaincodes = {**self._read_state().get("chaincodes", {}), name: CHAINCODE_VERSION}
        self._write_state(chaincodes=chaincodes)
        return f"endorsable by every organisation after {tries} tries"
