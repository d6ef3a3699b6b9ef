"""The rate card in force is the one both organisations approved on the ledger: the web app
prices and writes lease terms with it, so the contract (which checks terms against the same
card) accepts the next lease without a redeploy (webapp/fleet/rate_card.py)."""

from __future__ import annotations

from decimal import Decimal

from chaincode_client.governance import decide
from ledger.contract.terms import DEPLOYED
from tests.ledger.test_governance import rate_card_document
from webapp.fleet import rate_card
from webapp.leasing import actions, states
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import place_requested
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once

A100 = "A100-SXM4-80GB"


def test_without_an_approved_card_the_deployed_one_is_in_force(ledger):
    assert rate_card.in_force().card is DEPLOYED
    assert rate_card.in_force().document is None


def test_a_card_both_organisations_approve_prices_the_next_lease_and_the_ledger_accepts_it(
    owner, fleet, attested_node, ledger, ledger_admins
):
    old = DEPLOYED.capacity_micro_per_gpu_hour[A100]
    document = rate_card_document(**{A100: 3 * old})
    assert decide(ledger_admins[0], ledger_admins[1], "rate_card", "default", document)
    in_force = rate_card.in_force()
    assert in_force.card.capacity_micro_per_gpu_hour[A100] == 3 * old
    assert in_force.card.version == "2027-01-01"

    lease = actions.request_lease(
        owner.tenant, gpu_count=1, precision="FP16", hours=Decimal(1), actor="test"
    )
    place_requested(actor="test")
    lease.refresh_from_db()
    assert lease.terms["capacity_micro_per_gpu_hour"] == 3 * old
    relay_once(ledger)  # CreateLease: the endorsers check the terms against the same card
    failed = OutboxEntry.objects.exclude(status=OutboxEntry.DONE).values("function", "last_error")
    assert not failed, list(failed)
    assert Lease.objects.get(pk=lease.pk).state == states.ACTIVE


def test_an_unreadable_ledger_keeps_the_card_last_read(ledger, ledger_admins, settings, tmp_path):
    old = DEPLOYED.capacity_micro_per_gpu_hour[A100]
    decide(*ledger_admins[:2], "rate_card", "default", rate_card_document(**{A100: 2 * old}))
    approved = rate_card.in_force()
    assert approved.card.capacity_micro_per_gpu_hour[A100] == 2 * old
    settings.LEDGER_PATH = tmp_path / "not-a-ledger.sqlite3"
    settings.LEDGER_PATH.write_bytes(b"this is not SQLite")
    assert rate_card.in_force() is approved  # logged; never back to the deployed card


def test_a_sites_pue_and_tariff_are_the_cards_in_the_quote_and_in_the_terms(
    owner, fleet, attested_node, ledger, ledger_admins
):
    """One source for a site's PUE and tariff: the price the tenant is shown and the terms the
    ledger checks both follow the card in force (the database keeps only the site's name)."""
    document = rate_card_document()
    code = next(
        c for c, s in document["rate_card"]["sites"].items() if s["name"] == fleet.site.name
    )
    document["rate_card"]["sites"][code].update(pue_milli=1500, tariff_micro_per_kwh=410_000)
    decide(*ledger_admins[:2], "rate_card", "default", document)
    request = {"gpu_count": 1, "precision": "FP16", "hours": "1"}
    price = owner.client.post("/api/v1/price-preview/", request, format="json").json()["price"]
    assert (Decimal(price["pue"]), Decimal(price["tariff_per_kwh"])) == (
        Decimal("1.5"),
        Decimal("0.41"),
    )
    lease = actions.request_lease(
        owner.tenant, gpu_count=1, precision="FP16", hours=Decimal(1), actor="test"
    )
    place_requested(actor="test")
    lease.refresh_from_db()
    assert (lease.terms["pue_milli"], lease.terms["tariff_micro_per_kwh"]) == (1500, 410_000)
    assert lease.price["pue"] == price["pue"]
