"""A Fabric network over separate hosts (tests/fabric/netns.py), brought up the way operators
would on separate machines: each party runs `python -m chaincode_client.fabric_network org …`
on its own host with its own folder, and only public folders (`public/<name>`), the plan and
the genesis block are copied between hosts (the test plays `scp`). docs/operations.md lists
the same commands.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from chaincode_client.fabric_network.layout import ORDERER_MSP, Layout
from tests.fabric.netns import Forward, Hosts

REPO = Path(__file__).resolve().parents[2]
ORDERERS = ("orderer0", "orderer1", "orderer2")
ORGS = ("Org1MSP", "Org2MSP")
PARTIES = (*ORDERERS, *ORGS)
# what each party publishes under public/ (its own name; orderer0 also the ordering org's MSP)
PUBLISHES = {"orderer0": ("orderer0", ORDERER_MSP)} | {p: (p,) for p in PARTIES[1:]}


@dataclass
class SplitNetwork:
    hosts: Hosts
    folder: Path  # one sub-folder per host: that machine's disk
    log: list[str] = field(default_factory=list)
    forwards: list[Forward] = field(default_factory=list)

    def root(self, party: str) -> Path:
        return self.folder / party

    @property
    def plan(self) -> dict[str, object]:
        return {"base_port": 7050, "channel": "wattlease", "addresses": self.hosts.addresses}

    def layout(self, party: str) -> Layout:
        return Layout(self.root(party), base_port=7050, addresses=self.hosts.addresses)

    def run(self, party: str, *argv: str) -> subprocess.CompletedProcess[str]:
        """`python -m chaincode_client.fabric_network ARGV` on `party`'s host, its folder."""
        command = [sys.executable, "-m", "chaincode_client.fabric_network"]
        command += ["--root", str(self.root(party)), "--plan", str(self.root(party) / "plan.json")]
        return self.hosts.run(party, [*command, *argv], cwd=REPO)

    def cli(self, party: str, *argv: str) -> str:
        started = time.monotonic()
        done = self.run(party, *argv)
        self.log.append(f"{party}: {' '.join(argv)} ({time.monotonic() - started:.1f}s)")
        assert done.returncode == 0, f"{party}: {' '.join(argv)}\n{done.stdout}{done.stderr}"
        return done.stdout

    def copy_public(self, source: str) -> None:
        """What `source` published goes to every other host (public material only)."""
        for name in PUBLISHES[source]:
            for party in PARTIES:
                if party != source:
                    shutil.copytree(
                        self.root(source) / "public" / name,
                        self.root(party) / "public" / name,
                        dirs_exist_ok=True,
                    )

    def up(self) -> float:
        """From empty hosts to the contract committed; returns the seconds it took."""
        started = time.monotonic()
        for party in PARTIES:
            self.root(party).mkdir(parents=True)
            (self.root(party) / "plan.json").write_text(json.dumps(self.plan))
        self.cli("orderer0", "org", "init", "orderer0")
        self.copy_public("orderer0")
        secrets = {o: self.cli("orderer0", "org", "secret", o).strip() for o in ORDERERS[1:]}
        inits = [(o, "--enroll-secret", secrets[o]) for o in ORDERERS[1:]]
        inits += [(g,) for g in ORGS]
        with ThreadPoolExecutor(len(inits)) as pool:
            list(pool.map(lambda a: self.cli(a[0], "org", "init", *a), inits))
        for party in PARTIES[1:]:
            self.copy_public(party)
        self.cli("orderer0", "channel", "create")
        block = self.root("orderer0") / "config" / "wattlease.block"
        for party in PARTIES[1:]:
            (self.root(party) / "config").mkdir(exist_ok=True)
            shutil.copyfile(block, self.root(party) / "config" / block.name)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda o: self.cli(o, "org", "join", o), ORDERERS[1:]))
        self.cli("orderer0", "org", "join", "orderer0")  # its admin joins all three
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda g: self.cli(g, "org", "join", g), ORGS))
        for org in ORGS:  # Org1 commits; Org2's run waits until its gateway can endorse
            self.cli(org, "org", "commit", org)
        return time.monotonic() - started

    def new_chaincode(self, name: str) -> str:
        """Contract namespace `name` (an empty ledger): Org2 approves on its host, Org1
        approves and commits on its own, Org2 waits until its gateway can endorse it."""
        self.cli("Org2MSP", "org", "join", "Org2MSP", "--chaincode", name)
        self.cli("Org1MSP", "org", "commit", "Org1MSP", "--chaincode", name)
        self.cli("Org2MSP", "org", "commit", "Org2MSP", "--chaincode", name)
        return name

    def down(self) -> None:
        for forward in self.forwards:
            forward.close()
        for party in PARTIES:
            if self.root(party).exists():
                self.run(party, "down")

    def forward(self, party: str, address: str) -> str:
        """127.0.0.1:port here -> `address` dialled from `party`'s host."""
        host, port = address.rsplit(":", 1)
        forward = Forward(self.hosts.namespaces[party], (host, int(port)))
        self.forwards.append(forward)
        return forward.address

    def client_env(self, msp_id: str, user: str = "User1") -> dict[str, str]:
        """An application of `msp_id` on its own host: its identity from that host's folder,
        its own peer (reached from inside that host). Submits wait for its own peer only."""
        env = self.layout(msp_id).client_env(msp_id, user)
        env["FABRIC_PEER_ENDPOINT"] = self.forward(msp_id, env["FABRIC_PEER_ENDPOINT"])
        del env["FABRIC_CONFIRM_PEERS"]
        return env


class AppView:
    """What `app_on_fabric` and `admin_clients` read from a network (`.layout.client_env`,
    `.layout.orgs`): each organisation's clients on its own host."""

    def __init__(self, network: SplitNetwork) -> None:
        self.network = network
        self.layout = self
        self.orgs = network.layout("Org1MSP").orgs

    def client_env(self, msp_id: str, user: str = "User1") -> dict[str, str]:
        return self.network.client_env(msp_id, user)


@contextmanager
def split_network(folder: Path) -> Iterator[SplitNetwork]:
    with Hosts(PARTIES) as hosts:
        network = SplitNetwork(hosts, folder)
        try:
            yield network
        finally:
            network.down()
    leftover = hosts.exists()
    assert not leftover, f"namespaces left behind: {leftover}"
