"""Bring a Fabric network up and down: three Raft orderers, two organisations with a CA, a
peer and a chaincode server each, the channel, and the Wattlease contract on it.

A `Network` acts for the parties whose hosts it runs on (`parties`; all of them on the
loopback network): each step does that host's share. `up()` runs every step for every party
on one machine; on separate hosts the same steps run as `org init`, `channel create`,
`org join` and `org commit` on each party's host (`__main__.py`, docs/operations.md).

Every step first checks whether it is already done (identities, genesis block, a node
running, a channel joined, a package installed, an approval, a definition committed) and
skips it, so running it twice, or after a crash, finishes the job instead of starting over.
`down()` stops every process and waits until each port is closed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from chaincode_client.fabric_network import configs, orgs, processes
from chaincode_client.fabric_network.fabric_ca import CAInstall, find_ca_install
from chaincode_client.fabric_network.layout import (
    ORDERER_ADMIN_HOST,
    FabricInstall,
    Layout,
    NetworkError,
    Orderer,
    Org,
    find_install,
)
from chaincode_client.fabric_network.lifecycle import NODE_START_TIMEOUT_S, ChaincodeLifecycle

RAFT_READY_TIMEOUT_S = 60.0

Log = Callable[[str], None]
Step = tuple[str, Callable[[], "str | None"]]


@dataclass
class Network(ChaincodeLifecycle):
    layout: Layout
    install: FabricInstall
    ca_install: CAInstall
    log: Log = print
    parties: frozenset[str] | None = None  # the hosts this one acts for (None: every one)

    @classmethod
    def create(
        cls, layout: Layout, log: Log = print, parties: frozenset[str] | None = None
    ) -> Network:
        return cls(layout, find_install(), find_ca_install(), log, parties)

    def here(self, party: str) -> bool:
        return self.parties is None or party in self.parties

    @property
    def orderers(self) -> tuple[Orderer, ...]:
        return tuple(o for o in self.layout.orderers if self.here(o.name))

    @property
    def orgs(self) -> tuple[Org, ...]:
        return tuple(g for g in self.layout.orgs if self.here(g.msp_id))

    # -- the whole network ---------------------------------------------------------------

    def up(self) -> float:
        """Bring every part up (skipping what is already there); returns the seconds taken."""
        seconds = self.run_steps(
            [
                ("crypto material (each organisation's own Fabric CA)", self.init_identities),
                ("channel genesis block (configtxgen)", self.genesis),
                *self.join_steps(),
                *self.commit_steps(),
            ]
        )
        self._write_state(up_seconds=round(seconds, 1))
        return seconds

    def join_steps(self) -> list[Step]:
        """What each host does once it holds the genesis block: its orderers and peers start
        and join, its organisations install, start and approve their chaincode."""
        return [
            ("orderers", self._start_orderers),
            ("orderers join the channel (osnadmin)", self._join_orderers),
            ("Raft leader elected", self._wait_raft_leader),
            ("peers", self._start_peers),
            ("peers join the channel", self._join_peers),
            ("chaincode packages installed", self._install_packages),
            ("chaincode servers", self._start_chaincode_servers),
        ]

    def commit_steps(self) -> list[Step]:
        """Approve (this host's organisations), then commit once every one approved."""
        name = self.layout.chaincode
        return [
            (f"chaincode {name!r} approved and committed", self._deploy_default),
            ("both organisations endorse through the gateway", self._wait_gateway),
        ]

    def run_steps(self, steps: list[Step]) -> float:
        started = time.monotonic()
        self.layout.root.mkdir(parents=True, exist_ok=True)
        for i, (title, step) in enumerate(steps, 1):
            t0 = time.monotonic()
            note = step()
            self.log(
                f"[{i}/{len(steps)}] {title}: {note or 'done'} "
                f"({time.monotonic() - t0:.1f}s, {time.monotonic() - started:.1f}s total)"
            )
        return time.monotonic() - started

    def down(self) -> list[tuple[str, int]]:
        """Stop every process of this host; returns (address, port) pairs still open
        afterwards (empty on success)."""
        for name in reversed(self.process_names()):
            if processes.stop(self.layout, name):
                self.log(f"stopped {name}")
        return processes.wait_ports_closed(self.layout.endpoints(self._party_names()))

    def _party_names(self) -> tuple[str, ...]:
        return tuple(p for p in self.layout.parties if self.here(p))

    def process_names(self) -> list[str]:
        return self.layout.process_names(self._party_names())

    def status(self) -> dict[str, object]:
        state = self._read_state()
        return {
            "root": str(self.layout.root),
            "processes": {
                name: processes.running_pid(self.layout, name) for name in self.process_names()
            },
            "channel": self.layout.channel,
            "chaincodes": state.get("chaincodes", {}),
            "package_ids": state.get("package_ids", {}),
            "up_seconds": state.get("up_seconds"),
        }

    def is_up(self) -> bool:
        return all(
            processes.running_pid(self.layout, n) for n in self.process_names()
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

    def init_identities(self, orderer_secrets: dict[str, str] | None = None) -> str | None:
        """This host's share of the identities: its organisation's CA and keys, or an
        orderer's keys enrolled from the ordering organisation's CA (with the secret its
        admin handed over: `orderer_secrets`, read from the admin's host when it is here).
        The ordering organisation and each application organisation work side by side."""
        tasks = [partial(self._init_orderers, dict(orderer_secrets or {}))]
        tasks += [partial(orgs.init_org, self.ca_install, self.layout, org) for org in self.orgs]
        with ThreadPoolExecutor(max_workers=len(tasks)) as pool:
            made = [name for done in pool.map(lambda task: task(), tasks) for name in done]
        return f"made {', '.join(made)}" if made else "already there"

    def _init_orderers(self, secrets: dict[str, str]) -> list[str]:
        made: list[str] = []
        if self.here(ORDERER_ADMIN_HOST):
            made += orgs.init_orderer_org(self.ca_install, self.layout)
        for orderer in self.orderers:
            if self.here(ORDERER_ADMIN_HOST) and orderer.name not in secrets:
                secrets[orderer.name] = orgs.orderer_secret(self.layout, orderer)
            enrolled = (self.layout.orderer_dir(orderer) / "msp" / "signcerts").is_dir()
            if orderer.name not in secrets and not enrolled:
                raise NetworkError(
                    f"{orderer.name}: no enrollment secret; the ordering organisation's admin "
                    f"prints it on {ORDERER_ADMIN_HOST}'s host (`org secret {orderer.name}`)"
                )
        jobs = [
            partial(orgs.init_orderer, self.ca_install, self.layout, o, secrets.get(o.name, ""))
            for o in self.orderers
        ]
        return made + orgs.in_parallel(jobs)

    def genesis(self) -> str | None:
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
        started = [o.name for o in self.orderers if self.start_node(o.name)]
        return f"started {', '.join(started)}" if started else "already running"

    def _start_peers(self) -> str | None:
        started = [g.peer_name for g in self.orgs if self.start_node(g.peer_name)]
        return f"started {', '.join(started)}" if started else "already running"

    def start_node(self, name: str) -> bool:
        """Start orderer, peer or chaincode server `name` unless it runs; wait for its port."""
        if processes.running_pid(self.layout, name) is not None:
            return False
        if name == orgs.ORDERER_CA:
            return bool(orgs.init_orderer_org(self.ca_install, self.layout))
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
                    self.layout, name, pid, orderer.admin_port, NODE_START_TIMEOUT_S, orderer.ip
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
                processes.wait_port(
                    self.layout, name, pid, org.peer_port, NODE_START_TIMEOUT_S, org.ip
                )
                return True
            if org.ccaas_name == name:
                self._start_ccaas(org)
                return True
            if org.ca_name == name:
                orgs.init_org(self.ca_install, self.layout, org)
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
                f"{orderer.ip}:{orderer.admin_port}",
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
        """Every orderer joins the channel: the ordering org's admin (on orderer0's host)
        calls each orderer's channel participation API over the network."""
        if not self.here(ORDERER_ADMIN_HOST):
            return "not this host's job (the ordering organisation's admin joins them)"
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
        if not self.here(ORDERER_ADMIN_HOST):
            return "not this host's job"
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
