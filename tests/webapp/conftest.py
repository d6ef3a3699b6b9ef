"""Real objects for the web app's tests: a fleet from the real catalogue, and the three
callers every endpoint is tested with — owner (write key), member (read-only key of the same
tenant) and outsider (a key of another tenant)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from attest.agent.http import AgentApi, attest_once, enrol
from attest.agent.tpm import Agent
from attest.swtpm import LocalCA, start_node_tpm
from webapp.attestation import service
from webapp.attestation.models import Attestation
from webapp.core.seed import gpu_uuid
from webapp.fleet.catalogue import sync_catalogue
from webapp.fleet.models import GPU, Generation, Node, PcrPolicy, Site
from webapp.outbox.ledger import close_ledger_client, ledger_client
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once
from webapp.tenancy.models import ApiKey, Tenant


@pytest.fixture(autouse=True)
def fresh_request_budgets():
    """Throttle budgets live in the cache; each test starts with full ones."""
    cache.clear()
    yield
    cache.clear()


@dataclass
class Fleet:
    site: Site
    node: Node
    gpus: list[GPU]


@pytest.fixture
def fleet(db) -> Fleet:
    sync_catalogue()
    site = Site.objects.create(name="test-site", pue=Decimal("1.2"), tariff_micro_per_kwh=200_000)
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
    directory = tmp_path / "ek-ca"
    directory.mkdir()
    shutil.copy(ca.root_cert_file, directory / "root.pem")
    shutil.copy(ca.issuer_cert_file, directory / "issuer.pem")
    settings.TPM_EK_CA_DIR = directory
    return directory


@pytest.fixture
def agent(tpm):
    with Agent(tpm.tcti) as agent:
        yield agent


@pytest.fixture
def api(fleet, live_server, trusted_ca, agent):
    """The agent API of `fleet.node`, whose policy holds the swtpm's boot-time PCR values
    (as an operator records them from a reference machine before enrolling nodes)."""
    set_golden_values(fleet.node, agent)
    token = service.issue_node_credential(fleet.node, actor="test")
    return AgentApi(live_server.url, token)


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


@pytest.fixture
def attested_node(fleet, agent, api, ledger):
    ak = enrol(agent, api)
    set_golden_values(Node.objects.get(pk=fleet.node.pk), agent)
    assert attest_once(agent, api, ak)["valid"]
    outcome = relay_once(ledger)
    errors = list(OutboxEntry.objects.values_list("function", "last_error"))
    assert outcome == {"done": 2}, errors  # RegisterNode, RecordAttestation
    return Attestation.objects.get(node=fleet.node, valid=True)
