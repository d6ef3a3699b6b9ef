"""The peer CLI as each organisation's admin, and the contract's life on the channel: each
organisation's CCaaS package and chaincode server, its approval, the commit, and the waits
until every organisation's gateway can have it endorsed. A mixin of `Network`, which supplies
the layout, the parties it acts for, its state file and its nodes."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from chaincode_client.fabric import FabricGatewayClient
from chaincode_client.fabric_network import configs, processes
from chaincode_client.fabric_network.layout import FabricInstall, Layout, NetworkError, Org
from chaincode_client.fabric_network.package import Connection, build_package, package_id
from chaincode_client.interface import LedgerUnavailable

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_START_TIMEOUT_S = 60.0
GATEWAY_READY_TIMEOUT_S = 90.0
CHAINCODE_LABEL = "wattlease"
CHAINCODE_VERSION = "1.0"
CHAINCODE_FACTORY = "ledger.contract.chaincode:new_chaincode"

GATEWAY_PROBE = json.dumps({"key": "node:gateway-probe"})  # a read any contract answers
GATEWAY_POLL_S = 0.25

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


class ChaincodeLifecycle:
    layout: Layout
    install: FabricInstall

    @property
    def genesis_block(self) -> Path:
        raise NotImplementedError

    @property
    def orgs(self) -> tuple[Org, ...]:  # the organisations on this host
        raise NotImplementedError

    def _read_state(self) -> dict:
        raise NotImplementedError

    def _write_state(self, **changes: object) -> None:
        raise NotImplementedError

    def start_node(self, name: str) -> bool:
        raise NotImplementedError

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
        for org in self.orgs:
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
                f"{org.ip}:{org.ccaas_port}",
                root_cert=self.layout.peer_tls_ca(org).read_text(),
                client_cert=(peer_tls / "server.crt").read_text(),
                client_key=(peer_tls / "server.key").read_text(),
            ),
        )

    def package_id(self, org: Org) -> str:
        return package_id(CHAINCODE_LABEL, self.package(org))

    def _install_packages(self) -> str | None:
        installed = []
        for org in self.orgs:
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
        self._write_state(package_ids={g.msp_id: self.package_id(g) for g in self.orgs})
        return f"installed on {', '.join(installed)}" if installed else "already installed"

    def _start_ccaas(self, org: Org) -> None:
        tls = self.layout.ccaas_tls_dir(org)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),
            "CHAINCODE_ID": self.package_id(org),
            "CHAINCODE_SERVER_ADDRESS": f"{org.ip}:{org.ccaas_port}",
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
        processes.wait_port(
            self.layout, org.ccaas_name, pid, org.ccaas_port, NODE_START_TIMEOUT_S, org.ip
        )

    def _start_chaincode_servers(self) -> str | None:
        started = [g.ccaas_name for g in self.orgs if self.start_node(g.ccaas_name)]
        return f"started {', '.join(started)}" if started else "already running"

    def _wait_gateway(self) -> str | None:
        """Right after a start, a peer's gateway may not yet know the other organisation's
        peer (gossip, discovery): the first submits cannot meet the AND policy. Wait until a
        read-only transaction commits, endorsed by both."""
        if not self.orgs:
            return "no organisation on this host"
        client = FabricGatewayClient.from_env(self.layout.client_env(self.orgs[0].msp_id))
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
        for org in self.orgs:
            env = {**self.layout.client_env(org.msp_id), "FABRIC_CHAINCODE": name}
            client = FabricGatewayClient.from_env(env)
            try:
                probe = partial(client.check_endorsable, "GetHistory", GATEWAY_PROBE)
                tries += _until_endorsed(probe, f"{org.msp_id}'s gateway for chaincode {name}")[1]
            finally:
                client.close()
        return tries

    def _deploy_default(self) -> str | None:
        if not self.orgs:
            return "no organisation on this host"
        return self.deploy(self.layout.chaincode)

    def approve_default(self) -> str | None:
        return self.approve(self.layout.chaincode)

    def _definition(self, name: str) -> list[str]:
        return [
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

    def _committed(self, name: str) -> bool:
        committed = self.peer_cli(
            self.orgs[0],
            "lifecycle",
            "chaincode",
            "querycommitted",
            "--channelID",
            self.layout.channel,
            what="querycommitted",
        )
        return f"Name: {name}," in committed

    def _approvals(self, name: str) -> dict[str, bool]:
        readiness = self.peer_cli(
            self.orgs[0],
            "lifecycle",
            "chaincode",
            "checkcommitreadiness",
            *self._definition(name),
            "--output",
            "json",
            what=f"checkcommitreadiness of {name}",
        )
        return json.loads(readiness[readiness.find("{") :]).get("approvals", {})

    def approve(self, name: str) -> str | None:
        """This host's organisations approve chaincode `name` backed by their own package."""
        if not self.orgs:
            return "no organisation on this host"
        if self._committed(name):
            return "already committed"
        approvals = self._approvals(name)
        approved = []
        for org in self.orgs:
            if approvals.get(org.msp_id):
                continue
            self.peer_cli(
                org,
                "lifecycle",
                "chaincode",
                "approveformyorg",
                *self._orderer_flags(),
                *self._definition(name),
                "--package-id",
                self.package_id(org),
                what=f"{org.msp_id} approves chaincode {name}",
            )
            approved.append(org.msp_id)
        return f"approved by {', '.join(approved)}" if approved else "already approved"

    def commit(self, name: str) -> str | None:
        """Commit chaincode `name` once every organisation approved it (both must endorse),
        then wait until this host's organisations can have it endorsed by all."""
        if name in self._read_state().get("chaincodes", {}):
            return "already committed"
        if not self._committed(name):
            missing = [m for m, ok in self._approvals(name).items() if not ok]
            if missing:
                raise NetworkError(f"chaincode {name}: not approved yet by {', '.join(missing)}")
            peers: list[str] = []
            for org in self.layout.orgs:  # the other organisations' peers: public addresses
                peers += ["--peerAddresses", org.peer_address]
                peers += ["--tlsRootCertFiles", str(self.layout.peer_tls_ca(org))]
            self.peer_cli(
                self.orgs[0],
                "lifecycle",
                "chaincode",
                "commit",
                *self._orderer_flags(),
                *self._definition(name),
                *peers,
                what=f"commit chaincode {name}",
            )
        tries = self._wait_endorsable(name)
        chaincodes = {**self._read_state().get("chaincodes", {}), name: CHAINCODE_VERSION}
        self._write_state(chaincodes=chaincodes)
        return f"endorsable by every organisation after {tries} tries"

    def deploy(self, name: str) -> str | None:
        """Define chaincode `name` on the channel, backed by the installed package: approved
        by both organisations, committed with both required to endorse. Several names can
        share the package; each has its own state (a namespace), which is how the contract
        suite gives every test an empty ledger on one network."""
        if name in self._read_state().get("chaincodes", {}):
            return "already committed"
        self.approve(name)
        return self.commit(name)
