"""The tenant console, page by page, with three logins: the tenant's owner, a member of the
same tenant (reads only) and an outsider (the owner of another tenant)."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from ledger import money
from ledger.audit.bill import audit_bill
from ledger.audit.receipt import verify_receipt
from scheduler.telemetry.sample import TelemetrySample as Sample
from tests.ledger.helpers import org_roots
from tests.webapp import leases
from tests.webapp.helpers import Login, console_login
from webapp.fleet.telemetry import record_samples
from webapp.leasing import actions, bills, states
from webapp.leasing.models import Lease, Settlement
from webapp.leasing.scheduling import place_requested
from webapp.outbox.relay import relay_once
from webapp.tenancy.models import Membership, Tenant

ACTOR = "test"
PASSWORD = "correct horse battery staple"
REQUEST = {"gpu_count": "2", "precision": "BF16", "hours": "1.5", "priority": "0"}


def _login(tenant: Tenant, name: str, role: str) -> Login:
    return console_login(tenant, name, role, PASSWORD)


@pytest.fixture
def owner_login(tenant) -> Login:
    return _login(tenant, "ada", Membership.OWNER)


@pytest.fixture
def member_login(tenant) -> Login:
    return _login(tenant, "bob", Membership.MEMBER)


@pytest.fixture
def outsider_login(db) -> Login:
    other = Tenant.objects.create(name="Other Co", slug="other-co")
    return _login(other, "eve", Membership.OWNER)


def _pages(pk: int) -> list[str]:
    return [
        f"/console/leases/{pk}/",
        f"/console/leases/{pk}/receipt.json",
        f"/console/leases/{pk}/readings.csv",
        f"/console/leases/{pk}/readings/0.csv",
    ]


# -- who may open what --


def test_anonymous_callers_are_sent_to_the_login_page(client, db):
    for url in ("/console/", "/console/bills/", "/console/gpus/", "/console/leases/new/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/console/login/")


def test_login_with_a_password_opens_the_tenants_leases(client, owner_login):
    page = client.get("/console/login/")
    assert page.status_code == 200 and b'name="password"' in page.content
    done = client.post("/console/login/", {"username": "ada", "password": PASSWORD})
    assert done.status_code == 302 and done["Location"] == "/console/"
    assert b"Leases of Owner Co" in client.get("/console/").content
    wrong = Client().post("/console/login/", {"username": "ada", "password": "nope"})
    assert b"did not match" in wrong.content


def test_a_login_without_a_tenant_is_refused(client, db):
    client.force_login(get_user_model().objects.create_user("loner", "", PASSWORD))
    response = client.get("/console/")
    assert response.status_code == 403 and b"not a member of any tenant" in response.content


def test_it_works(owner_login, fleet):
    lease = leases.active(owner_login.membership.tenant, fleet.gpus[:2])
    listed = owner_login.client.get("/console/")
    assert listed.status_code == 200
    assert f'data-lease="{lease.pk}"'.encode() in listed.content
    detail = owner_login.client.get(f"/console/leases/{lease.pk}/")
    assert detail.status_code == 200 and fleet.gpus[0].uuid.encode() in detail.content
    assert b'id="end"' in detail.content


def test_it_validates_ownership(owner_login, outsider_login, fleet):
    lease = leases.settled(leases.active(owner_login.membership.tenant, fleet.gpus[:2]))
    other = outsider_login.client
    for url in _pages(lease.pk):
        assert other.get(url).status_code == 404, url
    for action in ("end", "cancel", "migrate"):
        assert other.post(f"/console/leases/{lease.pk}/{action}/").status_code == 404
    assert f'data-lease="{lease.pk}"'.encode() not in other.get("/console/").content
    assert other.get("/console/leases/live.json").json() == {"leases": []}
    assert b"No bills yet" in other.get("/console/bills/").content
    month = bills.month_of(lease.settlements.get().end_ms)
    assert other.get(f"/console/bills/{month}.json").json()["lines"] == []
    assert fleet.gpus[0].uuid.encode() not in other.get("/console/gpus/").content
    assert Lease.objects.get(pk=lease.pk).state == states.SETTLED


def test_member_reads_every_page_but_cannot_change_a_lease(owner_login, member_login, fleet):
    lease = leases.active(owner_login.membership.tenant, fleet.gpus[:2])
    member = member_login.client
    assert member.get(f"/console/leases/{lease.pk}/").status_code == 200
    assert b'id="end"' not in member.get(f"/console/leases/{lease.pk}/").content
    for url in ("/console/", "/console/bills/", "/console/gpus/", "/console/leases/new/"):
        assert member.get(url).status_code == 200, url
    refused = member.post(f"/console/leases/{lease.pk}/end/")
    assert refused.status_code == 403 and b"only the tenant&#x27;s owner" in refused.content
    assert member.post("/console/leases/new/", {**REQUEST, "request": ""}).status_code == 403
    assert Lease.objects.get(pk=lease.pk).state == states.ACTIVE
    assert Lease.objects.count() == 1


def test_a_write_page_answers_only_post(owner_login, fleet):
    lease = leases.active(owner_login.membership.tenant, fleet.gpus[:2])
    assert owner_login.client.get(f"/console/leases/{lease.pk}/end/").status_code == 405
    assert Lease.objects.get(pk=lease.pk).state == states.ACTIVE


# -- request with a price preview, end, migrate --


def test_preview_shows_the_breakdown_and_writes_nothing(owner_login, attested_node):
    page = owner_login.client.post("/console/leases/new/", {**REQUEST, "preview": ""})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="price-preview"' in html and "A100-SXM4-80GB" in html
    for label in ("Planned GPU-hours", "Capacity", "per GPU-hour", "PUE", "per kWh", "Quote"):
        assert label in html
    assert not Lease.objects.exists()


def _micro(html: str, element_id: str) -> int:
    return int(re.search(rf'id="{element_id}" data-micro="(-?\d+)"', html)[1])


def test_console_api_and_ledger_show_one_quote_to_the_micro_unit(
    owner_login, owner, attested_node, ledger
):
    """The price on the request form, the API's preview, the lease page and the API's lease
    are the quote of the terms the ledger records (Terms.quote(): capacity + energy)."""
    form = owner_login.client.post("/console/leases/new/", {**REQUEST, "preview": ""})
    shown = _micro(form.content.decode(), "preview-total")
    parts = (
        _micro(form.content.decode(), "preview-capacity"),
        _micro(form.content.decode(), "preview-energy"),
    )
    api = owner.client.post("/api/v1/price-preview/", REQUEST, format="json").json()
    assert api["quote_micro"] == shown == sum(parts)
    assert (api["quote"]["capacity_micro"], api["quote"]["energy_micro"]) == parts
    owner_login.client.post("/console/leases/new/", {**REQUEST, "request": ""})
    lease = Lease.objects.get()
    place_requested(actor=ACTOR)
    relay_once(ledger)
    lease.refresh_from_db()
    on_chain = json.loads(
        ledger.evaluate("GetLease", json.dumps({"lease_id": str(lease.ledger_id)}))
    )
    recorded = money.Terms.of(on_chain["terms"]).quote()
    assert recorded == shown
    page = owner_login.client.get(f"/console/leases/{lease.pk}/").content.decode()
    assert _micro(page, "lease-quote") == _micro(page, "lease-quote-total") == recorded
    listed = owner_login.client.get("/console/").content.decode()
    assert f'data-micro="{recorded}"' in listed
    assert owner.client.get(f"/api/v1/leases/{lease.pk}/").json()["price_total_micro"] == recorded
    # the energy breakdown's total alone is a fraction of it (what the console once showed)
    assert money.to_micro(lease.price["total"]) < recorded / 2


def test_preview_and_request_name_the_bad_field(owner_login, fleet):
    page = owner_login.client.post(
        "/console/leases/new/", {**REQUEST, "gpu_count": "0", "request": ""}
    )
    assert page.status_code == 200 and b"gpu_count:" in page.content
    assert not Lease.objects.exists()


def test_a_request_above_the_tenants_entitlement_is_refused_on_the_form(owner_login, fleet):
    tenant = owner_login.membership.tenant
    page = owner_login.client.post(
        "/console/leases/new/",
        {**REQUEST, "priority": str(tenant.max_priority + 1), "request": ""},
    )
    assert page.status_code == 200 and b"lease.priority:" in page.content
    assert b"entitlement" in page.content
    assert not Lease.objects.exists()


def test_owner_requests_a_lease(owner_login, fleet):
    done = owner_login.client.post("/console/leases/new/", {**REQUEST, "request": ""})
    lease = Lease.objects.get()
    assert done.status_code == 302 and done["Location"] == f"/console/leases/{lease.pk}/"
    assert lease.tenant == owner_login.membership.tenant and lease.hours == Decimal("1.5")
    assert lease.state == states.REQUESTED


def test_owner_ends_an_active_lease_and_a_second_end_is_explained(owner_login, fleet):
    lease = leases.active(owner_login.membership.tenant, fleet.gpus[:2])
    owner_login.client.post(f"/console/leases/{lease.pk}/end/")
    assert Lease.objects.get(pk=lease.pk).state == states.ENDING
    again = owner_login.client.post(f"/console/leases/{lease.pk}/end/", follow=True)
    assert b"cannot go from &#x27;ending&#x27; to &#x27;ending&#x27;" in again.content


def test_migrate_to_an_unknown_generation_names_it(owner_login, fleet):
    lease = leases.active(owner_login.membership.tenant, fleet.gpus[:2])
    page = owner_login.client.post(
        f"/console/leases/{lease.pk}/migrate/", {"generation": "B200"}, follow=True
    )
    assert b"generation: &#x27;B200&#x27; is not in the catalogue" in page.content
    assert Lease.objects.get(pk=lease.pk).state == states.ACTIVE


def test_a_line_still_to_come_before_a_move_is_announced(owner_login, fleet):
    lease = leases.active(owner_login.membership.tenant, fleet.gpus[:2])
    page = owner_login.client.get(f"/console/leases/{lease.pk}/").content.decode()
    assert "To come" not in page
    move = {"gpus": [g.uuid for g in fleet.gpus[:2]], "terms": lease.terms, "until_ms": 1_000}
    Lease.objects.filter(pk=lease.pk).update(unsettled_moves=[move])
    page = owner_login.client.get(f"/console/leases/{lease.pk}/").content.decode()
    generation = lease.terms["generation"]
    assert "To come: the line up to the move at" in page
    assert "1970-01-01 00:00:01 UTC</time>" in page and f"at the {generation} terms" in page


def test_live_progress_of_the_tenants_leases(owner_login, fleet, settings):
    settings.LEASE_HOUR_S = 1  # one leased hour per second: a 1-hour lease is done at once
    lease = leases.active(owner_login.membership.tenant, fleet.gpus[:2])
    Lease.objects.filter(pk=lease.pk).update(started=lease.started.replace(year=2000))
    live = owner_login.client.get("/console/leases/live.json").json()
    expected = {"id": lease.pk, "state": "active", "word": "running", "progress": 100}
    assert live == {"leases": [expected]}


# -- downloads, bills, attestation --


def test_receipt_downloads_once_the_lease_is_on_the_ledger(
    owner_login, fleet, attested_node, ledger, settings
):
    lease = leases.placed(owner_login.membership.tenant, fleet.gpus[:2], [attested_node])
    url = f"/console/leases/{lease.pk}/receipt.json"
    assert owner_login.client.get(url).status_code == 409
    relay_once(ledger)
    response = owner_login.client.get(url)
    assert response.status_code == 200
    assert (
        response["Content-Disposition"] == f'attachment; filename="lease-{lease.pk}-receipt.json"'
    )
    assert verify_receipt(response.json(), org_roots(settings.LEDGER_PATH)) == []


def test_readings_are_the_lease_gpus_samples_while_it_ran(owner_login, fleet):
    lease = leases.active(owner_login.membership.tenant, fleet.gpus[:2])
    started = lease.started - timedelta(seconds=10)
    Lease.objects.filter(pk=lease.pk).update(started=started)
    start_ms = int(started.timestamp() * 1000)
    record_samples(
        Sample(g.uuid, start_ms + t * 1000, 10**9 + t, 300_000, 80, 40, 60)
        for g in fleet.gpus  # two GPUs of the lease, two of no one's
        for t in (-1, 0, 1, 2)  # one sample before the lease started
    )
    response = owner_login.client.get(f"/console/leases/{lease.pk}/readings.csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {row["gpu"] for row in rows} == {g.uuid for g in fleet.gpus[:2]}
    assert len(rows) == 6 and rows[0]["power_mw"] == "300000"


def test_bills_by_month_list_each_settlement_line(owner_login, outsider_login, fleet):
    mine = leases.settled(leases.active(owner_login.membership.tenant, fleet.gpus[:1]))
    theirs = leases.settled(
        leases.active(outsider_login.membership.tenant, fleet.gpus[1:2]), watts=400
    )
    line, other = mine.settlements.get(), theirs.settlements.get()
    bill = bills.bill(Settlement.objects.filter(lease=mine), bills.month_of(line.end_ms))
    assert bill["total_micro"] == line.total_micro > 0
    html = owner_login.client.get("/console/bills/").content.decode()
    assert "1 line, total" in html and "comment" not in html
    assert f'class="bill-total" data-micro="{bill["total_micro"]}"' in html
    for figure in (
        line.capacity_micro,
        line.priced_energy_micro,
        line.measured_energy_micro,
        line.settlement_micro,
        line.total_micro,
    ):  # in people's units, each exact in data-micro and on hover
        assert f'data-micro="{figure}"' in html, figure
        assert f"exactly {figure:,} micro-units" in html, figure
    assert f"exactly {line.measured_energy_mj:,} mJ" in html
    assert f'data-month="{bills.month_of(line.end_ms)}"' in html
    assert f">#{theirs.pk}</a>" not in html and f'data-micro="{other.total_micro}"' not in html


def test_lease_page_shows_its_bill_lines_with_their_evidence(
    owner_login, fleet, attested_node, ledger
):
    placed = leases.placed(owner_login.membership.tenant, fleet.gpus[:1], [attested_node])
    # no energy drawn: a line measuring energy waits for the quote that attests its readings
    # (tests/webapp/outbox/test_ledger_relay.py), and this fleet's agent sends none
    lease = leases.settled(actions.activate_lease(placed, actor=ACTOR), watts=0)
    relay_once(ledger)
    line = Settlement.objects.get(lease=lease)
    assert line.ledger_tx and line.validation_code
    html = owner_login.client.get(f"/console/leases/{lease.pk}/").content.decode()
    assert "1 line, total" in html and f'data-micro="{line.total_micro}"' in html
    for evidence in (line.ledger_tx, str(line.ledger_block), line.validation_code):
        assert evidence in html


def test_gpus_page_shows_the_attestation_of_held_gpus(owner_login, fleet, attested_node):
    leases.active(owner_login.membership.tenant, fleet.gpus[:2])
    html = owner_login.client.get("/console/gpus/").content.decode()
    assert fleet.gpus[0].uuid in html and fleet.gpus[3].uuid not in html
    assert "valid at" in html and "(on the ledger)" in html


def verdicts(html: str) -> list[str]:
    return re.findall(r'class="verdict" data-verdict="(\w+)"', html)


def test_bill_lines_show_the_verdict_of_the_auditor_run_on_this_server(
    owner_login, fleet, attested_node, ledger, node_agent
):
    """The verdict is ledger.audit.bill's on the receipt and readings the tenant downloads:
    a line the database no longer agrees with the ledger on fails, naming the figure."""
    placed = leases.placed(owner_login.membership.tenant, fleet.gpus[:2], [attested_node])
    lease = leases.settled_from_readings(actions.activate_lease(placed, actor=ACTOR), node_agent)
    page = owner_login.client.get("/console/bills/").content.decode()
    assert verdicts(page) == ["pending"]  # not on the ledger yet: nothing to re-derive
    relay_once(ledger)
    page = owner_login.client.get("/console/bills/").content.decode()
    assert verdicts(page) == ["verified"], page
    assert "wattlease ledger audit-bill BILL.json --receipts RECEIPTS --trust ROOTS.pem" in page
    lease_page = owner_login.client.get(f"/console/leases/{lease.pk}/").content.decode()
    assert verdicts(lease_page) == ["verified"]

    line = lease.settlements.get()
    Settlement.objects.filter(pk=line.pk).update(total_micro=line.total_micro + 1)
    page = owner_login.client.get("/console/bills/").content.decode()
    assert verdicts(page) == ["failed"]
    expected = (
        f"total_micro {line.total_micro + 1} differs from the ledger&#x27;s {line.total_micro}"
    )
    assert expected in page


def test_the_files_of_the_audit_download_as_the_api_serves_them(
    owner_login, fleet, attested_node, node_agent, ledger, settings, tmp_path
):
    """BILL.json, the receipt and the line's readings from the console: the command shown
    on the bills page holds on them."""
    placed = leases.placed(owner_login.membership.tenant, fleet.gpus[:2], [attested_node])
    lease = leases.settled_from_readings(actions.activate_lease(placed, actor=ACTOR), node_agent)
    relay_once(ledger)
    client, line = owner_login.client, lease.settlements.get()
    month = bills.month_of(line.end_ms)
    bill = client.get(f"/console/bills/{month}.json")
    assert bill["Content-Disposition"] == f'attachment; filename="bill-{month}.json"'
    (tmp_path / "bill.json").write_bytes(bill.content)
    receipts, readings = tmp_path / "receipts", tmp_path / "readings" / str(lease.ledger_id)
    receipts.mkdir()
    readings.mkdir(parents=True)
    receipt = client.get(f"/console/leases/{lease.pk}/receipt.json").content
    (receipts / f"{lease.ledger_id}.json").write_bytes(receipt)
    rows = client.get(f"/console/leases/{lease.pk}/readings/0.csv")
    assert rows["Content-Type"] == "text/csv" and rows.content.count(b"\n") == 4
    (readings / "0.csv").write_bytes(rows.content)
    roots = tmp_path / "roots"
    roots.mkdir()
    for msp, pem in org_roots(settings.LEDGER_PATH).items():
        (roots / f"{msp}.pem").write_bytes(pem)
    verdict = audit_bill(tmp_path / "bill.json", receipts, roots, tmp_path / "readings")
    assert [v.ok for v in verdict] == [True], verdict
    assert client.get("/console/bills/2026-13.json").status_code == 400
    assert client.get(f"/console/leases/{lease.pk}/readings/1.csv").status_code == 404


def test_a_line_whose_receipt_the_ledger_cannot_give_is_unchecked_not_failed(
    owner_login, fleet, ledger
):
    lease = leases.settled(leases.active(owner_login.membership.tenant, fleet.gpus[:1]))
    Settlement.objects.filter(lease=lease).update(ledger_tx="ab" * 32)  # the relay's word only
    page = owner_login.client.get("/console/bills/").content.decode()
    assert verdicts(page) == ["unchecked"]
    assert f"not checked: lease {lease.pk} is not on the ledger yet" in page
