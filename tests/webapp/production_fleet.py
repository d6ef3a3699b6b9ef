"""Seed a production deployment's database the way an operator would in the admin: one
site (a site of the rate card: the ledger checks lease terms against it), a PCR policy
with the golden values given, one node with four A100s, one tenant; both organisations'
admins approve the PCR policy and the EK CA (TPM_EK_CA_DIR) on the ledger. Prints the
tenant's API key, the node's credential (shown once, as in the admin) and the GPUs the node's
agent reports (this machine has none for NVML) as JSON. Run with the
deployment's environment: python -m tests.webapp.production_fleet
'{"sha256": {"0": "…", "2": "…", "7": "…"}}'."""

from __future__ import annotations

import json
import sys

import django


def main(golden: dict) -> dict[str, str]:
    django.setup()
    from webapp.attestation.actions import issue_node_credential
    from webapp.demo.agents import simulated_inventory
    from webapp.demo.governance import admin_clients, approve_fleet_policies
    from webapp.demo.seed import SITES, gpu_uuid
    from webapp.fleet.catalogue import sync_catalogue
    from webapp.fleet.models import GPU, Generation, Node, PcrPolicy, Site
    from webapp.outbox.ledger import close_ledger_client
    from webapp.tenancy.actions import issue_api_key
    from webapp.tenancy.models import ApiKey, Tenant

    sync_catalogue()
    site = Site.objects.create(name=SITES[0])
    policy = PcrPolicy.objects.create(name="build-1", pcrs=golden)
    node = Node.objects.create(name="node-1", site=site, pcr_policy=policy)
    a100 = Generation.objects.get(catalogue_id="A100-SXM4-80GB")
    for index in range(4):
        GPU.objects.create(uuid=gpu_uuid("node-1", index), node=node, index=index, generation=a100)
    tenant = Tenant.objects.create(name="Tenant A", slug="tenant-a")
    _, key = issue_api_key(tenant, scope=ApiKey.WRITE, actor="operator")
    with admin_clients() as admins:
        approve_fleet_policies(admins, policy)
    close_ledger_client()  # the relay worker owns the ledger file from now on
    return {
        "api_key": key,
        "node_credential": issue_node_credential(node, actor="operator"),
        "inventory": simulated_inventory(node),
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
