"""Tenant receipts on a real Fabric network: the app relays a swtpm node's registration and
quote, a lease, its end and its settlement; the tenant fetches the lease's receipt through the
API (the raw blocks holding those transactions, from the peer's QSCC) and it re-checks offline
against the channel's roots, and fails, naming the defect, once tampered with or checked
against another channel's roots. Also here, as it needs the app on Fabric with both
organisations' admins: a rate card they approve on the channel prices the app's next lease."""

from __future__ import annotations

import base64
import json
import socket
import time
from decimal import Decimal

import pytest

from chaincode_client.fabric_network.roots import roots_pem
from chaincode_client.governance import decide
from ledger.__main__ import main as ledger_cli
from ledger.audit.fabric_block import parse_block, parse_endorser_tx
from ledger.audit.fabric_receipt import verify_fabric_receipt
from ledger.contract.terms import DEPLOYED
from tests.fabric.network_fixture import new_chaincode
from tests.ledger.fabric_chain import Channel, drop_endorsement, flip_byte
from tests.ledger.test_governance import rate_card_document
from tests.webapp import leases
from tests.webapp.bill_audit import audit_holds_and_fails_on_each_edit, fetch_evidence
from tests.webapp.fabric_app import app_on_fabric
from tests.webapp.helpers import console_login, drawn, place
from webapp.demo.governance import admin_clients
from webapp.leasing import actions
from webapp.leasing.models import Lease, Settlement
from webapp.leasing.scheduling import next_lines, open_interval, place_requested
from webapp.outbox.ledger import close_ledger_client
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once
from webapp.tenancy.models import Membership

pytestmark = pytest.mark.fabric
ACTOR = "test"
RELAY_TIMEOUT_S = 60


@pytest.fixture
def ledger(settings, fabric_network, monkeypatch):
    """Overrides the embedded `ledger` of tests/webapp/conftest.py: the app on Fabric, on a
    contract namespace of its own (an empty ledger)."""
    chaincode = new_chaincode(fabric_network, "receipt")
    with app_on_fabric(settings, fabric_network, monkeypatch, chaincode) as client:
        yield client


@pytest.fixture
def ledger_admins(ledger, fabric_network):
    with admin_clients(fabric_network) as admins:
        yield admins


def relay_all(ledger) -> None:
    deadline = time.monotonic() + RELAY_TIMEOUT_S
    while OutboxEntry.objects.exclude(status=OutboxEntry.DONE).exists():
        rejected = OutboxEntry.objects.filter(status=OutboxEntry.REJECTED)
        assert not rejected.exists(), list(rejected.values("function", "last_error"))
        assert time.monotonic() < deadline, list(OutboxEntry.objects.values("function", "status"))
        relay_once(ledger)


