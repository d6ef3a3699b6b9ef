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
from chaincode_client.governance import decide
from chaincode_client.interface import LedgerClient
from ledger.engine import EmbeddedLedger
from ledger.engine.msp import ROLE_ADMIN, new_identity
from tests.ledger.helpers import BOOT_POLICY, DEFAULT_MAX_AGE_S, pcr_policy

ORG1, ORG2 = "Org1MSP", "Org2MSP"
NS_PER_S = 1_000_000_000


class StepClock:
    """The proposals' timestamp source in tests: the wall clock (lease terms are checked
    against it) plus whatever the test stepped it by, strictly increasing (thread-safe).
    Endorsers compare it with their own clocks, so a step beyond LEDGER_MAX_CLOCK_SKEW_S is
    refused, as a forged client timestamp would be."""

    def __init__(self) -> None:
        self._offset_ns = 0
        self._last = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            now = time.time_ns() + self._offset_ns
            if self._last - NS_PER_S < now <= self._last:  # within a microsecond: keep
                now = self._last + 1_000  # timestamps distinct; a step back goes back
            self._last = now
            return now

    def advance(self, seconds: int) -> None:
        """Step forward, or back with a negative number (a client forging an old time)."""
        with self._lock:
            self._offset_ns += seconds * NS_PER_S


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


Factory = Callable[[Path, pytest.FixtureRequest], AbstractContextManager[LedgerEnv]]
BACKENDS: dict[str, Factory] = {}
MARKS: dict[str, pytest.MarkDecorator] = {}


def backend(name: str, mark: pytest.MarkDecorator | None = None) -> Callable:
    def register(factory: Factory) -> Factory:
        BACKENDS[name] = factory
        if mark is not None:
            MARKS[name] = mark
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
def embedded_backend(
    tmp_path: Path, request: pytest.FixtureRequest | None = None
) -> AbstractContextManager[LedgerEnv]:
    """Both orgs' peers in the engine's process, reading its in-memory state."""
    return _embedded(tmp_path, "embedded", peer_processes=False)


@backend("embedded-peer-processes")
def embedded_peer_processes_backend(
    tmp_path: Path, request: pytest.FixtureRequest | None = None
) -> AbstractContextManager[LedgerEnv]:
    """Each org's peer in a process of its own, reading state from the SQLite file."""
    return _embedded(tmp_path, "embedded-peer-processes", peer_processes=True)


@backend("fabric", mark=pytest.mark.fabric)
@contextmanager
def fabric_backend(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LedgerEnv]:
    """The session's real Fabric network; this test's own chaincode, so its state is empty.
    Time is the peers' wall clock (no StepClock): tests that step time have real-time twins."""
    from tests.fabric.network_fixture import client, new_chaincode, new_user_client
    from tests.fabric.pki import make_msp

    network = request.getfixturevalue("fabric_network")
    chaincode = new_chaincode(network)
    made: list[LedgerClient] = []

    def keep(c: LedgerClient) -> LedgerClient:
        made.append(c)
        return c

    def outsider() -> LedgerClient:
        msp = make_msp(tmp_path / f"outsider-{len(made)}", org="org1.example.com")
        return keep(client(network, ORG1, chaincode, msp_dir=msp))

    env = LedgerEnv(
        "fabric",
        {org: keep(client(network, org, chaincode)) for org in (ORG1, ORG2)},
        lambda org: keep(new_user_client(network, org, chaincode)),
        outsider,
        admin=lambda org: keep(new_user_client(network, org, chaincode, role="admin")),
    )
    try:
        yield env
    finally:
        for c in made:
            c.close()


@pytest.fixture(params=[pytest.param(name, marks=MARKS.get(name, ())) for name in sorted(BACKENDS)])
def ledger_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LedgerEnv]:
    with BACKENDS[request.param](tmp_path, request) as env:
        yield env


@pytest.fixture
def ledger_client(ledger_env: LedgerEnv) -> LedgerClient:
    return ledger_env.clients[ORG1]


def approve_pcr_policy(
    env: LedgerEnv,
    golden: dict[str, str],
    max_age_s: int = DEFAULT_MAX_AGE_S,
    key: str = BOOT_POLICY,
) -> str:
    """A PCR policy both organisations approved (Org1's admin proposes, Org2's approves):
    the only kind RegisterNode accepts. Returns its id, for register_node(policy_id=...)."""
    if env.admin is None:
        pytest.fail(f"backend {env.backend} provides no admin identity (Admin@org, OU=admin)")
    decide(env.admin(ORG1), env.admin(ORG2), "pcr_policy", key, pcr_policy(golden, max_age_s))
    return key


@pytest.fixture
def boot_policy(ledger_env: LedgerEnv, node_tpm: NodeTpm) -> str:
    """The swtpm's boot-time PCRs 0, 2, 7 as the channel's approved policy BOOT_POLICY."""
    return approve_pcr_policy(ledger_env, node_tpm.golden)


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
