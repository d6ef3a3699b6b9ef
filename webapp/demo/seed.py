"""The demo fleet: two sites with different PUE, mixed-generation nodes, tenants with keys."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from attest.policy import PcrPolicy as Policy
from ledger.contract.terms import DEPLOYED as RATE_CARD
from webapp.fleet.catalogue import sync_catalogue
from webapp.fleet.models import GPU, Generation, Node, PcrPolicy, Site
from webapp.tenancy.actions import issue_api_key
from webapp.tenancy.models import ApiKey, Membership, Tenant

# the rate card's sites (their PUE and tariff are the card's: webapp/fleet/rate_card.py)
SITES = [site["name"] for site in RATE_CARD.sites.values()]
# node name, site index, generation, GPU count: 40 GPUs of four generations on 5 nodes
NODES = [
    ("h100-fra-01", 0, "H100-SXM5-80GB", 8),
    ("a100-fra-01", 0, "A100-SXM4-80GB", 8),
    ("l40s-ams-01", 1, "L40S", 8),
    ("v100-ams-01", 1, "V100-SXM2", 8),
    ("a100-ams-02", 1, "A100-PCIE-80GB", 8),
]
TENANTS = ["Aurora Labs", "Basalt AI", "Cirrus Genomics"]
SEED_ACTOR = "demo seed"
PRIORITY_GRANTS = {"Aurora Labs": 5}  # the operator's grant: only Aurora may preempt
OPERATOR = "operator"


@dataclass
class SeedResult:
    operator_password: str | None
    tenant_keys: dict[str, str]
    # tenant -> (user, password) of its owner's console login, only when it was created
    tenant_logins: dict[str, tuple[str, str]]


def gpu_uuid(node: str, index: int) -> str:
    # NVML's shape (GPU-xxxxxxxx-...), derived from the node name so re-seeding is stable
    import hashlib

    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


@transaction.atomic
def seed_demo() -> SeedResult:
    sync_catalogue()
    policy, _ = PcrPolicy.objects.get_or_create(
        name="demo-boot-policy",
        defaults={"pcrs": Policy.default().to_json()["pcrs"], "max_age_s": 300},
    )
    sites = [Site.objects.get_or_create(name=name)[0] for name in SITES]
    for name, site_index, generation_id, count in NODES:
        node, _ = Node.objects.get_or_create(
            name=name, defaults={"site": sites[site_index], "pcr_policy": policy}
        )
        generation = Generation.objects.get(catalogue_id=generation_id)
        for index in range(count):
            GPU.objects.get_or_create(
                uuid=gpu_uuid(name, index),
                defaults={"node": node, "index": index, "generation": generation},
            )
    keys = {}
    for name in TENANTS:
        slug = name.lower().replace(" ", "-")
        tenant, _ = Tenant.objects.get_or_create(
            slug=slug, defaults={"name": name, "max_priority": PRIORITY_GRANTS.get(name, 0)}
        )
        _, keys[name] = issue_api_key(tenant, scope=ApiKey.WRITE, name="demo key", actor=SEED_ACTOR)
    user_model = get_user_model()
    logins = {}
    for tenant in Tenant.objects.filter(name__in=TENANTS):
        if not user_model.objects.filter(username=tenant.slug).exists():
            logins[tenant.name] = (tenant.slug, secrets.token_urlsafe(12))
            user = user_model.objects.create_user(tenant.slug, "", logins[tenant.name][1])
            Membership.objects.create(user=user, tenant=tenant, role=Membership.OWNER)
    password = None
    if not user_model.objects.filter(username=OPERATOR).exists():
        password = secrets.token_urlsafe(12)
        user_model.objects.create_superuser(OPERATOR, "", password)
    return SeedResult(operator_password=password, tenant_keys=keys, tenant_logins=logins)