def settled_lease(fleet, tenant, attestation, ledger, node_agent):
    """A lease whose GPUs drew 300 W, the readings bound into the node's next quote."""
    lease = actions.request_lease(
        tenant, gpu_count=2, precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    lease = place(lease, fleet.gpus[:2], [attestation])
    actions.activate_lease(lease, actor=ACTOR)
    actions.end_lease(lease, actor=ACTOR)
    lease = Lease.objects.get(pk=lease.pk)
    start, end = lease.terms["start_ms"], int(lease.ended.timestamp() * 1000)
    assert node_agent.attest(drawn(fleet.gpus[:2], start, end, watts=300))["valid"]
    actions.settle_lease(lease, next_lines(lease, open_interval(lease)), actor=ACTOR)
    relay_all(ledger)
    return lease


def functions(receipt) -> dict[str, str]:
    """tx id -> the contract function each transaction of the receipt called"""
    blocks = {b["number"]: parse_block(base64.b64decode(b["block"])) for b in receipt["blocks"]}
    return {
        t["tx_id"]: parse_endorser_tx(blocks[t["block"]].envelopes[t["index"]]).fn
        for t in receipt["transactions"]
    }


def test_tenant_receipt_from_fabric_verifies_against_the_channel_roots(
    fleet, owner, outsider, attested_node, node_agent, ledger, fabric_network, tmp_path, capsys
):
    lease = settled_lease(fleet, owner.tenant, attested_node, ledger, node_agent)
    started = time.perf_counter()
    response = owner.client.get(f"/api/v1/leases/{lease.pk}/receipt/")
    fetched_ms = 1000 * (time.perf_counter() - started)
    assert response.status_code == 200, response.content
    receipt = response.json()
    assert receipt["format"] == "fabric/1" and receipt["channel"] == "wattlease"
    roots = roots_pem(fabric_network.layout, ledger.chaincode).encode()  # what the app runs
    assert verify_fabric_receipt(receipt, roots) == []
    by_fn = functions(receipt)
    # the attestation the lease relied on, and the one whose quote bound its line's readings
    assert sorted(by_fn.values()) == sorted(
        ["RegisterNode", "RecordAttestation", "RecordAttestation", "CreateLease", "EndLease",
         "Settle"]
    ), by_fn  # fmt: skip
    assert attested_node.ledger_tx in by_fn

    # the auditor's command line, with the roots file the operator hands out
    receipt_file, roots_file = tmp_path / "receipt.json", tmp_path / "roots.pem"
    receipt_file.write_text(json.dumps(receipt))
    roots_file.write_bytes(roots)
    assert ledger_cli(["verify-receipt", str(receipt_file), "--trust", str(roots_file)]) == 0
    assert capsys.readouterr().out.strip() == "OK"
    print(
        f"receipt: {len(receipt['blocks'])} blocks, {len(by_fn)} transactions, "
        f"fetched through the API in {fetched_ms:.0f} ms"
    )

    settle = next(tx for tx, fn in by_fn.items() if fn == "Settle")
    create = next(tx for tx, fn in by_fn.items() if fn == "CreateLease")
    tampered = verify_fabric_receipt(flip_byte(receipt, settle), roots)
    assert any("data hash does not match the block's transactions" in d for d in tampered)
    dropped = verify_fabric_receipt(drop_endorsement(receipt, create), roots)
    assert any(
        f"({create}): endorsement policy AND(Org1MSP.peer, Org2MSP.peer) not met" in d
        for d in dropped
    ), dropped
    foreign = verify_fabric_receipt(receipt, Channel().roots_pem())
    assert any("no valid orderer signature" in d for d in foreign), foreign
    assert any("not issued by Org1MSP's trust root" in d for d in foreign), foreign

    assert outsider.client.get(f"/api/v1/leases/{lease.pk}/receipt/").status_code == 404


def test_a_tenants_bill_from_fabric_audits_and_fails_on_any_edit(
    fleet, owner, outsider, attested_node, node_agent, ledger, fabric_network, tmp_path, settings
):
    """Issue 11's end to end on the real network: a lease runs on two GPUs drawing 300 W,
    ends and is settled from its stored readings; the tenant's bill, receipt and readings
    come through the API and `audit-bill` holds with the channel's roots, then fails on the
    line an edit touches."""
    placed = leases.placed(owner.tenant, fleet.gpus[:2], [attested_node])
    lease = leases.settled_from_readings(actions.activate_lease(placed, actor=ACTOR), node_agent)
    relay_all(ledger)

    evidence = fetch_evidence(owner.client, tmp_path)
    [billed] = evidence.bill["lines"]
    assert (billed["lease"], billed["measured_energy_mj"]) == (str(lease.ledger_id), 2 * 600)
    assert billed["evidence"]["validation_code"] == "VALID", billed["evidence"]
    receipt = json.loads((evidence.receipts / f"{lease.ledger_id}.json").read_text())
    assert receipt["format"] == "fabric/1"
    roots = roots_pem(fabric_network.layout, ledger.chaincode)  # what the operator hands out
    foreign = Channel().roots_pem().decode()  # a channel with CAs of its own
    audit_holds_and_fails_on_each_edit(
        tmp_path, evidence, roots, foreign, "no valid orderer signature"
    )
    assert outsider.client.get("/api/v1/bills/").json()["lines"] == []

    # the console's verdict: the same auditor, run by the server with the channel's roots
    (tmp_path / "channel-roots.pem").write_text(roots)
    settings.LEDGER_TRUST_ROOTS = str(tmp_path / "channel-roots.pem")
    console = console_login(owner.tenant, "ada", Membership.MEMBER, "not used").client
    assert (
        'class="verdict" data-verdict="verified"' in console.get("/console/bills/").content.decode()
    )
    stored = lease.settlements.get()
    Settlement.objects.filter(pk=stored.pk).update(capacity_micro=stored.capacity_micro + 1)
    page = console.get("/console/bills/").content.decode()
    assert 'class="verdict" data-verdict="failed"' in page and "capacity_micro" in page


def test_receipt_of_a_lease_not_yet_on_the_channel_is_a_conflict(fleet, owner, ledger):
    lease = actions.request_lease(
        owner.tenant, gpu_count=2, precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    assert owner.client.get(f"/api/v1/leases/{lease.pk}/receipt/").status_code == 409


def test_receipt_while_the_peer_is_unreachable_is_a_503(
    fleet, owner, settings, fabric_network, monkeypatch
):
    for key, value in fabric_network.layout.client_env("Org1MSP").items():
        monkeypatch.setenv(key, value)
    with socket.socket() as sock:  # a loopback port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    monkeypatch.setenv("FABRIC_PEER_ENDPOINT", f"127.0.0.1:{dead}")
    settings.LEDGER_BACKEND = "fabric"
    close_ledger_client()
    lease = actions.request_lease(
        owner.tenant, gpu_count=2, precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    try:
        response = owner.client.get(f"/api/v1/leases/{lease.pk}/receipt/")
    finally:
        close_ledger_client()
    assert response.status_code == 503
    assert "unreachable" in response.json()["detail"]


def test_a_rate_card_approved_on_the_channel_prices_the_next_lease(
    fleet, owner, attested_node, ledger, ledger_admins
):
    """webapp/fleet/rate_card.py reads the approved card with GetPolicy on Fabric: the lease's
    terms carry its rate and both organisations' peers accept them."""
    a100 = "A100-SXM4-80GB"
    old = DEPLOYED.capacity_micro_per_gpu_hour[a100]
    decide(*ledger_admins[:2], "rate_card", "default", rate_card_document(**{a100: 3 * old}))
    lease = actions.request_lease(
        owner.tenant, gpu_count=1, precision="FP16", hours=Decimal(1), actor=ACTOR
    )
    place_requested(actor=ACTOR)
    lease.refresh_from_db()
    assert lease.terms["capacity_micro_per_gpu_hour"] == 3 * old
    relay_all(ledger)
    failed = OutboxEntry.objects.exclude(status=OutboxEntry.DONE).values("function", "last_error")
    assert not failed, list(failed)
    assert Lease.objects.get(pk=lease.pk).state == "active"
