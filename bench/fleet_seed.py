"""Seed the fleet bench's deployment as an operator would in the admin: the rate card's sites,
two PCR policies (the swtpm sample's golden values, the software nodes'), N nodes of 8 GPUs
(generations of the catalogue in turn), one tenant; both organisations' admins approve the
policies and the EK CAs (TPM_EK_CA_DIR) on the ledger. Prints JSON: the tenant's API key and
each node's name, credential and NVML-shaped inventory. Run with the deployment's
environment: python -m bench.fleet_seed NODES SWTPM_NODES SWTPM_GOLDEN SOFTWARE_GOLDEN."""

from __future__ import annotations

import json
import sys

import django

GPUS_PER_NODE = 8
GENERATIONS = ("A100-SXM4-80GB", "H100-SXM5-80GB", "L40S-PCIe-48GB", "V100-SXM2-32GB")


def main(nodes: int, swtpm_nodes: int, swtpm_golden: dict, software_golden: dict) -> dict:
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
    sites = [Site.objects.create(name=name) for name in SITES]
    policies = [
        PcrPolicy.objects.create(name="swtpm", pcrs=swtpm_golden),
        PcrPolicy.objects.create(name="software", pcrs=software_golden),
    ]
    known = set(Generation.objects.values_list("catalogue_id", flat=True))
    generations = [Generation.objects.get(catalogue_id=g) for g in GENERATIONS if g in known]
    made = []
    for n in range(nodes):
        name = f"node-{n:05d}"
        node = Node.objects.create(
            name=name, site=sites[n % len(sites)], pcr_policy=policies[n >= swtpm_nodes]
        )
        generation = generations[n % len(generations)]
        GPU.objects.bulk_create(
            GPU(uuid=gpu_uuid(name, i), node=node, index=i, generation=generation)
            for i in range(GPUS_PER_NODE)
        )
        made.append(node)
    tenant = Tenant.objects.create(name="Fleet bench", slug="fleet-bench", max_gpus=10**6)
    _, key = issue_api_key(tenant, scope=ApiKey.WRITE, actor="operator")
    with admin_clients() as admins:
        for policy in policies:
            approve_fleet_policies(admins, policy)
    close_ledger_client()  # the relay worker owns the ledger file from now on
    return {
        "api_key": key,
        "nodes": [
            {
                "name": node.name,
                "credential": issue_node_credential(node, actor="operator"),
                "inventory": simulated_inventory(node),
                "swtpm": i < swtpm_nodes,
            }
            for i, node in enumerate(made)
        ],
    }


if __name__ == "__main__":
    nodes, swtpm_nodes = int(sys.argv[1]), int(sys.argv[2])
    print(json.dumps(main(nodes, swtpm_nodes, json.loads(sys.argv[3]), json.loads(sys.argv[4]))))
