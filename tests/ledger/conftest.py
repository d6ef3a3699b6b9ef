"""Fixtures for the contract suite, parametrised over ledger backends.

A backend is one context-manager function registered with @backend(name) that yields a
LedgerEnv; every test taking `ledger_env` or `ledger_client` runs once per backend. The Fabric
helper adds its network as one more @backend function.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chaincode_client.embedded import EmbeddedClient
from chaincode_client.interface import LedgerClient
from ledger.engine import EmbeddedLedger
from ledger.engine.msp import ROLE_ADMIN, new_identity

ORG1, ORG2 = "Org1MSP", "Org2MSP"
NS_PER_S = 1_000_000_000


class StepClock:
    """The proposals' timestamp source in tests: starts at wall-clock time and then moves
    only when told (thread-safe). Endorsers compare it with their own clocks, so a step
    beyond LEDGER_MAX_CLOCK_SKEW_S is refused, as a forged client timestamp would be."""

    def __init__(self, start_ns: int | None = None) -> None:
        self._now = time.time_ns() if start_ns is None else start_ns
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self._now += 1_000  # strictly increasing: distinct timestamps per proposal
            return self._now

    def advance(self, seconds: int) -> None:
        """Step forward, or back with a negative number (a client forging an old time)."""
        with self._lock:
            self._now += seconds * NS_PER_S


@dataclass
class LedgerEnv:
    backend: str
    clients: dict[str, LedgerClient]  # one client per organisation, keyed by MSP id
    new_client: Callable[[str], LedgerClient]  # a fresh identity of that org
    outsider: Callable[[], LedgerClient]  # an identity no channel CA issued
    clock: StepClock | None = None  # None where the backend runs on wall-clock time
    # an admin identity of that org (subject OU=admin, Fabric's NodeOU), as Admin@org
    admin: Callable[[str], LedgerClient] | None = None
    path: Path | None = None  # the SQLite file, for backends that have one
    close_ledger: Callable[[], None] = field(default=lambda: None)


BACKENDS: dict[str, Callable[[Path], AbstractContextManager[LedgerEnv]]] = {}


def backend(name: str) -> Callable:
    def register(factory: Callable[[Path], AbstractContextManager[LedgerEnv]]) -> Callable:
        BACKENDS[name] = factory
        return factory

    return register


@contextmanager
def _embedded(tmp_path: Path, name: str, peer_processes: bool) -> Iterator[LedgerEnv]:
    path = tmp_path / "ledger.sqlite"
    ledger = EmbeddedLedger.open(
        path,
        orgs=(ORG1, ORG2),
        block_size=50,
        block_timeout_s=0.005,
        peer_processes=peer_processes,
    )
    clock = StepClock()

    def new_client(org: str) -> LedgerClient:
        return EmbeddedClient(ledger, ledger.enroll(org, f"user-{org}"), clock_ns=clock)

    def outsider() -> LedgerClient:
        return EmbeddedClient(ledger, new_identity(ORG1, "mallory", None), clock_ns=clock)

    def admin(org: str) -> LedgerClient:
        return EmbeddedClient(
            ledger, ledger.enroll(org, f"Admin@{org}", ROLE_ADMIN), clock_ns=clock
        )

    env = LedgerEnv(
        name,
        {org: new_client(org) for org in (ORG1, ORG2)},
        new_client,
        outsider,
        clock,
        admin=admin,
        path=path,
        close_ledger=ledger.close,
    )
    try:
        yield env
    finally:
        ledger.close()


@backend("embedded")
def embedded_backend(tmp_path: Path) -> AbstractContextManager[LedgerEnv]:
    """Both orgs' peers in the engine's process, reading its in-memory state."""
    return _embedded(tmp_path, "embedded", peer_processes=False)


@backend("embedded-peer-processes")
def embedded_peer_processes_backend(tmp_path: Path) -> AbstractContextManager[LedgerEnv]:
    """Each org's peer in a process of its own, reading state from the SQLite file."""
    return _embedded(tmp_path, "embedded-peer-processes", peer_processes=True)


@pytest.fixture(params=sorted(BACKENDS))
def ledger_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LedgerEnv]:
    with BACKENDS[request.param](tmp_path) as env:
        yield env


@pytest.fixture
def ledger_client(ledger_env: LedgerEnv) -> LedgerClient:
    return ledger_env.clients[ORG1]


# -- a real TPM (swtpm) for attestations ---------------------------------------------------


@dataclass
class NodeTpm:
    agent: object  # attest.agent.tpm.Agent
    aks: list  # attest.agent.tpm.AkKey, one per simulated node
    golden: dict[str, str]  # PCR index -> hex, as the policy wants them
    ek_ca_pems: list[str] = field(default_factory=list)  # the swtpm EK CA: root, intermediate

    def ak_b64(self, index: int) -> str:
        return base64.b64encode(self.aks[index].public).decode()


@contextmanager
def swtpm_node(base: Path, aks: int) -> Iterator[NodeTpm]:
    """A swtpm manufactured with swtpm_localca (EK certificate included) holding `aks` AKs,
    its sha256 PCRs 0, 2, 7 as golden values. Raises when swtpm or attest is missing."""
    from attest.agent.tpm import Agent
    from attest.swtpm import LocalCA, start_node_tpm

    ca = LocalCA(base / "ca")
    tpm = start_node_tpm(base / "state", ca)
    agent = Agent(tpm.tcti)
    try:
        keys = [agent.create_ak() for _ in range(aks)]
        values = agent.read_pcrs("sha256:0,2,7")["sha256"]
        golden = {str(i): values[i].hex() for i in sorted(values)}
        pems = [ca.root_cert_file.read_text(), ca.issuer_cert_file.read_text()]
        yield NodeTpm(agent, keys, golden, pems)
    finally:
        agent.close()
        tpm.stop()


@pytest.fixture(scope="session")
def node_tpm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeTpm]:
    """One swtpm holding three AKs (three 'nodes'). Fails (never skips) when swtpm or the
    attest package is missing."""
    with swtpm_node(tmp_path_factory.mktemp("swtpm"), aks=3) as tpm:
        yield tpm
