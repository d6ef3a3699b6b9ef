"""A running lease moves to another GPU generation: the interval before the move is settled
at the old terms, the rest at the new ones, and the ledger records the move."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal

import pytest

from attest.agent.http import AgentApi, attest_once
from attest.agent.tpm import Agent
from attest.swtpm import start_node_tpm
from ledger.audit.receipt import export_receipt, verify_receipt
from tests.ledger.helpers import org_roots
from tests.webapp.bill_audit import audit_holds_and_fails_on_each_edit, fetch_evidence
from tests.webapp.conftest import NodeAgent, enrol_node, set_golden_values
from webapp.attestation import actions as attestation_actions
from webapp.demo.seed import gpu_uuid
from webapp.fleet.models import GPU, Generation, Node
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import next_lines, open_interval, place_requested, settle_closed
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once
from webapp.tenancy.models import Tenant

ACTOR = "test"


@pytest.fixture(scope="module")
def h100_tpm(tmp_path_factory, ca):
    tpm = start_node_tpm(tmp_path_factory.mktemp("h100-tpm"), ca)
    yield tpm
    tpm.stop()


@pytest.fixture
def h100_agent(fleet, h100_tpm, live_server, api, ledger):
    """A second node, of H100s, at the same site, attested and on the ledger: its agent."""
    node = Node.objects.create(
        name="node-2", site=fleet.site, pcr_policy=fleet.node.pcr_policy, status=Node.ACTIVE
    )
    h100 = Generation.objects.get(catalogue_id="H100-SXM5-80GB")
    for i in range(4):
        GPU.objects.create(uuid=gpu_uuid("node-2", i), node=node, index=i, generation=h100)
    token = attestation_actions.issue_node_credential(node, actor=ACTOR)
    with Agent(h100_tpm.tcti) as agent:
        node_api = AgentApi(live_server.url, token)
        node_agent = NodeAgent(agent, node_api, enrol_node(agent, node_api))
        assert node_agent.attest()["valid"]
        yield node_agent


@pytest.fixture
def h100_node(h100_agent):
    return Node.objects.get(name="node-2")


def test_a_lease_migrates_and_each_interval_is_settled_at_its_own_terms(
    fleet, tenant, agent, api, owner, ledger, h100_node, settings
):
    ak = enrol_node(agent, api)
    set_golden_values(Node.objects.get(pk=fleet.node.pk), agent)
    assert attest_once(agent, api, ak)["valid"]
    relay_once(ledger)
    # fill the H100s so the lease lands on the A100s first
    Tenant.objects.filter(pk=tenant.pk).update(max_priority=9)
    tenant.refresh_from_db()
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
    relay_once(ledger)  # the ledger commits both contracts: both leases start
    assert {Lease.objects.get(pk=pk).state for pk in (lease.pk, blocker.pk)} == {states.ACTIVE}
    actions.end_lease(blocker, actor=ACTOR)
    settle_closed(actor=ACTOR)
    relay_once(ledger)

    moved = owner.client.post(
        f"/api/v1/leases/{lease.pk}/migrate/", {"generation": "H100-SXM5-80GB"}, format="json"
    )
    assert moved.status_code == 200, moved.content
    lease.refresh_from_db()
    assert {g.generation.catalogue_id for g in lease.gpus.all()} == {"H100-SXM5-80GB"}
    assert not lease.settlements.exists()  # its line waits for the settle pass
    assert [m["until_ms"] for m in lease.unsettled_moves] == [lease.terms["start_ms"]]
    assert settle_closed(actor=ACTOR) == 0  # no lease ended; the line before the move is in
    lease.refresh_from_db()
    assert [s.generation for s in lease.settlements.all()] == ["A100-SXM4-80GB"]
    assert lease.unsettled_moves == []
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
    assert verify_receipt(receipt, org_roots(settings.LEDGER_PATH)) == []
    functions = Counter(
        json.loads(json.loads(t["envelope"])["proposal"])["fn"] for t in receipt["transactions"]
    )
    assert functions == {
        "RegisterNode": 2,
        "IssueChallenge": 2,
        "RecordAttestation": 2,
        "CreateLease": 1,
        "MigrateLease": 1,
        "EndLease": 1,
        "Settle": 2,
    }


def test_migration_to_the_same_generation_is_refused(fleet, tenant, owner, agent, api, ledger):
    ak = enrol_node(agent, api)
    attest_once(agent, api, ak)
    relay_once(ledger)
    lease = actions.request_lease(
        owner.tenant, gpu_count=1, precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    place_requested(actor=ACTOR)
    relay_once(ledger)
    assert Lease.objects.get(pk=lease.pk).state == states.ACTIVE
    refused = owner.client.post(
        f"/api/v1/leases/{lease.pk}/migrate/", {"generation": "A100-SXM4-80GB"}, format="json"
    )
    assert refused.status_code == 400
    assert Lease.objects.get(pk=lease.pk).settlements.count() == 0


def _roots(path) -> str:
    """The channel's roots file as an auditor gets it: each organisation's CA certificate from
    that organisation (here its own key folder), never from the receipt under audit."""
    from ledger.audit.fabric_trust import ROLE_ORG

    return "".join(
        f"{ROLE_ORG} {msp}\n{pem.decode().strip()}\n" for msp, pem in org_roots(path).items()
    )


def test_a_migrated_lease_bill_audits_from_receipts_and_fails_on_any_edit(
    fleet, tenant, node_agent, owner, ledger, h100_agent, settings, tmp_path
):
    import time

    from attest.readings import row_text
    from ledger.engine import EmbeddedLedger
    from scheduler.telemetry.sample import TelemetrySample as Sample

    assert node_agent.attest()["valid"]
    relay_once(ledger)
    lease = actions.request_lease(
        owner.tenant, gpu_count=2, precision="FP16", hours=Decimal(2), actor=ACTOR
    )
    place_requested(actor=ACTOR)
    lease.refresh_from_db()
    before = list(lease.gpus.all())
    first = before[0].generation.catalogue_id
    target = "A100-SXM4-80GB" if first == "H100-SXM5-80GB" else "H100-SXM5-80GB"
    relay_once(ledger)  # the ledger holds the contract: the relay's reaction starts the lease
    lease.refresh_from_db()
    assert lease.state == states.ACTIVE

    agents = {fleet.node.pk: node_agent, Node.objects.get(name="node-2").pk: h100_agent}

    def draw(gpus, from_ms: int) -> None:
        """Two counter readings per GPU, 300 W apart, bound into their node's next quote."""
        rows = [
            (g.node_id, Sample(g.uuid, from_ms + dt, 10**6 + dt * 300, 300_000, 90, 50, 60))
            for g in gpus
            for dt in (1, 3)
        ]
        for node in {node for node, _ in rows}:
            text = "".join(row_text(s.canonical()) + "\n" for n, s in rows if n == node)
            assert agents[node].attest(text)["valid"]

    draw(before, lease.terms["start_ms"])
    time.sleep(0.02)
    moved = owner.client.post(
        f"/api/v1/leases/{lease.pk}/migrate/", {"generation": target}, format="json"
    )
    assert moved.status_code == 200, moved.content
    lease.refresh_from_db()
    after = list(lease.gpus.all())
    draw(after, lease.terms["start_ms"])
    time.sleep(0.02)
    actions.end_lease(lease, actor=ACTOR)
    settle_closed(actor=ACTOR)
    relay_once(ledger)
    assert not OutboxEntry.objects.exclude(status=OutboxEntry.DONE).exists()

    evidence = fetch_evidence(owner.client, tmp_path)
    bill = evidence.bill
    assert [(line["seq"], line["generation"]) for line in bill["lines"]] == [
        (0, first),
        (1, target),
    ]
    assert all(line["measured_energy_mj"] == 2 * 2 * 300 for line in bill["lines"])
    for line in bill["lines"]:  # each line names the quotes that attested its readings
        cited = {(b["gpu"], b["digest"]) for b in line["telemetry_batches"]}
        attested = set()
        for quote in line["evidence"]["telemetry_quotes"]:
            record = json.loads(
                ledger.evaluate("GetAttestation", json.dumps({"attestation_id": quote}))
            )
            assert record["valid"]
            attested |= set(record["telemetry"].items())
        assert len(cited) == 2 and cited <= attested
    for line, gpus in zip(bill["lines"], (before, after), strict=True):
        text = (evidence.readings / line["lease"] / f"{line['seq']}.csv").read_text()
        assert {row.split(",")[1] for row in text.splitlines()} == {g.uuid for g in gpus}
    # another channel: a ledger of its own, with organisations of its own
    other = EmbeddedLedger.open(tmp_path / "other.sqlite")
    other.close()
    audit_holds_and_fails_on_each_edit(
        tmp_path,
        evidence,
        _roots(settings.LEDGER_PATH),
        _roots(tmp_path / "other.sqlite"),
        "is not the one you trust",
    )


