"""Tenant API: /api/v1/leases/ and /api/v1/bills/ with owner, member and outsider keys."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone
from rest_framework.test import APIClient

from webapp.leasing import actions
from webapp.leasing.models import Lease
from webapp.tenancy.models import ApiKey

REQUEST = {"gpu_count": 2, "precision": "BF16", "hours": "1.50", "priority": 0}


def test_it_works(owner):
    created = owner.client.post("/api/v1/leases/", REQUEST, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["state"] == "requested"
    listed = owner.client.get("/api/v1/leases/").json()
    assert [lease["id"] for lease in listed["results"]] == [created.json()["id"]]
    assert Lease.objects.get().hours == Decimal("1.50")


def test_it_validates_ownership(owner, outsider):
    lease = actions.request_lease(
        owner.tenant, gpu_count=1, precision="FP16", hours=Decimal(1), actor="t"
    )
    assert outsider.client.get(f"/api/v1/leases/{lease.pk}/").status_code == 404
    assert outsider.client.get("/api/v1/leases/").json()["results"] == []
    assert outsider.client.post(f"/api/v1/leases/{lease.pk}/cancel/").status_code == 404
    assert Lease.objects.get(pk=lease.pk).state == "requested"


def test_member_with_read_key_reads_but_cannot_write(owner, member):
    owner.client.post("/api/v1/leases/", REQUEST, format="json")
    assert len(member.client.get("/api/v1/leases/").json()["results"]) == 1
    refused = member.client.post("/api/v1/leases/", REQUEST, format="json")
    assert refused.status_code == 403
    assert "read-only" in refused.json()["detail"]
    assert Lease.objects.count() == 1


def test_tenant_cancels_its_own_request(owner):
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    cancelled = owner.client.post(f"/api/v1/leases/{lease_id}/cancel/")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"


def test_illegal_transition_is_a_clear_400(owner):
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    refused = owner.client.post(f"/api/v1/leases/{lease_id}/end/")
    assert refused.status_code == 400
    assert refused.json()["code"] == "lease.state"
    assert "cannot go from 'requested' to 'ending'" in refused.json()["detail"]


def test_bad_request_names_the_field(owner):
    response = owner.client.post(
        "/api/v1/leases/", {**REQUEST, "gpu_count": 0, "precision": "FP4"}, format="json"
    )
    assert response.status_code == 400
    assert set(response.json()["fields"]) == {"gpu_count", "precision"}
    assert not Lease.objects.exists()


def test_missing_wrong_revoked_and_expired_keys_are_refused(owner, db):
    anonymous = APIClient()
    assert anonymous.get("/api/v1/leases/").status_code in (401, 403)
    forged = APIClient()
    other_last = "A" if owner.token[-1] != "A" else "B"  # always a different secret
    forged.credentials(HTTP_AUTHORIZATION=f"Bearer {owner.token[:-1]}{other_last}")
    assert forged.get("/api/v1/leases/").status_code == 401
    key = ApiKey.objects.get(tenant=owner.tenant)
    key.expires = timezone.now() - timedelta(seconds=1)
    key.save()
    assert owner.client.get("/api/v1/leases/").status_code == 401
    key.expires, key.revoked = None, True
    key.save()
    assert owner.client.get("/api/v1/leases/").status_code == 401


def test_keys_are_stored_hashed(owner):
    key = ApiKey.objects.get(tenant=owner.tenant)
    secret = owner.token.split(".", 1)[1]
    assert secret not in key.digest and key.matches(secret)


def test_openapi_schema_and_docs_are_served_without_a_cdn(client, db):
    schema = client.get("/api/v1/schema/")
    assert schema.status_code == 200
    docs = client.get("/api/v1/docs/").content.decode()
    assert "cdn" not in docs.lower() and "/static/drf_spectacular_sidecar/" in docs
