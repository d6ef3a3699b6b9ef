"""Real objects for the web app's tests: a fleet from the real catalogue, and the three
callers every endpoint is tested with — owner (write key), member (read-only key of the same
tenant) and outsider (a key of another tenant)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
from django.core.cache import cache
from django.db import connection
from rest_framework.test import APIClient

from attest.agent.http import AgentApi, attest_once, enrol
from attest.agent.tpm import AK_ECC, Agent, AkKey
from attest.registrar_service import run_registrars
from attest.swtpm import LocalCA, start_node_tpm
from tests.webapp.helpers import trust_ek_ca
from webapp.attestation import actions as attestation_actions
from webapp.attestation.models import Attestation
from webapp.core import budgets
from webapp.demo.agents import simulated_inventory
from webapp.demo.governance import admin_clients, approve_fleet_policies
from webapp.demo.seed import SITES, gpu_uuid
from webapp.fleet.catalogue import sync_catalogue
from webapp.fleet.models import GPU, Generation, Node, PcrPolicy, Site
from webapp.outbox.ledger import close_ledger_client, ledger_client
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once
from webapp.tenancy.models import ApiKey, Tenant

CHALLENGE_RELAY_POLL_S = 0.05


@pytest.fixture(autouse=True)
def fresh_request_budgets():
    """Each test starts with full request budgets (webapp/core/budgets.py) and an empty
    cache."""
    cache.clear()
    budgets.store().clear()
    yield
    cache.clear()
    budgets.store().clear()


@dataclass
class Fleet:
    site: Site
    node: Node
    gpus: list[GPU]


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """A file, not shared-cache memory, for an SQLite test database: the ledger relay runs in
    a thread of its own beside the live server (as its own process would), and SQLite makes
    separate connections to a file wait their turn, where shared-cache memory fails at once
    ("table is locked")."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        path = tmp_path_factory.mktemp("db") / "test.sqlite3"
        database.setdefault("TEST", {})["NAME"] = str(path)


@pytest.fixture
def fleet(db) -> Fleet:
    sync_catalogue()
    site = Site.objects.create(name=SITES[0])  # a rate card site: the ledger prices it
    policy = PcrPolicy.objects.create(
        name="test-policy", pcrs={"sha256": {"0": None, "2": None, "7": None}}
    )
    node = Node.objects.create(
        name="node-1", site=site, pcr_policy=policy, status=Node.ACTIVE, trust=Node.TRUSTED
    )
    a100 = Generation.objects.get(catalogue_id="A100-SXM4-80GB")
    gpus = [
        GPU.objects.create(uuid=gpu_uuid("node-1", i), node=node, index=i, generation=a100)
        for i in range(4)
    ]
    return Fleet(site=site, node=node, gpus=gpus)


@dataclass
class Caller:
    tenant: Tenant
    token: str
    client: APIClient


def _caller(tenant: Tenant, scope: str) -> Caller:
    _, token = ApiKey.issue(tenant, scope=scope)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return Caller(tenant=tenant, token=token, client=client)


@pytest.fixture
def tenant(db) -> Tenant:
    return Tenant.objects.create(name="Owner Co", slug="owner-co")


@pytest.fixture
def owner(tenant) -> Caller:
    return _caller(tenant, ApiKey.WRITE)


@pytest.fixture
def member(tenant) -> Caller:
    return _caller(tenant, ApiKey.READ)


@pytest.fixture
def outsider(db) -> Caller:
    return _caller(Tenant.objects.create(name="Other Co", slug="other-co"), ApiKey.WRITE)


# -- real TPMs: one swtpm per test module, its EK certified by a CA made at run time --


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return LocalCA(tmp_path_factory.mktemp("ek-ca"))


@pytest.fixture(scope="module")
def tpm(tmp_path_factory, ca):
    tpm = start_node_tpm(tmp_path_factory.mktemp("node-tpm"), ca)
    yield tpm
    tpm.stop()