def running_one_gpu_lease(owner, node_agent, ledger) -> tuple[Lease, GPU, str]:  # type: ignore[no-untyped-def]
    """A 2-hour lease of one GPU, active on the ledger: the lease, its GPU, and the other
    generation of the two nodes to move it to."""
    assert node_agent.attest()["valid"]
    relay_once(ledger)
    lease = actions.request_lease(
        owner.tenant, gpu_count=1, precision="FP16", hours=Decimal(2), actor=ACTOR
    )
    place_requested(actor=ACTOR)
    relay_once(ledger)
    lease.refresh_from_db()
    (gpu,) = lease.gpus.all()
    target = "A100-SXM4-80GB" if gpu.generation_id != "A100-SXM4-80GB" else "H100-SXM5-80GB"
    return lease, gpu, target


def test_the_line_before_a_move_waits_for_and_bills_the_old_gpus_readings_up_to_the_move(
    fleet, tenant, node_agent, owner, ledger, h100_agent, settings
):
    """The move answers at once; its interval's line is settled when a quote has attested the
    old GPUs' readings past the move, so the energy they drew until the move is billed at the
    old terms, even when it reaches the server after the move."""
    import time

    from attest.readings import row_text
    from scheduler.telemetry.sample import TelemetrySample as Sample

    settings.TELEMETRY_SETTLE_WAIT_S = 60
    lease, old, target = running_one_gpu_lease(owner, node_agent, ledger)
    agents = {fleet.node.pk: node_agent, Node.objects.get(name="node-2").pk: h100_agent}
    start_ms = lease.terms["start_ms"]
    time.sleep(0.05)

    started = time.monotonic()
    moved = owner.client.post(
        f"/api/v1/leases/{lease.pk}/migrate/", {"generation": target}, format="json"
    )
    assert moved.status_code == 200, moved.content
    assert time.monotonic() - started < 5  # nothing waits for telemetry in the request
    lease.refresh_from_db()
    until_ms = lease.unsettled_moves[0]["until_ms"]
    assert settle_closed(actor=ACTOR) == 0
    assert not lease.settlements.exists()  # the old GPU's readings past the move are not in

    # the old node's next quote binds its GPU's readings from the start to past the move
    rows = [
        Sample(old.uuid, t, 10**6 + (t - start_ms) * 300, 300_000, 90, 50, 60).canonical()
        for t in (start_ms, until_ms - 1, until_ms + 1_000)
    ]
    assert agents[old.node_id].attest("".join(row_text(r) + "\n" for r in rows))["valid"]
    assert settle_closed(actor=ACTOR) == 0  # it has not ended: only the line before the move
    lease.refresh_from_db()
    (line,) = lease.settlements.all()
    assert (line.generation, line.gpus, line.end_ms, line.final) == (
        old.generation.catalogue_id,
        [old.uuid],
        until_ms,
        False,
    )
    # 300 W between its readings inside the interval (attest.readings: counter deltas)
    assert line.measured_energy_mj == (until_ms - 1 - start_ms) * 300
    assert lease.unsettled_moves == []
    relay_once(ledger)  # the ledger takes the line after the move, at the old terms
    assert not OutboxEntry.objects.exclude(status=OutboxEntry.DONE).exists()


