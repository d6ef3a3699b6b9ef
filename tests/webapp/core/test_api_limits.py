"""Limits: request budgets per key, per address, per node and for failed keys (429 with
Retry-After), tenant quotas an operator sets, the request-body limit for JSON, and the
admin login lockout."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from webapp.attestation import actions as attestation_actions
from webapp.leasing.models import Lease
from webapp.tenancy.models import ApiKey, Tenant

REQUEST = {"gpu_count": 1, "precision": "BF16", "hours": "1"}


@pytest.fixture
def rates(settings):
    """Set some of the API's rates for one test (the rest keep their configured values)."""

    def set_rates(**rates: str) -> None:
        framework = dict(settings.REST_FRAMEWORK)
        framework["DEFAULT_THROTTLE_RATES"] = {**framework["DEFAULT_THROTTLE_RATES"], **rates}
        settings.REST_FRAMEWORK = framework

    return set_rates


def assert_throttled(response) -> None:
    assert response.status_code == 429, response.content
    assert int(response["Retry-After"]) > 0
    assert response.json()["code"] == "throttled"


def test_each_key_has_its_own_budget(owner, rates):
    rates(key="3/min")
    for _ in range(3):
        assert owner.client.get("/api/v1/leases/").status_code == 200
    assert_throttled(owner.client.get("/api/v1/leases/"))
    _, second = ApiKey.issue(owner.tenant, scope=ApiKey.READ)
    other_key = APIClient()
    other_key.credentials(HTTP_AUTHORIZATION=f"Bearer {second}")
    assert other_key.get("/api/v1/leases/").status_code == 200


def test_each_address_has_its_own_budget(owner, outsider, rates):
    rates(ip="4/min")
    for caller in (owner, outsider, owner, outsider):
        assert caller.client.get("/api/v1/leases/").status_code == 200
    assert_throttled(outsider.client.get("/api/v1/leases/"))
    elsewhere = owner.client.get("/api/v1/leases/", REMOTE_ADDR="192.0.2.7")
    assert elsewhere.status_code == 200


def test_guessing_keys_ends_in_429_even_for_a_good_key(owner, rates):
    rates(auth_failure="5/min")
    guesser = APIClient()
    for attempt in range(5):
        guesser.credentials(HTTP_AUTHORIZATION=f"Bearer wl_guess{attempt}.secret")
        assert guesser.get("/api/v1/leases/").status_code == 401
    assert_throttled(guesser.get("/api/v1/leases/"))
    assert_throttled(owner.client.get("/api/v1/leases/"))  # same address: refused before lookup
    assert owner.client.get("/api/v1/leases/", REMOTE_ADDR="192.0.2.8").status_code == 200


def test_a_good_key_does_not_spend_the_failed_authentication_budget(owner, rates):
    rates(auth_failure="2/min", key="100/min")
    for _ in range(5):  # each takes a hit before the lookup and gives it back after
        assert owner.client.get("/api/v1/leases/").status_code == 200
    guesser = APIClient()
    guesser.credentials(HTTP_AUTHORIZATION="Bearer wl_guessing.secret")
    for _ in range(2):
        assert guesser.get("/api/v1/leases/").status_code == 401
    refused = guesser.get("/api/v1/leases/")
    assert_throttled(refused)
    assert refused.json()["detail"].startswith("[auth.throttled] ")


def test_a_nodes_attestation_traffic_is_capped(fleet, rates):
    rates(node="3/min")
    agent = APIClient()
    token = attestation_actions.issue_node_credential(fleet.node, actor="t")
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    for _ in range(3):  # a node not yet enrolled: refused, but each call counts
        assert agent.post("/api/agent/challenge/").status_code == 400
    assert_throttled(agent.post("/api/agent/challenge/"))


def test_queued_requests_quota(owner):
    Tenant.objects.filter(pk=owner.tenant.pk).update(max_queued_requests=2)
    for _ in range(2):
        assert owner.client.post("/api/v1/leases/", REQUEST, format="json").status_code == 201
    refused = owner.client.post("/api/v1/leases/", REQUEST, format="json")
    assert refused.status_code == 400
    assert refused.json()["code"] == "lease.quota"
    assert "max_queued_requests" in refused.json()["detail"]
    assert Lease.objects.count() == 2
    first = Lease.objects.first()
    owner.client.post(f"/api/v1/leases/{first.pk}/cancel/")
    assert owner.client.post("/api/v1/leases/", REQUEST, format="json").status_code == 201


def test_gpu_quota_counts_held_and_requested_gpus(owner, outsider):
    Tenant.objects.filter(pk=owner.tenant.pk).update(max_gpus=4)
    three = owner.client.post("/api/v1/leases/", {**REQUEST, "gpu_count": 3}, format="json")
    assert three.status_code == 201
    refused = owner.client.post("/api/v1/leases/", {**REQUEST, "gpu_count": 2}, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "lease.quota"
    assert "quota of 4 (max_gpus)" in refused.json()["detail"]
    assert owner.client.post("/api/v1/leases/", REQUEST, format="json").status_code == 201
    # another tenant's quota is its own
    four = outsider.client.post("/api/v1/leases/", {**REQUEST, "gpu_count": 4}, format="json")
    assert four.status_code == 201


def test_priority_above_the_grant_is_refused(owner):
    refused = owner.client.post("/api/v1/leases/", {**REQUEST, "priority": 100}, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "lease.priority"
    Tenant.objects.filter(pk=owner.tenant.pk).update(max_priority=100)
    granted = owner.client.post("/api/v1/leases/", {**REQUEST, "priority": 100}, format="json")
    assert granted.status_code == 201 and granted.json()["priority"] == 100


def test_pages_hold_at_most_the_maximum(owner):
    Tenant.objects.filter(pk=owner.tenant.pk).update(max_queued_requests=300, max_gpus=300)
    tenant = Tenant.objects.get(pk=owner.tenant.pk)
    Lease.objects.bulk_create(
        Lease(tenant=tenant, gpu_count=1, precision="FP16", hours=1) for _ in range(205)
    )
    page = owner.client.get("/api/v1/leases/?limit=1000").json()
    assert page["count"] == 205 and len(page["results"]) == 200


def test_json_body_over_the_limit_is_a_413(owner, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    body = json.dumps({**REQUEST, "padding": "x" * 4096})
    refused = owner.client.post("/api/v1/leases/", body, content_type="application/json")
    assert refused.status_code == 413
    assert refused.json()["code"] == "body.too_large"
    assert not Lease.objects.exists()


def test_bodies_other_than_json_are_refused(owner):
    refused = owner.client.post("/api/v1/leases/", REQUEST)  # multipart form
    assert refused.status_code == 415
    assert refused.json()["code"] == "unsupported_media_type"


def test_admin_login_locks_out_after_repeated_failures(db, settings):
    get_user_model().objects.create_superuser("operator", "", "right-password-123")
    browser = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        failed = browser.post("/admin/login/", {"username": "operator", "password": "wrong"})
        assert failed.status_code == 200  # the form again, with its error
    last = browser.post("/admin/login/", {"username": "operator", "password": "wrong"})
    assert last.status_code == 429
    locked = browser.post(
        "/admin/login/", {"username": "operator", "password": "right-password-123"}
    )
    assert locked.status_code == 429
    assert "_auth_user_id" not in browser.session
    fresh = Client(REMOTE_ADDR="192.0.2.9")
    ok = fresh.post("/admin/login/", {"username": "operator", "password": "right-password-123"})
    assert ok.status_code == 302