@pytest.fixture
def trusted_ca(settings, tmp_path, ca):
    directory = trust_ek_ca(settings, tmp_path, ca)
    # each organisation's registrar, trusting the same CA (the demo runs both the same way)
    settings.REGISTRARS, stop = run_registrars(settings.LEDGER_ORGS, directory, tmp_path / "reg")
    yield directory
    stop()


@pytest.fixture
def agent(tpm):
    with Agent(tpm.tcti) as agent:
        yield agent


@pytest.fixture
def api(fleet, live_server, trusted_ca, agent, challenge_relay, ledger_admins):
    """The agent API of `fleet.node`, whose policy holds the swtpm's boot-time PCR values
    (as an operator records them from a reference machine before enrolling nodes), approved
    on the ledger by both organisations' admins with the swtpm's EK CA."""
    set_golden_values(fleet.node, agent)
    approve_fleet_policies(ledger_admins, fleet.node.pcr_policy)
    token = attestation_actions.issue_node_credential(fleet.node, actor="test")
    return AgentApi(live_server.url, token)


@pytest.fixture
def ledger_admins(ledger):
    """An admin client of each organisation on the test's ledger."""
    with admin_clients() as admins:
        yield admins


def enrol_node(agent: Agent, api: AgentApi, alg: str = AK_ECC) -> AkKey:
    """The agent enrols, reporting the GPUs its node has in the fleet (as NVML would)."""
    node = attestation_actions.node_for_token(api.token)
    assert node is not None, "the agent API's token names no node"
    return enrol(agent, api, alg, simulated_inventory(node))


@pytest.fixture
def challenge_relay(ledger):
    """The ledger issues attestation challenges (IssueChallenge), which reach it through the
    outbox. While an agent waits for one, this runs the real relay, as `ledger_relay` would;
    it relays nothing while no challenge is asked for, so tests still drive the rest."""
    stop = threading.Event()

    def relay_challenges() -> None:
        try:
            while not stop.wait(CHALLENGE_RELAY_POLL_S):
                asked = OutboxEntry.objects.filter(
                    function="IssueChallenge", status=OutboxEntry.PENDING
                )
                if asked.exists():
                    relay_once(ledger)
        finally:
            connection.close()

    thread = threading.Thread(target=relay_challenges, name="challenge-relay", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def set_golden_values(node: Node, agent: Agent) -> None:
    values = agent.read_pcrs("sha256:0,2,7")["sha256"]
    node.pcr_policy.pcrs = {"sha256": {str(i): v.hex() for i, v in values.items()}}
    node.pcr_policy.save()


# -- the embedded ledger and a node whose good quote is on it --


@pytest.fixture
def ledger(settings, tmp_path):
    settings.LEDGER_PATH = tmp_path / "ledger.sqlite3"
    yield ledger_client()
    close_ledger_client()


@dataclass
class NodeAgent:
    """`fleet.node`'s enrolled agent: each `attest` answers a ledger challenge with a quote
    that binds the readings sent with it (docs/billing.md, "Attested telemetry")."""

    agent: Agent
    api: AgentApi
    ak: object

    def attest(self, readings: str = "") -> dict:
        return attest_once(self.agent, self.api, self.ak, readings)


@pytest.fixture
def node_agent(fleet, agent, api) -> NodeAgent:
    ak = enrol_node(agent, api)
    set_golden_values(Node.objects.get(pk=fleet.node.pk), agent)
    return NodeAgent(agent, api, ak)


@pytest.fixture
def attested_node(node_agent, fleet, ledger):
    assert node_agent.attest()["valid"]
    outcome = relay_once(ledger)
    errors = list(OutboxEntry.objects.values_list("function", "last_error"))
    # RegisterNode and IssueChallenge went while the agent waited for its challenge
    assert outcome == {"done": 1}, errors  # RecordAttestation
    return Attestation.objects.get(node=fleet.node, valid=True)