def test_an_ended_lease_is_settled_only_after_the_line_before_its_move(
    fleet, tenant, node_agent, owner, ledger, h100_agent, settings
):
    """Lines are settled in order: a lease that ended while the line before its move waits
    for telemetry is not closed ahead of it, and settle_lease refuses to."""
    import time

    from attest.readings import row_text
    from scheduler.telemetry.sample import TelemetrySample as Sample

    settings.TELEMETRY_SETTLE_WAIT_S = 60
    lease, old, target = running_one_gpu_lease(owner, node_agent, ledger)
    agents = {fleet.node.pk: node_agent, Node.objects.get(name="node-2").pk: h100_agent}
    time.sleep(0.02)
    moved = owner.client.post(
        f"/api/v1/leases/{lease.pk}/migrate/", {"generation": target}, format="json"
    )
    assert moved.status_code == 200, moved.content
    lease.refresh_from_db()
    (new,) = lease.gpus.all()
    time.sleep(0.02)
    actions.end_lease(lease, actor=ACTOR)
    lease.refresh_from_db()
    with pytest.raises(actions.LeaseError, match="before a move is not settled"):
        actions.settle_lease(lease, next_lines(lease, open_interval(lease)), actor=ACTOR)

    def attest_past(gpu, t_ms: int) -> None:
        row = Sample(gpu.uuid, t_ms + 1_000, 10**6, 300_000, 90, 50, 60).canonical()
        assert agents[gpu.node_id].attest(row_text(row) + "\n")["valid"]

    attest_past(new, int(lease.ended.timestamp() * 1000))  # the new GPU's readings are in
    assert settle_closed(actor=ACTOR) == 0  # the old one's are not: nothing is settled
    assert not lease.settlements.exists()
    attest_past(old, lease.unsettled_moves[0]["until_ms"])
    assert settle_closed(actor=ACTOR) == 1  # both lines, in order, in one pass
    lease.refresh_from_db()
    assert lease.state == states.SETTLED
    assert [(s.seq, s.gpus, s.final) for s in lease.settlements.order_by("seq")] == [
        (0, [old.uuid], False),
        (1, [new.uuid], True),
    ]
    relay_once(ledger)
    assert not OutboxEntry.objects.exclude(status=OutboxEntry.DONE).exists()
