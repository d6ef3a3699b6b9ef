"""A running lease moves to another GPU generation: the interval before the move is settled
at the old terms, the rest at the new ones, and the ledger records the move."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal

import pytest

from attest.agent.http import AgentApi, attest_once, enrol
from attest.agent.tpm import Agent
from attest.swtpm import start_node_tpm
from ledger.receipt import export_receipt, verify_receipt
from tests.webapp.conftest import set_golden_values
from webapp.attestation import service
from webapp.core.seed import gpu_uuid
from webapp.fleet.models import GPU, Generation, Node
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import place_requested, settle_closed
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once

ACTOR = "test"


@pytest.fixture(scope="module")
def h100_tpm(tmp_path_factory, ca):
    tpm = start_node_tpm(tmp_path_factory.mktemp("h100-tpm"), ca)
    yield tpm
    tpm.stop()


@pytest.fixture
def h100_node(fleet, h100_tpm, live_server, api, ledger):
    """A second node, of H100s, at the same site, attested and on the ledger."""
    node = Node.objects.create(
        name="node-2", site=fleet.site, pcr_policy=fleet.node.pcr_policy, status=Node.ACTIVE
    )
    h100 = Generation.objects.get(catalogue_id="H100-SXM5-80GB")
    for i in range(4):
        GPU.objects.create(uuid=gpu_uuid("node-2", i), node=node, index=i, generation=h100)
    token = service.issue_node_credential(node, actor=ACTOR)
    with Agent(h100_tpm.tcti) as agent:
        node_api = AgentApi(live_server.url, token)
        ak = enrol(agent, node_api)
        assert attest_once(agent, node_api, ak)["valid"]
    return node


def test_a_lease_migrates_and_each_interval_is_settled_at_its_own_terms(
    fleet, tenant, agent, api, owner, ledger, h100_node, settings
):
    ak = enrol(agent, api)
    set_golden_values(Node.objects.get(pk=fleet.node.pk), agent)
    assert attest_once(agent, api, ak)["valid"]
    relay_once(ledger)
    # fill the H100s so the lease lands on the A100s first
    blocker = actions.request_lease(
        tenant, gpu_count=4, precision="FP16", hours=Decimal(1), priority=9, actor=ACTOR
    )
    lease = actions.request_lease(
        owner.tenant, gpu_count=2, precision="FP16", hours=Decimal(2), actor=ACTOR
    )
    place_requested(actor=ACTOR)
    blocker.refresh_from_db()
    assert {g.generation.catalogue_id for g in blocker.gpus.all()} == {"H100-SXM5-80GB"}
    lease.refresh_from_db()
    assert {g.generation.catalogue_id for g in lease.gpus.all()} == {"A100-SXM4-80GB"}
    relay_once(ledger)
    actions.activate_lease(lease, actor=ACTOR)
    actions.activate_lease(blocker, actor=ACTOR)
    actions.end_lease(blocker, actor=ACTOR)
    settle_closed(actor=ACTOR)
    relay_once(ledger)

    moved = owner.client.post(
        f"/api/v1/leases/{lease.pk}/migrate/", {"generation": "H100-SXM5-80GB"}, format="json"
    )
    assert moved.status_code == 200, moved.content
    lease.refresh_from_db()
    assert {g.generation.catalogue_id for g in lease.gpus.all()} == {"H100-SXM5-80GB"}
    assert [s.generation for s in lease.settlements.all()] == ["A100-SXM4-80GB"]
    actions.end_lease(lease, actor=ACTOR)
    settle_closed(actor=ACTOR)
    lease.refresh_from_db()
    assert lease.state == states.SETTLED
    assert [s.generation for s in lease.settlements.order_by("seq")] == [
        "A100-SXM4-80GB",
        "H100-SXM5-80GB",
    ]
    relay_once(ledger)
    rejected = list(
        OutboxEntry.objects.exclude(status=OutboxEntry.DONE).values_list("function", "last_error")
    )
    assert rejected == []
    on_chain = json.loads(
        ledger.evaluate("GetLease", json.dumps({"lease_id": str(lease.ledger_id)}))
    )
    assert len(on_chain["migrations"]) == 1
    settled = json.loads(
        ledger.evaluate("GetSettlements", json.dumps({"lease_id": str(lease.ledger_id)}))
    )
    assert [s["interval_seq"] for s in settled] == [0, 1]
    # the tenant's receipt holds the whole story, both nodes included, and re-checks
    receipt = export_receipt(settings.LEDGER_PATH, str(lease.ledger_id))
    assert verify_receipt(receipt) == []
    functions = Counter(
        json.loads(json.loads(t["envelope"])["proposal"])["fn"] for t in receipt["transactions"]
    )
    assert functions == {
        "RegisterNode": 2,
        "RecordAttestation": 2,
        "CreateLease": 1,
        "MigrateLease": 1,
        "EndLease": 1,
        "Settle": 2,
    }


def test_migration_to_the_same_generation_is_refused(fleet, tenant, owner, agent, api, ledger):
    ak = enrol(agent, api)
    attest_once(agent, api, ak)
    relay_once(ledger)
    lease = actions.request_lease(
        owner.tenant, gpu_count=1, precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    place_requested(actor=ACTOR)
    relay_once(ledger)
    actions.activate_lease(Lease.objects.get(pk=lease.pk), actor=ACTOR)
    refused = owner.client.post(
        f"/api/v1/leases/{lease.pk}/migrate/", {"generation": "A100-SXM4-80GB"}, format="json"
    )
    assert refused.status_code == 400
    assert Lease.objects.get(pk=lease.pk).settlements.count() == 0
