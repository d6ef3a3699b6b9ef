"""Real objects for the web app's tests: a fleet from the real catalogue, and the three
callers every endpoint is tested with — owner (write key), member (read-only key of the same
tenant) and outsider (a key of another tenant)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from webapp.core.seed import gpu_uuid
from webapp.fleet.catalogue import sync_catalogue
from webapp.fleet.models import GPU, Generation, Node, PcrPolicy, Site
from webapp.tenancy.models import ApiKey, Tenant


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
