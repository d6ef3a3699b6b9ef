"""The versioned API: old paths redirect, the price preview answers from the scheduler
without writing anything, and the OpenAPI schema lists every operation's errors."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ledger import money
from webapp.fleet import rate_card
from webapp.fleet.models import Node
from webapp.leasing.models import Lease
from webapp.leasing.scheduling import build_plan_input, job_entry, plan
from webapp.outbox.models import OutboxEntry

REQUEST = {"gpu_count": 2, "precision": "BF16", "hours": "1.50"}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("/api/leases/", "/api/v1/leases/"),
        ("/api/leases/7/receipt/?x=1", "/api/v1/leases/7/receipt/?x=1"),
        ("/api/bills/", "/api/v1/bills/"),
        ("/api/schema/", "/api/v1/schema/"),
        ("/api/docs/", "/api/v1/docs/"),
    ],
)
def test_unversioned_paths_redirect_permanently_keeping_the_method(client, db, old, new):
    for method in (client.get, client.post):
        response = method(old)
        assert response.status_code == 308
        assert response["Location"] == new


def test_a_followed_post_redirect_still_requests_the_lease(owner):
    response = owner.client.post("/api/leases/", REQUEST, format="json", follow=True)
    assert response.status_code == 201
    assert Lease.objects.get().gpu_count == 2


def test_price_preview_shows_the_schedulers_price_and_writes_nothing(owner, member, attested_node):
    writes = OutboxEntry.objects.count()
    response = member.client.post("/api/v1/price-preview/", REQUEST, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["placeable"] and body["generation"] == "A100-SXM4-80GB"
    assert len(body["gpus"]) == 2 and body["preempts"] == 0
    # the same numbers the scheduler gives for the same fleet and job, not a restated formula
    data, _ = build_plan_input()
    data["jobs"] = [job_entry("x", gpu_count=2, precision="BF16", hours=Decimal("1.50"))]
    placement = plan(data, rate_card.in_force()).placements[0]
    expected = placement.price.as_dict()
    assert body["price"] == expected
    # the quote is the lease terms' Terms.quote(): capacity plus energy, in micro-units
    assert body["quote_micro"] == placement.quote_micro
    assert body["quote"]["quote_micro"] == money.Terms.of(placement.lease_terms(0)).quote()
    parts = body["quote"]["capacity_micro"] + body["quote"]["energy_micro"]
    assert parts == body["quote_micro"]
    # hours are baseline hours of work: a faster generation plans fewer GPU-hours
    planned = sum(Decimal(line["gpu_hours"]) for line in expected["lines"])
    assert Decimal(body["planned_gpu_hours"]) == planned < Decimal("3.00")
    line = body["price"]["lines"][0]
    assert {"attributed_power_w", "pue", "gpu_hours", "cost"} <= set(line)
    assert not Lease.objects.exists() and OutboxEntry.objects.count() == writes


def test_price_preview_says_why_a_request_would_wait(owner, fleet):
    Node.objects.filter(pk=fleet.node.pk).update(trust=Node.FAILED)
    body = owner.client.post("/api/v1/price-preview/", REQUEST, format="json").json()
    assert body["placeable"] is False and body["reason"]


def test_price_preview_names_the_bad_field(owner, fleet):
    response = owner.client.post(
        "/api/v1/price-preview/", {**REQUEST, "precision": "FP4"}, format="json"
    )
    assert response.status_code == 400 and set(response.json()["fields"]) == {"precision"}


def test_price_preview_needs_a_key(client, db):
    assert client.post("/api/v1/price-preview/", REQUEST).status_code in (401, 403)


def test_every_operation_documents_its_errors(client, db):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    paths = schema.json()["paths"]
    assert all(path.startswith("/api/v1/") for path in paths)
    assert "/api/v1/price-preview/" in paths
    for path, operations in paths.items():
        if path == "/api/v1/schema/":
            continue
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert "401" in codes, (method, path)
            if "{id}" in path:
                assert "404" in codes, (method, path)
            if method == "post":
                assert {"400", "413"} <= codes, (method, path)
    lease_create = paths["/api/v1/leases/"]["post"]["responses"]
    assert {"400", "401", "403"} <= set(lease_create)
    receipt = paths["/api/v1/leases/{id}/receipt/"]["get"]["responses"]
    assert {"404", "409", "501"} <= set(receipt)
    errors = schema.json()["components"]["schemas"]
    assert "detail" in errors["Error"]["properties"]
